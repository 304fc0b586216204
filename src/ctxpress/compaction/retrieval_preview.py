"""S9: structured previews of retrieval results (`query_kb`, `web_search`).

The result is parsed as JSON. In the original order and within the budget the preview keeps the
number of results, every identifier (document, chunk and file ids alike), source, title, URL, score
and a bounded body preview, and says how many results it left out, even when none fits. A source
every result shares (one knowledge base, one site) is named once, in the first line, instead of on
every result's line. Anything unexpected, a list without records included, returns None so the
caller falls back to S10.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxpress.tokens import estimate_tokens

RETRIEVAL_TOOLS = frozenset({"query_kb", "web_search"})
RESULT_LIST_KEYS = ("results", "documents", "items", "data", "hits", "chunks", "records", "docs")
ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "file_id", "knowledge_id", "segment_id", "uuid")
SOURCE_KEYS = ("source", "site_name", "publisher", "domain", "site", "file_name", "filename", "path")
TITLE_KEYS = ("title", "name", "heading", "document_name")
URL_KEYS = ("url", "link", "href", "uri")
SCORE_KEYS = ("score", "relevance_score", "similarity", "rerank_score", "distance")
BODY_KEYS = ("content", "text", "snippet", "body", "page_content", "chunk", "summary", "description")
#: Characters of body kept per result at most; the whole preview is still bounded by the budget.
BODY_PREVIEW_CHARS = 160
#: Share of the budget that result metadata lines may use before bodies get the rest.
METADATA_SHARE = 0.6


def is_retrieval_tool(tool_name: str) -> bool:
    return tool_name in RETRIEVAL_TOOLS


def _parse_json(text: str) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):  # malformed, or nested deeper than the parser allows
        return None


def _find_result_list(data: Any) -> list[Any] | None:
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        return None
    for key in RESULT_LIST_KEYS:
        value = data.get(key)
        if isinstance(value, list):
            return value
        if isinstance(value, dict):  # {"data": {"results": [...]}}
            nested = _find_result_list(value)
            if nested is not None:
                return nested
    return None


def _first(record: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for key in keys:
        value = record.get(key)
        if value not in (None, "", [], {}):
            return key, value
    return None


def _flatten(item: Any) -> tuple[dict[str, Any], str | None]:
    """A record's fields (with LangChain-style `metadata` merged in) and a title for pair items."""
    if isinstance(item, dict):
        merged = dict(item)
        metadata = item.get("metadata")
        if isinstance(metadata, dict):
            for key, value in metadata.items():
                merged.setdefault(key, value)
        return merged, None
    if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict):
        return dict(item[1]), item[0]  # `[name, {fields}]` records
    return {}, None


def _readable_body(value: Any) -> str:
    """Body text on one line; a JSON object body reads as `key: value; …` (cheaper than escaped JSON)."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{"):
            try:
                value = json.loads(stripped)
            except ValueError:
                return " ".join(stripped[: BODY_PREVIEW_CHARS * 4].split())
        else:
            return " ".join(stripped[: BODY_PREVIEW_CHARS * 4].split())
    if isinstance(value, dict):
        return "; ".join(f"{key}: {_compact(item)}" for key, item in value.items())[: BODY_PREVIEW_CHARS * 4]
    return _compact(value)[: BODY_PREVIEW_CHARS * 4]


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class RecordSummary:
    rank: int
    fields: dict[str, str]  # ids, source, title, url, score — under their original key names
    body: str

    def line(self, body_chars: int) -> str:
        parts = [f"{key}={value}" for key, value in self.fields.items()]
        body = self.body[:body_chars] + ("…" if len(self.body) > body_chars else "") if body_chars > 0 else ""
        return f"#{self.rank} " + " | ".join([*parts, body] if body else parts)


def _identifiers(fields: Mapping[str, Any]) -> dict[str, str]:
    """Every identifier of a record (a chunk id and its document id and file id alike), each
    distinct value once."""
    kept: dict[str, str] = {}
    for key in ID_KEYS:
        value = fields.get(key)
        if value in (None, "", [], {}):
            continue
        shown = _compact(value)[:BODY_PREVIEW_CHARS]
        if shown not in kept.values():
            kept[key] = shown
    return kept


def _source(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    found = _first(fields, SOURCE_KEYS)
    return None if found is None else (found[0], _compact(found[1])[:BODY_PREVIEW_CHARS])


def shared_source(results: list[Any]) -> tuple[str, str] | None:
    """The source field (key, shown value) of every result when they all have the same one, else
    None: it is then said once for all of them rather than on every line."""
    if len(results) < 2:
        return None
    first = _source(_flatten(results[0])[0])
    if first is None:
        return None
    for item in results[1:]:
        if _source(_flatten(item)[0]) != first:
            return None
    return first


def summarize_record(rank: int, item: Any, shared: tuple[str, str] | None = None) -> RecordSummary:
    """A result's fields to show; its source is left out when it is the `shared` one."""
    fields, pair_title = _flatten(item)
    kept = _identifiers(fields)
    source = _source(fields)
    if source is not None and source != shared:
        kept[source[0]] = source[1]
    for keys in (TITLE_KEYS, URL_KEYS, SCORE_KEYS):
        found = _first(fields, keys)
        if found is not None:
            kept[found[0]] = _compact(found[1])[:BODY_PREVIEW_CHARS]
    if pair_title is not None and not any(key in kept for key in TITLE_KEYS):
        kept["title"] = pair_title
    body_field = _first(fields, BODY_KEYS)
    if body_field is not None:
        body = _readable_body(body_field[1])
    elif fields:
        rest = {k: v for k, v in fields.items() if k not in kept and k != "metadata"}
        body = _readable_body(rest) if rest else ""
    else:
        body = _readable_body(item)
    return RecordSummary(rank, kept, body)


_HEADER_END = "; preview in original order:"
_HEADER = re.compile(r"^(\d+) results(?:, all with ([A-Za-z_]+)=(.*))?" + re.escape(_HEADER_END) + "$")


def _header(total: int, shared: tuple[str, str] | None) -> str:
    if shared is None:
        return f"{total} results{_HEADER_END}"
    return f"{total} results, all with {shared[0]}={shared[1]}{_HEADER_END}"


@dataclass(frozen=True)
class PreviewHeader:
    """A preview's first line, read back: the number of results and the source all of them share."""

    total: int
    shared: tuple[str, str] | None


def parse_preview_header(line: str) -> PreviewHeader | None:
    """The first line of a `retrieval_preview`, or None when `line` is not one (for readers of
    previews, such as the built-in model: the format is defined here only)."""
    match = _HEADER.match(line)
    if match is None:
        return None
    key, value = match.group(2), match.group(3)
    return PreviewHeader(int(match.group(1)), (key, value) if key is not None else None)


def _footers(left_out: int) -> list[str]:
    """What to say about the results left out, the fuller wording first ([] when none is)."""
    if left_out <= 0:
        return []
    return [
        f"{left_out} more results left out of this preview; the full file has all of them.",
        f"{left_out} more results left out.",
    ]


def _none_shown(total: int, budget: int, profile: str) -> str:
    """The count alone, when no result fits: the longest wording within the budget, or ""."""
    for text in (
        f"{total} results, all left out of this preview; the full file has all of them.",
        f"{total} results left out.",
    ):
        if estimate_tokens(text, profile) <= budget:
            return text
    return ""


def retrieval_preview(text: str, budget: int, profile: str = "default") -> str | None:
    """The structured preview of a retrieval result, or None when it is not a recognisable result list.

    Within `budget` tokens: metadata lines first (as many results as fit in about half the budget,
    in order), then the rest of the budget shared out as a body preview per shown result; a footer
    says how many results were left out. When not even one result fits, the preview is the count
    alone, and "" when not even that fits.
    """
    results = _find_result_list(_parse_json(text))
    if not results:  # no list, or no record in it: what else the result says (an error) needs S10
        return None
    total = len(results)
    shared = shared_source(results)
    header = _header(total, shared)
    header_tokens = estimate_tokens(header, profile)
    # Lines are joined at line breaks, so their estimates add up (+1 for each break). Room for the
    # shorter footer is kept while results are chosen (it can count at most `total` left out).
    footer_room = estimate_tokens(_footers(total)[-1], profile) + 1
    used = header_tokens
    summaries: list[RecordSummary] = []
    for rank, item in enumerate(results, start=1):
        summary = summarize_record(rank, item, shared)
        cost = estimate_tokens(summary.line(0), profile) + 1
        if used + cost + footer_room > budget or (used + cost > budget * METADATA_SHARE and summaries):
            break
        summaries.append(summary)
        used += cost
    while summaries:
        metadata = sum(estimate_tokens(summary.line(0), profile) + 1 for summary in summaries)
        for footer in _footers(total - len(summaries)) or [""]:
            frame = header_tokens + (estimate_tokens(footer, profile) + 1 if footer else 0)
            lines = _with_bodies(summaries, max(0, budget - frame - metadata), profile)
            preview = "\n".join([header, *lines, *([footer] if footer else [])])
            if estimate_tokens(preview, profile) <= budget:
                return preview
        summaries.pop()  # the estimates did not add up after all: one result fewer
    return _none_shown(total, budget, profile)


def _with_bodies(summaries: list[RecordSummary], spare_tokens: int, profile: str) -> list[str]:
    """Metadata lines with body previews sized to share `spare_tokens` (shrinking until they fit)."""
    if not summaries:
        return []
    body_chars = min(BODY_PREVIEW_CHARS, max(len(s.body) for s in summaries))
    while True:
        lines = [summary.line(body_chars) for summary in summaries]
        bare = sum(estimate_tokens(summary.line(0), profile) for summary in summaries)
        if body_chars <= 0 or sum(estimate_tokens(line, profile) for line in lines) - bare <= spare_tokens:
            return lines
        body_chars = body_chars * 2 // 3 if body_chars > 12 else 0
