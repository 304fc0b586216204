"""What the SQLite and PostgreSQL knowledge-base stores share: the same tables, the same statements.

A backend gives its connection, its parameter placeholder, its "now", how it deletes documents
and how it searches (candidate and frequency queries); everything else is written once here.
Statements are written with `?` placeholders and translated for drivers that use `%s`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from ctxpress.app.kb.chunking import Chunk
from ctxpress.app.kb.ranking import CandidateChunk, CorpusStats
from ctxpress.app.kb.store import CANDIDATE_LIMIT, DocumentRecord, Origin, SearchReads
from ctxpress.app.kb.terms import QueryTerms

#: A statement (plain text or a driver's composed SQL) and its parameters.
Query = tuple[Any, Sequence[object]]


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def executemany(self, query: Any, params_seq: Any, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The part of a DB-API connection (sqlite3 or psycopg) the stores use."""

    def execute(self, query: Any, params: Any = ..., /) -> Cursor: ...

    def cursor(self) -> Cursor: ...


class SqlKnowledgeStore(ABC):
    """The statements both backends run the same way (see the module docstring)."""

    backend: str
    #: The driver's parameter placeholder.
    PLACEHOLDER: ClassVar[str] = "?"
    #: SQL for the time a document is stored.
    NOW: ClassVar[str]
    #: The statement that starts a write transaction, where the driver's implicit one is not enough.
    BEGIN_WRITE: ClassVar[str | None] = None

    @abstractmethod
    def _connect(self) -> AbstractContextManager[Connection]:
        """A connection whose block is one transaction (committed on success, rolled back on error)."""

    @abstractmethod
    def _candidate_queries(self, terms: QueryTerms, limit: int) -> Iterator[Query]:
        """Queries of candidate chunks (`id, document_id, title, source, text`), best first."""

    @abstractmethod
    def _frequency_queries(self, terms: QueryTerms) -> Iterator[tuple[str, Query]]:
        """For each term, the query that counts the chunks containing it."""

    @abstractmethod
    def _delete_sources(self, connection: Connection, sources: Sequence[str]) -> None:
        """Delete every document (and chunk) of `sources`."""

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self.PLACEHOLDER)

    def _delete_documents(self, connection: Connection, condition: str, params: Sequence[object]) -> int:
        """Delete the documents matching `condition` (their chunks go by cascade); returns how many."""
        return connection.execute(self._sql(f"DELETE FROM kb_documents WHERE {condition}"), params).rowcount

    def get_meta(self, key: str) -> str | None:
        with self._connect() as connection:
            row = connection.execute(self._sql("SELECT value FROM kb_meta WHERE key = ?"), (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._connect() as connection:
            connection.execute(
                self._sql(
                    "INSERT INTO kb_meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                (key, value),
            )

    def replace_sources(
        self, sources: Sequence[str], documents: Sequence[DocumentRecord], chunks: Sequence[Chunk]
    ) -> None:
        with self._connect() as connection:
            if self.BEGIN_WRITE:
                connection.execute(self.BEGIN_WRITE)
            if sources:
                self._delete_sources(connection, sources)
            cursor = connection.cursor()
            cursor.executemany(
                self._sql(
                    "INSERT INTO kb_documents (id, title, source, origin, sha256, chunk_count, added_at) "
                    f"VALUES (?, ?, ?, ?, ?, ?, {self.NOW})"
                ),
                [(d.id, d.title, d.source, d.origin, d.sha256, d.chunk_count) for d in documents],
            )
            cursor.executemany(
                self._sql(
                    "INSERT INTO kb_chunks (id, document_id, position, title, source, text, chars) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                [(c.id, c.document_id, c.position, c.title, c.source, c.text, len(c.text)) for c in chunks],
            )

    def delete_origin(self, origin: Origin) -> int:
        with self._connect() as connection:
            return self._delete_documents(connection, "origin = ?", (origin,))

    def documents(self) -> list[DocumentRecord]:
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT id, title, source, origin, sha256, chunk_count FROM kb_documents ORDER BY source, id"
            ).fetchall()
        return [DocumentRecord(*row) for row in rows]

    def search_reads(self, terms: QueryTerms, limit: int = CANDIDATE_LIMIT) -> SearchReads:
        with self._connect() as connection:
            candidates = self._candidates(connection, terms, limit)
            if not candidates:
                return SearchReads([], {}, None)
            return SearchReads(candidates, self._frequencies(connection, terms), self._stats(connection))

    @staticmethod
    def _stats(connection: Connection) -> CorpusStats:
        chunks, average = connection.execute("SELECT count(*), avg(chars) FROM kb_chunks").fetchone()
        (documents,) = connection.execute("SELECT count(*) FROM kb_documents").fetchone()
        return CorpusStats(int(chunks), int(documents), float(average or 0.0))

    def _candidates(self, connection: Connection, terms: QueryTerms, limit: int) -> list[CandidateChunk]:
        found: dict[str, CandidateChunk] = {}
        for query, params in self._candidate_queries(terms, limit):
            for row in connection.execute(query, params):
                found.setdefault(row[0], CandidateChunk(*row))
        return list(found.values())

    def _frequencies(self, connection: Connection, terms: QueryTerms) -> dict[str, int]:
        counts: dict[str, int] = {}
        for term, (query, params) in self._frequency_queries(terms):
            row = connection.execute(query, params).fetchone()
            counts[term] = int(row[0]) if row else 0
        return counts
