"""Manual compression over HTTP (`POST /api/conversations/{id}/compress`) under faults (S18, S28).

- Workdir writes fail (permission denied, disk full, read-only; real and injected) during the
  history write and during the L1 step of a manual compression: 500 `compression_failed` naming
  the part, no host path in the answer, the state and the chat record unchanged, nothing
  half-written; the next compression succeeds.
- The service process is killed (SIGKILL) in the middle of a manual compression and restarted: the
  checkpoint is before the compression, the history file whole or absent, and the conversation
  continues and compresses again.
- Another user's compress and context endpoints answer 404 and change nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpress.app.testing.processes import ServiceProcess, create_user
from ctxpress.config import CompressionConfig

from .faults import FAULT_FORMS, FAULT_KINDS, FILLER_NAME, HISTORY_DIR, LARGE_DIR, FaultKind, workdir_problems
from .processes import scripted_service
from .support import (
    TOPICS,
    assert_checkpoint_consistent,
    assert_history_chain,
    assert_sql_record_complete,
    kb_agent,
    state_values,
    turn,
    workdir_root,
)

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
#: Automatic compression stays out of the way (high threshold); L1 has work to do (small limit).
MANUAL_ONLY = CompressionConfig(
    summary_threshold=100, summary_keep_messages=2, summary_tool_result_token_limit=100
)


def _files(root: Path, directory: str) -> list[Path]:
    base = root / directory
    if not base.exists():
        return []
    return sorted(p for p in base.rglob("*") if p.is_file() and p.name != FILLER_NAME)


@SQLITE_ONLY
@pytest.mark.parametrize("directory", [HISTORY_DIR, LARGE_DIR])
@pytest.mark.parametrize("form", sorted(FAULT_FORMS))
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_s28_manual_compression_write_fault_over_http(
    start_server: Any, kind: FaultKind, form: str, directory: str
) -> None:
    agent, _ = kb_agent(compression=MANUAL_ONLY)
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)
    sent = list(TOPICS[:3])
    for topic in sent:
        assert turn(client, conversation_id, topic).status == "succeeded"
    assert _files(root, LARGE_DIR) == [], "the premise: L1 has not stored the results yet"
    before = state_values(client, conversation_id)

    with FAULT_FORMS[form](root / directory, kind):
        response = client.post(f"/api/conversations/{conversation_id}/compress")
        assert _files(root, directory) == []
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert error["code"] == "compression_failed"
    assert error["part"] == ("history" if directory == HISTORY_DIR else "compaction")
    assert str(settings.data_dir) not in response.text, "no host path in the answer"
    after = state_values(client, conversation_id)
    assert after == before, "S28: nothing published"
    assert workdir_problems(root) == []
    assert_sql_record_complete(settings, conversation_id, sent)

    again = client.post(f"/api/conversations/{conversation_id}/compress")
    assert again.status_code == 200 and again.json()["compressed"] is True
    values = state_values(client, conversation_id)
    assert_checkpoint_consistent(values, root)
    assert assert_history_chain(values, root) == 1
    assert turn(client, conversation_id, TOPICS[3]).status == "succeeded"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_another_users_compress_and_context_answer_404(start_server: Any) -> None:
    agent, _ = kb_agent(compression=MANUAL_ONLY)
    server = start_server(agents=[agent])
    alice = server.client(server.create_user("alice"))
    bob = server.client(server.create_user("bob"))
    conversation_id = alice.post("/api/conversations", json={}).json()["id"]
    for topic in TOPICS[:3]:
        assert turn(alice, conversation_id, topic).status == "succeeded"
    before = state_values(alice, conversation_id)
    for method, path in (
        ("POST", f"/api/conversations/{conversation_id}/compress"),
        ("GET", f"/api/conversations/{conversation_id}/context"),
    ):
        response = bob.request(method, path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", path
    assert state_values(alice, conversation_id) == before, "bob's request changed nothing"
    assert alice.post(f"/api/conversations/{conversation_id}/compress").json()["compressed"] is True


# --- SIGKILL in the middle of a manual compression -----------------------------------------------------


@pytest.fixture
def service(make_settings: Any, tmp_path: Path) -> Iterator[ServiceProcess]:
    control = tmp_path / "control"
    control.mkdir()
    process = scripted_service(make_settings(), control, tmp_path / "service.log")
    yield process
    process.stop()


@pytest.mark.heavy
def test_sigkill_in_the_middle_of_a_manual_compression(service: ServiceProcess, backend: str) -> None:
    settings = service.settings
    token = create_user(settings, "alice")
    service.start()
    client = service.client(token)
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    root = workdir_root(settings, conversation_id)
    sent: list[str] = []
    for topic in TOPICS[:4]:
        sent.append(topic)
        assert turn(client, conversation_id, topic).status == "succeeded"
    before = state_values(client, conversation_id).get("_summarization_event")

    (service.control / "arm-summary_call").touch()
    reached = service.control / "reached-summary_call"

    def killer() -> None:  # kill the process as soon as it is inside the summary call
        deadline = time.monotonic() + 30
        while not reached.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        service.kill()

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        with pytest.raises(httpx.HTTPError):  # the process dies under the request
            client.post(f"/api/conversations/{conversation_id}/compress", timeout=60)
    finally:
        thread.join()
    assert reached.exists(), "the premise: the kill happened inside the manual compression"
    (service.control / "arm-summary_call").unlink()
    assert workdir_problems(root, allow_temp=True) == []

    service.start()
    client = service.client(token)
    values = state_values(client, conversation_id)
    assert values.get("_summarization_event") == before, "the checkpoint is before the compression"
    assert_checkpoint_consistent(values, root, allow_temp=True)
    assert_sql_record_complete(settings, conversation_id, sent)
    # The conversation is idle (no run was created), continues, and compresses again.
    assert client.get(f"/api/conversations/{conversation_id}/status").json()["busy"] is False
    sent.append("重启之后")
    assert turn(client, conversation_id, sent[-1]).status == "succeeded"
    again = client.post(f"/api/conversations/{conversation_id}/compress")
    assert again.status_code == 200 and again.json()["compressed"] is True, again.text
    values = state_values(client, conversation_id)
    assert_checkpoint_consistent(values, root, allow_temp=True)
    assert assert_history_chain(values, root) >= 1
    assert_sql_record_complete(settings, conversation_id, sent)
