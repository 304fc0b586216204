"""Keep what continuing a conversation needs: its latest checkpoint, with that checkpoint's pending
writes (interrupt/resume reads them), and nothing older.

LangGraph keeps every checkpoint of a thread, and each holds the whole message list, so a thread's
storage grows with the square of its length. The full record lives elsewhere (the chat record, S1;
the workdir's history files, S14), so older checkpoints are a disposable view. After each run and
each manual compression, while that holder still has the conversation's lock (S18), the thread is
pruned:

- PostgreSQL: the saver's own `aprune([thread], strategy="keep_latest")` (one transaction on one
  snapshot; blobs no kept checkpoint references go with them). The freed rows are reused by
  PostgreSQL's vacuum; the files do not shrink, but they stop growing.
- SQLite: the same rows deleted in one transaction (`repositories/checkpoint_rows.py`), then
  `incremental_vacuum` gives the freed pages back to the file system.

Never call it for a conversation whose lock the caller does not hold: a run or a compression of that
conversation would lose the checkpoint it is reading from.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from langgraph.checkpoint.base import BaseCheckpointSaver

from ctxpress.app.server.repositories.checkpoint_rows import (
    PostgresCheckpointRows,
    SqliteCheckpointRows,
    ThreadStorage,
)
from ctxpress.app.server.runtime.checkpoints import (
    ServicePostgresSaver,
    ServiceSqliteSaver,
    forget_scoped_reads,
)

logger = logging.getLogger(__name__)

KEEP_LATEST: Final = "keep_latest"


async def prune_thread(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> None:
    """Keep only the thread's latest checkpoint (per namespace) and its pending writes. Savers other
    than the service's two (none in the service) are left as they are."""
    forget_scoped_reads()
    if isinstance(checkpointer, ServicePostgresSaver):
        await checkpointer.aprune([thread_id], strategy=KEEP_LATEST)
        return
    if not isinstance(checkpointer, ServiceSqliteSaver):
        return
    async with checkpointer.lock:
        rows = SqliteCheckpointRows(checkpointer.conn)
        await rows.keep_latest(thread_id)
        await rows.reclaim_space()


async def prune_quietly(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> None:
    """`prune_thread`, logging a failure instead of raising: the run or compression that calls it has
    already succeeded, and the next one prunes again."""
    try:
        await prune_thread(checkpointer, thread_id)
    except Exception:
        logger.exception("pruning the checkpoints of %s failed; the next run tries again", thread_id)


async def thread_storage(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> ThreadStorage:
    """What the checkpointer stores for the thread (for the storage benchmark and its test)."""
    if isinstance(checkpointer, ServicePostgresSaver):
        async with checkpointer._cursor() as cursor:  # the saver's own way to a pooled connection
            return await PostgresCheckpointRows(cursor.connection).thread_storage(thread_id)
    if not isinstance(checkpointer, ServiceSqliteSaver):
        raise TypeError(f"no storage figures for {type(checkpointer).__name__}")
    async with checkpointer.lock:
        return await SqliteCheckpointRows(checkpointer.conn).thread_storage(thread_id)
