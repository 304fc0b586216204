// Number and text formatting shared by the panel and the chat.

/** The one token unit of the UI: K = 1024 (the spec's `summary_threshold` is in K of 1024 tokens). */
export const TOKENS_PER_K = 1024;

/** 950 -> "950", 1536 -> "1.5K", 16384 -> "16K", 1048576 -> "1024K". */
export function formatTokens(value) {
  if (value === null || value === undefined || !Number.isFinite(Number(value))) return "–";
  const n = Math.max(0, Math.round(Number(value)));
  if (n < TOKENS_PER_K) return String(n);
  const k = n / TOKENS_PER_K;
  const text = k >= 100 ? k.toFixed(0) : k.toFixed(1);
  return `${text.replace(/\.0$/, "")}K`;
}

/** 0.8712 -> "87%"; over 100 % is shown as is ("112%"). */
export function formatPercent(ratio) {
  if (ratio === null || ratio === undefined || !Number.isFinite(Number(ratio))) return "–";
  return `${Math.round(Number(ratio) * 100)}%`;
}

export function formatBytes(size) {
  const n = Number(size) || 0;
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1).replace(/\.0$/, "")} KiB`;
  return `${(n / 1024 / 1024).toFixed(1).replace(/\.0$/, "")} MiB`;
}

/** Levels of the pressure ring: colour changes at 75 % and 90 % of the threshold. */
export function pressureLevel(ratio) {
  if (!Number.isFinite(ratio)) return "ok";
  if (ratio >= 0.9) return "high";
  if (ratio >= 0.75) return "warn";
  return "ok";
}

export function formatDate(value, lang) {
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleString(lang === "zh" ? "zh-CN" : "en-GB", {
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
  });
}

/** A time of day in the page's language (the event list). */
export function formatTime(date, lang) {
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleTimeString(lang === "zh" ? "zh-CN" : "en-GB", { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function shorten(text, limit) {
  const value = String(text ?? "");
  return value.length <= limit ? value : `${value.slice(0, limit)}…`;
}

export function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
