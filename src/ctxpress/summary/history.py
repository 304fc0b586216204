"""S14, S27, S28: the summarised range is saved to `outputs/conversation_history/` before summarising.

One new immutable file per summary, written atomically, named after the thread and the global
message range. The file is JSON Lines: a header line, then one line per message in LangChain's
`messages_to_dict` form (lossless, and `messages_from_dict` reads it back). Messages are stored as
they appear in the L1 view: a large tool result appears as its preview plus the path of the
`large_tool_results` file holding it in full, so history plus those files recover every byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict

from ctxpress.workdir import Workdir, decode_text, encode_text

HISTORY_DIR = "outputs/conversation_history"
HISTORY_FORMAT = "ctxpress-history/1"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class HistoryRange:
    thread_id: str | None
    start: int  # global index of the first summarised message
    end: int  # global index after the last summarised message (the new cutoff)
    previous_file: str | None = None
    #: Every earlier history file and summarised offload file of the thread (summary/carried.py).
    earlier_files: tuple[str, ...] = ()


def _safe_thread(thread_id: str | None) -> str:
    return (_UNSAFE.sub("_", thread_id or "").strip("._") or "thread")[:64]


def history_path(span: HistoryRange, message_lines: bytes) -> str:
    """Thread, range and a hash of the messages: the same history always gets the same name."""
    digest = hashlib.sha256(message_lines).hexdigest()[:12]
    return f"{HISTORY_DIR}/{_safe_thread(span.thread_id)}-{span.start:06d}-{span.end:06d}-{digest}.jsonl"


def _message_lines(messages: Sequence[BaseMessage]) -> bytes:
    return encode_text(
        "".join(
            json.dumps(item, ensure_ascii=False, default=str) + "\n" for item in messages_to_dict(messages)
        )
    )


def _header_line(span: HistoryRange, count: int) -> bytes:
    header = {
        "format": HISTORY_FORMAT,
        "thread_id": span.thread_id,
        "range": [span.start, span.end],
        "message_count": count,
        "previous_history_file": span.previous_file,
        "earlier_files": list(span.earlier_files),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return encode_text(json.dumps(header, ensure_ascii=False) + "\n")


def write_history(workdir: Workdir, span: HistoryRange, messages: Sequence[BaseMessage]) -> str:
    """Write the file and return its workdir path; raises WorkdirError / OSError on failure."""
    lines = _message_lines(messages)
    path = history_path(span, lines)
    workdir.write_bytes(path, _header_line(span, len(messages)) + lines)
    return path


def read_history(workdir: Workdir, path: str) -> tuple[dict[str, object], list[BaseMessage]]:
    """The header and messages of a history file (for recovery, tests and `ctxpress doctor`)."""
    lines = decode_text(workdir.read_bytes(path)).splitlines()
    header = json.loads(lines[0])
    return header, messages_from_dict([json.loads(line) for line in lines[1:] if line])
