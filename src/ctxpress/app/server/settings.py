"""Service settings (`CTXPRESS_` environment variables, CLI flags, or keyword arguments).

Where things live:
- SQLite (the embedded default): `<data_dir>/ctxpress.sqlite3` for the service's tables and
  `<data_dir>/checkpoints.sqlite3` for LangGraph's checkpointer (two files so a long checkpoint
  write never holds the lock on the chat tables).
- PostgreSQL (`CTXPRESS_DATABASE_URL=postgresql://…`): both the tables and the checkpointer use the
  same database. A `?options=-csearch_path%3Dmyschema` query selects a schema for both.
- Conversation workdirs are always local: `<data_dir>/workdirs/<conversation id>/`. Several
  PostgreSQL-backed processes must share that directory (one host, or a shared volume).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import URL, make_url

APP_DIR_NAME = "ctxpress"
DEFAULT_EXCLUDED_USAGE_PROVIDERS = ("siliconflow", "siliconflow-cn")

Backend = Literal["sqlite", "postgresql"]


def default_data_dir() -> Path:
    """The user's data directory for ctxpress, following each platform's convention."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / APP_DIR_NAME
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_DIR_NAME
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / APP_DIR_NAME


#: Connections a service process keeps to its database by default (`Settings.database_pool_size`),
#: none beyond: an overflow connection would be closed on return and opened again by the next burst
#: (on PostgreSQL a server process forked per burst; on SQLite a thread and its pragmas), and more
#: transactions at once only interleave on the one event loop -- a request waits for a free one
#: instead (`bench/intake_burst.py`, `bench/streaming_load.py` measured 10 against 20 and 10 + 10).
CONNECTION_POOL_SIZE = 10


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CTXPRESS_", extra="ignore", frozen=True)

    data_dir: Path = Field(default_factory=default_data_dir, description="SQLite files and workdirs.")
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL for production (postgresql://user@host/db); unset: SQLite in data_dir.",
    )
    agents_file: Path | None = Field(default=None, description="TOML file defining the agents.")
    usage_excluded_providers: Annotated[tuple[str, ...], NoDecode] = Field(
        default=DEFAULT_EXCLUDED_USAGE_PROVIDERS,
        description="Providers whose usage is not aggregated (reported as 'usage unavailable').",
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Largest accepted request body.")
    max_input_chars: int = Field(default=100_000, ge=1, description="Longest accepted user message.")
    database_pool_size: int = Field(
        default=CONNECTION_POOL_SIZE,
        ge=1,
        le=500,
        description="Database connections each process keeps, none beyond; a request waits for a free one "
        "(PostgreSQL: the checkpointer keeps up to 10 more).",
    )
    max_concurrent_runs: int = Field(
        default=16,
        ge=1,
        le=256,
        description="Runs executed at once per process (a run mostly waits for its model: cheap to hold).",
    )
    max_runs_per_user: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Of those, at most this many for one user; the user's further runs wait their turn.",
    )
    run_lease_seconds: float = Field(
        default=30.0, gt=0, description="A running run whose lease is not renewed for this long is failed."
    )
    worker_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often the worker looks for queued runs and expired leases, and (PostgreSQL "
        "without Redis) how often a process reads SQL for other processes' events of its streams (at most 1 s).",
    )
    sse_ping_seconds: float = Field(default=15.0, gt=0)
    http_keep_alive_seconds: float = Field(
        default=75.0,
        ge=1,
        le=3600,
        description="How long an idle HTTP connection is kept open: longer than the clients' and proxies' own.",
    )
    run_recursion_limit: int = Field(default=100, ge=5, description="LangGraph steps allowed per run.")
    workdir_max_file_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Largest file the agent's file tools (write_file, edit_file) may write.",
    )
    workdir_max_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024,
        description="Largest total of a conversation's workdir the agent's file tools may write up to "
        "(compression's own files count, but are never refused).",
    )
    auth_failure_limit: int = Field(
        default=20,
        ge=1,
        description="Wrong tokens a client address may present per window before it gets 429.",
    )
    auth_failure_window_seconds: float = Field(
        default=60.0, gt=0, description="The window of auth_failure_limit, in seconds."
    )
    redis_url: str | None = Field(
        default=None,
        description="Redis (redis://host:6379/0) for what every process shares: live run events (Redis "
        "Streams), cancel requests and the failed-authentication counts. Unset: live events stay in "
        "this process (other processes' SSE clients see stored events by polling).",
    )
    redis_key_prefix: str = Field(
        default="ctxpress", min_length=1, max_length=64, description="Prefix of this service's Redis keys."
    )
    live_stream_maxlen: int = Field(
        default=10_000,
        ge=100,
        description="Live events kept per run (in memory or `XADD MAXLEN ~`) for clients that resume.",
    )
    live_stream_ttl_seconds: int = Field(
        default=3600, ge=10, description="A run's Redis stream expires this long after its last event."
    )
    delta_window_ms: float = Field(
        default=50.0, ge=0, le=5000, description="Token deltas are joined for at most this long…"
    )
    delta_max_chars: int = Field(default=512, ge=1, description="…or until they reach this many characters.")
    metrics_enabled: bool = Field(
        default=False, description="Serve Prometheus metrics at GET /metrics (unauthenticated)."
    )
    tool_result_preview_chars: int = Field(
        default=4000,
        ge=100,
        description="Tool results in SSE events are cut to this preview (SQL keeps all).",
    )

    @field_validator("usage_excluded_providers", mode="before")
    @classmethod
    def _split_provider_list(cls, value: Any) -> Any:
        # The environment gives "siliconflow, siliconflow-cn"; keyword arguments give a sequence.
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            return tuple(str(item).strip().lower() for item in value if str(item).strip())
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_or_nothing(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.strip().startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url must be a redis://, rediss:// or unix:// URL")
        return value.strip()

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            resolve_database_url(value)  # raises a readable ValueError for unsupported URLs
            return value.strip()
        return None

    @property
    def workdirs_dir(self) -> Path:
        return self.data_dir / "workdirs"

    def database(self) -> DatabaseTarget:
        if self.database_url:
            return resolve_database_url(self.database_url)
        return DatabaseTarget(
            backend="sqlite",
            sqlalchemy_url=URL.create("sqlite+aiosqlite", database=str(self.data_dir / "ctxpress.sqlite3")),
            checkpoint_target=str(self.data_dir / "checkpoints.sqlite3"),
        )


@dataclass(frozen=True)
class DatabaseTarget:
    """Where the service's tables and the LangGraph checkpointer live."""

    backend: Backend
    sqlalchemy_url: URL
    #: SQLite: the checkpoint file's path. PostgreSQL: a libpq URL for psycopg.
    checkpoint_target: str

    def describe(self) -> str:
        """A printable form without the password."""
        return self.sqlalchemy_url.render_as_string(hide_password=True)


def resolve_database_url(raw: str) -> DatabaseTarget:
    """Accept `postgresql://`, `postgres://`, `postgresql+psycopg://` and `sqlite:///path` URLs."""
    try:
        url = make_url(raw.strip())
    except Exception as exc:
        raise ValueError(f"database URL is not a valid URL: {exc}") from None
    backend = url.get_backend_name()
    if backend in ("postgresql", "postgres"):
        # Whatever driver the URL names, the service talks to PostgreSQL through psycopg 3.
        libpq_url = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return DatabaseTarget(
            backend="postgresql",
            sqlalchemy_url=url.set(drivername="postgresql+psycopg"),
            checkpoint_target=libpq_url,
        )
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValueError("a SQLite database URL must name a file: sqlite:///path/to/ctxpress.sqlite3")
        path = Path(url.database)
        return DatabaseTarget(
            backend="sqlite",
            sqlalchemy_url=url.set(drivername="sqlite+aiosqlite"),
            checkpoint_target=str(path.with_name(path.stem + ".checkpoints" + (path.suffix or ".sqlite3"))),
        )
    raise ValueError(f"unsupported database {backend!r}: use postgresql://… or sqlite:///…")
