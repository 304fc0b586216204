"""Fixtures of the service tests: both databases, a live server (uvicorn in a thread), SSE reading.

Every test that touches a database runs twice, on SQLite and on PostgreSQL. PostgreSQL: one fresh
database per test session (`ctxpress_test_<random>`, dropped at the end) and one schema per test.
Without a reachable server the PostgreSQL half is skipped with the reason — or fails under CI=true.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ctxpress.server.app import create_app
from ctxpress.server.db.engine import Database
from ctxpress.server.services.agents import AgentDefinition
from ctxpress.server.services.container import open_database
from ctxpress.server.settings import Settings

from .helpers import LiveServer

IN_CI = os.environ.get("CI", "").lower() == "true"
PG_HOST = os.environ.get("CTXPRESS_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CTXPRESS_TEST_PG_PORT", "5432"))
PG_ADMIN_DATABASE = os.environ.get("CTXPRESS_TEST_PG_DATABASE", "test")
PG_USERS = ("postgres", "root")


def _pg_url(user: str, database: str) -> str:
    return f"postgresql://{user}@{PG_HOST}:{PG_PORT}/{database}"


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session; its libpq URL."""
    errors = []
    for user in PG_USERS:
        try:
            admin = psycopg.connect(_pg_url(user, PG_ADMIN_DATABASE), autocommit=True, connect_timeout=3)
        except psycopg.Error as exc:
            errors.append(
                f"{user}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            )
            continue
        name = f"ctxpress_test_{uuid.uuid4().hex[:10]}"
        with admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                yield _pg_url(user, name)
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    reason = (
        f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_ADMIN_DATABASE!r}, users {'/'.join(PG_USERS)}) "
        f"is not reachable: {'; '.join(errors)}"
    )
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None (SQLite under the data dir) or a PostgreSQL URL whose search_path is a schema of its own."""
    if backend == "sqlite":
        return None
    base: str = request.getfixturevalue("postgres_database")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return f"{base}?options=-csearch_path%3D{schema}"


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(tmp_path: Path, database_url: str | None) -> SettingsFactory:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "database_url": database_url,
            "worker_poll_seconds": 0.1,
            "run_lease_seconds": 6.0,
            "sse_ping_seconds": 5.0,
        }
        values.update(overrides)
        return Settings(**values)

    return make


ServerFactory = Callable[..., LiveServer]


@pytest.fixture
def start_server(make_settings: SettingsFactory) -> Iterator[ServerFactory]:
    servers: list[LiveServer] = []

    def start(agents: Sequence[AgentDefinition] | None = None, **settings: Any) -> LiveServer:
        server = LiveServer(create_app(make_settings(**settings), agents=agents)).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
async def database(make_settings: SettingsFactory) -> AsyncIterator[Database]:
    """A migrated database of the parametrised backend (no app around it)."""
    async with open_database(make_settings()) as opened:
        yield opened
