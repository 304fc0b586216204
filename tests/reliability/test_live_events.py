"""Live run events across real service processes on PostgreSQL, with and without Redis.

The `paced` agent of the scripted service streams one long answer with real timing. A run executes
on process A (intake starts it there); its SSE stream is read through process B:
- with Redis (the real one on 127.0.0.1:6379, a key prefix of its own) B's client receives every
  delta, and their text is the stored message; a cancel sent to B stops the run on A at once (not
  at A's next lease heartbeat, 10 s away);
- without Redis B's client gets every stored event (polled) and the complete message, no deltas;
- Redis (a redis-server of this test, on a port of its own) stopped and started again mid-run: the
  stream still ends with `run_finished`, and the chat record and the `message` event are complete.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from ctxpress.app.testing.api import SseEvent, iter_events, send, wait_for_status
from ctxpress.app.testing.ports import free_port
from ctxpress.app.testing.processes import ServiceProcess, create_user
from tests.server.redis_bus import REDIS_URL, redis_prefix

from .processes import scripted_service
from .service_process import paced_answer_text

POSTGRES_ONLY = pytest.mark.parametrize(
    "backend", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


def start_pair(
    make_settings: Any, tmp_path: Path, environment: dict[str, str], only_b: dict[str, str] | None = None
) -> tuple[list[ServiceProcess], str]:
    """Processes A and B on one database; `only_b`: B's environment besides `environment`."""
    settings = make_settings()
    token = create_user(settings, "alice")
    processes = [
        scripted_service(
            settings,
            tmp_path / name,
            tmp_path / f"{name}.log",
            {"CTXPRESS_TEST_AGENT": "paced", **environment, **(extra or {})},
        )
        for name, extra in (("a", None), ("b", only_b))
    ]
    for process in processes:
        process.control.mkdir()
        process.start()
    return processes, token


@pytest.fixture
def services(make_settings: Any, tmp_path: Path) -> Iterator[Any]:
    started: list[ServiceProcess] = []

    def start(
        environment: dict[str, str], only_b: dict[str, str] | None = None
    ) -> tuple[ServiceProcess, ServiceProcess, str]:
        processes, token = start_pair(make_settings, tmp_path, environment, only_b)
        started.extend(processes)
        return processes[0], processes[1], token

    yield start
    for process in started:
        process.stop()


def new_conversation(client: httpx.Client) -> str:
    response = client.post("/api/conversations", json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def stored_assistant_texts(client: httpx.Client, conversation_id: str) -> list[str]:
    page = client.get(f"/api/conversations/{conversation_id}/messages").json()
    return [item["content"] for item in page["items"] if item["role"] == "assistant"]


def delta_text(events: list[SseEvent]) -> str:
    return "".join(event.data["delta"] for event in events if event.type == "message_delta")


def follow(client: httpx.Client, run_id: str) -> list[SseEvent]:
    with client.stream("GET", f"/api/runs/{run_id}/events", timeout=60) as response:
        assert response.status_code == 200
        return list(iter_events(response))


@POSTGRES_ONLY
def test_a_client_on_another_process_gets_the_whole_run_through_redis(services: Any) -> None:
    with redis_prefix() as prefix:
        a, b, token = services({"CTXPRESS_REDIS_URL": REDIS_URL, "CTXPRESS_REDIS_KEY_PREFIX": prefix})
        via_a, via_b = a.client(token), b.client(token)
        conversation_id = new_conversation(via_a)
        accepted = send(via_a, conversation_id, "讲长一点")
        assert accepted["started"] is True  # executing on A
        events = follow(via_b, accepted["run"]["id"])
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "succeeded"
    positions = [event.position for event in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    message = next(event.data["content"] for event in events if event.type == "message")
    assert delta_text(events) == message == paced_answer_text(40)
    assert stored_assistant_texts(via_b, conversation_id) == [message]


@POSTGRES_ONLY
def test_without_redis_another_process_gets_every_stored_event(services: Any) -> None:
    """PostgreSQL without Redis: B polls SQL; its client gets the stored events, deltas stay on A."""
    a, b, token = services({})
    via_a, via_b = a.client(token), b.client(token)
    conversation_id = new_conversation(via_a)
    run_id = send(via_a, conversation_id, "讲长一点")["run"]["id"]
    on_b = follow(via_b, run_id)
    on_a = follow(via_a, run_id)
    assert [e.type for e in on_b] == ["run_started", "message", "usage", "run_finished"]
    assert on_b == [event for event in on_a if not event.position.is_live]
    assert next(e.data["content"] for e in on_b if e.type == "message") == paced_answer_text(40)
    assert stored_assistant_texts(via_b, conversation_id) == [paced_answer_text(40)]


@POSTGRES_ONLY
def test_without_redis_a_streamed_message_that_another_process_runs_is_followed_whole(
    services: Any,
) -> None:
    """PostgreSQL without Redis: `POST …/runs/stream` on B, whose one slot is taken, queues the run;
    A claims and executes it. B's stream starts from its own bus (the intake's `run_queued`, no SQL
    read) and finds A's stored events by reading SQL after a silence: every one, in order, once."""
    a, b, token = services(
        {},
        only_b={
            "CTXPRESS_MAX_CONCURRENT_RUNS": "1",
            "CTXPRESS_TEST_CHUNKS": "4000",  # B's own run outlasts the test; cancelled at its end
        },
    )
    via_a, via_b = a.client(token), b.client(token)
    long_run = send(via_b, new_conversation(via_b), "讲很长")
    assert long_run["started"] is True  # B's only slot
    conversation_id = new_conversation(via_b)
    with via_b.stream(
        "POST", f"/api/conversations/{conversation_id}/runs/stream", json={"input": "讲长一点"}, timeout=60
    ) as response:
        assert response.status_code == 200
        run_id = response.headers["location"].rsplit("/", 1)[-1]
        on_b = list(iter_events(response))
    assert on_b[0].type == "run_queued" and on_b[0].data["reason"] == "workers_busy"
    assert [e.type for e in on_b[1:]] == ["run_started", "message", "usage", "run_finished"]
    assert on_b[-1].data["status"] == "succeeded"
    assert on_b == follow(via_a, run_id)  # the stored events, as any stream replays them
    assert stored_assistant_texts(via_a, conversation_id) == [paced_answer_text(40)]
    assert via_b.post(f"/api/runs/{long_run['run']['id']}/cancel").status_code == 200


@POSTGRES_ONLY
def test_cancel_reaches_the_executing_process_through_redis(services: Any) -> None:
    with redis_prefix() as prefix:
        # Lease 30 s: A's heartbeat (which also notices cancel flags) comes every 10 s only.
        a, b, token = services(
            {
                "CTXPRESS_REDIS_URL": REDIS_URL,
                "CTXPRESS_REDIS_KEY_PREFIX": prefix,
                "CTXPRESS_RUN_LEASE_SECONDS": "30",
                "CTXPRESS_TEST_CHUNKS": "2000",
            }
        )
        via_a, via_b = a.client(token), b.client(token)
        run_id = send(via_a, new_conversation(via_a), "讲很长")["run"]["id"]
        with via_b.stream("GET", f"/api/runs/{run_id}/events", timeout=60) as response:
            received: list[SseEvent] = []
            for event in iter_events(response):
                received.append(event)
                if event.type == "message_delta" and len(received) == 3:
                    assert via_b.post(f"/api/runs/{run_id}/cancel").status_code == 200
        # Well before A's next heartbeat could have seen the flag.
        assert wait_for_status(via_b, run_id, {"cancelled"}, timeout=5)["status"] == "cancelled"
    assert received[-1].type == "run_finished" and received[-1].data["status"] == "cancelled"


@POSTGRES_ONLY
def test_without_redis_a_cancel_reaches_the_executing_process_through_postgresql(services: Any) -> None:
    """PostgreSQL without Redis: a cancel sent to B reaches A, which executes the run, through the
    database's notifications -- not at A's next lease heartbeat (every 10 s here)."""
    a, b, token = services({"CTXPRESS_RUN_LEASE_SECONDS": "30", "CTXPRESS_TEST_CHUNKS": "2000"})
    via_a, via_b = a.client(token), b.client(token)
    run_id = send(via_a, new_conversation(via_a), "讲很长")["run"]["id"]
    cancelled_at = None
    with via_b.stream("GET", f"/api/runs/{run_id}/events", timeout=60) as response:
        received: list[SseEvent] = []
        for event in iter_events(response):
            received.append(event)
            if event.type == "run_started":
                assert via_b.post(f"/api/runs/{run_id}/cancel").status_code == 200
                cancelled_at = time.monotonic()
    assert cancelled_at is not None
    # The run ended well before A's next heartbeat could have seen the flag (B's stream reads SQL
    # after each second of silence, so it hears of the end within about a second).
    assert time.monotonic() - cancelled_at < 5
    assert received[-1].type == "run_finished" and received[-1].data["status"] == "cancelled"


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Any]:
    """A redis-server of this test only (a free port, no persistence): it may be restarted."""
    executable = shutil.which("redis-server")
    if executable is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    command = [executable, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    state: dict[str, subprocess.Popen[bytes]] = {}

    def start() -> None:
        state["process"] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except Exception:
                assert time.monotonic() < deadline, "the test's redis-server did not start"
                time.sleep(0.05)
        client.close()

    def stop() -> None:
        state["process"].terminate()
        state["process"].wait(timeout=10)

    start()
    yield f"redis://127.0.0.1:{port}/0", start, stop
    stop()


@POSTGRES_ONLY
def test_redis_restarted_mid_run(services: Any, own_redis: Any) -> None:
    url, start_redis, stop_redis = own_redis
    a, b, token = services({"CTXPRESS_REDIS_URL": url, "CTXPRESS_TEST_CHUNKS": "80"})
    via_a, via_b = a.client(token), b.client(token)
    conversation_id = new_conversation(via_a)
    run_id = send(via_a, conversation_id, "讲长一点")["run"]["id"]
    received: list[SseEvent] = []
    with via_b.stream("GET", f"/api/runs/{run_id}/events", timeout=60) as response:
        for event in iter_events(response):
            received.append(event)
            if len(received) == 3:
                stop_redis()
                time.sleep(1.0)  # deltas published now are lost; stored events are not
                start_redis()
    assert received[-1].type == "run_finished" and received[-1].data["status"] == "succeeded"
    message = next(event.data["content"] for event in received if event.type == "message")
    assert message == paced_answer_text(80)
    assert stored_assistant_texts(via_b, conversation_id) == [message]
    # The deltas that did arrive are in order and a prefix-consistent part of the message.
    positions = [event.position for event in received]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert all(event.data["delta"] in message for event in received if event.type == "message_delta")
