"""Issue 16: what the service answered 202 for survives a SIGKILL, and after a SIGKILL mid-run the chat
record and the checkpoint agree on what the model saw (the reason for `durability="sync"`).

A real service process (`service_process.py`) on SQLite and PostgreSQL is killed, a new one takes
over the same data directory and database.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpress.app.server.runtime.unanswered_calls import LEASE_EXPIRED_ERROR
from ctxpress.app.testing.api import send, wait_for_status
from ctxpress.app.testing.processes import ServiceProcess, create_user

from .processes import LEASE_SECONDS, scripted_service
from .support import TOPICS, state_messages, state_values, turn
from .test_sigkill import wait_for_point

RECOVERY_TIMEOUT = 30 + 3 * LEASE_SECONDS


@pytest.fixture
def service(make_settings: Any, tmp_path: Path) -> Iterator[ServiceProcess]:
    control = tmp_path / "control"
    control.mkdir()
    process = scripted_service(make_settings(), control, tmp_path / "service.log")
    yield process
    process.stop()


def recorded(client: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/conversations/{conversation_id}/messages", params={"limit": 500})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def assert_ended_with_a_reason(run: dict[str, Any]) -> None:
    """Executed, or failed saying why (never left queued or running, never failed silently)."""
    assert run["status"] in ("succeeded", "failed"), run
    if run["status"] == "failed":
        assert run["error"], run


@pytest.mark.heavy
def test_sigkill_right_after_202_loses_no_message(service: ServiceProcess, backend: str) -> None:
    """POST, SIGKILL at once, restart: the message is in `/messages` exactly once, and its run was
    executed or failed with a reason. Twice: a run that starts at once, and one queued behind a run
    held inside a tool call (so the kill certainly comes before it starts)."""
    settings = service.settings
    token = create_user(settings, "alice")
    service.start()
    client = service.client(token)
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    assert turn(client, conversation_id, "开场").status == "succeeded"

    accepted = send(client, conversation_id, "刚发出的消息")
    service.kill()
    service.start()
    client = service.client(token)
    run = wait_for_status(client, accepted["run"]["id"], {"succeeded", "failed"}, timeout=RECOVERY_TIMEOUT)
    assert_ended_with_a_reason(run)
    texts = [item["content"] for item in recorded(client, conversation_id) if item["role"] == "user"]
    assert texts.count("刚发出的消息") == 1, texts

    (service.control / "arm-tool_call").touch()
    held = send(client, conversation_id, TOPICS[0])["run"]["id"]
    wait_for_point(service.control / "reached-tool_call")
    queued = send(client, conversation_id, "排队的消息")
    assert queued["queued"] is True
    service.kill()
    for name in ("arm-tool_call", "reached-tool_call"):
        (service.control / name).unlink()
    service.start()
    client = service.client(token)
    assert wait_for_status(client, held, {"failed"}, timeout=RECOVERY_TIMEOUT)["error"] == LEASE_EXPIRED_ERROR
    run = wait_for_status(client, queued["run"]["id"], {"succeeded", "failed"}, timeout=RECOVERY_TIMEOUT)
    assert_ended_with_a_reason(run)
    texts = [item["content"] for item in recorded(client, conversation_id) if item["role"] == "user"]
    assert texts == ["开场", "刚发出的消息", TOPICS[0], "排队的消息"]
    assert turn(client, conversation_id, "重启之后").status == "succeeded"


@pytest.mark.heavy
def test_after_a_sigkill_mid_run_record_and_checkpoint_agree(service: ServiceProcess, backend: str) -> None:
    """Killed inside a tool call whose model step's checkpoint save is slow (5 s). With
    `durability="sync"` the tool starts only once that save is done, so the checkpoint holds the
    model's tool call the chat record shows; the next run answers that call and goes on, and the
    record and the state hold the same messages. (With LangGraph's default, "async", the save ran
    in the background during the tool call: the kill left the call only as a pending write, the next
    run dropped it, and the record kept a call the model never saw again.)"""
    settings = service.settings
    token = create_user(settings, "alice")
    service.start()
    client = service.client(token)
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    assert turn(client, conversation_id, "开场").status == "succeeded"
    for point in ("slow_checkpoint_after_call", "tool_call"):
        (service.control / f"arm-{point}").touch()
    held = send(client, conversation_id, TOPICS[0])["run"]["id"]
    wait_for_point(service.control / "reached-tool_call", timeout=60)
    service.kill()
    for name in ("arm-slow_checkpoint_after_call", "arm-tool_call", "reached-tool_call"):
        (service.control / name).unlink()

    service.start()
    client = service.client(token)
    assert wait_for_status(client, held, {"failed"}, timeout=RECOVERY_TIMEOUT)["error"] == LEASE_EXPIRED_ERROR
    assert turn(client, conversation_id, "重启之后").status == "succeeded"
    checkpoint_ids = [message.id for message in state_messages(state_values(client, conversation_id))]
    record_ids = [item["message"]["data"]["id"] for item in recorded(client, conversation_id)]
    # The same messages (the answer to the open call is recorded when the next run gives it, after
    # that run's message, which is in the record since its intake: the order differs there only).
    assert sorted(checkpoint_ids) == sorted(record_ids)
    assert len(set(record_ids)) == len(record_ids)
