"""LangGraph's checkpointer for the configured database (SQLite file or PostgreSQL pool)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ctxpress.server.settings import DatabaseTarget

POSTGRES_POOL_MAX_SIZE = 10


@asynccontextmanager
async def open_checkpointer(target: DatabaseTarget) -> AsyncIterator[AsyncSqliteSaver | AsyncPostgresSaver]:
    """Open the checkpointer; the caller runs `setup()` (under the schema lock on PostgreSQL)."""
    if target.backend == "sqlite":
        Path(target.checkpoint_target).parent.mkdir(parents=True, exist_ok=True)
        async with AsyncSqliteSaver.from_conn_string(target.checkpoint_target) as saver:
            yield saver
        return
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        target.checkpoint_target,
        min_size=1,
        max_size=POSTGRES_POOL_MAX_SIZE,
        # What AsyncPostgresSaver requires of its connections.
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # Like `pool_pre_ping` of the service's own engine: a connection the server dropped (restart,
        # failover, idle timeout) is replaced at checkout instead of failing the next runs.
        check=AsyncConnectionPool.check_connection,
        open=False,
    )
    await pool.open(wait=True)
    try:
        yield AsyncPostgresSaver(pool)
    finally:
        await pool.close()
