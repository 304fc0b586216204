"""S18: 50 concurrent compress and intake requests on one conversation never overlap as writers.

On PostgreSQL two service instances share the database (each with its own engine and pool, worker,
checkpointer and event loop — the approach of `test_multi_process.py`), and the requests alternate
between them, so the row lock (`SELECT … FOR UPDATE`) is what serialises them. On SQLite one service
serves the data directory (one process per data directory) and its per-conversation lock does.

Every holder of the conversation lock — intake, manual compression, the worker's claim, a run's
finish — is traced: "enter" once the lock is held, "exit" before it is released. The trace must be
strictly serial, and the results must show no lost update.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.runtime import locks
from ctxpress.app.server.runtime.locks import LockedConversation
from ctxpress.app.testing.api import create_conversation, wait_for_status

from .conftest import ServerFactory
from .test_compress import HISTORY_DIR, TURNS, Chat, Summarizer, agent_state, history_files, kb_agent, talk

REQUESTS = 50
#: Of which new messages (each one a run); the rest are compressions.
INTAKES = 20
#: Requests start within this many seconds of each other (after a common start signal).
SPREAD_SECONDS = 0.6
#: A compression answered 409 tries again after this long (plus jitter), until it gets a 200.
RETRY_SECONDS = 0.5

Hold = Callable[..., AbstractAsyncContextManager[LockedConversation | None]]


@dataclass(frozen=True)
class LockEvent:
    seq: int
    at: float
    kind: Literal["enter", "exit"]
    token: int
    holder: str
    conversation_id: str


class LockTrace:
    """Wraps `locks._hold` (behind both `conversation_lock` and `try_conversation_lock`)."""

    def __init__(self) -> None:
        self.events: list[LockEvent] = []
        #: id(Database) -> the label of the service it belongs to.
        self.holders: dict[int, str] = {}
        self._lock = threading.Lock()  # the services run on their own threads
        self._seq = itertools.count()
        self._tokens = itertools.count(1)

    def _add(self, kind: Literal["enter", "exit"], token: int, holder: str, conversation_id: str) -> None:
        with self._lock:
            self.events.append(
                LockEvent(next(self._seq), time.monotonic(), kind, token, holder, conversation_id)
            )

    def wrap(self, original: Hold) -> Hold:
        @asynccontextmanager
        async def traced(
            session: AsyncSession, conversation_id: str, *, skip_locked: bool
        ) -> AsyncIterator[LockedConversation | None]:
            async with original(session, conversation_id, skip_locked=skip_locked) as locked:
                if locked is None:
                    yield None
                    return
                token = next(self._tokens)
                holder = self.holders.get(id(Database.of(session)), "?")
                self._add("enter", token, holder, conversation_id)  # after the lock was acquired
                try:
                    yield locked
                finally:
                    self._add("exit", token, holder, conversation_id)  # before commit releases it

        return traced

    def intervals(self, conversation_id: str) -> list[tuple[float, float, str]]:
        """(enter, exit, holder) of each hold, after checking the holds never overlap."""
        held: LockEvent | None = None
        found: list[tuple[float, float, str]] = []
        for event in (e for e in self.events if e.conversation_id == conversation_id):
            if event.kind == "enter":
                assert held is None, f"two writers at once: {held} and {event}"
                held = event
            else:
                assert held is not None and held.token == event.token, f"unmatched exit {event}"
                found.append((held.at, event.at, held.holder))
                held = None
        assert held is None, "a hold never ended"
        return found


@dataclass
class CompressAttempts:
    busy_reasons: list[str]
    result: dict[str, Any]


def test_s18_compress_and_intake_race_is_serial(
    start_server: ServerFactory, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = LockTrace()
    monkeypatch.setattr(locks, "_hold", trace.wrap(locks._hold))
    chat, summarizer = Chat(terse=True), Summarizer(delay=0.02)
    service_count = 2 if backend == "postgresql" else 1
    servers = [
        start_server(agents=[kb_agent(chat=chat, summarizer=summarizer)]) for _ in range(service_count)
    ]
    for label, server in zip("AB", servers, strict=False):
        trace.holders[id(server.services.database)] = label
    token = servers[0].create_user("alice")
    alice = servers[0].client(token)
    conversation_id = create_conversation(alice)
    talk(alice, conversation_id, TURNS)  # something to compress from the first request on

    rng = random.Random(18)
    delays = [rng.uniform(0, SPREAD_SECONDS) for _ in range(REQUESTS)]
    jitter = [rng.uniform(0, RETRY_SECONDS) for _ in range(REQUESTS)]
    intake_at = set(rng.sample(range(REQUESTS), INTAKES))  # which requests are new messages
    # Request i goes to service i % count: both kinds reach every service.
    assert len({i % service_count for i in intake_at}) == service_count
    assert len({i % service_count for i in set(range(REQUESTS)) - intake_at}) == service_count

    async def race() -> tuple[list[str], list[CompressAttempts]]:
        headers = {"Authorization": f"Bearer {token}"}
        clients = [httpx.AsyncClient(base_url=s.base_url, headers=headers, timeout=60) for s in servers]
        start = asyncio.Event()

        async def intake(index: int, client: httpx.AsyncClient) -> str:
            await start.wait()
            await asyncio.sleep(delays[index])
            refused = 0
            while True:
                response = await client.post(
                    f"/api/conversations/{conversation_id}/runs", json={"input": f"并发问题 {index:02d}"}
                )
                if response.status_code == 202:
                    return str(response.json()["run"]["id"])
                # A compression holds the conversation: refused at once, never left waiting (issue 16).
                assert response.status_code == 409, response.text
                error = response.json()["error"]
                assert (error["code"], error["reason"]) == ("thread_busy", "compressing"), error
                assert int(response.headers["Retry-After"]) > 0
                refused += 1
                assert refused < 400, "the conversation was never free of compressions"
                await asyncio.sleep(jitter[index] / 5)

        async def compressor(index: int, client: httpx.AsyncClient) -> CompressAttempts:
            await start.wait()
            await asyncio.sleep(delays[index])
            reasons: list[str] = []
            while True:
                response = await client.post(f"/api/conversations/{conversation_id}/compress")
                if response.status_code == 200:
                    return CompressAttempts(reasons, response.json())
                assert response.status_code == 409, response.text
                error = response.json()["error"]
                assert error["code"] == "thread_busy", error
                reasons.append(error["reason"])
                assert len(reasons) < 400, "the conversation never became idle"
                await asyncio.sleep(RETRY_SECONDS + jitter[index])

        try:
            intakes = [
                asyncio.ensure_future(intake(i, clients[i % len(clients)]))
                for i in range(REQUESTS)
                if i in intake_at
            ]
            compressions = [
                asyncio.ensure_future(compressor(i, clients[i % len(clients)]))
                for i in range(REQUESTS)
                if i not in intake_at
            ]
            start.set()
            return list(await asyncio.gather(*intakes)), list(await asyncio.gather(*compressions))
        finally:
            for client in clients:
                await client.aclose()

    run_ids, compressions = asyncio.run(race())
    for run_id in run_ids:
        assert wait_for_status(alice, run_id, {"succeeded", "failed"}, timeout=60)["status"] == "succeeded"

    # 1. The lock trace is serial: enter, exit, enter, exit … (checked inside `intervals`).
    holds = trace.intervals(conversation_id)
    assert len(holds) >= REQUESTS, "every request took the lock at least once"
    if service_count == 2:
        assert {holder for _, _, holder in holds} == {"A", "B"}, "both services wrote"

    # 2. Each compression summarised while holding the lock, and no model call of a run fell
    #    inside that hold (the run could only start after the compression released it).
    for started, ended in summarizer.intervals:
        hold = next(((a, b) for a, b, _ in holds if a <= started and ended <= b), None)
        assert hold is not None, "the summary call ran outside the conversation lock"
        assert not any(hold[0] <= at <= hold[1] for at in chat.call_times), "a run overlapped a compression"

    # 3. No lost update: every successful compression built on the previous one.
    successes = [attempt.result for attempt in compressions if attempt.result["compressed"]]
    assert successes, "at least one compression went through"
    state = agent_state(alice, conversation_id)
    event = state["values"]["_summarization_event"]
    assert event["summary_count"] == len(successes) == len(history_files(alice, conversation_id))
    assert all(path.startswith(HISTORY_DIR) for path in history_files(alice, conversation_id))
    messages = state["values"]["messages"]
    assert event["first_kept_id"] == messages[event["cutoff_index"]]["data"]["id"]
    busy = {reason for attempt in compressions for reason in attempt.busy_reasons}
    assert busy <= {"running", "queued", "compressing"}

    # 4. Every intake reached the state once, in FIFO order, and the chat record has it all.
    runs = alice.get(f"/api/conversations/{conversation_id}/runs", params={"limit": 100}).json()["items"]
    fifo_inputs = [run["input"] for run in reversed(runs)][len(TURNS) :]
    human_texts = [m["data"]["content"] for m in messages if m["type"] == "human"][len(TURNS) :]
    assert human_texts == fifo_inputs and len(fifo_inputs) == INTAKES
    records = alice.get(f"/api/conversations/{conversation_id}/messages", params={"limit": 500}).json()
    assert len(records["items"]) == len(messages) == 2 * (len(TURNS) + INTAKES)
