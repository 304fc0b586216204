"""The service's vocabulary in one answer (`GET /api/vocabulary`), for the page and any other client.

Every name and value here is defined elsewhere, once — the library's stream events (`ctxpress.events`),
the run's SSE event types (`services/events.py`), error codes (`errors.py`), run statuses and usage
categories (`db/models.py`), the summary marker and key (`ctxpress.summary.event`,
`ctxpress.middleware`) — and only gathered here, so a client reads them instead of copying them.
Named values are `{NAME: value}` maps (a client refers to them by name); open sets of values a
client only looks up (e.g. to find words for them) are lists.
"""

from __future__ import annotations

from typing import get_args

from ctxpress import events as stream_events
from ctxpress.app.server.agents_file import CONTEXT_COMPRESSION
from ctxpress.app.server.db import models
from ctxpress.app.server.errors import ErrorCode
from ctxpress.app.server.rendering import MAX_RENDER_CHARS
from ctxpress.app.server.repositories.runs import BUSY_COMPRESSING, BusyReason
from ctxpress.app.server.runtime import events as sse_events
from ctxpress.app.server.runtime.partial_reply import STOPPED_KEY
from ctxpress.app.server.schemas import VocabularyOut
from ctxpress.app.server.usecases.compression import FAILURE_STATUS
from ctxpress.app.server.usecases.compression_history import AUTOMATIC, MANUAL
from ctxpress.app.server.usecases.runs import USER_RUN_LIMIT, WORKERS_BUSY
from ctxpress.compaction.offload import LARGE_RESULTS_DIR
from ctxpress.manual import NOTHING_TO_COMPRESS
from ctxpress.middleware import EVENT_KEY
from ctxpress.pressure import SUGGEST_COMPRESS_RATIO
from ctxpress.summary.event import SUMMARY_MARKER
from ctxpress.summary.history import HISTORY_DIR


def vocabulary() -> VocabularyOut:
    busy_reasons = [str(reason) for reason in get_args(BusyReason)]
    return VocabularyOut(
        events={
            "RUN_QUEUED": sse_events.RUN_QUEUED_EVENT,
            "RUN_STARTED": sse_events.RUN_STARTED,
            "MESSAGE_DELTA": sse_events.MESSAGE_DELTA,
            "MESSAGE": sse_events.MESSAGE,
            "TOOL_CALL": sse_events.TOOL_CALL,
            "TOOL_RESULT": sse_events.TOOL_RESULT,
            "CONTEXT_COMPRESSION": stream_events.CONTEXT_COMPRESSION,
            "CONTEXT_PRESSURE": stream_events.CONTEXT_PRESSURE,
            "USAGE": sse_events.USAGE,
            "INTERRUPT": sse_events.INTERRUPT,
            "RUN_FINISHED": sse_events.RUN_FINISHED,
            "ERROR": sse_events.ERROR,
            "CUSTOM": sse_events.CUSTOM,
        },
        statuses={
            "STARTED": stream_events.STARTED,
            "COMPLETED": stream_events.COMPLETED,
            "FAILED": stream_events.FAILED,
        },
        levels={"L1": stream_events.L1, "L2": stream_events.L2},
        reasons={"CONTEXT_OVERFLOW": stream_events.CONTEXT_OVERFLOW},
        run_statuses={
            "QUEUED": models.RUN_QUEUED,
            "RUNNING": models.RUN_RUNNING,
            "WAITING_INPUT": models.RUN_WAITING_INPUT,
            "SUCCEEDED": models.RUN_SUCCEEDED,
            "FAILED": models.RUN_FAILED,
            "CANCELLED": models.RUN_CANCELLED,
        },
        error_codes={code.name: code.value for code in ErrorCode},
        capabilities={"CONTEXT_COMPRESSION": CONTEXT_COMPRESSION},
        usage_categories={"MAIN": models.USAGE_MAIN, "SUMMARY": models.USAGE_SUMMARY},
        workdir_dirs={"LARGE_TOOL_RESULTS": LARGE_RESULTS_DIR, "CONVERSATION_HISTORY": HISTORY_DIR},
        busy_reasons=busy_reasons,
        busy_reason_names={reason.upper(): reason for reason in busy_reasons},
        # A run is never queued behind a compression: intake refuses it instead.
        queued_reasons=[*(r for r in busy_reasons if r != BUSY_COMPRESSING), WORKERS_BUSY, USER_RUN_LIMIT],
        failed_parts=[str(part) for part in FAILURE_STATUS],
        summary_marker=SUMMARY_MARKER,
        summary_event_key=EVENT_KEY,
        suggest_ratio=SUGGEST_COMPRESS_RATIO,
        max_render_chars=MAX_RENDER_CHARS,
        compression_triggers={"AUTOMATIC": AUTOMATIC, "MANUAL": MANUAL},
        compress_reasons=list(NOTHING_TO_COMPRESS),
        stopped_key=STOPPED_KEY,
    )
