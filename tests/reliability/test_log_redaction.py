"""No credential in the service's log (issue 19, item 9), read from a real `ctxpress serve` process.

A token put in a query string (which the API refuses) still landed in uvicorn's access log. Now
credential-like query parameters (`token`, `access_token`, `api_key`, …) and anything shaped like a
ctxpress token or a bearer credential are redacted from every log line, while the line keeps the
method, the path and the status.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from ctxpress.app.server.log_redaction import REDACTED
from ctxpress.app.testing.processes import ServiceProcess, create_user

SERVE = (sys.executable, "-m", "ctxpress.app.cli", "serve", "--port", "{port}", "--log-level", "info")


def test_credentials_in_query_strings_never_reach_the_log(make_settings: Any, tmp_path: Path) -> None:
    settings = make_settings()
    log = tmp_path / "serve.log"
    service = ServiceProcess(settings, tmp_path, log, command=SERVE, tuning_env={})
    service.start()
    try:
        token = create_user(settings, "alice")
        secrets = {name: f"s3cret{uuid.uuid4().hex}" for name in ("token", "access_token", "api_key", "Key")}
        anonymous = httpx.Client(base_url=service.base_url, timeout=30)
        for path in ("/api/me", "/api/conversations", "/static/x", "/api/runs/abc/events", "/nowhere"):
            query = "&".join(f"{name}={value}" for name, value in secrets.items())
            assert anonymous.get(f"{path}?{query}&page=2").status_code in (401, 404)
        # The user's real token in a query string, next to a proper header.
        client = service.client(token)
        assert client.get(f"/api/conversations?access_token={token}&limit=5").status_code == 200
        assert anonymous.get(f"/api/me?token={token}").status_code == 401
        assert anonymous.get("/api/me", headers={"Authorization": f"Bearer {token}x"}).status_code == 401
    finally:
        service.stop()

    text = log.read_text("utf-8", "replace")
    lines = [line for line in text.splitlines() if "GET /" in line]
    assert len(lines) >= 8, text[-2000:]  # the premise: the access log is on
    for value in (*secrets.values(), token, token[4:]):
        assert value not in text
    assert (
        f"GET /api/me?token={REDACTED}&access_token={REDACTED}&api_key={REDACTED}&Key={REDACTED}&page=2"
        in text
    )
    assert f'GET /api/conversations?access_token={REDACTED}&limit=5 HTTP/1.1" 200' in text
