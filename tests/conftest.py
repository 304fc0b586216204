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


#: The token scans a test can ask for (`use_scan`): the C extension, and the Python fallback.
SCANS = ("compiled", "pure")


def use_scan(monkeypatch: pytest.MonkeyPatch, scan: str) -> None:
    """Count with `scan` for the rest of the test. "compiled" skips when the C extension was not
    built (fails under CI=true, whose install builds it); "pure" turns it off."""
    from ctxpress.tokens import features

    if scan == "pure":
        monkeypatch.setattr(features, "COMPILED_SCAN", None)
    elif features.COMPILED_SCAN is None:
        reason = "the C scan ctxpress.tokens._scan was not built (setup.py needs a C compiler)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def pure_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure-Python scan, whether or not the C extension was built."""
    use_scan(monkeypatch, "pure")


@pytest.fixture
def shared_data() -> Path:
    return require_shared_data()


@pytest.fixture
def traces_dir() -> Path:
    return require_shared_data("traces")
