"""LangGraph's checkpointer for the configured database (SQLite file or PostgreSQL pool).

Three additions to LangGraph's own savers, all for long threads (pruning a thread to its latest
checkpoint: `checkpoint_pruning.py`; the SQLite file is set to incremental auto-vacuum here, before
the saver's `setup()` makes its tables):

- the library's `CheckpointSerializer` (`ctxpress/checkpoint_serde.py`): a message this process
  wrote or read comes back as the same object (the next run's first token count is the warm path),
  others are rebuilt without validating them again;
- `one_checkpoint_read()`: within it, a checkpoint read by this task is read from the database
  once. Manual compression needs that: `aget_state` reads the latest checkpoint, and
  `aupdate_state` reads the very same one again before it writes. Under the conversation lock of an
  idle thread (S18) nothing else can write that thread's checkpoint in between, and any write in the
  scope (`aput`, `aput_writes`) forgets what was read. A run uses it for its start and the graph's
  first read (`execution.py`). Outside the scope reads go to the database as always.
- `grouped_step_writes()` (PostgreSQL): within it -- a run's graph stream -- the pending writes of
  a node step (a `~__pregel_pull` task: the model node, a middleware node) wait for the step's
  checkpoint and are saved in its transaction, one transaction per step instead of two; the block's
  end saves any still waiting (an interrupt's or an error's writes, which no checkpoint follows).
  The run's input checkpoint waits the same way for step 0's (whose only task, `__start__`, passes
  the input on at once), so the input and its first step cost one transaction.
  A `Send` task's writes (create_agent runs each tool call as one; several may run at once) are
  saved at once as before: after a kill, the next run gives back the tool results a step finished
  but did not checkpoint (`execution._written_by_unsaved_steps`), while a node step's unsaved
  writes are dropped by the graph either way. A read of a thread with waiting writes saves them
  first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from ctxpress.app.server.db.engine import SQLITE_BUSY_TIMEOUT_SECONDS
from ctxpress.app.server.db.liveness import CheckoutLiveness
from ctxpress.app.server.db.sqlite_connection import connect_in_loop
from ctxpress.app.server.repositories.checkpoint_rows import SqliteCheckpointRows
from ctxpress.app.server.settings import DatabaseTarget
from ctxpress.checkpoint_serde import CheckpointSerializer

POSTGRES_POOL_MAX_SIZE = 10
#: The SQLite write-ahead log is cut back to this size after each checkpoint of it (bytes); a prune
#: that finds it larger empties it (`checkpoint_rows.SqliteCheckpointRows.reclaim_space`).
SQLITE_JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024

_ReadKey = tuple[str, str, str | None]
#: The checkpoints read in the current `one_checkpoint_read()` scope (None: no scope).
_reads: ContextVar[dict[_ReadKey, CheckpointTuple | None] | None] = ContextVar(
    "checkpoint_reads", default=None
)


_ThreadKey = tuple[str, str]
#: One `executemany` of LangGraph's writes SQL: the statement and its rows.
_WriteStatement = tuple[str, list[Any]]
#: LangGraph's path of a node task starts with this (`~__pregel_pull, model`); a `Send` task's
#: with `~__pregel_push`.
NODE_TASK_PATH_PREFIX = "~__pregel_pull"


@dataclass
class _HeldWrites:
    """Node steps' pending writes waiting for their step's checkpoint, per thread and namespace.

    A statement is held from the moment its saver call starts, as a future while its rows are
    prepared in a worker thread: LangGraph saves a step's writes and then its checkpoint in two
    tasks, and the checkpoint's task may run while the writes' rows are still being prepared.
    Taking a thread's statements waits for those in preparation, so they still join the checkpoint.
    """

    statements: dict[_ThreadKey, list[asyncio.Future[_WriteStatement]]] = field(default_factory=dict)

    def hold(self, key: _ThreadKey, statement: _WriteStatement | asyncio.Future[_WriteStatement]) -> None:
        if not isinstance(statement, asyncio.Future):
            ready: asyncio.Future[_WriteStatement] = asyncio.get_running_loop().create_future()
            ready.set_result(statement)
            statement = ready
        self.statements.setdefault(key, []).append(statement)

    async def take(self, key: _ThreadKey) -> list[_WriteStatement]:
        return await _prepared(self.statements.pop(key, []))

    async def take_all(self) -> list[_WriteStatement]:
        taken = [statement for statements in self.statements.values() for statement in statements]
        self.statements.clear()
        return await _prepared(taken)


async def _prepared(statements: Sequence[asyncio.Future[_WriteStatement]]) -> list[_WriteStatement]:
    return list(await asyncio.gather(*statements)) if statements else []


#: The writes held in the current `grouped_step_writes()` block (None: no block).
_held_writes: ContextVar[_HeldWrites | None] = ContextVar("held_checkpoint_writes", default=None)
#: Held writes that the checkpoint being saved takes into its transaction.
_leading_writes: ContextVar[tuple[_WriteStatement, ...]] = ContextVar("leading_checkpoint_writes", default=())
#: Set while a checkpoint's statements are recorded to be held instead of run (`_StatementRecorder`).
_recording: ContextVar[_StatementRecorder | None] = ContextVar("recorded_checkpoint_statements", default=None)
#: `metadata["source"]` of the checkpoint LangGraph saves for a run's input, before its first step.
INPUT_CHECKPOINT_SOURCE = "input"


class _StatementRecorder:
    """Stands in for the saver's cursor: keeps the statements a saver call would run, runs none."""

    def __init__(self) -> None:
        self.statements: list[_WriteStatement] = []

    async def execute(self, query: str, params: Any = None) -> None:
        self.statements.append((query, [params]))

    async def executemany(self, query: str, rows: Sequence[Any]) -> None:
        self.statements.append((query, list(rows)))


def _thread_key(config: RunnableConfig) -> _ThreadKey:
    thread_id, namespace, _ = _read_key(config)
    return thread_id, namespace


@asynccontextmanager
async def grouped_step_writes(checkpointer: BaseCheckpointSaver[Any] | bool | None) -> AsyncIterator[None]:
    """Within this block, node steps' pending writes are saved with their step's checkpoint (see
    the module docstring); on SQLite, or a saver on one connection, nothing changes."""
    if not isinstance(checkpointer, ServicePostgresSaver) or not checkpointer.on_pool:
        yield
        return
    held = _HeldWrites()
    token = _held_writes.set(held)
    try:
        yield
    finally:
        _held_writes.reset(token)
        await checkpointer.save_writes(await held.take_all())


def _read_key(config: RunnableConfig) -> _ReadKey:
    configurable = config.get("configurable") or {}
    return (
        str(configurable.get("thread_id")),
        str(configurable.get("checkpoint_ns") or ""),
        configurable.get("checkpoint_id"),
    )


@contextmanager
def one_checkpoint_read() -> Iterator[None]:
    """Within this block, each checkpoint this task reads comes from the database once (see the
    module docstring for when that is safe)."""
    token = _reads.set({})
    try:
        yield
    finally:
        _reads.reset(token)


class _ScopedReads:
    """Mixin for a LangGraph async saver: `aget_tuple` answers from the current scope's reads."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        reads = _reads.get()
        if reads is None:
            return await super().aget_tuple(config)  # type: ignore[misc]
        key = _read_key(config)
        if key in reads:
            return reads[key]
        found: CheckpointTuple | None = await super().aget_tuple(config)  # type: ignore[misc]
        reads[key] = found
        if found is not None:
            reads[_read_key(found.config)] = found  # the latest one is also asked for by its id
        return found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        forget_scoped_reads()
        return await super().aput(config, checkpoint, metadata, new_versions)  # type: ignore[misc]

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        forget_scoped_reads()
        await super().aput_writes(config, writes, task_id, task_path)  # type: ignore[misc]


def forget_scoped_reads() -> None:
    """Drop what the current scope read (a write or a prune changed the thread)."""
    reads = _reads.get()
    if reads is not None:
        reads.clear()


class ServiceSqliteSaver(_ScopedReads, AsyncSqliteSaver):
    """`AsyncSqliteSaver` with scoped reads."""


class ServicePostgresSaver(_ScopedReads, AsyncPostgresSaver):
    """`AsyncPostgresSaver` with scoped reads, and concurrent calls on its pool.

    LangGraph's saver holds one asyncio lock around every database call -- needed when it shares
    one connection, but on a pool (ours) each call has a connection of its own, and the lock only
    queues every run of the process behind the others' checkpoint reads and writes. A write
    (`aput`, `aput_writes`: `pipeline=True`) runs in one transaction instead of one per statement
    (the pool's connections are in autocommit mode, as the saver requires).
    """

    @property
    def on_pool(self) -> bool:
        return isinstance(self.conn, AsyncConnectionPool)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        held = _held_writes.get()
        if held is None or not task_path.startswith(NODE_TASK_PATH_PREFIX):
            await super().aput_writes(config, writes, task_id, task_path)
            return
        forget_scoped_reads()
        # Held before its rows are prepared: a checkpoint saved meanwhile waits for them (`_HeldWrites`).
        statement = asyncio.ensure_future(self._write_statement(config, writes, task_id, task_path))
        held.hold(_thread_key(config), statement)
        await statement

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        held = _held_writes.get()
        if held is not None and metadata.get("source") == INPUT_CHECKPOINT_SOURCE:
            # Held for step 0's transaction: LangGraph's own statements for it, recorded.
            forget_scoped_reads()
            recorder = _StatementRecorder()
            recording = _recording.set(recorder)
            try:
                saved = await super().aput(config, checkpoint, metadata, new_versions)
            finally:
                _recording.reset(recording)
            for statement in recorder.statements:
                held.hold(_thread_key(config), statement)
            return saved
        leading = await held.take(_thread_key(config)) if held is not None else []
        if not leading:
            return await super().aput(config, checkpoint, metadata, new_versions)
        token = _leading_writes.set(tuple(leading))
        try:
            return await super().aput(config, checkpoint, metadata, new_versions)
        finally:
            _leading_writes.reset(token)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        held = _held_writes.get()
        if held is not None:  # the thread's waiting writes are part of what a read must see
            await self.save_writes(await held.take(_thread_key(config)))
        return await super().aget_tuple(config)

    async def save_writes(self, statements: Sequence[_WriteStatement]) -> None:
        """Held writes, in one transaction."""
        if statements:
            async with self._cursor(pipeline=True) as cursor:
                for query, rows in statements:
                    await cursor.executemany(query, rows)

    async def _write_statement(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> _WriteStatement:
        """The statement `AsyncPostgresSaver.aput_writes` would run for these writes."""
        query = (
            self.UPSERT_CHECKPOINT_WRITES_SQL
            if all(channel in WRITES_IDX_MAP for channel, _ in writes)
            else self.INSERT_CHECKPOINT_WRITES_SQL
        )
        configurable = config["configurable"]
        rows = await asyncio.to_thread(
            self._dump_writes,
            configurable["thread_id"],
            configurable["checkpoint_ns"],
            configurable["checkpoint_id"],
            task_id,
            task_path,
            writes,
        )
        return query, rows

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        recorder = _recording.get()
        if recorder is not None:
            yield recorder  # type: ignore[misc]  # only `execute`/`executemany` are called on it
            return
        if not isinstance(self.conn, AsyncConnectionPool):
            async with super()._cursor(pipeline=pipeline) as cursor:
                yield cursor
            return
        async with self.conn.connection() as conn:
            if not pipeline:
                async with conn.cursor(binary=True, row_factory=dict_row) as cursor:
                    yield cursor
                return
            async with AsyncExitStack() as stack:
                if self.supports_pipeline:
                    await stack.enter_async_context(conn.pipeline())
                await stack.enter_async_context(conn.transaction())
                cursor = await stack.enter_async_context(conn.cursor(binary=True, row_factory=dict_row))
                leading = _leading_writes.get()
                if leading:  # a step's held writes, in its checkpoint's transaction (once)
                    _leading_writes.set(())
                    for query, rows in leading:
                        await cursor.executemany(query, rows)
                yield cursor


@asynccontextmanager
async def open_checkpointer(
    target: DatabaseTarget,
) -> AsyncIterator[ServiceSqliteSaver | ServicePostgresSaver]:
    """Open the checkpointer; the caller runs `setup()` (under the schema lock on PostgreSQL)."""
    if target.backend == "sqlite":
        Path(target.checkpoint_target).parent.mkdir(parents=True, exist_ok=True)
        # As `from_conn_string` does, with statements run on the event loop's thread.
        async with connect_in_loop(
            target.checkpoint_target, busy_timeout_seconds=SQLITE_BUSY_TIMEOUT_SECONDS
        ) as conn:
            await SqliteCheckpointRows(conn).prepare_file(journal_size_limit=SQLITE_JOURNAL_SIZE_LIMIT)
            yield ServiceSqliteSaver(conn, serde=CheckpointSerializer())
        return
    liveness = CheckoutLiveness()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        target.checkpoint_target,
        min_size=1,
        max_size=POSTGRES_POOL_MAX_SIZE,
        # What AsyncPostgresSaver requires of its connections.
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # As for the service's own engine: a connection the server dropped (restart, failover, idle
        # timeout) is replaced at checkout instead of failing the next runs -- pinged only when its
        # socket says something happened or it idled long (`db/liveness.py`).
        check=liveness.check,
        reset=liveness.returned,
        open=False,
    )
    await pool.open(wait=True)
    try:
        yield ServicePostgresSaver(pool, serde=CheckpointSerializer())
    finally:
        await pool.close()
