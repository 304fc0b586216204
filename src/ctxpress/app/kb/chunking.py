"""Cutting documents into search chunks at headings, lines and sentences.

A Markdown document is cut into sections at its headings; a chunk never spans two sections and is
titled `document title › section heading`. Within a section, lines (and, for long lines,
sentences) are packed into chunks of at most `max_chars` characters; a single sentence longer than
that is cut hard. Chunk ids are `<document id>#<n>`, counted from 1, so they are stable for the
same document text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxpress.app.kb.documents import SourceDocument
from ctxpress.app.kb.sentences import split_sentences

DEFAULT_CHUNK_CHARS = 700
TITLE_SEPARATOR = " › "
_HEADING_LINE = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Chunk:
    id: str
    document_id: str
    position: int
    title: str
    source: str
    text: str


@dataclass(frozen=True)
class _Section:
    heading: str | None
    lines: list[str]


def chunk_document(document: SourceDocument, max_chars: int = DEFAULT_CHUNK_CHARS) -> list[Chunk]:
    sections = (
        _markdown_sections(document.body)
        if document.format == "markdown"
        else [_Section(None, document.body.splitlines())]
    )
    chunks: list[Chunk] = []
    for section in sections:
        title = document.title
        if section.heading and section.heading != document.title:
            title = f"{document.title}{TITLE_SEPARATOR}{section.heading}"
        for text in _pack(section.lines, max_chars):
            position = len(chunks) + 1
            chunks.append(
                Chunk(
                    id=f"{document.id}#{position}",
                    document_id=document.id,
                    position=position,
                    title=title,
                    source=document.source,
                    text=text,
                )
            )
    return chunks


def _markdown_sections(body: str) -> list[_Section]:
    sections = [_Section(None, [])]
    in_fence = False
    for line in body.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING_LINE.match(line)
        if heading:
            sections.append(_Section(heading.group(2).strip(), []))
        else:
            sections[-1].lines.append(line)
    return [section for section in sections if any(line.strip() for line in section.lines)]


def _units(lines: list[str], max_chars: int) -> list[str]:
    """Lines, with long lines cut into sentences and over-long sentences cut hard."""
    units: list[str] = []
    for line in lines:
        stripped = line.rstrip()
        if not stripped.strip():
            units.append("")
            continue
        if len(stripped) <= max_chars:
            units.append(stripped)
            continue
        for sentence in split_sentences(stripped):
            units.extend(sentence[i : i + max_chars] for i in range(0, len(sentence), max_chars))
    return units


def _pack(lines: list[str], max_chars: int) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for unit in _units(lines, max_chars):
        if current and size + len(unit) + 1 > max_chars:
            chunks.append("\n".join(current).strip())
            current, size = [], 0
        if not unit and not current:
            continue  # no chunk starts with a blank line
        current.append(unit)
        size += len(unit) + 1
    if current:
        chunks.append("\n".join(current).strip())
    return [chunk for chunk in chunks if chunk]
