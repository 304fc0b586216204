"""Real service processes and their users: the SIGKILL and race tests run `service_process.py` (the
default command); `bench/service_load.py` runs `ctxpress serve` itself through the same class."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ctxpress.app.server.runtime.container import open_database
from ctxpress.app.server.settings import Settings
from ctxpress.app.server.usecases.auth import AuthService
from tests.conftest import REPO_ROOT
from tests.server.helpers import free_port

START_TIMEOUT_S = 60.0
LEASE_SECONDS = 2.0
#: This suite's scripted service; `{port}` and `{control}` are filled in at start.
TEST_SERVICE_COMMAND: tuple[str, ...] = (
    sys.executable,
    "-m",
    "tests.reliability.service_process",
    "{port}",
    "{control}",
)
#: This suite's short lease and poll, so a killed process is noticed within seconds.
TEST_TUNING_ENV: dict[str, str] = {
    "CTXPRESS_WORKER_POLL_SECONDS": "0.1",
    "CTXPRESS_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
}


@dataclass
class ServiceProcess:
    """One service process on 127.0.0.1 (by default `service_process.py`); `kill()` sends SIGKILL."""

    settings: Settings
    control: Path
    log: Path
    #: More environment for the process (`CTXPRESS_TEST_AGENT`, `CTXPRESS_TEST_LOCK_TRACE`).
    extra_env: dict[str, str] = field(default_factory=dict)
    #: What to run; `{port}` and `{control}` are filled in (e.g. `ctxpress serve --port {port}`).
    command: tuple[str, ...] = TEST_SERVICE_COMMAND
    #: Settings given through the environment; empty: the service's own defaults.
    tuning_env: dict[str, str] = field(default_factory=lambda: dict(TEST_TUNING_ENV))
    process: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self) -> ServiceProcess:
        self.port = free_port()
        env = {
            **os.environ,
            "CTXPRESS_DATA_DIR": str(self.settings.data_dir),
            **self.tuning_env,
            "PYTHONPATH": str(REPO_ROOT),
            **self.extra_env,
        }
        env.pop("CTXPRESS_DATABASE_URL", None)
        if self.settings.database_url:
            env["CTXPRESS_DATABASE_URL"] = self.settings.database_url
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [part.format(port=self.port, control=self.control) for part in self.command],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.process.poll() is None, f"the service exited: {self.log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{self.base_url}/api/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.1)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def create_user(settings: Settings, name: str) -> str:
    async def create() -> str:
        async with open_database(settings) as database:
            return (await AuthService(database).create_user(name)).token

    return asyncio.run(create())
