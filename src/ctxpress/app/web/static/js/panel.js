// The status panel: pressure ring and breakdown (S22), the compress button (S17–S19), live
// compression events (S20/S21), the current summary, workdir files and usage (S26).

import { ApiError, enc } from "./api.js";
import { describeCompressionEvent, describeError } from "./chat.js";
import { $, clear, h } from "./dom.js";
import { formatBytes, formatPercent, formatTime, formatTokens, prettyJson, pressureLevel } from "./format.js";
import { has, language, t } from "./i18n.js";
import { CAPABILITIES, ERROR_CODES, STATUSES, USAGE_CATEGORIES, VOCABULARY, WORKDIR_DIRS } from "./vocabulary.js";

const RING_CIRCUMFERENCE = 2 * Math.PI * 50;
const MAX_EVENTS = 50;
/** Workdir files are grouped by the folder the middleware wrote them to (offloaded results, history). */
const FILE_GROUPS = [WORKDIR_DIRS.LARGE_TOOL_RESULTS, WORKDIR_DIRS.CONVERSATION_HISTORY];

/** The answer of `GET …/context` in the panel's shape (`null` figures where the service gave none). */
export function normalizeContext(raw) {
  if (!raw || typeof raw !== "object") return null;
  const breakdown = raw.breakdown || {};
  return {
    threshold: num(raw.threshold_tokens),
    estimate: num(raw.estimated_tokens),
    ratio: num(raw.ratio),
    // Before L1 (the same figure unless L1 would compact the next request).
    rawEstimate: num(raw.raw_estimated_tokens),
    rawRatio: num(raw.raw_ratio),
    compacted: raw.compacted === true,
    messageCount: num(raw.message_count),
    // The service decides (S22: ratio ≥ suggest_ratio, and only where the compress button exists).
    suggest: raw.suggest_compress === true,
    breakdown: {
      system: num(breakdown.system),
      tools: num(breakdown.tools),
      summary: num(breakdown.summary),
      messages: num(breakdown.messages),
    },
    stale: Boolean(raw.stale),
    capability: typeof raw.context_compression === "boolean" ? raw.context_compression : null,
    summary: raw.summary && typeof raw.summary === "object" ? raw.summary : null,
    lastRequest: raw.last_request && typeof raw.last_request === "object" ? raw.last_request : null,
  };
}

function num(value) {
  const n = Number(value);
  return value === null || value === undefined || value === "" || !Number.isFinite(n) ? null : n;
}

export class StatusPanel {
  constructor({ api, onCompressions }) {
    this.api = api;
    this.onCompressions = onCompressions;
    this.conversationId = null;
    this.agent = null;
    this.context = null;
    this.refreshTimer = null;
    this.generation = 0;
    this.el = {
      empty: $("#panel-empty"),
      body: $("#panel-body"),
      ring: $("#pressure-ring"),
      ringValue: $("#ring-value"),
      percent: $("#ring-percent"),
      level: $("#ring-level"),
      tokens: $("#pressure-tokens"),
      stale: $("#pressure-stale"),
      bar: $("#breakdown-bar"),
      breakdown: $("#breakdown"),
      compressSection: $("#compress-section"),
      compressButton: $("#compress-button"),
      hint: $("#compress-hint"),
      result: $("#compress-result"),
      busy: $("#busy-state"),
      events: $("#compression-events"),
      eventsEmpty: $("#events-empty"),
      summary: $("#summary-box"),
      files: $("#files-box"),
      usage: $("#usage-box"),
      tabChip: $("#tab-pressure"),
    };
    this.el.compressButton.addEventListener("click", () => this.compress());
  }

  open(conversation, agent) {
    this.generation += 1;
    this.conversationId = conversation.id;
    this.agent = agent;
    this.context = null;
    clear(this.el.events);
    this.el.eventsEmpty.hidden = false;
    this.clearResult();
    this.el.empty.hidden = true;
    this.el.body.hidden = false;
    this.renderPressure(null);
    this.renderLastRequest(null);
    this.renderCapability();
    return this.refresh();
  }

  close() {
    this.generation += 1;
    this.conversationId = null;
    this.el.body.hidden = true;
    this.el.empty.hidden = false;
    this.el.tabChip.hidden = true;
  }

  get base() {
    return `/api/conversations/${enc(this.conversationId)}`;
  }

  /** Re-read everything the panel shows (after a run, a compression, or on opening). */
  async refresh() {
    if (!this.conversationId) return;
    const generation = this.generation;
    const [context, state, files, usage, status, compressions] = await Promise.allSettled([
      this.api.get(`${this.base}/context`),
      this.api.get(`${this.base}/state`),
      this.api.get(`${this.base}/files`),
      this.api.get(`${this.base}/usage`),
      this.api.get(`${this.base}/status`),
      this.api.get(`${this.base}/compressions`),
    ]);
    if (generation !== this.generation) return;
    if (context.status === "fulfilled") {
      this.context = normalizeContext(context.value);
      this.renderPressure(this.context);
      this.renderLastRequest(this.context?.lastRequest);
      this.renderCapability();
    }
    if (state.status === "fulfilled") this.renderSummary(state.value);
    if (files.status === "fulfilled") this.renderFiles(files.value.files || []);
    if (usage.status === "fulfilled") this.renderUsage(usage.value);
    if (status.status === "fulfilled") this.renderBusy(status.value);
    if (compressions.status === "fulfilled") {
      const items = compressions.value.items || [];
      this.renderCompressions(items);
      this.onCompressions?.(items);
    }
  }

  /** Coalesces bursts of activity (events of a running run) into one refresh. */
  scheduleRefresh(delay = 400) {
    window.clearTimeout(this.refreshTimer);
    this.refreshTimer = window.setTimeout(() => this.refresh().catch(() => {}), delay);
  }

  agentThreshold() {
    return this.agent?.compression?.threshold_tokens ?? null;
  }

  hasCapability() {
    const fromAgent =
      Array.isArray(this.agent?.capabilities) && this.agent.capabilities.includes(CAPABILITIES.CONTEXT_COMPRESSION);
    // The agent list says what the agent declares (S17); the context answer may say it too.
    return this.context?.capability === false ? false : fromAgent;
  }

  renderCapability() {
    this.el.compressSection.hidden = !this.hasCapability();
    // Nothing to summarise in an empty conversation: the button says so instead of failing.
    const button = this.el.compressButton;
    const empty = this.context?.messageCount === 0;
    if (!button.classList.contains("is-busy")) {
      if (empty) button.setAttribute("aria-disabled", "true");
      else button.removeAttribute("aria-disabled");
    }
    button.title = empty ? t("compressEmpty") : "";
    this.renderHint();
  }

  /**
   * A `context_pressure` event: the size of the request the main model just received (after any
   * compaction). The ring shows the *next* input (S22), re-read from the service; this figure is
   * shown beside it as the last request.
   */
  applyPressureEvent(data) {
    if (data.namespace) return; // a sub-agent's model call
    const total = num(data.total);
    const threshold = num(data.threshold);
    if (total === null) return;
    this.renderLastRequest({ total_tokens: total, threshold_tokens: threshold, ratio: num(data.ratio) });
    this.scheduleRefresh(250);
  }

  renderLastRequest(last) {
    const el = $("#pressure-last");
    if (!last || num(last.total_tokens) === null) {
      el.hidden = true;
      el.textContent = "";
      return;
    }
    const ratio = num(last.ratio) ?? (last.threshold_tokens ? last.total_tokens / last.threshold_tokens : null);
    el.hidden = false;
    el.textContent = t("lastRequest", { used: formatTokens(last.total_tokens), percent: formatPercent(ratio) });
  }

  renderPressure(context) {
    const el = this.el;
    const ratio = context?.ratio ?? null;
    const known = ratio !== null && context?.estimate !== null;
    const level = known ? pressureLevel(ratio) : "ok";
    el.ring.classList.remove("level-ok", "level-warn", "level-high");
    el.ring.classList.add(`level-${level}`);
    el.ring.classList.toggle("is-stale", Boolean(context?.stale));
    el.ring.classList.toggle("is-unknown", !known);
    const fraction = known ? Math.min(1, Math.max(0, ratio)) : 0;
    el.ringValue.setAttribute("stroke-dasharray", `${(fraction * RING_CIRCUMFERENCE).toFixed(2)} ${RING_CIRCUMFERENCE.toFixed(2)}`);
    const percent = known ? formatPercent(ratio) : "–";
    el.percent.textContent = known ? ringPercent(ratio) : "–";
    el.percent.dataset.long = String(el.percent.textContent.length > 4);
    const levelKey = ratio >= 1 ? "levelOver" : { ok: "levelOk", warn: "levelWarn", high: "levelHigh" }[level];
    el.level.textContent = known ? t(levelKey) : "";
    el.ring.dataset.level = known ? level : "unknown";
    el.ring.dataset.percent = known ? String(Math.round(ratio * 100)) : "";
    el.ring.setAttribute("aria-valuenow", known ? String(Math.min(100, Math.round(ratio * 100))) : "0");
    const used = formatTokens(context?.estimate);
    const threshold = formatTokens(context?.threshold ?? this.agentThreshold());
    el.ring.setAttribute(
      "aria-valuetext",
      known ? t("pressureValueText", { percent, used, threshold }) : t("noEstimate"),
    );
    el.tokens.textContent = known ? t("tokensOf", { used, threshold }) : t("noEstimate");
    const rawLine = $("#pressure-raw");
    rawLine.hidden = !(known && context.compacted);
    rawLine.textContent = rawLine.hidden
      ? ""
      : t("rawEstimate", { raw: formatTokens(context.rawEstimate), percent: formatPercent(context.rawRatio) });
    el.stale.hidden = !context?.stale;
    el.stale.textContent = context?.stale ? t("stale") : "";
    const parts = context?.breakdown || {};
    const total = context?.estimate || 0;
    const segments = el.bar.querySelectorAll(".seg");
    ["system", "tools", "summary", "messages"].forEach((name, index) => {
      const value = parts[name];
      el.breakdown.querySelector(`[data-part="${name}"]`).textContent = value === null || value === undefined ? "–" : formatTokens(value);
      const width = total > 0 && value ? (100 * value) / Math.max(total, context?.threshold || 0) : 0;
      segments[index].style.width = `${width.toFixed(2)}%`;
    });
    el.tabChip.hidden = !known;
    el.tabChip.textContent = known ? percent : "";
    el.tabChip.dataset.level = level;
    this.renderHint();
  }

  renderHint() {
    const context = this.context;
    const show = Boolean(this.hasCapability() && context && context.ratio !== null && context.suggest);
    this.el.hint.hidden = !show;
    this.el.hint.textContent = show ? t("compressHint", { percent: formatPercent(context.ratio) }) : "";
    this.el.compressButton.classList.toggle("suggested", show);
  }

  renderBusy(status) {
    this.busy = status;
    if (!status?.busy) {
      this.el.busy.textContent = t("statusIdle");
      // A "busy, try later" answer no longer holds once the conversation is idle.
      if (this.el.result.dataset.busy === "true") this.clearResult();
      return;
    }
    const reason = has(`status_${status.reason}`) ? t(`status_${status.reason}`) : status.reason;
    this.el.busy.textContent = t("statusBusy", { reason, queued: status.queued_runs ?? 0 });
  }

  // --- manual compression --------------------------------------------------------------------

  async compress() {
    const button = this.el.compressButton;
    const result = this.el.result;
    if (this.context?.messageCount === 0) {
      this.clearResult();
      result.classList.add("is-info");
      result.textContent = t("compressEmpty");
      return;
    }
    if (button.getAttribute("aria-disabled") === "true") return;
    const generation = this.generation;
    button.setAttribute("aria-disabled", "true");
    button.classList.add("is-busy");
    this.clearResult();
    result.textContent = t("compressing");
    try {
      const answer = await this.api.post(`${this.base}/compress`, {});
      if (generation !== this.generation) return;
      if (answer.compressed) {
        result.classList.add("is-ok");
        result.textContent = t("compressDone", {
          before: formatTokens(answer.tokens_before),
          after: formatTokens(answer.tokens_after),
          cutoff: answer.cutoff_index ?? "?",
        });
      } else {
        result.classList.add("is-info");
        result.textContent = describeNothingCompressed(answer);
      }
      // S19: after success the page re-reads the agent state (summary), the pressure, files, usage.
      await this.refresh();
    } catch (exc) {
      if (generation !== this.generation) return;
      result.classList.add("is-error");
      result.textContent = describeCompressError(exc);
      if (exc instanceof ApiError && exc.code === ERROR_CODES.THREAD_BUSY) result.dataset.busy = "true";
      if (exc instanceof ApiError && exc.code === ERROR_CODES.THREAD_BUSY) this.refresh().catch(() => {});
    } finally {
      // The result line is a status region: screen readers read it without a separate announcement.
      button.removeAttribute("aria-disabled");
      button.classList.remove("is-busy");
      this.renderCapability();
    }
  }

  clearResult() {
    this.el.result.textContent = "";
    this.el.result.className = "compress-result";
    delete this.el.result.dataset.busy;
  }

  // --- compression events (the service's record) ----------------------------------------------

  /** A live event: the list is re-read from the service once the compression has ended. */
  addCompressionEvent(data) {
    if (data.status !== STATUSES.STARTED) this.scheduleRefresh(200);
  }

  /** Every compression of the conversation, newest first, from `GET …/compressions`. */
  renderCompressions(items) {
    const list = clear(this.el.events);
    this.el.eventsEmpty.hidden = items.length > 0;
    for (const item of [...items].reverse().slice(0, MAX_EVENTS)) {
      const when = new Date(item.created_at);
      list.append(
        h(
          "li",
          {
            class: `event event-${item.status}`,
            dataset: { status: item.status, level: item.level, trigger: item.trigger },
            title: item.error || undefined,
          },
          h("time", { datetime: when.toISOString() }, formatTime(when, language())),
          " ",
          describeCompressionEvent(item),
        ),
      );
    }
  }

  // --- summary, files, usage -----------------------------------------------------------------

  renderSummary(state) {
    const box = clear(this.el.summary);
    const event = state?.values?.[VOCABULARY.summary_event_key];
    const fromContext = this.context?.summary;
    if (!event && !fromContext) {
      box.append(h("p", { class: "muted" }, t("noSummary")));
      return;
    }
    const cutoff = event?.cutoff_index ?? fromContext?.cutoff_index;
    const filePath = event ? event.file_path : fromContext?.file_path;
    const count = event?.summary_count;
    box.append(
      h("p", { class: "small" }, count ? t("summaryMeta", { cutoff, count }) : t("summaryMetaNoCount", { cutoff })),
    );
    const text = summaryBody(messageText(event?.summary_message) ?? "");
    if (text) box.append(h("blockquote", { class: "summary-text", tabindex: "0", id: "summary-text" }, text));
    if (filePath) {
      box.append(
        h(
          "button",
          { type: "button", class: "link", dataset: { path: filePath }, onclick: () => this.openFile(filePath) },
          `${t("openHistory")} · ${filePath}`,
        ),
      );
    } else {
      box.append(h("p", { class: "warning small" }, t("historyMissing")));
    }
  }

  renderFiles(files) {
    const box = clear(this.el.files);
    if (!files.length) {
      box.append(h("p", { class: "muted" }, t("noFiles")));
      return;
    }
    const groups = new Map([...FILE_GROUPS, "other"].map((dir) => [dir, []]));
    for (const file of files) {
      const group = FILE_GROUPS.find((dir) => file.path.startsWith(`${dir}/`)) || "other";
      groups.get(group).push(file);
    }
    for (const [dir, items] of groups) {
      if (!items.length) continue;
      const name = dir.split("/").pop(); // the words for the group: `group_large_tool_results`, …
      const headingId = `files-${name}`;
      box.append(h("h4", { id: headingId }, `${t(`group_${name}`)} (${items.length})`));
      box.append(
        h(
          "ul",
          { class: "file-list", "aria-labelledby": headingId },
          items.map((file) =>
            h(
              "li",
              {},
              h(
                "button",
                { type: "button", class: "link file-open", dataset: { path: file.path }, onclick: () => this.openFile(file.path) },
                file.path.split("/").pop(),
              ),
              h("span", { class: "muted small" }, ` ${formatBytes(file.size)}`),
            ),
          ),
        ),
      );
    }
  }

  renderUsage(usage) {
    const box = clear(this.el.usage);
    const lines = usage?.lines || [];
    const main = lines.filter((line) => line.category === USAGE_CATEGORIES.MAIN);
    const summary = lines.filter((line) => line.category === USAGE_CATEGORIES.SUMMARY);
    if (!lines.length) box.append(h("p", { class: "muted" }, t("noUsage")));
    const list = h("ul", { class: "usage-list" });
    for (const line of main) list.append(usageItem(t("usageMain"), line));
    if (summary.length) for (const line of summary) list.append(usageItem(t("usageSummary"), line));
    else if (lines.length) list.append(h("li", { class: "usage-line muted", dataset: { category: USAGE_CATEGORIES.SUMMARY } }, t("usageSummaryNone")));
    if (list.children.length) box.append(list);
  }

  async openFile(path) {
    await openViewer(path, () => this.api.file(this.conversationId, path));
  }
}

function usageItem(label, line) {
  const name = `${label} · ${line.model} (${line.provider})`;
  const item = h("li", { class: "usage-line", dataset: { category: line.category, available: String(line.usage_available) } }, h("strong", {}, name));
  if (!line.usage_available) {
    const reason = line.unavailable_reason?.startsWith("provider excluded") ? t("usageReason_excluded") : line.unavailable_reason;
    item.append(h("span", { class: "usage-unavailable" }, `${t("usageUnavailable")}${reason ? ` — ${reason}` : ""}`));
    return item;
  }
  let text = t("usageLine", {
    calls: line.calls,
    input: formatTokens(line.input_tokens),
    output: formatTokens(line.output_tokens),
    total: formatTokens(line.total_tokens),
  });
  if (line.cache_read_tokens) text += ` · ${t("usageCached", { cached: formatTokens(line.cache_read_tokens) })}`;
  item.append(h("span", {}, text));
  return item;
}

function messageText(message) {
  if (!message) return null;
  const content = message.data?.content ?? message.content;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part === "string" ? part : part?.text || "")).join("");
  return null;
}

/**
 * The summary as people read it: without the marker paragraph the model reads first, and without any
 * line that still carries the marker (an earlier summary quoted by a later one).
 */
export function summaryBody(text) {
  const marker = VOCABULARY.summary_marker;
  let body = text;
  if (body.startsWith(marker)) {
    const split = body.indexOf("\n\n");
    body = split >= 0 ? body.slice(split + 2) : "";
  }
  return body
    .split("\n")
    .filter((line) => !line.includes(marker))
    .join("\n")
    .trim();
}

/** The ring's label stays inside the circle: "999%+" from ten times the threshold. */
export function ringPercent(ratio) {
  return ratio >= 10 ? "999%+" : formatPercent(ratio);
}

/** Why a manual compression compressed nothing, from the answer's code and figures. */
export function describeNothingCompressed(answer) {
  const code = answer.reason_code;
  if (code && has(`nothing_${code}`)) {
    return t(`nothing_${code}`, { since: answer.messages_since_summary ?? "?", needed: answer.messages_needed ?? "?" });
  }
  return t("nothing_unknown");
}

export function describeCompressError(exc) {
  if (!(exc instanceof ApiError)) return t("requestFailed", { message: describeError(exc) });
  if (exc.code === ERROR_CODES.THREAD_BUSY) {
    const reason = exc.error.reason;
    const words = reason && has(`busy_${reason}`) ? t(`busy_${reason}`) : t("busyUnknown");
    return t("compressBusy", { reason: words });
  }
  if (exc.code === ERROR_CODES.COMPRESSION_FAILED || exc.status >= 500) {
    const part = exc.error.part;
    const partText = part && has(`part_${part}`) ? t(`part_${part}`) : part || t("part_unknown");
    return t("compressFailed", { part: partText, message: exc.message });
  }
  return t("requestFailed", { message: exc.message || exc.code });
}

/** A history file (JSON Lines: a header, then one LangChain message per line), or null if it is not one. */
export function readHistory(text) {
  const messages = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    let item;
    try {
      item = JSON.parse(line);
    } catch {
      return null;
    }
    if (item && typeof item === "object" && item.data && typeof item.type === "string") messages.push(item);
  }
  return messages.length ? messages : null;
}

const HISTORY_ROLES = { human: "you", ai: "assistant", tool: "roleTool", system: "roleSystem" };

/** The history as readable messages, with a toggle back to the file as written. */
function showHistory(messages, box, raw, toggle) {
  for (const message of messages) {
    const data = message.data;
    const content = typeof data.content === "string" ? data.content : prettyJson(data.content);
    const role = HISTORY_ROLES[message.type] ? t(HISTORY_ROLES[message.type]) : message.type;
    const calls = (data.tool_calls || []).map((call) => `→ ${call.name}(${JSON.stringify(call.args ?? {})})`);
    box.append(
      h(
        "article",
        { class: `viewer-msg viewer-msg-${message.type}` },
        h("h3", { class: "msg-who" }, data.name ? `${role} · ${data.name}` : role),
        content ? h("p", { class: "msg-text" }, content) : null,
        calls.length ? h("p", { class: "muted small" }, calls.join("\n")) : null,
      ),
    );
  }
  const show = (asRaw) => {
    box.hidden = asRaw;
    raw.hidden = !asRaw;
    toggle.setAttribute("aria-pressed", String(asRaw));
    toggle.textContent = t(asRaw ? "showMessages" : "showRaw");
  };
  toggle.onclick = () => show(box.hidden === false);
  toggle.hidden = false;
  show(false);
}

/** The file viewer dialog (summary history files, offloaded tool results, any workdir file). */
export async function openViewer(path, load) {
  const dialog = $("#viewer");
  const opener = document.activeElement;
  $("#viewer-title").textContent = path;
  $("#viewer-meta").textContent = t("loading");
  const body = $("#viewer-body");
  body.textContent = "";
  if (!dialog.open) dialog.showModal();
  $("#viewer-close").focus();
  dialog.addEventListener(
    "close",
    () => {
      if (opener && document.contains(opener)) opener.focus();
    },
    { once: true },
  );
  const messagesBox = clear($("#viewer-messages"));
  const rawToggle = $("#viewer-raw");
  messagesBox.hidden = true;
  rawToggle.hidden = true;
  body.hidden = false;
  try {
    const file = await load();
    if (file.binary) {
      $("#viewer-meta").textContent = t("binaryFile", { size: file.size });
    } else {
      $("#viewer-meta").textContent = t("bytes", { size: new TextEncoder().encode(file.text).length });
      body.textContent = file.text;
      const history = path.endsWith(".jsonl") ? readHistory(file.text) : null;
      if (history) showHistory(history, messagesBox, body, rawToggle);
    }
  } catch (exc) {
    $("#viewer-meta").textContent = t("requestFailed", { message: describeError(exc) });
  }
}
