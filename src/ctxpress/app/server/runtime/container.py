"""`Services`: every service of one process, wired together, opened and closed with the app.

Routes reach it as `request.app.state.services`. What manual compression (S17–S19) needs of it:

    services: Services = request.app.state.services
    async with services.database.session() as session:
        async with conversation_lock(session, conversation_id) as locked:   # same lock as intake
            if (busy := await locked.busy_state()) is not None:             # running | waiting_input | queued
                raise ThreadBusyError(busy)
            agent = services.agents.get(locked.conversation.agent_name)     # AgentRuntime
            config = thread_config(conversation_id)
            state = await agent.graph.aget_state(config)                     # the canonical compiled graph
            result = await compress_now(
                state.values.get("messages", []), state.values.get("_summarization_event"),
                config=agent.compression, summary_model=agent.summary_model, tools=agent.tools,
                workdir=services.workdirs.for_conversation(conversation_id), thread_id=conversation_id,
            )
            await agent.graph.aupdate_state(config, {"_summarization_event": result.event})
        # the lock is held from the idle check until here (S18); leaving the block releases it

`services.compression` (usecases/compression.py) implements exactly this, with the workdir taken
as a counted handle (`workdirs.acquire`) and the pressure record marked stale afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from redis.asyncio import Redis

from ctxpress.app.kb.tools import retrieval_tools
from ctxpress.app.owner_only import DIR_MODE, owner_only_dir, owner_only_file, owner_only_sqlite
from ctxpress.app.server.agents_file import AgentDefinition, default_agent, load_agents_file
from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.migrate import schema_change_lock, upgrade_on
from ctxpress.app.server.knowledge import open_knowledge_base
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.runtime.agents import AgentRegistry
from ctxpress.app.server.runtime.auth_throttle import AuthThrottle, auth_throttle
from ctxpress.app.server.runtime.checkpoint_pruning import BackgroundPruner
from ctxpress.app.server.runtime.checkpoints import open_checkpointer
from ctxpress.app.server.runtime.events import EventLog
from ctxpress.app.server.runtime.execution import RunExecutor
from ctxpress.app.server.runtime.intake_activity import IntakeActivity
from ctxpress.app.server.runtime.live_events import LiveBus, MemoryLiveBus
from ctxpress.app.server.runtime.postgres_notify_bus import PostgresNotifyBus
from ctxpress.app.server.runtime.redis_live_bus import RedisLiveBus
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs, WorkdirQuota
from ctxpress.app.server.runtime.worker import RunWorker, new_worker_id
from ctxpress.app.server.settings import DatabaseTarget, Settings
from ctxpress.app.server.usecases.auth import AuthService, IssuedToken
from ctxpress.app.server.usecases.compression import CompressionService
from ctxpress.app.server.usecases.compression_history import CompressionHistoryService
from ctxpress.app.server.usecases.conversations import ConversationService
from ctxpress.app.server.usecases.files import FileService
from ctxpress.app.server.usecases.pressure import PressureService
from ctxpress.app.server.usecases.runs import RunService
from ctxpress.app.server.usecases.usage import UsageService

logger = logging.getLogger(__name__)

SERVER_LOCK_FILE = "server.lock"


class DataDirInUseError(RuntimeError):
    """Another service process already serves this SQLite data directory."""


@dataclass
class Services:
    settings: Settings
    database: Database
    checkpointer: BaseCheckpointSaver[Any]
    #: Prunes a thread's checkpoints after a manual compression, off its answer's path.
    pruner: BackgroundPruner
    workdirs: ConversationWorkdirs
    agents: AgentRegistry
    auth: AuthService
    conversations: ConversationService
    events: EventLog
    usage: UsageService
    files: FileService
    worker: RunWorker
    runs: RunService
    #: Manual compression (S17–S19) and the context status panel (S22).
    compression: CompressionService
    #: The compressions of a conversation from the record (the panel's event list, issue 20).
    compression_history: CompressionHistoryService
    #: Failed authentications per client address (shared through Redis when configured).
    auth_throttle: AuthThrottle
    #: Prometheus metrics of this process (`GET /metrics` when `metrics_enabled`).
    metrics: ServiceMetrics
    #: Set when this start created the first user (printed once by `ctxpress serve`).
    bootstrap_admin: IssuedToken | None = None


def agent_definitions(settings: Settings) -> list[AgentDefinition]:
    if settings.agents_file is None:
        return [default_agent()]
    return load_agents_file(settings.agents_file)


def prepare_data_dir(settings: Settings) -> None:
    """The data directory and the workdirs' folder 0700, the SQLite files 0600 (`owner_only`)."""
    owner_only_dir(settings.data_dir)
    owner_only_dir(settings.workdirs_dir)
    target = settings.database()
    if target.backend == "sqlite" and target.sqlalchemy_url.database:
        database_file = Path(target.sqlalchemy_url.database)
        database_file.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        owner_only_sqlite(database_file)
        owner_only_sqlite(Path(target.checkpoint_target))


@asynccontextmanager
async def open_database(settings: Settings) -> AsyncIterator[Database]:
    """The database, migrated to the newest schema (also used by the CLI's user commands)."""
    prepare_data_dir(settings)
    database = Database(settings.database(), pool_size=settings.database_pool_size)
    try:
        async with schema_change_lock(database) as connection:
            await upgrade_on(connection)
        yield database
    finally:
        await database.dispose()


@asynccontextmanager
async def open_services(
    settings: Settings, agents: Sequence[AgentDefinition] | None = None
) -> AsyncIterator[Services]:
    definitions = list(agents) if agents is not None else agent_definitions(settings)
    async with AsyncExitStack() as stack:
        prepare_data_dir(settings)
        target = settings.database()
        if target.backend == "sqlite":
            stack.enter_context(_exclusive_server_lock(settings.data_dir))
        database = Database(target, pool_size=settings.database_pool_size)
        stack.push_async_callback(database.dispose)
        checkpointer = await stack.enter_async_context(open_checkpointer(target))
        async with schema_change_lock(database) as connection:
            await upgrade_on(connection)
            await checkpointer.setup()

        redis = None
        if settings.redis_url:
            redis = Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=2)
            stack.push_async_callback(redis.aclose)
        throttle = auth_throttle(
            max_failures=settings.auth_failure_limit,
            window_seconds=settings.auth_failure_window_seconds,
            redis=redis,
            redis_prefix=settings.redis_key_prefix,
        )
        workdirs = ConversationWorkdirs(
            settings.workdirs_dir,
            quota=WorkdirQuota(
                max_file_bytes=settings.workdir_max_file_bytes, max_workdir_bytes=settings.workdir_max_bytes
            ),
        )
        # query_kb over the service's knowledge base; web_search when a search API is configured
        retrieval = retrieval_tools(open_knowledge_base(settings))
        registry = AgentRegistry(
            definitions,
            checkpointer=checkpointer,
            workdirs=workdirs,
            extra_tools=retrieval.available,
            unavailable_tools=retrieval.unavailable,
        )
        metrics = ServiceMetrics()
        bus = live_bus(settings, target, redis, metrics)
        await bus.start()
        stack.push_async_callback(bus.stop)
        events = EventLog(
            database,
            bus=bus,
            metrics=metrics,
            poll_seconds=min(settings.worker_poll_seconds, 1.0),
            # One SQLite process, or every process on Redis: nobody writes events the bus misses.
            bus_sees_everything=bus.shared or target.backend == "sqlite",
        )
        stack.push_async_callback(events.stop)
        usage = UsageService(database, excluded_providers=settings.usage_excluded_providers)
        worker_id = new_worker_id()
        intake = IntakeActivity()
        executor = RunExecutor(
            database=database,
            intake=intake,
            events=events,
            agents=registry,
            usage_exclusion=usage.exclusion,
            worker_id=worker_id,
            recursion_limit=settings.run_recursion_limit,
            tool_result_preview_chars=settings.tool_result_preview_chars,
            metrics=metrics,
            delta_window_seconds=settings.delta_window_ms / 1000,
            delta_max_chars=settings.delta_max_chars,
        )
        worker = RunWorker(
            database=database,
            events=events,
            executor=executor,
            worker_id=worker_id,
            max_concurrent_runs=settings.max_concurrent_runs,
            max_runs_per_user=settings.max_runs_per_user,
            lease_seconds=settings.run_lease_seconds,
            poll_seconds=settings.worker_poll_seconds,
            metrics=metrics,
        )
        bus.on_cancel(worker.cancel_local)
        pruner = BackgroundPruner(database, checkpointer, metrics, on_released=worker.nudge)
        # Runs after the worker stops (callbacks run last-in first-out), before the databases close.
        stack.push_async_callback(pruner.wait)
        services = Services(
            settings=settings,
            database=database,
            checkpointer=checkpointer,
            pruner=pruner,
            workdirs=workdirs,
            agents=registry,
            auth=AuthService(database),
            conversations=ConversationService(database=database, agents=registry, workdirs=workdirs),
            events=events,
            usage=usage,
            files=FileService(workdirs),
            worker=worker,
            runs=RunService(
                database=database,
                intake=intake,
                events=events,
                worker=worker,
                agents=registry,
                max_input_chars=settings.max_input_chars,
            ),
            compression=CompressionService(
                database=database,
                agents=registry,
                workdirs=workdirs,
                pressure=PressureService(database),
                pruner=pruner,
            ),
            compression_history=CompressionHistoryService(database=database, agents=registry),
            auth_throttle=throttle,
            metrics=metrics,
        )
        await services.conversations.sync_agents()
        services.bootstrap_admin = await services.auth.ensure_admin()
        await worker.start()
        stack.push_async_callback(worker.stop)
        logger.info("ctxpress service ready (%s, worker %s)", target.backend, worker_id)
        yield services


def live_bus(
    settings: Settings, target: DatabaseTarget, redis: Redis | None, metrics: ServiceMetrics
) -> LiveBus:
    """Redis Streams when `redis_url` is set (several processes); else this process's memory, with
    cancel requests through PostgreSQL's `NOTIFY` on PostgreSQL (`PostgresNotifyBus`)."""
    if redis is None and target.backend == "postgresql":
        return PostgresNotifyBus(
            target.checkpoint_target, metrics=metrics, maxlen=settings.live_stream_maxlen
        )
    if redis is None:
        return MemoryLiveBus(metrics=metrics, maxlen=settings.live_stream_maxlen)
    return RedisLiveBus(
        redis,
        prefix=settings.redis_key_prefix,
        maxlen=settings.live_stream_maxlen,
        ttl_seconds=settings.live_stream_ttl_seconds,
        metrics=metrics,
    )


@contextlib.contextmanager
def _exclusive_server_lock(data_dir: Path) -> Iterator[None]:
    """SQLite locks are per process: refuse a second service process on the same data directory."""
    if sys.platform == "win32":  # no fcntl; the single-process rule is documented instead
        yield
        return
    import fcntl

    owner_only_file(data_dir / SERVER_LOCK_FILE)
    handle: IO[str] = open(data_dir / SERVER_LOCK_FILE, "a+")  # noqa: SIM115 - held for the service's life
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUseError(
                "another ctxpress service is already using this data directory; with SQLite only one "
                "process may serve it (use PostgreSQL to run several)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()
