"""Character-class features of a text: what the token estimate is a weighted sum of (S12).

One linear pass over the text's UTF-8 bytes counts (``FEATURE_NAMES``):

- CJK ideographs; CJK / full-width punctuation; kana and hangul; other BMP symbols (“”—…→, box
  drawing); two-byte letters (accented Latin, Greek, Cyrillic); astral characters (emoji);
- ASCII letters and letter runs (a word is about one token, long words more), digits and digit runs
  (tokenizers cut digits into groups of 1-3, Qwen into single digits), punctuation and punctuation
  runs (JSON's ``": "`` or ``"},{"`` are one or two tokens), spaces and space runs (indentation),
  newlines and newline runs;
- ``\\uXXXX`` escapes, as ``json.dumps`` writes non-ASCII text by default (3-5 tokens each).

Where the optional C extension ``ctxpress.tokens._scan`` was built (``setup.py``; ``COMPILED_SCAN``),
one C loop over the text's code points counts them all, about ten times faster than the fallback.
Without it, the pass is made only of whole-buffer C operations -- ``str.encode``, ``bytes.translate``,
then the class counts of ``class_counts``: ``bytes.count`` and one big-integer ``x & ~(x << 8)`` that
marks where runs start, or the same vectorised by numpy on long texts when it is installed -- so no
Python code runs per character. Every path gives the same tuple (tests/test_token_features_batch.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Final, Protocol, cast

from ctxpress.tokens.class_counts import (
    NUMPY_CLASS_COUNTS,
    ClassCounts,
    pure_class_counts,
)

__all__ = [
    "COMPILED_SCAN",
    "FEATURE_NAMES",
    "NUMPY_MIN_BYTES",
    "CompiledScan",
    "assemble_features",
    "features_of",
    "text_features",
]

FEATURE_NAMES: tuple[str, ...] = (
    "han",  # CJK ideographs (U+4000-9FFF)
    "cjk_punct",  # CJK symbols and punctuation (U+3000-303F), full-width forms (U+FF00-FF7F)
    "kana_hangul",  # the rest of U+3000-3FFF (kana, ...) and U+A000-DFFF (hangul, ...)
    "other_bmp",  # other three-byte characters: “”—…, arrows, box drawing, private use, ...
    "two_byte",  # U+0080-07FF: accented Latin, Greek, Cyrillic, Hebrew, Arabic, ...
    "astral",  # U+10000 and above: emoji, rare ideographs
    "letters",
    "letter_runs",
    "digits",
    "digit_runs",
    "punct",  # ASCII punctuation and control characters other than whitespace
    "punct_runs",
    "spaces",  # space and tab
    "space_runs",
    "newlines",  # \n and \r
    "newline_runs",
    "json_escapes",  # \uXXXX
)

# Each UTF-8 byte is translated to one class byte. ASCII classes are single bits, so that
# `x & ~(x << 8)` over the whole buffer (as one big integer) leaves exactly the first byte of every
# run. Non-ASCII classes use only the top three bits, so they can never be mistaken for an ASCII
# class in that arithmetic.
_LETTER, _DIGIT, _SPACE, _NEWLINE, _PUNCT = 0x01, 0x02, 0x04, 0x08, 0x10
_LEAD_TWO_BYTE = 0x20  # C0-DF
_LEAD_HAN = 0x40  # E4-E9: U+4000-9FFF
_LEAD_KANA_HANGUL = 0x60  # E3: U+3000-3FFF (CJK symbols, kana, ...); EA-ED: U+A000-DFFF (hangul, ...)
_CONTINUATION = 0x80  # 80-BF
_LEAD_OTHER_BMP = 0xC0  # E0-E2, EE, EF
_LEAD_ASTRAL = 0xE0  # F0-FF


def _byte_class(byte: int) -> int:
    if byte < 0x80:
        char = chr(byte)
        if char.isalpha():
            return _LETTER
        if char.isdigit():
            return _DIGIT
        if char in " \t":
            return _SPACE
        if char in "\r\n":
            return _NEWLINE
        return _PUNCT
    if byte < 0xC0:
        return _CONTINUATION
    if byte < 0xE0:
        return _LEAD_TWO_BYTE
    if 0xE4 <= byte <= 0xE9:
        return _LEAD_HAN
    if byte == 0xE3 or 0xEA <= byte <= 0xED:
        return _LEAD_KANA_HANGUL
    if byte < 0xF0:
        return _LEAD_OTHER_BMP
    return _LEAD_ASTRAL


CLASS_TABLE: Final = bytes(_byte_class(byte) for byte in range(256))
# Counted in the class buffer: the ASCII classes always, the non-ASCII lead classes when the text
# has any; counted in the run-start buffer: the ASCII classes (single bits, see `class_counts`).
_ASCII_COUNTED: Final = (_DIGIT, _SPACE, _NEWLINE, _PUNCT)
ALL_COUNTED: Final = (*_ASCII_COUNTED, _LEAD_KANA_HANGUL, _LEAD_OTHER_BMP, _LEAD_TWO_BYTE, _LEAD_ASTRAL)
RUNS_COUNTED: Final = (_LETTER, _DIGIT, _PUNCT, _SPACE, _NEWLINE)

#: UTF-8 bytes from which a text's class counts take the numpy path, when numpy is installed. Below
#: it the fixed cost of a dozen numpy calls outweighs their speed (``bench/cold_path.py`` prints the
#: crossover); the counts are the same either way.
NUMPY_MIN_BYTES: Final = 4096


class CompiledScan(Protocol):
    """What the C extension ``ctxpress.tokens._scan`` offers; each function has a Python twin.

    The settings after the texts or messages are ``estimate.compiled_settings(weights)``.
    """

    def features(self, text: str, /) -> tuple[int, ...]:
        """`text_features` of `text`."""

    def estimates(
        self,
        texts: Sequence[str],
        weights: tuple[float, ...],
        letters_free: int,
        letters_per_extra: int,
        one_token_bitmap: bytes,
        /,
    ) -> list[int]:
        """`estimate.estimate` of each of `texts`."""

    def first_sight(
        self,
        messages: Sequence[Any],
        fields: Sequence[tuple[Any, ...]],
        weights: tuple[float, ...],
        letters_free: int,
        letters_per_extra: int,
        one_token_bitmap: bytes,
        kinds: dict[type, int],
        overheads: tuple[int, int, int],
        provider_json: Callable[[Any], str],
        fallback: Callable[[Any], int],
        /,
    ) -> list[int]:
        """`messages.each_message_tokens` of `messages`, read from their `fields`
        (``message_memo.message_fields`` of each); a message of another shape, or of a class not
        in `kinds`, is counted by `fallback(message)`."""


def _compiled_scan() -> CompiledScan | None:
    """The C extension when it was built, else None (the pure scan gives the same numbers)."""
    try:
        module: ModuleType = importlib.import_module("ctxpress.tokens._scan")
    except ImportError:
        return None
    return cast(CompiledScan, module)


#: The compiled scan (``setup.py`` builds it where a C compiler is available), else None.
COMPILED_SCAN: Final = _compiled_scan()


def text_features(text: str) -> tuple[int, ...]:
    """Counts of each class in FEATURE_NAMES order, in one linear pass: the compiled scan's when it
    was built, else C-level whole-buffer operations (vectorised by numpy for texts of at least
    `NUMPY_MIN_BYTES` when it is installed)."""
    if COMPILED_SCAN is not None:
        return COMPILED_SCAN.features(text)
    data = text.encode("utf-8", "surrogatepass")
    if NUMPY_CLASS_COUNTS is not None and len(data) >= NUMPY_MIN_BYTES:
        return features_of(text, data, NUMPY_CLASS_COUNTS)
    return features_of(text, data, pure_class_counts)


def features_of(text: str, data: bytes, class_counts: ClassCounts) -> tuple[int, ...]:
    """`text_features` of `text` (whose UTF-8 encoding with surrogatepass is `data`), with the class
    counts taken by `class_counts`: either implementation gives the same tuple."""
    classes = data.translate(CLASS_TABLE)
    counted = _ASCII_COUNTED if text.isascii() else ALL_COUNTED  # isascii is O(1) in CPython
    counts, runs = class_counts(classes, counted, RUNS_COUNTED)
    return assemble_features(text, data, counts, runs)


def assemble_features(text: str, data: bytes, counts: Sequence[int], runs: Sequence[int]) -> tuple[int, ...]:
    """The feature tuple from the class counts (`_ASCII_COUNTED`, then for a non-ASCII text the rest
    of `ALL_COUNTED`) and the run counts (`RUNS_COUNTED`).

    Speed notes: counting slows down with the share of matching bytes, so the most frequent classes
    (letters; ideographs and continuation bytes in Chinese) are never counted but derived from the
    character and byte totals; and the three two-byte searches for CJK punctuation run only when the
    text has characters of their lead byte.
    """
    size = len(data)
    digits, spaces, newlines, punct = counts[:4]
    if text.isascii():
        han = cjk_punct = kana_hangul = other_bmp = two_byte = astral = 0
        ascii_chars = size
    else:
        kana_and_symbols, other_and_full_width, two_byte, astral = counts[4:8]
        continuations = size - len(text)  # 1, 2 or 3 per two-, three- or four-byte character
        three_byte = (continuations - two_byte - 3 * astral) // 2
        han = three_byte - kana_and_symbols - other_and_full_width
        cjk_symbols = data.count(b"\xe3\x80") if kana_and_symbols else 0  # U+3000-303F
        full_width = (  # U+FF00-FF7F
            data.count(b"\xef\xbc") + data.count(b"\xef\xbd") if other_and_full_width else 0
        )
        cjk_punct = cjk_symbols + full_width
        kana_hangul = kana_and_symbols - cjk_symbols
        other_bmp = other_and_full_width - full_width
        ascii_chars = len(text) - two_byte - three_byte - astral
    escapes = data.count(b"\\u") if b"\\" in data else 0
    ascii_counts = (ascii_chars, digits, spaces, newlines, punct)
    return in_feature_order(
        (han, cjk_punct, kana_hangul, other_bmp, two_byte, astral), ascii_counts, runs, escapes
    )


def in_feature_order(
    wide: Sequence[Any], ascii_counts: Sequence[Any], runs: Sequence[Any], escapes: Any
) -> tuple[Any, ...]:
    """The features in FEATURE_NAMES order -- ints for one text, numpy columns for a batch
    (`features_batch`). `wide`: han, CJK punctuation, kana/hangul, other BMP, two-byte, astral;
    `ascii_counts`: all ASCII characters, digits, spaces, newlines, punctuation (letters are the
    rest); `runs`: `RUNS_COUNTED`'s run counts; `escapes`: the `\\u` of JSON escapes."""
    ascii_chars, digits, spaces, newlines, punct = ascii_counts
    letter_runs, digit_runs, punct_runs, space_runs, newline_runs = runs
    letters = ascii_chars - digits - spaces - newlines - punct
    return (
        *wide,
        letters,
        letter_runs,
        digits,
        digit_runs,
        punct,
        punct_runs,
        spaces,
        space_runs,
        newlines,
        newline_runs,
        escapes,
    )
