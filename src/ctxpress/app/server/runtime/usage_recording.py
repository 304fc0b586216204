"""Usage of one run's model calls as they happen (S26): what each call reported, main or summary.

- Summary-model calls (tagged by the compression middleware with `TAG_NOSTREAM` and metadata
  `lc_source: "summarization"`) form their own category, so the operator sees the whole bill.
- Providers in the exclusion list (default `siliconflow`, `siliconflow-cn`) are recorded but shown
  as "usage unavailable".
- Approximate token counts are never recorded here (S12): only what the provider reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.constants import TAG_NOSTREAM

from ctxpress.app.server.db.models import USAGE_MAIN, USAGE_SUMMARY

SUMMARY_SOURCE: Final = "summarization"
UNKNOWN: Final = "unknown"


def is_summary_call(tags: Sequence[str] | None, metadata: dict[str, Any] | None) -> bool:
    """The compression middleware's internal summary call (never a user-visible message, S21)."""
    return (metadata or {}).get("lc_source") == SUMMARY_SOURCE or TAG_NOSTREAM in (tags or ())


@dataclass(frozen=True)
class UsageDraft:
    category: str
    provider: str
    model: str
    reported: bool
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    total_tokens: int = 0

    def to_row(self, conversation_id: str, run_id: str | None) -> dict[str, Any]:
        """The `usage_records` row of this call."""
        return {
            "conversation_id": conversation_id,
            "run_id": run_id,
            "category": self.category,
            "provider": self.provider,
            "model": self.model,
            "reported": self.reported,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class _PendingCall:
    category: str
    provider: str
    model: str


class UsageCollector(AsyncCallbackHandler):
    """Callback handler for one run: notes each chat-model call and its reported `usage_metadata`."""

    #: Awaited in turn on the event loop. Otherwise LangChain gathers the handler's events as tasks:
    #: a task for every streamed chunk (its no-op `on_llm_new_token`), about 4 ms of a 54 ms turn.
    run_inline = True

    def __init__(self, *, main_provider: str | None, summary_provider: str | None) -> None:
        self._main_provider = main_provider
        self._summary_provider = summary_provider
        self._pending: dict[UUID, _PendingCall] = {}
        self._finished: list[UsageDraft] = []

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        summary = is_summary_call(tags, metadata)
        configured = self._summary_provider if summary else self._main_provider
        reported_provider = (metadata or {}).get("ls_provider")
        self._pending[run_id] = _PendingCall(
            category=USAGE_SUMMARY if summary else USAGE_MAIN,
            provider=(configured or reported_provider or UNKNOWN).lower(),
            model=str((metadata or {}).get("ls_model_name") or UNKNOWN),
        )

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._pending.pop(run_id, None)
        if call is None:
            return
        message = _first_message(response)
        usage = getattr(message, "usage_metadata", None) if message is not None else None
        model = call.model
        if model == UNKNOWN and message is not None:
            model = str(message.response_metadata.get("model_name") or UNKNOWN)
        if not usage:
            self._finished.append(UsageDraft(call.category, call.provider, model, reported=False))
            return
        details = usage.get("input_token_details") or {}
        self._finished.append(
            UsageDraft(
                call.category,
                call.provider,
                model,
                reported=True,
                input_tokens=int(usage.get("input_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
                cache_read_tokens=int(details.get("cache_read") or 0),
                cache_creation_tokens=int(details.get("cache_creation") or 0),
                total_tokens=int(usage.get("total_tokens") or 0),
            )
        )

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._pending.pop(run_id, None)

    def drain(self) -> list[UsageDraft]:
        """The calls finished since the last drain."""
        finished, self._finished = self._finished, []
        return finished


def _first_message(response: LLMResult) -> BaseMessage | None:
    for generations in response.generations:
        for generation in generations:
            if isinstance(generation, ChatGeneration):
                return generation.message
    return None


TOKEN_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "total_tokens",
)


def token_fields(source: Any) -> dict[str, int]:
    """The token counts of a draft or of an aggregated group, by field name."""
    return {name: int(getattr(source, name)) for name in TOKEN_FIELDS}


@dataclass(frozen=True)
class UsageExclusion:
    """The providers whose usage is not aggregated (S26), lower-cased."""

    providers: tuple[str, ...]

    @classmethod
    def of(cls, providers: Sequence[str]) -> UsageExclusion:
        return cls(tuple(provider.lower() for provider in providers))

    def excludes(self, provider: str) -> bool:
        return provider in self.providers

    def is_available(self, draft: UsageDraft) -> bool:
        return draft.reported and not self.excludes(draft.provider)

    def event_data(self, draft: UsageDraft) -> dict[str, Any]:
        """The `usage` SSE event of one call."""
        available = self.is_available(draft)
        return {
            "category": draft.category,
            "provider": draft.provider,
            "model": draft.model,
            "usage_available": available,
            **(token_fields(draft) if available else {}),
        }
