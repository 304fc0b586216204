"""The text formats that mark compacted content, and recognising them exactly (S2, S7, S8).

Compacted content must be recognised so it is never compacted twice, and offload views must be
parsed to find their files (summary digests, recovery). Recognition matches the whole fixed
header, never a mere prefix, so a tool output that happens to start with a marker is not mistaken
for one; every name placed in a header is sanitised, so a tool name cannot forge a reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OFFLOAD_MARKER = "[ctxpress:offloaded]"
ARGUMENT_MARKER = "[ctxpress:argument-omitted]"
ARGUMENT_OFFLOAD_MARKER = "[ctxpress:argument-offloaded]"
SAFE_NAME = r"[A-Za-z0-9_.-]{1,64}"

_OFFLOAD_HEADER = re.compile(
    re.escape(OFFLOAD_MARKER)
    + rf" The full result of `({SAFE_NAME})` \(([\d,]+) characters, ~([\d,]+) tokens\) is saved in the"
    + r" workdir at (outputs/large_tool_results/[A-Za-z0-9_.-]{1,100}\.txt) \(sha256 ([0-9a-f]{64})\)\."
    + " Read that file for the complete content."
)
_ARGUMENT_HINT = re.compile(
    re.escape(ARGUMENT_MARKER)
    + rf" [\d,]+ characters of `{SAFE_NAME}` left out of this view; this {SAFE_NAME} call already"
    + " wrote them, so read the file to see them."
)
_ARGUMENT_OFFLOAD_HEADER = re.compile(
    re.escape(ARGUMENT_OFFLOAD_MARKER)
    + rf" The full `{SAFE_NAME}` argument of this `{SAFE_NAME}` call \([\d,]+ characters, ~[\d,]+ tokens\)"
    + r" is saved in the workdir at (outputs/large_tool_arguments/[A-Za-z0-9_.-]{1,140}\.txt)"
    + r" \(sha256 [0-9a-f]{64}\)\. Read that file for the complete content\."
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(name: str, fallback: str = "tool") -> str:
    """A name reduced to `[A-Za-z0-9_.-]`, at most 64 characters."""
    return (_UNSAFE.sub("_", name or "").strip("._") or fallback)[:64]


@dataclass(frozen=True)
class OffloadReference:
    tool: str
    chars: int
    tokens: int
    path: str
    sha256: str


def offload_header(tool_name: str, path: str, sha256_hex: str, chars: int, tokens: int) -> str:
    return (
        f"{OFFLOAD_MARKER} The full result of `{safe_name(tool_name)}` ({chars:,} characters, "
        f"~{tokens:,} tokens) is saved in the workdir at {path} (sha256 {sha256_hex}). "
        "Read that file for the complete content."
    )


def parse_offload_reference(text: str) -> OffloadReference | None:
    """The file an offload view points to, or None when `text` does not start with a real header."""
    match = _OFFLOAD_HEADER.match(text[:1024])
    if match is None:
        return None
    tool, chars, tokens, path, digest = match.groups()
    return OffloadReference(tool, int(chars.replace(",", "")), int(tokens.replace(",", "")), path, digest)


def omitted_argument_hint(tool_name: str, argument: str, original_chars: int) -> str:
    return (
        f"{ARGUMENT_MARKER} {original_chars:,} characters of `{safe_name(argument, 'argument')}` left "
        f"out of this view; this {safe_name(tool_name)} call already wrote them, so read the file "
        "to see them."
    )


def is_omitted_argument(value: object) -> bool:
    return isinstance(value, str) and len(value) < 512 and _ARGUMENT_HINT.fullmatch(value) is not None


def argument_offload_header(
    tool_name: str, argument: str, path: str, sha256_hex: str, chars: int, tokens: int
) -> str:
    return (
        f"{ARGUMENT_OFFLOAD_MARKER} The full `{safe_name(argument, 'argument')}` argument of this "
        f"`{safe_name(tool_name)}` call ({chars:,} characters, ~{tokens:,} tokens) is saved in the "
        f"workdir at {path} (sha256 {sha256_hex}). Read that file for the complete content."
    )


def offloaded_argument_path(text: str) -> str | None:
    """The file an offloaded-argument view points to, or None when `text` does not start with one."""
    match = _ARGUMENT_OFFLOAD_HEADER.match(text[:1024])
    return match.group(1) if match else None
