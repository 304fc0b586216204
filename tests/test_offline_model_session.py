"""The README's promise, over real HTTP on SQLite and PostgreSQL: with no model configured, the default
agent (built-in offline model, `query_kb` over the knowledge base, workdir tools, compression) drives
a conversation through search → large result → L1 → L2 → manual compression.

The knowledge base gets the real CrossWOZ and tau2-bench documents through `ctxpress kb add`, into
the same data directory / database the service then uses."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ctxpress.app.cli import app
from ctxpress.app.models import BUILTIN_LABEL
from ctxpress.app.testing.api import SseEvent, create_conversation, read_events, send
from tests.conftest import require_shared_data
from tests.server.conftest import (
    ServerFactory,
    SettingsFactory,
    backend,
    database_url,
    make_settings,
    postgres_database,
    start_server,
)

#: The service tests' fixtures (both databases, a live server), used here by name.
SERVICE_FIXTURES = (backend, database_url, make_settings, postgres_database, start_server)

# Small numbers so a few real searches cross them: the default agent reads these at start.
COMPRESSION_ENV = {
    "CTXPRESS_SUMMARY_THRESHOLD": "2",  # 2,048 tokens: one raw search result is above it, its preview is not
    "CTXPRESS_SUMMARY_TOOL_RESULT_TOKEN_LIMIT": "300",
    "CTXPRESS_SUMMARY_KEEP_MESSAGES": "4",
}
QUESTIONS = [
    "故宫附近有什么酒店？",
    "烤鸭 人均消费",
    "What is the monthly fee of the Evergreen Account?",
    "颐和园的门票多少钱？",
    "How do I dispute a credit card charge?",
    "王府井有哪些餐馆？",
]


def turn(client: httpx.Client, conversation_id: str, text: str) -> list[SseEvent]:
    accepted = send(client, conversation_id, text)
    events = read_events(client, accepted["run"]["id"])
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "succeeded", events[-1].data
    return events


def of_type(events: list[SseEvent], event_type: str) -> list[dict[str, Any]]:
    return [event.data for event in events if event.type == event_type]


def answer(events: list[SseEvent]) -> str:
    texts = [data["content"] for data in of_type(events, "message") if data.get("content")]
    return str(texts[-1])


def test_the_default_agent_searches_compacts_summarises_and_compresses_on_demand(
    start_server: ServerFactory, make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in COMPRESSION_ENV.items():
        monkeypatch.setenv(name, value)
    settings = make_settings()
    options = ["--data-dir", str(settings.data_dir)]
    if settings.database_url:
        options += ["--database-url", settings.database_url]
    added = CliRunner().invoke(
        app,
        [
            "kb",
            "add",
            str(require_shared_data("kb", "crosswoz")),
            str(require_shared_data("kb", "tau2-banking")),
            *options,
        ],
    )
    assert added.exit_code == 0, added.output

    server = start_server()  # no agents: the default agent
    alice = server.client(server.create_user("alice"))
    (agent,) = alice.get("/api/agents").json()
    assert agent["builtin_model"] and "built-in offline model" in agent["notice"]
    assert (
        agent["capabilities"] == ["context_compression"] and agent["compression"]["threshold_tokens"] == 2048
    )
    conversation_id = create_conversation(alice)

    # 1. A search whose result is large: the next model call compacts it (L1) and answers from the preview.
    first = turn(alice, conversation_id, "全聚德的电话是多少？")
    (call,) = of_type(first, "tool_call")
    assert call["name"] == "query_kb" and call["args"] == {"query": "全聚德的电话是多少"}
    (result,) = of_type(first, "tool_result")
    assert result["tool_call_id"] == call["tool_call_id"] and result["content_chars"] > 2000  # a large result
    compression = of_type(first, "context_compression")
    assert [(c["status"], c["level"]) for c in compression] == [("started", "l1"), ("completed", "l1")]
    (offloaded,) = compression[1]["files_written"]
    assert offloaded.startswith("outputs/large_tool_results/query_kb-")
    reply = answer(first)
    assert reply.startswith(BUILTIN_LABEL) and "restaurant_db-0002#1" in reply and offloaded in reply
    files = {
        item["path"] for item in alice.get(f"/api/conversations/{conversation_id}/files").json()["files"]
    }
    assert offloaded in files
    saved = alice.get(f"/api/conversations/{conversation_id}/files/{offloaded}")
    assert saved.status_code == 200 and json.loads(saved.text)["results"][0]["id"] == "restaurant_db-0002#1"

    # 2. Reading the offloaded result back, the way an agent does.
    back = turn(alice, conversation_id, "读取完整结果")
    assert of_type(back, "tool_call")[0]["args"]["path"] == offloaded
    assert "电话" in answer(back)

    # 3. More searches until even the compacted view reaches the threshold: a summary (L2).
    levels: list[str] = []
    asked = 0
    for question in QUESTIONS:
        events = turn(alice, conversation_id, question)
        asked += 1
        levels += [c["level"] for c in of_type(events, "context_compression") if c["status"] == "completed"]
        assert answer(events).startswith(BUILTIN_LABEL)
        if "l2" in levels:
            break
    assert "l2" in levels, f"no summary after {len(QUESTIONS)} more turns: {levels}"
    state = alice.get(f"/api/conversations/{conversation_id}/state").json()["values"]
    event = state["_summarization_event"]
    history = event["file_path"]
    assert history.startswith("outputs/conversation_history/")
    assert alice.get(f"/api/conversations/{conversation_id}/files/{history}").status_code == 200
    summary_text = json.dumps(event["summary_message"], ensure_ascii=False)
    assert "【抽取式摘要】" in summary_text and "全聚德的电话是多少" in summary_text

    # 4. One more turn, then the "compress context" button: a synchronous maintenance request.
    turn(alice, conversation_id, "在文件中查找“全聚德”")
    compressed = alice.post(f"/api/conversations/{conversation_id}/compress")
    assert compressed.status_code == 200, compressed.text
    body = compressed.json()
    assert body["compressed"] is True and body["file_path"] != history
    assert body["tokens_after"] < body["tokens_before"] and "【抽取式摘要】" in body["summary"]
    runs = alice.get(f"/api/conversations/{conversation_id}/runs").json()["items"]
    assert len(runs) == 2 + asked + 1 and all(run["status"] == "succeeded" for run in runs)

    # The chat record still holds every message in full (S1): the first search result, byte for byte
    # what the workdir file holds (S2).
    record = alice.get(f"/api/conversations/{conversation_id}/messages", params={"limit": 500}).json()[
        "items"
    ]
    tool_records = [item for item in record if item["role"] == "tool"]
    assert tool_records[0]["content"] == saved.text
    assert len([item for item in record if item["role"] == "user"]) == len(runs)
