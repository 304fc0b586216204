"""A chat-service process for the SIGKILL tests: `python -m tests.reliability.service_process PORT CONTROL_DIR`.

Settings come from `CTXPRESS_*` environment variables (data dir, database URL, lease, poll). The
agent is the reliability suite's knowledge-base agent with scripted models (`CTXPRESS_TEST_AGENT=chat`:
a terse chat agent without tools, for the races; `=plain`: one `fetch_report` per message, no
compression; `=paced`: one long answer streamed with real timing, for the live-event tests). With `CTXPRESS_TEST_LOCK_TRACE=<file>` every hold
of a conversation lock appends `enter` (once held) and `exit` (before release) lines to that file
with O_APPEND, so the holds of several processes land in one file in real-time order. The test steers where
the process stops by creating `CONTROL_DIR/arm-<point>`; on reaching an armed point the process
creates `CONTROL_DIR/reached-<point>` and waits there until it is killed:

- `history_write`: half-way through writing a history file (the temporary file holds half the bytes);
- `summary_call`: inside the summary model call, automatic or manual (the history file is being or
  has been written, the event is not);
- `tool_after_summary`: in the tool call right after a model call that made a new summary (the
  model node finished, so the checkpoint holds the new event); the model asks for that tool call;
- `tool_call`: inside any `fetch_report` call;
- `slow_summary`: the summary model takes `SLOW_SUMMARY_SECONDS` (announced, then carries on);
- `model_after_tool`: in the main model call that follows a tool result. Together with
  `arm-slow_checkpoint` (the checkpoint save after a tool step waits 5 s; LangGraph saves in the
  background while the next step runs) the tool's result is then only a pending write.
- `arm-slow_checkpoint_after_call`: the checkpoint save after a model step that calls a tool waits
  5 s (with `tool_call`: how a run's `durability` decides what a kill in the tool leaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.app import create_app
from ctxpress.app.server.http_serving import serve_http
from ctxpress.app.server.settings import Settings
from ctxpress.summary.event import is_summary_message
from ctxpress.workdir import LocalWorkdir
from tests.fakes import PacedChatModel, ScriptedChatModel
from tests.server.fakes import new_call_id, report_text, report_tool_script

from .support import COMPRESSION

PAUSE_SECONDS = 600.0
SLOW_SUMMARY_SECONDS = 10.0
#: The service code whose functions a lock trace names as the lock's taker.
SERVICE_PACKAGES = ("ctxpress.app.server.usecases", "ctxpress.app.server.runtime")
#: Set by `main`: where the test arms points and this process reports reaching them.
CONTROL = Path(".")
_seen_summaries: set[str] = set()
_new_summary = {"pending": False}


def armed(point: str) -> bool:
    return (CONTROL / f"arm-{point}").exists()


def stop_here(point: str) -> None:
    """Announce the point and wait to be killed (bounded, so a forgotten process ends by itself)."""
    (CONTROL / f"reached-{point}").write_text(str(os.getpid()))
    time.sleep(PAUSE_SECONDS)
    os._exit(3)


def main_script(messages: Sequence[BaseMessage]) -> AIMessage:
    if isinstance(messages[-1], ToolMessage) and armed("model_after_tool"):
        stop_here("model_after_tool")
    return _main_script(messages)


def _main_script(messages: Sequence[BaseMessage]) -> AIMessage:
    """`report_tool_script`, except that the model call which first sees a new summary after a tool
    result fetches that report once more: a tool call then follows the summary within the run."""
    summary = next((m for m in messages[:2] if is_summary_message(m)), None)
    is_new = summary is not None and str(summary.id) not in _seen_summaries
    if summary is not None:
        _seen_summaries.add(str(summary.id))
    _new_summary["pending"] = is_new
    if is_new and isinstance(messages[-1], ToolMessage):
        caller = next(m for m in reversed(messages) if isinstance(m, AIMessage) and m.tool_calls)
        call = {
            "name": "fetch_report",
            "args": dict(caller.tool_calls[0]["args"]),
            "id": new_call_id("again"),
        }
        return AIMessage("再查一次。", tool_calls=[call])
    return report_tool_script(messages)


def summary_script(messages: Sequence[BaseMessage]) -> AIMessage:
    if armed("summary_call"):
        stop_here("summary_call")
    if armed("slow_summary"):
        (CONTROL / "reached-slow_summary").write_text(str(os.getpid()))
        time.sleep(SLOW_SUMMARY_SECONDS)
    return AIMessage("摘要：用户先后询问了几份报告，助手逐一给出了结论。")


@tool
def fetch_report(topic: str) -> str:
    """Fetch a long report about a topic."""
    if _new_summary["pending"] and armed("tool_after_summary"):
        stop_here("tool_after_summary")
    if armed("tool_call"):
        stop_here("tool_call")
    return report_text(topic)


_real_atomic_write = LocalWorkdir._atomic_write


def _pausing_atomic_write(target: Path, data: bytes, durable: bool) -> None:
    if "conversation_history" in target.parts and armed("history_write"):
        fd, _name = tempfile.mkstemp(prefix=".ctxpress-tmp-", dir=target.parent)
        os.write(fd, data[: len(data) // 2])
        os.fsync(fd)
        stop_here("history_write")
    _real_atomic_write(target, data, durable)


def chat_script(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage("好")


#: The `paced` agent's answer: 6-character chunks, `CTXPRESS_TEST_CHUNKS` of them.
PACED_SENTENCE = "流式文本片段。"


def paced_answer_text(chunks: int) -> str:
    return "".join(f"{index:04d}{PACED_SENTENCE}"[:6] for index in range(chunks))


def paced_script(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage(paced_answer_text(int(os.environ.get("CTXPRESS_TEST_CHUNKS", "40"))))


def agent() -> AgentDefinition:
    if os.environ.get("CTXPRESS_TEST_AGENT") == "paced":
        # Streams with real timing: CTXPRESS_TEST_CHUNK_SECONDS between 6-character chunks.
        seconds = float(os.environ.get("CTXPRESS_TEST_CHUNK_SECONDS", "0.05"))
        return AgentDefinition(
            name="kb",
            default=True,
            model=ModelSpec(
                model=PacedChatModel(script=paced_script, model_name="main", chunk_seconds=seconds)
            ),
            tools=(),
            capabilities=(),
        )
    if os.environ.get("CTXPRESS_TEST_AGENT") == "plain":
        return AgentDefinition(
            name="kb",
            default=True,
            model=ModelSpec(model=ScriptedChatModel(script=report_tool_script, model_name="main")),
            tools=(fetch_report,),
            capabilities=(),
        )
    if os.environ.get("CTXPRESS_TEST_AGENT") == "chat":
        return AgentDefinition(
            name="kb",
            default=True,
            model=ModelSpec(
                model=ScriptedChatModel(script=chat_script, model_name="main", report_usage=False)
            ),
            summary_model=ModelSpec(model=ScriptedChatModel(script=summary_script, model_name="summarizer")),
            tools=(),
            capabilities=("context_compression",),
            compression=COMPRESSION,
        )
    return AgentDefinition(
        name="kb",
        default=True,
        model=ModelSpec(model=ScriptedChatModel(script=main_script, model_name="main")),
        summary_model=ModelSpec(model=ScriptedChatModel(script=summary_script, model_name="summarizer")),
        tools=(fetch_report, "write_file", "read_file", "list_files"),
        capabilities=("context_compression",),
        compression=COMPRESSION,
    )


def trace_locks(trace_file: str) -> None:
    """Wrap the one function behind every conversation lock (`locks._hold`) to log its holds."""
    from ctxpress.app.server.runtime import locks

    original = locks._hold
    fd = os.open(trace_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    counter = itertools.count(1)

    def log(kind: str, token: str, conversation_id: str, where: str = "") -> None:
        entry = {"kind": kind, "token": token, "conversation": conversation_id, "where": where}
        os.write(fd, (json.dumps(entry) + "\n").encode())

    def caller() -> str:
        """The service function that asked for the lock (for reading a trace)."""
        frame: Any = sys._getframe(2)
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module.startswith(SERVICE_PACKAGES) and not module.endswith(".locks"):
                return f"{module.rsplit('.', 1)[-1]}.{frame.f_code.co_name}"
            frame = frame.f_back
        return "?"

    @contextlib.asynccontextmanager
    async def traced(session: Any, conversation_id: str, *, skip_locked: bool) -> AsyncIterator[Any]:
        async with original(session, conversation_id, skip_locked=skip_locked) as locked:
            if locked is None:
                yield None
                return
            token = f"{os.getpid()}-{next(counter)}"
            log("enter", token, conversation_id, caller())
            try:
                yield locked
            finally:
                log("exit", token, conversation_id)

    locks._hold = traced


def slow_checkpoints() -> None:
    """When `arm-slow_checkpoint` exists, the checkpoint save after a tool step waits 5 s."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    for saver in (AsyncSqliteSaver, AsyncPostgresSaver):
        original = saver.aput

        async def aput(self: Any, config: Any, checkpoint: Any, *args: Any, _original: Any = original) -> Any:
            messages = checkpoint.get("channel_values", {}).get("messages") or [None]
            if armed("slow_checkpoint") and isinstance(messages[-1], ToolMessage):
                await asyncio.sleep(5)  # only the save after a tool step lags
            last = messages[-1]
            if armed("slow_checkpoint_after_call") and isinstance(last, AIMessage) and last.tool_calls:
                await asyncio.sleep(5)  # only the save after a model step that calls a tool lags
            return await _original(self, config, checkpoint, *args)

        saver.aput = aput  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    global CONTROL
    port, CONTROL = int(argv[1]), Path(argv[2])
    LocalWorkdir._atomic_write = staticmethod(_pausing_atomic_write)  # type: ignore[method-assign]
    slow_checkpoints()
    if trace_file := os.environ.get("CTXPRESS_TEST_LOCK_TRACE"):
        trace_locks(trace_file)
    settings = Settings()
    serve_http(
        create_app(settings, agents=[agent()]), settings, host="127.0.0.1", port=port, log_level="warning"
    )


if __name__ == "__main__":
    main(sys.argv)
