"""A local knowledge base: documents in SQLite FTS5 (trigram) or PostgreSQL full-text search.

`query_kb` (the tool, `ctxpress.app.kb.tools`) returns the JSON shape the S9 retrieval preview keeps;
`web_search` is optional and pluggable. The project's own documentation is the default content.
Where the chat service keeps its knowledge base: `ctxpress.app.server.knowledge`.
"""

from ctxpress.app.kb.knowledge_base import (
    DEFAULT_RESULT_LIMIT,
    IngestReport,
    KnowledgeBase,
    SearchHit,
    SearchResult,
    builtin_documents,
)
from ctxpress.app.kb.store import DocumentRecord, KnowledgeBaseError

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
