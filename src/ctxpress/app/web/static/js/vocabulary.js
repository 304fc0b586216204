// The service's vocabulary (`GET /api/vocabulary`): event names, statuses, levels, error codes,
// reasons, the summary marker, the suggestion ratio… Read once when the page loads, so that no
// module copies a value the service defines. Public, like /api/health: no token needed.

async function load() {
  const response = await fetch("/api/vocabulary", { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`GET /api/vocabulary answered ${response.status}`);
  return deepFreeze(await response.json());
}

function deepFreeze(value) {
  if (value && typeof value === "object") Object.values(value).forEach(deepFreeze);
  return Object.freeze(value);
}

export const VOCABULARY = await load();
export const EVENTS = VOCABULARY.events;
export const STATUSES = VOCABULARY.statuses;
export const LEVELS = VOCABULARY.levels;
export const REASONS = VOCABULARY.reasons;
export const RUN_STATUSES = VOCABULARY.run_statuses;
export const ERROR_CODES = VOCABULARY.error_codes;
export const BUSY_REASONS = VOCABULARY.busy_reason_names;
export const CAPABILITIES = VOCABULARY.capabilities;
export const USAGE_CATEGORIES = VOCABULARY.usage_categories;
export const WORKDIR_DIRS = VOCABULARY.workdir_dirs;
export const COMPRESSION_TRIGGERS = VOCABULARY.compression_triggers;
