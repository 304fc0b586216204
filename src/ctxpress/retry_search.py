"""S6, S30: the search for a request that fits after the main model overflowed.

The model's window is not known; what is known is that a request of `limit` tokens overflowed.
Every retry is therefore strictly smaller than the last request that overflowed, and each
candidate tried is remembered, so that a call that ends with `ContextOverflowError` says what was
tried and why none of it was sent or fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage


@dataclass
class RetrySearch:
    """The smaller requests tried after an overflow of `limit` tokens, in order."""

    limit: int
    tried: list[str] = field(default_factory=list)
    accepted: tuple[list[BaseMessage], int] = ([], 0)

    def not_smaller(self, label: str, tokens: int) -> None:
        self.tried.append(f"{label} (~{tokens} tokens, not smaller than the {self.limit} that overflowed)")

    def overflowed(self, label: str, tokens: int) -> None:
        self.tried.append(f"{label} (~{tokens} tokens, overflowed)")
        self.limit = tokens

    def accept(self, view: list[BaseMessage], tokens: int) -> None:
        self.accepted = (view, tokens)

    def exhausted(self) -> str:
        tried = "; ".join(self.tried) or "nothing: there was nothing to summarise or trim"
        return (
            "the request does not fit the model's context: the current input alone is too large, "
            f"and every smaller request was tried: {tried}"
        )


def smaller_keep(keep: int) -> int:
    """The next keep to try after a summary keeping `keep` messages overflowed: half as many (a
    few summary calls at most, whatever the keep); 0 when none is left to try."""
    return keep // 2
