"""The graph `bench/service_load.py` gives LangGraph's Agent Server (`bench/agent_server_graph.py`).

The peer must run the default agent as the service does -- offline model, knowledge base, workdir
tools, compression middleware -- on the Agent Server's thread ids (dashed UUIDs) and without a
checkpointer of its own. Real graph, tools and knowledge base; the model is the built-in one.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from ctxpress.events import CONTEXT_PRESSURE

PEER_GRAPH_FILE = Path(__file__).resolve().parents[2] / "bench" / "agent_server_graph.py"
NOTE = "下周复查压缩阈值。"


def peer_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_server_graph", PEER_GRAPH_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def one_turn(graph: Any, thread_id: str, text: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The turn's final messages and the custom events it streamed."""
    custom: list[dict[str, Any]] = []
    messages: list[Any] = []
    config = {"configurable": {"thread_id": thread_id}}
    async for mode, chunk in graph.astream(
        {"messages": [HumanMessage(text)]}, config, stream_mode=["custom", "values"]
    ):
        if mode == "custom":
            custom.append(chunk)
        else:
            messages = chunk["messages"]
    return messages, custom


async def test_the_peer_graph_writes_notes_in_the_threads_workdir_and_publishes_pressure(
    tmp_path: Path,
) -> None:
    graph = peer_module().build_graph(tmp_path)
    assert graph.checkpointer is None  # the Agent Server brings its own
    thread = uuid.uuid4()

    messages, custom = await one_turn(graph, str(thread), f"记下：{NOTE}")

    notes = list((tmp_path / "workdirs" / thread.hex).rglob("*.md"))
    assert [note.read_text(encoding="utf-8").strip() for note in notes] == [NOTE]
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls
    assert any(event.get("type") == CONTEXT_PRESSURE for event in custom)


async def test_the_peer_graph_answers_from_the_knowledge_base(tmp_path: Path) -> None:
    graph = peer_module().build_graph(tmp_path)

    messages, _ = await one_turn(graph, str(uuid.uuid4()), "什么是 L1 压缩？")

    assert [m.tool_calls[0]["name"] for m in messages if isinstance(m, AIMessage) and m.tool_calls] == [
        "query_kb"
    ]
    assert json.loads(messages[-2].content)["total"] > 0  # the tool result: built-in documents found
    assert messages[-1].text


async def test_without_compression_the_peer_graph_publishes_no_pressure(tmp_path: Path) -> None:
    graph = peer_module().build_graph(tmp_path, compression=False)

    messages, custom = await one_turn(graph, str(uuid.uuid4()), f"记下：{NOTE}")

    assert isinstance(messages[-1], AIMessage) and messages[-1].text
    assert not [event for event in custom if event.get("type") == CONTEXT_PRESSURE]
