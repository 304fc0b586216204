"""S7 generalised, S14: one huge tool-call argument of any tool never keeps a thread over the threshold.

The argument is saved in the workdir (its full text recoverable, its path named in the view), the
checkpointed state keeps it whole, and later turns and manual compression work.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.compaction.markers import offloaded_argument_path
from ctxpress.manual import compress_now
from ctxpress.tokens import count_request_tokens
from tests.fakes import ScriptedChatModel, tool_call
from tests.middleware.conftest import SYSTEM_PROMPT, assert_provider_valid
from tests.middleware.test_flow import THREAD, run_turn

HUGE = "北京的景点很多，故宫、颐和园、天坛都值得一去。" * 4000  # 92,000 characters
WINDOW = 4000


@tool
def translate(text: str, target: str = "en") -> str:
    """Translate a text."""
    return f"translated {len(text)} characters into {target}"


def _agent(workdir: LocalWorkdir, checkpointer: Any) -> tuple[Any, ScriptedChatModel, CompressionConfig]:
    model = ScriptedChatModel(
        script=[
            tool_call("translate", {"text": HUGE, "target": "en"}, "t1"),
            AIMessage(content="翻译好了。"),
        ],
        context_window=WINDOW,
    )
    config = CompressionConfig(summary_threshold=3, summary_keep_messages=10)
    middleware = ContextCompressionMiddleware(
        config,
        workdir=workdir,
        summary_model=ScriptedChatModel(script=[AIMessage(content="用户请助手翻译一大段文字。")] * 5),
    )
    agent = create_agent(
        model, [translate], system_prompt=SYSTEM_PROMPT, middleware=[middleware], checkpointer=checkpointer
    )
    return agent, model, config


def _the_call(messages: list[BaseMessage]) -> AIMessage:
    return next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)


def test_s7_a_huge_argument_of_any_tool_is_saved_and_every_later_turn_fits(
    workdir: LocalWorkdir, checkpointer: Any
) -> None:
    agent, model, config = _agent(workdir, checkpointer)
    run_turn(agent, "请把这段文字翻译成英文")
    # The request after the call: the argument is a file path and a preview, the rest untouched.
    sent = model.requests[-1]
    shown = _the_call(sent).tool_calls[0]["args"]
    path = offloaded_argument_path(shown["text"])
    assert path is not None and path in shown["text"]
    assert shown["target"] == "en"
    assert workdir.read_bytes(path).decode("utf-8") == HUGE  # the full text is recoverable
    assert count_request_tokens(sent) < config.threshold_tokens
    assert_provider_valid(sent[1:])
    # The checkpoint keeps the argument whole: only the view is cut.
    state = agent.get_state(THREAD).values
    assert _the_call(state["messages"]).tool_calls[0]["args"]["text"] == HUGE
    for turn in range(3):
        model.script = [AIMessage(content=f"第{turn}个回答")]
        run_turn(agent, f"第{turn}个问题")
        assert count_request_tokens(model.requests[-1]) < config.threshold_tokens
        assert agent.get_state(THREAD).values["messages"][-1].content == f"第{turn}个回答"


async def test_s14_manual_compression_with_a_huge_argument_in_the_keep_window(tmp_path: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    workdir = LocalWorkdir(tmp_path / "wd")
    agent, model, config = _agent(workdir, InMemorySaver())
    await agent.ainvoke({"messages": [("user", "你好")]}, THREAD)
    model.script = [AIMessage(content="继续")]
    await agent.ainvoke({"messages": [("user", "然后呢？")]}, THREAD)
    values = agent.get_state(THREAD).values
    result = await compress_now(
        values["messages"],
        values.get("_summarization_event"),
        config=config,
        workdir=workdir,
        summary_model=ScriptedChatModel(script=[AIMessage(content="用户请助手翻译了一大段文字。")]),
        thread_id="conv-1",
    )
    assert result.compressed, result.reason
    agent.update_state(THREAD, {"_summarization_event": result.event})
    model.script = [AIMessage(content="好的")]
    await agent.ainvoke({"messages": [("user", "再来一次")]}, THREAD)
    assert count_request_tokens(model.requests[-1]) < config.threshold_tokens
    assert agent.get_state(THREAD).values["messages"][-1].content == "好的"
