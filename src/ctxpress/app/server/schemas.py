"""Request and response bodies of the HTTP API (validated; unknown request fields are rejected)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from ctxpress.app.models.suggestions import suggestions_by_language
from ctxpress.app.server.db.models import Conversation, Message, Run, User
from ctxpress.app.server.errors import ErrorCode
from ctxpress.app.server.rendering import MAX_RENDER_CHARS, render_markdown
from ctxpress.app.server.repositories.runs import BusyReason, BusyState
from ctxpress.app.server.runtime.agents import AgentRuntime
from ctxpress.app.server.serialization import (
    ASSISTANT_ROLE,
    MAX_STORED_JSON_DEPTH,
    storable_json,
    storable_text,
)
from ctxpress.app.server.usecases.compression import FAILURE_STATUS, CompressionOutcome, ContextStatus
from ctxpress.app.server.usecases.compression_history import CompressionRecord, Trigger
from ctxpress.app.server.usecases.message_limits import message_budget
from ctxpress.manual import FailedPart
from ctxpress.pressure import RequestPressure
from ctxpress.summary.event import SummarizationEvent

RunStatus = Literal["queued", "running", "waiting_input", "succeeded", "failed", "cancelled"]


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class CreateConversationRequest(RequestBody):
    agent: str | None = Field(
        default=None, min_length=1, max_length=64, description="Default: the default agent."
    )
    title: str = Field(default="", max_length=200)


class CreateRunRequest(RequestBody):
    input: str = Field(
        min_length=1,
        description="The user's message (NUL and lone surrogates are kept as U+FFFD, as in the chat record).",
    )

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("input must contain more than white space")
        return storable_text(value)


class ResumeRunRequest(RequestBody):
    value: JsonValue = Field(
        description="The answer handed to the waiting interrupt (e.g. the user's reply). Integers within "
        f"64 bits, finite numbers, at most {MAX_STORED_JSON_DEPTH} levels of nesting."
    )
    interrupt_id: str | None = Field(
        default=None, max_length=128, description="Needed when several are pending."
    )

    @field_validator("value")
    @classmethod
    def _storable(cls, value: JsonValue) -> JsonValue:
        # The answer goes into the checkpoint (msgpack: 64-bit integers, bounded nesting) and the
        # runs table (PostgreSQL JSONB: no NaN, no NUL): refuse here what either would fail on later.
        return storable_json(value)


# --- error bodies (`errors.py` renders them; these document them) -------------------------------


class ErrorDetail(BaseModel):
    code: ErrorCode
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    """The body of every error answer; some codes add their own fields (below)."""

    error: ErrorDetail


class ThreadBusyDetail(BaseModel):
    code: Literal[ErrorCode.THREAD_BUSY]
    message: str
    reason: BusyReason
    details: dict[str, Any] | None = None


class ThreadBusyResponse(BaseModel):
    error: ThreadBusyDetail


class CompressionFailedDetail(BaseModel):
    code: Literal[ErrorCode.COMPRESSION_FAILED]
    message: str
    part: FailedPart = Field(
        description="The step that failed: " + ", ".join(FAILURE_STATUS),
    )


class CompressionFailedResponse(BaseModel):
    error: CompressionFailedDetail


#: Documented on every route: whatever the status, an error answers with `ErrorResponse`.
DEFAULT_ERROR_RESPONSE: Final = {"model": ErrorResponse, "description": "An error (`error.code` says which)."}


class UserOut(BaseModel):
    id: str
    name: str
    is_admin: bool

    @classmethod
    def of(cls, user: User) -> UserOut:
        return cls(id=user.id, name=user.name, is_admin=user.is_admin)


class AgentOut(BaseModel):
    name: str
    description: str
    default: bool
    model: str
    builtin_model: bool
    #: Shown in the UI when the agent answers with the built-in offline model.
    notice: str | None
    capabilities: list[str]
    compression: dict[str, Any]
    #: The largest user message this agent accepts, in approximate tokens (larger ones answer 413
    #: `message_too_large`), and what it is derived from.
    max_message_tokens: int
    message_budget: dict[str, int | None]
    #: Phrases to offer in an empty conversation, by page language (the built-in model's; else empty).
    suggestions: dict[str, list[str]]

    @classmethod
    def of(cls, runtime: AgentRuntime, *, default: bool) -> AgentOut:
        budget = message_budget(runtime)
        definition = runtime.definition
        return cls(
            name=runtime.name,
            description=definition.description,
            default=default,
            model=definition.model.label,
            builtin_model=runtime.builtin_model,
            notice=runtime.notice,
            capabilities=list(definition.capabilities),
            compression={
                **definition.compression.model_dump(),
                "threshold_tokens": definition.compression.threshold_tokens,
            },
            max_message_tokens=budget.max_message_tokens,
            message_budget=budget.as_dict(),
            suggestions=suggestions_by_language() if runtime.builtin_model else {},
        )


class UpdateConversationRequest(RequestBody):
    """Rename and/or archive (hide from the list; nothing is deleted) or bring back."""

    title: str | None = Field(default=None, max_length=200)
    archived: bool | None = None


class ConversationOut(BaseModel):
    id: str
    agent: str
    #: Given at creation or by a rename; otherwise taken from the first question.
    title: str
    created_at: datetime
    updated_at: datetime
    #: When it was archived (hidden from the list by default); null when listed.
    archived_at: datetime | None

    @classmethod
    def of(cls, conversation: Conversation) -> ConversationOut:
        return cls(
            id=conversation.id,
            agent=conversation.agent_name,
            title=conversation.title,
            created_at=conversation.created_at,
            updated_at=conversation.updated_at,
            archived_at=conversation.archived_at,
        )


class ConversationPage(BaseModel):
    items: list[ConversationOut]
    #: Pass as `before` for the next (older) page; null on the last page.
    next_before: datetime | None


class ConversationStatus(BaseModel):
    """What the status panel needs (and why manual compression would answer `thread_busy`)."""

    conversation_id: str
    busy: bool
    reason: BusyReason | None
    active_run_id: str | None
    queued_runs: int

    @classmethod
    def of(cls, conversation_id: str, busy: BusyState | None) -> ConversationStatus:
        return cls(
            conversation_id=conversation_id,
            busy=busy is not None,
            reason=busy.reason if busy else None,
            active_run_id=busy.active_run_id if busy else None,
            queued_runs=busy.queued_runs if busy else 0,
        )


class RunOut(BaseModel):
    id: str
    conversation_id: str
    agent: str
    status: RunStatus
    input: str
    error: str | None
    interrupts: list[dict[str, Any]]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    events_url: str

    @classmethod
    def of(cls, run: Run) -> RunOut:
        return cls(
            id=run.id,
            conversation_id=run.conversation_id,
            agent=run.agent_name,
            status=run.status,  # type: ignore[arg-type]  # the CHECK constraint guarantees the values
            input=str(run.input.get("text", "")),
            error=run.error,
            interrupts=list((run.interrupts or {}).get("items", [])),
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            events_url=f"/api/runs/{run.id}/events",
        )


class RunAccepted(BaseModel):
    run: RunOut
    started: bool
    queued: bool
    #: 1 = next to start, when queued.
    position: int | None
    #: "running" | "waiting_input" | "queued" (the conversation is busy), "workers_busy" or
    #: "user_run_limit" (the user's share of the slots is taken).
    queued_because: str | None


class RunList(BaseModel):
    items: list[RunOut]


class MessageOut(BaseModel):
    id: int
    run_id: str | None
    role: str
    content: str
    #: The full LangChain message (`message_to_dict`): tool calls, ids, metadata.
    message: dict[str, Any]
    #: An assistant message's text as sanitised HTML (its Markdown rendered); null for other roles,
    #: empty text and text over `MAX_RENDER_CHARS` (show `content` as plain text then).
    html: str | None = None
    created_at: datetime

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        return cls(
            id=message.id,
            run_id=message.run_id,
            role=message.role,
            content=message.content,
            message=message.payload,
            html=_rendered(message),
            created_at=message.created_at,
        )


def _rendered(message: Message) -> str | None:
    text = message.content
    if message.role != ASSISTANT_ROLE or not text.strip() or len(text) > MAX_RENDER_CHARS:
        return None
    return render_markdown(text)


class RenderRequest(RequestBody):
    text: str = Field(max_length=MAX_RENDER_CHARS, description="Markdown of a complete message.")


class RenderOut(BaseModel):
    #: Sanitised HTML (tags and link targets from an allow-list; raw HTML in the text stays text).
    html: str


class MessagePage(BaseModel):
    items: list[MessageOut]
    #: Pass as `after` for the next page; null when this page is the last.
    next_after: int | None


class StateOut(BaseModel):
    """The agent state read through the agent's compiled graph (the checkpoint's view, S15/S16)."""

    conversation_id: str
    agent: str
    checkpoint_id: str | None
    values: dict[str, Any]
    next: list[str]
    interrupts: list[dict[str, Any]]


# --- manual compression and the context status panel (S17–S19, S22) -----------------------------


class CompressOut(BaseModel):
    conversation_id: str
    compressed: bool
    #: Why nothing was compressed (`compressed` false), in English for logs; clients use `reason_code`.
    reason: str | None
    #: `too_few_messages` or `no_safe_cutoff` (the vocabulary's `compress_reasons`); null when compressed.
    reason_code: str | None
    #: With `too_few_messages`: messages since the last summary, and how many a summary needs.
    messages_since_summary: int | None
    messages_needed: int | None
    #: The next request before and after, as `GET …/context` measures it (`estimated_tokens`):
    #: one definition, so the page's ring shows `tokens_after` once it re-reads the context.
    tokens_before: int
    tokens_after: int
    #: Position in the full message list of the first message not summarised (cumulative).
    cutoff_index: int | None
    #: Workdir-relative path of the history file holding the summarised messages.
    file_path: str | None
    #: The summary message the model will see from now on.
    summary: str | None
    summary_count: int | None
    checkpoint_id: str | None

    @classmethod
    def of(cls, outcome: CompressionOutcome) -> CompressOut:
        event = outcome.event
        return cls(
            conversation_id=outcome.conversation_id,
            compressed=outcome.compressed,
            reason=outcome.reason,
            reason_code=outcome.reason_code,
            messages_since_summary=outcome.messages_since_summary,
            messages_needed=outcome.messages_needed,
            tokens_before=outcome.tokens_before,
            tokens_after=outcome.tokens_after,
            cutoff_index=event["cutoff_index"] if event else None,
            file_path=event["file_path"] if event else None,
            summary=str(event["summary_message"].content) if event else None,
            summary_count=event.get("summary_count") if event else None,
            checkpoint_id=outcome.checkpoint_id,
        )


class CompressionRecordOut(BaseModel):
    """One compression of the conversation, from the record (`GET …/compressions`)."""

    #: `automatic` (the middleware, inside a run) or `manual` (the compress button).
    trigger: Trigger
    #: `completed` or `failed` (the vocabulary's statuses); `started` halves are not listed.
    status: str
    #: `l1` (tool results offloaded / arguments truncated) or `l2` (older messages summarised).
    level: str
    #: `context_overflow` when the model's overflow forced it (S6).
    reason: str | None
    tokens_before: int | None
    tokens_after: int | None
    tokens_saved: int | None
    #: Tool results in the compacted view (L1), of which `files_written` were written by this pass.
    offloaded: int | None
    files_written: list[str]
    arguments_truncated: int | None
    cutoff_index: int | None
    summary_number: int | None
    file_path: str | None
    error: str | None
    run_id: str | None
    #: The LangChain id of the first message a summary kept: the chat marks the summary before it.
    kept_from_message_id: str | None
    created_at: datetime

    @classmethod
    def of(cls, record: CompressionRecord) -> CompressionRecordOut:
        return cls.model_validate(record, from_attributes=True)


class CompressionList(BaseModel):
    items: list[CompressionRecordOut]


class Breakdown(BaseModel):
    """Approximate tokens by part; they add up to the total (S12: never a bill)."""

    system: int
    tools: int
    summary: int
    messages: int

    @classmethod
    def of(cls, pressure: RequestPressure) -> Breakdown:
        return cls(
            system=pressure.system, tools=pressure.tools, summary=pressure.summary, messages=pressure.messages
        )


class RecordedRequestOut(BaseModel):
    """The last main-model request the middleware measured (its real shape, after any compaction)."""

    total_tokens: int
    threshold_tokens: int
    ratio: float
    breakdown: Breakdown
    run_id: str | None
    recorded_at: datetime | None


class SummaryOut(BaseModel):
    cutoff_index: int
    file_path: str | None
    summary_count: int | None

    @classmethod
    def of(cls, event: SummarizationEvent) -> SummaryOut:
        return cls(
            cutoff_index=event["cutoff_index"],
            file_path=event["file_path"],
            summary_count=event.get("summary_count"),
        )


class ContextOut(BaseModel):
    conversation_id: str
    agent: str
    #: The agent declares `context_compression` (the panel shows the compress button, S17).
    context_compression: bool
    threshold_tokens: int
    #: Approximate tokens of the next model input as the model will receive it: the messages as they
    #: are below the threshold, L1's compacted view at or above it (S5, S22). The figure that decides
    #: whether a summary runs, and the one `suggest_compress` follows.
    estimated_tokens: int
    ratio: float
    #: The same request before L1 (equal to `estimated_tokens` when L1 would not run).
    raw_estimated_tokens: int
    raw_ratio: float
    #: L1 would compact the next request (`raw_estimated_tokens` ≥ the threshold).
    compacted: bool
    #: ratio ≥ suggest_ratio on an agent with the capability: a hint, never a trigger.
    suggest_compress: bool
    suggest_ratio: float
    breakdown: Breakdown
    message_count: int
    effective_message_count: int
    #: True after a manual compression until the next main-model call records a full figure (S19).
    stale: bool
    last_request: RecordedRequestOut | None
    invalidated_at: datetime | None
    summary: SummaryOut | None

    @classmethod
    def of(cls, status: ContextStatus) -> ContextOut:
        recorded = status.recorded
        last_request = None
        if recorded.pressure is not None:
            last_request = RecordedRequestOut(
                total_tokens=recorded.pressure.total,
                threshold_tokens=recorded.pressure.threshold,
                ratio=recorded.pressure.ratio,
                breakdown=Breakdown.of(recorded.pressure),
                run_id=recorded.run_id,
                recorded_at=recorded.recorded_at,
            )
        return cls(
            conversation_id=status.conversation_id,
            agent=status.agent,
            context_compression=status.capability,
            threshold_tokens=status.estimate.threshold,
            estimated_tokens=status.estimate.total,
            ratio=status.estimate.ratio,
            raw_estimated_tokens=status.raw.total,
            raw_ratio=status.raw.ratio,
            compacted=status.raw.total >= status.raw.threshold,
            suggest_compress=status.suggest_compress,
            suggest_ratio=status.suggest_ratio,
            breakdown=Breakdown.of(status.estimate),
            message_count=status.message_count,
            effective_message_count=status.effective_message_count,
            stale=recorded.stale,
            last_request=last_request,
            invalidated_at=recorded.invalidated_at,
            summary=SummaryOut.of(status.summary) if status.summary else None,
        )


class UsageLine(BaseModel):
    category: Literal["main", "summary"]
    provider: str
    model: str
    calls: int
    usage_available: bool
    unavailable_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_creation_tokens: int | None
    total_tokens: int | None


class UsageTotalsOut(BaseModel):
    calls: int
    unavailable_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    total_tokens: int


class UsageOut(BaseModel):
    conversation_id: str
    excluded_providers: list[str]
    lines: list[UsageLine]
    totals: dict[Literal["main", "summary"], UsageTotalsOut]


class FileOut(BaseModel):
    path: str
    size: int


class FileList(BaseModel):
    conversation_id: str
    files: list[FileOut]


class HealthOut(BaseModel):
    status: Literal["ok"]
    database: Literal["sqlite", "postgresql"]
    version: str
    builtin_model_agents: list[str]


class VocabularyOut(BaseModel):
    """Names and values a client shares with the service: read them here instead of copying them."""

    #: The SSE event types of a run's stream (`GET /api/runs/{id}/events`).
    events: dict[str, str]
    #: `status`, `level` and `reason` of a `context_compression` event (S20).
    statuses: dict[str, str]
    levels: dict[str, str]
    reasons: dict[str, str]
    run_statuses: dict[str, str]
    #: `error.code` of every error answer.
    error_codes: dict[str, str]
    #: What an agent may declare (`context_compression`: the compress button, S17).
    capabilities: dict[str, str]
    usage_categories: dict[str, str]
    #: Workdir folders the middleware writes to (offloaded tool results, summarised history).
    workdir_dirs: dict[str, str]
    #: `reason` of `thread_busy` and of a busy `GET …/status`.
    busy_reasons: list[str]
    #: The same reasons by name (`COMPRESSING`: a manual compression holds the conversation).
    busy_reason_names: dict[str, str]
    #: `queued_because` of a queued run.
    queued_reasons: list[str]
    #: `part` of `compression_failed`.
    failed_parts: list[str]
    #: The first text of a summary message (S21: never shown as a chat message).
    summary_marker: str
    #: The state key holding the current summary (`GET …/state` `values`).
    summary_event_key: str
    #: The status panel suggests manual compression from this share of the threshold (S22).
    suggest_ratio: float
    #: The longest text `POST /api/render` renders (a longer reply stays plain text).
    max_render_chars: int
    #: `reason_code` of a manual compression that compressed nothing.
    compress_reasons: list[str]
    #: `trigger` of an item of `GET …/compressions`.
    compression_triggers: dict[str, str]
    #: `response_metadata` key set on an assistant message the user stopped mid-reply (kept partial).
    stopped_key: str
