"""Alembic migrations, run programmatically at start (no alembic.ini; the scripts ship in the package)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxpress.app.server import migrations
from ctxpress.app.server.db.engine import Database

#: PostgreSQL advisory lock key ("ctxp"): service processes starting together migrate one at a time.
SCHEMA_LOCK_KEY = 0x63747870


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    script_location = str(Path(migrations.__file__).parent)
    config.set_main_option("script_location", script_location.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@asynccontextmanager
async def schema_change_lock(database: Database) -> AsyncIterator[AsyncConnection]:
    """A connection holding the cluster-wide schema lock (PostgreSQL); SQLite needs none (one process)."""
    async with database.engine.connect() as connection:
        if database.backend == "postgresql":
            await connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            await connection.commit()
        try:
            yield connection
        finally:
            if database.backend == "postgresql":
                await connection.rollback()
                await connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
                await connection.commit()


async def upgrade_on(connection: AsyncConnection) -> None:
    await connection.run_sync(
        lambda sync_connection: command.upgrade(alembic_config(sync_connection), "head")
    )
    await connection.commit()


async def upgrade_database(database: Database) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    async with schema_change_lock(database) as connection:
        await upgrade_on(connection)
