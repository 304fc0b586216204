"""S14, S27, S28: the summarised range is saved to `outputs/conversation_history/` before summarising.

One new immutable file per summary, written atomically, named after the thread and the global
message range. The file is JSON Lines: a header line, then one line per message in LangChain's
`messages_to_dict` form (lossless, and `messages_from_dict` reads it back). Messages are stored as
they appear in the L1 view: a large tool result appears as its preview plus the path of the
`large_tool_results` file holding it in full, so history plus those files recover every byte.

Beside them, one *conversation file* per thread (same format): every message of the state before
the latest cutoff, as the state holds it (tool results and arguments whole). Each summary writes
it again atomically, extending the previous version with its new span (S1: nothing is ever deleted
from the state), so the summary message can name one path that holds every compressed message in
a single read, however many summaries came before (issue 21). It is a convenience copy: the event
names the immutable history file, and a failed write of the conversation file only makes the
summary list the earlier files instead.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict

from ctxpress.workdir import Workdir, WorkdirError, decode_text, encode_text

HISTORY_DIR = "outputs/conversation_history"
HISTORY_FORMAT = "ctxpress-history/1"
CONVERSATION_FORMAT = "ctxpress-conversation/1"
#: How a conversation file's name ends (a history file's ends in its range and hash).
CONVERSATION_SUFFIX = "-conversation.jsonl"
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
    # JSON Lines end each record with "\n" only; `splitlines` would also split inside a text holding
    # U+2028, U+0085 or \x1c, which `json.dumps(ensure_ascii=False)` leaves unescaped.
    lines = decode_text(workdir.read_bytes(path)).split("\n")
    header = json.loads(lines[0])
    return header, messages_from_dict([json.loads(line) for line in lines[1:] if line])


def conversation_path(thread_id: str | None, messages: Sequence[BaseMessage]) -> str:
    """The thread's conversation file. Named after the thread and its first message too: a
    sub-agent runs under its parent's thread id with a state of its own, and gets a file of its own."""
    first = messages[0] if messages else None
    lineage = (first.id or json.dumps(first.content, ensure_ascii=False, default=str)) if first else ""
    digest = hashlib.sha256(encode_text(lineage)).hexdigest()[:8]
    return f"{HISTORY_DIR}/{_safe_thread(thread_id)}-{digest}{CONVERSATION_SUFFIX}"


def in_history_dir(path: str) -> bool:
    """A history file or the conversation file (not an offloaded result)."""
    return path.startswith(f"{HISTORY_DIR}/")


def is_conversation_file(path: str) -> bool:
    return in_history_dir(path) and path.endswith(CONVERSATION_SUFFIX)


def write_conversation(
    workdir: Workdir, thread_id: str | None, messages: Sequence[BaseMessage], history_files: Sequence[str]
) -> str:
    """Write the conversation file (`messages`: the state before the cutoff) and return its path;
    raises WorkdirError / OSError on failure.

    The previous version's message lines are reused when they hold a prefix of `messages` (the
    count fits and the last line is the same message, byte for byte), so a summary serialises only
    its new span; otherwise the file is written again from `messages`. A message replaced in the
    state under the same id before that last line (an overflow trim, S6) keeps its earlier, whole
    text in the file."""
    path = conversation_path(thread_id, messages)
    reused, count = _written_prefix(workdir, path, messages)
    header = {
        "format": CONVERSATION_FORMAT,
        "thread_id": thread_id,
        "range": [0, len(messages)],
        "message_count": len(messages),
        "history_files": list(history_files),
        "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    lines = reused + _message_lines(messages[count:])
    workdir.write_bytes(path, encode_text(json.dumps(header, ensure_ascii=False) + "\n") + lines)
    return path


def _written_prefix(workdir: Workdir, path: str, messages: Sequence[BaseMessage]) -> tuple[bytes, int]:
    """The message lines of the conversation file at `path` and their count, when they hold a
    prefix of `messages`; else (b"", 0)."""
    try:
        header_line, _, body = workdir.read_bytes(path).partition(b"\n")
        header = json.loads(header_line)
    except (OSError, WorkdirError, ValueError):
        return b"", 0
    count = header.get("message_count") if isinstance(header, dict) else None
    if not isinstance(count, int) or not 0 < count <= len(messages) or body.count(b"\n") != count:
        return b"", 0
    last_line = body[:-1].rpartition(b"\n")[2] + b"\n"
    if last_line != _message_lines(messages[count - 1 : count]):
        return b"", 0
    return body, count
