"""How often given byte values occur in a buffer, and how often as the first byte of a run (S12).

The bulk of ``features.text_features``: after its class translation, counts of a few class bytes in
the class buffer and in its run-start buffer. Two implementations with the same results:

- ``pure_class_counts``: ``bytes.count`` and one big-integer ``x & ~(x << 8)``; no dependency, and
  the faster one on short texts, where a numpy call's fixed cost outweighs the scan;
- ``numpy_class_counts``: the same arithmetic vectorised (SIMD compares, ``count_nonzero``), about
  ten times faster per byte on long texts. numpy is optional (``pip install ctxpress[fast]``):
  without it, ``NUMPY_CLASS_COUNTS`` is None and every text takes the pure path.

A run-start byte is ``class & ~previous_class`` (the first byte's predecessor is 0). For a class
that is a single bit no other class byte has (the ASCII classes of ``features``), it equals the
class byte exactly at the first byte of each run of that class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["NUMPY_CLASS_COUNTS", "ClassCounts", "pure_class_counts"]

#: (class bytes, values counted in them, values counted in the run starts) -> (counts, run counts)
ClassCounts = Callable[[bytes, Sequence[int], Sequence[int]], tuple[list[int], list[int]]]


def pure_class_counts(
    classes: bytes, values: Sequence[int], run_values: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Occurrences of each of `values` in `classes`, and of each of `run_values` as a run start."""
    counts = [classes.count(value) for value in values]
    if not run_values:
        return counts, []
    as_int = int.from_bytes(classes, "little")
    # Bit k of a byte survives iff the byte has class bit k and the byte before it does not.
    run_starts = (as_int & ~(as_int << 8)).to_bytes(len(classes), "little")
    return counts, [run_starts.count(value) for value in run_values]


def _numpy_class_counts() -> ClassCounts | None:
    """The numpy implementation, or None when numpy is not installed."""
    try:
        import numpy as np
    except ImportError:
        return None

    def numpy_class_counts(
        classes: bytes, values: Sequence[int], run_values: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        """`pure_class_counts`, vectorised: one compare and one `count_nonzero` per value."""
        array = np.frombuffer(classes, dtype=np.uint8)
        counts = [int(np.count_nonzero(array == value)) for value in values]
        if not run_values or not len(array):
            return counts, [0] * len(run_values)
        run_starts = np.empty_like(array)
        run_starts[0] = array[0]
        np.bitwise_and(array[1:], np.invert(array[:-1]), out=run_starts[1:])
        return counts, [int(np.count_nonzero(run_starts == value)) for value in run_values]

    return numpy_class_counts


#: The numpy implementation when numpy is installed, else None (the pure path is always there).
NUMPY_CLASS_COUNTS: Final = _numpy_class_counts()
