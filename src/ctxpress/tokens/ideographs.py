"""Which CJK ideographs a tokenizer spends more than one token on: the one text feature that is not
a character class (S12).

cl100k (GPT-4 / GPT-3.5) holds only a few hundred ideographs as single tokens and splits every other
one into two or three byte-level tokens, so its cost per ideograph ranges from 1 on everyday text to
1.3-1.5 on technical or rarer vocabulary: a class count cannot follow that. Llama 3 builds on the
same vocabulary, so the ``default`` profile, which must stay near it too, weighs the feature as
well. The families with large Chinese vocabularies (o200k, Qwen, DeepSeek) do not need it: their
profiles give it no weight, so it is not computed for them.

Two implementations with the same result: a regular expression over the runs of one-token
ideographs (no dependency; the faster one on short texts), and with the optional numpy a lookup of
every UTF-16 code unit in a table (from ``NUMPY_MIN_CHARS`` characters on).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from ctxpress.tokens.cl100k_ideographs import CL100K_ONE_TOKEN_IDEOGRAPHS

__all__ = ["NUMPY_MIN_CHARS", "NUMPY_ONE_TOKEN_COUNT", "pure_one_token_count", "split_ideographs"]

# Runs, not single characters: deleting one match per run is about twice as fast on Chinese text.
_ONE_TOKEN_RUNS: Final = re.compile(f"[{re.escape(CL100K_ONE_TOKEN_IDEOGRAPHS)}]+")

#: Characters from which a text's one-token ideographs are counted with numpy, when it is installed:
#: below it the fixed cost of the numpy calls outweighs the regular expression (about 64-128
#: characters of Chinese text on the machine measured).
NUMPY_MIN_CHARS: Final = 96


def pure_one_token_count(text: str) -> int:
    """How many of the text's characters are ideographs cl100k encodes as one token."""
    return len(text) - len(_ONE_TOKEN_RUNS.sub("", text))


def _numpy_one_token_count() -> Callable[[str], int] | None:
    """`pure_one_token_count` vectorised, or None when numpy is not installed."""
    try:
        import numpy as np
    except ImportError:
        return None
    table = np.zeros(0x10000, dtype=np.bool_)
    table[[ord(char) for char in CL100K_ONE_TOKEN_IDEOGRAPHS]] = True

    def numpy_one_token_count(text: str) -> int:
        # Astral characters become two surrogate code units, neither of them in the table.
        units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
        return int(np.count_nonzero(table[units]))

    return numpy_one_token_count


#: The numpy implementation when numpy is installed, else None (the pure path is always there).
NUMPY_ONE_TOKEN_COUNT: Final = _numpy_one_token_count()


def split_ideographs(text: str, ideographs: int) -> int:
    """Of the text's `ideographs` (its ``han`` feature), those cl100k encodes in several tokens."""
    if NUMPY_ONE_TOKEN_COUNT is not None and len(text) >= NUMPY_MIN_CHARS:
        return ideographs - NUMPY_ONE_TOKEN_COUNT(text)
    return ideographs - pure_one_token_count(text)
