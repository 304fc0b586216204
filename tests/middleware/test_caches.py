"""Each middleware instance owns its caches (token counter, L1 decisions); sharing them is explicit.

Through a real `create_agent` graph (scripted models, real checkpointers). Oracles: the cache
objects themselves, and what each cache holds and missed after a turn.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction import CompactionCache
from ctxpress.tokens import TokenCounter
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import build_agent, kb_call

# The raw request is over the threshold and L1 alone brings it under: every turn counts and compacts.
CONFIG = CompressionConfig(summary_threshold=4, summary_tool_result_token_limit=300)


def middleware_for(workdir: LocalWorkdir, **shared: Any) -> ContextCompressionMiddleware:
    return ContextCompressionMiddleware(CONFIG, workdir=workdir, summary_model=ScriptedChatModel(), **shared)


def run_kb_turn(
    middleware: ContextCompressionMiddleware, checkpointer: Any, thread_id: str, turn: int
) -> list[dict[str, Any]]:
    """One user turn (search, then answer); returns the compression events."""
    script = [kb_call(f"call-{turn}", offset=turn * 3), AIMessage(content=f"第{turn}轮的回答。")]
    agent = build_agent(ScriptedChatModel(script=script), middleware, checkpointer)
    config = {"configurable": {"thread_id": thread_id}}
    events = []
    for mode, payload in agent.stream(
        {"messages": [HumanMessage(content=f"第{turn}个问题")]}, config, stream_mode=["custom", "updates"]
    ):
        if mode == "custom" and payload.get("type") == "context_compression":
            events.append(payload)
    return events


def message_misses(middleware: ContextCompressionMiddleware) -> int:
    return middleware.token_counter.cache_info()["message_misses"]


def test_two_middlewares_do_not_share_caches_by_default(workdir: LocalWorkdir, checkpointer: Any) -> None:
    first, second = middleware_for(workdir), middleware_for(workdir)
    assert first.token_counter is not second.token_counter
    assert first.compaction_cache is not second.compaction_cache

    events = run_kb_turn(first, checkpointer, "thread-1", turn=0)
    assert ("completed", "l1") in [(e["status"], e["level"]) for e in events]
    assert first.token_counter.cache_info()["messages"] > 0
    assert len(first.compaction_cache) > 0
    # The other instance saw none of it.
    info = second.token_counter.cache_info()
    assert (info["entries"], info["messages"], info["misses"], info["tool_schemas"]) == (0, 0, 0, 0)
    assert len(second.compaction_cache) == 0


def test_middlewares_given_the_same_caches_share_them(workdir: LocalWorkdir, checkpointer: Any) -> None:
    counter, cache = TokenCounter(), CompactionCache()
    first = middleware_for(workdir, counter=counter, cache=cache)
    second = middleware_for(workdir, counter=counter, cache=cache)
    assert first.token_counter is second.token_counter is counter
    assert first.compaction_cache is second.compaction_cache is cache

    run_kb_turn(first, checkpointer, "shared", turn=0)
    decisions = len(cache)
    before = message_misses(second)
    run_kb_turn(second, checkpointer, "shared", turn=1)
    shared_misses = message_misses(second) - before

    # The same second turn on a copy of the thread, by a middleware with caches of its own.
    run_kb_turn(middleware_for(workdir), checkpointer, "alone", turn=0)
    alone = middleware_for(workdir)
    run_kb_turn(alone, checkpointer, "alone", turn=1)
    alone_misses = message_misses(alone)

    # The shared counter knew every message of the first turn: only the new ones were counted.
    assert 0 < shared_misses < alone_misses
    assert len(cache) == decisions + 1  # the first turn's result was found, only the new one decided
    assert len(alone.compaction_cache) == 2  # its own cache decided both results afresh
