"""Races (S18, S24, S29).

- Intake vs a manual compression vs a second manual compression on one conversation, 200 rounds,
  two real service processes on PostgreSQL: every compression answers 200 or 409 `thread_busy`,
  the conversation-lock holds of both processes never overlap, and the state stays consistent
  (every message once and in FIFO order, no lost summary, a history chain without gaps).
- Many conversations at once: each one's workdir, state, chat record and events hold only its own
  content (no cross-talk).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpress.app.testing.api import read_events, wait_for_status
from ctxpress.app.testing.processes import ServiceProcess, create_user

from .processes import scripted_service
from .support import (
    assert_checkpoint_consistent,
    assert_history_chain,
    kb_agent,
    sql_messages,
    state_messages,
    state_values,
    workdir_root,
)

ROUNDS = 200
#: The whole race stops after this long even if rounds remain (it reports how many ran).
RACE_BUDGET_S = 150.0
#: The three requests of a round start within this many seconds of each other, in random order.
SPREAD_S = 0.25
CONVERSATIONS = 8
TURNS_EACH = 3


# --- intake vs two manual compressions, two processes ------------------------------------------------


@pytest.fixture
def two_processes(
    make_settings: Any, tmp_path: Path
) -> Iterator[tuple[ServiceProcess, ServiceProcess, Path]]:
    trace = tmp_path / "locks.jsonl"
    env = {"CTXPRESS_TEST_AGENT": "chat", "CTXPRESS_TEST_LOCK_TRACE": str(trace)}
    settings = make_settings()  # one data directory and one database for both
    processes = []
    for label in "ab":
        control = tmp_path / f"control-{label}"
        control.mkdir()
        processes.append(
            scripted_service(settings, control, tmp_path / f"service-{label}.log", extra_env=env)
        )
    yield processes[0], processes[1], trace
    for process in processes:
        process.stop()


async def later(delay: float, request: Awaitable[httpx.Response]) -> httpx.Response:
    await asyncio.sleep(delay)
    return await request


def lock_holds(trace: Path, conversation_id: str) -> list[str]:
    """The tokens of the lock holds on the conversation, after checking that they never overlap."""
    held: str | None = None
    holds: list[str] = []
    for line in trace.read_text().splitlines():
        entry = json.loads(line)
        if entry["conversation"] != conversation_id:
            continue
        if entry["kind"] == "enter":
            assert held is None, f"two writers at once: {held} and {entry['token']}"
            held = entry["token"]
        else:
            assert held == entry["token"], f"unmatched exit {entry}"
            holds.append(held)
            held = None
    assert held is None, "a hold never ended"
    return holds


async def accepted_after_compressions(client: httpx.AsyncClient, path: str, text: str) -> httpx.Response:
    """Post a message; while a manual compression holds the conversation it is refused at once
    (409 `compressing`, issue 16), and posted again shortly after."""
    while True:
        response = await client.post(path, json={"input": text})
        if response.status_code != 409:
            return response
        error = response.json()["error"]
        assert (error["code"], error["reason"]) == ("thread_busy", "compressing"), error
        assert "Retry-After" in response.headers
        await asyncio.sleep(0.05)


@pytest.mark.heavy
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_s18_intake_vs_two_manual_compressions_two_processes(
    two_processes: tuple[ServiceProcess, ServiceProcess, Path],
) -> None:
    first, second, trace = two_processes
    settings = first.settings
    token = create_user(settings, "alice")
    first.start()
    second.start()
    conversation_id = first.client(token).post("/api/conversations", json={}).json()["id"]

    async def race() -> tuple[list[str], list[httpx.Response], int]:
        headers = {"Authorization": f"Bearer {token}"}
        clients = [
            httpx.AsyncClient(base_url=p.base_url, headers=headers, timeout=60) for p in (first, second)
        ]
        runs = f"/api/conversations/{conversation_id}/runs"
        compress = f"/api/conversations/{conversation_id}/compress"
        rng = random.Random(18)
        run_ids: list[str] = []
        compressions: list[httpx.Response] = []
        deadline = time.monotonic() + RACE_BUDGET_S
        rounds = 0
        try:
            for index in range(ROUNDS):
                if time.monotonic() > deadline:
                    break
                intake_via, other = clients[index % 2], clients[(index + 1) % 2]
                delays = [rng.uniform(0, SPREAD_S) for _ in range(3)]
                intake, one, two = await asyncio.gather(
                    later(delays[0], accepted_after_compressions(intake_via, runs, f"第{index:03d}条")),
                    later(delays[1], intake_via.post(compress)),
                    later(delays[2], other.post(compress)),
                )
                assert intake.status_code == 202, intake.text
                run_ids.append(intake.json()["run"]["id"])
                compressions.extend((one, two))
                rounds += 1
        finally:
            for client in clients:
                await client.aclose()
        return run_ids, compressions, rounds

    run_ids, compressions, rounds = asyncio.run(race())
    assert rounds >= 50, f"only {rounds} rounds ran within the time budget"
    alice = first.client(token)
    for run_id in run_ids:
        assert wait_for_status(alice, run_id, {"succeeded", "failed"}, timeout=60)["status"] == "succeeded"

    # Every compression answered 200 or 409 thread_busy (never 5xx, never another 4xx).
    statuses = [response.status_code for response in compressions]
    assert set(statuses) <= {200, 409}, sorted(set(statuses))
    for response in compressions:
        if response.status_code == 409:
            error = response.json()["error"]
            assert error["code"] == "thread_busy" and error["reason"] in {
                "running",
                "waiting_input",
                "queued",
                "compressing",
            }
    succeeded = [r.json() for r in compressions if r.status_code == 200 and r.json()["compressed"]]
    assert statuses.count(409) > 0 and succeeded, "the premise: the requests really raced"

    # No overlapping writers, across both processes.
    holds = lock_holds(trace, conversation_id)
    assert len({hold.split("-")[0] for hold in holds}) == 2, "both processes held the lock"
    assert len(holds) >= rounds

    # State consistent: no lost summary, every message once and in FIFO order, history without gaps.
    counts = [item["summary_count"] for item in succeeded]
    assert len(counts) == len(set(counts)), "two compressions published the same summary (a lost update)"
    values = state_values(alice, conversation_id)
    event = values["_summarization_event"]
    assert event["summary_count"] >= max(counts)
    root = workdir_root(settings, conversation_id)
    assert_checkpoint_consistent(values, root)
    assert assert_history_chain(values, root) == event["summary_count"]
    runs = alice.get(f"/api/conversations/{conversation_id}/runs", params={"limit": 500}).json()["items"]
    fifo = [run["input"] for run in reversed(runs)]
    assert sorted(fifo) == sorted(f"第{i:03d}条" for i in range(rounds))
    humans = [m.content for m in state_messages(values) if m.type == "human"]
    assert humans == fifo, "the state holds every message once, in the order the runs were queued"
    rows = sql_messages(settings, conversation_id)
    assert [row.content for row in rows if row.role == "user"] == fifo
    assert len(rows) == 2 * rounds


# --- many conversations at once ----------------------------------------------------------------------


def test_s24_many_conversations_at_once_no_cross_talk(start_server: Any) -> None:
    agent, _ = kb_agent()
    server = start_server(agents=[agent], max_concurrent_runs=4)
    settings = server.services.settings
    users = [server.create_user(f"user{i}") for i in range(2)]
    markers = [f"M{uuid.uuid4().hex[:8]}" for _ in range(CONVERSATIONS)]
    owners = [users[i % 2] for i in range(CONVERSATIONS)]
    conversations = [
        server.client(owner).post("/api/conversations", json={}).json()["id"] for owner in owners
    ]

    async def talk(index: int) -> list[str]:
        headers = {"Authorization": f"Bearer {owners[index]}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as client:
            run_ids = []
            for turn in range(TURNS_EACH):
                response = await client.post(
                    f"/api/conversations/{conversations[index]}/runs",
                    json={"input": f"{markers[index]} 第{turn}问"},
                )
                assert response.status_code == 202, response.text
                run_ids.append(response.json()["run"]["id"])
                while (await client.get(f"/api/runs/{run_ids[-1]}")).json()["status"] not in (
                    "succeeded",
                    "failed",
                ):
                    await asyncio.sleep(0.05)
            return run_ids

    async def everyone() -> list[list[str]]:
        return list(await asyncio.gather(*(talk(i) for i in range(CONVERSATIONS))))

    all_runs = asyncio.run(everyone())
    compressed = 0
    for index, (conversation_id, run_ids) in enumerate(zip(conversations, all_runs, strict=True)):
        own = markers[index]
        foreign = [m for m in markers if m != own]
        client = server.client(owners[index])
        # Events: only this conversation's content, and its compression files are in its own workdir.
        root = workdir_root(settings, conversation_id)
        for run_id in run_ids:
            events = read_events(client, run_id)
            assert events[-1].data["status"] == "succeeded"
            text = json.dumps([e.data for e in events], ensure_ascii=False)
            assert own in text and not any(m in text for m in foreign), "events of another conversation"
            for event in (e.data for e in events if e.type == "context_compression"):
                compressed += 1
                for path in [*event.get("files_written", []), event.get("file_path")]:
                    if path:
                        assert (root / path).is_file(), f"{path} is not in this conversation's workdir"
        # State and chat record.
        values = state_values(client, conversation_id)
        state_text = json.dumps(values, ensure_ascii=False)
        assert own in state_text and not any(m in state_text for m in foreign), (
            "state of another conversation"
        )
        records = " ".join(row.content for row in sql_messages(settings, conversation_id))
        assert own in records and not any(m in records for m in foreign), (
            "chat record of another conversation"
        )
        assert_checkpoint_consistent(values, root)
        # Workdir: every file mentions only this conversation.
        for path in root.rglob("*"):
            if path.is_file():
                content = path.read_text("utf-8", "replace")
                assert not any(m in content for m in foreign), (
                    f"{path.name} holds another conversation's content"
                )
        # And the other user cannot see it at all.
        stranger = server.client(owners[(index + 1) % 2])
        assert stranger.get(f"/api/conversations/{conversation_id}/state").status_code == 404
    assert compressed > 0, "the premise: conversations compressed while running side by side"
