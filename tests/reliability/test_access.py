"""Access (S24, S25), beyond tests/server/test_access.py (404 for a second user on every endpoint,
hashed tokens, path validation) and test_manual_endpoint.py (compress / context answer 404):

- every file and folder compression creates — offloaded results, history files, the agent's own
  files, the conversation folder and the data directory — is owner-only (0600 / 0700);
- the bearer token appears in no log line, SSE event, state, error body or workdir file, even
  through compression, a failing run and rejected requests;
- another user gets 404 for the workdir files of a conversation that compressed.
"""

from __future__ import annotations

import json
import logging
import stat
from typing import Any

import pytest

from ctxpress.workdir import is_owner_only

from .support import TOPICS, kb_agent, state_values, turn, workdir_root


def test_s24_everything_compression_writes_is_owner_only(start_server: Any) -> None:
    agent, _ = kb_agent()
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    for topic in (*TOPICS[:4], "save notes/结论.md"):
        assert turn(client, conversation_id, topic).status == "succeeded"
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)
    files = [p for p in root.rglob("*") if p.is_file()]
    kinds = {
        p.relative_to(root).parts[0] + "/" + p.relative_to(root).parts[1] for p in files if len(p.parts) > 1
    }
    assert {"outputs/large_tool_results", "outputs/conversation_history"} <= kinds, "the premise"
    assert (root / "notes" / "结论.md").is_file()
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert is_owner_only(path), f"{path.relative_to(settings.data_dir)} is {oct(mode)}"
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path.name}: {oct(mode)}"
    assert is_owner_only(settings.data_dir) and is_owner_only(settings.workdirs_dir)


def test_s25_tokens_never_appear_in_logs_events_state_or_files(
    start_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    agent, _ = kb_agent()
    server = start_server(agents=[agent])
    alice_token = server.create_user("alice")
    bob_token = server.create_user("bob")
    alice, bob = server.client(alice_token), server.client(bob_token)
    conversation_id = alice.post("/api/conversations", json={}).json()["id"]
    seen: list[str] = []
    for topic in TOPICS[:4]:
        result = turn(alice, conversation_id, topic)
        assert result.status == "succeeded"
        seen.append(json.dumps([e.data for e in result.events], ensure_ascii=False))
    # Rejected and foreign requests, and bad tokens, on the way.
    seen.append(bob.get(f"/api/conversations/{conversation_id}/files").text)
    seen.append(server.client("cxp_" + alice_token[::-1]).get("/api/me").text)
    seen.append(alice.post(f"/api/conversations/{conversation_id}/runs", json={"input": 5}).text)
    seen.append(json.dumps(state_values(alice, conversation_id), ensure_ascii=False))
    root = workdir_root(server.services.settings, conversation_id)
    seen.extend(p.read_text("utf-8", "replace") for p in root.rglob("*") if p.is_file())
    files = bob.get(f"/api/conversations/{conversation_id}/files")
    assert files.status_code == 404
    history = alice.get(f"/api/conversations/{conversation_id}/files").json()["files"]
    for item in history:
        assert bob.get(f"/api/conversations/{conversation_id}/files/{item['path']}").status_code == 404
    everything = "\n".join([*seen, caplog.text])
    for token in (alice_token, bob_token):
        assert token not in everything
        assert token[4:] not in everything, "not even the secret part"
