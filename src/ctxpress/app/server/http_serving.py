"""The service under uvicorn: the one place its HTTP server is configured (`ctxpress serve`, the
test harness's processes and threads, the benchmarks' services). A process of the service's own
(`serve_http`) also freezes its startup heap once the app has started (`freeze_startup_heap`)."""

from __future__ import annotations

import gc
import socket

import uvicorn
from fastapi import FastAPI

from ctxpress.app.server.settings import Settings

#: The process's exit code when the server could not start (uvicorn's own).
STARTUP_FAILURE_EXIT_CODE = 3


def uvicorn_config(
    app: FastAPI, settings: Settings, *, host: str, port: int, log_level: str
) -> uvicorn.Config:
    """uvicorn's settings for the service. Idle keep-alive connections live for
    `settings.http_keep_alive_seconds`: longer than a client's or proxy's own idle expiry, so that
    the client closes first and a request never meets a connection the server is closing."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        lifespan="on",
        timeout_keep_alive=max(1, round(settings.http_keep_alive_seconds)),
    )


def serve_http(app: FastAPI, settings: Settings, *, host: str, port: int, log_level: str) -> None:
    """Run the service until it is told to stop (SIGINT, SIGTERM); exit 3 if it could not start
    (uvicorn's own code for a failed startup, e.g. the port is taken)."""
    server = _ProcessServer(uvicorn_config(app, settings, host=host, port=port, log_level=log_level))
    server.run()
    if not server.started:
        raise SystemExit(STARTUP_FAILURE_EXIT_CODE)


def freeze_startup_heap() -> None:
    """Move every object alive now out of the garbage collector's reach (`gc.freeze()`).

    What startup made (imported modules, compiled graphs, settings, pools) lives as long as the
    process, yet a full collection would visit all of it -- about 255,000 objects, a pause of every
    request in the process of 70-250 ms on a two-core machine. Collected first, so that startup's
    garbage is freed rather than kept; a frozen object that becomes cyclic garbage later is never
    reclaimed, a loss bounded by the startup heap."""
    gc.collect()
    gc.freeze()


class _ProcessServer(uvicorn.Server):
    """uvicorn's server in a process that is the service's own (not a host app's or a test's
    thread): once the app has started, its startup heap is frozen (`freeze_startup_heap`)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            freeze_startup_heap()
