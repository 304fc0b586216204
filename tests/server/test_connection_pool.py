"""The service's database connections are kept, not opened and closed per burst (issue 17).

Opening a connection costs a PostgreSQL server a process (fork, authentication) and the service a
handshake; on SQLite, a thread and the connection's pragmas. A burst of messages used to take
overflow connections beyond the pool's persistent ones and close them again on return, so every
burst paid for its connections anew. Up to `database_pool_size` transactions at once (default
`CONNECTION_POOL_SIZE`), the second burst now opens none.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import event, text

from ctxpress.app.server.settings import CONNECTION_POOL_SIZE
from ctxpress.app.testing.live_server import LiveServer

from .conftest import ServerFactory


def test_a_second_burst_of_transactions_opens_no_connection(start_server: ServerFactory) -> None:
    server = start_server()
    assert server.services.database.engine.pool.size() == CONNECTION_POOL_SIZE  # type: ignore[attr-defined]
    _two_bursts_open_connections_once(server, CONNECTION_POOL_SIZE)


def test_the_pool_size_is_a_setting(start_server: ServerFactory) -> None:
    """`CTXPRESS_DATABASE_POOL_SIZE`: a deployment whose database is far away (each transaction
    waiting on the network) keeps more connections."""
    server = start_server(database_pool_size=CONNECTION_POOL_SIZE + 6)
    assert server.services.database.engine.pool.size() == CONNECTION_POOL_SIZE + 6  # type: ignore[attr-defined]
    _two_bursts_open_connections_once(server, CONNECTION_POOL_SIZE + 6)


def _two_bursts_open_connections_once(server: LiveServer, size: int) -> None:
    database = server.services.database
    opened: list[int] = []

    def count(_connection: object, _record: object) -> None:
        opened.append(1)

    async def burst() -> None:
        at_once = asyncio.Barrier(size)

        async def one_transaction() -> None:
            async with database.session() as session:
                await session.execute(text("SELECT 1"))
                await at_once.wait()  # every connection is checked out at the same time

        await asyncio.gather(*(one_transaction() for _ in range(size)))

    server.call(burst())
    event.listen(database.engine.sync_engine.pool, "connect", count)
    try:
        server.call(burst())
    finally:
        event.remove(database.engine.sync_engine.pool, "connect", count)
    assert opened == []
