"""Chinese-aware sentence splitting (used by chunking, extractive answers and extractive summaries).

A sentence ends at Chinese end punctuation (。！？；…), at `.!?;` followed by a space or the end
of the text (so `3.14`, `v1.2` and `outputs/a.txt` stay whole), and at every line break. Closing
quotes and brackets stay with the sentence they close. Markdown list markers are kept.
"""

from __future__ import annotations

import re

_CLOSERS = "”’」』）)】\"'"
_BOUNDARY = re.compile(
    rf"(?<=[。！？；…])[{_CLOSERS}]*"  # Chinese end punctuation (plus closing quotes)
    rf"|(?<=[.!?;])[{_CLOSERS}]*(?=\s|$)"  # Latin end punctuation before a space / the end
    r"|\n+"
)


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped, without empty ones, in order."""
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        piece = text[start:end].strip()
        if piece:
            sentences.append(piece)
        start = end
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences
