"""`web_search`: pluggable (a search API by URL and key), absent with a clear message otherwise."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress.app.kb.tools import retrieval_tools
from ctxpress.app.kb.web_search import (
    API_KEY_VARIABLE,
    URL_VARIABLE,
    WebSearchConfig,
    normalize_results,
    search_web,
    web_search_status,
)
from ctxpress.app.server.agents_file import AgentConfigError, AgentDefinition, default_agent
from ctxpress.app.server.knowledge import open_knowledge_base
from ctxpress.app.server.runtime.agents import AgentRegistry
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.app.server.settings import Settings
from ctxpress.compaction.retrieval_preview import retrieval_preview
from tests.conftest import require_shared_data


def banking_pages() -> list[dict[str, Any]]:
    """Real page texts (tau2-bench banking policies) as a search API would return them."""
    folder = require_shared_data("kb", "tau2-banking", "documents")
    documents = [
        json.loads(path.read_text("utf-8"))
        for path in sorted(folder.glob("doc_checking_accounts_evergreen_*.json"))
    ]
    return [
        {
            "title": document["title"],
            "url": f"https://bank.example/policies/{document['id']}",
            "content": document["content"][:300],
            "score": round(1 - rank / 10, 2),
        }
        for rank, document in enumerate(documents)
    ]


class SearchApi(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    shape: ClassVar[str] = "searxng"

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        SearchApi.requests.append(
            {"query": parse_qs(parts.query), "auth": self.headers.get("Authorization"), "path": parts.path}
        )
        pages = banking_pages()
        if SearchApi.shape == "bing":
            body: Any = {
                "webPages": {
                    "value": [{"name": p["title"], "url": p["url"], "snippet": p["content"]} for p in pages]
                }
            }
        elif SearchApi.shape == "broken":
            self.send_response(502)
            self.end_headers()
            return
        else:
            body = {"query": parse_qs(parts.query).get("q", [""])[0], "results": pages}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def search_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SearchApi)
    SearchApi.requests.clear()
    SearchApi.shape = "searxng"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_configured_search_api_answers_in_the_s9_shape(search_api: str) -> None:
    config = WebSearchConfig(url=f"{search_api}/search", api_key="secret-key")
    data = json.loads(search_web(config, "Evergreen monthly fee", limit=3))
    assert data["query"] == "Evergreen monthly fee" and data["total"] == 3
    first = data["results"][0]
    assert (
        first["id"] == "web-1" and first["source"] == "bank.example" and first["url"].startswith("https://")
    )
    assert first["score"] == 1.0 and "Evergreen" in first["title"] and first["content"]
    sent = SearchApi.requests[-1]
    assert (
        sent["query"] == {"q": ["Evergreen monthly fee"], "count": ["3"]}
        and sent["auth"] == "Bearer secret-key"
    )
    preview = retrieval_preview(json.dumps(data), budget=200)
    assert preview is not None and "url=https://bank.example/" in preview


def test_the_url_can_place_the_query_itself_and_other_shapes_are_read(search_api: str) -> None:
    SearchApi.shape = "bing"
    config = WebSearchConfig(url=f"{search_api}/v7/search?mkt=zh-CN&q={{query}}")
    data = json.loads(search_web(config, "常青 账户 月费"))
    assert (
        SearchApi.requests[-1]["query"]["q"] == ["常青 账户 月费"] and SearchApi.requests[-1]["auth"] is None
    )
    assert data["total"] == 5 and data["results"][0]["content"]
    SearchApi.shape = "broken"
    failed = json.loads(search_web(config, "x"))
    assert failed["total"] == 0 and failed["error"] == "the search API answered HTTP 502"
    unreachable = json.loads(search_web(WebSearchConfig(url="http://127.0.0.1:9/search", timeout=2), "x"))
    assert "cannot be reached" in unreachable["error"]


def test_common_result_lists_are_normalised() -> None:
    pages = banking_pages()
    brave = {
        "web": {
            "results": [{"title": p["title"], "url": p["url"], "description": p["content"]} for p in pages]
        }
    }
    assert [r["title"] for r in normalize_results(brave, 2)] == [p["title"] for p in pages[:2]]
    assert normalize_results({"nothing": []}, 5) == []


def test_without_a_search_api_web_search_is_absent_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    status = web_search_status()
    assert (
        not status.configured
        and status.note
        and URL_VARIABLE in status.note
        and API_KEY_VARIABLE in status.note
    )
    agent = default_agent()
    assert "web_search" not in agent.tools and "query_kb" in agent.tools
    assert agent.notices == (status.note,)
    tools = retrieval_tools(open_knowledge_base(Settings(data_dir=tmp_path)))
    assert set(tools.available) == {"query_kb"} and tools.unavailable["web_search"] == status.note
    registry_args = {
        "checkpointer": InMemorySaver(),
        "workdirs": ConversationWorkdirs(tmp_path),
        "extra_tools": tools.available,
        "unavailable_tools": tools.unavailable,
    }
    runtime = AgentRegistry([agent], **registry_args).get("default")
    assert runtime is not None and runtime.notice is not None and URL_VARIABLE in runtime.notice
    with pytest.raises(AgentConfigError, match=URL_VARIABLE):
        AgentRegistry([AgentDefinition(name="web", tools=("web_search",))], **registry_args)


def test_with_a_search_api_the_default_agent_gets_web_search(
    search_api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_VARIABLE, f"{search_api}/search")
    monkeypatch.setenv(API_KEY_VARIABLE, "k")
    agent = default_agent()
    assert agent.tools[-1] == "web_search" and agent.notices == ()
    tools = retrieval_tools(open_knowledge_base(Settings(data_dir=tmp_path)))
    answer = json.loads(tools.available["web_search"].invoke({"query": "Evergreen"}))
    assert answer["total"] == 5 and SearchApi.requests[-1]["auth"] == "Bearer k"
