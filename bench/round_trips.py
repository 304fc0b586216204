"""What a PostgreSQL statement costs the service's CPU, and what writes sent as one save (issue 17).

    .venv/bin/python bench/round_trips.py

Through the service's own engine (`db.engine.Database`: SQLAlchemy's asyncio session over psycopg),
on a scratch PostgreSQL database, in one transaction per case: N iterations of `SELECT 1`, of two
and four single-row `INSERT`s sent one by one, and of the same inserts sent as one statement (every
insert but the last as a data-modifying `WITH` clause, as `db/one_statement.py` builds them). Printed
per iteration: the process's CPU and the wall time, and the ratio of one statement to the separate
ones, measured in the same run. Every case runs twice, in turn; both rounds are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from sqlalchemy import TextClause, text

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.settings import resolve_database_url
from ctxpress.app.testing.postgres import scratch_postgres_database

ROUNDS = 2
_INSERT = "INSERT INTO {table} (label, n) VALUES (:label{k}, :n{k})"


def _separate(count: int) -> list[TextClause]:
    return [text(_INSERT.format(table=f"t{k % 2}", k=k)) for k in range(count)]


def _together(count: int) -> list[TextClause]:
    clauses = [f"w{k} AS ({_INSERT.format(table=f't{k % 2}', k=k)})" for k in range(count - 1)]
    last = _INSERT.format(table=f"t{(count - 1) % 2}", k=count - 1)
    return [text(f"WITH {', '.join(clauses)} {last}")]


CASES: dict[str, list[TextClause]] = {
    "SELECT 1": [text("SELECT 1")],
    "2 INSERTs one by one": _separate(2),
    "2 INSERTs as one statement": _together(2),
    "4 INSERTs one by one": _separate(4),
    "4 INSERTs as one statement": _together(4),
}
#: Each one-statement case and the case of the same writes one by one.
ONE_BY_ONE = {
    "2 INSERTs as one statement": "2 INSERTs one by one",
    "4 INSERTs as one statement": "4 INSERTs one by one",
}


async def _time(database: Database, statements: Sequence[TextClause], iterations: int) -> tuple[float, float]:
    """CPU and wall microseconds per iteration of `statements`, in one transaction."""
    parameters = {f"{name}{k}": value for k in range(4) for name, value in (("label", "x" * 50), ("n", k))}
    cpu, wall = time.process_time(), time.perf_counter()
    async with database.session() as session:
        for _ in range(iterations):
            for statement in statements:
                await session.execute(statement, parameters)
        await session.commit()
    return (time.process_time() - cpu) / iterations * 1e6, (time.perf_counter() - wall) / iterations * 1e6


async def measure(url: str, iterations: int) -> list[str]:
    database = Database(resolve_database_url(url))
    try:
        async with database.session() as session:
            for table in ("t0", "t1"):
                await session.execute(
                    text(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, label text, n int)")
                )
            await session.commit()
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
        for _ in range(ROUNDS):
            for name, statements in CASES.items():
                rows[name].append(await _time(database, statements, iterations))
    finally:
        await database.dispose()
    lines = [
        "| statements per iteration | CPU µs per iteration (rounds) | wall µs per iteration (rounds) | CPU ÷ one by one |",
        "| --- | --- | --- | --- |",
    ]
    for name, timings in rows.items():
        separate = ONE_BY_ONE.get(name)
        ratio = (
            "–"
            if separate is None
            else f"{min(c for c, _ in timings) / min(c for c, _ in rows[separate]):.2f}×"
        )
        cpus = ", ".join(f"{c:.0f}" for c, _ in timings)
        walls = ", ".join(f"{w:.0f}" for _, w in timings)
        lines.append(f"| {name} | {cpus} | {walls} | {ratio} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args(argv)
    with scratch_postgres_database("ctxpress_round_trips_") as url:
        print("\n".join(asyncio.run(measure(url, args.iterations))))


if __name__ == "__main__":
    main()
