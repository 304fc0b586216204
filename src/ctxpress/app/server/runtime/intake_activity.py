"""Messages being accepted and requests being answered right now, so that runs can let them go first.

Accepting a message (S18's intake: authenticate, lock, store, answer with the stream's first event)
takes a few milliseconds of the event loop; a run's steps take it for longer. When many messages
arrive together, runs started by the first intakes would share the loop with the intakes still in
progress and delay their answers (a burst of 50 messages with 16 free slots: the last answers came
about 100 ms later than with one slot). A run therefore waits, before its first step, until no
message is being accepted -- for a bounded time, so a steady stream of messages delays a run by at
most that bound. Short work first: the total work is the same, only its order changes. For the same
reason, on SQLite an intake's transaction takes the process's writer turn before the runs' waiting
transactions (`db/sqlite_writers.writes_first`).

Every HTTP request counts until its response starts (`request_in_progress`, from `app.py`), the
streams above all: a client opens its run's stream right after `POST …/runs` answers. Counting only the
intakes was not enough once they got cheap: with SQLite's statements run in place
(`db/sqlite_connection.py`) an intake is often over before the next request is read, the runs
started in those gaps, and a hundred of them took the loop from the streams their clients were
opening (`bench/streaming_load.py` on SQLite: streams opened about 1.2 s after their `POST`
instead of 0.6 s, the delivery lag p95 went from 71-234 ms to about 1 s). A burst -- requests
that overlap or follow each other within `settle_seconds` -- is over once no request has been
waiting for `settle_seconds`; a request on its own makes nobody wait once it has its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Final

from ctxpress.app.server.db.sqlite_writers import writes_first

#: The longest a run's first step waits for intakes in progress (seconds).
RUN_START_YIELD_SECONDS: Final = 0.25
#: How long no request must have been waiting before a burst counts as over (seconds): above the
#: gap between two requests of a burst (each a few milliseconds), far below a turn.
SETTLE_SECONDS: Final = 0.02


#: Whether the current task is an HTTP request counted by `request_in_progress` (its intake, if it
#: makes one, is then the same activity, not a second one).
_IN_A_REQUEST: Final[ContextVar[bool]] = ContextVar("ctxpress_in_a_request", default=False)


class IntakeActivity:
    """The messages this process is accepting and the requests waiting for their answer; owned by
    the service's container."""

    def __init__(
        self,
        *,
        run_start_yield_seconds: float = RUN_START_YIELD_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        #: The longest a run's first step waits for the intakes and requests in progress.
        self.run_start_yield_seconds = run_start_yield_seconds
        #: How long after the last request got its answer a burst counts as over.
        self.settle_seconds = settle_seconds
        self._accepting = 0
        #: `time.monotonic()` when the last intake or request ended.
        self._last_ended = -math.inf
        #: Whether the requests since the last settled moment came as a burst.
        self._in_burst = False
        #: `time.monotonic()` from which the current burst counts as over.
        self._settled_at = -math.inf
        self._quiet = asyncio.Event()
        self._quiet.set()

    @contextlib.contextmanager
    def accepting(self) -> Iterator[None]:
        """Around one message's intake (in its task; inside a counted request it is that request)."""
        counted = _IN_A_REQUEST.get()
        if not counted:
            self.begin()
        try:
            with writes_first():
                yield
        finally:
            if not counted:
                self.end()

    @contextlib.contextmanager
    def request_in_progress(self) -> Iterator[Callable[[], None]]:
        """Around one HTTP request (in its task): it counts until the `answered` callback this
        yields is called (its response starts), or at the latest until the block ends."""
        self.begin()
        token = _IN_A_REQUEST.set(True)
        counted = True

        def answered() -> None:
            nonlocal counted
            if counted:
                counted = False
                self.end()

        try:
            yield answered
        finally:
            _IN_A_REQUEST.reset(token)
            answered()

    def begin(self) -> None:
        """A request (or an intake) begins: until `end`, runs about to start wait."""
        now = time.monotonic()
        if self._accepting or now - self._last_ended < self.settle_seconds:
            self._in_burst = True  # it overlaps another request, or closely follows one
        elif now >= self._settled_at:
            self._in_burst = False  # what came before has settled: this one is on its own
        self._accepting += 1
        self._quiet.clear()

    def end(self) -> None:
        """The request begun with `begin` has its answer (its response started)."""
        self._accepting -= 1
        self._last_ended = time.monotonic()
        if self._in_burst:
            self._settled_at = self._last_ended + self.settle_seconds
        if self._accepting == 0:
            self._quiet.set()

    def _unsettled_for(self) -> float:
        """Seconds until the current burst counts as over (0: no burst, or it is over)."""
        return max(0.0, self._settled_at - time.monotonic())

    async def quiet(self) -> bool:
        """Wait until no request or intake is in progress and, after a burst, none has been for
        `settle_seconds`; at most `run_start_yield_seconds`. False when the bound ended the wait."""
        if self._quiet.is_set() and not self._unsettled_for():
            return True
        try:
            async with asyncio.timeout(self.run_start_yield_seconds):
                while True:
                    await self._quiet.wait()
                    pause = self._unsettled_for()
                    if not pause:
                        return True
                    await asyncio.sleep(pause)
        except TimeoutError:
            return False
