"""Shared fixtures: real data from ../shared/data and real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"


def shared_data_dir() -> Path | None:
    """Where the real data lives: $CTXPRESS_SHARED_DATA, else ../shared/data beside the checkout."""
    configured = os.environ.get("CTXPRESS_SHARED_DATA")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def require_shared_data(*parts: str) -> Path:
    """Path under the shared data folder; skips (fails under CI=true) when it is not there."""
    root = shared_data_dir()
    path = root.joinpath(*parts) if root else None
    if path is None or not path.exists():
        reason = (
            f"real data {'/'.join(parts) or '.'} not found: set CTXPRESS_SHARED_DATA to the shared "
            "data folder (traces, kb, models) to run this test"
        )
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture
def shared_data() -> Path:
    return require_shared_data()


@pytest.fixture
def traces_dir() -> Path:
    return require_shared_data("traces")
