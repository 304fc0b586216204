"""S3, S15: cutoffs are positions in the full state, even when an outer middleware shortened the request."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.summary.event import is_summary_message
from ctxpress.summary.history import read_history
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import SYSTEM_PROMPT, query_kb
from tests.middleware.test_flow import kb_script, run_turn, state_of

DROPPED = 2


class DropOldestMiddleware(AgentMiddleware):
    """Another middleware's own shortening: its summary in place of the first state messages."""

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        messages = list(request.messages)
        if len(messages) > 2 * DROPPED:
            own_summary = HumanMessage("（另一个中间件的摘要）", id="other-summary")
            messages = [own_summary, *messages[DROPPED:]]
        return handler(request.override(messages=messages))


def test_s3_s15_cutoffs_are_full_state_positions_when_an_outer_middleware_shortened_the_request(
    workdir: LocalWorkdir, checkpointer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    summary_model = ScriptedChatModel(script=[AIMessage(content=f"第{i}份摘要") for i in range(20)])
    model = ScriptedChatModel(script=kb_script(8))
    ctxpress = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=1, summary_keep_messages=3),
        workdir=workdir,
        summary_model=summary_model,
    )
    agent = create_agent(
        model,
        [query_kb],
        system_prompt=SYSTEM_PROMPT,
        middleware=[DropOldestMiddleware(), ctxpress],
        checkpointer=checkpointer,
    )
    seen: list[dict[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="ctxpress"):
        for turn in range(8):
            run_turn(agent, f"问题{turn}")
            event = state_of(agent).get("_summarization_event")
            if event and (not seen or seen[-1]["cutoff_index"] != event["cutoff_index"]):
                seen.append(event)
    assert len(seen) >= 3
    messages = state_of(agent)["messages"]
    previous_end = seen[0]["cutoff_index"]
    assert messages[previous_end].id == seen[0]["first_kept_id"]
    for event in seen[1:]:
        assert event["cutoff_index"] > previous_end  # never backwards
        assert messages[event["cutoff_index"]].id == event["first_kept_id"]
        header, saved = read_history(workdir, event["file_path"])
        assert header["range"] == [previous_end, event["cutoff_index"]]  # no overlap, no gap
        raw = [m for m in saved if not is_summary_message(m)]
        assert [m.id for m in raw] == [m.id for m in messages[previous_end : event["cutoff_index"]]]
        previous_end = event["cutoff_index"]
    assert not [r for r in caplog.records if "moved" in r.getMessage() or "stale" in r.getMessage()]
