"""One SQL read per process for every stream whose bus cannot hear all writers.

On PostgreSQL without Redis another process may store a run's events (it executes the run, or
claimed it from the shared queue) and this process's bus never hears of them. Each stream used to
re-read its run and events after every `poll_seconds` of silence: a transaction per waiting stream
and second, most of them finding nothing (a queued run waiting its turn). Instead, the process's
streams are watched together: every `interval` seconds one transaction reads the status and the
newest event id of all their runs (`RunRepository.progress_of`), and only a stream whose run has
something it has not been given -- a newer stored event, or an end -- is woken to read for itself
(`LiveSubscriber.mark_gap`). A failed read wakes every stream, which then reads as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Final

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import STREAM_ENDING_STATUSES
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.runtime.live_events import LiveSubscriber

logger = logging.getLogger(__name__)

#: Runs read in one statement (the rest of a larger set in further statements of the same read).
RUNS_PER_STATEMENT: Final = 500


class SilentStreamWatch:
    """The process's streams that need SQL to learn of other processes' events, read together."""

    def __init__(self, database: Database, *, interval: float, metrics: ServiceMetrics) -> None:
        self.database = database
        self.interval = interval
        self.metrics = metrics
        #: How many reads the watch has made (each one transaction).
        self.reads = 0
        self._watched: set[LiveSubscriber] = set()
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watching(self, subscriber: LiveSubscriber) -> Iterator[None]:
        """Watch the subscriber's run while the block lasts."""
        self._watched.add(subscriber)
        if self._task is None or self._task.done():
            # Not in the context of the stream that happens to start it (its log context, say).
            self._task = asyncio.create_task(
                self._watch(), name="ctxpress-silent-streams", context=contextvars.Context()
            )
        try:
            yield
        finally:
            self._watched.discard(subscriber)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while self._watched:
            await asyncio.sleep(self.interval)
            # The streams of this read (one that starts during it waits for the next).
            watched = list(self._watched)
            woken = self.wake_behind(watched, await self._progress(watched))
            self.metrics.stream_watch_wakes.inc(woken)

    async def _progress(self, watched: list[LiveSubscriber]) -> dict[str, tuple[str, int]] | None:
        """Each watched run's status and newest event id; None when the read failed."""
        run_ids = sorted({subscriber.run_id for subscriber in watched})
        if not run_ids:
            return {}
        try:
            async with self.database.session() as session:
                repository = RunRepository(session)
                progress: dict[str, tuple[str, int]] = {}
                for start in range(0, len(run_ids), RUNS_PER_STATEMENT):
                    progress |= await repository.progress_of(run_ids[start : start + RUNS_PER_STATEMENT])
        except Exception as exc:  # the streams read for themselves; the watch goes on
            logger.warning("reading the progress of %d streamed runs failed (%s)", len(run_ids), exc)
            return None
        finally:
            self.reads += 1
            self.metrics.stream_watch_reads.inc()
        return progress

    @staticmethod
    def wake_behind(watched: list[LiveSubscriber], progress: dict[str, tuple[str, int]] | None) -> int:
        """Wake each stream whose run has a stored event it was not given, has ended, or is gone
        (every stream when `progress` is None: the read failed). Returns how many were woken."""
        woken = 0
        for subscriber in watched:
            found = None if progress is None else progress.get(subscriber.run_id)
            if found is None or found[0] in STREAM_ENDING_STATUSES or found[1] > subscriber.newest_durable_id:
                subscriber.mark_gap()
                woken += 1
        return woken
