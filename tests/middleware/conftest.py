"""Fixtures for the middleware tests: a real `create_agent` graph around scripted models."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from ctxpress import ContextCompressionMiddleware, LocalWorkdir
from tests.conftest import require_shared_data

SYSTEM_PROMPT = "你是一个知识库助手，回答要准确。"


def crosswoz_results(count: int = 40, offset: int = 0) -> str:
    """A real retrieval result: Beijing attractions from the CrossWOZ database (Chinese)."""
    records = json.loads(require_shared_data("kb", "crosswoz", "attraction_db.json").read_text("utf-8"))
    chosen = records[offset : offset + count]
    return json.dumps(
        {
            "results": [
                {
                    "doc_id": f"attraction-{offset + i}",
                    "title": name,
                    "source": "crosswoz/attraction_db.json",
                    "score": round(1 - i / (2 * count), 4),
                    "content": json.dumps(fields, ensure_ascii=False),
                }
                for i, (name, fields) in enumerate(chosen)
            ]
        },
        ensure_ascii=False,
    )


@tool
def query_kb(query: str, offset: int = 0) -> str:
    """Search the knowledge base (Beijing attractions)."""
    return crosswoz_results(40, offset)


def kb_call(call_id: str, offset: int = 0) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {
                "name": "query_kb",
                "args": {"query": "北京景点", "offset": offset},
                "id": call_id,
                "type": "tool_call",
            }
        ],
    )


def build_agent(
    model: Any, middleware: ContextCompressionMiddleware, checkpointer: BaseCheckpointSaver
) -> Any:
    return create_agent(
        model, [query_kb], system_prompt=SYSTEM_PROMPT, middleware=[middleware], checkpointer=checkpointer
    )


def assert_provider_valid(messages: list[BaseMessage]) -> None:
    """Every tool result follows the AI message that called it; every call is answered."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"orphaned tool result {message.tool_call_id}"
            open_calls.discard(message.tool_call_id)
            continue
        assert not open_calls, f"unanswered tool calls {open_calls} before a {message.type} message"
        if isinstance(message, AIMessage):
            open_calls = {str(call["id"]) for call in message.tool_calls}


@pytest.fixture
def workdir(tmp_path: Path) -> LocalWorkdir:
    return LocalWorkdir(tmp_path / "workdir")


@pytest.fixture(params=["memory", "sqlite"])
def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver]:
    if request.param == "memory":
        yield InMemorySaver()
        return
    connection = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    try:
        yield SqliteSaver(connection)
    finally:
        connection.close()
