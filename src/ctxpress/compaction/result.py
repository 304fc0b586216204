"""What one L1 pass did: the new view plus a record of files written, arguments cut and failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from langchain_core.messages import BaseMessage

from ctxpress.containment import Degradation
from ctxpress.tokens import TokenCounter


@dataclass(frozen=True)
class OffloadedResult:
    """A tool result whose full text is in the workdir (S8); the view holds a preview."""

    message_id: str | None
    tool_call_id: str
    tool_name: str
    path: str
    sha256: str
    chars: int
    approx_tokens: int
    written_now: bool  # False when the same content was already stored (S11: written once)
    #: Preview rules that raised for this result; their fallback is in the view (containment.py).
    degraded: tuple[Degradation, ...] = ()


@dataclass(frozen=True)
class TruncatedArgument:
    """A long tool-call argument replaced in the view (S7).

    `write_file` / `edit_file` arguments become a hint (the call already wrote them: `path` is
    None); any other tool's argument over the limit is saved in the workdir at `path` and the view
    keeps a preview, like an offloaded result (S8).
    """

    message_id: str | None
    tool_call_id: str
    tool_name: str
    argument: str
    original_chars: int
    path: str | None = None
    written_now: bool = False


@dataclass(frozen=True)
class CompactionFailure:
    """A tool result left unchanged because its full text could not be stored (S13)."""

    message_id: str | None
    tool_call_id: str
    tool_name: str
    reason: str


@dataclass
class CompactionResult:
    messages: list[BaseMessage]
    original: list[BaseMessage]
    profile: str = "default"
    offloaded: list[OffloadedResult] = field(default_factory=list)
    truncated_arguments: list[TruncatedArgument] = field(default_factory=list)
    failures: list[CompactionFailure] = field(default_factory=list)
    #: Rules that raised on a message of this view, and whose fallback the view holds.
    degraded: list[Degradation] = field(default_factory=list)

    # Counted on demand: the middleware measures whole requests itself, so a pass over the
    # history does not pay for counts nobody reads.
    @cached_property
    def tokens_before(self) -> int:
        return TokenCounter().count_messages(self.original, self.profile)

    @cached_property
    def tokens_after(self) -> int:
        return TokenCounter().count_messages(self.messages, self.profile)

    @property
    def changed(self) -> bool:
        return bool(self.offloaded or self.truncated_arguments)

    @property
    def files_written(self) -> list[OffloadedResult]:
        return [item for item in self.offloaded if item.written_now]

    @property
    def paths_written(self) -> list[str]:
        """Workdir files this pass wrote: offloaded results and offloaded arguments."""
        arguments = [item.path for item in self.truncated_arguments if item.written_now and item.path]
        return [item.path for item in self.files_written] + arguments
