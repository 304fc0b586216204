"""`KnowledgeBase`: ingest files, search, and the result shape `query_kb` returns (S9).

    kb = open_knowledge_base(settings)          # `ctxpress.app.server.knowledge`: where the chat service keeps it
    kb.add_paths([Path("docs")])                 # Markdown, text, JSON; re-adding a file replaces it
    kb.search("北京 烤鸭").to_json()             # {"query", "total", "results": [{id, title, source, score, content}]}

On first use the project's own documentation (shipped in the package) is ingested as the
`builtin` documents, and re-ingested whenever the shipped text changes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from ctxpress.app.kb.chunking import DEFAULT_CHUNK_CHARS, Chunk, chunk_document
from ctxpress.app.kb.documents import SourceDocument, document_from_text, read_documents, supported_files
from ctxpress.app.kb.ranking import rank_candidates
from ctxpress.app.kb.store import DocumentRecord, KnowledgeStore, Origin
from ctxpress.app.kb.terms import query_terms

DEFAULT_RESULT_LIMIT = 8
MAX_RESULT_LIMIT = 50
#: Chunks of one document a result list holds at most (more distinct documents are more useful).
RESULTS_PER_DOCUMENT = 2
BUILTIN_DOCS_PACKAGE = "ctxpress.app.kb"
BUILTIN_DOCS_FOLDER = "builtin_docs"
BUILTIN_SOURCE_PREFIX = "ctxpress-docs/"
BUILTIN_DIGEST_KEY = "builtin_docs_sha256"
#: Documents stored per transaction while ingesting (whole files: a file is never split).
INGEST_BATCH_DOCUMENTS = 2000


@dataclass(frozen=True)
class SearchHit:
    id: str
    document_id: str
    title: str
    source: str
    score: float
    content: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "document_id": self.document_id,
            "title": self.title,
            "source": self.source,
            "score": self.score,
            "content": self.content,
        }


@dataclass(frozen=True)
class SearchResult:
    query: str
    terms: tuple[str, ...]
    hits: list[SearchHit]

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "total": len(self.hits), "results": [hit.as_dict() for hit in self.hits]}

    def to_json(self) -> str:
        """What `query_kb` returns: JSON with the fields the S9 preview keeps."""
        return json.dumps(self.as_dict(), ensure_ascii=False)


@dataclass
class IngestReport:
    files: int = 0
    documents: int = 0
    chunks: int = 0
    renamed_ids: dict[str, str] = field(default_factory=dict)


class KnowledgeBase:
    def __init__(
        self, store: KnowledgeStore, *, builtin_docs: bool = True, chunk_chars: int = DEFAULT_CHUNK_CHARS
    ) -> None:
        self.store = store
        self.builtin_docs = builtin_docs
        self.chunk_chars = chunk_chars
        self._ready = False
        self._ready_lock = threading.Lock()

    def describe(self) -> str:
        return self.store.describe()

    def ensure_ready(self) -> None:
        """Create the tables and (re)ingest the shipped documentation when it changed; once per object."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            self.store.ensure_schema()
            if self.builtin_docs:
                self._sync_builtin_docs()
            self._ready = True

    def _sync_builtin_docs(self) -> None:
        documents = builtin_documents()
        digest = hashlib.sha256("".join(document.sha256 for document in documents).encode()).hexdigest()
        if self.store.get_meta(BUILTIN_DIGEST_KEY) == digest:
            return
        self.store.delete_origin("builtin")
        self._store_documents(documents, "builtin", IngestReport())
        self.store.set_meta(BUILTIN_DIGEST_KEY, digest)

    def add_paths(self, paths: Sequence[Path], *, origin: Origin = "user") -> IngestReport:
        """Ingest every supported file under `paths`; a file added again replaces its earlier version."""
        self.ensure_ready()
        report = IngestReport()
        batch: list[SourceDocument] = []
        for path, source in supported_files(paths):
            batch.extend(read_documents(path, source))
            report.files += 1
            if len(batch) >= INGEST_BATCH_DOCUMENTS:
                self._store_documents(batch, origin, report)
                batch = []
        if batch:
            self._store_documents(batch, origin, report)
        return report

    def _store_documents(
        self, documents: Sequence[SourceDocument], origin: Origin, report: IngestReport
    ) -> None:
        sources = sorted({document.source for document in documents})
        unique = self._unique_ids(documents, report)
        records: list[DocumentRecord] = []
        chunks: list[Chunk] = []
        for document in unique:
            document_chunks = chunk_document(document, self.chunk_chars)
            records.append(
                DocumentRecord(
                    id=document.id,
                    title=document.title,
                    source=document.source,
                    origin=origin,
                    sha256=document.sha256,
                    chunk_count=len(document_chunks),
                )
            )
            chunks.extend(document_chunks)
        self.store.replace_sources(sources, records, chunks)
        report.documents += len(records)
        report.chunks += len(chunks)

    def _unique_ids(self, documents: Sequence[SourceDocument], report: IngestReport) -> list[SourceDocument]:
        """Ids already used by another source (or twice in this batch) get a suffix from their source."""
        stored = self.store.sources_of([document.id for document in documents])
        seen: set[str] = set()
        unique = []
        for document in documents:
            identifier = document.id
            if identifier in seen or stored.get(identifier, document.source) != document.source:
                suffix = hashlib.sha256(f"{document.source}\x00{len(seen)}".encode()).hexdigest()[:8]
                identifier = f"{document.id}-{suffix}"
                report.renamed_ids[document.id] = identifier
            seen.add(identifier)
            unique.append(
                document
                if identifier == document.id
                else SourceDocument(
                    identifier, document.title, document.source, document.body, document.format
                )
            )
        return unique

    def search(
        self, query: str, limit: int = DEFAULT_RESULT_LIMIT, *, per_document: int = RESULTS_PER_DOCUMENT
    ) -> SearchResult:
        self.ensure_ready()
        limit = max(1, min(limit, MAX_RESULT_LIMIT))
        terms = query_terms(query)
        if not terms:
            return SearchResult(query, (), [])
        reads = self.store.search_reads(terms)
        if not reads.candidates or reads.stats is None:
            return SearchResult(query, terms.terms, [])
        ranked = rank_candidates(
            reads.candidates,
            terms,
            reads.frequencies,
            reads.stats,
            limit=limit,
            per_document=per_document,
        )
        hits = [
            SearchHit(
                id=item.chunk.id,
                document_id=item.chunk.document_id,
                title=item.chunk.title,
                source=item.chunk.source,
                score=item.score,
                content=item.chunk.text,
            )
            for item in ranked
        ]
        return SearchResult(query, terms.terms, hits)

    def documents(self) -> list[DocumentRecord]:
        self.ensure_ready()
        return self.store.documents()


def builtin_documents() -> list[SourceDocument]:
    """The project's documentation shipped in the package (`ctxpress/app/kb/builtin_docs/*.md`)."""
    folder = files(BUILTIN_DOCS_PACKAGE).joinpath(BUILTIN_DOCS_FOLDER)
    documents = []
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".md"):
            text = entry.read_text(encoding="utf-8")
            document = document_from_text(text, BUILTIN_SOURCE_PREFIX + entry.name, "markdown")
            documents.append(
                SourceDocument(
                    f"ctxpress-{document.id}", document.title, document.source, document.body, "markdown"
                )
            )
    return documents
