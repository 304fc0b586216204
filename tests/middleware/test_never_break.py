"""Issue 44: the middleware is never the reason a conversation dies.

One regression test per defect found by trying ctxpress as a new user would; each failed before
its fix. Real `create_agent` graphs with scripted models and a real checkpointer.
"""

from __future__ import annotations

import json
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import parse_offload_reference
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.test_flow import THREAD, run_turn

HUGE_QUERY = "汉" * 100_000


def _empty_search(messages: Any) -> AIMessage:
    """The model searches the knowledge base with the user's whole message, then answers."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return tool_call("query_kb", {"query": last.text}, f"call-{len(messages)}")
    return AIMessage(content="没有找到相关结果。")


@tool("query_kb")
def empty_kb(query: str) -> str:
    """Search the knowledge base: no results, the query echoed (as the service's `query_kb` does)."""
    return json.dumps({"query": query, "total": 0, "results": []}, ensure_ascii=False)


def test_item1_a_search_result_without_records_is_compacted_and_the_next_turn_succeeds(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    """S9 falls back to S10 for a result list with no records; the conversation goes on (issue 44.1)."""
    model = ScriptedChatModel(script=_empty_search)
    config = CompressionConfig(summary_threshold=4, summary_keep_messages=4)
    middleware = ContextCompressionMiddleware(config, workdir=workdir)
    agent = create_agent(model, [empty_kb], middleware=[middleware], checkpointer=checkpointer)
    run_turn(agent, HUGE_QUERY)
    run_turn(agent, "hello")
    state = agent.get_state(THREAD).values
    assert state["messages"][-1].content == "没有找到相关结果。"
    # The search result was offloaded whole (S8) and its preview is the generic one (S10).
    views = [m.text for request in model.requests for m in request if m.type == "tool"]
    large = [
        parse_offload_reference(text) for text in views if HUGE_QUERY[:1000] in text or "offloaded" in text
    ]
    assert large and all(reference is not None for reference in large)
    saved = {reference.path for reference in large if reference is not None}
    assert all(json.loads(workdir.read_bytes(path))["query"] == HUGE_QUERY for path in saved)
