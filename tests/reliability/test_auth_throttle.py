"""Failed authentications are throttled per client address (issue 19, item 8).

300 wrong tokens in 0.85 s met no slowdown. Now an address that presented `auth_failure_limit`
wrong tokens within `auth_failure_window_seconds` gets 429 with `Retry-After` -- for a right token
too, so the answers tell nothing -- until its window ends; other addresses are not affected. With
`redis_url` the counts are shared by every process (two real service processes on PostgreSQL and
the real Redis); with Redis unreachable a process counts alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from ctxpress.app.server.runtime.container import open_database
from ctxpress.app.server.settings import Settings
from ctxpress.app.server.usecases.auth import AuthService

from .processes import scripted_service

REDIS_URL = "redis://127.0.0.1:6379/0"
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def _client(base_url: str, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections come from `address` (any 127.x address reaches the server)."""
    return httpx.Client(base_url=base_url, transport=httpx.HTTPTransport(local_address=address), timeout=30)


def _me(client: httpx.Client, token: str) -> httpx.Response:
    return client.get("/api/me", headers={"Authorization": f"Bearer {token}"})


def _wrong_token() -> str:
    return "cxp_" + uuid.uuid4().hex


def test_wrong_tokens_from_one_address_are_throttled(start_server: Any) -> None:
    server = start_server(auth_failure_limit=20, auth_failure_window_seconds=10)
    token = server.create_user("alice")
    attacker, neighbour = _client(server.base_url), _client(server.base_url, "127.0.0.2")

    started = time.monotonic()
    answers = [_me(attacker, _wrong_token()) for _ in range(300)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[:20] == [401] * 20 and set(statuses[20:]) == {429}, statuses[:25]
    held = answers[-1]
    assert held.json()["error"]["code"] == "too_many_failed_authentications"
    retry_after = int(held.headers["Retry-After"])
    assert 1 <= retry_after <= 10 and held.json()["error"]["details"] == {"retry_after": retry_after}

    # Held back: the right token gets the same answer; another address is not affected.
    assert _me(attacker, token).status_code == 429
    assert _me(neighbour, token).status_code == 200
    assert _me(neighbour, _wrong_token()).status_code == 401
    # When the window ends, the address may try again.
    time.sleep(max(0.0, started + 10.3 - time.monotonic()))
    assert _me(attacker, token).status_code == 200


@SQLITE_ONLY
def test_without_redis_a_process_counts_alone(start_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    server = start_server(auth_failure_limit=5, redis_url="redis://127.0.0.1:1/0")  # nothing listens
    attacker = _client(server.base_url)
    statuses = [_me(attacker, _wrong_token()).status_code for _ in range(8)]
    assert statuses == [401] * 5 + [429] * 3
    assert "counting in this process" in caplog.text


@pytest.mark.heavy
@POSTGRES_ONLY
def test_two_processes_share_the_counts_through_redis(make_settings: Any, tmp_path: Path) -> None:
    settings: Settings = make_settings()

    async def user() -> str:
        async with open_database(settings) as database:
            return (await AuthService(database).create_user("alice")).token

    token = asyncio.run(user())
    prefix = f"ctxpress-test-{uuid.uuid4().hex[:8]}"
    environment = {
        "CTXPRESS_TEST_AGENT": "chat",
        "CTXPRESS_REDIS_URL": REDIS_URL,
        "CTXPRESS_REDIS_KEY_PREFIX": prefix,
        "CTXPRESS_AUTH_FAILURE_LIMIT": "10",
        "CTXPRESS_AUTH_FAILURE_WINDOW_SECONDS": "60",
    }
    processes = [
        scripted_service(settings, tmp_path / name, tmp_path / f"{name}.log", environment)
        for name in ("a", "b")
    ]
    redis = Redis.from_url(REDIS_URL)
    try:
        for process in processes:
            process.control.mkdir()
            process.start()
        first, second = (_client(process.base_url) for process in processes)
        assert [_me(first, _wrong_token()).status_code for _ in range(5)] == [401] * 5
        assert [_me(second, _wrong_token()).status_code for _ in range(5)] == [401] * 5
        # Ten failures in all: both processes hold the address back, for the right token too.
        assert _me(first, _wrong_token()).status_code == 429
        assert _me(second, token).status_code == 429
        assert int(redis.get(f"{prefix}:auth-failures:127.0.0.1") or 0) == 10
        assert _me(_client(processes[1].base_url, "127.0.0.3"), token).status_code == 200
    finally:
        for process in processes:
            process.stop()
        for key in redis.scan_iter(f"{prefix}:*"):
            redis.delete(key)
        redis.close()
