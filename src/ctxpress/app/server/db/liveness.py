"""Checking a pooled PostgreSQL connection at checkout without a round trip when nothing suggests it died.

A ping on every checkout (`pool_pre_ping`, psycopg_pool's `check_connection`) is one statement --
and one transaction in PostgreSQL's statistics -- per checkout: with several checkouts a turn it was
the largest share of a turn's transactions. A connection the server ended (restart, failover,
`pg_terminate_backend`, an idle timeout) has something to read on its socket: the server's FATAL
message, or the end of the stream. An idle connection otherwise has nothing to read. So the ping is
sent only when the socket is readable, or the connection sat idle longer than `idle_ping_seconds`
(a silent network drop leaves nothing to read); a connection that fails its ping is replaced.
"""

from __future__ import annotations

import select
import time
import weakref
from typing import Any, Final

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine

#: A connection idle this long is pinged even when its socket is quiet.
IDLE_PING_SECONDS: Final = 30.0
_CHECKED_IN_AT: Final = "ctxpress_checked_in_at"


def socket_has_input(fileno: int) -> bool:
    """Whether the connection's socket has bytes (or its end) waiting; an idle one has none."""
    try:
        readable, _, _ = select.select([fileno], [], [], 0)
    except (OSError, ValueError):
        return True  # a closed or invalid descriptor: let the ping find out
    return bool(readable)


class CheckoutLiveness:
    """The rule: ping a checked-out connection only if its socket has input or it idled too long."""

    def __init__(self, idle_ping_seconds: float = IDLE_PING_SECONDS) -> None:
        self.idle_ping_seconds = idle_ping_seconds
        #: psycopg_pool connections: when each was last given back to the pool.
        self._returned_at: weakref.WeakKeyDictionary[AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
        )

    def needs_ping(self, fileno: int, idle_since: float | None) -> bool:
        if idle_since is None:
            return False  # just connected: the connect itself was the round trip
        if time.monotonic() - idle_since >= self.idle_ping_seconds:
            return True
        return socket_has_input(fileno)

    # --- SQLAlchemy (the service's engine) --------------------------------------------------------

    def install(self, engine: AsyncEngine) -> None:
        """Check the engine's connections at checkout (instead of `pool_pre_ping`)."""
        event.listen(engine.sync_engine.pool, "checkin", self._on_checkin)
        event.listen(engine.sync_engine.pool, "checkout", self._make_checkout_listener(engine))

    @staticmethod
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_CHECKED_IN_AT] = time.monotonic()

    def _make_checkout_listener(self, engine: AsyncEngine) -> Any:
        dialect = engine.sync_engine.dialect

        def on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            driver = record.driver_connection
            if not self.needs_ping(driver.fileno(), record.info.get(_CHECKED_IN_AT)):
                return
            try:
                dialect.do_ping(dbapi_connection)
            except dialect.loaded_dbapi.Error as error:
                # The pool discards this connection and checks out another (a new one if need be).
                raise exc.DisconnectionError(f"connection failed its liveness ping: {error}") from error

        return on_checkout

    # --- psycopg_pool (the checkpointer's pool) --------------------------------------------------------

    async def check(self, conn: AsyncConnection[Any]) -> None:
        """psycopg_pool's `check`: raises when the connection is dead (the pool then replaces it)."""
        if self.needs_ping(conn.fileno(), self._returned_at.get(conn)):
            await AsyncConnectionPool.check_connection(conn)

    async def returned(self, conn: AsyncConnection[Any]) -> None:
        """psycopg_pool's `reset`: remembers when the connection went back to the pool."""
        self._returned_at[conn] = time.monotonic()
