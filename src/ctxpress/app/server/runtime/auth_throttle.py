"""Failed authentications, counted per client address: too many and the address waits (429).

A client address that presented `max_failures` wrong tokens within `window_seconds` is answered
429 with `Retry-After` until that window ends -- for every request that presents a token, right or
wrong (a 200 among the 429s would tell which guess was right). A missing token is not counted.

The counts live in this process (a bounded map, the oldest addresses forgotten first) or, with
`redis_url`, in Redis, so every service process of a PostgreSQL deployment sees the same counts:
one key per address, incremented, expiring with its window. If Redis cannot be reached the
process counts alone (and says so in the log) until it can again.

The client address is the connection's peer; behind a reverse proxy on the same host uvicorn
takes it from `X-Forwarded-For` (its `--forwarded-allow-ips`, 127.0.0.1 by default).
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ctxpress.app.server.errors import TooManyFailedAuthenticationsError

logger = logging.getLogger(__name__)

#: Addresses remembered by the in-process counts; beyond it the oldest window is forgotten.
MAX_TRACKED_ADDRESSES: Final = 10_000


@dataclass(frozen=True)
class WindowCount:
    failures: int
    #: Seconds until the window ends (0 when there is none).
    remaining: float


class FailureCounts(Protocol):
    async def add(self, address: str) -> None: ...

    async def count(self, address: str) -> WindowCount: ...


class LocalFailureCounts:
    """Failures per address in fixed windows that start at an address's first failure."""

    def __init__(
        self,
        window_seconds: float,
        *,
        max_addresses: int = MAX_TRACKED_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_seconds = window_seconds
        self.max_addresses = max_addresses
        self._clock = clock
        #: address -> (window end, failures); ordered by window start.
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()

    async def add(self, address: str) -> None:
        now = self._clock()
        ends, failures = self._windows.get(address, (0.0, 0))
        if ends <= now:
            self._windows.pop(address, None)
            ends, failures = now + self.window_seconds, 0
        self._windows[address] = (ends, failures + 1)
        while len(self._windows) > self.max_addresses:
            self._windows.popitem(last=False)

    async def count(self, address: str) -> WindowCount:
        ends, failures = self._windows.get(address, (0.0, 0))
        remaining = ends - self._clock()
        return WindowCount(failures, remaining) if remaining > 0 else WindowCount(0, 0.0)


class RedisFailureCounts:
    """The same counts in Redis, shared by every process using `prefix`."""

    def __init__(self, client: Redis, window_seconds: float, *, prefix: str) -> None:
        self.client = client
        self.window_ms = max(1, int(window_seconds * 1000))
        self.prefix = prefix

    def _key(self, address: str) -> str:
        return f"{self.prefix}:auth-failures:{address}"

    async def add(self, address: str) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.incr(self._key(address))
            pipe.pexpire(self._key(address), self.window_ms, nx=True)  # the window starts once
            await pipe.execute()

    async def count(self, address: str) -> WindowCount:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.get(self._key(address))
            pipe.pttl(self._key(address))
            failures, ttl_ms = await pipe.execute()
        if failures is None or ttl_ms is None or ttl_ms <= 0:
            return WindowCount(0, 0.0)
        return WindowCount(int(failures), ttl_ms / 1000)


class AuthThrottle:
    def __init__(
        self, counts: FailureCounts, *, max_failures: int, fallback: LocalFailureCounts | None = None
    ) -> None:
        self.counts = counts
        self.max_failures = max_failures
        #: Used while the shared counts (Redis) cannot be reached.
        self.fallback = fallback
        self._shared_down = False

    async def check(self, address: str) -> None:
        """`TooManyFailedAuthenticationsError` (429, `Retry-After`) while `address` is held back."""
        window = await self._count(address)
        if window.failures >= self.max_failures:
            retry_after = max(1, math.ceil(window.remaining))
            raise TooManyFailedAuthenticationsError(
                f"too many failed authentications from this address; try again in {retry_after} s",
                retry_after=retry_after,
            )

    async def record_failure(self, address: str) -> None:
        try:
            await self.counts.add(address)
            self._shared_up()
        except (RedisError, OSError) as exc:
            self._shared_failed(exc)
            if self.fallback is not None:
                await self.fallback.add(address)

    async def _count(self, address: str) -> WindowCount:
        try:
            window = await self.counts.count(address)
            self._shared_up()
            return window
        except (RedisError, OSError) as exc:
            self._shared_failed(exc)
            return await self.fallback.count(address) if self.fallback else WindowCount(0, 0.0)

    def _shared_failed(self, exc: BaseException) -> None:
        if not self._shared_down:
            logger.warning(
                "the shared failed-authentication counts are unreachable (%s); counting in this process",
                type(exc).__name__,
            )
        self._shared_down = True

    def _shared_up(self) -> None:
        if self._shared_down:
            logger.warning("the shared failed-authentication counts are reachable again")
        self._shared_down = False


def auth_throttle(
    *, max_failures: int, window_seconds: float, redis: Redis | None, redis_prefix: str
) -> AuthThrottle:
    """The throttle of one service process: shared through `redis` when given, else local."""
    local = LocalFailureCounts(window_seconds)
    if redis is None:
        return AuthThrottle(local, max_failures=max_failures)
    shared = RedisFailureCounts(redis, window_seconds, prefix=redis_prefix)
    return AuthThrottle(shared, max_failures=max_failures, fallback=local)
