"""What a knowledge-base backend provides (SQLite FTS5 or PostgreSQL full-text search).

A store keeps documents and their chunks, finds candidate chunks for query terms, and counts how
many chunks contain each term; ranking is shared (`ranking.py`). Stores are synchronous: the CLI
calls them directly and agent tools run in a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ctxpress.app.kb.chunking import Chunk
from ctxpress.app.kb.ranking import CandidateChunk, CorpusStats
from ctxpress.app.kb.terms import QueryTerms

Origin = Literal["builtin", "user"]


@dataclass(frozen=True)
class SearchReads:
    """A search's reads: the candidate chunks, and -- when there are any -- term and corpus counts."""

    #: Chunks containing at least one term (those containing all of them first).
    candidates: list[CandidateChunk]
    #: How many chunks contain each term (empty when there are no candidates).
    frequencies: dict[str, int]
    stats: CorpusStats | None


#: Candidate chunks fetched per query strategy (conjunctive, disjunctive, per short term).
CANDIDATE_LIMIT = 400


class KnowledgeBaseError(RuntimeError):
    """The knowledge base cannot be used (missing SQLite features, unreachable database, …).

    `public` is what the model may see (via `query_kb`): no host names, addresses or paths.
    """

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or message


@dataclass(frozen=True)
class DocumentRecord:
    id: str
    title: str
    source: str
    origin: Origin
    sha256: str
    chunk_count: int


class KnowledgeStore(Protocol):
    #: "sqlite" or "postgresql".
    backend: str

    def describe(self) -> str:
        """Where the knowledge base lives, for humans (no password)."""
        ...

    def ensure_schema(self) -> None: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def replace_sources(
        self,
        sources: Sequence[str],
        documents: Sequence[DocumentRecord],
        chunks: Sequence[Chunk],
    ) -> None:
        """In one transaction: delete every document of `sources`, then insert `documents` and `chunks`."""
        ...

    def delete_origin(self, origin: Origin) -> int:
        """Delete every document of an origin; returns how many."""
        ...

    def sources_of(self, document_ids: Sequence[str]) -> dict[str, str]:
        """The stored source of each of `document_ids` that exists."""
        ...

    def documents(self) -> list[DocumentRecord]: ...

    def search_reads(self, terms: QueryTerms, limit: int = CANDIDATE_LIMIT) -> SearchReads:
        """What ranking needs, read in one transaction (one consistent view, one round of the pool)."""
        ...

    @property
    def trigram_index(self) -> bool:
        """Whether substring terms are index-assisted (FTS5 trigram, or pg_trgm)."""
        ...
