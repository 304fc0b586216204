"""A chat service in a process of its own on 127.0.0.1 (start, SIGKILL, stop), and its users.

By default the process is `ctxpress serve` with the service's own settings; the SIGKILL and race
tests run their scripted service instead, `bench/service_load.py` a timed one.
"""

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

from .ports import free_port

START_TIMEOUT_S = 60.0
#: `ctxpress serve` as its console script runs it (`ctxpress = "ctxpress.app.cli:app"`).
SERVE_COMMAND: tuple[str, ...] = (
    sys.executable,
    "-m",
    "ctxpress.app.cli",
    "serve",
    "--port",
    "{port}",
    "--log-level",
    "warning",
)


@dataclass
class ServiceProcess:
    """One service process on 127.0.0.1; `kill()` sends SIGKILL."""

    settings: Settings
    #: A folder the process may use to talk with its caller (the `{control}` of `command`).
    control: Path
    log: Path
    #: More environment for the process.
    extra_env: dict[str, str] = field(default_factory=dict)
    #: What to run; `{port}` and `{control}` are filled in.
    command: tuple[str, ...] = SERVE_COMMAND
    #: Settings given through the environment; empty: the service's own defaults.
    tuning_env: dict[str, str] = field(default_factory=dict)
    #: The process's working directory (None: this process's).
    cwd: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self) -> ServiceProcess:
        self.port = free_port()
        env = {
            **os.environ,
            "CTXPRESS_DATA_DIR": str(self.settings.data_dir),
            **self.tuning_env,
            **self.extra_env,
        }
        env.pop("CTXPRESS_DATABASE_URL", None)
        if self.settings.database_url:
            env["CTXPRESS_DATABASE_URL"] = self.settings.database_url
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [part.format(port=self.port, control=self.control) for part in self.command],
                cwd=self.cwd,
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
    """A user of the service's database (opened from this process); returns its token."""

    async def create() -> str:
        async with open_database(settings) as database:
            return (await AuthService(database).create_user(name)).token

    return asyncio.run(create())
