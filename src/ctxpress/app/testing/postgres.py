"""A scratch PostgreSQL database: created fresh, dropped on exit (tests and `bench/service_load.py`)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg

PG_HOST = os.environ.get("CTXPRESS_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CTXPRESS_TEST_PG_PORT", "5432"))
PG_ADMIN_DATABASE = os.environ.get("CTXPRESS_TEST_PG_DATABASE", "test")
PG_USERS = ("postgres", "root")


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server answers at PG_HOST:PG_PORT for any of PG_USERS (the message says why)."""


def _pg_url(user: str, database: str) -> str:
    return f"postgresql://{user}@{PG_HOST}:{PG_PORT}/{database}"


@contextlib.contextmanager
def scratch_postgres_database(prefix: str = "ctxpress_test_") -> Iterator[str]:
    """A fresh PostgreSQL database (`<prefix><random>`), dropped on exit; yields its libpq URL."""
    errors = []
    for user in PG_USERS:
        try:
            admin = psycopg.connect(_pg_url(user, PG_ADMIN_DATABASE), autocommit=True, connect_timeout=3)
        except psycopg.Error as exc:
            errors.append(
                f"{user}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            )
            continue
        name = f"{prefix}{uuid.uuid4().hex[:10]}"
        with admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                yield _pg_url(user, name)
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return
    raise PostgresUnavailableError(
        f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_ADMIN_DATABASE!r}, users {'/'.join(PG_USERS)}) "
        f"is not reachable: {'; '.join(errors)}"
    )
