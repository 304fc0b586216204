"""Fixtures of the service tests: both databases, a live server (uvicorn in a thread), SSE reading.

Every test that touches a database runs twice, on SQLite and on PostgreSQL. PostgreSQL: one fresh
database per test session (`ctxpress_test_<random>`, dropped at the end) and one schema per test.
Without a reachable server the PostgreSQL half is skipped with the reason — or fails under CI=true.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ctxpress.app.server.agents_file import AgentDefinition
from ctxpress.app.server.app import create_app
from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.runtime.container import open_database
from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.live_server import LiveServer
from ctxpress.app.testing.postgres import PostgresUnavailableError, scratch_postgres_database

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session; its libpq URL."""
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(scratch_postgres_database())
        except PostgresUnavailableError as exc:
            if IN_CI:
                pytest.fail(str(exc))
            pytest.skip(str(exc))
        yield url


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
