"""PostgreSQL without Redis (issue 17): a cancel request reaches every process through the database's
`NOTIFY` (`postgres_notify_bus.py`), on a real server. Two buses stand for two service processes on
one database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import psycopg
import pytest

from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.runtime.postgres_notify_bus import PostgresNotifyBus

from .conftest import SettingsFactory

pytestmark = pytest.mark.parametrize(
    "backend", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)

#: How long a test waits for what the database announces (it comes in milliseconds).
ANNOUNCED_WITHIN_SECONDS = 10.0


@asynccontextmanager
async def started_bus(conninfo: str) -> AsyncIterator[tuple[PostgresNotifyBus, list[str]]]:
    """A started bus and the run ids its cancel handler was given, in order."""
    bus = PostgresNotifyBus(conninfo, metrics=ServiceMetrics(), maxlen=100)
    cancelled: list[str] = []
    bus.on_cancel(cancelled.append)
    await bus.start()
    try:
        assert bus.listening.is_set(), "the bus did not get to listen"
        yield bus, cancelled
    finally:
        await bus.stop()


async def test_a_cancel_request_reaches_every_other_process_once(make_settings: SettingsFactory) -> None:
    conninfo = make_settings().database().checkpoint_target
    async with started_bus(conninfo) as (_bus_a, on_a), started_bus(conninfo) as (bus_b, on_b):
        await bus_b.request_cancel("run-1")
        await _until(lambda: on_a == ["run-1"])
        # B handled its own request when it was made; its notification coming back is skipped.
        await asyncio.sleep(0.3)
        assert on_b == ["run-1"] and on_a == ["run-1"]


async def test_a_lost_listening_connection_is_replaced(make_settings: SettingsFactory) -> None:
    """When the listening connection dies (a database restart, a network cut), the bus gets another
    one and cancel requests reach the process again."""
    conninfo = make_settings().database().checkpoint_target
    async with started_bus(conninfo) as (bus_a, on_a), started_bus(conninfo) as (bus_b, _on_b):
        lost = bus_a.listener_connection
        assert lost is not None
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (lost.info.backend_pid,))
        await _until(lambda: bus_a.listener_connection not in (None, lost) and bus_a.listening.is_set())
        await bus_b.request_cancel("run-2")
        await _until(lambda: on_a == ["run-2"])


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(ANNOUNCED_WITHIN_SECONDS):
        while not condition():
            await asyncio.sleep(0.02)
