"""The features of many texts at once: a first count of a whole thread (S12, issue 18 item 13).

A thread seen for the first time has hundreds of texts, most of them short, and the per-text scan
(``features.text_features``) costs a dozen C calls per text whatever its length: on a 350-message
thread that fixed cost is most of the scan. With numpy installed, ``texts_features`` joins the
texts' UTF-8 bytes (separated by a continuation byte, which no counted class or run crosses), scans
the joined buffer once, and sums each count per text with ``np.add.reduceat``: about two dozen numpy
calls for the whole batch, then one ``tolist``. Texts of ``BATCH_MAX_BYTES`` or more are scanned
alone (numpy's whole-buffer counts are cheaper per byte than per-text sums). The derived features
(letters, ideographs, CJK punctuation, ...) follow the same arithmetic as
``features.assemble_features``, as whole columns. Without numpy, or for a handful of texts, it is ``text_features`` per text. Both give the
same tuples (tests/test_token_features_batch.py checks them against each other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from ctxpress.tokens import features
from ctxpress.tokens.features import (
    ALL_COUNTED,
    CLASS_TABLE,
    NUMPY_MIN_BYTES,
    RUNS_COUNTED,
    in_feature_order,
    text_features,
)

__all__ = ["BATCH_MAX_BYTES", "BATCH_MIN_TEXTS", "NUMPY_TEXTS_FEATURES", "texts_features"]

#: Texts from which `texts_features` scans them as one buffer (with numpy): below it, the numpy
#: calls' fixed cost outweighs the per-text calls they save.
BATCH_MIN_TEXTS: Final = 16

# Between two texts: a continuation byte, whose class (0x80) has none of the ASCII class bits (so a
# run never spans two texts) and is never counted; no UTF-8 text ends with a lead byte, so no counted
# two-byte sequence spans one either.
_SEPARATOR: Final = b"\x80"

# Two-byte sequences counted: U+3000-303F (CJK symbols), U+FF00-FF7F (full-width forms, two lead
# pairs), and the `\\u` of a JSON escape.
_PAIRS: Final = ((0xE3, 0x80), (0xEF, 0xBC), (0xEF, 0xBD), (0x5C, 0x75))

#: Texts of at least this many UTF-8 bytes are left out of the batch and scanned alone (numpy's
#: whole-buffer counts, `features.text_features`): per byte, a per-text sum in the batch costs
#: several times a whole-buffer count, so the batch only pays off where the fixed cost dominates.
BATCH_MAX_BYTES: Final = NUMPY_MIN_BYTES

#: (texts, their UTF-8 encodings with surrogatepass, each shorter than BATCH_MAX_BYTES) -> features
TextsFeatures = Callable[[Sequence[str], Sequence[bytes]], list[tuple[int, ...]]]


def texts_features(texts: Sequence[str]) -> list[tuple[int, ...]]:
    """`text_features` of each of `texts`, in order: the short ones in one batch (with numpy and
    without the compiled scan, whose per-text call costs less than a batch)."""
    if features.COMPILED_SCAN is not None or NUMPY_TEXTS_FEATURES is None or len(texts) < BATCH_MIN_TEXTS:
        return [text_features(text) for text in texts]
    datas = [text.encode("utf-8", "surrogatepass") for text in texts]
    short = [index for index, data in enumerate(datas) if len(data) < BATCH_MAX_BYTES]
    counts: list[tuple[int, ...]] = [() for _ in texts]
    batch = NUMPY_TEXTS_FEATURES([texts[index] for index in short], [datas[index] for index in short])
    for index, text_features_of_index in zip(short, batch, strict=True):
        counts[index] = text_features_of_index
    for index, data in enumerate(datas):
        if len(data) >= BATCH_MAX_BYTES:
            counts[index] = text_features(texts[index])
    return counts


def _numpy_texts_features() -> TextsFeatures | None:
    """The one-buffer implementation, or None when numpy is not installed."""
    try:
        import numpy as np
    except ImportError:
        return None

    def numpy_texts_features(texts: Sequence[str], datas: Sequence[bytes]) -> list[tuple[int, ...]]:
        if not texts:
            return []
        joined = _SEPARATOR.join([*datas, b""])  # every text followed by a separator
        raw = np.frombuffer(joined, dtype=np.uint8)
        classes = np.frombuffer(joined.translate(CLASS_TABLE), dtype=np.uint8)
        sizes = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        chars = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        sum_type = np.int16 if int(sizes.max()) < np.iinfo(np.int16).max else np.int64
        starts = np.cumsum(sizes + 1) - (sizes + 1)  # text k spans [starts[k], starts[k] + sizes[k])
        run_starts = np.empty_like(classes)  # never empty: it holds the separators
        run_starts[0] = classes[0]
        np.bitwise_and(classes[1:], np.invert(classes[:-1]), out=run_starts[1:])

        def per_text(mask: Any) -> Any:
            """How many True of `mask` (aligned with the joined buffer) fall in each text (a text's
            slice also holds the separator after it, which is never counted); 16-bit sums, as no
            text of the batch reaches BATCH_MAX_BYTES (64-bit ones should a caller pass longer)."""
            return np.add.reduceat(mask.view(np.uint8), starts, dtype=sum_type).astype(np.int64)

        pair_mask = np.zeros(len(raw), dtype=bool)

        def pairs(first: int, second: int) -> Any:
            np.logical_and(raw[:-1] == first, raw[1:] == second, out=pair_mask[:-1])
            return per_text(pair_mask)

        sums = [per_text(classes == value) for value in ALL_COUNTED]
        sums += [per_text(run_starts == value) for value in RUNS_COUNTED]
        sums += [pairs(first, second) for first, second in _PAIRS]
        digits, spaces, newlines, punct, kana_and_symbols, other_and_full_width, two_byte, astral = sums[:8]
        letter_runs, digit_runs, punct_runs, space_runs, newline_runs = sums[8:13]
        cjk_symbols, full_width_low, full_width_high, escapes = sums[13:]
        full_width = full_width_low + full_width_high
        three_byte = (sizes - chars - two_byte - 3 * astral) // 2
        ascii_chars = chars - two_byte - three_byte - astral
        wide = (
            three_byte - kana_and_symbols - other_and_full_width,  # han
            cjk_symbols + full_width,  # cjk_punct
            kana_and_symbols - cjk_symbols,  # kana_hangul
            other_and_full_width - full_width,  # other_bmp
            two_byte,
            astral,
        )
        runs = (letter_runs, digit_runs, punct_runs, space_runs, newline_runs)
        columns = in_feature_order(wide, (ascii_chars, digits, spaces, newlines, punct), runs, escapes)
        return list(map(tuple, np.stack(columns, axis=1).tolist()))

    return numpy_texts_features


#: The one-buffer implementation when numpy is installed, else None (per-text scans are always there).
NUMPY_TEXTS_FEATURES: Final = _numpy_texts_features()
