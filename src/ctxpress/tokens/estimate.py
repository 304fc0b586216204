"""The token estimate of one text: its character-class features weighted per tokenizer profile (S12).

Counts are approximate and never used for billing. ``len(text) / 4`` -- what LangChain's
``count_tokens_approximately`` does -- suits English but undercounts Chinese by 50-75%: a Chinese
character costs 0.5-1.3 tokens, not a quarter. So the estimate is the weighted sum of the text's
``features.text_features``, rounded up. Each profile's weights were fitted to a real tokenizer on
half of a real-text corpus (``bench/fit_token_profiles.py``, which writes ``profile_weights.py``),
with one rule from how tokenizers pre-split text: an ASCII letter run or a digit group (a digit, for
Qwen) starts a pre-token, so it costs at least one token. The error on the other half, and on whole
real threads, is in ``docs/benchmarks.md`` (``bench/token_estimate.py``).

Profiles
--------
Every profile also weighs the ideographs cl100k splits into several tokens (``ideographs``): cl100k
holds only its few hundred most frequent ideographs as single tokens, so the share of the others
measures how rare a text's vocabulary is, which every family pays for.

- ``cl100k``: OpenAI GPT-4 / GPT-3.5-turbo.
- ``o200k``: OpenAI GPT-4o, GPT-4.1, o-series and later.
- ``qwen``: Qwen2.5 / Qwen3.
- ``deepseek``: DeepSeek-V3 / R1.
- ``default``: an unknown model. A conservative envelope of cl100k, o200k, Qwen, DeepSeek and
  Llama 3: as close as it can get to the hungriest of them, and never more than 10% under any of
  them on any text type (an undercount is the dangerous direction: the request overflows instead of
  being compressed). Where the families disagree it overcounts the lean ones: on Chinese text, where
  cl100k needs ~1.5x DeepSeek's tokens, it counts about as cl100k does. Name the matching profile
  for a closer count, or an exact tokenizer (``ctxpress.tokens.exact``) for an exact one.

Held-out errors of every profile, per text type: ``docs/benchmarks.md`` (``bench/token_loso.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import reduce
from operator import add, mul
from typing import Final

from ctxpress.tokens import features
from ctxpress.tokens.exact import approximate_profile, is_exact_profile
from ctxpress.tokens.features import FEATURE_NAMES, text_features
from ctxpress.tokens.features_batch import texts_features
from ctxpress.tokens.ideographs import ONE_TOKEN_IDEOGRAPH_BITMAP, split_ideographs
from ctxpress.tokens.profile_weights import PROFILE_WEIGHTS

__all__ = [
    "PROFILE_NAMES",
    "WEIGHT_NAMES",
    "compiled_settings",
    "estimate",
    "estimate_tokens",
    "estimates",
    "profile_weights",
    "weigh",
]

#: What a profile's weights apply to, in order: the character classes of `text_features`, then the
#: ideographs cl100k splits into several tokens (computed only when that weight is not 0).
WEIGHT_NAMES: tuple[str, ...] = (*FEATURE_NAMES, "cl100k_split_ideographs")
HAN: Final = FEATURE_NAMES.index("han")
_SPLIT_IDEOGRAPHS: Final = len(FEATURE_NAMES)

PROFILE_NAMES: tuple[str, ...] = ("default", "cl100k", "o200k", "qwen", "deepseek")

#: Letters a letter run may average before its length starts to count: the fitted weights price a
#: word at about one token whatever its length, which holds for prose but not for a blob with no
#: spaces (base64, minified code), where tokenizers spend about one token per few letters.
LETTERS_PER_RUN_FREE: Final = 12
LETTERS_PER_EXTRA_TOKEN: Final = 4
_LETTERS = FEATURE_NAMES.index("letters")
_LETTER_RUNS = FEATURE_NAMES.index("letter_runs")


def profile_weights(profile: str) -> tuple[float, ...]:
    """The weights of `profile`; a `ValueError` naming the known profiles for any other name.

    A profile naming a real tokenizer (``ctxpress.tokens.exact``) gets its nearest family's weights:
    what counting without a `TokenCounter` (preview budgets) uses.
    """
    try:
        return PROFILE_WEIGHTS[profile]
    except KeyError:
        if is_exact_profile(profile):
            return PROFILE_WEIGHTS[approximate_profile(profile)]
        raise ValueError(
            f"unknown token profile {profile!r}; choose one of {', '.join(PROFILE_NAMES)}"
        ) from None


def compiled_settings(weights: tuple[float, ...]) -> tuple[tuple[float, ...], int, int, bytes]:
    """What the compiled scan (``features.COMPILED_SCAN``) takes after the texts to estimate them
    as `weigh` does under `weights`."""
    return weights, LETTERS_PER_RUN_FREE, LETTERS_PER_EXTRA_TOKEN, ONE_TOKEN_IDEOGRAPH_BITMAP


def estimate(text: str, weights: tuple[float, ...]) -> int:
    """Tokens of `text` under `weights` (one profile's)."""
    if not text:
        return 0
    scan = features.COMPILED_SCAN
    if scan is not None:
        return scan.estimates((text,), *compiled_settings(weights))[0]
    return weigh(text, text_features(text), weights)


def estimates(texts: Sequence[str], weights: tuple[float, ...]) -> list[int]:
    """`estimate` of each of `texts`: in one C call with the compiled scan, else their features
    taken in one batch (``features_batch``)."""
    scan = features.COMPILED_SCAN
    if scan is not None:
        return scan.estimates(texts, *compiled_settings(weights))
    return [
        weigh(text, text_counts, weights) if text else 0
        for text, text_counts in zip(texts, texts_features(texts), strict=True)
    ]


def weigh(text: str, text_counts: Sequence[int], weights: tuple[float, ...]) -> int:
    """The estimate of a non-empty `text` from its features (`text_counts`).

    The products are added left to right (`reduce`, not `sum`, which compensates rounding from
    Python 3.12 on), as the compiled scan adds them: both give the same estimate on every version.
    """
    total = reduce(add, map(mul, weights, text_counts))  # map stops at the features
    excess = text_counts[_LETTERS] - LETTERS_PER_RUN_FREE * text_counts[_LETTER_RUNS]
    if excess > 0:
        total += excess / LETTERS_PER_EXTRA_TOKEN
    split_weight = weights[_SPLIT_IDEOGRAPHS]
    if split_weight and text_counts[HAN]:
        total += split_weight * split_ideographs(text, text_counts[HAN])
    return max(1, math.ceil(total))  # a non-empty text is at least one token


def estimate_tokens(text: str, profile: str = "default") -> int:
    """Approximate token count of `text` for the tokenizer family `profile` (stateless, not cached)."""
    return estimate(text, profile_weights(profile))
