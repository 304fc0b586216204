"""S10: the preview of an ordinary tool result keeps its head, middle and tail."""

from __future__ import annotations

from ctxpress.compaction.budget import take_head, take_middle, take_tail
from ctxpress.tokens import estimate_tokens

HEAD_SHARE = 0.4
MIDDLE_SHARE = 0.2
#: Approximate tokens of one "[… N characters (~M tokens) left out …]" marker.
GAP_MARKER_TOKENS = 20


def _gap_marker(chars: int, tokens_per_char: float) -> str:
    # Proportional estimate: scanning each gap again would double the work on a 50 MB result.
    return f"\n[… {chars:,} characters (~{round(chars * tokens_per_char):,} tokens) left out …]\n"


def head_middle_tail_preview(
    text: str, budget: int, profile: str = "default", total_tokens: int | None = None
) -> str:
    """Head, middle and tail of `text`, with markers saying how much was left out between them."""
    if budget <= 0:
        return ""
    if total_tokens is None:
        total_tokens = estimate_tokens(text, profile)
    if total_tokens <= budget:
        return text
    tokens_per_char = total_tokens / max(1, len(text))
    # The two gap markers are part of the preview: the pieces share what they leave.
    content = budget - min(budget // 2, 2 * GAP_MARKER_TOKENS)
    head = take_head(text, int(content * HEAD_SHARE), profile)
    tail = take_tail(text, int(content * HEAD_SHARE), profile)
    middle_start, middle = take_middle(text, int(content * MIDDLE_SHARE), profile)
    tail_start = len(text) - len(tail)
    # On short texts the pieces can overlap; then the middle adds nothing and is dropped.
    if middle_start < len(head) or middle_start + len(middle) > tail_start:
        middle_start, middle = len(head), ""
    pieces = [head]
    if middle:
        pieces.append(_gap_marker(middle_start - len(head), tokens_per_char))
        pieces.append(middle)
        after_middle = middle_start + len(middle)
    else:
        after_middle = len(head)
    pieces.append(_gap_marker(tail_start - after_middle, tokens_per_char))
    pieces.append(tail)
    return "".join(pieces)
