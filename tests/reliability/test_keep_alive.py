"""The server is not the side that closes an idle keep-alive connection first.

A server that drops idle connections after as long as its clients keep them (uvicorn's default
5 s, httpx's 5 s) races them: a request sent just as the server's timer fires is reset unread, and
the client sees a `ReadError` for a request the service never saw (a CI run of the two-process race
test failed so). `ctxpress serve` keeps idle connections for `http_keep_alive_seconds` (75 s by
default, longer than common proxies and clients), so a client's own expiry closes them first.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any

from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.processes import ServiceProcess

SERVE = (sys.executable, "-m", "ctxpress.app.cli", "serve", "--port", "{port}", "--log-level", "warning")
#: Longer than uvicorn's and httpx's 5 s default, well short of the service's own keep-alive.
IDLE_S = 6.5


def health_over(connection: socket.socket) -> bytes:
    """One `GET /api/health` on an open connection; the status line of its answer ('' if closed)."""
    connection.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            return b""
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return head.split(b"\r\n", 1)[0]


def test_an_idle_connection_is_still_served_after_the_clients_own_expiry(
    make_settings: Any, tmp_path: Path
) -> None:
    settings = make_settings()
    assert Settings().http_keep_alive_seconds > IDLE_S * 2
    service = ServiceProcess(settings, tmp_path, tmp_path / "serve.log", command=SERVE, tuning_env={})
    service.start()
    try:
        with socket.create_connection(("127.0.0.1", service.port), timeout=30) as connection:
            assert health_over(connection).startswith(b"HTTP/1.1 200")
            time.sleep(IDLE_S)
            try:
                again = health_over(connection)
            except ConnectionResetError:
                again = b""
            assert again.startswith(b"HTTP/1.1 200"), "the server closed the idle connection"
    finally:
        service.stop()
