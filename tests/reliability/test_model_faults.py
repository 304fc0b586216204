"""The summary model fails (raises, times out, says nothing, says far too much) and the main model
overflows its context once, twice, always (S6, S27, S30), end to end through the service.

Oracles: the run's final status and events, the SQL record (every message whole, S1), the
checkpoint (a consistent summary event; trimmed tool results replaced by id), the workdir (whole
files only), and what the main model received.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.middleware import DEFAULT_SUMMARY_TIMEOUT_S
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.summarizer import asummarize, summary_output_budget
from ctxpress.tokens import count_request_tokens, estimate_tokens
from tests.cancellation import cancel_after
from tests.fakes import ScriptedChatModel
from tests.server.fakes import report_text, report_tool_script

from .faults import workdir_problems
from .support import (
    COMPRESSION,
    TOPICS,
    assert_checkpoint_consistent,
    assert_offload_references_exist,
    assert_provider_valid,
    assert_sql_record_complete,
    kb_agent,
    sql_messages,
    state_messages,
    state_values,
    turn,
    workdir_root,
)

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
SUMMARY_TIMEOUT_S = 1.0
#: Far over any summary budget: ~60,000 Chinese characters.
HUGE_SUMMARY = "用户询问了报告的结论并要求保存笔记。" * 3500


def _until_l2(client: Any, conversation_id: str) -> tuple[list[str], Any]:
    sent: list[str] = []
    for topic in TOPICS:
        sent.append(topic)
        result = turn(client, conversation_id, topic)
        assert result.status == "succeeded", result.run
        if any(e["level"] == "l2" for e in result.compression("completed")):
            return sent, result
    raise AssertionError("the premise: no summary was made")


class _Hang:
    """A summary script that blocks until released (the test releases it at the end)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        self.calls += 1
        self.release.wait(30)
        return AIMessage("（迟到的摘要）")


def _raise(messages: Sequence[BaseMessage]) -> AIMessage:
    raise RuntimeError("summary upstream 503: Service Unavailable")


def _empty(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage("   \n  ")


def _huge(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(HUGE_SUMMARY)


@SQLITE_ONLY
@pytest.mark.parametrize("failure", ["raises", "times_out", "empty", "over_budget"])
def test_s27_summary_model_failure_in_automatic_l2(start_server: Any, failure: str) -> None:
    hang = _Hang()
    script = {"raises": _raise, "times_out": hang, "empty": _empty, "over_budget": _huge}[failure]
    # The agent's summary timeout is 120 s by default; a short one for the hung model (an agent setting).
    timeout = SUMMARY_TIMEOUT_S if failure == "times_out" else DEFAULT_SUMMARY_TIMEOUT_S
    agent, recorder = kb_agent(summary=script, summary_timeout=timeout)
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)
    try:
        started = time.monotonic()
        sent, faulty = _until_l2(client, conversation_id)
        elapsed = time.monotonic() - started
    finally:
        hang.release.set()

    [l2] = [e for e in faulty.compression("completed") if e["level"] == "l2"]
    values = state_values(client, conversation_id)
    event = values["_summarization_event"]
    summary = str(event["summary_message"]["data"]["content"])
    assert event["file_path"] and (root / event["file_path"]).is_file(), "the history is saved either way"
    if failure == "over_budget":
        # A summary far over its budget is cut to it, head and tail kept.
        assert "summary_error" not in l2, l2
        body = summary.split("\n\n", 1)[1]
        assert estimate_tokens(body) <= summary_output_budget(COMPRESSION) + 16
        assert body.startswith("用户询问了报告") and len(body) < len(HUGE_SUMMARY) // 10
    else:
        # S27: the error text goes into the summary view, with a digest; the main call goes on.
        expected = {
            "raises": "summary upstream 503",
            "times_out": f"did not answer within {SUMMARY_TIMEOUT_S:g} s",
            "empty": "empty summary",
        }[failure]
        assert expected in l2["summary_error"]
        assert "summary model failed" in summary and expected in summary
        assert "Messages summarised:" in summary and TOPICS[0] in summary  # the deterministic digest
    if failure == "times_out":
        assert hang.calls >= 1 and elapsed < 30, "the run waited for the hung summary model"
    # The main model received the summary view, provider-valid.
    last = recorder.requests[-1]
    assert is_summary_message(last[1]) and summary in str(last[1].content)
    assert_provider_valid(last[1:])
    assert_checkpoint_consistent(values, root)
    assert_sql_record_complete(settings, conversation_id, sent)
    # And the conversation goes on.
    assert turn(client, conversation_id, "继续").status == "succeeded"


def test_summary_timeout_also_holds_on_the_sync_path(tmp_path: Any) -> None:
    """`agent.invoke` (sync) honours `summary_timeout` like `ainvoke` does: a hung summary model
    does not hang the run."""
    from langchain.agents import create_agent

    hang = _Hang()
    summary_model = ScriptedChatModel(script=hang)
    script = [AIMessage(f"回答{i}") for i in range(6)]
    middleware = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=0.05, summary_keep_messages=1),
        workdir=LocalWorkdir(tmp_path / "wd"),
        summary_model=summary_model,
        summary_timeout=SUMMARY_TIMEOUT_S,
    )
    agent = create_agent(
        ScriptedChatModel(script=script), [], middleware=[middleware], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "sync-timeout"}}
    outcome: dict[str, Any] = {}

    def converse() -> None:
        try:
            for index in range(3):
                agent.invoke(
                    {"messages": [HumanMessage(f"第{index}个问题：" + "北京的景点很多。" * 20)]}, config
                )
            outcome["state"] = agent.get_state(config).values
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    worker = threading.Thread(target=converse, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=20)
    hang.release.set()
    assert not worker.is_alive(), "the sync run hung on the summary model"
    assert "error" not in outcome, outcome.get("error")
    assert hang.calls >= 1 and time.monotonic() - started < 20
    summary = outcome["state"]["_summarization_event"]["summary_message"].content
    assert f"did not answer within {SUMMARY_TIMEOUT_S:g} s" in summary


# --- the main model overflows ------------------------------------------------------------------------


class Overflowing:
    """The main model with a context window: larger requests raise `ContextOverflowError`; the
    first `always` calls overflow whatever their size."""

    def __init__(self, window: int, always: int = 0) -> None:
        self.window = window
        self.always = always
        self.requests: list[list[BaseMessage]] = []
        self.overflows = 0

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        size = count_request_tokens(messages)
        if self.always > 0 or size > self.window:
            self.always -= 1
            self.overflows += 1
            raise ContextOverflowError(
                f"request of {size} tokens exceeds the context window of {self.window}"
            )
        return report_tool_script(messages)


#: A high threshold: compression only happens because the model overflows (S6).
NO_PROACTIVE = CompressionConfig(
    summary_threshold=100, summary_keep_messages=6, summary_tool_result_token_limit=300
)


@SQLITE_ONLY
def test_s6_overflow_on_the_first_attempt_forces_a_summary(start_server: Any) -> None:
    model = Overflowing(window=4000)
    agent, _ = kb_agent(main=model, compression=NO_PROACTIVE)
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)

    sent = [TOPICS[0], TOPICS[1]]
    results = [turn(client, conversation_id, topic) for topic in sent]
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    assert model.overflows >= 1, "the premise: the main model overflowed"
    forced = [e for r in results for e in r.compression() if e.get("reason") == "context_overflow"]
    assert [e["status"] for e in forced][-2:] == ["started", "completed"]
    # The overflowing payload was never resent unchanged, and the retry fitted.
    payloads = [tuple(str(m.content) for m in request) for request in model.requests]
    assert len(payloads) == len(set(payloads))
    assert count_request_tokens(model.requests[-1]) <= model.window
    values = state_values(client, conversation_id)
    assert values["_summarization_event"]["file_path"]
    assert_checkpoint_consistent(values, root)
    assert_offload_references_exist(model.requests, root)
    assert_sql_record_complete(settings, conversation_id, sent)


@SQLITE_ONLY
def test_s30_overflow_on_the_second_attempt_trims_kept_tool_results(start_server: Any) -> None:
    model = Overflowing(window=10**9)
    agent, _ = kb_agent(main=model, compression=NO_PROACTIVE)
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)

    sent = list(TOPICS[:3])
    for topic in sent[:2]:
        assert turn(client, conversation_id, topic).status == "succeeded"
    # Now the window is smaller than the current turn with its L1 preview of 300 tokens, beside any
    # summary: keeping fewer messages is not enough, the kept result is trimmed (S30).
    model.window = 450
    third = turn(client, conversation_id, sent[2])
    assert third.status == "succeeded", third.run
    completed = [e for e in third.compression("completed") if e.get("trimmed_tool_results")]
    assert completed, third.compression()
    assert count_request_tokens(model.requests[-1]) <= model.window

    # The checkpoint holds the trimmed results under the same ids; the chat record keeps them whole.
    values = state_values(client, conversation_id)
    tool_states = [m for m in state_messages(values) if isinstance(m, ToolMessage)]
    trimmed = [m for m in tool_states if parse_offload_reference(str(m.content))]
    assert trimmed
    for message in trimmed:
        reference = parse_offload_reference(str(message.content))
        assert reference is not None
        assert (root / reference.path).read_text("utf-8") in {report_text(t) for t in sent}
    rows = sql_messages(settings, conversation_id)
    assert [row.content for row in rows if row.role == "tool"] == [report_text(t) for t in sent]
    assert_checkpoint_consistent(values, root)
    assert_sql_record_complete(settings, conversation_id, sent)


@SQLITE_ONLY
def test_s6_overflow_on_every_attempt_fails_the_run_with_a_reason(start_server: Any) -> None:
    model = Overflowing(window=10**9)
    agent, _ = kb_agent(main=model, compression=NO_PROACTIVE)
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)

    assert turn(client, conversation_id, TOPICS[0]).status == "succeeded"
    before = state_values(client, conversation_id)
    model.always = 10**6  # every call overflows from now on
    failed = turn(client, conversation_id, TOPICS[1])
    assert failed.status == "failed"
    assert failed.run["error"] and "ContextOverflowError" in failed.run["error"]
    assert [e.type for e in failed.events][-2:] == ["error", "run_finished"]
    statuses = [e["status"] for e in failed.compression()]
    assert statuses and statuses[-1] == "failed", "S20: a started compression ends with failed"
    # The model node never finished: the checkpoint keeps no half-applied summary.
    after = state_values(client, conversation_id)
    assert after.get("_summarization_event") == before.get("_summarization_event")
    assert_checkpoint_consistent(after, root)
    assert_sql_record_complete(settings, conversation_id, TOPICS[:2])
    assert workdir_problems(root) == []
    # The service is not stuck: with a model that fits again, the conversation continues.
    model.always = 0
    assert turn(client, conversation_id, TOPICS[2]).status == "succeeded"
    assert_sql_record_complete(settings, conversation_id, TOPICS[:3])


async def _cancel_summary_as_it_answers(loop_turns: int) -> bool | None:
    """Cancel a summary call `loop_turns` event-loop turns after it starts (`cancel_after`)."""
    model = ScriptedChatModel(script=[AIMessage("摘要")])
    call = asyncio.create_task(
        asummarize(model, CompressionConfig(), [HumanMessage("问题"), AIMessage("回答")], SUMMARY_TIMEOUT_S)
    )
    return await cancel_after(call, loop_turns)


def test_a_run_cancelled_as_its_summary_model_answers_stays_cancelled() -> None:
    """A cancelled run stops (S27's timeout must not swallow it): Python 3.11's `asyncio.wait_for`
    returned the model's answer and dropped a cancellation that arrived in the turn the call ended."""
    outcomes = [asyncio.run(_cancel_summary_as_it_answers(turns)) for turns in range(60)]
    cancelled_in_flight = [outcome for outcome in outcomes if outcome is not None]
    assert outcomes[-1] is None, "the last cancel must come after the call ended (the window is covered)"
    assert cancelled_in_flight and all(cancelled_in_flight)
