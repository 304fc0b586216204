"""Keep what continuing a conversation needs: its latest checkpoint, with that checkpoint's pending
writes (interrupt/resume reads them), and nothing older.

LangGraph keeps every checkpoint of a thread, and each holds the whole message list, so a thread's
storage grows with the square of its length. The full record lives elsewhere (the chat record, S1;
the workdir's history files, S14), so older checkpoints are a disposable view. The thread is pruned

- at the end of each run, while the run still holds the conversation's lock (S18);
- after each manual compression, off the answer's path: once the compression has let go of the lock,
  a background task (`BackgroundPruner`) takes the lock only if nobody holds it and prunes; if
  someone does (a message's intake, a run, another compression), it skips -- the next run prunes
  at its end. Its tasks are awaited when the service stops (and by tests, `wait`).

How:

- PostgreSQL: one statement (`repositories/checkpoint_rows.POSTGRES_KEEP_LATEST`: older checkpoints,
  their pending writes and the blobs no kept checkpoint references), run in the caller's transaction
  -- the checkpointer's tables are in the service's database -- inside a savepoint, so a failed prune
  leaves that transaction as it was. A run's end thus prunes in its finishing transaction, not in
  two more of its own (LangGraph's `aprune` checks the thread, then prunes: two transactions). The
  freed rows are reused by PostgreSQL's vacuum; the files do not shrink, but they stop growing.
- SQLite: the same rows deleted in one transaction (`repositories/checkpoint_rows.py`); once enough
  pages are free, `incremental_vacuum` gives them back to the file system, and once the write-ahead
  log has grown past its limit it is emptied into the file (otherwise SQLite's automatic checkpoint
  keeps it bounded): neither costs every prune a vacuum and an fsync'd log truncation.

Never call it for a conversation whose lock the caller does not hold: a run or a compression of that
conversation would lose the checkpoint it is reading from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from langgraph.checkpoint.base import BaseCheckpointSaver
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.checkpoint_rows import (
    POSTGRES_KEEP_LATEST,
    PostgresCheckpointRows,
    PrunedRows,
    SqliteCheckpointRows,
    ThreadStorage,
)
from ctxpress.app.server.runtime.checkpoints import (
    SQLITE_JOURNAL_SIZE_LIMIT,
    ServicePostgresSaver,
    ServiceSqliteSaver,
    forget_scoped_reads,
)
from ctxpress.app.server.runtime.locks import try_conversation_lock

logger = logging.getLogger(__name__)

#: SQLite: free pages given back to the file system once there are at least this many (4 MiB of the
#: default 4 KiB pages); fewer are reused by the next writes.
SQLITE_RECLAIM_MIN_FREE_PAGES: Final = 1024


async def prune_thread(
    checkpointer: BaseCheckpointSaver[Any], thread_id: str, session: AsyncSession | None = None
) -> PrunedRows | None:
    """Keep only the thread's latest checkpoint (per namespace) and its pending writes; returns what
    went. On PostgreSQL it runs in `session`'s transaction when given (in a savepoint), else on a
    connection of the saver's pool. Savers other than the service's two (none in the service) are
    left as they are: None."""
    forget_scoped_reads()
    if isinstance(checkpointer, ServicePostgresSaver):
        if session is None:
            async with checkpointer._cursor() as cursor:  # the saver's own way to a pooled connection
                return await PostgresCheckpointRows(cursor.connection).keep_latest(thread_id)
        async with session.begin_nested():
            connection = await session.connection()
            result = await connection.exec_driver_sql(POSTGRES_KEEP_LATEST, {"thread": thread_id})
            row = result.one()
        return PrunedRows(checkpoints=int(row.checkpoints), bytes=int(row.bytes))
    if not isinstance(checkpointer, ServiceSqliteSaver):
        return None
    async with checkpointer.lock:
        rows = SqliteCheckpointRows(checkpointer.conn)
        pruned = await rows.keep_latest(thread_id)
        await rows.reclaim_space(
            min_free_pages=SQLITE_RECLAIM_MIN_FREE_PAGES, max_log_bytes=SQLITE_JOURNAL_SIZE_LIMIT
        )
    return pruned


async def prune_quietly(
    checkpointer: BaseCheckpointSaver[Any],
    thread_id: str,
    metrics: ServiceMetrics,
    session: AsyncSession | None = None,
) -> None:
    """`prune_thread`, counted in the metrics, logging a failure instead of raising: the run or
    compression that calls it has already succeeded, and the next one prunes again."""
    try:
        pruned = await prune_thread(checkpointer, thread_id, session)
    except Exception:
        metrics.checkpoint_prunes.labels(outcome="failed").inc()
        logger.exception("pruning the checkpoints of %s failed; the next run tries again", thread_id)
        return
    metrics.checkpoint_prunes.labels(outcome="done").inc()
    if pruned is not None:
        metrics.checkpoint_pruned(pruned.checkpoints, pruned.bytes)


async def thread_storage(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> ThreadStorage:
    """What the checkpointer stores for the thread (for the storage benchmark and its test)."""
    if isinstance(checkpointer, ServicePostgresSaver):
        async with checkpointer._cursor() as cursor:  # the saver's own way to a pooled connection
            return await PostgresCheckpointRows(cursor.connection).thread_storage(thread_id)
    if not isinstance(checkpointer, ServiceSqliteSaver):
        raise TypeError(f"no storage figures for {type(checkpointer).__name__}")
    async with checkpointer.lock:
        return await SqliteCheckpointRows(checkpointer.conn).thread_storage(thread_id)


class BackgroundPruner:
    """Prunes a conversation's thread after its holder let go of the lock, off the answer's path.

    `schedule` starts a task that takes the conversation's lock only if it is free (never waiting,
    never while a run or a compression holds it) and prunes under it; `on_released` is called after
    the lock is let go (the worker looks at the queue again: a run queued meanwhile may have been
    skipped while the prune held the lock)."""

    def __init__(
        self,
        database: Database,
        checkpointer: BaseCheckpointSaver[Any],
        metrics: ServiceMetrics,
        on_released: Callable[[], None] = lambda: None,
    ) -> None:
        self.database = database
        self.checkpointer = checkpointer
        self.metrics = metrics
        self.on_released = on_released
        self._tasks: set[asyncio.Task[bool]] = set()

    def schedule(self, conversation_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self.prune_if_free(conversation_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def prune_if_free(self, conversation_id: str) -> bool:
        """Prune the thread if its lock is free; False when someone held it (nothing done)."""
        try:
            async with (
                self.database.session() as session,
                try_conversation_lock(session, conversation_id) as locked,
            ):
                if locked is None:
                    return False
                await prune_quietly(self.checkpointer, conversation_id, self.metrics, session)
        except Exception:
            logger.exception("pruning the checkpoints of %s in the background failed", conversation_id)
            return False
        finally:
            self.on_released()
        return True

    async def wait(self) -> None:
        """Until every scheduled prune has ended (the service's shutdown; tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
