"""S9: structured previews of retrieval results (`query_kb`, `web_search`).

The result is parsed as JSON. In the original order and within the budget the preview keeps the
number of results, identifiers, source, title, URL, score and a bounded body preview, and says how
many results it left out. Anything unexpected returns None so the caller falls back to S10.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxpress.tokens import estimate_tokens

RETRIEVAL_TOOLS = frozenset({"query_kb", "web_search"})
RESULT_LIST_KEYS = ("results", "documents", "items", "data", "hits", "chunks", "records", "docs")
ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "file_id", "knowledge_id", "segment_id", "uuid")
SOURCE_KEYS = ("source", "file_name", "filename", "path", "site", "domain")
TITLE_KEYS = ("title", "name", "heading", "document_name")
URL_KEYS = ("url", "link", "href", "uri")
SCORE_KEYS = ("score", "relevance_score", "similarity", "rerank_score", "distance")
BODY_KEYS = ("content", "text", "snippet", "body", "page_content", "chunk", "summary", "description")
#: Characters of body kept per result; the whole preview is still bounded by the token budget.
BODY_PREVIEW_CHARS = 160


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


def _scalar(value: Any) -> str | int | float | bool:
    if isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, ensure_ascii=False)[:BODY_PREVIEW_CHARS]


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


def summarize_record(rank: int, item: Any) -> dict[str, Any]:
    fields, pair_title = _flatten(item)
    line: dict[str, Any] = {"rank": rank}
    for label, keys in (("id", ID_KEYS), ("source", SOURCE_KEYS), ("title", TITLE_KEYS), ("url", URL_KEYS)):
        found = _first(fields, keys)
        if found is not None:
            line[label if found[0] == label else found[0]] = _scalar(found[1])
    if pair_title is not None and "title" not in line:
        line["title"] = pair_title
    score = _first(fields, SCORE_KEYS)
    if score is not None:
        line[score[0]] = _scalar(score[1])
    body = _first(fields, BODY_KEYS)
    if body is not None:
        text = body[1] if isinstance(body[1], str) else json.dumps(body[1], ensure_ascii=False)
    elif fields:
        used = set(line)
        rest = {k: v for k, v in fields.items() if k not in used and k != "metadata"}
        text = json.dumps(rest, ensure_ascii=False) if rest else ""
    else:
        text = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
    text = " ".join(text[: BODY_PREVIEW_CHARS * 2].split())
    if text:
        line["preview"] = text[:BODY_PREVIEW_CHARS] + ("…" if len(text) > BODY_PREVIEW_CHARS else "")
    return line


def retrieval_preview(text: str, budget: int, profile: str = "default") -> str | None:
    """The structured preview of a retrieval result, or None when it is not a recognisable result list."""
    results = _find_result_list(_parse_json(text))
    if results is None:
        return None
    total = len(results)
    lines = [f"{total} results; preview in original order:"]
    used = estimate_tokens(lines[0], profile)
    kept = 0
    for rank, item in enumerate(results, start=1):
        line = json.dumps(summarize_record(rank, item), ensure_ascii=False)
        cost = estimate_tokens(line, profile) + 1
        if used + cost > budget:
            break
        lines.append(line)
        used += cost
        kept += 1
    if kept < total:
        lines.append(f"{total - kept} more results left out of this preview; the full file has all of them.")
    return "\n".join(lines)
