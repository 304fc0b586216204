"""The app under uvicorn on 127.0.0.1, in a thread of this process with its own event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import uvicorn
from fastapi import FastAPI

from ctxpress.app.server.http_serving import uvicorn_config
from ctxpress.app.server.runtime.container import Services
from ctxpress.app.server.settings import Settings

from .ports import free_port

SERVER_START_TIMEOUT = 60.0
T = TypeVar("T")


class LiveServer:
    """The app under uvicorn on 127.0.0.1, in a thread with its own event loop."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.port = free_port()
        settings: Settings = app.state.settings
        self.server = uvicorn.Server(
            uvicorn_config(app, settings, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services

    def _run(self) -> None:
        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve()

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self._failure = exc

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {self._failure!r}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's event loop (e.g. to reach its services)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def create_user(self, name: str) -> str:
        return self.call(self.services.auth.create_user(name)).token

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)
