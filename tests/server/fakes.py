"""Model scripts and tools for the service tests (the model itself is `tests.fakes.ScriptedChatModel`).

The agent graph is always the real `create_agent` graph; only the model's decisions are scripted.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool


def new_call_id(prefix: str) -> str:
    return f"call_{prefix}_{uuid.uuid4().hex[:12]}"


def report_tool_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """User message -> call `fetch_report`; `save <path>` -> call `write_file`; tool result -> answer."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        text = last.text
        if text.startswith("save "):
            path = text.removeprefix("save ").strip()
            args = {"path": path, "content": f"笔记：{path}\n"}
            return AIMessage("", tool_calls=[{"name": "write_file", "args": args, "id": new_call_id("save")}])
        return AIMessage(
            "我来查一下。",
            tool_calls=[{"name": "fetch_report", "args": {"topic": text}, "id": new_call_id("report")}],
        )
    if isinstance(last, ToolMessage):
        return AIMessage(f"结论：{last.text[:24]}")
    return AIMessage("（无事可做）")


def echo_script(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(f"回声：{messages[-1].text}")


def ask_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """`ask …` -> ask_user; the answer -> a reply quoting it; anything else -> echo."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and last.text.startswith("ask "):
        question = last.text.removeprefix("ask ")
        return AIMessage(
            "", tool_calls=[{"name": "ask_user", "args": {"question": question}, "id": new_call_id("ask")}]
        )
    if isinstance(last, ToolMessage):
        return AIMessage(f"你的回答是：{last.text}")
    return echo_script(messages)


def report_text(topic: str) -> str:
    """A large, recognisable tool result (~3,000 characters of mixed Chinese and ASCII)."""
    lines = [
        f"第{index}段：关于“{topic}”的检索结果，编号 DOC-{index:04d}，score={index / 100:.2f}。"
        for index in range(80)
    ]
    return "\n".join(lines)


@tool
def fetch_report(topic: str) -> str:
    """Fetch a long report about a topic."""
    return report_text(topic)


SUMMARY_TOKEN = "SUMMARYTOKEN"


def summary_script(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(" ".join(f"{SUMMARY_TOKEN}{index}" for index in range(12)))
