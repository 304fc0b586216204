// The page: sign in with an API token, conversations, chat and the status panel.

import { Api, ApiError, enc, tokenStore } from "./api.js";
import { Chat, describeError, submitOnEnter } from "./chat.js";
import { $, announce, clear, h } from "./dom.js";
import { formatDate, formatTokens } from "./format.js";
import { initLanguage, language, setLanguage, t, translateDocument } from "./i18n.js";
import { StatusPanel } from "./panel.js";
import { ERROR_CODES } from "./vocabulary.js";

const state = {
  api: null,
  me: null,
  agents: [],
  conversations: [],
  nextBefore: null,
  current: null,
  chat: null,
  panel: null,
};

function agentByName(name) {
  return state.agents.find((agent) => agent.name === name) || null;
}

// --- language --------------------------------------------------------------------------------

function applyLanguage() {
  translateDocument();
  const toggle = $("#lang-toggle");
  const other = language() === "zh" ? "en" : "zh";
  toggle.textContent = other === "en" ? "EN" : "中文";
  toggle.lang = other === "en" ? "en" : "zh-CN";
  toggle.setAttribute("aria-label", other === "en" ? "Switch to English" : "切换到中文");
  if (state.me) $("#who").textContent = t("signedInAs", { name: state.me.name });
  if (state.api) {
    renderConversationList();
    if (state.current) {
      renderChatHead();
      // Rebuild the chat in the new language (from the record; active runs are followed again).
      state.chat.open(state.current.id).catch(reportError);
      state.panel.refresh().catch(() => {});
    }
  }
}

// --- views (narrow screens show one region at a time) ------------------------------------------

function showView(view, { focus = false } = {}) {
  document.body.dataset.view = view;
  for (const tab of document.querySelectorAll("[data-view-target]")) {
    tab.setAttribute("aria-pressed", String(tab.dataset.viewTarget === view));
  }
  if (view === "chat") state.chat?.scrollToEnd(true);
  if (focus) {
    const region = { list: "#conversations-title", chat: "#chat-title", panel: "#panel-title" }[view];
    const heading = $(region);
    heading.tabIndex = -1;
    heading.focus();
  }
}

// --- sign in / out ---------------------------------------------------------------------------

function showSignIn(message = "") {
  state.chat?.close();
  state.panel?.close();
  state.api = null;
  state.me = null;
  state.current = null;
  $("#app").hidden = true;
  $("#who").hidden = true;
  $("#sign-out").hidden = true;
  $("#signin").hidden = false;
  $("#signin-error").textContent = message;
  $("#token-input").value = "";
  $("#token-input").focus();
}

function onUnauthorized() {
  tokenStore.clear();
  showSignIn(t("sessionExpired"));
}

async function signIn(token, remember) {
  const api = new Api(token, { onUnauthorized: () => {} });
  const me = await api.get("/api/me");
  tokenStore.set(token, remember);
  await start(api, me);
}

async function start(api, me) {
  api.onUnauthorized = onUnauthorized;
  state.api = api;
  state.me = me;
  state.agents = await api.get("/api/agents");
  // One chat and one panel for the page's lifetime (their listeners are bound once).
  state.chat ??= new Chat({
    api,
    log: $("#chat-log"),
    hooks: {
      onCompression: (data) => state.panel.addCompressionEvent(data),
      onPressure: (data) => state.panel.applyPressureEvent(data),
      onUsage: () => state.panel.scheduleRefresh(800),
      onActivity: () => state.panel.scheduleRefresh(),
      onRunSettled: () => state.panel.scheduleRefresh(100),
      onActiveChange: () => renderStopButton(),
    },
  });
  state.panel ??= new StatusPanel({ api, onCompressions: (items) => state.chat.markSummaries(items) });
  state.chat.api = api;
  state.panel.api = api;
  $("#signin").hidden = true;
  $("#app").hidden = false;
  $("#who").hidden = false;
  $("#who").textContent = t("signedInAs", { name: me.name });
  $("#sign-out").hidden = false;
  renderAgentSelect();
  await loadConversations();
  const fromHash = conversationIdFromHash();
  if (fromHash) await openConversation(fromHash);
  else {
    renderChatHead();
    showView("list");
  }
}

// --- conversations ---------------------------------------------------------------------------

/** Agent names in the list (short, never cut off); the chosen one's description below it. */
function renderAgentSelect() {
  const select = clear($("#agent-select"));
  for (const agent of state.agents) {
    select.append(h("option", { value: agent.name, selected: agent.default }, agent.name));
  }
  renderAgentDescription();
}

function renderAgentDescription() {
  $("#agent-description").textContent = agentByName($("#agent-select").value)?.description ?? "";
}

async function loadConversations(more = false) {
  const params = new URLSearchParams({ limit: "50" });
  if (more && state.nextBefore) params.set("before", state.nextBefore);
  const search = $("#conversation-search").value.trim();
  if (search) params.set("q", search);
  if ($("#show-archived").checked) params.set("archived", "true");
  const page = await state.api.get(`/api/conversations?${params}`);
  state.conversations = more ? [...state.conversations, ...page.items] : page.items;
  state.nextBefore = page.next_before;
  renderConversationList();
}

function conversationLabel(conversation) {
  return conversation.title || `${t("untitled")} · ${conversation.id.slice(0, 8)}`;
}

function renderConversationList() {
  const list = clear($("#conversation-list"));
  if (!state.conversations.length) {
    const filtered = $("#conversation-search").value.trim() || $("#show-archived").checked;
    list.append(h("li", { class: "muted" }, t(filtered ? "noMatches" : "noConversations")));
  }
  for (const conversation of state.conversations) list.append(conversationItem(conversation));
  $("#more-conversations").hidden = !state.nextBefore;
}

function conversationItem(conversation) {
  const current = state.current?.id === conversation.id;
  const label = conversationLabel(conversation);
  const item = h("li", { class: "conversation-item", dataset: { id: conversation.id } });
  const open = h(
    "button",
    {
      type: "button",
      class: "conversation",
      "aria-current": current ? "true" : undefined,
      dataset: { id: conversation.id },
      onclick: () => openConversation(conversation.id, { focusChat: true }),
    },
    h("span", { class: "conversation-title" }, label),
    h("span", { class: "conversation-meta" }, `${conversation.agent} · ${formatDate(conversation.created_at, language())}`),
  );
  const archived = Boolean(conversation.archived_at);
  const actions = h(
    "div",
    { class: "conversation-actions" },
    h("button", { type: "button", class: "link", "aria-label": t("renameOf", { title: label }), onclick: () => startRename(item, conversation) }, t("rename")),
    h(
      "button",
      {
        type: "button",
        class: "link",
        "aria-label": t(archived ? "unarchiveOf" : "archiveOf", { title: label }),
        onclick: () => setArchived(conversation, !archived),
      },
      t(archived ? "unarchive" : "archive"),
    ),
  );
  item.append(open, actions);
  return item;
}

/** Rename in place: Enter saves, Escape keeps the old title. */
function startRename(item, conversation) {
  const input = h("input", { type: "text", maxlength: "200", value: conversation.title, "aria-label": t("newTitle") });
  const form = h("form", { class: "rename-form" }, input, h("button", { type: "submit", class: "primary" }, t("save")));
  const cancel = () => {
    renderConversationList();
    $(`#conversation-list li[data-id="${CSS.escape(conversation.id)}"] button.conversation`)?.focus();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      cancel();
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const updated = await state.api.json("PATCH", `/api/conversations/${enc(conversation.id)}`, { body: { title: input.value } });
      replaceConversation(updated);
      cancel();
    } catch (exc) {
      announce(t("requestFailed", { message: describeError(exc) }));
    }
  });
  item.replaceChildren(form);
  input.focus();
  input.select();
}

async function setArchived(conversation, archived) {
  try {
    const updated = await state.api.json("PATCH", `/api/conversations/${enc(conversation.id)}`, { body: { archived } });
    state.conversations = state.conversations.filter((item) => item.id !== updated.id);
    if (state.current?.id === updated.id) state.current = updated;
    renderConversationList();
    announce(t(archived ? "archived" : "unarchived", { title: conversationLabel(updated) }));
    $("#conversation-search").focus();
  } catch (exc) {
    announce(t("requestFailed", { message: describeError(exc) }));
  }
}

function replaceConversation(updated) {
  state.conversations = state.conversations.map((item) => (item.id === updated.id ? updated : item));
  if (state.current?.id === updated.id) {
    state.current = updated;
    renderChatHead();
  }
  renderConversationList();
}

/** After the first question the service names an untitled conversation: show the new title. */
async function refreshTitle() {
  if (!state.current || state.current.title) return;
  const updated = await state.api.get(`/api/conversations/${enc(state.current.id)}`);
  if (updated.title) replaceConversation(updated);
}

function conversationIdFromHash() {
  const match = /^#\/c\/([^/]+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

async function openConversation(id, { focusChat = false } = {}) {
  let conversation;
  try {
    conversation = await state.api.get(`/api/conversations/${enc(id)}`);
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 404) {
      window.history.replaceState(null, "", "#");
      showView("list");
      return;
    }
    throw exc;
  }
  state.current = conversation;
  if (window.location.hash !== `#/c/${enc(id)}`) window.history.pushState(null, "", `#/c/${enc(id)}`);
  renderConversationList();
  renderChatHead();
  $("#composer").hidden = false;
  $("#composer-error").textContent = "";
  showView("chat");
  // Opened on purpose (click, Enter): what is typed next goes into the message box.
  if (focusChat) $("#composer-input").focus();
  const agent = agentByName(conversation.agent);
  await Promise.all([state.chat.open(conversation.id), state.panel.open(conversation, agent)]);
  renderSuggestions(agent);
}

function renderChatHead() {
  const conversation = state.current;
  const notice = $("#agent-notice");
  if (!conversation) {
    $("#chat-title").textContent = t("noConversation");
    $("#chat-agent").textContent = t("openConversationHint");
    notice.hidden = true;
    $("#composer").hidden = true;
    return;
  }
  const agent = agentByName(conversation.agent);
  $("#chat-title").textContent = conversationLabel(conversation);
  document.title = `${conversationLabel(conversation)} · ctxpress`;
  $("#chat-agent").textContent = t("agentOf", { agent: conversation.agent, model: agent?.model ?? "?" });
  renderMessageLimit();
  notice.hidden = !agent?.builtin_model;
  notice.textContent = agent?.builtin_model ? t("builtinNotice") : "";
  if (agent?.notice) notice.title = agent.notice;
}

/**
 * Send; when the service answers "busy, retry after N s" (a manual compression holds the
 * conversation), say so and send again once after the wait.
 */
async function sendWithRetry(text, status) {
  try {
    return await state.chat.send(text);
  } catch (exc) {
    const wait = exc instanceof ApiError && exc.code === ERROR_CODES.THREAD_BUSY ? exc.retryAfter : null;
    if (wait === null || wait > 30) throw exc;
    status.textContent = t("sendRetrying", { seconds: Math.max(1, wait) });
    await new Promise((resolve) => window.setTimeout(resolve, Math.max(1, wait) * 1000));
    return state.chat.send(text);
  }
}

/** An empty conversation with the built-in agent: phrases it understands, one click fills the box. */
function renderSuggestions(agent) {
  const log = $("#chat-log");
  const phrases = agent?.suggestions?.[language()] || [];
  if (log.children.length || !phrases.length) return;
  const input = $("#composer-input");
  log.append(
    h(
      "section",
      { class: "suggestions", "aria-labelledby": "suggestions-title" },
      h("h3", { id: "suggestions-title" }, t("suggestionsTitle")),
      h(
        "ul",
        {},
        phrases.map((phrase) =>
          h(
            "li",
            {},
            h("button", { type: "button", class: "suggestion", onclick: () => { input.value = phrase; input.focus(); } }, phrase),
          ),
        ),
      ),
    ),
  );
}

/** The agent's per-message limit, shown under the message box before anything is sent. */
function renderMessageLimit() {
  const line = $("#composer-limit");
  const max = state.current ? agentByName(state.current.agent)?.max_message_tokens : null;
  line.hidden = !max;
  line.textContent = max ? t("messageLimit", { max: formatTokens(max) }) : "";
}

/** The stop button shows while a reply of this conversation is being written (or waits in the queue). */
function renderStopButton() {
  const button = $("#stop-button");
  const active = Boolean(state.chat?.activeRunId());
  if (!active && button === document.activeElement) $("#composer-input").focus();
  button.hidden = !active;
}

// --- wiring ----------------------------------------------------------------------------------

function wire() {
  $("#lang-toggle").addEventListener("click", () => {
    setLanguage(language() === "zh" ? "en" : "zh");
    applyLanguage();
  });
  $("#sign-out").addEventListener("click", () => {
    tokenStore.clear();
    window.history.replaceState(null, "", "#");
    showSignIn();
  });
  $("#signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("#token-input").value.trim();
    const error = $("#signin-error");
    error.textContent = "";
    if (!token) {
      error.textContent = t("signInEmpty");
      return;
    }
    const button = event.submitter || $("#signin-form button[type=submit]");
    button.disabled = true;
    try {
      await signIn(token, $("#remember-input").checked);
    } catch (exc) {
      error.textContent = exc instanceof ApiError && exc.status === 401 ? t("signInInvalid") : t("requestFailed", { message: describeError(exc) });
    } finally {
      button.disabled = false;
    }
  });
  for (const tab of document.querySelectorAll("[data-view-target]")) {
    tab.addEventListener("click", () => showView(tab.dataset.viewTarget));
  }
  $("#new-conversation").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = $("#new-conversation-error");
    error.textContent = "";
    try {
      const body = { agent: $("#agent-select").value || undefined, title: $("#title-input").value.trim() };
      const created = await state.api.post("/api/conversations", body);
      $("#title-input").value = "";
      state.conversations = [created, ...state.conversations];
      // Focus goes to the message box at once, not after the loads (a click meanwhile keeps its focus).
      await openConversation(created.id, { focusChat: true });
    } catch (exc) {
      error.textContent = t("requestFailed", { message: describeError(exc) });
    }
  });
  $("#more-conversations").addEventListener("click", () => loadConversations(true));
  $("#agent-select").addEventListener("change", renderAgentDescription);
  let searchTimer = null;
  $("#conversation-search").addEventListener("input", () => {
    window.clearTimeout(searchTimer);
    searchTimer = window.setTimeout(() => loadConversations().catch(reportError), 250);
  });
  $("#show-archived").addEventListener("change", () => loadConversations().catch(reportError));
  const composer = $("#composer");
  const input = $("#composer-input");
  input.addEventListener("keydown", (event) => submitOnEnter(event, composer));
  composer.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value;
    const error = $("#composer-error");
    error.textContent = "";
    if (!text.trim() || !state.current) return;
    const button = $("#send-button");
    button.disabled = true;
    try {
      await sendWithRetry(text, error);
      input.value = "";
      error.textContent = "";
      refreshTitle().catch(() => {});
    } catch (exc) {
      error.textContent = exc instanceof ApiError && exc.code === ERROR_CODES.THREAD_BUSY
        ? t("sendBusy", { reason: describeError(exc) })
        : t("requestFailed", { message: describeError(exc) });
    } finally {
      button.disabled = false;
      input.focus();
    }
  });
  $("#stop-button").addEventListener("click", async () => {
    const button = $("#stop-button");
    if (button.getAttribute("aria-disabled") === "true") return;
    button.setAttribute("aria-disabled", "true"); // not `disabled`: that would drop the focus
    try {
      await state.chat.stop();
      $("#composer-input").focus(); // the reply stopped: the next message can be typed at once
    } catch (exc) {
      $("#composer-error").textContent = t("stopFailed", { message: describeError(exc) });
    } finally {
      button.removeAttribute("aria-disabled");
    }
  });
  $("#viewer-close").addEventListener("click", () => $("#viewer").close());
  window.addEventListener("popstate", () => {
    const id = conversationIdFromHash();
    if (state.api && id && id !== state.current?.id) openConversation(id).catch(reportError);
  });
}

function reportError(exc) {
  if (exc?.name === "AbortError") return;
  announce(t("requestFailed", { message: describeError(exc) }));
  console.error(exc);
}

async function boot() {
  initLanguage();
  applyLanguage();
  wire();
  showView(conversationIdFromHash() ? "chat" : "list");
  const token = tokenStore.get();
  if (!token) {
    showSignIn();
    return;
  }
  const api = new Api(token, { onUnauthorized: () => {} });
  try {
    const me = await api.get("/api/me");
    await start(api, me);
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 401) {
      tokenStore.clear();
      showSignIn(t("sessionExpired"));
    } else {
      showSignIn(t("requestFailed", { message: describeError(exc) }));
    }
  }
}

boot().catch(reportError);
