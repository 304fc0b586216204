"""S3: `_summarization_event` has one owner. A second summariser in the same agent is refused.

DeepAgents' summarization middleware (and any middleware modelled on it) reads and writes the
same state key. Stacked with ctxpress, one applies the other's cutoff to a list that is already
shortened, and the model gets a wrong request (a summary without the user's question). Both
orders are detected before any such request is sent:

- ctxpress outermost: the inner chain gets a state whose `_summarization_event` refuses to be
  read (`guarded_state`); a summariser reading it raises.
- ctxpress inner: the request reaching ctxpress already carries the summary message of the state's
  event, ctxpress's or another summariser's (`check_single_summarizer`).

An event another summariser left in the state, whose summary the request does not carry, is no
conflict: the thread moved to ctxpress and continues from it (`adoption.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from ctxpress.errors import CtxpressError
from ctxpress.summary.event import EVENT_KEY, is_summary_message

CONFLICT_FIX = (
    "use one summariser per agent: remove the other summarization middleware, or do not add "
    "ContextCompressionMiddleware; with create_deep_agent pass DeepAgentsCompressionMiddleware "
    "(ctxpress.deepagents_drop_in), which takes the place of DeepAgents' SummarizationMiddleware"
)


class SummarizerConflictError(CtxpressError, RuntimeError):
    """Another summarization middleware shares `_summarization_event` with ctxpress."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"two summarisers share the agent state key {EVENT_KEY!r}: {what}; each would apply "
            f"the other's cutoff and the model would get a wrong request. Fix: {CONFLICT_FIX}"
        )


class _GuardedState(dict[str, Any]):
    """The state as the inner middleware chain sees it: reading the event key is a conflict."""

    def __getitem__(self, key: str) -> Any:
        self._check(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._check(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._check(key)
        return super().__contains__(key)

    @staticmethod
    def _check(key: object) -> None:
        if key == EVENT_KEY:
            raise SummarizerConflictError(
                "a middleware inside ContextCompressionMiddleware reads it (a second summariser)"
            )


def guarded_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` for the middleware inside ctxpress: its event is ctxpress's alone."""
    return _GuardedState(state)


def check_single_summarizer(messages: Sequence[BaseMessage], event: Any) -> None:
    """Raise when the request shows another summariser at work outside ctxpress: it already
    carries the summary message of the state's event."""
    if not isinstance(event, dict) or not isinstance(event.get("summary_message"), BaseMessage):
        return
    summary: BaseMessage = event["summary_message"]
    if is_summary_message(summary):
        if any(is_summary_message(m) and m.id == summary.id for m in messages):
            raise SummarizerConflictError(
                "a middleware outside ContextCompressionMiddleware already applied ctxpress's summary"
            )
    elif any(_same_message(m, summary) for m in messages):
        raise SummarizerConflictError(
            "another summariser outside ContextCompressionMiddleware applied its summary to the request"
        )


def _same_message(message: BaseMessage, summary: BaseMessage) -> bool:
    if summary.id is not None:
        return message.id == summary.id
    return message.type == summary.type and message.content == summary.content
