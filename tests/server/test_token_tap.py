"""Token deltas from the model's callbacks (`runtime/token_tap.py`), through real LangGraph graphs.

The tap replaces LangGraph's `messages` stream mode in the run executor (issue 17): what it hands on
must be what that mode gave -- every text chunk of the agent's model calls, in order, with the
message id, node and (for a sub-agent) namespace; never the summary call's tokens (S21).
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import START, MessagesState, StateGraph

from ctxpress.app.server.runtime.token_tap import TokenTap, is_streamed_call
from ctxpress.app.server.runtime.usage_recording import SUMMARY_SOURCE, UsageCollector

REPLY = "压缩 之后 模型 仍然 看到 当前 问题"


def streaming_model(*replies: str) -> GenericFakeChatModel:
    """A fake chat model that streams each reply word by word (LangChain's own fake)."""
    return GenericFakeChatModel(messages=iter([AIMessage(reply) for reply in replies]))


async def _stream(graph: Any, stream_mode: list[str]) -> tuple[list[dict[str, Any]], list[Any]]:
    deltas: list[dict[str, Any]] = []
    chunks: list[Any] = []
    tap = TokenTap(deltas.append)
    async for chunk in graph.astream(
        {"messages": [HumanMessage("问")]}, {"callbacks": [tap]}, stream_mode=stream_mode, subgraphs=True
    ):
        chunks.append(chunk)
    return deltas, chunks


def test_the_agents_tokens_arrive_in_order_with_message_id_and_node() -> None:
    graph = create_agent(streaming_model(REPLY), tools=[])
    deltas, chunks = asyncio.run(_stream(graph, ["updates"]))
    [(_, _, update)] = [c for c in chunks if c[0] == () and "model" in c[2]]
    [reply] = update["model"]["messages"]
    assert len(deltas) > 1, "the model streamed: the tap saw each chunk, not one message"
    assert "".join(d["delta"] for d in deltas) == reply.text == REPLY
    assert {d["message_id"] for d in deltas} == {reply.id}
    assert {d["node"] for d in deltas} == {"model"}
    assert not any("namespace" in d for d in deltas)


def test_the_tap_gives_what_the_messages_mode_gave() -> None:
    """The same graph streamed with the `messages` mode: the same texts, ids and nodes."""
    graph = create_agent(streaming_model(REPLY, REPLY), tools=[])
    deltas, _ = asyncio.run(_stream(graph, ["updates"]))
    _, chunks = asyncio.run(_stream(graph, ["messages"]))
    from_mode = [
        (data[0].text, data[1]["langgraph_node"])
        for _, mode, data in chunks
        if mode == "messages" and data[0].text
    ]
    assert [(d["delta"], d["node"]) for d in deltas] == from_mode


def test_a_sub_agents_tokens_carry_its_namespace() -> None:
    inner = create_agent(streaming_model(REPLY), tools=[])
    outer = StateGraph(MessagesState)
    outer.add_node("researcher", inner)
    outer.add_edge(START, "researcher")
    deltas, chunks = asyncio.run(_stream(outer.compile(), ["updates"]))
    namespaces = {tuple(d["namespace"]) for d in deltas}
    assert len(namespaces) == 1
    [namespace] = namespaces
    assert namespace[0].startswith("researcher:")
    # The namespace the `updates` stream gives the inner agent's model node.
    assert any(c[0] == namespace and "model" in c[2] for c in chunks)
    assert "".join(d["delta"] for d in deltas) == REPLY


def test_summary_and_nostream_calls_are_never_tapped() -> None:
    """S21: the compression middleware's summary call (tagged `TAG_NOSTREAM`, marked
    `lc_source: summarization`) streams nothing to the user."""
    model = streaming_model("内部 摘要 文本", "另一 段 摘要", REPLY)

    async def node(state: MessagesState) -> dict[str, Any]:
        await model.with_config(tags=[TAG_NOSTREAM]).ainvoke(state["messages"])
        await model.with_config(metadata={"lc_source": SUMMARY_SOURCE}).ainvoke(state["messages"])
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", node)
    graph.add_edge(START, "model")
    deltas, _ = asyncio.run(_stream(graph.compile(), ["updates"]))
    assert "".join(d["delta"] for d in deltas) == REPLY
    assert is_streamed_call(["seq:step:1"], {"langgraph_node": "model"})
    assert not is_streamed_call([TAG_NOSTREAM], {})
    assert not is_streamed_call([], {"lc_source": SUMMARY_SOURCE})


def test_a_runs_callbacks_schedule_no_task_per_streamed_token() -> None:
    """The executor's handlers (the usage collector, the tap) are called in turn for each chunk:
    LangChain gathers a handler that is not `run_inline` as a task per event, and at 50 tokens/s
    per run those tasks were ~8% of the service's time in the 50-conversation load."""
    words = 400
    graph = create_agent(streaming_model(" ".join(["词"] * words)), tools=[])

    async def stream_counting_tasks() -> tuple[int, int]:
        created = 0
        loop = asyncio.get_running_loop()

        def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            nonlocal created
            created += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        deltas: list[dict[str, Any]] = []
        collector = UsageCollector(main_provider=None, summary_provider=None)
        loop.set_task_factory(counting_factory)
        async for _ in graph.astream(
            {"messages": [HumanMessage("问")]}, {"callbacks": [collector, TokenTap(deltas.append)]}
        ):
            pass
        loop.set_task_factory(None)
        assert collector.drain(), "the collector saw the call"
        return created, len(deltas)

    created, deltas = asyncio.run(stream_counting_tasks())
    assert deltas >= words, "the reply streamed chunk by chunk"
    assert created < words // 4, f"{created} tasks for {deltas} streamed chunks"
