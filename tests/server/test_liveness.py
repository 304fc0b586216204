"""A pooled PostgreSQL connection is pinged at checkout only when it may have died (issue 17).

The rule (`db/liveness.py`): a quiet socket of a connection idle for less than `idle_ping_seconds`
needs no round trip; a socket with input (the server's FATAL message, or its end) or a long idle
does. On a real server: a healthy idle connection is quiet, a terminated one is not.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from ctxpress.app.server.db.liveness import CheckoutLiveness, socket_has_input

pytestmark = pytest.mark.postgres


def _wait_until_gone(admin: psycopg.Connection, pid: int) -> None:
    deadline = time.monotonic() + 10
    while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() != (0,):
        assert time.monotonic() < deadline, "the terminated backend did not exit"
        time.sleep(0.01)


def test_a_healthy_idle_connection_is_not_pinged_and_a_terminated_one_is(postgres_database: str) -> None:
    liveness = CheckoutLiveness(idle_ping_seconds=60)
    with (
        psycopg.connect(postgres_database, autocommit=True) as admin,
        psycopg.connect(postgres_database, autocommit=True) as pooled,
    ):
        pooled.execute("SELECT 1")
        returned_at = time.monotonic()
        assert not socket_has_input(pooled.fileno())
        assert not liveness.needs_ping(pooled.fileno(), returned_at)

        pid = pooled.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _wait_until_gone(admin, pid)
        assert socket_has_input(pooled.fileno())
        assert liveness.needs_ping(pooled.fileno(), returned_at)


def test_a_long_idle_connection_is_pinged_and_a_new_one_is_not(postgres_database: str) -> None:
    liveness = CheckoutLiveness(idle_ping_seconds=0.05)
    with psycopg.connect(postgres_database, autocommit=True) as pooled:
        assert not liveness.needs_ping(pooled.fileno(), None)  # just connected
        returned_at = time.monotonic()
        time.sleep(0.06)
        assert liveness.needs_ping(pooled.fileno(), returned_at)
