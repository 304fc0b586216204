"""Streams whose bus does not hear every writer (PostgreSQL without Redis, issue 17): the process
reads SQL once per interval for all of them, and wakes only the streams that are behind.

Run on both databases: the watch is what `EventLog` uses whenever its bus does not see every writer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event as sqlalchemy_event

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.metrics import ServiceMetrics
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.runtime import events
from ctxpress.app.server.runtime.events import EventLog
from ctxpress.app.server.runtime.live_events import EventPosition, LiveEvent, LiveSubscriber, MemoryLiveBus
from ctxpress.app.server.runtime.locks import conversation_lock
from ctxpress.app.server.runtime.silent_streams import SilentStreamWatch
from ctxpress.app.testing.records import add_conversation

STREAMS = 20
INTERVAL_S = 0.05


def _event_log(database: Database) -> EventLog:
    """A process's event log whose bus hears only this process (as on PostgreSQL without Redis)."""
    metrics = ServiceMetrics()
    return EventLog(
        database,
        bus=MemoryLiveBus(metrics=metrics, maxlen=100),
        metrics=metrics,
        poll_seconds=INTERVAL_S,
        bus_sees_everything=False,
    )


async def _queued_run(database: Database, log: EventLog) -> str:
    conversation_id = await add_conversation(database)
    async with database.session() as session, conversation_lock(session, conversation_id) as locked:
        run = await RunRepository(session).add(locked.conversation, input={"text": "q", "message_id": "m"})
        await log.append(session, run.id, events.RUN_QUEUED_EVENT, {"position": 1, "reason": "workers_busy"})
        return run.id


@contextlib.asynccontextmanager
async def _counting_transactions(database: Database) -> AsyncIterator[list[int]]:
    begun: list[int] = []

    def count(*_args: Any) -> None:
        begun.append(1)

    sqlalchemy_event.listen(database.engine.sync_engine, "begin", count)
    try:
        yield begun
    finally:
        sqlalchemy_event.remove(database.engine.sync_engine, "begin", count)


async def _follow(log: EventLog, run_id: str, received: list[LiveEvent]) -> None:
    async for event in log.follow(run_id, after=EventPosition(0)):
        received.append(event)


async def _until(condition: Any, *, rounds: int = 400) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(INTERVAL_S / 2)
    raise AssertionError("condition not reached")


async def test_waiting_streams_share_one_read_per_interval_and_each_gets_what_another_process_stored(
    database: Database,
) -> None:
    here, elsewhere = _event_log(database), _event_log(database)
    run_ids = [await _queued_run(database, elsewhere) for _ in range(STREAMS)]
    received: list[list[LiveEvent]] = [[] for _ in run_ids]
    streams = [asyncio.create_task(_follow(here, r, got)) for r, got in zip(run_ids, received, strict=True)]
    try:
        await _until(lambda: all(got for got in received))  # each has read its run_queued
        watch = here.silent_streams
        assert watch is not None
        async with _counting_transactions(database) as begun:
            reads_before = watch.reads
            await _until(lambda: watch.reads >= reads_before + 10)
            transactions = len(begun)
        # Ten intervals of silence: the watch's reads (and at most a stray one per stream), not one
        # read per stream and interval (200 before the watch).
        assert transactions < STREAMS, transactions

        # Another process (its own bus) starts a run: only that run's stream reads, and gets it.
        async with database.session() as session:
            started = await elsewhere.append(session, run_ids[3], events.RUN_STARTED, {"agent": "x"})
            await session.commit()
        await _until(lambda: any(e.position.durable_id == started for e in received[3]))
        assert [e.type for e in received[3]] == [events.RUN_QUEUED_EVENT, events.RUN_STARTED]
        assert all(len(got) == 1 for index, got in enumerate(received) if index != 3)
    finally:
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
        await here.stop()
        await elsewhere.stop()


async def test_a_stream_ends_when_another_process_finishes_its_run(database: Database) -> None:
    here, elsewhere = _event_log(database), _event_log(database)
    run_id = await _queued_run(database, elsewhere)
    received: list[LiveEvent] = []
    try:
        stream = asyncio.create_task(_follow(here, run_id, received))
        await _until(lambda: bool(received))
        async with database.session() as session:
            run = await RunRepository(session).get(run_id)
            assert run is not None
            RunRepository.finish(run, "cancelled")
            await elsewhere.append(
                session, run_id, events.RUN_FINISHED, {"status": "cancelled", "error": None}
            )
            await session.commit()
        await asyncio.wait_for(stream, timeout=30)  # the stream ended by itself
        assert [e.type for e in received] == [events.RUN_QUEUED_EVENT, events.RUN_FINISHED]
    finally:
        await here.stop()
        await elsewhere.stop()


def test_a_failed_read_wakes_every_stream_and_a_read_only_those_behind() -> None:
    behind, current, ended, gone = (LiveSubscriber(name) for name in ("behind", "current", "ended", "gone"))
    for subscriber in (behind, current, ended):
        subscriber.saw(EventPosition(7, 2))  # a delta after event 7: the stream has event 7
    progress = {"behind": ("running", 8), "current": ("running", 7), "ended": ("cancelled", 7)}

    assert SilentStreamWatch.wake_behind([behind, current, ended, gone], progress) == 3
    assert [s.take_gap() for s in (behind, current, ended, gone)] == [True, False, True, True]

    assert SilentStreamWatch.wake_behind([behind, current, ended, gone], None) == 4
    assert [s.take_gap() for s in (behind, current, ended, gone)] == [True, True, True, True]


async def test_a_gap_marked_while_nothing_is_queued_costs_one_read_not_a_read_loop(
    database: Database,
) -> None:
    """A bus marks a gap with nothing queued (the Redis reader lost its connection, or the watch
    found a stored event): the stream reads SQL once and waits again. The gap used to stay marked
    when the wake brought no events, and the stream re-read SQL in a loop until its run ended."""
    metrics = ServiceMetrics()
    bus = MemoryLiveBus(metrics=metrics, maxlen=100)
    log = EventLog(database, bus=bus, metrics=metrics, poll_seconds=INTERVAL_S, bus_sees_everything=True)
    run_id = await _queued_run(database, log)
    received: list[LiveEvent] = []
    stream = asyncio.create_task(_follow(log, run_id, received))
    try:
        await _until(lambda: bool(received))
        (subscriber,) = bus._runs[run_id].subscribers  # the stream's subscription
        async with _counting_transactions(database) as begun:
            subscriber.mark_gap()
            await asyncio.sleep(10 * INTERVAL_S)
            transactions = len(begun)
        assert transactions == 1, transactions
        assert not stream.done() and len(received) == 1  # still following, nothing new
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)
