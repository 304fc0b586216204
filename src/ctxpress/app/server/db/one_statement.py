"""Independent writes of one transaction sent as one statement on PostgreSQL (issue 17).

Every statement costs the service a round trip: about 0.2 ms of its CPU through SQLAlchemy and
psycopg's asyncio driver, whatever the statement does (`bench/round_trips.py`). Writes that read
none of each other's results can go together: each write but the last becomes a data-modifying
``WITH`` clause of the last. PostgreSQL runs every such clause exactly once, whether or not the
rest of the statement reads it, and checks foreign keys once the whole statement is done, so one
clause's row may reference a row that another clause inserts. SQLite runs in the process (a
statement costs no round trip, and it has no data-modifying ``WITH``): there the writes go one by
one, in order.

The parts are prebuilt with bind parameters of their own (`row_insert`'s prefix), so that their
values share one parameter dictionary without colliding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Insert, bindparam
from sqlalchemy.sql.dml import UpdateBase

__all__ = ["Write", "one_statement", "row_insert", "row_parameters"]

_Statement = TypeVar("_Statement", bound=UpdateBase)
_Insert = TypeVar("_Insert", bound=Insert)


@dataclass(frozen=True)
class Write:
    """A prebuilt write and the values of its bind parameters."""

    statement: UpdateBase
    parameters: Mapping[str, Any]


def row_insert(statement: _Insert, prefix: str, columns: Iterable[str]) -> _Insert:
    """`statement` (an INSERT into one table) inserting one row of `columns`, each value the bind
    parameter `prefix` + the column's key (typed as the column, so JSON and times convert)."""
    table = statement.table
    return statement.values({key: bindparam(prefix + key, type_=table.c[key].type) for key in columns})


def row_parameters(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (column key -> value) as the parameters of a `row_insert` with `prefix`."""
    return {prefix + key: value for key, value in values.items()}


def one_statement(first: Sequence[UpdateBase], last: _Statement) -> _Statement:
    """`last`, preceded by each of `first` as a data-modifying ``WITH`` clause (PostgreSQL only).

    Each clause runs once, on the statement's snapshot: no part sees another part's rows, so the
    parts must not read what the others write (a foreign key is checked at the end, and may)."""
    return last.add_cte(*(write.cte(f"write_{index}") for index, write in enumerate(first)))
