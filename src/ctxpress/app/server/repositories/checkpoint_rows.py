"""The checkpointers' own tables, for what LangGraph's savers do not offer: pruning a thread to its
latest checkpoint (on PostgreSQL in one statement, which the run's finishing transaction can carry),
giving a SQLite file's pages back, and measuring what a thread stores.

LangGraph owns these tables (`checkpoints` / `writes` on SQLite; `checkpoints`, `checkpoint_blobs`,
`checkpoint_writes` on PostgreSQL); this module only deletes rows LangGraph itself would never read
again and reads sizes. The caller holds the saver's own lock (SQLite) or a pooled connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiosqlite
from psycopg import AsyncConnection


@dataclass(frozen=True)
class PrunedRows:
    """What a prune removed: checkpoints, and the bytes of their payloads and pending writes."""

    checkpoints: int
    bytes: int


#: The latest checkpoint of each namespace of a thread (the one `aget_tuple` loads without an id).
_SQLITE_LATEST: Final = (
    "SELECT checkpoint_ns, max(checkpoint_id) FROM checkpoints WHERE thread_id = ? GROUP BY checkpoint_ns"
)
_SQLITE_KEEP_LATEST: Final[tuple[str, ...]] = (
    # Pending writes of every older checkpoint (those of the latest stay: interrupt/resume needs them).
    f"DELETE FROM writes WHERE thread_id = ? AND (checkpoint_ns, checkpoint_id) NOT IN ({_SQLITE_LATEST})",
    f"DELETE FROM checkpoints WHERE thread_id = ? AND (checkpoint_ns, checkpoint_id) NOT IN ({_SQLITE_LATEST})",
    # A kept checkpoint names no deleted parent (as the PostgreSQL saver's `keep_latest` leaves it).
    "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ? AND parent_checkpoint_id IS NOT NULL",
)
#: What the deletes of `_SQLITE_KEEP_LATEST` remove: checkpoints, and their bytes with their writes'.
_SQLITE_PRUNABLE: Final = (
    "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = ?"
    f"   AND (checkpoint_ns, checkpoint_id) NOT IN ({_SQLITE_LATEST})),"
    " (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints WHERE thread_id = ?"
    f"   AND (checkpoint_ns, checkpoint_id) NOT IN ({_SQLITE_LATEST}))"
    " + (SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?"
    f"   AND (checkpoint_ns, checkpoint_id) NOT IN ({_SQLITE_LATEST}))"
)
_SQLITE_THREAD_BYTES: Final = (
    "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints WHERE thread_id = ?)"
    " + (SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?),"
    " (SELECT count(*) FROM checkpoints WHERE thread_id = ?),"
    " (SELECT coalesce(length(checkpoint) + length(metadata), 0) FROM checkpoints"
    "  WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1)"
)
#: The PostgreSQL saver's rows of one thread reduced to its latest checkpoint per namespace, in one
#: statement (its parts see the rows as they were before it): older checkpoints with their pending
#: writes, the blobs no kept checkpoint references, and the kept ones' links to deleted parents.
#: It answers the checkpoints removed and the bytes of everything removed.
POSTGRES_KEEP_LATEST: Final = """
WITH latest AS (
  SELECT checkpoint_ns, max(checkpoint_id) AS checkpoint_id
    FROM checkpoints WHERE thread_id = %(thread)s GROUP BY checkpoint_ns
), kept AS (
  SELECT c.checkpoint_ns, c.checkpoint -> 'channel_versions' AS versions
    FROM checkpoints c JOIN latest USING (checkpoint_ns, checkpoint_id)
   WHERE c.thread_id = %(thread)s
), gone_writes AS (
  DELETE FROM checkpoint_writes
   WHERE thread_id = %(thread)s
     AND (checkpoint_ns, checkpoint_id) NOT IN (SELECT checkpoint_ns, checkpoint_id FROM latest)
  RETURNING octet_length(blob) AS size
), gone_checkpoints AS (
  DELETE FROM checkpoints
   WHERE thread_id = %(thread)s
     AND (checkpoint_ns, checkpoint_id) NOT IN (SELECT checkpoint_ns, checkpoint_id FROM latest)
  RETURNING pg_column_size(checkpoint) + pg_column_size(metadata) AS size
), gone_blobs AS (
  DELETE FROM checkpoint_blobs b
   WHERE b.thread_id = %(thread)s
     AND NOT EXISTS (
       SELECT 1 FROM kept WHERE kept.checkpoint_ns = b.checkpoint_ns AND kept.versions ->> b.channel = b.version
     )
  RETURNING octet_length(b.blob) AS size
), unlinked AS (  -- runs whether or not the result below reads it, as every data-modifying part
  UPDATE checkpoints SET parent_checkpoint_id = NULL
   WHERE thread_id = %(thread)s AND parent_checkpoint_id IS NOT NULL
     AND (checkpoint_ns, checkpoint_id) IN (SELECT checkpoint_ns, checkpoint_id FROM latest)
)
SELECT
  (SELECT count(*) FROM gone_checkpoints) AS checkpoints,
  (SELECT coalesce(sum(size), 0) FROM gone_checkpoints)
  + (SELECT coalesce(sum(size), 0) FROM gone_writes)
  + (SELECT coalesce(sum(size), 0) FROM gone_blobs) AS bytes
"""
_POSTGRES_THREAD_BYTES: Final = """
SELECT
  (SELECT coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)
     FROM checkpoints WHERE thread_id = %(thread)s)
  + (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs WHERE thread_id = %(thread)s)
  + (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_writes WHERE thread_id = %(thread)s)
    AS total,
  (SELECT count(*) FROM checkpoints WHERE thread_id = %(thread)s) AS checkpoints,
  (SELECT pg_column_size(c.checkpoint) + pg_column_size(c.metadata) + coalesce((
     SELECT sum(octet_length(b.blob)) FROM checkpoint_blobs b, jsonb_each_text(c.checkpoint -> 'channel_versions') v
      WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
        AND b.channel = v.key AND b.version = v.value), 0)
     FROM checkpoints c WHERE c.thread_id = %(thread)s AND c.checkpoint_ns = ''
     ORDER BY c.checkpoint_id DESC LIMIT 1) AS latest
"""


@dataclass(frozen=True)
class ThreadStorage:
    """What the checkpointer stores for one thread (payload bytes, without the tables' overhead)."""

    #: Every checkpoint, blob and pending write of the thread.
    total_bytes: int
    #: The latest root checkpoint with the values it references.
    latest_bytes: int
    checkpoints: int


class SqliteCheckpointRows:
    """SQL on the SQLite saver's connection (the caller holds the saver's lock)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def keep_latest(self, thread_id: str) -> PrunedRows:
        """Delete all but the latest checkpoint of each namespace of the thread, in one transaction;
        returns what went (counted in the same transaction, before the deletes)."""
        try:
            async with self.conn.execute(
                _SQLITE_PRUNABLE, (thread_id,) * _SQLITE_PRUNABLE.count("?")
            ) as cursor:
                row = await cursor.fetchone()
            pruned = PrunedRows(int(row[0]), int(row[1])) if row else PrunedRows(0, 0)
            for statement in _SQLITE_KEEP_LATEST:
                await self.conn.execute(statement, (thread_id,) * statement.count("?"))
        except BaseException:
            await self.conn.rollback()
            raise
        await self.conn.commit()
        return pruned

    async def reclaim_space(self, *, min_free_pages: int, max_log_bytes: int) -> None:
        """Give the freed pages back to the file system (needs `auto_vacuum = INCREMENTAL`) once at
        least `min_free_pages` are free, and empty the write-ahead log into the file once it is
        larger than `max_log_bytes`. Below both, nothing: the next writes reuse the free pages, and
        SQLite's automatic checkpoint keeps the log bounded without an fsync'd truncation per prune."""
        if await _scalar(self.conn, "PRAGMA freelist_count") >= min_free_pages:
            # Each step of the statement frees one page, and `execute` steps a statement without
            # rows once; `executescript` runs it to its end.
            async with self.conn.executescript("PRAGMA incremental_vacuum;"):
                pass
        if await self._log_bytes() > max_log_bytes:
            async with self.conn.executescript("PRAGMA wal_checkpoint(TRUNCATE);"):
                pass

    async def _log_bytes(self) -> int:
        """The size of the main database's write-ahead log file (0 for an in-memory database)."""
        async with self.conn.execute("PRAGMA database_list") as cursor:
            rows = await cursor.fetchall()
        path = next((str(row[2]) for row in rows if row[1] == "main"), "")
        if not path:
            return 0
        try:
            return Path(path + "-wal").stat().st_size
        except FileNotFoundError:
            return 0

    async def prepare_file(self, *, journal_size_limit: int) -> None:
        """Before the saver's `setup()`: incremental auto-vacuum (a file made without it is rebuilt
        once by `VACUUM`, which the setting needs) and a bounded write-ahead log."""
        mode = await _scalar(self.conn, "PRAGMA auto_vacuum")
        if mode != 2:  # 2 = INCREMENTAL
            await self.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            if await _scalar(self.conn, "SELECT count(*) FROM sqlite_master"):
                await self.conn.execute("VACUUM")
        await self.conn.execute(f"PRAGMA journal_size_limit = {int(journal_size_limit)}")
        await self.conn.commit()

    async def thread_storage(self, thread_id: str) -> ThreadStorage:
        async with self.conn.execute(_SQLITE_THREAD_BYTES, (thread_id,) * 4) as cursor:
            row = await cursor.fetchone()
        assert row is not None
        return ThreadStorage(total_bytes=int(row[0]), latest_bytes=int(row[2] or 0), checkpoints=int(row[1]))


class PostgresCheckpointRows:
    """SQL on a connection of the PostgreSQL saver's pool (`dict_row` rows)."""

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn

    async def keep_latest(self, thread_id: str) -> PrunedRows:
        cursor = await self.conn.execute(POSTGRES_KEEP_LATEST, {"thread": thread_id})
        row = await cursor.fetchone()
        assert row is not None
        return PrunedRows(checkpoints=int(row["checkpoints"]), bytes=int(row["bytes"]))

    async def thread_storage(self, thread_id: str) -> ThreadStorage:
        cursor = await self.conn.execute(_POSTGRES_THREAD_BYTES, {"thread": thread_id})
        row = await cursor.fetchone()
        assert row is not None
        return ThreadStorage(
            total_bytes=int(row["total"]),
            latest_bytes=int(row["latest"] or 0),
            checkpoints=int(row["checkpoints"]),
        )


async def _scalar(conn: aiosqlite.Connection, sql: str) -> Any:
    async with conn.execute(sql) as cursor:
        row = await cursor.fetchone()
    return row[0] if row else None
