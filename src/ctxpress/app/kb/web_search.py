"""`web_search`: a pluggable web-search tool, present only when a search API is configured.

Configuration (environment): `CTXPRESS_WEB_SEARCH_URL` — the API's endpoint; a `{query}` in it is
replaced by the URL-encoded query, otherwise `q=<query>&count=<limit>` is appended — and
optionally `CTXPRESS_WEB_SEARCH_API_KEY`, sent as `Authorization: Bearer <key>`. The answer may be
any JSON with a result list under a common key (`results`, `items`, `organic`, `web.results`,
`webPages.value`, …); each result becomes `{id, title, url, source, score?, content}`, the shape the
S9 preview keeps.

Without a URL the tool does not exist; `web_search_status()` says so in words for the agent list.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlsplit

import httpx
from langchain_core.tools import BaseTool, StructuredTool

URL_VARIABLE = "CTXPRESS_WEB_SEARCH_URL"
API_KEY_VARIABLE = "CTXPRESS_WEB_SEARCH_API_KEY"
QUERY_PLACEHOLDER = "{query}"
DEFAULT_TIMEOUT_SECONDS = 15.0
DEFAULT_RESULTS = 5
MAX_RESULTS = 20
RESULT_LIST_PATHS = (
    ("results",),
    ("items",),
    ("organic",),
    ("organic_results",),
    ("hits",),
    ("data",),
    ("web", "results"),
    ("webPages", "value"),
    ("data", "results"),
)
TITLE_KEYS = ("title", "name")
URL_KEYS = ("url", "link", "href")
SNIPPET_KEYS = ("snippet", "content", "description", "body", "text", "summary")
SCORE_KEYS = ("score", "relevance_score", "relevance")

NOT_CONFIGURED = (
    f"web_search is not available: no search API is configured (set {URL_VARIABLE}, and {API_KEY_VARIABLE} "
    "if the API needs a key)."
)


@dataclass(frozen=True)
class WebSearchConfig:
    url: str
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WebSearchConfig | None:
        values = os.environ if environ is None else environ
        url = values.get(URL_VARIABLE, "").strip()
        if not url:
            return None
        key = values.get(API_KEY_VARIABLE, "").strip() or None
        return cls(url=url, api_key=key)

    def request_url(self, query: str, limit: int) -> tuple[str, dict[str, str | int]]:
        if QUERY_PLACEHOLDER in self.url:
            return self.url.replace(QUERY_PLACEHOLDER, quote_plus(query)), {}
        return self.url, {"q": query, "count": limit}


@dataclass(frozen=True)
class WebSearchStatus:
    configured: bool
    note: str | None


def web_search_status(environ: Mapping[str, str] | None = None) -> WebSearchStatus:
    """Whether `web_search` exists here, and the note the agent list shows when it does not."""
    config = WebSearchConfig.from_env(environ)
    return WebSearchStatus(True, None) if config else WebSearchStatus(False, NOT_CONFIGURED)


def normalize_results(payload: Any, limit: int) -> list[dict[str, Any]]:
    """Result records in the S9 shape, from the JSON of any of the common search APIs."""
    items = _result_list(payload)
    results = []
    for rank, item in enumerate(items[:limit], start=1):
        if not isinstance(item, dict):
            continue
        url = _first(item, URL_KEYS)
        record: dict[str, Any] = {
            "id": f"web-{rank}",
            "title": _first(item, TITLE_KEYS) or url or f"result {rank}",
            "url": url,
            "source": urlsplit(url).hostname if url else None,
        }
        score = next((item[key] for key in SCORE_KEYS if isinstance(item.get(key), int | float)), None)
        if score is not None:
            record["score"] = score
        record["content"] = _first(item, SNIPPET_KEYS) or ""
        results.append({key: value for key, value in record.items() if value is not None})
    return results


def _result_list(payload: Any) -> list[Any]:
    if isinstance(payload, list):
        return payload
    for path in RESULT_LIST_PATHS:
        node = payload
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, list):
            return node
    return []


def _first(item: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((str(item[key]) for key in keys if isinstance(item.get(key), str) and item[key]), None)


def search_web(config: WebSearchConfig, query: str, limit: int = DEFAULT_RESULTS) -> str:
    """The JSON text `web_search` returns (errors included, so the agent can say what failed)."""
    limit = max(1, min(limit, MAX_RESULTS))
    url, params = config.request_url(query, limit)
    headers = {"Accept": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    try:
        # No `params` at all when the URL holds the query: httpx would replace the URL's query string.
        response = httpx.get(url, params=params or None, headers=headers, timeout=config.timeout)
        response.raise_for_status()
        results = normalize_results(response.json(), limit)
    except httpx.HTTPStatusError as exc:
        return _error(query, f"the search API answered HTTP {exc.response.status_code}")
    except httpx.HTTPError as exc:
        return _error(query, f"the search API cannot be reached ({type(exc).__name__})")
    except ValueError:
        return _error(query, "the search API did not answer with JSON")
    return json.dumps({"query": query, "total": len(results), "results": results}, ensure_ascii=False)


def _error(query: str, message: str) -> str:
    return json.dumps({"query": query, "total": 0, "results": [], "error": message}, ensure_ascii=False)


def web_search_tool(config: WebSearchConfig) -> BaseTool:
    def web_search(query: str, limit: int = DEFAULT_RESULTS) -> str:
        """Search the web. Returns JSON {query, total, results: [{id, title, url, source, score, content}]}."""
        return search_web(config, query, limit)

    return StructuredTool.from_function(web_search)
