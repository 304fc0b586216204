"""The knowledge base in the service's PostgreSQL database, searched with full-text search.

Words of Latin script and digits go through `to_tsvector('simple', …)` (a GIN index, prefix
queries: `fee` finds `fees`). PostgreSQL's parser does not segment Chinese — a run of Chinese
characters is one "word" — so terms containing CJK characters (and identifiers a tsquery cannot
hold, like `thread_busy`) are matched as substrings of the chunk text (`LIKE` for terms without letter case, `ILIKE` otherwise). When the `pg_trgm`
extension is installed (or can be), a trigram GIN index makes those scans index-assisted for terms
of three or more characters; without it they are sequential scans, still correct.

The tables (`kb_meta`, `kb_documents`, `kb_chunks`) live in the schema the connection's
`search_path` selects, like the service's own tables.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from ctxpress.app.kb.sql_store import Connection, Query, SqlKnowledgeStore
from ctxpress.app.kb.store import KnowledgeBaseError
from ctxpress.app.kb.terms import QueryTerms

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10
#: Serialises schema creation across service processes (any constant shared by all of them).
SCHEMA_LOCK_KEY = 0x6B62_5F73_6368  # "kb_sch"
_TSQUERY_WORD = re.compile(r"^[0-9a-z]+$")

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS kb_meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE IF NOT EXISTS kb_documents (
        id text PRIMARY KEY,
        title text NOT NULL,
        source text NOT NULL,
        origin text NOT NULL,
        sha256 text NOT NULL,
        chunk_count integer NOT NULL,
        added_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS kb_documents_source ON kb_documents (source)",
    """CREATE TABLE IF NOT EXISTS kb_chunks (
        id text PRIMARY KEY,
        document_id text NOT NULL REFERENCES kb_documents (id) ON DELETE CASCADE,
        position integer NOT NULL,
        title text NOT NULL,
        source text NOT NULL,
        text text NOT NULL,
        chars integer NOT NULL,
        search_text text GENERATED ALWAYS AS (title || E'\\n' || text) STORED,
        search_vector tsvector GENERATED ALWAYS AS (to_tsvector('simple', title || E'\\n' || text)) STORED
    )""",
    "CREATE INDEX IF NOT EXISTS kb_chunks_document ON kb_chunks (document_id)",
    "CREATE INDEX IF NOT EXISTS kb_chunks_search_vector ON kb_chunks USING gin (search_vector)",
]
TRIGRAM_INDEX = "kb_chunks_search_trgm"

_CHUNK_COLUMNS = "id, document_id, title, source, text"


def tsquery_prefix(term: str) -> str | None:
    """`term:*` for a plain lower-case word or number; None for anything a tsquery cannot hold."""
    return f"{term}:*" if _TSQUERY_WORD.fullmatch(term) else None


def ilike_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def uses_full_text(term: str) -> bool:
    """Whether a term goes through the tsvector (Latin words, numbers) rather than a LIKE scan."""
    return tsquery_prefix(term) is not None


class PostgresKnowledgeStore(SqlKnowledgeStore):
    backend = "postgresql"
    PLACEHOLDER = "%s"
    NOW = "now()"

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._trigram: bool | None = None

    def describe(self) -> str:
        try:
            info = psycopg.conninfo.conninfo_to_dict(self.conninfo)
        except psycopg.ProgrammingError:
            return "PostgreSQL full-text search"
        where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        return f"PostgreSQL full-text search in {where}"

    @property
    def trigram_index(self) -> bool:
        if self._trigram is None:
            with self._connect() as connection:
                self._trigram = _has_trigram_index(connection)
        return self._trigram

    @contextlib.contextmanager
    def _connect(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            connection = psycopg.connect(self.conninfo, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg.OperationalError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise KnowledgeBaseError(
                f"the knowledge-base database is not reachable: {first_line}",
                public="the knowledge-base database is not reachable",
            ) from None
        with connection:  # commits on success, rolls back on error, closes
            yield connection

    def ensure_schema(self) -> None:
        with self._connect() as connection:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            for statement in SCHEMA:
                connection.execute(statement)
            trigram_schema = _pg_trgm_schema(connection)
            if trigram_schema is not None:
                operator_class = sql.SQL("{}.gin_trgm_ops").format(sql.Identifier(trigram_schema))
                connection.execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {} ON kb_chunks USING gin (search_text {})").format(
                        sql.Identifier(TRIGRAM_INDEX), operator_class
                    )
                )
            else:
                logger.info("pg_trgm is not available: Chinese knowledge-base terms are matched by scanning")
            self._trigram = trigram_schema is not None

    def _delete_sources(self, connection: Connection, sources: Sequence[str]) -> None:
        self._delete_documents(connection, "source = ANY(?)", (list(sources),))

    def sources_of(self, document_ids: Sequence[str]) -> dict[str, str]:
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT id, source FROM kb_documents WHERE id = ANY(%s)", (list(document_ids),)
            ).fetchall()
        return {str(row[0]): str(row[1]) for row in rows}

    def _candidate_queries(self, terms: QueryTerms, limit: int) -> Iterator[Query]:
        select = sql.SQL(f"SELECT {_CHUNK_COLUMNS} FROM kb_chunks WHERE ")
        conditions = [_term_condition(term) for term in terms.terms]
        if len(conditions) > 1:
            joined = sql.SQL(" AND ").join(condition for condition, _ in conditions)
            params = [param for _, term_params in conditions for param in term_params]
            yield select + joined + sql.SQL(" LIMIT %s"), [*params, limit]
        words = [prefix for term in terms.terms if uses_full_text(term) and (prefix := tsquery_prefix(term))]
        if words:
            query = " | ".join(words)
            yield (
                select
                + sql.SQL(
                    "search_vector @@ to_tsquery('simple', %s) "
                    "ORDER BY ts_rank(search_vector, to_tsquery('simple', %s)) DESC, id LIMIT %s"
                ),
                [query, query, limit],
            )
        for term in terms.terms:
            if not uses_full_text(term):
                condition, params = _term_condition(term)
                yield select + condition + sql.SQL(" LIMIT %s"), [*params, limit]

    def _frequency_queries(self, terms: QueryTerms) -> Iterator[tuple[str, Query]]:
        for term in terms.terms:
            condition, params = _term_condition(term)
            yield term, (sql.SQL("SELECT count(*) FROM kb_chunks WHERE {}").format(condition), params)


def _term_condition(term: str) -> tuple[sql.SQL, list[object]]:
    prefix = tsquery_prefix(term)
    if prefix is not None:
        return sql.SQL("search_vector @@ to_tsquery('simple', %s)"), [prefix]
    if term.lower() == term.upper():  # no letter case (Chinese): LIKE, much cheaper than ILIKE
        return sql.SQL("search_text LIKE %s"), [ilike_pattern(term)]
    return sql.SQL("search_text ILIKE %s"), [ilike_pattern(term)]


def _pg_trgm_schema(connection: psycopg.Connection[Any]) -> str | None:
    """The schema pg_trgm is installed in, installing it when allowed; None when it is unavailable."""
    query = (
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_trgm'"
    )
    row = connection.execute(query).fetchone()
    if row is not None:
        return str(row[0])
    available = connection.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'").fetchone()
    if available is None:
        return None
    try:
        with connection.transaction():  # a savepoint: a refusal must not abort the schema transaction
            connection.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except psycopg.Error as exc:
        logger.info("pg_trgm cannot be installed (%s)", type(exc).__name__)
        return None
    row = connection.execute(query).fetchone()
    return str(row[0]) if row else None


def _has_trigram_index(connection: psycopg.Connection[Any]) -> bool:
    row = connection.execute(
        "SELECT 1 FROM pg_indexes WHERE indexname = %s AND schemaname = current_schema()", (TRIGRAM_INDEX,)
    ).fetchone()
    return row is not None
