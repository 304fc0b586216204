"""Reading files into knowledge-base documents: Markdown, plain text and JSON.

- Markdown / text: one document per file, titled by its first heading (else the file name).
- JSON: a list of records becomes one document per record; an object with a `content`-like field
  is one document. Records keep their own `id` and `title` (or `name`) when they have them;
  CrossWOZ-style `[name, {fields}]` pairs are titled by the name. A record without a body field
  reads as `field: value` lines.

A document's `source` is the path relative to the folder that was added (or the file name): the
model sees it in search results, so host paths never appear (S25).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

DocumentFormat = Literal["markdown", "text"]

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".text", ".rst"})
JSON_SUFFIXES = frozenset({".json", ".jsonl"})
SUPPORTED_SUFFIXES = MARKDOWN_SUFFIXES | TEXT_SUFFIXES | JSON_SUFFIXES

ID_FIELDS = ("id", "doc_id", "document_id", "uuid")
TITLE_FIELDS = ("title", "name", "名称", "标题", "heading")
BODY_FIELDS = ("content", "text", "body", "markdown", "page_content", "description", "内容", "正文")
MAX_ID_CHARS = 120
LIST_SEPARATOR = "、"

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_UNSAFE_ID = re.compile(r"[^0-9A-Za-z\u3400-\u9fff_.()-]+")


class DocumentFormatError(ValueError):
    """A file that cannot be read as a knowledge-base document (names the file)."""


@dataclass(frozen=True)
class SourceDocument:
    """One document as read from a file, before chunking."""

    id: str
    title: str
    source: str
    body: str
    format: DocumentFormat

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for part in (self.id, self.title, self.source, self.body):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
        return digest.hexdigest()


def document_id(text: str) -> str:
    """An identifier made of safe characters (letters, digits, CJK, `_.()-`), at most 120 characters."""
    cleaned = _UNSAFE_ID.sub("_", text.strip()).strip("_.") or "document"
    return cleaned[:MAX_ID_CHARS]


def supported_files(paths: Sequence[Path]) -> Iterator[tuple[Path, str]]:
    """Every supported file under `paths`, with its display source, in sorted order.

    A folder contributes its files as `folder-name/relative/path`; a file contributes its name.
    Hidden files and folders are skipped.
    """
    for path in paths:
        if path.is_dir():
            base = path.resolve()
            found = sorted(
                candidate
                for candidate in base.rglob("*")
                if candidate.is_file()
                and candidate.suffix.lower() in SUPPORTED_SUFFIXES
                and not any(part.startswith(".") for part in candidate.relative_to(base).parts)
            )
            for candidate in found:
                yield candidate, f"{base.name}/{candidate.relative_to(base).as_posix()}"
        elif path.is_file():
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise DocumentFormatError(
                    f"{path.name}: unsupported file type (use Markdown, text or JSON: "
                    f"{', '.join(sorted(SUPPORTED_SUFFIXES))})"
                )
            yield path, path.name
        else:
            raise DocumentFormatError(f"{path}: no such file or folder")


def read_documents(path: Path, source: str) -> list[SourceDocument]:
    """The documents in one file (see the module docstring)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentFormatError(f"{source}: not UTF-8 text") from None
    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        return documents_from_json(_parse_json(text, source, jsonl=suffix == ".jsonl"), source)
    doc_format: DocumentFormat = "markdown" if suffix in MARKDOWN_SUFFIXES else "text"
    return [document_from_text(text, source, doc_format)]


def document_from_text(text: str, source: str, doc_format: DocumentFormat) -> SourceDocument:
    heading = _HEADING.search(text) if doc_format == "markdown" else None
    stem = Path(source).stem
    title = heading.group(1).strip() if heading else stem
    return SourceDocument(id=document_id(stem), title=title, source=source, body=text, format=doc_format)


def _parse_json(text: str, source: str, *, jsonl: bool) -> Any:
    try:
        if jsonl:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentFormatError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def documents_from_json(data: Any, source: str) -> list[SourceDocument]:
    stem = document_id(Path(source).stem)
    records: list[Any] = data if isinstance(data, list) else [data]
    width = max(4, len(str(len(records))))
    documents = []
    for index, record in enumerate(records, start=1):
        fallback_id = stem if len(records) == 1 else f"{stem}-{index:0{width}d}"
        document = _record_document(record, source, fallback_id)
        if document is not None:
            documents.append(document)
    if not documents:
        raise DocumentFormatError(f"{source}: no records with text in this JSON")
    return documents


def _record_document(record: Any, source: str, fallback_id: str) -> SourceDocument | None:
    pair_title: str | None = None
    if isinstance(record, list) and len(record) == 2 and isinstance(record[0], str):
        pair_title, record = record[0], record[1]  # CrossWOZ: [name, {fields}]
    if isinstance(record, str):
        record = {"content": record}
    if not isinstance(record, dict):
        return None
    identifier = _first_text(record, ID_FIELDS)
    title = _first_text(record, TITLE_FIELDS) or pair_title or fallback_id
    body_field = next((key for key in BODY_FIELDS if isinstance(record.get(key), str) and record[key]), None)
    if body_field is not None:
        body = record[body_field]
        doc_format: DocumentFormat = "markdown"
    else:
        body = "\n".join(
            f"{key}: {_field_text(value)}"
            for key, value in record.items()
            if key not in ID_FIELDS and value not in (None, "", [], {})
        )
        doc_format = "text"
    if not body.strip():
        return None
    return SourceDocument(
        id=document_id(identifier) if identifier else fallback_id,
        title=title,
        source=source,
        body=body,
        format=doc_format,
    )


def _first_text(record: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = record.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return None


def _field_text(value: Any) -> str:
    if isinstance(value, list):
        return LIST_SEPARATOR.join(_field_text(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
