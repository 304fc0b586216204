"""Fixtures of the browser tests: Debian's headless Chromium driven by Playwright, the real service.

The browser is never downloaded (`playwright install` is not used): Playwright's driver (inside the
`playwright` wheel) launches the system `chromium` by its path. Without it the tests skip with the
reason, and fail under CI=true (scripts/check.sh installs it there).

The service is the real app under uvicorn (in a thread) on SQLite, with agents answering through the
built-in offline model and a `query_kb` tool over the real CrossWOZ documents.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from ctxpress.app.server.app import create_app
from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.live_server import LiveServer
from tests.conftest import require_shared_data

from .support import (
    ARTIFACTS,
    CHROMIUM_ARGS,
    IN_CI,
    UnreachableSummaryModel,
    chromium_executable,
    kb_agent,
    writer_agent,
)

#: Agents of the test service. `kb`: pressure passes 85 % after a few tool results (24 K threshold).
#: `kb-tight`: one tool result passes the threshold, so compression runs inside the run.
#: `kb-sf`: usage recorded under an excluded provider. `plain`: no `context_compression` capability.
#: `kb-broken`: its summary model fails, so manual compression answers `compression_failed`.
MAIN_THRESHOLD_K = 24
#: Answers the page handles and shows (a bad token, a busy thread, a failed summary model); Chromium
#: logs them as console errors all the same.
EXPECTED_HTTP_ERRORS = re.compile(
    r"Failed to load resource: the server responded with a status of (401|409|502)\b"
)
TIGHT_THRESHOLD_K = 4


# Runs take a few seconds on a slow CI machine: wait longer than Playwright's default 5 s.
expect.set_options(timeout=20_000)


def _skip_or_fail(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = chromium_executable()
    if path is None:
        _skip_or_fail(
            "Chromium is not installed (Debian: apt-get install chromium; or set CTXPRESS_CHROMIUM): "
            "the browser tests need a real headless Chromium"
        )
    assert path is not None
    return path


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    """One Chromium per test module.

    Not per session: while Playwright's sync API is open, the main thread counts as running an
    event loop, so `asyncio.run` in a later module's tests (e.g. the CLI's) would fail.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - a dev dependency
        _skip_or_fail("playwright (Python) is not installed: pip install -e '.[dev]'")
        raise
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class WebService:
    server: LiveServer
    token: str

    @property
    def url(self) -> str:
        return self.server.base_url + "/"


@pytest.fixture
def crosswoz() -> Path:
    return require_shared_data("kb", "crosswoz")


@pytest.fixture
def web_service(tmp_path: Path, crosswoz: Path) -> Iterator[WebService]:
    agents = [
        kb_agent("kb", crosswoz, threshold_k=MAIN_THRESHOLD_K, default=True),
        kb_agent("kb-tight", crosswoz, threshold_k=TIGHT_THRESHOLD_K),
        kb_agent("kb-sf", crosswoz, threshold_k=MAIN_THRESHOLD_K, usage_provider="siliconflow-cn"),
        kb_agent("plain", crosswoz, threshold_k=MAIN_THRESHOLD_K, capabilities=()),
        kb_agent(
            "kb-broken", crosswoz, threshold_k=MAIN_THRESHOLD_K, summary_model=UnreachableSummaryModel()
        ),
        writer_agent("writer"),
    ]
    settings = Settings(
        data_dir=tmp_path / "data",
        worker_poll_seconds=0.1,
        run_lease_seconds=30.0,
        sse_ping_seconds=5.0,
    )
    server = LiveServer(create_app(settings, agents=agents)).start()
    try:
        yield WebService(server, server.create_user("zhangsan"))
    finally:
        server.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def page(browser: Any, web_service: WebService) -> Iterator[Any]:
    """A fresh browser context (no stored token) at desktop size; fails the test on any page error.

    Depends on `web_service` so that the page closes before the service stops (no refused requests).
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    context.set_default_timeout(30_000)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type == "error" and not EXPECTED_HTTP_ERRORS.search(message.text)
            else None
        ),
    )
    # The page works offline: a request leaving the service's origin (a CDN, a web font) is a failure.
    opened.on(
        "request",
        lambda request: (
            None
            if request.url.startswith(("http://127.0.0.1:", "data:", "blob:"))
            else problems.append(f"external request: {request.url}")
        ),
    )
    try:
        yield opened
    finally:
        context.close()
    assert not problems, problems
