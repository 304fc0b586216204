"""API tokens can be listed, revoked and given an expiry (issue 19, item 7).

`ctxpress users …` could only create tokens. Now the CLI (`users tokens`, `users token
--expires-in`, `users revoke`) and the admin API (`/api/admin/…`, administrators only) list tokens
without ever showing them, issue expiring ones and revoke them; a revoked or expired token stops
working at once, on every service process (two real processes on one PostgreSQL database). The
`expires_at` column comes with migration 0003, upgraded over existing tokens on both databases.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import text

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.migrate import alembic_config, schema_change_lock, upgrade_database
from ctxpress.app.server.runtime.container import open_database, prepare_data_dir
from ctxpress.app.server.settings import Settings
from ctxpress.app.server.usecases.auth import AuthService, hash_token, new_token
from tests.conftest import REPO_ROOT

from .processes import scripted_service

POSTGRES_ONLY = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
CLI = (sys.executable, "-m", "ctxpress.app.cli")


def _me(client: httpx.Client, token: str) -> int:
    return client.get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code


def test_tokens_are_listed_revoked_and_expire_over_the_admin_api(start_server: Any) -> None:
    server = start_server()
    admin_token = server.call(server.services.auth.create_user("root", is_admin=True)).token
    alice_token = server.create_user("alice")
    admin, alice = server.client(admin_token), server.client(alice_token)
    anonymous = server.client()

    assert alice.get("/api/admin/tokens").status_code == 403
    assert alice.post("/api/admin/users/alice/tokens", json={}).status_code == 403
    listed = admin.get("/api/admin/tokens", params={"user": "alice"})
    assert listed.status_code == 200, listed.text
    [original] = listed.json()["items"]
    assert original["user"] == "alice" and original["status"] == "active" and original["expires_at"] is None
    assert alice_token not in listed.text and alice_token[4:] not in listed.text, "never shown again"

    # An expiring token: valid, then refused once its time is up.
    issued = admin.post("/api/admin/users/alice/tokens", json={"label": "ci", "expires_in_seconds": 2})
    assert issued.status_code == 201, issued.text
    short = issued.json()
    assert _me(anonymous, short["token"]) == 200
    time.sleep(2.5)
    assert _me(anonymous, short["token"]) == 401
    statuses = {t["id"]: t["status"] for t in admin.get("/api/admin/tokens").json()["items"]}
    assert statuses[short["id"]] == "expired" and statuses[original["id"]] == "active"

    # Revocation holds at once; revoking again changes nothing.
    revoked = admin.post(f"/api/admin/tokens/{original['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert _me(anonymous, alice_token) == 401
    again = admin.post(f"/api/admin/tokens/{original['id']}/revoke")
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]

    for path, body in (
        ("/api/admin/tokens/0123456789abcdef0123456789abcdef/revoke", None),
        ("/api/admin/tokens/%00/revoke", None),
        ("/api/admin/users/nobody/tokens", {}),
    ):
        response = admin.post(path, json=body)
        assert response.status_code == 404, (path, response.text)
    assert admin.get("/api/admin/tokens", params={"user": "nobody"}).status_code == 404
    for seconds in (0, -5, 10**30):
        bad = admin.post("/api/admin/users/alice/tokens", json={"expires_in_seconds": seconds})
        assert bad.status_code == 422, bad.text


def _cli(settings: Settings, *arguments: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            *CLI,
            *arguments,
            "--data-dir",
            str(settings.data_dir),
            "--database-url",
            str(settings.database_url),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.heavy
@POSTGRES_ONLY
def test_a_revoked_token_stops_working_at_once_on_every_process(make_settings: Any, tmp_path: Path) -> None:
    settings: Settings = make_settings()

    async def users() -> tuple[str, str]:
        async with open_database(settings) as database:
            auth = AuthService(database)
            return (await auth.create_user("root", is_admin=True)).token, (
                await auth.create_user("bob")
            ).token

    admin_token, bob_token = asyncio.run(users())
    chat = {"CTXPRESS_TEST_AGENT": "chat"}
    first = scripted_service(settings, tmp_path / "a", tmp_path / "a.log", chat)
    second = scripted_service(settings, tmp_path / "b", tmp_path / "b.log", chat)
    for process in (first, second):
        process.control.mkdir()
        process.start()
    try:
        clients = [httpx.Client(base_url=p.base_url, timeout=30) for p in (first, second)]
        assert [_me(c, bob_token) for c in clients] == [200, 200]

        # The admin API of one process; the other refuses the token on the very next request.
        bob_id = next(
            t["id"]
            for t in first.client(admin_token)
            .get("/api/admin/tokens", params={"user": "bob"})
            .json()["items"]
        )
        assert first.client(admin_token).post(f"/api/admin/tokens/{bob_id}/revoke").status_code == 200
        assert [_me(c, bob_token) for c in reversed(clients)] == [401, 401]

        # The command line, while both processes serve.
        issued = _cli(settings, "users", "token", "bob", "--label", "laptop", "--expires-in", "1h")
        new_token_value = issued.stdout.strip()
        token_id = issued.stderr.split("(id ", 1)[1].split(",", 1)[0]
        assert [_me(c, new_token_value) for c in clients] == [200, 200]
        listing = _cli(settings, "users", "tokens", "bob").stdout
        assert token_id in listing and "laptop" in listing and "revoked" in listing
        assert new_token_value not in listing and new_token_value[4:] not in listing
        _cli(settings, "users", "revoke", token_id)
        assert [_me(c, new_token_value) for c in clients] == [401, 401]
    finally:
        for process in (first, second):
            process.stop()


async def test_migration_0003_keeps_existing_tokens_valid(make_settings: Any) -> None:
    """From the schema before `expires_at` to the newest, with a token stored in between."""
    settings: Settings = make_settings()
    prepare_data_dir(settings)
    database = Database(settings.database())
    token = new_token()
    try:
        async with schema_change_lock(database) as connection:
            await connection.run_sync(
                lambda sync: command.upgrade(alembic_config(sync), "0002_conversation_pressure")
            )
            await connection.commit()
            await connection.execute(
                text("INSERT INTO users (id, name, is_admin, created_at) VALUES ('u1', 'old', false, :now)"),
                {"now": "2025-01-01 00:00:00"},
            )
            await connection.execute(
                text(
                    "INSERT INTO api_tokens (id, user_id, token_sha256, label, created_at) "
                    "VALUES ('t1', 'u1', :digest, 'before 0003', :now)"
                ),
                {"digest": hash_token(token), "now": "2025-01-01 00:00:00"},
            )
            await connection.commit()
        await upgrade_database(database)
        auth = AuthService(database)
        user = await auth.authenticate(token)
        assert user is not None and user.name == "old"
        [info] = await auth.list_tokens("old")
        assert info.expires_at is None and info.status == "active"
    finally:
        await database.dispose()
