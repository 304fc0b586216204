"""The retrieval tools an agent can name: `query_kb` (always) and `web_search` (when configured)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from langchain_core.tools import BaseTool, StructuredTool

from ctxpress.app.kb.knowledge_base import DEFAULT_RESULT_LIMIT, KnowledgeBase
from ctxpress.app.kb.store import KnowledgeBaseError
from ctxpress.app.kb.web_search import WebSearchConfig, web_search_status, web_search_tool

logger = logging.getLogger(__name__)


def query_kb_tool(knowledge_base: KnowledgeBase) -> BaseTool:
    def query_kb(query: str, limit: int = DEFAULT_RESULT_LIMIT) -> str:
        """Search the knowledge base (the ctxpress documentation and every document added with `ctxpress kb add`).

        Chinese and English. Returns JSON {query, total, results: [{id, document_id, title, source, score,
        content}]}, best first.
        """
        try:
            return knowledge_base.search(query, limit).to_json()
        except KnowledgeBaseError as exc:
            logger.error("query_kb: %s", exc)  # the details (host, port) go to the log, not to the model
            error = {"query": query, "total": 0, "results": [], "error": exc.public}
            return json.dumps(error, ensure_ascii=False)

    return StructuredTool.from_function(query_kb)


@dataclass(frozen=True)
class RetrievalTools:
    """Tools by name for the agent registry, and why optional ones are missing."""

    available: dict[str, BaseTool]
    unavailable: dict[str, str] = field(default_factory=dict)


def retrieval_tools(knowledge_base: KnowledgeBase) -> RetrievalTools:
    """`query_kb` over `knowledge_base`, and `web_search` if a search API is configured."""
    available = {"query_kb": query_kb_tool(knowledge_base)}
    unavailable: dict[str, str] = {}
    config = WebSearchConfig.from_env()
    if config is not None:
        available["web_search"] = web_search_tool(config)
    else:
        unavailable["web_search"] = web_search_status().note or "not configured"
    return RetrievalTools(available, unavailable)
