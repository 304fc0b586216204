"""The statements a service's engine commits, grouped by transaction (a test's listener)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine


class CommittedTransactions:
    def __init__(self) -> None:
        self._open: dict[int, list[str]] = {}
        #: Each committed transaction's statements, whitespace collapsed, in the order they ran.
        self.committed: list[list[str]] = []

    def _statement(self, connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        self._open.setdefault(id(connection), []).append(" ".join(statement.split()))

    def _commit(self, connection: Any) -> None:
        self.committed.append(self._open.pop(id(connection), []))

    def with_statement(self, prefix: str) -> list[list[str]]:
        """The committed transactions that ran a statement starting with `prefix`."""
        return [statements for statements in self.committed if any(s.startswith(prefix) for s in statements)]

    def with_write(self, write: str) -> list[list[str]]:
        """The committed transactions that ran `write` (say "INSERT INTO runs"), alone or as one
        of the data-modifying WITH clauses of a statement (PostgreSQL's one-statement writes)."""
        return [statements for statements in self.committed if any(write in s for s in statements)]


@contextmanager
def watch_transactions(engine: Engine) -> Iterator[CommittedTransactions]:
    seen = CommittedTransactions()
    event.listen(engine, "before_cursor_execute", seen._statement)
    event.listen(engine, "commit", seen._commit)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", seen._statement)
        event.remove(engine, "commit", seen._commit)
