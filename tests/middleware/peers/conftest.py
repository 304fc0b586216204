"""The harness of the peer ports: a real `create_agent` graph, scripted models, a real checkpointer.

Every port drives ctxpress through LangGraph as an application would (turns streamed with
`stream_mode=["custom", "updates"]`, state read back from the checkpointer) and reads its oracles
from what the scripted model received, the agent state and the workdir files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir, RequestPressure
from ctxpress.config import TOKENS_PER_K
from ctxpress.summary.history import HISTORY_DIR, is_conversation_file
from tests.fakes import ScriptedChatModel

SYSTEM_PROMPT = "You are a concise research assistant."
THREAD_ID = "peer-thread"
#: What the search tool returns: far over the default 300-token tool-result limit.
LARGE_RESULT = "BEGIN\n" + "raw result payload line\n" * 400 + "END"


def config_for(threshold_tokens: int, keep: int = 10, **fields: Any) -> CompressionConfig:
    """A config whose one threshold is `threshold_tokens` approximate tokens."""
    return CompressionConfig(
        summary_threshold=threshold_tokens / TOKENS_PER_K, summary_keep_messages=keep, **fields
    )


def thread(thread_id: str = THREAD_ID) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


@tool
def search(query: str) -> str:
    """Search the web and return the raw page text."""
    return LARGE_RESULT


@tool
def lookup(key: str) -> str:
    """Look a short fact up."""
    return f"fact about {key}"


@tool
def write_file(file_path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {len(content)} characters to {file_path}"


@tool
def edit_file(file_path: str, old_string: str, new_string: str) -> str:
    """Replace text in a file."""
    return f"edited {file_path}"


@tool
def publish(title: str, body: str) -> str:
    """Publish a document."""
    return f"published {title}"


ALL_TOOLS: list[BaseTool] = [search, lookup, write_file, edit_file, publish]


def answers(count: int, words: int = 30) -> list[AIMessage]:
    return [AIMessage(content=f"answer {i}: " + "detail " * words) for i in range(count)]


def question(index: int, words: int = 20) -> str:
    return f"question {index}: " + "context " * words


def summaries(count: int = 20, text: str = "summary") -> list[AIMessage]:
    return [AIMessage(content=f"{text} {i}") for i in range(count)]


@dataclass
class PeerAgent:
    """A `create_agent` graph with ctxpress outermost, and what its models and events recorded."""

    model: ScriptedChatModel
    summary_model: ScriptedChatModel
    workdir: LocalWorkdir
    middleware: ContextCompressionMiddleware
    graph: Any
    pressures: list[RequestPressure] = field(default_factory=list)

    def turn(self, text: str | list[Any], thread_id: str = THREAD_ID) -> list[dict[str, Any]]:
        """One user turn; the compression events it emitted, in order."""
        events: list[dict[str, Any]] = []
        payload = {"messages": [HumanMessage(content=text)]}
        for mode, item in self.graph.stream(payload, thread(thread_id), stream_mode=["custom", "updates"]):
            if mode == "custom" and item.get("type") == "context_compression":
                events.append(item)
        return events

    async def aturn(self, text: str | list[Any], thread_id: str = THREAD_ID) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        payload = {"messages": [HumanMessage(content=text)]}
        async for mode, item in self.graph.astream(
            payload, thread(thread_id), stream_mode=["custom", "updates"]
        ):
            if mode == "custom" and item.get("type") == "context_compression":
                events.append(item)
        return events

    def state(self, thread_id: str = THREAD_ID) -> dict[str, Any]:
        return dict(self.graph.get_state(thread(thread_id)).values)

    def messages(self, thread_id: str = THREAD_ID) -> list[BaseMessage]:
        return list(self.state(thread_id)["messages"])

    def event(self, thread_id: str = THREAD_ID) -> dict[str, Any] | None:
        return self.state(thread_id).get("_summarization_event")

    def last_request(self) -> list[BaseMessage]:
        return self.model.requests[-1]

    def history_files(self) -> list[str]:
        """The per-summary history files (not the conversation file), oldest name first."""
        return sorted(
            f.path for f in self.workdir.list_files(HISTORY_DIR) if not is_conversation_file(f.path)
        )

    def conversation_files(self) -> list[str]:
        return sorted(f.path for f in self.workdir.list_files(HISTORY_DIR) if is_conversation_file(f.path))


def make_agent(
    tmp_path: Path,
    config: CompressionConfig,
    *,
    script: list[Any] | None = None,
    summary_script: list[Any] | None = None,
    tools: Sequence[BaseTool] = ALL_TOOLS,
    system_prompt: str | None = SYSTEM_PROMPT,
    checkpointer: BaseCheckpointSaver | None = None,
    workdir: LocalWorkdir | None = None,
    model: ScriptedChatModel | None = None,
    middleware_class: type[ContextCompressionMiddleware] = ContextCompressionMiddleware,
    **middleware_options: Any,
) -> PeerAgent:
    model = model if model is not None else ScriptedChatModel(script=script if script is not None else [])
    summary_model = ScriptedChatModel(script=summary_script if summary_script is not None else summaries())
    workdir = workdir if workdir is not None else LocalWorkdir(tmp_path / "workdir")
    pressures: list[RequestPressure] = []
    middleware = middleware_class(
        config,
        workdir=workdir,
        summary_model=summary_model,
        on_pressure=pressures.append,
        **middleware_options,
    )
    graph = create_agent(
        model,
        list(tools),
        system_prompt=system_prompt,
        middleware=[middleware],
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
    )
    return PeerAgent(model, summary_model, workdir, middleware, graph, pressures)


def view_messages(request: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages of a model request after its system prompt."""
    return [m for m in request if m.type != "system"]
