"""Cancelling a task at a chosen moment (Python 3.11's `asyncio.wait_for` dropped a cancellation that
arrived in the event-loop turn its wait ended; these find such a turn)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_after(task: asyncio.Task[Any], loop_turns: int) -> bool | None:
    """Cancel `task` `loop_turns` event-loop turns from now. True when the cancellation ended it,
    False when it went on (it is then cancelled again, and awaited), None when it had already ended."""
    for _ in range(loop_turns):
        await asyncio.sleep(0)
    if task.done():
        return None
    task.cancel()
    await asyncio.wait({task}, timeout=2)
    cancelled = task.cancelled()
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return cancelled
