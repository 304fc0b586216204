"""This suite's scripted service process (`service_process.py`) with a short lease and poll, so a
killed process is noticed within seconds. The process class itself is `ctxpress.app.testing`'s."""

from __future__ import annotations

import sys
from pathlib import Path

from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.processes import ServiceProcess
from tests.conftest import REPO_ROOT

LEASE_SECONDS = 2.0
#: This suite's scripted service; `{port}` and `{control}` are filled in at start.
TEST_SERVICE_COMMAND: tuple[str, ...] = (
    sys.executable,
    "-m",
    "tests.reliability.service_process",
    "{port}",
    "{control}",
)
TEST_TUNING_ENV: dict[str, str] = {
    "CTXPRESS_WORKER_POLL_SECONDS": "0.1",
    "CTXPRESS_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
}


def scripted_service(
    settings: Settings, control: Path, log: Path, extra_env: dict[str, str] | None = None
) -> ServiceProcess:
    """The scripted service (not started), run from the checkout so that `-m tests…` imports;
    `extra_env`: `CTXPRESS_TEST_AGENT`, `CTXPRESS_TEST_LOCK_TRACE`."""
    return ServiceProcess(
        settings,
        control,
        log,
        extra_env=dict(extra_env or {}),
        command=TEST_SERVICE_COMMAND,
        tuning_env=dict(TEST_TUNING_ENV),
        cwd=REPO_ROOT,
    )
