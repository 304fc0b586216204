// The chat: the conversation's record (oldest first), grouped by run, and the live events of its
// active runs (streaming text, tool calls and results, questions answered inline, queued requests).

import { ApiError, enc, laterEventId } from "./api.js";
import { announce, clear, copyButton, h } from "./dom.js";
import { formatTokens, prettyJson, shorten } from "./format.js";
import { has, t } from "./i18n.js";
import { COMPRESSION_TRIGGERS, ERROR_CODES, EVENTS, LEVELS, REASONS, RUN_STATUSES, STATUSES, VOCABULARY } from "./vocabulary.js";
import { showMarkdown } from "./markdown.js";

const RESULT_DISPLAY_CHARS = 4000;
const ACTIVE_STATUSES = new Set([RUN_STATUSES.QUEUED, RUN_STATUSES.RUNNING, RUN_STATUSES.WAITING_INPUT]);

export class Chat {
  /**
   * @param {object} options
   * @param {import("./api.js").Api} options.api
   * @param {HTMLElement} options.log  the chat log element (role=log)
   * @param {object} options.hooks  onCompression(data), onPressure(data), onActivity(), onRunSettled(runId)
   */
  constructor({ api, log, hooks }) {
    this.api = api;
    this.log = log;
    this.hooks = hooks;
    this.conversationId = null;
    this.controller = null;
    this.summaryRecords = []; // the service's compression list, kept for rebuilding the chat
    this.rebuiltFor = new Set(); // kept message ids the chat was rebuilt from the record for
    this.reset();
  }

  reset() {
    this.loading?.abort();
    this.loading = null;
    this.controller?.abort();
    this.controller = new AbortController();
    this.runs = new Map(); // runId -> {container, badge, cursor, following, chips}
    this.knownMessageIds = new Set();
    this.streaming = new Map(); // message id -> bubble text element
    this.tools = new Map(); // tool_call_id -> tool item parts
    this.interrupts = new Map(); // interrupt id -> form
    this.elements = new Map(); // LangChain message id -> the element showing it (summary dividers)
    this.streams = 0;
    this.active = new Set(); // runs this page follows that have not finished (the stop button's target)
    clear(this.log);
    this.log.removeAttribute("aria-busy");
  }

  close() {
    this.reset();
    this.conversationId = null;
    this.hooks.onActiveChange?.();
  }

  /** The oldest run still going (running first, then queued): what "stop" stops. */
  activeRunId() {
    return this.active.values().next().value ?? null;
  }

  /** Stop the reply being written: the service cancels the run; its partial text stays, marked stopped. */
  async stop() {
    const runId = this.activeRunId();
    if (!runId) return;
    await this.api.post(`/api/runs/${enc(runId)}/cancel`, {});
  }

  /**
   * Show a conversation from its record. Another conversation: the old one goes at once. The same
   * one (a rebuild, a language switch): it stays until the record has arrived, then is replaced in
   * one step, so the chat never shows empty in between.
   */
  async open(conversationId) {
    if (conversationId !== this.conversationId) this.reset();
    this.conversationId = conversationId;
    this.loading?.abort();
    const loading = new AbortController();
    this.loading = loading;
    const signal = loading.signal;
    const base = `/api/conversations/${enc(conversationId)}`;
    let messages;
    let runs;
    try {
      [messages, runs] = await Promise.all([
        this.loadAllMessages(base, signal),
        this.api.get(`${base}/runs?limit=50`, { signal }),
      ]);
    } catch (exc) {
      if (signal.aborted) return; // superseded by a newer open (another conversation, a language switch)
      throw exc;
    }
    if (signal.aborted || conversationId !== this.conversationId) return;
    this.reset();
    for (const message of messages) this.renderRecord(message);
    const ordered = [...runs.items].reverse(); // oldest first
    for (const run of ordered) {
      if (!ACTIVE_STATUSES.has(run.status)) continue;
      const entry = this.runEntry(run.id);
      if (run.status === RUN_STATUSES.QUEUED) {
        this.addUserBubble(entry, run.input);
        this.setQueued(entry, null, null);
      }
      if (run.status === RUN_STATUSES.WAITING_INPUT) {
        for (const pending of run.interrupts) this.renderInterrupt(run.id, pending.id, pending.value);
        continue; // its stream would only replay: the answer restarts it
      }
      this.follow(run.id, "0");
    }
    this.markSummaries(this.summaryRecords);
    this.scrollToEnd(true);
  }

  async loadAllMessages(base, signal) {
    const all = [];
    let after = 0;
    for (;;) {
      const page = await this.api.get(`${base}/messages?after=${after}&limit=500`, { signal });
      all.push(...page.items);
      if (page.next_after === null || page.next_after === undefined) return all;
      after = page.next_after;
    }
  }

  /**
   * Send a message and follow its run from the same request: the run starts now (`run_started`) or
   * waits in the conversation's queue (`run_queued`, with its place). Resolves with the run's id.
   */
  async send(text) {
    const conversationId = this.conversationId;
    this.log.querySelector(".suggestions")?.remove();
    const opened = await this.api.startRun(conversationId, text);
    if (conversationId !== this.conversationId) {
      opened.close(); // another conversation is shown now: its record has the run
      return opened.runId;
    }
    const entry = this.runEntry(opened.runId);
    this.addUserBubble(entry, text);
    this.scrollToEnd(true);
    this.follow(opened.runId, "0", opened);
    this.hooks.onActivity?.();
    return opened.runId;
  }

  // --- runs and their containers ---------------------------------------------------------------

  runEntry(runId) {
    const key = runId || "none";
    let entry = this.runs.get(key);
    if (!entry) {
      const container = h("div", { class: "run", dataset: { runId: key } });
      this.log.append(container);
      entry = { id: runId, container, badge: null, cursor: "0", following: false, chip: null };
      this.runs.set(key, entry);
    }
    return entry;
  }

  setQueued(entry, position, because) {
    const parts = [position ? t("queuedPosition", { position }) : t("queued")];
    if (because && has(`queuedBecause_${because}`)) parts.push(t(`queuedBecause_${because}`));
    const text = parts.join(" · ");
    if (!entry.badge) {
      entry.badge = h("p", { class: "badge badge-queued", role: "status" });
      const bubble = entry.container.querySelector(".msg-user");
      (bubble || entry.container).append(entry.badge);
    }
    entry.badge.textContent = text;
  }

  clearQueued(entry) {
    entry.badge?.remove();
    entry.badge = null;
  }

  /** Follow a run's events into its entry; `opened`: its stream, already open (`Api.startRun`). */
  async follow(runId, after, opened = null) {
    const entry = this.runEntry(runId);
    if (entry.following) {
      opened?.close();
      return;
    }
    const controller = this.controller; // a newer conversation replaces it (reset aborts this one)
    entry.following = true;
    entry.cursor = laterEventId(entry.cursor, after);
    this.streams += 1;
    this.active.add(runId);
    this.hooks.onActiveChange?.();
    // While text streams in, screen readers wait and read the finished answer once.
    this.log.setAttribute("aria-busy", "true");
    let waiting = false;
    try {
      entry.cursor = await this.api.followRun(runId, {
        after: entry.cursor,
        opened,
        signal: controller.signal,
        onEvent: (type, data, id) => {
          if (id) entry.cursor = laterEventId(entry.cursor, id);
          if (type === EVENTS.INTERRUPT) waiting = true;
          if (type === EVENTS.RUN_FINISHED) waiting = false;
          if (type === EVENTS.INTERRUPT || type === EVENTS.RUN_FINISHED) {
            this.active.delete(runId);
            this.hooks.onActiveChange?.();
          }
          this.onEvent(entry, type, data);
        },
      });
    } catch (exc) {
      if (!controller.signal.aborted) {
        this.addNote(entry, t("streamLost", { message: exc.message }), "error", true);
      }
    } finally {
      entry.following = false;
      if (controller === this.controller) {
        this.streams -= 1;
        this.active.delete(runId);
        this.hooks.onActiveChange?.();
        if (this.streams <= 0) this.log.removeAttribute("aria-busy");
      }
    }
    if (controller.signal.aborted) return;
    if (waiting) this.hooks.onActivity?.();
    else this.hooks.onRunSettled?.(runId);
  }

  onEvent(entry, type, data) {
    switch (type) {
      case EVENTS.RUN_QUEUED:
        this.setQueued(entry, data.position, data.reason);
        this.hooks.onActivity?.();
        break;
      case EVENTS.RUN_STARTED:
        this.clearQueued(entry);
        this.hooks.onActivity?.();
        break;
      case EVENTS.MESSAGE_DELTA:
        if (!data.namespace) this.onDelta(entry, data);
        break;
      case EVENTS.MESSAGE:
        this.onMessage(entry, data);
        break;
      case EVENTS.TOOL_CALL:
        if (this.tools.has(data.tool_call_id)) break;
        this.addToolCall(entry, data.tool_call_id, data.name, data.args, data.namespace);
        break;
      case EVENTS.TOOL_RESULT:
        this.setToolResult(entry, data.tool_call_id, data.name, {
          content: data.content,
          status: data.status,
          chars: data.content_chars,
          truncated: data.truncated,
        });
        break;
      case EVENTS.INTERRUPT:
        this.renderInterrupt(entry.id, data.interrupt_id, data.value);
        this.hooks.onActivity?.();
        break;
      case EVENTS.CONTEXT_COMPRESSION:
        this.onCompression(entry, data);
        this.hooks.onCompression?.(data);
        break;
      case EVENTS.CONTEXT_PRESSURE:
        this.hooks.onPressure?.(data);
        break;
      case EVENTS.USAGE:
        this.hooks.onUsage?.(data);
        break;
      case EVENTS.ERROR:
        this.addNote(entry, t("runError", { message: data.message ?? "" }), "error", true);
        break;
      case EVENTS.RUN_FINISHED:
        this.clearQueued(entry);
        if (data.status === RUN_STATUSES.FAILED && data.error) {
          // The `error` event (if any) already said it; only add when nothing did.
          if (!entry.container.querySelector(".note-error")) {
            this.addNote(entry, t("runFailed", { error: data.error }), "error", true);
          }
        } else if (data.status === RUN_STATUSES.CANCELLED) {
          this.markStopped(entry);
        }
        break;
      default:
        break;
    }
    this.scrollToEnd(false);
  }

  // --- rendering ---------------------------------------------------------------------------------

  renderRecord(message) {
    const entry = this.runEntry(message.run_id);
    const data = message.message?.data || {};
    if (data.id) this.knownMessageIds.add(data.id);
    let shown = null;
    if (message.role === "user" || message.role === "human") {
      if (isSummaryText(message.content)) return;
      shown = this.addUserBubble(entry, message.content);
    } else if (message.role === "assistant" || message.role === "ai") {
      if (message.content && !isSummaryText(message.content)) {
        const body = this.addAssistantBubble(entry, message.content, message.html ?? null);
        if (data.response_metadata?.[VOCABULARY.stopped_key]) markBubbleStopped(body);
        shown = body.parentElement;
      }
      for (const call of data.tool_calls || []) {
        const item = this.addToolCall(entry, call.id, call.name, call.args);
        shown ??= item.details;
      }
    } else if (message.role === "tool") {
      const content = message.content ?? "";
      const item = this.setToolResult(entry, data.tool_call_id, data.name, {
        content: content.slice(0, RESULT_DISPLAY_CHARS),
        status: data.status,
        chars: content.length,
        truncated: content.length > RESULT_DISPLAY_CHARS,
      });
      shown = item?.details ?? null;
    }
    if (data.id && shown) this.elements.set(data.id, shown);
  }

  addUserBubble(entry, text) {
    const body = h("div", { class: "msg-text" }, text);
    const bubble = h(
      "article",
      { class: "msg msg-user" },
      h("h3", { class: "msg-who" }, t("you")),
      body,
      messageActions(() => text),
    );
    // The user's message opens its run's block.
    entry.container.prepend(bubble);
    clampLong(body);
    return bubble;
  }

  /** A reply: Markdown as the service rendered it (`html`), or plain text (streaming, or not rendered). */
  addAssistantBubble(entry, text, html = null) {
    const body = h("div", { class: "msg-text" });
    showMarkdown(body, text, html);
    entry.container.append(
      h(
        "article",
        { class: "msg msg-assistant" },
        h("h3", { class: "msg-who" }, t("assistant")),
        body,
        messageActions(() => body.dataset.raw ?? body.textContent),
      ),
    );
    clampLong(body);
    return body;
  }

  /** Ask the service to render a finished reply's Markdown; the plain text stays if that fails. */
  async renderFinished(body, text) {
    if (text.length > VOCABULARY.max_render_chars) return;
    try {
      const answer = await this.api.post("/api/render", { text });
      if (!body.isConnected) return;
      showMarkdown(body, text, answer.html);
      clampLong(body);
    } catch {
      // plain text is still the whole answer
    }
  }

  /** A cancelled run: the partial reply stays where it is, marked as stopped. */
  markStopped(entry) {
    const partial = [...entry.container.querySelectorAll(".msg-assistant.streaming")];
    for (const bubble of partial) {
      const body = bubble.querySelector(".msg-text");
      markBubbleStopped(body);
      for (const [id, streaming] of this.streaming) if (streaming === body) this.streaming.delete(id);
    }
    // The service keeps the partial reply (its `message` event says `stopped`): no extra note then.
    if (!partial.length && !entry.container.querySelector(".msg-assistant.stopped")) {
      this.addNote(entry, t("runCancelled"), "muted", false);
    }
  }

  onDelta(entry, data) {
    const id = data.message_id || "anonymous";
    if (this.knownMessageIds.has(id)) return;
    let body = this.streaming.get(id);
    if (!body) {
      body = this.addAssistantBubble(entry, "");
      body.parentElement.classList.add("streaming");
      this.streaming.set(id, body);
    }
    body.textContent += data.delta ?? "";
    body.dataset.raw = body.textContent;
  }

  onMessage(entry, data) {
    if (data.namespace) {
      // A sub-agent's inner message: shown compactly, never as the agent's answer.
      if (data.content) this.addNote(entry, `${t("subagent", { name: data.namespace.join("/") })}: ${shorten(data.content, 160)}`, "muted", false);
      return;
    }
    const id = data.message_id;
    if (id && this.knownMessageIds.has(id) && !this.streaming.has(id)) return;
    if (id) this.knownMessageIds.add(id);
    const body = this.streaming.get(id);
    this.streaming.delete(id);
    const text = data.content || "";
    const visible = text && !isSummaryText(text);
    if (body) {
      body.parentElement.classList.remove("streaming");
      if (visible) {
        showMarkdown(body, text, null);
        clampLong(body);
        this.renderFinished(body, text);
        if (data.stopped) markBubbleStopped(body);
      } else body.parentElement.remove();
    } else if (visible) {
      const shown = this.addAssistantBubble(entry, text);
      this.renderFinished(shown, text);
      if (data.stopped) markBubbleStopped(shown);
    }
  }

  addToolCall(entry, callId, name, args, namespace) {
    if (callId && this.tools.has(callId)) return this.tools.get(callId);
    const isQuestion = name === "ask_user";
    const state = h("span", { class: "tool-state" }, isQuestion ? t("awaitingAnswer") : t("toolPending"));
    const brief = isQuestion ? args?.question ?? "" : shorten(compactArgs(args), 80);
    const summary = h(
      "summary",
      {},
      h("span", { class: "tool-icon", "aria-hidden": "true" }, isQuestion ? "?" : "⚙"),
      h("span", { class: "tool-name" }, isQuestion ? t("askUser") : name || "?"),
      namespace ? h("span", { class: "tool-ns" }, t("subagent", { name: namespace.join("/") })) : null,
      h("span", { class: "tool-brief" }, brief),
      state,
    );
    const result = h("div", { class: "tool-result", hidden: true });
    const details = h(
      "details",
      { class: `tool${isQuestion ? " tool-question" : ""}`, dataset: { callId: callId || "" } },
      summary,
      h("div", { class: "tool-body" }, h("h4", {}, t("toolArgs")), h("pre", { class: "tool-args" }, prettyJson(args ?? {})), result),
    );
    entry.container.append(details);
    const item = { details, state, result, name, isQuestion, done: false };
    if (callId) this.tools.set(callId, item);
    return item;
  }

  setToolResult(entry, callId, name, { content, status, chars, truncated }) {
    let item = callId ? this.tools.get(callId) : null;
    if (!item) item = this.addToolCall(entry, callId, name, undefined);
    if (item.done) return item;
    item.done = true;
    const failed = status === "error";
    item.details.classList.toggle("tool-failed", failed);
    const total = Number(chars ?? (content || "").length);
    item.state.textContent = failed
      ? t("toolError")
      : item.isQuestion
        ? t("yourAnswer", { answer: shorten(content, 60) })
        : `✓ ${t("resultChars", { chars: total.toLocaleString() })}`;
    clear(item.result);
    item.result.append(h("h4", {}, t("toolResult")), h("pre", { class: "tool-output" }, content ?? ""));
    if (truncated) {
      item.result.append(h("p", { class: "muted small" }, t("truncatedPreview", { shown: (content || "").length, total })));
    }
    item.result.hidden = false;
    return item;
  }

  renderInterrupt(runId, interruptId, value) {
    const key = interruptId || `${runId}:pending`;
    if (this.interrupts.has(key)) return;
    const entry = this.runEntry(runId);
    const question = typeof value === "object" && value !== null ? value.question ?? prettyJson(value) : String(value ?? "");
    const inputId = `answer-${cssId(key)}`;
    const questionId = `question-${cssId(key)}`;
    const input = h("textarea", { id: inputId, rows: "2", required: true, "aria-describedby": questionId });
    const error = h("p", { class: "error", role: "alert" });
    const button = h("button", { type: "submit", class: "primary" }, t("answerButton"));
    const form = h(
      "form",
      { class: "interrupt", "aria-labelledby": questionId, dataset: { interruptId: interruptId || "" } },
      h("p", { id: questionId, class: "interrupt-question" }, h("strong", {}, `${t("askUser")}：`), question),
      h("label", { for: inputId }, t("answerLabel")),
      h("div", { class: "interrupt-row" }, input, button),
      error,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const answer = input.value.trim();
      if (!answer) {
        input.focus();
        return;
      }
      button.disabled = true;
      error.textContent = "";
      try {
        const body = interruptId ? { value: answer, interrupt_id: interruptId } : { value: answer };
        await this.api.post(`/api/runs/${enc(runId)}/resume`, body);
        form.replaceWith(h("p", { class: "note note-answered" }, t("answered", { answer })));
        this.follow(runId, entry.cursor);
        this.hooks.onActivity?.();
      } catch (exc) {
        error.textContent = t("requestFailed", { message: describeError(exc) });
        button.disabled = false;
      }
    });
    input.addEventListener("keydown", (event) => submitOnEnter(event, form));
    entry.container.append(form);
    this.interrupts.set(key, form);
    announce(`${t("askUser")}：${question}`);
    const active = document.activeElement;
    if (!active || active === document.body || active.id === "composer-input") input.focus();
  }

  /**
   * A live `context_compression` event: "compressing…" while it runs, then what happened. An L1 pass
   * that wrote no new file (the middleware repeats its view on every call) leaves nothing behind.
   */
  onCompression(entry, data) {
    const status = data.status;
    if (status === STATUSES.STARTED || !entry.chip) {
      entry.chip = h("p", { class: "note note-compression", role: "status" });
      entry.container.append(entry.chip);
    }
    const chip = entry.chip;
    if (status !== STATUSES.STARTED) entry.chip = null;
    if (isQuietPass(data)) {
      chip.remove();
      return;
    }
    chip.className = `note note-compression compression-${status}`;
    chip.dataset.level = data.level || "";
    chip.textContent = describeCompressionEvent(data);
  }

  /**
   * Mark in the chat where earlier messages were summarised: a divider before the first message each
   * summary kept (`kept_from_message_id` of the service's compression list).
   */
  markSummaries(records) {
    this.summaryRecords = records;
    // Messages that streamed in are not linked to their record ids: rebuild the chat from the
    // record once for a summary whose first kept message is not found (never twice for one id).
    const missing = records
      .map((record) => record.kept_from_message_id)
      .filter((id) => id && !this.elements.has(id) && !this.rebuiltFor.has(id));
    if (missing.length && this.streams <= 0 && this.conversationId) {
      for (const id of missing) this.rebuiltFor.add(id);
      this.open(this.conversationId).catch(() => {});
      return;
    }
    for (const old of this.log.querySelectorAll(".summary-divider")) old.remove();
    for (const record of records) {
      const element = record.kept_from_message_id && this.elements.get(record.kept_from_message_id);
      if (!element?.isConnected) continue;
      const run = element.parentElement;
      // A user's message opens its run's block: the divider goes before the block.
      const before = element.classList.contains("msg-user") && run?.firstElementChild === element ? run : element;
      before.before(
        h(
          "div",
          { class: "summary-divider", role: "separator", dataset: { summary: String(record.summary_number ?? "") } },
          h("span", {}, t(record.trigger === COMPRESSION_TRIGGERS.MANUAL ? "dividerManual" : "dividerAuto", { n: record.summary_number ?? "?" })),
        ),
      );
    }
  }

  addNote(entry, text, kind, alert) {
    const note = h("p", { class: `note note-${kind}`, role: alert ? "alert" : undefined }, text);
    entry.container.append(note);
    return note;
  }

  scrollToEnd(force) {
    const log = this.log;
    const nearEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 120;
    if (force || nearEnd) log.scrollTop = log.scrollHeight;
  }
}

/** Long messages (echoed retrieval results, pasted text) are folded to a few lines, with a button to unfold. */
const CLAMP_CHARS = 1200;
let clampCounter = 0;

/** Copy (and, for a long message, unfold) under a message. */
function messageActions(textOf) {
  return h("div", { class: "msg-actions" }, copyButton(textOf, { label: t("copyMessage"), done: t("copied") }));
}

function clampLong(body) {
  const bubble = body.parentElement;
  if (!bubble || body.textContent.length <= CLAMP_CHARS || bubble.querySelector(".clamp-toggle")) return;
  clampCounter += 1;
  body.id ||= `msg-text-${clampCounter}`;
  body.classList.add("clamped");
  const toggle = h("button", { type: "button", class: "link clamp-toggle", "aria-expanded": "false", "aria-controls": body.id }, t("expand"));
  toggle.addEventListener("click", () => {
    const expanded = body.classList.toggle("clamped") === false;
    toggle.setAttribute("aria-expanded", String(expanded));
    toggle.textContent = expanded ? t("collapse") : t("expand");
  });
  (bubble.querySelector(".msg-actions") || bubble).prepend(toggle);
}

/** S21: a summary message (it starts with the service's marker) is never shown as a chat message. */
export function isSummaryText(text) {
  return typeof text === "string" && text.trimStart().startsWith(VOCABULARY.summary_marker);
}

/** An L1 pass that wrote no new file: the same view as the previous call's, nothing to tell. */
export function isQuietPass(data) {
  return data.status === STATUSES.COMPLETED && data.level === LEVELS.L1 && !(data.files_written || []).length;
}

/**
 * Words for a compression — a live event or an item of the service's list — by what happened:
 * running (the level is not known until it ends: L1 may be followed by a summary), tool results
 * written to files (L1), older messages summarised (L2, automatic or manual), or failed.
 */
export function describeCompressionEvent(data) {
  const overflow = data.reason === REASONS.CONTEXT_OVERFLOW ? t("evOverflow") : "";
  if (data.status === STATUSES.STARTED) return t("ev_running");
  const level = data.level && has(`evLevel_${data.level}`) ? t(`evLevel_${data.level}`) : data.level || "?";
  if (data.status === STATUSES.FAILED) return t("ev_failed", { level }) + overflow;
  const params = {
    before: formatTokens(data.tokens_before),
    after: formatTokens(data.tokens_after),
    saved: formatTokens(data.tokens_saved),
    files: (data.files_written || []).length,
    n: data.summary_number ?? "",
  };
  if (data.level === LEVELS.L1) return t("ev_l1", params) + overflow;
  const key = data.trigger === COMPRESSION_TRIGGERS.MANUAL ? "ev_l2_manual" : data.summary_number ? "ev_l2_numbered" : "ev_l2";
  return t(key, params) + overflow;
}

/** Words for a failed request, from its error code and fields (the service's message is English). */
export function describeError(exc) {
  if (!(exc instanceof ApiError)) return exc?.message || String(exc);
  if (exc.code === ERROR_CODES.THREAD_BUSY) {
    const reason = exc.error.reason;
    return reason && has(`busy_${reason}`) ? t(`busy_${reason}`) : t("busyUnknown");
  }
  if (exc.code === ERROR_CODES.MESSAGE_TOO_LARGE && exc.details) {
    return t("err_message_too_large", {
      tokens: formatTokens(exc.details.estimated_tokens),
      max: formatTokens(exc.details.max_message_tokens),
    });
  }
  if (has(`err_${exc.code}`)) return t(`err_${exc.code}`);
  return exc.message || exc.code;
}

/** Enter sends, Shift+Enter is a new line; never while an IME (Chinese input) is composing. */
export function submitOnEnter(event, form) {
  if (event.key !== "Enter" || event.shiftKey || event.isComposing || event.keyCode === 229) return;
  event.preventDefault();
  form.requestSubmit();
}

function compactArgs(args) {
  if (args === undefined) return "";
  try {
    return JSON.stringify(args);
  } catch {
    return String(args);
  }
}

function cssId(value) {
  return String(value).replace(/[^A-Za-z0-9_-]/g, "_");
}

/** A reply the user stopped: marked "stopped · incomplete" (once), live or after a reload. */
function markBubbleStopped(body) {
  const bubble = body.parentElement;
  bubble.classList.remove("streaming");
  if (bubble.classList.contains("stopped")) return;
  bubble.classList.add("stopped");
  bubble.insertBefore(h("p", { class: "badge badge-stopped" }, t("replyStopped")), body.nextSibling);
}
