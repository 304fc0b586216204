"""Where the benchmarks find the real data: $CTXPRESS_SHARED_DATA, else ../shared/data beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """The shared data folder: $CTXPRESS_SHARED_DATA, else ../shared/data beside the checkout."""
    configured = os.environ.get("CTXPRESS_SHARED_DATA")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def require_data_dir() -> Path:
    found = shared_data_dir()
    if found is None:
        raise SystemExit(
            "shared data not found: set CTXPRESS_SHARED_DATA to the folder holding traces/ and kb/"
        )
    return found
