"""The chat service with a stopwatch on manual compression, for `bench/service_load.py`:

    python bench/timed_service.py PORT

It runs the service as `ctxpress serve` does -- settings from the `CTXPRESS_*` environment, the
default agent (the built-in offline model over the knowledge base, default compression settings),
`create_app` under uvicorn on 127.0.0.1 -- with two additions that change no behaviour:

- the agent's summary model is the built-in model itself (`BuiltinChatModel`, the same extractive
  summary writer the default agent uses) with a stopwatch around each summary call;
- each `CompressionService.compress` call (what `POST /api/conversations/{id}/compress` awaits) and
  its steps are timed: lock, state read, L1 view, summary call, history file, state update,
  pressure record, release (the checkpoint prune runs after the answer, in the background) -- and,
  inside the state read and update, the checkpoint saver's own
  database reads and writes (counted: how often a call reads the checkpoint). The steps are wrapped where `compression.py` and `manual.py` look them
  up (their module globals, the graph class), so the engine modules stay untouched.

After each compress call one JSON line goes to the file named by `CTXPRESS_BENCH_TIMINGS`:
`{"service_s": …, "summary_model_s": …, "steps": {name: seconds}, "counts": {name: calls}}`. With `CTXPRESS_BENCH_PROFILE`
set to a file, each compress call also runs under cProfile (the event-loop thread only: L1, the
history write and the summary call run in worker threads, which the step timings cover) and the
accumulated statistics are written there.
"""

from __future__ import annotations

import contextlib
import contextvars
import cProfile
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph.state import CompiledStateGraph

from ctxpress import manual
from ctxpress.app.models import BuiltinChatModel
from ctxpress.app.models.builtin import is_summary_call
from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec, default_agent
from ctxpress.app.server.app import create_app
from ctxpress.app.server.http_serving import serve_http
from ctxpress.app.server.repositories.pressure import PressureRepository
from ctxpress.app.server.settings import Settings
from ctxpress.app.server.usecases import compression
from ctxpress.tokens import TokenCounter

TIMINGS_ENV = "CTXPRESS_BENCH_TIMINGS"
PROFILE_ENV = "CTXPRESS_BENCH_PROFILE"
#: The step name of the summary model's own time (excluded from the benchmark's figure).
SUMMARY_MODEL = "summary model"
#: Steps measured inside others: the saver's own database reads and writes of checkpoints (whatever
#: the service puts in front of the saver), inside the state read and update.
CHECKPOINT_READ = "checkpoint read from the database"
CHECKPOINT_WRITE = "checkpoint write"

T = TypeVar("T")


class Stopwatch:
    """The steps of one compress call: seconds per step name (steps may run in worker threads)."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, step: str, seconds: float) -> None:
        with self._lock:
            self.steps[step] = self.steps.get(step, 0.0) + seconds
            self.counts[step] = self.counts.get(step, 0) + 1


#: The stopwatch of the compress call in progress; copied into its worker threads (`to_thread`,
#: LangChain's executor), absent from runs and every other request.
CURRENT: contextvars.ContextVar[Stopwatch | None] = contextvars.ContextVar("bench_stopwatch", default=None)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        watch = CURRENT.get()
        if watch is not None:
            watch.add(name, time.perf_counter() - started)


def timed_sync(name: str, function: Callable[..., T]) -> Callable[..., T]:
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with step(name):
            return function(*args, **kwargs)

    return wrapper


def timed_async(name: str, function: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        with step(name):
            return await function(*args, **kwargs)

    return wrapper


class StopwatchBuiltinModel(BuiltinChatModel):
    """The built-in model; its summary calls are timed (both the streamed and the plain path end here)."""

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        if not is_summary_call(messages, run_manager):
            yield from super()._stream(messages, stop, run_manager, **kwargs)
            return
        with step(SUMMARY_MODEL):
            yield from super()._stream(messages, stop, run_manager, **kwargs)


def wrap(owner: Any, name: str, wrapper: Callable[[Any], Any]) -> Any:
    """Replace `owner.name` by `wrapper(original)`; returns the original."""
    original = getattr(owner, name)
    setattr(owner, name, wrapper(original))
    return original


def time_token_counts(counter: TokenCounter) -> None:
    """Time the whole-request counts of an agent's token counter, the one manual compression counts
    with (the built-in model counts with a counter of its own, inside the summary model's step)."""
    if "count_request" not in vars(counter):  # not wrapped yet
        counter.count_request = timed_sync("token counts", counter.count_request)  # type: ignore[method-assign]


def instrument(timings_file: str, profile_file: str | None) -> None:
    """Wrap the steps of manual compression where the service looks them up."""
    wrap(manual, "compact_view", lambda f: timed_sync("L1 view", f))
    wrap(manual, "save_history", lambda f: timed_sync("history file", f))
    wrap(manual, "asummarize", lambda f: timed_async("summary call (with the model)", f))
    wrap(CompiledStateGraph, "aget_state", lambda f: timed_async("state read (aget_state)", f))
    wrap(CompiledStateGraph, "aupdate_state", lambda f: timed_async("state update (aupdate_state)", f))
    wrap(PressureRepository, "invalidate", lambda f: timed_async("pressure record", f))
    wrap(compression.CompressionService, "_claim", lambda f: timed_async("compressing mark", f))
    for saver in (AsyncSqliteSaver, AsyncPostgresSaver):  # LangGraph's savers, where the database is
        wrap(saver, "aget_tuple", lambda f: timed_async(CHECKPOINT_READ, f))
        wrap(saver, "aput", lambda f: timed_async(CHECKPOINT_WRITE, f))

    original_lock = compression.conversation_lock

    @contextlib.asynccontextmanager
    async def timed_lock(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        started = time.perf_counter()
        async with original_lock(*args, **kwargs) as locked:
            watch = CURRENT.get()
            if watch is not None:
                watch.add("lock", time.perf_counter() - started)
            yield locked
            released = time.perf_counter()
        if watch is not None:
            watch.add("commit and release", time.perf_counter() - released)

    wrap(compression, "conversation_lock", lambda _original: timed_lock)
    original_compress = compression.CompressionService.compress
    profiler = cProfile.Profile() if profile_file else None

    async def compress(self: compression.CompressionService, conversation: Any) -> Any:
        runtime = self.agents.get(conversation.agent_name)
        if runtime is not None:
            time_token_counts(runtime.token_counter)
        watch = Stopwatch()
        token = CURRENT.set(watch)
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        try:
            return await original_compress(self, conversation)
        finally:
            if profiler is not None:
                profiler.disable()
            elapsed = time.perf_counter() - started
            CURRENT.reset(token)
            line = {
                "service_s": elapsed,
                "summary_model_s": watch.steps.get(SUMMARY_MODEL, 0.0),
                "steps": watch.steps,
                "counts": watch.counts,
            }
            with open(timings_file, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
            if profiler is not None and profile_file:
                profiler.dump_stats(profile_file)

    wrap(compression.CompressionService, "compress", lambda _original: compress)


def timed_agent() -> AgentDefinition:
    """The default agent, its summary model the built-in model with a stopwatch."""
    return default_agent().model_copy(update={"summary_model": ModelSpec(model=StopwatchBuiltinModel())})


def main(argv: list[str]) -> None:
    port = int(argv[1])
    instrument(os.environ[TIMINGS_ENV], os.environ.get(PROFILE_ENV) or None)
    settings = Settings()
    serve_http(
        create_app(settings, agents=[timed_agent()]),
        settings,
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )


if __name__ == "__main__":
    main(sys.argv)
