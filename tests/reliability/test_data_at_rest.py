"""Data at rest is owner-only (issue 19, item 6), checked on real service processes and commands.

The SQLite files (`ctxpress.sqlite3`, `checkpoints.sqlite3`, `kb.sqlite3` and their `-wal` /
`-shm`) used to be created 0644 and an existing data directory stayed 0755. Now a service process
(and the `users` / `kb` commands) leave every directory under the data directory 0700 and every
file 0600, tighten what an earlier version left open, and refuse to start -- saying what to run --
when the data directory cannot be restricted. Root reads anything, so the tests assert on modes,
never on access. Every process runs with the usual umask 022.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.ports import free_port
from ctxpress.app.testing.processes import create_user
from tests.conftest import REPO_ROOT

from .faults import real_faults_available
from .processes import scripted_service
from .support import turn

CLI = (sys.executable, "-m", "ctxpress.app.cli")
SQLITE_FILES = ("ctxpress.sqlite3", "ctxpress.sqlite3-wal", "ctxpress.sqlite3-shm", "checkpoints.sqlite3")


@contextlib.contextmanager
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def modes_not_owner_only(data_dir: Path) -> dict[str, str]:
    """Every path under `data_dir` (itself included) whose mode is not 0700 (folders) / 0600 (files)."""
    found = {}
    for path in [data_dir, *data_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_symlink():
            continue
        if mode != (0o700 if path.is_dir() else 0o600):
            found[str(path.relative_to(data_dir)) or "."] = oct(mode)
    return found


def _run_cli(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    with usual_umask():
        return subprocess.run(
            [*CLI, *arguments],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def test_a_service_process_keeps_its_data_dir_owner_only(make_settings: Any, tmp_path: Path) -> None:
    settings: Settings = make_settings()
    data_dir = settings.data_dir
    # What an earlier version left: the folders 0755, the database 0644.
    (data_dir / "workdirs").mkdir(parents=True)
    for folder in (data_dir, data_dir / "workdirs"):
        folder.chmod(0o755)
    if settings.database().backend == "sqlite":
        (data_dir / "ctxpress.sqlite3").touch(mode=0o644)
        (data_dir / "ctxpress.sqlite3").chmod(0o644)
    # The terse chat agent; a manual compression writes its history file into the workdir.
    service = scripted_service(settings, tmp_path, tmp_path / "service.log", {"CTXPRESS_TEST_AGENT": "chat"})
    with usual_umask():
        service.start()
    try:
        assert modes_not_owner_only(data_dir) == {}
        client = service.client(create_user(settings, "alice"))
        conversation_id = client.post("/api/conversations", json={}).json()["id"]
        for topic in ("季度营收", "客户名单", "合同条款"):
            assert turn(client, conversation_id, topic).status == "succeeded"
        compressed = client.post(f"/api/conversations/{conversation_id}/compress")
        assert compressed.status_code == 200 and compressed.json()["compressed"], compressed.text
        names = {path.name for path in data_dir.iterdir()}
        if settings.database().backend == "sqlite":
            assert set(SQLITE_FILES) | {"server.lock"} <= names, names  # the premise: SQLite wrote here
        workdir = data_dir / "workdirs" / conversation_id
        assert list((workdir / "outputs" / "conversation_history").iterdir()), "the premise"
        assert modes_not_owner_only(data_dir) == {}  # while it runs: WAL and SHM files included
    finally:
        service.stop()
    assert modes_not_owner_only(data_dir) == {}


def test_the_commands_create_owner_only_files(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    created = _run_cli("users", "create", "alice", "--data-dir", str(data_dir))
    assert created.returncode == 0, created.stderr
    document = tmp_path / "note.md"
    document.write_text("# 报销规则\n\n差旅报销需在 30 天内提交。\n", encoding="utf-8")
    added = _run_cli("kb", "add", str(document), "--data-dir", str(data_dir))
    assert added.returncode == 0, added.stderr
    names = {path.name for path in data_dir.iterdir()}
    assert {"ctxpress.sqlite3", "checkpoints.sqlite3", "kb.sqlite3"} <= names, names
    assert modes_not_owner_only(data_dir) == {}


def test_a_data_dir_that_cannot_be_restricted_is_refused(tmp_path: Path) -> None:
    reason = real_faults_available()
    if reason:
        pytest.skip(reason)
    data_dir = tmp_path / "shared"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    done = subprocess.run(["chattr", "+i", str(data_dir)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is refused here: {done.stderr.strip()}")
    try:
        served = _run_cli("serve", "--data-dir", str(data_dir), "--port", str(free_port()))
    finally:
        subprocess.run(["chattr", "-i", str(data_dir)], check=False)
    assert served.returncode == 2, served.stdout + served.stderr
    message = " ".join(served.stderr.split())
    assert "can be read by other users (0o755)" in message, message
    assert "chmod 700" in message, message
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o755
