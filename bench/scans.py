"""Which token scan a bench counts with (issue 18 item 13): every way gives the same counts, at
different speeds, so a bench can time each on the same texts in one run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ctxpress.tokens import features as features_module
from ctxpress.tokens import features_batch

#: How a bench may have the token scan run: as installed (the C scan where it was built), without
#: the C scan (numpy's batch scan where numpy is installed), and with neither (the pure fallback).
SCANS = ("installed", "numpy", "pure")


@contextmanager
def scan_paths(scan: str) -> Iterator[None]:
    """Count with the scan `scan` (one of `SCANS`) inside the block; every way gives the same counts."""
    if scan not in SCANS:
        raise ValueError(f"unknown scan {scan!r}; choose one of {', '.join(SCANS)}")
    saved = (
        features_module.COMPILED_SCAN,
        features_module.NUMPY_CLASS_COUNTS,
        features_batch.NUMPY_TEXTS_FEATURES,
    )
    if scan != "installed":
        features_module.COMPILED_SCAN = None  # type: ignore[misc]
    if scan == "pure":
        features_module.NUMPY_CLASS_COUNTS = None  # type: ignore[misc]
        features_batch.NUMPY_TEXTS_FEATURES = None  # type: ignore[misc]
    try:
        yield
    finally:
        (
            features_module.COMPILED_SCAN,  # type: ignore[misc]
            features_module.NUMPY_CLASS_COUNTS,  # type: ignore[misc]
            features_batch.NUMPY_TEXTS_FEATURES,  # type: ignore[misc]
        ) = saved
