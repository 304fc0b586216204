"""Request and response bodies of the HTTP API (validated; unknown request fields are rejected)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from ctxpress.app.server.db.models import Conversation, Message, Run, User
from ctxpress.app.server.repositories.runs import BusyState
from ctxpress.app.server.runtime.agents import AgentRuntime
from ctxpress.app.server.serialization import MAX_STORED_JSON_DEPTH, storable_json, storable_text
from ctxpress.app.server.usecases.message_limits import message_budget

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


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


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
        )


class ConversationOut(BaseModel):
    id: str
    agent: str
    title: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, conversation: Conversation) -> ConversationOut:
        return cls(
            id=conversation.id,
            agent=conversation.agent_name,
            title=conversation.title,
            created_at=conversation.created_at,
            updated_at=conversation.updated_at,
        )


class ConversationPage(BaseModel):
    items: list[ConversationOut]
    #: Pass as `before` for the next (older) page; null on the last page.
    next_before: datetime | None


class ConversationStatus(BaseModel):
    """What the status panel needs (and why manual compression would answer `thread_busy`)."""

    conversation_id: str
    busy: bool
    reason: Literal["running", "waiting_input", "queued"] | None
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
    #: "running" | "waiting_input" | "queued" (the conversation is busy) or "workers_busy".
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
    created_at: datetime

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        return cls(
            id=message.id,
            run_id=message.run_id,
            role=message.role,
            content=message.content,
            message=message.payload,
            created_at=message.created_at,
        )


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
