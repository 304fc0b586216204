"""End to end over real HTTP (uvicorn), on SQLite and PostgreSQL: a many-turn conversation with tools
in which compression happens, seen through SSE, SQL, the state endpoint, the workdir and usage."""

from __future__ import annotations

from typing import Any

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import SseEvent, create_conversation, read_events, send
from ctxpress.app.testing.records import query_sql
from ctxpress.config import CompressionConfig
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import SUMMARY_TOKEN, fetch_report, report_text, report_tool_script, summary_script

TOPICS = ["季度营收", "客户名单", "合同条款", "风险评估", "交付计划"]


COMPRESSION = CompressionConfig(
    summary_threshold=1,  # 1,024 tokens: one raw report (~2,400) is above it, its L1 view is not
    summary_tool_result_token_limit=100,
    summary_keep_messages=2,
)


def compression_agent() -> tuple[AgentDefinition, ScriptedChatModel]:
    summary_model = ScriptedChatModel(script=summary_script, model_name="summarizer")
    agent = AgentDefinition(
        name="kb",
        default=True,
        # SiliconFlow is in the default exclusion list: its usage must show as unavailable.
        model=ModelSpec(
            model=ScriptedChatModel(script=report_tool_script, model_name="Qwen3-8B"),
            usage_provider="siliconflow",
        ),
        summary_model=ModelSpec(model=summary_model, usage_provider="summary-provider"),
        tools=(fetch_report, "write_file", "read_file", "list_files"),
        capabilities=("context_compression",),
        compression=COMPRESSION,
    )
    return agent, summary_model


def assert_stream_well_formed(events: list[SseEvent]) -> None:
    positions = [event.position for event in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions), "SSE ids must increase"
    assert events[0].type == "run_started"
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "succeeded"
    position = {event.id: index for index, event in enumerate(events)}
    messages = {event.data["message_id"]: event for event in events if event.type == "message"}
    for event in events:
        if event.type == "message_delta":
            # Every token arrives before the complete message it belongs to.
            assert position[event.id] < position[messages[event.data["message_id"]].id]
    for call in (event for event in events if event.type == "tool_call"):
        results = [
            e
            for e in events
            if e.type == "tool_result" and e.data["tool_call_id"] == call.data["tool_call_id"]
        ]
        assert len(results) == 1 and position[call.id] < position[results[0].id]
    statuses = [event.data["status"] for event in events if event.type == "context_compression"]
    # S20: each model call that compresses emits `started`, then `completed` (never `failed` here).
    assert statuses == ["started", "completed"] * (len(statuses) // 2)


def test_many_turns_with_tools_and_compression(start_server: ServerFactory) -> None:
    agent, summary_model = compression_agent()
    server = start_server(agents=[agent])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)

    all_events: list[SseEvent] = []
    for topic in TOPICS:
        accepted = send(alice, conversation_id, topic)
        assert accepted["started"] is True and accepted["queued"] is False
        events = read_events(alice, accepted["run"]["id"])
        assert_stream_well_formed(events)
        all_events.extend(events)
    saved = send(alice, conversation_id, "save notes/总结.md")
    all_events.extend(read_events(alice, saved["run"]["id"]))

    # Compression happened (deterministic L1 first, later a summary, L2); the middleware's custom
    # events arrived over SSE as `context_compression`, fields unchanged.
    completed = [
        e.data for e in all_events if e.type == "context_compression" and e.data["status"] == "completed"
    ]
    assert {"l1", "l2"} <= {event["level"] for event in completed}
    assert all(event["tokens_after"] < event["tokens_before"] for event in completed)

    # S21: the summary model really streamed (LangGraph's messages mode makes ainvoke stream), yet
    # none of its tokens became a message event.
    assert "stream" in summary_model.calls
    for event in all_events:
        if event.type in ("message_delta", "message"):
            assert SUMMARY_TOKEN not in str(event.data)

    # The complete record in SQL: every message of every turn, in order, tool output in full (S1, S16).
    rows = query_sql(
        server.services.settings,
        "SELECT id, role, content FROM messages WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )
    roles = [row.role for row in rows]
    assert roles == ["user", "assistant", "tool", "assistant"] * (len(TOPICS) + 1)
    tool_contents = [row.content for row in rows if row.role == "tool"]
    assert tool_contents[: len(TOPICS)] == [report_text(topic) for topic in TOPICS]
    assert [row.content for row in rows if row.role == "user"] == [*TOPICS, "save notes/总结.md"]
    assert all("摘要" not in row.content for row in rows), "the summary never enters the chat record"

    # The same record through the API, paginated.
    paged: list[dict[str, Any]] = []
    after = 0
    while True:
        page = alice.get(
            f"/api/conversations/{conversation_id}/messages", params={"after": after, "limit": 7}
        ).json()
        paged.extend(page["items"])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert [item["id"] for item in paged] == [row.id for row in rows]
    assert paged[2]["message"]["data"]["tool_call_id"].startswith("call_report_")

    # The checkpoint holds the summary event, read through the agent's compiled graph (S3, S15).
    state = alice.get(f"/api/conversations/{conversation_id}/state").json()
    summary_event = state["values"]["_summarization_event"]
    assert summary_event["cutoff_index"] > 0
    assert summary_event["file_path"].startswith("outputs/conversation_history/")
    assert SUMMARY_TOKEN in str(summary_event["summary_message"])
    assert state["next"] == [] and state["interrupts"] == []
    assert len(state["values"]["messages"]) == len(rows), "the checkpoint keeps the raw messages too"

    # The workdir holds the offloaded tool results (S8), the summarised history (S14) and the
    # agent's own file; all readable by the owner through the API.
    listing = alice.get(f"/api/conversations/{conversation_id}/files").json()
    paths = {item["path"] for item in listing["files"]}
    assert any(path.startswith("outputs/large_tool_results/") for path in paths)
    assert summary_event["file_path"] in paths
    history_files = sorted(path for path in paths if path.startswith("outputs/conversation_history/"))
    histories = "".join(
        alice.get(f"/api/conversations/{conversation_id}/files/{path}").text for path in history_files
    )
    assert TOPICS[0] in histories, "the summarised turns are recoverable from the workdir (S14)"
    offloaded = next(path for path in paths if path.startswith("outputs/large_tool_results/"))
    full = alice.get(f"/api/conversations/{conversation_id}/files/{offloaded}").text
    assert full in {report_text(topic) for topic in TOPICS}, "the full tool result is on disk (S2)"
    assert {"path": "notes/总结.md", "size": len("笔记：notes/总结.md\n".encode())} in listing["files"]
    content = alice.get(f"/api/conversations/{conversation_id}/files/notes/总结.md")
    assert content.status_code == 200 and content.text == "笔记：notes/总结.md\n"
    assert content.headers["content-type"].startswith("text/plain")

    # Usage: main calls from an excluded provider are "unavailable"; the summary has its own line.
    usage = alice.get(f"/api/conversations/{conversation_id}/usage").json()
    lines = {(line["category"], line["provider"]): line for line in usage["lines"]}
    main = lines[("main", "siliconflow")]
    assert main["usage_available"] is False and main["input_tokens"] is None
    assert main["calls"] == 2 * (len(TOPICS) + 1)
    summary = lines[("summary", "summary-provider")]
    assert summary["usage_available"] is True and summary["model"] == "summarizer"
    assert summary["calls"] >= 1 and summary["input_tokens"] == 100 * summary["calls"]
    assert summary["cache_read_tokens"] == 40 * summary["calls"]
    assert usage["totals"]["main"]["unavailable_calls"] == main["calls"]
    assert usage["totals"]["summary"]["total_tokens"] == 110 * summary["calls"]
    usage_events = [event.data for event in all_events if event.type == "usage"]
    assert {(event["category"], event["usage_available"]) for event in usage_events} == {
        ("main", False),
        ("summary", True),
    }
