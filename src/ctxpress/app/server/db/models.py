"""The service's tables (SQLAlchemy 2 declarative). Migrations in `ctxpress/app/server/migrations` mirror them.

Invariants the schema carries itself:
- `messages` is append-only: database triggers reject UPDATE and DELETE (S1, S16).
- `runs.status` is one of `RUN_STATUSES` (CHECK constraint).
- Every run has a per-conversation `queue_seq`, assigned under the conversation lock: FIFO order.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ColumnDefault,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

RUN_QUEUED: Final = "queued"
RUN_RUNNING: Final = "running"
RUN_WAITING_INPUT: Final = "waiting_input"
RUN_SUCCEEDED: Final = "succeeded"
RUN_FAILED: Final = "failed"
RUN_CANCELLED: Final = "cancelled"
RUN_STATUSES: Final = (RUN_QUEUED, RUN_RUNNING, RUN_WAITING_INPUT, RUN_SUCCEEDED, RUN_FAILED, RUN_CANCELLED)
#: A run in one of these states keeps its conversation busy.
ACTIVE_RUN_STATUSES: Final = (RUN_RUNNING, RUN_WAITING_INPUT)
TERMINAL_RUN_STATUSES: Final = (RUN_SUCCEEDED, RUN_FAILED, RUN_CANCELLED)
#: Where a run's event stream ends: the run finished, or waits for input (it resumes on a new stream).
STREAM_ENDING_STATUSES: Final = (*TERMINAL_RUN_STATUSES, RUN_WAITING_INPUT)

USAGE_MAIN: Final = "main"
USAGE_SUMMARY: Final = "summary"

ID_LENGTH: Final = 32
_HEX_DIGITS: Final = frozenset("0123456789abcdef")


def new_id() -> str:
    """Public identifiers: random, unguessable, URL-safe (uuid4 hex)."""
    return uuid.uuid4().hex


def is_public_id(value: str) -> bool:
    """The shape of `new_id()`: anything else names no row and never reaches a query (PostgreSQL
    refuses NUL in text, so an id like `%00` would otherwise fail there instead of answering 404)."""
    return len(value) == ID_LENGTH and all(ch in _HEX_DIGITS for ch in value)


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends (SQLite has no time zones: stored as naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use datetime.now(UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: JSON documents: JSONB on PostgreSQL, JSON text on SQLite.
JSONDocument: TypeEngine[Any] = JSON().with_variant(JSONB(), "postgresql")
#: Auto-incrementing 64-bit keys; on SQLite the INTEGER PRIMARY KEY rowid alias (the only autoincrement there).
SerialKey: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime(), dict[str, Any]: JSONDocument}


def table_of(model: type[Base]) -> Table:
    """The table of a mapped class, for Core statements on hot paths (no unit of work)."""
    return cast(Table, model.__table__)


def insert_values(row: Base) -> dict[str, Any]:
    """Every column's value of the new `row`, for a Core insert of it on a hot path (no unit of
    work). An attribute never set takes its column's Python-side default (or None) on the object
    too, as a flush would: the object then holds every value the database will, and once attached
    to a session as that row (`make_transient_to_detached`) none is left to load."""
    values: dict[str, Any] = {}
    for column in table_of(type(row)).columns:
        key = column.key
        if key not in row.__dict__:
            default = column.default
            value = None
            if isinstance(default, ColumnDefault):
                value = default.arg(None) if default.is_callable else default.arg
            setattr(row, key, value)
        values[key] = row.__dict__[key]
    return values


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    """Bearer tokens, stored as SHA-256 digests (tokens are 256-bit random, so a fast hash suffices).

    A token is valid while `revoked_at` is NULL and `expires_at` is NULL or later than now; every
    request reads the row, so a revocation holds at once on every service process."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)


class AgentRecord(Base):
    """The agents last loaded from the config; conversations keep pointing at an agent by name."""

    __tablename__ = "agents"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    model: Mapped[str] = mapped_column(String(200))
    builtin_model: Mapped[bool] = mapped_column(Boolean, default=False)
    capabilities: Mapped[list[str]] = mapped_column(JSONDocument, default=list)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Conversation(Base):
    __tablename__ = "conversations"
    __table_args__ = (Index(None, "owner_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    agent_name: Mapped[str] = mapped_column(ForeignKey("agents.name"))
    title: Mapped[str] = mapped_column(String(200), default="")
    #: Workdir location relative to the data directory (`workdirs/<id>`), never a host path.
    workdir: Mapped[str] = mapped_column(String(200))
    #: Next `runs.queue_seq`; only changed while holding this row's lock.
    next_queue_seq: Mapped[int] = mapped_column(BigInteger, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: Hidden from the conversation list since then (the record is kept); NULL: listed.
    archived_at: Mapped[datetime | None] = mapped_column(default=None)
    #: Set (committed, so every process sees it) while a manual compression holds or is about to
    #: hold this row's lock (S18); until this instant at most. A mark whose lock is free is stale
    #: (`runtime/locks.compression_holds`).
    compressing_until: Mapped[datetime | None] = mapped_column(default=None)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'waiting_input', 'succeeded', 'failed', 'cancelled')",
            name="status",
        ),
        UniqueConstraint("conversation_id", "queue_seq"),
        Index(None, "conversation_id", "status"),
        Index(None, "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    agent_name: Mapped[str] = mapped_column(String(64))
    queue_seq: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    #: `{"text": …, "message_id": …}`: the user's message and its LangChain message id.
    input: Mapped[dict[str, Any]] = mapped_column()
    #: Set by `resume`, consumed by the next execution: `{"value": …, "interrupt_id": …}`.
    pending_resume: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    #: The pending LangGraph interrupts while `waiting_input`: `{"items": [{"id", "value"}]}`.
    interrupts: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    lease_owner: Mapped[str | None] = mapped_column(String(128), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class Message(Base):
    """The complete chat record (S1, S16): append-only, ordered by `id`, never touched by compression."""

    __tablename__ = "messages"
    __table_args__ = (
        Index(None, "conversation_id", "id"),
        UniqueConstraint("conversation_id", "lc_id"),
    )

    id: Mapped[int] = mapped_column(SerialKey, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), default=None)
    role: Mapped[str] = mapped_column(String(16))
    #: The LangChain message id (links the record to the checkpointed state).
    lc_id: Mapped[str | None] = mapped_column(String(200), default=None)
    #: Plain-text rendering, for search and display.
    content: Mapped[str] = mapped_column(Text)
    #: The full LangChain message (`message_to_dict`): tool calls, metadata, usage.
    payload: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RunEvent(Base):
    """Stored SSE events; `id` is the SSE `id:` field, so `Last-Event-ID` replays from here."""

    __tablename__ = "run_events"
    __table_args__ = (Index(None, "run_id", "id"),)

    id: Mapped[int] = mapped_column(SerialKey, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    type: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ManualCompression(Base):
    """A manual compression that wrote a summary (S17–S19): the panel lists it with the run events."""

    __tablename__ = "manual_compressions"
    __table_args__ = (Index(None, "conversation_id", "id"),)

    id: Mapped[int] = mapped_column(SerialKey, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    tokens_before: Mapped[int] = mapped_column(BigInteger)
    #: The next request the new state implies (the status panel's figure).
    tokens_after: Mapped[int] = mapped_column(BigInteger)
    cutoff_index: Mapped[int] = mapped_column(BigInteger)
    summary_count: Mapped[int | None] = mapped_column(Integer, default=None)
    file_path: Mapped[str | None] = mapped_column(String(500), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class UsageRecord(Base):
    """One model call's reported usage (S26). `category` separates main-model from summary-model calls."""

    __tablename__ = "usage_records"
    __table_args__ = (
        CheckConstraint("category IN ('main', 'summary')", name="category"),
        Index(None, "conversation_id", "category"),
    )

    id: Mapped[int] = mapped_column(SerialKey, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), default=None)
    category: Mapped[str] = mapped_column(String(16))
    provider: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(200))
    #: False when the call returned no `usage_metadata` at all.
    reported: Mapped[bool] = mapped_column(Boolean)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_creation_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ConversationPressure(Base):
    """S19, S22: the last main-model request's approximate size, per conversation (one row each).

    Written from the run's stream at every main-model call (`stale` = False); a manual compression
    sets `stale` = True, because it changes the state without a full request shape to measure.
    The figures stay NULL until a first main-model call was recorded.
    """

    __tablename__ = "conversation_pressure"

    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"), primary_key=True)
    #: The run whose main-model call the figures describe.
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), default=None)
    total_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    threshold_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    system_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    tools_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    summary_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    messages_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    recorded_at: Mapped[datetime | None] = mapped_column(default=None)
    stale: Mapped[bool] = mapped_column(Boolean, default=False)
    invalidated_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
