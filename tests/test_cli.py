"""`ctxpress kb …`, `ctxpress replay` (every real data set, its HTML report opened in Chromium) and the
README's first command, `ctxpress serve`, on a fresh data directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ctxpress.app.cli import app
from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.ports import free_port
from ctxpress.tools.traces import iter_conversations
from tests.conftest import IN_CI, REPO_ROOT, require_shared_data
from tests.server.conftest import SettingsFactory, backend, database_url, make_settings, postgres_database

#: The service tests' fixtures (both databases), used here by name.
SERVICE_FIXTURES = (backend, database_url, make_settings, postgres_database)

runner = CliRunner()
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = REPO_ROOT / "test-artifacts"
DATA_SETS = ["acebench", "glaive-toolcall", "openhands", "swe-agent", "tau-bench", "toolbench"]


def options(settings: Settings) -> list[str]:
    found = ["--data-dir", str(settings.data_dir)]
    return [*found, "--database-url", settings.database_url] if settings.database_url else found


def test_kb_add_search_and_list(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    restaurants = require_shared_data("kb", "crosswoz", "restaurant_db.json")
    policies = require_shared_data("kb", "tau2-banking", "documents")
    added = runner.invoke(app, ["kb", "add", str(restaurants), str(policies), *options(settings)])
    assert added.exit_code == 0, added.output
    expected = len(json.loads(restaurants.read_text("utf-8"))) + len(list(policies.glob("*.json")))
    assert re.search(
        rf"added {expected:,} documents \(\d[\d,]* chunks\) from {1 + len(list(policies.glob('*.json'))):,} files",
        added.stdout,
    )

    found = runner.invoke(app, ["kb", "search", "全聚德的电话", "--json", *options(settings)])
    assert found.exit_code == 0, found.output
    result = json.loads(found.stdout)
    assert (
        result["results"][0]["source"] == "restaurant_db.json" and "全聚德" in result["results"][0]["title"]
    )

    shown = runner.invoke(app, ["kb", "search", "Evergreen monthly fee", "-n", "2", *options(settings)])
    assert (
        shown.exit_code == 0
        and "2 results" in shown.stdout
        and "documents/doc_checking_accounts_evergreen" in shown.stdout
    )

    listed = runner.invoke(app, ["kb", "list", *options(settings)], env={"COLUMNS": "250"})
    assert (
        listed.exit_code == 0
        and "restaurant_db-0001" in listed.stdout
        and "ctxpress-overview" in listed.stdout
    )

    missing = runner.invoke(app, ["kb", "add", str(settings.data_dir / "nope.md"), *options(settings)])
    assert missing.exit_code == 1 and "no such file or folder" in " ".join(missing.stderr.split())
    licence = require_shared_data("kb", "crosswoz", "LICENSE")
    unsupported = runner.invoke(app, ["kb", "add", str(licence), *options(settings)])
    assert unsupported.exit_code == 1 and "unsupported file type" in " ".join(unsupported.stderr.split())


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Chromium (Debian's) through Playwright; skipped locally when missing, failed under CI."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "Playwright is not installed (scripts/check.sh installs it)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    if not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.mark.shared_data
@pytest.mark.parametrize("data_set", DATA_SETS)
def test_replay_completes_on_every_data_set_and_its_report_opens(
    data_set: str, tmp_path: Path, chromium: Any
) -> None:
    folder = require_shared_data("traces", data_set)
    report, figures = tmp_path / "report.html", tmp_path / "figures.json"
    arguments = [
        "replay",
        str(folder),
        "--threshold",
        "2",
        "--keep",
        "6",
        "--tool-limit",
        "300",
        "--context-window",
        "8192",
        "--calls",
        "none",
        "--report",
        str(report),
        "--json",
        str(figures),
    ]
    result = runner.invoke(app, arguments, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    data = json.loads(figures.read_text("utf-8"))
    conversations = list(iter_conversations(folder))
    assert [c["name"] for c in data["conversations"]] == [c.name for c in conversations]
    assert all(c["error"] is None for c in data["conversations"])
    calls = [call for conversation in data["conversations"] for call in conversation["calls"]]
    assert calls and all(
        call["tokens_sent"] <= call["tokens_before"] or call["level"] == "l2" for call in calls
    )
    compressed = [call for call in calls if call["level"]]
    assert f"{len(data['conversations']):,} conversations, {len(calls):,} model calls" in " ".join(
        result.stdout.split()
    )

    html = report.read_text("utf-8")
    assert "<script" not in html and not re.search(r"""(?:src|href)=["']https?:""", html)  # self-contained
    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    overview = page.locator("svg.plot").first
    assert overview.is_visible()
    assert overview.locator(".mark-l1").count() == sum(1 for call in calls if call["level"] == "l1")
    assert overview.locator(".mark-l2").count() == sum(1 for call in calls if call["level"] == "l2")
    assert page.locator("table.conversations tbody tr").count() == len(conversations)
    assert all(url.startswith(("file:", "data:", "about:")) for url in requests), requests
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"replay-{data_set}.png"), full_page=False)
    page.close()
    if data_set in ("swe-agent", "openhands", "tau-bench", "toolbench"):
        assert any(call["level"] == "l2" for call in compressed) and any(
            call["files_written"] for call in compressed
        )


@pytest.mark.shared_data
def test_replay_of_one_conversation_prints_every_call_and_can_keep_the_files(tmp_path: Path) -> None:
    trace = require_shared_data(
        "traces", "swe-agent", "trajectories", "demonstrations", "function_calling_simple.traj"
    )
    result = runner.invoke(
        app,
        ["replay", str(trace), "--threshold", "1", "--keep", "4", "--workdir", str(tmp_path / "kept")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    calls = len(re.findall(r"^│ \d+ +│", result.stdout, re.MULTILINE))
    assert calls > 3 and "estimate" in result.stdout and "L2" in result.stdout
    kept = [
        path.relative_to(tmp_path / "kept").as_posix()
        for path in (tmp_path / "kept").rglob("*")
        if path.is_file()
    ]
    assert any("/outputs/conversation_history/" in path for path in kept)
    assert any(path in result.stdout for path in (p.split("/", 1)[1] for p in kept))


def test_replay_reports_bad_input(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["replay", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2
    not_a_trace = tmp_path / "notes.json"
    not_a_trace.write_text('{"title": "not a trace"}', "utf-8")
    assert runner.invoke(app, ["replay", str(not_a_trace)]).exit_code == 2
    trace = require_shared_data("traces", "toolbench")
    bad = runner.invoke(app, ["replay", str(trace), "--threshold", "0"])
    assert bad.exit_code == 2 and "summary_threshold" in bad.stderr


def test_the_readme_command_starts_the_offline_service(tmp_path: Path) -> None:
    """`ctxpress serve` on a fresh data directory: the URL, the admin token, the built-in agent."""
    port = free_port()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("CTXPRESS_")}
    command = [
        str(Path(sys.executable).with_name("ctxpress")),
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
        "--port",
        str(port),
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**environment, "COLUMNS": "200"},
    )
    try:
        output = ""
        deadline = time.monotonic() + 60
        while "Application startup complete" not in output:
            assert process.poll() is None and time.monotonic() < deadline, output
            output += process.stdout.readline() if process.stdout else ""
        assert f"http://127.0.0.1:{port}" in output and "knowledge base: SQLite FTS5 (trigram)" in output
        assert "built-in offline model" in output and "web_search is not available" in output
        token = re.search(r"(cxp_[A-Za-z0-9_-]{20,})", output)
        assert token is not None, output
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token.group(1)}"}
        ) as client:
            (agent,) = client.get("/api/agents").json()
            assert agent["builtin_model"] and agent["capabilities"] == ["context_compression"]
            assert "web_search" in agent["notice"] and client.get("/api/me").json()["name"] == "admin"
    finally:
        process.terminate()
        process.wait(timeout=30)
