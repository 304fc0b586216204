"""S3: ctxpress refuses to share `_summarization_event` with DeepAgents' summarization (either order)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deepagents.backends import FilesystemBackend
from deepagents.middleware.summarization import SummarizationMiddleware
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.summary.conflict import SummarizerConflictError
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import SYSTEM_PROMPT, query_kb
from tests.middleware.test_flow import kb_script, run_turn

THREAD = {"configurable": {"thread_id": "two-summarisers"}}


@pytest.mark.parametrize("ctxpress_first", [True, False])
def test_s3_a_second_summarizer_on_the_event_key_is_refused(tmp_path: Path, ctxpress_first: bool) -> None:
    model = ScriptedChatModel(script=kb_script(6))
    summary_model = ScriptedChatModel(script=[AIMessage(content="摘要")] * 10)
    ctxpress = ContextCompressionMiddleware(
        CompressionConfig(summary_threshold=1, summary_keep_messages=3),
        workdir=LocalWorkdir(tmp_path / "wd"),
        summary_model=summary_model,
    )
    deepagents = SummarizationMiddleware(
        summary_model, backend=FilesystemBackend(root_dir=tmp_path / "da"), trigger=("messages", 10_000)
    )
    stack = [ctxpress, deepagents] if ctxpress_first else [deepagents, ctxpress]
    agent = create_agent(
        model, [query_kb], system_prompt=SYSTEM_PROMPT, middleware=stack, checkpointer=InMemorySaver()
    )
    with pytest.raises(SummarizerConflictError) as refused:
        for turn in range(6):
            run_turn(agent, f"第{turn}个问题：北京有哪些景点？")
    message = str(refused.value)
    assert "_summarization_event" in message and "SummarizationMiddleware" in message
    # Never a silently wrong request: every request the model got ends with the user's question
    # or a tool exchange of this turn, and never starts its history with a bare summary.
    for request in model.requests:
        questions = [m for m in request if isinstance(m, HumanMessage) and "问题" in m.text]
        assert questions, "the user's question is in every request the model received"
