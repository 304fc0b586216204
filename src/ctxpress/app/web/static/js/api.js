// The JSON API of the service: bearer token, JSON errors, and SSE read with fetch() (EventSource
// cannot send the Authorization header).

import { ERROR_CODES, EVENTS } from "./vocabulary.js";

/** Events after which the service ends a run's stream: the run finished, or waits for an answer. */
const STREAM_ENDING_EVENTS = new Set([EVENTS.RUN_FINISHED, EVENTS.INTERRUPT]);

const TOKEN_KEY = "ctxpress.token";

/** Where the token lives: sessionStorage (default, gone with the tab) or localStorage (remembered). */
export const tokenStore = {
  get() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
    } catch {
      return null;
    }
  },
  set(token, remember) {
    this.clear();
    (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
  },
  clear() {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
      localStorage.removeItem(TOKEN_KEY);
    } catch {
      // storage unavailable: nothing stored
    }
  },
};

/** An error answer of the service: `{"error": {"code", "message", "details"?}}` (plus any extra fields). */
export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = error?.code || ERROR_CODES.HTTP_ERROR;
    this.details = error?.details;
    this.error = error || {};
    /** Seconds the service asked to wait (`Retry-After`), or null. */
    this.retryAfter = null;
  }
}

export class Api {
  constructor(token, { onUnauthorized } = {}) {
    this.token = token;
    this.onUnauthorized = onUnauthorized;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  }

  async request(method, path, { body, signal, accept = "application/json" } = {}) {
    const init = { method, signal, headers: this.headers({ Accept: accept }) };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (exc) {
      if (exc?.name === "AbortError") throw exc;
      throw new ApiError(0, { code: "network_error", message: exc?.message || "network error" });
    }
    if (!response.ok) throw await this.errorOf(response);
    return response;
  }

  async errorOf(response) {
    let error = null;
    try {
      const body = await response.json();
      error = body && typeof body === "object" ? body.error || null : null;
    } catch {
      error = null;
    }
    const apiError = new ApiError(response.status, error || { message: response.statusText });
    const retryAfter = Number.parseInt(response.headers.get("Retry-After") ?? "", 10);
    if (Number.isFinite(retryAfter)) apiError.retryAfter = retryAfter;
    if (response.status === 401 && this.onUnauthorized) this.onUnauthorized(apiError);
    return apiError;
  }

  async json(method, path, options) {
    const response = await this.request(method, path, options);
    if (response.status === 204) return null;
    return response.json();
  }

  get(path, options) {
    return this.json("GET", path, options);
  }

  post(path, body, options = {}) {
    return this.json("POST", path, { ...options, body: body ?? {} });
  }

  /** A workdir file: `{text}` for text files, `{binary: true, size}` otherwise. */
  async file(conversationId, path) {
    const encoded = path.split("/").map(encodeURIComponent).join("/");
    const response = await this.request("GET", `/api/conversations/${enc(conversationId)}/files/${encoded}`, {
      accept: "text/plain, application/octet-stream",
    });
    const type = response.headers.get("Content-Type") || "";
    if (type.startsWith("text/")) return { text: await response.text() };
    const blob = await response.blob();
    return { binary: true, size: blob.size };
  }

  /**
   * Send a message and open its run's event stream in the same request (`POST …/runs/stream`): the
   * stream starts with the run, so on a busy service no text reaches the page late as a catch-up.
   * A refusal (409 `thread_busy`, 413, …) throws an ApiError, as `post` does. Resolves with
   * `{runId, response, close}`: the run, its open stream for `followRun(runId, { opened })`, and
   * what closes that stream unread. Nothing aborts the request itself: once sent, the message may
   * already be in the chat record, and the caller must learn its run.
   */
  async startRun(conversationId, input) {
    const stream = new AbortController();
    const response = await this.request("POST", `/api/conversations/${enc(conversationId)}/runs/stream`, {
      body: { input },
      accept: "text/event-stream",
      signal: stream.signal,
    });
    const location = response.headers.get("Location") || "";
    const runId = decodeURIComponent(location.slice(location.lastIndexOf("/") + 1));
    if (!runId) {
      stream.abort();
      throw new ApiError(response.status, { message: "the service answered without naming the run" });
    }
    return { runId, response, close: () => stream.abort() };
  }

  /**
   * Follow a run's events until the service ends the stream (run finished or waiting for input),
   * reading `opened` first when given (what `startRun` resolved with; `signal` closes it too).
   * Reconnects with `Last-Event-ID` after a network failure, and after a stream that ended before
   * the run did (a proxy's idle timeout, a process that stopped), so no event is lost or repeated.
   * `onEvent(type, data, id)`; resolves with the last event id.
   */
  async followRun(runId, { after = "0", onEvent, signal, maxRetries = 8, opened = null } = {}) {
    let cursor = String(after);
    let failures = 0;
    let ended = false; // the run's last event of this stream has arrived
    let response = opened?.response ?? null;
    if (opened && signal?.aborted) opened.close();
    else if (opened) signal?.addEventListener("abort", opened.close, { once: true });
    for (;;) {
      try {
        if (!response) {
          const headers = { Accept: "text/event-stream" };
          if (cursor !== "0") headers["Last-Event-ID"] = cursor;
          response = await fetch(`/api/runs/${enc(runId)}/events`, {
            headers: this.headers(headers),
            signal,
            cache: "no-store",
          });
          if (!response.ok) throw await this.errorOf(response);
        }
        const body = response.body;
        response = null; // a reconnection opens a new stream
        for await (const event of readSse(body)) {
          // `41` (a stored event) or `41-7` (a live message_delta after it); ids only grow.
          const id = event.id || null;
          if (id) cursor = laterEventId(cursor, id);
          failures = 0;
          let data = {};
          try {
            data = event.data ? JSON.parse(event.data) : {};
          } catch {
            data = { raw: event.data };
          }
          if (STREAM_ENDING_EVENTS.has(event.event)) ended = true;
          onEvent(event.event, data, id);
        }
        if (ended) return cursor;
        throw new Error("the run's stream ended before the run did");
      } catch (exc) {
        response = null;
        if (ended || signal?.aborted || exc?.name === "AbortError") return cursor;
        const permanent = exc instanceof ApiError && exc.status >= 400 && exc.status < 500 && exc.status !== 429;
        failures += 1;
        if (permanent || failures > maxRetries) throw exc;
        await sleep(Math.min(8000, 300 * 2 ** failures), signal);
      }
    }
  }
}

function eventIdParts(id) {
  const [stored, live = "0"] = String(id).split("-");
  return [Number.parseInt(stored, 10) || 0, Number.parseInt(live, 10) || 0];
}

/** The later of two SSE event ids (`41` < `41-1` < `41-2` < `42`). */
export function laterEventId(a, b) {
  const [x, y] = [eventIdParts(a), eventIdParts(b)];
  return x[0] > y[0] || (x[0] === y[0] && x[1] >= y[1]) ? String(a) : String(b);
}

export function enc(value) {
  return encodeURIComponent(value);
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * Server-sent events from a byte stream (the WHATWG parsing rules: CR, LF or CRLF line ends,
 * `:` comments, `event`/`data`/`id` fields, a blank line dispatches).
 */
export async function* readSse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { event: "", data: [], id: "" };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      for (;;) {
        const match = /\r\n|\r|\n/.exec(buffer);
        if (!match) break;
        // A lone CR at the very end may be the first half of a CRLF: wait for the next chunk.
        if (match[0] === "\r" && match.index === buffer.length - 1) break;
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === "") {
          if (event.data.length) {
            yield { event: event.event || "message", data: event.data.join("\n"), id: event.id };
          }
          event = { event: "", data: [], id: event.id };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let fieldValue = colon < 0 ? "" : line.slice(colon + 1);
        if (fieldValue.startsWith(" ")) fieldValue = fieldValue.slice(1);
        if (field === "event") event.event = fieldValue;
        else if (field === "data") event.data.push(fieldValue);
        else if (field === "id" && !fieldValue.includes("\0")) event.id = fieldValue;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
