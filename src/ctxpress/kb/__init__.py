"""A local knowledge base: documents in SQLite FTS5 (trigram) or PostgreSQL full-text search.

`query_kb` (the tool, `ctxpress.kb.tools`) returns the JSON shape the S9 retrieval preview keeps;
`web_search` is optional and pluggable. The project's own documentation is the default content.
Where the chat service keeps its knowledge base: `ctxpress.kb.service`.
"""

from ctxpress.kb.knowledge_base import (
    DEFAULT_RESULT_LIMIT,
    IngestReport,
    KnowledgeBase,
    SearchHit,
    SearchResult,
    builtin_documents,
)
from ctxpress.kb.store import DocumentRecord, KnowledgeBaseError

__all__ = [
    "DEFAULT_RESULT_LIMIT",
    "DocumentRecord",
    "IngestReport",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "SearchHit",
    "SearchResult",
    "builtin_documents",
]
