"""The service's database connections are kept, not opened and closed per burst (issue 17).

Opening a connection costs a PostgreSQL server a process (fork, authentication) and the service a
handshake; on SQLite, a thread and the connection's pragmas. A burst of messages used to take
overflow connections beyond the pool's persistent ones and close them again on return, so every
burst paid for its connections anew. Up to `CONNECTION_POOL_SIZE` transactions at once, the second
burst now opens none.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import event, text

from ctxpress.app.server.db.engine import CONNECTION_POOL_SIZE

from .conftest import ServerFactory


def test_a_second_burst_of_transactions_opens_no_connection(start_server: ServerFactory) -> None:
    server = start_server()
    database = server.services.database
    opened: list[int] = []

    def count(_connection: object, _record: object) -> None:
        opened.append(1)

    async def burst() -> None:
        at_once = asyncio.Barrier(CONNECTION_POOL_SIZE)

        async def one_transaction() -> None:
            async with database.session() as session:
                await session.execute(text("SELECT 1"))
                await at_once.wait()  # every connection is checked out at the same time

        await asyncio.gather(*(one_transaction() for _ in range(CONNECTION_POOL_SIZE)))

    server.call(burst())
    event.listen(database.engine.sync_engine.pool, "connect", count)
    try:
        server.call(burst())
    finally:
        event.remove(database.engine.sync_engine.pool, "connect", count)
    assert opened == []
