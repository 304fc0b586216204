"""S8, S11, S13: a large tool result is written in full to the workdir; the view keeps a preview.

The file name is the sanitised tool name plus a sha256 prefix of the content, so the same content
always lands at the same path and is written once. If the write fails the message stays as it was
and the failure is recorded: the view never claims "saved" without a file.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage

from ctxpress.compaction.content import content_text, with_text
from ctxpress.compaction.markers import OFFLOAD_MARKER, is_offloaded_text
from ctxpress.compaction.result import CompactionFailure, OffloadedResult
from ctxpress.compaction.retrieval_preview import is_retrieval_tool, retrieval_preview
from ctxpress.compaction.text_preview import head_middle_tail_preview
from ctxpress.tokens import estimate_tokens
from ctxpress.workdir import Workdir, WorkdirError, encode_text

LARGE_RESULTS_DIR = "outputs/large_tool_results"
HASH_PREFIX_HEX = 16
MAX_TOOL_NAME_CHARS = 64
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def sanitize_tool_name(tool_name: str) -> str:
    """A file-name-safe form of an untrusted tool name (ASCII letters, digits, `_`, `.`, `-`)."""
    folded = unicodedata.normalize("NFKC", tool_name or "")
    safe = _UNSAFE_NAME_CHARS.sub("_", folded).strip("._")[:MAX_TOOL_NAME_CHARS]
    return safe or "tool"


def offload_path(tool_name: str, sha256_hex: str) -> str:
    return f"{LARGE_RESULTS_DIR}/{sanitize_tool_name(tool_name)}-{sha256_hex[:HASH_PREFIX_HEX]}.txt"


def offloaded_view_text(
    tool_name: str, path: str, sha256_hex: str, chars: int, tokens: int, preview: str
) -> str:
    header = (
        f"{OFFLOAD_MARKER} The full result of `{tool_name}` ({chars:,} characters, ~{tokens:,} tokens) "
        f"is saved in the workdir at {path} (sha256 {sha256_hex}). Read that file for the complete "
        "content."
    )
    return f"{header}\nPreview:\n{preview}" if preview else header


_REFERENCE = re.compile(r"is saved in the workdir at (\S+) \(sha256 ([0-9a-f]{64})\)")


def parse_offload_reference(text: str) -> tuple[str, str] | None:
    """(path, sha256) of an offload view's file, or None when `text` is not an offload view."""
    if not is_offloaded_text(text):
        return None
    match = _REFERENCE.search(text, 0, 1000)
    return (match.group(1), match.group(2)) if match else None


@dataclass(frozen=True)
class _Offload:
    """A remembered decision for one piece of content: the replacement text and its file."""

    text: str
    path: str
    sha256: str
    chars: int
    tokens: int


_UNCHANGED = None


class CompactionCache:
    """Remembers per-content L1 decisions so a repeated pass over the same history does no I/O.

    Keyed on the content string itself (its hash is cached on the object, and equality
    short-circuits on identity), the tool name, the limit, the profile and the workdir. Bounded
    both in entries and in the characters of content it keeps alive.
    """

    def __init__(self, max_entries: int = 4096, max_chars: int = 64_000_000) -> None:
        self._entries: OrderedDict[tuple[Any, ...], _Offload | None] = OrderedDict()
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> tuple[bool, _Offload | None]:
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def put(self, key: tuple[Any, ...], value: _Offload | None) -> None:
        text_chars = len(key[2])
        if text_chars > self._max_chars:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = value
            self._chars += text_chars
            while len(self._entries) > self._max_entries or self._chars > self._max_chars:
                old_key, _ = self._entries.popitem(last=False)
                self._chars -= len(old_key[2])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)


def _workdir_key(workdir: Workdir) -> Any:
    # A backend names itself stably with `cache_key`; otherwise the object itself is the key
    # (holding it keeps its id from being reused by another workdir).
    return getattr(workdir, "cache_key", None) or workdir


def build_preview(tool_name: str, text: str, budget: int, profile: str, total_tokens: int) -> str:
    """S9 for retrieval tools (falling back to S10 on unexpected JSON), S10 for everything else."""
    if is_retrieval_tool(tool_name):
        structured = retrieval_preview(text, budget, profile)
        if structured is not None:
            return structured
    return head_middle_tail_preview(text, budget, profile, total_tokens)


def _decide(tool_name: str, text: str, limit: int, profile: str) -> tuple[_Offload | None, bytes]:
    tokens = estimate_tokens(text, profile)
    if tokens <= limit or is_offloaded_text(text):
        return _UNCHANGED, b""
    data = encode_text(text)
    digest = hashlib.sha256(data).hexdigest()
    path = offload_path(tool_name, digest)
    preview = build_preview(tool_name, text, limit, profile, tokens)
    view_text = offloaded_view_text(tool_name, path, digest, len(text), tokens, preview)
    return _Offload(view_text, path, digest, len(text), tokens), data


def compact_tool_message(
    message: ToolMessage,
    tool_name: str,
    *,
    limit: int,
    profile: str,
    workdir: Workdir,
    cache: CompactionCache,
) -> tuple[ToolMessage, OffloadedResult | None, CompactionFailure | None]:
    """Offload one tool result if it is over the limit; the original message on failure (S13)."""
    text = content_text(message.content)
    key = (_workdir_key(workdir), tool_name, text, limit, profile)
    known, decision = cache.get(key)
    written_now = False
    if not known:
        decision, data = _decide(tool_name, text, limit, profile)
        if decision is not None:
            try:
                if not workdir.exists(decision.path):
                    workdir.write_bytes(decision.path, data)
                    written_now = True
            except (WorkdirError, OSError) as exc:
                failure = CompactionFailure(message.id, message.tool_call_id, tool_name, str(exc))
                return message, None, failure
        cache.put(key, decision)
    if decision is None:
        return message, None, None
    record = OffloadedResult(
        message_id=message.id,
        tool_call_id=message.tool_call_id,
        tool_name=tool_name,
        path=decision.path,
        sha256=decision.sha256,
        chars=decision.chars,
        approx_tokens=decision.tokens,
        written_now=written_now,
    )
    new_message = message.model_copy(update={"content": with_text(message.content, decision.text)})
    return new_message, record, None
