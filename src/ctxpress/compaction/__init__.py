"""L1: deterministic compaction of the request view (S2, S7–S13)."""

from ctxpress.compaction.offload import CompactionCache, offload_path, sanitize_tool_name
from ctxpress.compaction.result import (
    CompactionFailure,
    CompactionResult,
    OffloadedResult,
    TruncatedArgument,
)
from ctxpress.compaction.view import compact_view

__all__ = [
    "CompactionCache",
    "CompactionFailure",
    "CompactionResult",
    "OffloadedResult",
    "TruncatedArgument",
    "compact_view",
    "offload_path",
    "sanitize_tool_name",
]
