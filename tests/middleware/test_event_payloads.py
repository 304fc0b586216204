"""S20, S22: the stream events' wire shape — field names, their order, plain JSON values.

The service streams these payloads 1:1 and the page, doctor and replay read them, so the shape is an
interface: these tests pin it for the automatic path (L1), the forced path (S6, S30) and a failure.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.events import LEVELS, REASONS, STATUSES, pressure_event
from ctxpress.pressure import RequestPressure
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import build_agent, kb_call
from tests.middleware.test_flow import kb_script, run_turn

PLAIN_JSON = (str, int, float, bool, list, type(None))
STARTED_KEYS = ["type", "status", "level", "tokens_before"]
COMPLETED_KEYS = ["type", "status", "level", "tokens_before", "tokens_after", "tokens_saved"]
L1_DETAILS = ["files_written", "offloaded", "arguments_truncated"]
L2_DETAILS = ["cutoff_index", "file_path"]


def assert_plain(event: dict[str, Any]) -> None:
    """Builtin values only (no enum members, no objects), and JSON gives back the same payload."""
    assert all(type(value) in PLAIN_JSON for value in event.values()), event
    assert json.loads(json.dumps(event)) == event
    assert event["status"] in STATUSES and event["level"] in LEVELS
    assert event.get("reason", REASONS[0]) in REASONS


def test_automatic_l1_events(workdir: LocalWorkdir, checkpointer: Any) -> None:
    config = CompressionConfig(summary_threshold=4, summary_tool_result_token_limit=300)
    middleware = ContextCompressionMiddleware(config, workdir=workdir, summary_model=ScriptedChatModel())
    agent = build_agent(ScriptedChatModel(script=kb_script(1)), middleware, checkpointer)
    started, completed = run_turn(agent, "北京有哪些景点？")
    for event in (started, completed):
        assert_plain(event)
    assert list(started) == [*STARTED_KEYS, "threshold"]
    assert started["threshold"] == config.threshold_tokens
    assert list(completed) == [*COMPLETED_KEYS, *L1_DETAILS]
    assert (completed["type"], completed["status"], completed["level"]) == (
        "context_compression",
        "completed",
        "l1",
    )
    assert completed["tokens_saved"] == completed["tokens_before"] - completed["tokens_after"] > 0


def test_forced_l2_events_with_trimming(workdir: LocalWorkdir, checkpointer: Any) -> None:
    # The search result is in the current turn: no summary keeps less than it, so it is trimmed.
    model = ScriptedChatModel(script=[AIMessage(content="北京的景点很多。" * 40)])
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100, summary_keep_messages=6),
        workdir=workdir,
        summary_model=ScriptedChatModel(script=[AIMessage(content="摘要")] * 5),
    )
    agent = build_agent(model, middleware, checkpointer)
    run_turn(agent, "先不限制")
    model.context_window = 300
    model.script = [kb_call("a", 0), AIMessage(content="最终答案")]
    *_, started, completed = run_turn(agent, "再问一次")  # the kb call's events come last
    for event in (started, completed):
        assert_plain(event)
    assert list(started) == [*STARTED_KEYS, "reason"]
    assert (started["level"], started["reason"]) == ("l2", "context_overflow")
    assert list(completed) == [*COMPLETED_KEYS, "reason", *L1_DETAILS, *L2_DETAILS, "trimmed_tool_results"]
    assert completed["trimmed_tool_results"] == 1


def test_forced_failure_event(workdir: LocalWorkdir, checkpointer: Any) -> None:
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=100), workdir=workdir, summary_model=ScriptedChatModel()
    )
    agent = build_agent(ScriptedChatModel(script=[], context_window=5), middleware, checkpointer)
    events: list[dict[str, Any]] = []
    stream = agent.stream(
        {"messages": [("user", "你好")]}, {"configurable": {"thread_id": "f"}}, stream_mode="custom"
    )
    with pytest.raises(Exception, match="does not fit"):
        events.extend(stream)
    started, failed = events
    for event in (started, failed):
        assert_plain(event)
    assert list(failed) == ["type", "status", "level", "error", "reason"]
    assert failed["status"] == "failed" and failed["error"].startswith("ContextOverflowError: ")


def test_pressure_event_shape() -> None:
    pressure = RequestPressure(total=870, threshold=1000, system=10, tools=20, summary=40, messages=800)
    event = dict(pressure_event(pressure))
    assert list(event) == [
        "type",
        "total",
        "threshold",
        "system",
        "tools",
        "summary",
        "messages",
        "ratio",
        "suggest_compress",
    ]
    assert event["type"] == "context_pressure"
    assert (event["ratio"], event["suggest_compress"]) == (0.87, True)
    assert all(type(value) in PLAIN_JSON for value in event.values())
