"""Messages being accepted right now, so that runs can let them go first.

Accepting a message (S18's intake: authenticate, lock, store, answer with the stream's first event)
takes a few milliseconds of the event loop; a run's steps take it for longer. When many messages
arrive together, runs started by the first intakes would share the loop with the intakes still in
progress and delay their answers (a burst of 50 messages with 16 free slots: the last answers came
about 100 ms later than with one slot). A run therefore waits, before its first step, until no
message is being accepted -- for a bounded time, so a steady stream of messages delays a run by at
most that bound. Short work first: the total work is the same, only its order changes. For the same
reason, on SQLite an intake's transaction takes the process's writer turn before the runs' waiting
transactions (`db/sqlite_writers.writes_first`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Final

from ctxpress.app.server.db.sqlite_writers import writes_first

#: The longest a run's first step waits for intakes in progress (seconds).
RUN_START_YIELD_SECONDS: Final = 0.25


class IntakeActivity:
    """How many messages this process is accepting; owned by the service's container."""

    def __init__(self, *, run_start_yield_seconds: float = RUN_START_YIELD_SECONDS) -> None:
        #: The longest a run's first step waits for the intakes in progress.
        self.run_start_yield_seconds = run_start_yield_seconds
        self._accepting = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    @contextlib.contextmanager
    def accepting(self) -> Iterator[None]:
        """Around one message's intake (in its task)."""
        self._accepting += 1
        self._quiet.clear()
        try:
            with writes_first():
                yield
        finally:
            self._accepting -= 1
            if self._accepting == 0:
                self._quiet.set()

    async def quiet(self) -> bool:
        """Wait until no message is being accepted, at most `run_start_yield_seconds`; False when
        the bound ended the wait."""
        if self._quiet.is_set():
            return True
        try:
            async with asyncio.timeout(self.run_start_yield_seconds):
                await self._quiet.wait()
        except TimeoutError:
            return False
        return True
