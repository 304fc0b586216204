"""S10: the preview of an ordinary tool result keeps its head, middle and tail.

The preview, markers included, stays within its budget. As the budget shrinks it degrades in steps
that always keep a marker saying what was left out: head, middle and tail with two markers; then
head and tail with one marker; below `smallest_preview_budget` there is no preview at all (the
caller shows its own reference instead), never pieces without a marker.
"""

from __future__ import annotations

from ctxpress.compaction.budget import MAX_CHARS_PER_TOKEN, take_head, take_middle, take_tail
from ctxpress.tokens import estimate_tokens

HEAD_SHARE = 0.4
MIDDLE_SHARE = 0.2
#: Approximate tokens of one "[… N characters (~M tokens) left out …]" marker (15–27 by profile and
#: size of the numbers); the exact cost is measured per text where a preview is built.
GAP_MARKER_TOKENS = 20
#: The least a kept piece gets; a piece smaller than this is not worth a marker of its own.
MIN_PIECE_TOKENS = 2


def _gap_marker(chars: int, tokens_per_char: float) -> str:
    # Proportional estimate: scanning each gap again would double the work on a 50 MB result.
    return f"\n[… {chars:,} characters (~{round(chars * tokens_per_char):,} tokens) left out …]\n"


def _largest_marker_tokens(text_chars: int, tokens_per_char: float, profile: str) -> int:
    """Tokens of the widest marker this text can need: no gap is longer than the whole text."""
    return estimate_tokens(_gap_marker(text_chars, tokens_per_char), profile)


def smallest_preview_budget(text_chars: int, total_tokens: int, profile: str = "default") -> int:
    """The least budget that holds a preview of a text this size: one marker, a head and a tail."""
    tokens_per_char = total_tokens / max(1, text_chars)
    return _largest_marker_tokens(text_chars, tokens_per_char, profile) + 2 * MIN_PIECE_TOKENS


def _three_pieces(text: str, content: int, tokens_per_char: float, profile: str) -> str | None:
    """Head, middle and tail sharing `content` tokens; None when the middle would add nothing."""
    piece = int(content * HEAD_SHARE)
    middle_budget = int(content * MIDDLE_SHARE)
    if min(piece, middle_budget) < MIN_PIECE_TOKENS:
        return None
    head = take_head(text, piece, profile)
    tail = take_tail(text, piece, profile)
    middle_start, middle = take_middle(text, middle_budget, profile)
    tail_start = len(text) - len(tail)
    # On short texts the pieces can overlap; then the middle adds nothing.
    if not middle or middle_start <= len(head) or middle_start + len(middle) >= tail_start:
        return None
    if not head or not tail:
        return None
    after_middle = middle_start + len(middle)
    return "".join(
        [
            head,
            _gap_marker(middle_start - len(head), tokens_per_char),
            middle,
            _gap_marker(tail_start - after_middle, tokens_per_char),
            tail,
        ]
    )


def _two_pieces(text: str, content: int, tokens_per_char: float, profile: str) -> str | None:
    """Head and tail sharing `content` tokens; None when they would cover the whole text."""
    piece = content // 2
    if piece < MIN_PIECE_TOKENS:
        return None
    head = take_head(text, piece, profile)
    tail = take_tail(text, piece, profile)
    tail_start = len(text) - len(tail)
    if tail_start <= len(head) or not head or not tail:
        return None  # the whole text, or an empty piece beside its marker
    return head + _gap_marker(tail_start - len(head), tokens_per_char) + tail


def head_middle_tail_preview(
    text: str, budget: int, profile: str = "default", total_tokens: int | None = None
) -> str:
    """Head, middle and tail of `text` with markers saying how much was left out between them.

    Within `budget` tokens, markers included; "" when the budget is below `smallest_preview_budget`.
    `total_tokens` (the text's estimate or an upper bound of it, when the caller has one) saves a
    scan of a large text.
    """
    if budget <= 0:
        return ""
    if total_tokens is None:
        total_tokens = estimate_tokens(text, profile)
    if total_tokens <= budget:
        return text
    # A caller's size may be an upper bound (a message count with its framing): a text short
    # enough to measure cheaply is kept whole when it fits after all.
    if len(text) <= budget * MAX_CHARS_PER_TOKEN and estimate_tokens(text, profile) <= budget:
        return text
    tokens_per_char = total_tokens / max(1, len(text))
    marker = _largest_marker_tokens(len(text), tokens_per_char, profile)
    for build, markers in ((_three_pieces, 2), (_two_pieces, 1)):
        preview = build(text, budget - markers * marker, tokens_per_char, profile)
        if preview is None:
            continue
        # Pieces and markers are joined at line breaks, so their estimates add up; the check
        # costs a scan of the preview only (bounded by the budget), never of the text.
        if estimate_tokens(preview, profile) <= budget:
            return preview
    return ""
