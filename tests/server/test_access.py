"""Access (S24, S25): bearer tokens, ownership everywhere (another user's things answer 404), paths."""

from __future__ import annotations

import hashlib
import logging

import pytest

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.app.testing.records import query_sql
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import ask_script
from .transactions import watch_transactions


def agent() -> AgentDefinition:
    return AgentDefinition(
        name="asker",
        model=ModelSpec(model=ScriptedChatModel(script=ask_script)),
        tools=("ask_user", "write_file"),
        capabilities=(),
    )


def test_a_second_user_gets_404_everywhere(
    start_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = start_server(agents=[agent()])
    alice_token = server.create_user("alice")
    bob_token = server.create_user("bob")
    alice, bob = server.client(alice_token), server.client(bob_token)

    conversation_id = create_conversation(alice)
    run_id = send(alice, conversation_id, "ask 可以吗？")["run"]["id"]
    wait_for_status(alice, run_id, {"waiting_input"})
    server.services.workdirs.for_conversation(conversation_id).write_bytes("notes/a.txt", b"alice's")
    assert alice.get(f"/api/conversations/{conversation_id}/files/notes/a.txt").text == "alice's"

    conversation = f"/api/conversations/{conversation_id}"
    requests = [
        ("GET", conversation, None),
        ("GET", f"{conversation}/status", None),
        ("GET", f"{conversation}/messages", None),
        ("GET", f"{conversation}/state", None),
        ("GET", f"{conversation}/usage", None),
        ("GET", f"{conversation}/runs", None),
        ("POST", f"{conversation}/runs", {"input": "hi"}),
        ("GET", f"{conversation}/files", None),
        ("GET", f"{conversation}/files/notes/a.txt", None),
        ("GET", f"/api/runs/{run_id}", None),
        ("GET", f"/api/runs/{run_id}/events", None),
        ("POST", f"/api/runs/{run_id}/resume", {"value": "bob says yes"}),
        ("POST", f"/api/runs/{run_id}/cancel", None),
    ]
    for method, path, body in requests:
        response = bob.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_found"
    assert bob.get("/api/conversations").json()["items"] == []

    # Bob changed nothing: alice's run still waits, and only her message is recorded.
    assert alice.get(f"/api/runs/{run_id}").json()["status"] == "waiting_input"
    assert [item["role"] for item in alice.get(f"{conversation}/messages").json()["items"]] == [
        "user",
        "assistant",
    ]
    assert alice.post(f"/api/runs/{run_id}/resume", json={"value": "好"}).status_code == 202
    assert read_events(alice, run_id)[-1].data["status"] == "succeeded"

    # No or bad credentials: 401 with a JSON body.
    for headers in (
        {},
        {"Authorization": "Bearer cxp_not-a-token"},
        {"Authorization": f"Basic {alice_token}"},
    ):
        response = server.client().get(conversation, headers=headers)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"

    # Tokens are stored hashed and never logged.
    rows = query_sql(server.services.settings, "SELECT token_sha256 FROM api_tokens")
    stored = {row.token_sha256 for row in rows}
    assert hashlib.sha256(alice_token.encode()).hexdigest() in stored and alice_token not in stored
    assert alice_token not in caplog.text and bob_token not in caplog.text


def test_file_paths_are_validated(start_server: ServerFactory) -> None:
    server = start_server(agents=[agent()])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    workdir = server.services.workdirs.for_conversation(conversation_id)
    workdir.write_bytes("outputs/large_tool_results/r.txt", "完整结果".encode())
    files = f"/api/conversations/{conversation_id}/files"

    assert alice.get(files).json()["files"] == [{"path": "outputs/large_tool_results/r.txt", "size": 12}]
    assert alice.get(files, params={"prefix": "outputs"}).json()["files"][0]["size"] == 12
    assert alice.get(files, params={"prefix": "nothing-here"}).json()["files"] == []
    for bad in ("..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "notes/..%2F..%2Fsecret", "a%00b"):
        response = alice.get(f"{files}/{bad}")
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["error"]["code"] == "invalid_path"
        assert str(server.services.settings.data_dir) not in response.text, "no host path in errors"
    assert alice.get(files, params={"prefix": "../x"}).json()["error"]["code"] == "invalid_path"
    missing = alice.get(f"{files}/outputs/nope.txt")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    html = workdir.write_bytes("page.html", b"<script>alert(1)</script>")
    served = alice.get(f"{files}/{html}")
    assert served.headers["content-type"] == "text/plain; charset=utf-8", (
        "model-written HTML is never rendered"
    )
    assert served.headers["x-content-type-options"] == "nosniff"


def test_a_message_is_authenticated_in_the_transaction_that_accepts_it(start_server: ServerFactory) -> None:
    """Issue 17 (SQL transactions per turn): `POST …/runs` reads the token's user in the transaction
    that checks the owner and stores the message and its run, not in one of its own. A token that
    is not valid is still a 401 before anything is stored, and counts as a failed attempt."""
    server = start_server(agents=[AgentDefinition(name="echo", model=ModelSpec(model=ScriptedChatModel()))])
    alice = server.client(server.create_user("alice"))
    conversation_id = create_conversation(alice)
    with watch_transactions(server.services.database.engine.sync_engine) as seen:
        run_id = send(alice, conversation_id, "你好")["run"]["id"]
        wait_for_status(alice, run_id, {"succeeded"})
    [accepting] = seen.with_write("INSERT INTO runs")
    assert any("FROM users JOIN api_tokens" in statement for statement in accepting), accepting
    intruder = server.client("cxp_" + "x" * 43)
    refused = intruder.post(f"/api/conversations/{conversation_id}/runs", json={"input": "偷看"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    too_long = intruder.post(f"/api/conversations/{conversation_id}/runs", json={"input": "x" * 200_000})
    assert too_long.status_code == 401, "no answer about the input before the token is checked"
    rows = query_sql(server.services.settings, "SELECT content FROM messages WHERE role = 'user'")
    assert [row.content for row in rows] == ["你好"]
