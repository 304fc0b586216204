"""What one accepted message and one stream open cost the service (issue 17: time to first event).

    .venv/bin/python bench/intake_burst.py                  # both databases; prints, docs untouched
    .venv/bin/python bench/intake_burst.py --one-by-one 400 # also the intake alone, one after another

The paced service (`bench/paced_service.py`: the service, its model streaming with real timing)
runs with one run slot, taken for the whole measurement by one long run (20,000 tokens at 50
tokens/s), so that every message of the burst is accepted and queued and no other run executes.
50 conversations (as in `bench/service_load.py`) each send one message at the same moment
(`POST …/runs`), then open their run's stream at the same moment and read it to its first event
(`run_queued`). Reported per burst: the service's CPU per request (the process's CPU time during
the burst, less the long run's own rate measured just before) and the latency p50 / p95 / last.
The last request of a burst waits for about the burst's whole CPU: that is the floor of the time
to first event when that many messages arrive at once at one process.

`--one-by-one N`: the intake alone, without HTTP -- `RunService.submit` called N times one after
another on the event loop of a service in this process (its one slot held by a long run), each
message to a conversation of its own; reported: the process's CPU per intake (every thread: the
event loop's and the database driver's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from common import percentile
from ctxpress.app.server.app import create_app
from ctxpress.app.server.usecases.auth import Caller
from ctxpress.app.testing.live_server import LiveServer
from ctxpress.app.testing.processes import create_user
from paced_service import RATE_ENV, TOKENS_ENV, PacedTokenModel, paced_agent
from service_load import process_cpu_s, running_service, service_settings
from streaming_load import PACED_COMMAND

CONVERSATIONS = 50
LONG_RUN_TOKENS = 20_000
BASELINE_S = 2.0


@dataclass(frozen=True)
class Burst:
    name: str
    latencies_s: list[float]
    cpu_ms_per_request: float

    def row(self, backend: str) -> str:
        p50, p95 = (percentile(self.latencies_s, q) * 1e3 for q in (0.5, 0.95))
        last = max(self.latencies_s) * 1e3
        return (
            f"| {backend} | {self.name} | {len(self.latencies_s)} | {self.cpu_ms_per_request:.1f} | "
            f"{p50:.0f} / {p95:.0f} / {last:.0f} |"
        )


async def first_event(client: httpx.AsyncClient, run_id: str) -> str:
    async with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                return line.partition(":")[2].strip()
    raise RuntimeError(f"run {run_id}: the stream ended without an event")


async def timed_burst(
    pid: int, baseline_cpu_per_s: float, requests: list[Callable[[], Awaitable[object]]]
) -> tuple[list[object], list[float], float]:
    """Run the requests at once: their results, latencies and the service's CPU ms per request."""

    async def timed(request: Callable[[], Awaitable[object]]) -> tuple[object, float]:
        started = time.perf_counter()
        result = await request()
        return result, time.perf_counter() - started

    cpu_before, wall_before = process_cpu_s(pid), time.perf_counter()
    outcomes = await asyncio.gather(*(timed(request) for request in requests))
    cpu = process_cpu_s(pid) - cpu_before - baseline_cpu_per_s * (time.perf_counter() - wall_before)
    return [result for result, _ in outcomes], [latency for _, latency in outcomes], cpu * 1e3 / len(requests)


async def measure(base_url: str, pid: int, token: str) -> list[Burst]:
    headers = {"Authorization": f"Bearer {token}"}
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120)
            )
            for _ in range(CONVERSATIONS + 1)
        ]
        conversations = [
            (await client.post("/api/conversations", json={})).json()["id"] for client in clients
        ]
        # The long run takes the one slot; wait until it streams.
        long_run = (
            await clients[0].post(f"/api/conversations/{conversations[0]}/runs", json={"input": "讲"})
        ).json()
        async with clients[0].stream("GET", f"/api/runs/{long_run['run']['id']}/events") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("event: message_delta"):
                    break
        cpu_before = process_cpu_s(pid)
        await asyncio.sleep(BASELINE_S)
        baseline = (process_cpu_s(pid) - cpu_before) / BASELINE_S

        burst = list(zip(clients[1:], conversations[1:], strict=True))

        def post(client: httpx.AsyncClient, conversation: str) -> Callable[[], Awaitable[object]]:
            return lambda: client.post(f"/api/conversations/{conversation}/runs", json={"input": "你好"})

        answers, post_latencies, post_cpu = await timed_burst(pid, baseline, [post(c, v) for c, v in burst])
        run_ids: list[str] = []
        for answer in answers:
            assert isinstance(answer, httpx.Response) and answer.status_code == 202, answer
            assert answer.json()["queued"], "the premise: the one slot is taken, every message waits"
            run_ids.append(answer.json()["run"]["id"])

        def stream(client: httpx.AsyncClient, run_id: str) -> Callable[[], Awaitable[object]]:
            return lambda: first_event(client, run_id)

        firsts, get_latencies, get_cpu = await timed_burst(
            pid,
            baseline,
            [stream(client, run_id) for (client, _), run_id in zip(burst, run_ids, strict=True)],
        )
        assert set(firsts) == {"run_queued"}, set(firsts)
        return [
            Burst(f"{CONVERSATIONS} messages at once (`POST …/runs`)", post_latencies, post_cpu),
            Burst(f"{CONVERSATIONS} streams opened at once, to the first event", get_latencies, get_cpu),
        ]


def run(backend: str, scratch: Path) -> list[Burst]:
    root = scratch / backend
    env = {
        "CTXPRESS_MAX_CONCURRENT_RUNS": "1",
        "CTXPRESS_MAX_RUNS_PER_USER": "1",
        TOKENS_ENV: str(LONG_RUN_TOKENS),
        RATE_ENV: "50",
    }
    with service_settings(backend, root) as settings:
        token = create_user(settings, "bench")
        with running_service(settings, root, list(PACED_COMMAND), env) as service:
            assert service.process is not None
            return asyncio.run(measure(service.base_url, service.process.pid, token))


def one_by_one(backend: str, scratch: Path, count: int) -> float:
    """CPU ms of the process (all its threads) per `RunService.submit`, `count` of them one after another."""
    agent = paced_agent()
    assert isinstance(agent.model.model, PacedTokenModel)
    # The slot's holder, streaming all along, slowly (its own CPU is counted too).
    agent.model.model.tokens, agent.model.model.tokens_per_s = LONG_RUN_TOKENS, 5.0
    with service_settings(backend, scratch / f"{backend}-one-by-one") as settings:
        settings = settings.model_copy(update={"max_concurrent_runs": 1, "max_runs_per_user": 1})
        server = LiveServer(create_app(settings, agents=[agent])).start()
        try:
            token = server.create_user("bench")
            with server.client(token) as client:
                conversations = [
                    client.post("/api/conversations", json={}).json()["id"] for _ in range(count + 1)
                ]
                client.post(f"/api/conversations/{conversations[0]}/runs", json={"input": "讲"})
            services = server.services
            caller = Caller(token=token, address="127.0.0.1", throttle=services.auth_throttle)

            async def intakes() -> float:
                started = time.process_time()
                for conversation_id in conversations[1:]:
                    await services.runs.submit(caller, conversation_id, "你好")
                return (time.process_time() - started) * 1e3 / count

            return server.call(intakes(), timeout=600)
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--one-by-one", type=int, metavar="N", help="also time N intakes one after another")
    args = parser.parse_args(argv)
    lines = [
        "| database | burst | requests | service CPU ms per request | latency p50 / p95 / last ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    with tempfile.TemporaryDirectory(prefix="ctxpress-intake-burst-") as scratch:
        for backend in ("sqlite", "postgresql"):
            lines += [burst.row(backend) for burst in run(backend, Path(scratch))]
            if args.one_by_one:
                cpu = one_by_one(backend, Path(scratch), args.one_by_one)
                lines.append(
                    f"| {backend} | {args.one_by_one} intakes one after another, no HTTP | "
                    f"{args.one_by_one} | {cpu:.2f} | – |"
                )
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
