"""The service process is killed (SIGKILL) in the middle of an automatic compression, then restarted.

A real service process (`service_process.py`) stops at an armed point and is killed there; a new
process on the same data directory and database takes over. Oracles afterwards:
- every user message is in SQL (S1), the killed run ends `failed` with a reason (lease recovery);
- the checkpoint is either before the compression (the previous event) or after it (a new event
  whose history file is whole) — never between;
- every history file is whole or absent; a half-written temporary file is never listed or served;
- the conversation continues, and compresses again.
(Manual compression killed half-way: `test_manual_endpoint.py`.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import ToolMessage

from ctxpress.app.server.runtime.unanswered_calls import LEASE_EXPIRED_ERROR, PHRASES, unanswered_call_text
from ctxpress.app.testing.api import send, wait_for_status
from ctxpress.app.testing.processes import ServiceProcess, create_user
from tests.server.fakes import report_text

from .faults import HISTORY_DIR, TEMP_PREFIX, workdir_problems
from .processes import LEASE_SECONDS, scripted_service
from .support import (
    TOPICS,
    assert_checkpoint_consistent,
    assert_sql_record_complete,
    sql_messages,
    state_messages,
    state_values,
    turn,
    workdir_root,
)


@pytest.fixture
def service(make_settings: Any, tmp_path: Path) -> Iterator[ServiceProcess]:
    control = tmp_path / "control"
    control.mkdir()
    process = scripted_service(make_settings(), control, tmp_path / "service.log")
    yield process
    process.stop()


def wait_for_point(reached: Path, timeout: float = 30) -> None:
    """Until the service announces it stopped at an armed point."""
    deadline = time.monotonic() + timeout
    while not reached.exists():
        assert time.monotonic() < deadline, f"{reached.name} was never reached"
        time.sleep(0.05)


def run_until_armed_point(
    client: httpx.Client, conversation_id: str, point: Path
) -> tuple[list[str], str, Any]:
    """Send turns until the service stops at the armed point.

    Returns the texts sent, the run held at the point, and the checkpoint's summary event from
    before that run started (what "before the compression" means)."""
    sent: list[str] = []
    for topic in TOPICS:
        event_before = state_values(client, conversation_id).get("_summarization_event")
        sent.append(topic)
        run_id = send(client, conversation_id, sent[-1])["run"]["id"]
        deadline = time.monotonic() + 30
        while not point.exists():
            status = client.get(f"/api/runs/{run_id}").json()["status"]
            if status in ("succeeded", "failed"):
                break
            assert time.monotonic() < deadline, "the run neither finished nor reached the point"
            time.sleep(0.05)
        if point.exists():
            return sent, run_id, event_before
        assert status == "succeeded"
    raise AssertionError(f"{point.name} was never reached")


@pytest.mark.heavy
@pytest.mark.parametrize("point", ["history_write", "summary_call", "tool_after_summary"])
def test_sigkill_in_the_middle_of_an_automatic_compression(
    service: ServiceProcess, point: str, backend: str
) -> None:
    settings = service.settings
    token = create_user(settings, "alice")
    service.start()
    client = service.client(token)
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    root = workdir_root(settings, conversation_id)

    # One turn without the point armed, so an earlier event may exist; then arm and go on.
    assert turn(client, conversation_id, "开场").status == "succeeded"
    (service.control / f"arm-{point}").touch()
    reached = service.control / f"reached-{point}"
    sent, held_run, before_event = run_until_armed_point(client, conversation_id, reached)
    sent.insert(0, "开场")
    service.kill()
    (service.control / f"arm-{point}").unlink()

    # What the kill left on disk: the history file is whole or absent, never half of it.
    assert workdir_problems(root, allow_temp=True) == []
    leftovers = sorted(p.name for p in (root / HISTORY_DIR).glob(TEMP_PREFIX + "*"))
    if point == "history_write":
        assert leftovers, "the premise: the kill interrupted a history write"
    elif point == "tool_after_summary":
        assert not leftovers, "the files were whole before the summary's event was checkpointed"
    # summary_call: the history file and the conversation file are written while the summary model
    # runs (`asave_and_summarize`), so the kill may or may not catch one of them half-written.

    service.start()
    client = service.client(token)
    held = wait_for_status(client, held_run, {"failed"}, timeout=30 + 3 * LEASE_SECONDS)
    assert held["error"] == LEASE_EXPIRED_ERROR
    values = state_values(client, conversation_id)
    event = values.get("_summarization_event")
    if point == "tool_after_summary":
        # After: the model node finished, so its new event is in the checkpoint, with a whole file.
        assert event is not None and event != before_event and event["file_path"]
    else:
        # Before: the compression never reached the checkpoint.
        assert event == before_event
    assert_checkpoint_consistent(values, root, allow_temp=True)
    assert_sql_record_complete(settings, conversation_id, sent)
    listing = client.get(f"/api/conversations/{conversation_id}/files").json()["files"]
    assert not any(TEMP_PREFIX in item["path"] for item in listing), "a half-written file is listed"
    for name in leftovers:
        served = client.get(f"/api/conversations/{conversation_id}/files/{HISTORY_DIR}/{name}")
        assert served.status_code in (400, 404), "a half-written file is served"

    # The conversation continues and compresses again, with a whole history file.
    for topic in ("重启之后", *TOPICS[:3]):
        sent.append(topic)
        assert turn(client, conversation_id, topic).status == "succeeded"
    values = state_values(client, conversation_id)
    assert values["_summarization_event"]["file_path"]
    assert values["_summarization_event"] != before_event
    assert_checkpoint_consistent(values, root, allow_temp=True)
    assert_sql_record_complete(settings, conversation_id, sent)


@pytest.mark.heavy
def test_sigkill_while_the_last_checkpoint_lags_behind_a_finished_tool(
    service: ServiceProcess, backend: str
) -> None:
    """LangGraph saves checkpoints in the background while the next step runs: killed then, the
    tool's result is only a pending write. The next run must not answer that call a second time
    (which left an orphaned tool result in the state, and every later request invalid)."""
    settings = service.settings
    token = create_user(settings, "alice")
    service.start()
    client = service.client(token)
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    root = workdir_root(settings, conversation_id)
    assert turn(client, conversation_id, "开场").status == "succeeded"
    (service.control / "arm-slow_checkpoint").touch()
    (service.control / "arm-model_after_tool").touch()
    reached = service.control / "reached-model_after_tool"
    held_run = send(client, conversation_id, TOPICS[0])["run"]["id"]
    wait_for_point(reached)
    service.kill()
    for point in ("slow_checkpoint", "model_after_tool"):
        (service.control / f"arm-{point}").unlink()

    service.start()
    client = service.client(token)
    assert wait_for_status(client, held_run, {"failed"}, timeout=30 + 3 * LEASE_SECONDS)["status"] == "failed"
    sent = ["开场", TOPICS[0]]
    for topic in ("重启之后", *TOPICS[1:3]):
        sent.append(topic)
        assert turn(client, conversation_id, topic).status == "succeeded"
    values = state_values(client, conversation_id)
    assert_checkpoint_consistent(values, root, allow_temp=True)  # provider-valid: no orphan
    assert_sql_record_complete(settings, conversation_id, sent)
    # The lost result was given back (once), not replaced by a patch saying it is unknown.
    tools = [m.content for m in state_messages(values) if isinstance(m, ToolMessage)]
    patches = {text for phrases in PHRASES.values() for text in phrases}
    assert report_text(TOPICS[0]) in tools and not patches & set(tools)
    rows = sql_messages(settings, conversation_id)
    assert [r.content for r in rows if r.role == "tool"].count(report_text(TOPICS[0])) == 1


@pytest.mark.heavy
def test_after_a_sigkill_in_a_tool_call_the_model_hears_the_service_restarted(
    service: ServiceProcess, backend: str
) -> None:
    """Recovery answers the call the kill left open with what happened -- the service restarted
    during the call, its result is unknown -- in the conversation's language; not "the user did
    not answer"."""
    service.extra_env["CTXPRESS_TEST_AGENT"] = "plain"
    settings = service.settings
    token = create_user(settings, "alice")
    service.start()
    for opening, question, after, language in (
        ("开场", "季度营收", "重启之后呢？", "zh"),
        ("Hello there", "the quarterly revenue report", "What happened?", "en"),
    ):
        client = service.client(token)
        conversation_id = client.post("/api/conversations", json={}).json()["id"]
        assert turn(client, conversation_id, opening).status == "succeeded"
        (service.control / "arm-tool_call").touch()
        held_run = send(client, conversation_id, question)["run"]["id"]
        wait_for_point(service.control / "reached-tool_call")
        service.kill()
        for name in ("arm-tool_call", "reached-tool_call"):
            (service.control / name).unlink()

        service.start()
        client = service.client(token)
        wait_for_status(client, held_run, {"failed"}, timeout=30 + 3 * LEASE_SECONDS)
        assert turn(client, conversation_id, after).status == "succeeded"
        values = state_values(client, conversation_id)
        tools = [m for m in state_messages(values) if isinstance(m, ToolMessage)]
        expected = unanswered_call_text("service_restarted", language)
        assert [m.content for m in tools] == [report_text(opening), expected, report_text(after)]
        assert_checkpoint_consistent(values, workdir_root(settings, conversation_id), allow_temp=True)
        recorded = [r.content for r in sql_messages(settings, conversation_id) if r.role == "tool"]
        assert expected in recorded, "the chat record holds the same answer"
