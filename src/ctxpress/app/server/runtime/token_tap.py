"""A run's token deltas straight from the model's callbacks, instead of LangGraph's `messages` stream mode.

Measured (`bench/token_path.py`, 50 streams): LangChain and LangGraph cost about 140 µs of CPU per
streamed token with the `messages` mode -- at 100 streams of 50 tokens/s most of a core -- and the
whole token path of a run (mapping, coalescing, the live bus) about 150 µs; with this tap instead
about 115 µs (0.78×): the `messages` mode wraps every chunk in a tuple, queues it through the
graph's stream and yields it from `astream`, only for the executor to turn it into a delta. The
tap is a streaming callback handler (so models stream, as they do for the `messages` mode), called
inline on the event loop for each chunk, with the rules the mode and the stream mapper applied:

- a model call tagged `TAG_NOSTREAM`, or marked `lc_source: summarization` (the compression
  middleware's summary call, S21), is not tapped;
- the delta names the chunk's message id, the graph node, and -- for a sub-agent's call -- the
  namespace of the graph it runs in (LangGraph's own `graph_namespace` rule);
- empty text (a tool-call chunk, the usage chunk) is no delta.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, GenerationChunk, LLMResult
from langchain_core.tracers._streaming import _StreamingCallbackHandler
from langgraph.pregel._messages import graph_namespace

from ctxpress.app.server.runtime.usage_recording import is_summary_call

T = TypeVar("T")
DeltaSink = Callable[[dict[str, Any]], None]


def is_streamed_call(tags: list[str] | None, metadata: dict[str, Any] | None) -> bool:
    """Whether a model call's tokens are shown (S21: never the summary call's)."""
    return not is_summary_call(tags, metadata)


class TokenTap(BaseCallbackHandler, _StreamingCallbackHandler):
    """Hands each streamed text chunk of a run's model calls to `sink` as a `message_delta` payload."""

    #: Called on the event loop as the chunk arrives, not in a worker thread.
    run_inline = True

    def __init__(self, sink: DeltaSink) -> None:
        """Made on the event loop that consumes the deltas: `sink` is always called there (a model
        called synchronously in a worker thread hands its chunks over thread-safely)."""
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        #: Model calls being tapped: their node and namespace.
        self._calls: dict[UUID, tuple[str | None, tuple[str, ...]]] = {}

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not metadata or "langgraph_checkpoint_ns" not in metadata or not is_streamed_call(tags, metadata):
            return
        self._calls[run_id] = (metadata.get("langgraph_node"), graph_namespace(metadata))

    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        call = self._calls.get(run_id)
        if call is None or not isinstance(chunk, ChatGenerationChunk):
            return
        message = chunk.message
        if not isinstance(message, AIMessageChunk):
            return
        text = message.text
        if not text:
            return
        node, namespace = call
        payload: dict[str, Any] = {"message_id": message.id, "delta": text, "node": node}
        if namespace:
            payload["namespace"] = list(namespace)
        if threading.get_ident() == self._loop_thread:
            self._sink(payload)
        else:
            self._loop.call_soon_threadsafe(self._sink, payload)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self._calls.pop(run_id, None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._calls.pop(run_id, None)

    # What makes LangChain stream a model call for this handler; the output itself is not changed.
    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[T]) -> AsyncIterator[T]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[T]) -> Iterator[T]:
        return output
