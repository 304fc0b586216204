"""Text markers that make compacted content recognisable, so it is never compacted twice (S2)."""

from __future__ import annotations

OFFLOAD_MARKER = "[ctxpress:offloaded]"
ARGUMENT_MARKER = "[ctxpress:argument-omitted]"


def is_offloaded_text(text: str) -> bool:
    return text.startswith(OFFLOAD_MARKER)


def is_omitted_argument(value: object) -> bool:
    return isinstance(value, str) and value.startswith(ARGUMENT_MARKER)
