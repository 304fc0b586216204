"""Empty model streams: a clear `EmptyStreamError` instead of langchain-core's bare `ValueError`.

llama-cpp-python's server answers an overflowing *streamed* request with HTTP 200 and an empty body
(then drops the connection). langchain-core refuses a stream without chunks with a bare
`ValueError`; `raising_context_overflow()` / `OverflowMappingMiddleware` turn that into
`EmptyStreamError`, and `guard_empty_stream` / `aguard_empty_stream` also catch chunks that say
nothing. It is no `ContextOverflowError` unless a deployment opts in with
`empty_stream_as_overflow=True`: an empty 200 stream is also what a crashed worker or a buffering
proxy produces, and forcing a summary would then drop history for nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, TypeVar

from langchain_core.exceptions import ContextOverflowError, ModelError
from langchain_core.messages import BaseMessageChunk
from langchain_core.outputs import ChatGenerationChunk

from ctxpress.errors import CtxpressError

__all__ = [
    "EmptyStreamError",
    "EmptyStreamOverflowError",
    "aguard_empty_stream",
    "empty_stream_error",
    "guard_empty_stream",
    "is_empty_stream_error",
]


class EmptyStreamError(ModelError, CtxpressError):
    """A streamed model response ended with no content, no tool calls and no finish reason.

    Not retryable: the one known cause (llama-cpp-python's server answering an overflowing streamed
    request with an empty HTTP 200 stream) gives the same empty stream on every retry.
    """

    is_retryable = False


class EmptyStreamOverflowError(EmptyStreamError, ContextOverflowError):
    """An empty stream treated as a context overflow (opt-in, see `empty_stream_as_overflow`)."""


_EMPTY_STREAM_MESSAGE = (
    "The model's stream ended with no content, no tool calls and no finish reason. "
    "llama-cpp-python's server answers an overflowing streamed request this way."
)

# How langchain-core itself reports a stream that produced no chunk at all: `model.stream()` /
# `astream()` raise the first, `invoke()` with streaming on (an agent streamed with
# stream_mode="messages") the second or third. The chunks never reach a guard in those cases.
_LANGCHAIN_EMPTY_STREAM_MESSAGES = (
    "No generation chunks were returned",
    "No generations found in stream.",
    "v2 stream finished without producing a message",
)


def is_empty_stream_error(exc: BaseException) -> bool:
    """Whether `exc` reports a stream that ended without producing anything."""
    if isinstance(exc, EmptyStreamError):
        return True
    return isinstance(exc, ValueError | RuntimeError) and str(exc) in _LANGCHAIN_EMPTY_STREAM_MESSAGES


def empty_stream_error(*, as_overflow: bool) -> EmptyStreamError:
    """The error for an empty stream; also a `ContextOverflowError` when the deployment opted in."""
    error_type = EmptyStreamOverflowError if as_overflow else EmptyStreamError
    return error_type(_EMPTY_STREAM_MESSAGE)


StreamChunk = TypeVar("StreamChunk", BaseMessageChunk, ChatGenerationChunk)


def _chunk_says_something(chunk: BaseMessageChunk | ChatGenerationChunk) -> bool:
    """Content, a tool call, or a finish reason. Usage alone does not count."""
    message = chunk.message if isinstance(chunk, ChatGenerationChunk) else chunk
    if message.content:
        return True
    if getattr(message, "tool_call_chunks", None) or getattr(message, "tool_calls", None):
        return True
    metadata: dict[str, Any] = {**message.response_metadata}
    if isinstance(chunk, ChatGenerationChunk):
        metadata.update(chunk.generation_info or {})
    return bool(metadata.get("finish_reason") or metadata.get("stop_reason"))


def guard_empty_stream(
    chunks: Iterable[StreamChunk], *, empty_stream_as_overflow: bool = False
) -> Iterator[StreamChunk]:
    """Pass `chunks` through; raise `EmptyStreamError` if none had content, a tool call or a finish reason.

    Use around `model.stream(...)` (or a model's raw chunk iterator). A stream with no chunk at all
    is already refused by langchain-core with a `ValueError`; `raising_context_overflow()` turns that
    one into `EmptyStreamError`. This guard catches the rest: chunks that arrive but say nothing
    (a role-only delta, a usage-only chunk). With `empty_stream_as_overflow=True` the error is an
    `EmptyStreamOverflowError`, i.e. also a `ContextOverflowError`.
    """
    said_something = False
    for chunk in chunks:
        said_something = said_something or _chunk_says_something(chunk)
        yield chunk
    if not said_something:
        raise empty_stream_error(as_overflow=empty_stream_as_overflow)


async def aguard_empty_stream(
    chunks: AsyncIterable[StreamChunk], *, empty_stream_as_overflow: bool = False
) -> AsyncIterator[StreamChunk]:
    """Async `guard_empty_stream`, for `model.astream(...)`."""
    said_something = False
    async for chunk in chunks:
        said_something = said_something or _chunk_says_something(chunk)
        yield chunk
    if not said_something:
        raise empty_stream_error(as_overflow=empty_stream_as_overflow)
