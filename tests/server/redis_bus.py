"""The real Redis of the tests (127.0.0.1:6379): a key prefix per test, its keys deleted afterwards.

Redis missing: the test is skipped with the reason — or fails under CI=true.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest
from redis import Redis
from redis.exceptions import RedisError

REDIS_URL = "redis://127.0.0.1:6379/0"
IN_CI = os.environ.get("CI", "").lower() == "true"


@contextlib.contextmanager
def redis_prefix() -> Iterator[str]:
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except RedisError as exc:
        client.close()
        message = f"Redis at {REDIS_URL} is not reachable: {exc}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    prefix = f"ctxpress-test-{uuid.uuid4().hex[:12]}"
    try:
        yield prefix
    finally:
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()
