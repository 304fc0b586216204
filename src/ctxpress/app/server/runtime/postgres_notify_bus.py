"""PostgreSQL without Redis: this process's in-memory bus, plus cancel requests through `NOTIFY`.

Live deltas stay in the process that produces them (as with `MemoryLiveBus`), and a stream whose run
another process executes finds its stored events through the process's silent-stream watch (one
SQL read per interval for all its streams: `silent_streams.py`). A
cancel request, though, must reach the process that executes the run: it is sent with `NOTIFY` on
`CANCEL_CHANNEL`, and every process `LISTEN`s on one connection and hands it to its cancel handlers
(the executing one cancels its run) -- at once, instead of at that process's next lease heartbeat
(`run_lease_seconds / 3`), which still notices the run's `cancel_requested` flag while the listening
connection is down (it is retried, 0.5 s doubling to 30 s). Requests are sent on a second
connection: the listening one is held by its wait for notifications.

Why stored events are not announced the same way: tried, a `NOTIFY` in each transaction that
stores a run's events cost more than the re-reads it saves -- in the 50-conversation load on one
process, 15.5-16.0 PostgreSQL transactions per turn (`pg_stat_database`) against 13.3 for the same
hour's polling (each stream's own, before the watch). The extra ones were none of the clients' (the statement log showed fewer than
before): they come with the server's delivery of the notifications, and would grow with every
listening process. Cancels are rare.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Final

import psycopg

from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.runtime.live_events import MemoryLiveBus

logger = logging.getLogger(__name__)

#: The `NOTIFY` channel of cancel requests (a PostgreSQL identifier).
CANCEL_CHANNEL: Final = "ctxpress_cancel"
#: Pauses between attempts to get the listening connection back (seconds, doubling).
RECONNECT_FIRST_SECONDS: Final = 0.5
RECONNECT_MAX_SECONDS: Final = 30.0
#: How long a starting service waits for its first listening connection (seconds).
FIRST_LISTEN_SECONDS: Final = 5.0


class PostgresNotifyBus(MemoryLiveBus):
    """`MemoryLiveBus` whose cancel requests reach every process through PostgreSQL's `NOTIFY`."""

    def __init__(self, conninfo: str, *, metrics: ServiceMetrics, maxlen: int) -> None:
        super().__init__(metrics=metrics, maxlen=maxlen)
        self._conninfo = conninfo
        #: This process's name in the requests it sends (its own come back to it, and are skipped).
        self.origin = uuid.uuid4().hex
        self.listening = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None
        #: The connection that waits for notifications (None while down).
        self.listener_connection: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._sender: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._sending = asyncio.Lock()

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen_forever(), name="ctxpress-postgres-notify")
        # The first connection before the service takes requests (later ones in the background).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_LISTEN_SECONDS):
                await self.listening.wait()

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        if self._sender is not None:
            await self._sender.close()
        await super().stop()

    async def request_cancel(self, run_id: str) -> None:
        """Cancel here, and ask every other process (the executing one cancels its run)."""
        await super().request_cancel(run_id)
        try:
            async with self._sending:
                if self._sender is None or self._sender.closed:
                    self._sender = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                await self._sender.execute(
                    "SELECT pg_notify(%s, %s)", (CANCEL_CHANNEL, f"{self.origin}:{run_id}")
                )
        except (psycopg.Error, OSError) as exc:
            # The executing process still sees the run's flag at its next lease heartbeat.
            logger.warning("cancel of run %s not announced (%s); its flag still reaches it", run_id, exc)
            self._sender = None

    async def _listen_forever(self) -> None:
        pause = RECONNECT_FIRST_SECONDS
        while True:
            try:
                await self._listen_once()
                pause = RECONNECT_FIRST_SECONDS
            except (psycopg.Error, OSError) as exc:
                logger.warning("PostgreSQL notifications unavailable (%s); retrying in %.1f s", exc, pause)
            finally:
                self.listening.clear()
                self.listener_connection = None
            await asyncio.sleep(pause)
            pause = min(pause * 2, RECONNECT_MAX_SECONDS)

    async def _listen_once(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as connection:
            await connection.execute(f"LISTEN {CANCEL_CHANNEL}")
            self.listener_connection = connection
            self.listening.set()
            async for notice in connection.notifies():
                origin, _, run_id = notice.payload.partition(":")
                if origin != self.origin and run_id:  # this process's own was handled when sent
                    await super().request_cancel(run_id)
