"""The knowledge base in a SQLite file, searched with FTS5 and the trigram tokenizer.

The trigram tokenizer (SQLite >= 3.34) indexes every three-character substring, case-folded, so
Chinese text is searchable without a word segmenter: a term of three or more characters is an
FTS5 phrase query. Shorter terms — Chinese words are often two characters — cannot match through
the trigram index and are found with `LIKE` on the same table.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from ctxpress.app.kb.sql_store import Connection, Query, SqlKnowledgeStore
from ctxpress.app.kb.store import KnowledgeBaseError
from ctxpress.app.kb.terms import QueryTerms
from ctxpress.app.owner_only import DIR_MODE, owner_only_sqlite

MIN_SQLITE_VERSION = (3, 34, 0)
BUSY_TIMEOUT_SECONDS = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS kb_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kb_documents (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    source TEXT NOT NULL,
    origin TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    added_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS kb_documents_source ON kb_documents (source);
CREATE TABLE IF NOT EXISTS kb_chunks (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES kb_documents (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    title TEXT NOT NULL,
    source TEXT NOT NULL,
    text TEXT NOT NULL,
    chars INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS kb_chunks_document ON kb_chunks (document_id);
CREATE VIRTUAL TABLE IF NOT EXISTS kb_chunks_fts USING fts5(search_text, tokenize = 'trigram');
CREATE TRIGGER IF NOT EXISTS kb_chunks_indexed AFTER INSERT ON kb_chunks BEGIN
    INSERT INTO kb_chunks_fts (rowid, search_text) VALUES (new.rowid, new.title || char(10) || new.text);
END;
CREATE TRIGGER IF NOT EXISTS kb_chunks_unindexed AFTER DELETE ON kb_chunks BEGIN
    DELETE FROM kb_chunks_fts WHERE rowid = old.rowid;
END;
"""

_CHUNK_COLUMNS = "c.id, c.document_id, c.title, c.source, c.text"


def fts_phrase(term: str) -> str:
    """An FTS5 phrase for `term` (double quotes doubled)."""
    return '"' + term.replace('"', '""') + '"'


def like_pattern(term: str) -> str:
    """`%term%` with LIKE's wildcards escaped (ESCAPE '\\')."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def check_sqlite_support() -> None:
    """Raise `KnowledgeBaseError` unless this Python's SQLite has FTS5 with the trigram tokenizer."""
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        raise KnowledgeBaseError(
            f"the knowledge base needs SQLite {'.'.join(map(str, MIN_SQLITE_VERSION))} or newer for the "
            f"FTS5 trigram tokenizer; this Python has SQLite {sqlite3.sqlite_version}"
        )
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        try:
            connection.execute("CREATE VIRTUAL TABLE probe USING fts5(x, tokenize = 'trigram')")
        except sqlite3.OperationalError as exc:
            raise KnowledgeBaseError(
                f"this Python's SQLite {sqlite3.sqlite_version} lacks FTS5 with the trigram tokenizer ({exc})"
            ) from None


class SqliteKnowledgeStore(SqlKnowledgeStore):
    backend = "sqlite"
    # The format of `datetime.isoformat(timespec="seconds")` in UTC.
    NOW = "strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now')"
    # Take the write lock at once: a reader-turned-writer could fail with SQLITE_BUSY mid-way.
    BEGIN_WRITE = "BEGIN IMMEDIATE"

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> str:
        return f"SQLite FTS5 (trigram) in {self.path.name}"

    @property
    def trigram_index(self) -> bool:
        return True

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS)
        try:
            connection.execute("PRAGMA foreign_keys = ON")
            with connection:  # one transaction: commit on success, roll back on error
                yield connection
        finally:
            connection.close()

    def ensure_schema(self) -> None:
        check_sqlite_support()
        self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        owner_only_sqlite(self.path)  # before SQLite creates it with the umask (its WAL follows)
        with self._connect() as connection:
            connection.execute("PRAGMA journal_mode = WAL")
        with self._connect() as connection:
            connection.executescript(SCHEMA)

    def _delete_sources(self, connection: Connection, sources: Sequence[str]) -> None:
        for source in sources:
            self._delete_documents(connection, "source = ?", (source,))

    def _delete_documents(self, connection: Connection, condition: str, params: Sequence[object]) -> int:
        # Chunks first (their trigger removes the index rows), then the documents.
        connection.execute(
            f"DELETE FROM kb_chunks WHERE document_id IN (SELECT id FROM kb_documents WHERE {condition})",
            params,
        )
        return super()._delete_documents(connection, condition, params)

    def sources_of(self, document_ids: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        with self._connect() as connection:
            for start in range(0, len(document_ids), 500):
                batch = list(document_ids[start : start + 500])
                marks = ",".join("?" * len(batch))
                rows = connection.execute(f"SELECT id, source FROM kb_documents WHERE id IN ({marks})", batch)
                found.update({str(row[0]): str(row[1]) for row in rows})
        return found

    def _candidate_queries(self, terms: QueryTerms, limit: int) -> Iterator[Query]:
        # Chunks with every term first, then chunks with any long term (best FTS rank first),
        # then chunks with each short term.
        base = f"SELECT {_CHUNK_COLUMNS} FROM kb_chunks_fts f JOIN kb_chunks c ON c.rowid = f.rowid"
        conditions, params = _all_terms_condition(terms)
        if conditions and len(terms.terms) > 1:
            yield f"{base} WHERE {conditions} LIMIT ?", [*params, limit]
        if terms.indexed:
            expression = " OR ".join(fts_phrase(term) for term in terms.indexed)
            yield f"{base} WHERE kb_chunks_fts MATCH ? ORDER BY f.rank LIMIT ?", [expression, limit]
        for term in terms.short:
            yield f"{base} WHERE f.search_text LIKE ? ESCAPE '\\' LIMIT ?", [like_pattern(term), limit]

    def _frequency_queries(self, terms: QueryTerms) -> Iterator[tuple[str, Query]]:
        for term in terms.indexed:
            yield (
                term,
                ("SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?", (fts_phrase(term),)),
            )
        for term in terms.short:
            sql = "SELECT count(*) FROM kb_chunks_fts WHERE search_text LIKE ? ESCAPE '\\'"
            yield term, (sql, (like_pattern(term),))


def _all_terms_condition(terms: QueryTerms) -> tuple[str, list[object]]:
    conditions: list[str] = []
    params: list[object] = []
    if terms.indexed:
        conditions.append("kb_chunks_fts MATCH ?")
        params.append(" AND ".join(fts_phrase(term) for term in terms.indexed))
    for term in terms.short:
        conditions.append("f.search_text LIKE ? ESCAPE '\\'")
        params.append(like_pattern(term))
    return " AND ".join(conditions), params
