"""Extractive answers: the sentences of a text that match the question, quoted as written.

Also reads the two shapes a retrieval result reaches the model in: the JSON `query_kb` /
`web_search` return, and the structured preview of an offloaded result (S9) — a header naming
the workdir file, then `#rank key=value | … | body` lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ctxpress.app.kb.sentences import split_sentences
from ctxpress.app.kb.terms import QueryTerms
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.compaction.retrieval_preview import PreviewHeader, parse_preview_header

SENTENCE_CHARS = 160
_PREVIEW_LINE = re.compile(r"^#(\d+) (.*)$")
_PREVIEW_FIELD = re.compile(r"^([A-Za-z_]+)=(.*)$")
RECORD_KEYS = ("id", "doc_id", "document_id", "chunk_id", "title", "name", "source", "url", "score")


@dataclass(frozen=True)
class RetrievedRecord:
    """One search result as the model sees it (full, or from a preview line)."""

    rank: int
    fields: dict[str, str]
    content: str

    @property
    def identifier(self) -> str | None:
        return next(
            (self.fields[key] for key in ("id", "doc_id", "document_id", "chunk_id") if key in self.fields),
            None,
        )

    @property
    def title(self) -> str | None:
        return self.fields.get("title") or self.fields.get("name")


@dataclass(frozen=True)
class RetrievalView:
    """A retrieval result: its records, the total count, and the workdir file when it was offloaded."""

    records: list[RetrievedRecord]
    total: int
    query: str | None = None
    offloaded_path: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def matching_sentences(text: str, terms: QueryTerms, *, limit: int = 2) -> list[str]:
    """Up to `limit` sentences that match most of the query's concepts, in text order, bounded."""
    sentences = split_sentences(text)
    if not sentences:
        return []
    scored = []
    for index, sentence in enumerate(sentences):
        folded = sentence.casefold()
        hits = sum(
            1 for concept in terms.concepts if any(term.casefold() in folded for term in concept.terms)
        )
        if hits:
            scored.append((hits, index))
    best = sorted(scored, key=lambda item: (-item[0], item[1]))[:limit]
    chosen = sorted(index for _, index in best) or [0]
    return [bounded(sentences[index], SENTENCE_CHARS) for index in chosen]


def bounded(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def read_retrieval(text: str) -> RetrievalView | None:
    """The records of a retrieval result in either shape; None when `text` is neither."""
    reference = parse_offload_reference(text)
    if reference is not None:
        return _from_preview(text, reference.path)
    return _from_json(text)


def _from_json(text: str) -> RetrievalView | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return None
    records = []
    for rank, item in enumerate(data["results"], start=1):
        if isinstance(item, dict):
            fields = {key: _text(item[key]) for key in RECORD_KEYS if item.get(key) not in (None, "")}
            body = item.get("content") or item.get("snippet") or item.get("text") or ""
            records.append(RetrievedRecord(rank, fields, _text(body)))
    total = data.get("total")
    return RetrievalView(
        records=records,
        total=total if isinstance(total, int) else len(records),
        query=data.get("query") if isinstance(data.get("query"), str) else None,
        error=data.get("error") if isinstance(data.get("error"), str) else None,
    )


def _from_preview(text: str, path: str) -> RetrievalView | None:
    records: list[RetrievedRecord] = []
    header: PreviewHeader | None = None
    for line in text.splitlines():
        if header is None and (header := parse_preview_header(line)) is not None:
            continue
        match = _PREVIEW_LINE.match(line)
        if match is None:
            continue
        fields: dict[str, str] = {}
        body_parts: list[str] = []
        for part in match.group(2).split(" | "):
            field_match = _PREVIEW_FIELD.match(part)
            if field_match and field_match.group(1) in RECORD_KEYS and not body_parts:
                fields[field_match.group(1)] = field_match.group(2)
            else:
                body_parts.append(part)
        if header is not None and header.shared is not None and header.shared[0] in RECORD_KEYS:
            fields.setdefault(*header.shared)  # named once for all results (S9)
        records.append(RetrievedRecord(int(match.group(1)), fields, " | ".join(body_parts)))
    if header is None:
        return None  # an offloaded text that is not a retrieval result
    return RetrievalView(records=records, total=header.total, offloaded_path=path)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
