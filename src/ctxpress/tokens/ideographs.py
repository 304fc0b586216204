"""Which CJK ideographs a tokenizer spends more than one token on: the one text feature that is not
a character class (S12).

cl100k (GPT-4 / GPT-3.5) holds only a few hundred ideographs as single tokens and splits every other
one into two or three byte-level tokens, so its cost per ideograph ranges from 1 on everyday text to
1.3-1.5 on technical or rarer vocabulary: a class count cannot follow that. Those few hundred are
the most frequent ideographs, so the share of the others also measures how rare a text's vocabulary
is, which the families with large Chinese vocabularies (o200k, Qwen, DeepSeek) pay for too (dish
names cost o200k 1.56 tokens per ideograph, hotel records 1.45): every profile weighs it. Weights
that give it none never compute it.
"""

from __future__ import annotations

import re
from typing import Final

from ctxpress.tokens.cl100k_ideographs import CL100K_ONE_TOKEN_IDEOGRAPHS

__all__ = ["ONE_TOKEN_IDEOGRAPH_BITMAP", "split_ideographs"]

# Runs, not single characters: deleting one match per run is about twice as fast on Chinese text.
_ONE_TOKEN_RUNS: Final = re.compile(f"[{re.escape(CL100K_ONE_TOKEN_IDEOGRAPHS)}]+")


IDEOGRAPH_FIRST: Final = 0x4000
IDEOGRAPH_LAST: Final = 0x9FFF


def one_token_bitmap(ideographs: str) -> bytes:
    """One bit per code point of U+4000-9FFF (bit ``k % 8`` of byte ``k // 8`` for U+4000 + k), set
    for each of `ideographs`: how the compiled scan (``features.COMPILED_SCAN``) looks them up."""
    bitmap = bytearray((IDEOGRAPH_LAST - IDEOGRAPH_FIRST + 1) // 8)
    for ideograph in ideographs:
        offset = ord(ideograph) - IDEOGRAPH_FIRST
        if not 0 <= offset <= IDEOGRAPH_LAST - IDEOGRAPH_FIRST:
            raise ValueError(f"{ideograph!r} is outside U+4000-9FFF, which the han feature counts")
        bitmap[offset >> 3] |= 1 << (offset & 7)
    return bytes(bitmap)


#: cl100k's one-token ideographs as a bitmap, for the compiled scan.
ONE_TOKEN_IDEOGRAPH_BITMAP: Final = one_token_bitmap(CL100K_ONE_TOKEN_IDEOGRAPHS)


def split_ideographs(text: str, ideographs: int) -> int:
    """Of the text's `ideographs` (its ``han`` feature), those cl100k encodes in several tokens."""
    return ideographs - (len(text) - len(_ONE_TOKEN_RUNS.sub("", text)))
