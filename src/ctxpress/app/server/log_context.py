"""Log lines carry the run and conversation they are about.

The executor marks its task with `run_logging_context(run_id, conversation_id)`; everything logged
from that task (and the tasks it starts: the graph's nodes, tools, the summary call) ends with
`[run=<id> conversation=<id>]`. `RunContextFilter` sits on the same handlers as the redaction filter.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

from ctxpress.app.server.log_redaction import LOGGERS

_current_run: ContextVar[tuple[str, str] | None] = ContextVar("ctxpress_current_run", default=None)


@contextlib.contextmanager
def run_logging_context(run_id: str, conversation_id: str) -> Iterator[None]:
    token = _current_run.set((run_id, conversation_id))
    try:
        yield
    finally:
        _current_run.reset(token)


class RunContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        current = _current_run.get()
        if current is None or getattr(record, "run_id", None):
            return True
        record.run_id, record.conversation_id = current
        with contextlib.suppress(Exception):  # a broken record is the formatter's to report
            record.msg = f"{record.getMessage()} [run={current[0]} conversation={current[1]}]"
            record.args = ()
        return True


def install_run_context() -> None:
    """Put one `RunContextFilter` on every handler of the root and uvicorn loggers (idempotent)."""
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(existing, RunContextFilter) for existing in handler.filters):
                handler.addFilter(RunContextFilter())
