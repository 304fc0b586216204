"""Re-raising the model's overflow errors as `ContextOverflowError`: a context manager, the agent
middleware, and a retry policy that never retries an overflow.

Where `OverflowMappingMiddleware` goes: in `create_agent(middleware=[A, B, C])` A is the outermost
wrapper. Put the mapping innermost (last), so every outer middleware, above all the compression
middleware and `ModelRetryMiddleware`, sees the same `ContextOverflowError`::

    create_agent(
        model,
        middleware=[
            ContextCompressionMiddleware(...),                      # outermost: handles the overflow
            ModelRetryMiddleware(retry_on=retry_unless_overflow),   # never retries an overflow
            OverflowMappingMiddleware(),                             # innermost: maps provider errors
        ],
    )

Why the order matters with the retry middleware's defaults: docs/overflow-wordings.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from langchain.agents.middleware.types import AgentMiddleware, ModelCallResult, ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError, ModelError
from langgraph.errors import GraphBubbleUp

from ctxpress.overflow.classify import as_context_overflow, is_context_overflow
from ctxpress.overflow.guards import EmptyStreamError, empty_stream_error, is_empty_stream_error

__all__ = ["OverflowMappingMiddleware", "raising_context_overflow", "retry_unless_overflow"]


def _mapped_model_error(exc: Exception, *, empty_stream_as_overflow: bool) -> ModelError | None:
    if is_empty_stream_error(exc):
        if isinstance(exc, EmptyStreamError) and (
            isinstance(exc, ContextOverflowError) or not empty_stream_as_overflow
        ):
            return None  # already the error we would raise
        return empty_stream_error(as_overflow=empty_stream_as_overflow)
    return as_context_overflow(exc)


@contextmanager
def raising_context_overflow(*, empty_stream_as_overflow: bool = False) -> Iterator[None]:
    """Re-raise overflow errors raised inside the block as `ContextOverflowError`.

    Works around `model.invoke`, and around iterating `model.stream` / `model.astream` (errors
    surface during iteration). Empty-stream failures become `EmptyStreamError` (or, with
    `empty_stream_as_overflow=True`, `EmptyStreamOverflowError`). Anything else passes unchanged.
    """
    try:
        yield
    except (GraphBubbleUp, ContextOverflowError):
        raise
    except Exception as exc:
        mapped = _mapped_model_error(exc, empty_stream_as_overflow=empty_stream_as_overflow)
        if mapped is None:
            raise
        raise mapped from exc


def retry_unless_overflow(exc: Exception) -> bool:
    """`retry_on` for `ModelRetryMiddleware`: LangChain's default policy, but never a context overflow.

    Retrying an identical overflowing request cannot succeed; worse, once the retries run out the
    retry middleware's default `on_failure="continue"` turns the error into an `AIMessage`, so the
    compression middleware never gets its `ContextOverflowError`.
    """
    if is_context_overflow(exc) or is_empty_stream_error(exc):
        return False
    if isinstance(exc, ModelError):
        return exc.is_retryable
    return True


class OverflowMappingMiddleware(AgentMiddleware):
    """Re-raise the model's context-overflow errors, whatever the server's wording, as `ContextOverflowError`.

    Place it *last* in `create_agent(middleware=[...])`, i.e. innermost and closest to the model, so
    that the compression middleware and `ModelRetryMiddleware` (use `retry_on=retry_unless_overflow`)
    both see the mapped error. Also covers streamed model calls: with `stream_mode="messages"` the
    error surfaces while the model's stream is consumed, which still happens inside the handler.
    """

    def __init__(self, *, empty_stream_as_overflow: bool = False) -> None:
        super().__init__()
        self.empty_stream_as_overflow = empty_stream_as_overflow

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelCallResult:
        with raising_context_overflow(empty_stream_as_overflow=self.empty_stream_as_overflow):
            return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelCallResult:
        with raising_context_overflow(empty_stream_as_overflow=self.empty_stream_as_overflow):
            return await handler(request)
