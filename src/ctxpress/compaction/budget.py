"""Cutting text to an approximate token budget in time proportional to the budget, not the text.

A 50 MB tool result must not be scanned once per preview piece: each function looks only at a
window a few times larger than the budget, then shrinks it by the measured ratio.
"""

from __future__ import annotations

from ctxpress.tokens import estimate_tokens

#: Upper bound of characters per token on real text (long ASCII words); the first window's size.
MAX_CHARS_PER_TOKEN = 6
_SHRINK_ROUNDS = 8


def _fitting_length(window: str, budget: int, profile: str, *, from_end: bool) -> int:
    length = len(window)
    for _ in range(_SHRINK_ROUNDS):
        piece = window[len(window) - length :] if from_end else window[:length]
        tokens = estimate_tokens(piece, profile)
        if tokens <= budget:
            return length
        # Shrink by the observed chars-per-token ratio, a little more to converge quickly.
        length = max(0, min(length - 1, int(length * budget / tokens * 0.95)))
    return length


def take_head(text: str, budget: int, profile: str = "default") -> str:
    """The longest-found prefix of `text` within `budget` approximate tokens."""
    if budget <= 0:
        return ""
    window = text[: budget * MAX_CHARS_PER_TOKEN]
    return window[: _fitting_length(window, budget, profile, from_end=False)]


def take_tail(text: str, budget: int, profile: str = "default") -> str:
    """The longest-found suffix of `text` within `budget` approximate tokens."""
    if budget <= 0:
        return ""
    window = text[-budget * MAX_CHARS_PER_TOKEN :]
    length = _fitting_length(window, budget, profile, from_end=True)
    return window[len(window) - length :] if length else ""


def take_middle(text: str, budget: int, profile: str = "default") -> tuple[int, str]:
    """A piece from the centre of `text` within the budget, with its start offset."""
    if budget <= 0 or not text:
        return len(text) // 2, ""
    half_window = budget * MAX_CHARS_PER_TOKEN // 2
    start = max(0, len(text) // 2 - half_window)
    piece = take_head(text[start : start + 2 * half_window], budget, profile)
    return start, piece
