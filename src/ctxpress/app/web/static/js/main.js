// The page: sign in with an API token, conversations, chat and the status panel.

import { Api, ApiError, enc, tokenStore } from "./api.js";
import { Chat, describeError, describeSendError, submitOnEnter } from "./chat.js";
import { $, announce, clear, h } from "./dom.js";
import { formatDate } from "./format.js";
import { initLanguage, language, setLanguage, t, translateDocument } from "./i18n.js";
import { StatusPanel } from "./panel.js";

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
    },
  });
  state.panel ??= new StatusPanel({ api });
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

function renderAgentSelect() {
  const select = clear($("#agent-select"));
  for (const agent of state.agents) {
    const label = agent.description ? `${agent.name} — ${agent.description}` : agent.name;
    select.append(h("option", { value: agent.name, selected: agent.default }, label));
  }
}

async function loadConversations(more = false) {
  const query = more && state.nextBefore ? `?before=${enc(state.nextBefore)}&limit=50` : "?limit=50";
  const page = await state.api.get(`/api/conversations${query}`);
  state.conversations = more ? [...state.conversations, ...page.items] : page.items;
  state.nextBefore = page.next_before;
  renderConversationList();
}

function conversationLabel(conversation) {
  return conversation.title || `${t("untitled")} · ${conversation.id.slice(0, 8)}`;
}

function renderConversationList() {
  const list = clear($("#conversation-list"));
  if (!state.conversations.length) list.append(h("li", { class: "muted" }, t("noConversations")));
  for (const conversation of state.conversations) {
    const current = state.current?.id === conversation.id;
    list.append(
      h(
        "li",
        {},
        h(
          "button",
          {
            type: "button",
            class: "conversation",
            "aria-current": current ? "true" : undefined,
            dataset: { id: conversation.id },
            onclick: () => openConversation(conversation.id, { focusChat: true }),
          },
          h("span", { class: "conversation-title" }, conversationLabel(conversation)),
          h("span", { class: "conversation-meta" }, `${conversation.agent} · ${formatDate(conversation.created_at, language())}`),
        ),
      ),
    );
  }
  $("#more-conversations").hidden = !state.nextBefore;
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
  showView("chat", { focus: focusChat });
  const agent = agentByName(conversation.agent);
  await Promise.all([state.chat.open(conversation.id), state.panel.open(conversation, agent)]);
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
  notice.hidden = !agent?.builtin_model;
  notice.textContent = agent?.builtin_model ? t("builtinNotice") : "";
  if (agent?.notice) notice.title = agent.notice;
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
      await openConversation(created.id);
      $("#composer-input").focus();
    } catch (exc) {
      error.textContent = t("requestFailed", { message: describeError(exc) });
    }
  });
  $("#more-conversations").addEventListener("click", () => loadConversations(true));
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
      await state.chat.send(text);
      input.value = "";
    } catch (exc) {
      error.textContent = describeSendError(exc);
    } finally {
      button.disabled = false;
      input.focus();
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
