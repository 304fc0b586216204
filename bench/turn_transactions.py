"""SQL transactions of one turn at a time, by how the client reads its run (issue 17).

    .venv/bin/python bench/turn_transactions.py          # 10 turns each way
    .venv/bin/python bench/turn_transactions.py --turns 30

A `ctxpress serve` process (its default agent and the built-in offline model) on a fresh PostgreSQL
database, without Redis. One conversation sends its turns one after another -- no queue, every run
starts at its intake -- read two ways: `POST …/runs/stream` (the message and its run's stream in one
response, as the page sends) and `POST …/runs` then `GET /api/runs/{id}/events`. PostgreSQL counts
every transaction of the database (`pg_stat_database`: commits and rollbacks, read-only ones
included); the figure is that count over the turns, less this script's own reads of it. The
service's background work (a lease check at most once per `poll_seconds`) falls into the count too.
`bench/service_load.py` counts the same under load, where most runs wait in the queue.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from ctxpress.app.testing.processes import SERVE_COMMAND, create_user
from service_load import LOAD_TEXTS, service_settings, transaction_count
from streaming_load import services

Turn = Callable[[httpx.AsyncClient, str, str], Awaitable[None]]


async def one_request(client: httpx.AsyncClient, conversation_id: str, text: str) -> None:
    path = f"/api/conversations/{conversation_id}/runs/stream"
    async with client.stream("POST", path, json={"input": text}) as response:
        response.raise_for_status()
        async for _line in response.aiter_lines():
            pass


async def post_then_read(client: httpx.AsyncClient, conversation_id: str, text: str) -> None:
    response = await client.post(f"/api/conversations/{conversation_id}/runs", json={"input": text})
    response.raise_for_status()
    run_id = response.json()["run"]["id"]
    async with client.stream("GET", f"/api/runs/{run_id}/events") as stream:
        stream.raise_for_status()
        async for _line in stream.aiter_lines():
            pass


WAYS: dict[str, Turn] = {
    "`POST …/runs/stream` (one request)": one_request,
    "`POST …/runs`, then `GET …/events`": post_then_read,
}


async def count_turns(base_url: str, token: str, database_url: str | None, turn: Turn, turns: int) -> float:
    """Transactions per turn of `turns` turns read by `turn`, after a warm-up turn."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60.0) as client:
        conversation_id = (await client.post("/api/conversations", json={})).json()["id"]
        await turn(client, conversation_id, "预热")  # the process's first run: not counted
        before = transaction_count(database_url) or 0
        for index in range(turns):
            await turn(client, conversation_id, LOAD_TEXTS[index % len(LOAD_TEXTS)])
        after = transaction_count(database_url) or 0
    return (after - before - 1) / turns  # less the first count's own transaction


def transactions_per_turn(turns: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ctxpress-turn-transactions-") as scratch:
        for number, (name, turn) in enumerate(WAYS.items()):
            root = Path(scratch) / f"way-{number}"
            with contextlib.ExitStack() as stack:
                settings = stack.enter_context(service_settings("postgresql", root))
                token = create_user(settings, "bench")
                (process,) = stack.enter_context(services(settings, root, SERVE_COMMAND, 1, {}))
                results[name] = asyncio.run(
                    count_turns(process.base_url, token, settings.database_url, turn, turns)
                )
            print(f"  {name}: {results[name]:.2f} transactions per turn", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10, help="turns each way (default 10)")
    args = parser.parse_args()
    results = transactions_per_turn(args.turns)
    print(f"\n{args.turns} turns one after another, PostgreSQL without Redis:\n")
    print("| the client reads its run by | SQL transactions per turn |")
    print("| --- | --- |")
    for name, per_turn in results.items():
        print(f"| {name} | {per_turn:.2f} |")


if __name__ == "__main__":
    main()
