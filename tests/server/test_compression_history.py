"""Issue 20, item 3: `GET …/compressions` lists a conversation's compressions from the record —
automatic ones from its runs' events, manual ones from their own table — one item per compression
(never a `started` half, never an L1 pass that changed nothing), numbered summaries with the id of
the first message each kept; on SQLite and PostgreSQL, and after a restart (it is the record)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.db.models import RunEvent
from ctxpress.app.server.usecases.compression_history import _from_event
from ctxpress.app.testing.api import create_conversation, read_events, send
from ctxpress.config import CompressionConfig
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory
from .fakes import echo_script
from .test_vocabulary import LONG_TEXT, summary_script


def agent(name: str, threshold_k: float) -> AgentDefinition:
    return AgentDefinition(
        name=name,
        model=ModelSpec(model=ScriptedChatModel(script=echo_script)),
        summary_model=ModelSpec(model=ScriptedChatModel(script=summary_script, model_name="summarizer")),
        tools=(),
        capabilities=("context_compression",),
        compression=CompressionConfig(summary_threshold=threshold_k, summary_keep_messages=2),
    )


def lc_ids(client: httpx.Client, conversation_id: str) -> list[str]:
    items = client.get(f"/api/conversations/{conversation_id}/messages").json()["items"]
    return [item["message"]["data"]["id"] for item in items]


def test_automatic_and_manual_compressions_from_the_record(start_server: ServerFactory) -> None:
    agents = [agent("tight", 1), agent("roomy", 64)]
    server = start_server(agents=agents)
    token = server.create_user("alice")
    alice = server.client(token)

    tight = create_conversation(alice, "tight")
    streamed = []
    for turn in range(3):
        run_id = send(alice, tight, f"第{turn}轮：{LONG_TEXT}")["run"]["id"]
        streamed += [
            event.data for event in read_events(alice, run_id) if event.type == "context_compression"
        ]
    listed = alice.get(f"/api/conversations/{tight}/compressions").json()["items"]
    ended = [event for event in streamed if event["status"] != "started"]
    assert len(listed) == len(ended) > 0  # one item per compression, no `started` halves
    assert all(item["trigger"] == "automatic" and item["run_id"] for item in listed)
    summaries = [item for item in listed if item["level"] == "l2"]
    assert [item["summary_number"] for item in summaries] == list(range(1, len(summaries) + 1))
    ids = lc_ids(alice, tight)
    for item in summaries:
        assert item["tokens_after"] < item["tokens_before"]
        assert item["kept_from_message_id"] == ids[item["cutoff_index"]]

    roomy = create_conversation(alice, "roomy")
    for turn in range(3):
        read_events(alice, send(alice, roomy, f"第{turn}轮：你好")["run"]["id"])
    assert alice.get(f"/api/conversations/{roomy}/compressions").json()["items"] == []
    answer = alice.post(f"/api/conversations/{roomy}/compress").json()
    assert answer["compressed"] is True
    server.stop()

    restarted = start_server(agents=agents)  # the same data directory and database
    alice = restarted.client(token)
    (manual,) = alice.get(f"/api/conversations/{roomy}/compressions").json()["items"]
    assert manual["trigger"] == "manual" and manual["level"] == "l2" and manual["status"] == "completed"
    assert (manual["tokens_before"], manual["tokens_after"]) == (
        answer["tokens_before"],
        answer["tokens_after"],
    )
    assert manual["cutoff_index"] == answer["cutoff_index"] and manual["summary_number"] == 1
    assert manual["kept_from_message_id"] == lc_ids(alice, roomy)[answer["cutoff_index"]]
    assert manual["file_path"] == answer["file_path"]
    other = restarted.client(restarted.create_user("bob"))
    assert other.get(f"/api/conversations/{roomy}/compressions").status_code == 404


def event(data: dict[str, object]) -> RunEvent:
    return RunEvent(id=1, run_id="r", type="context_compression", data=data, created_at=datetime.now(UTC))


def test_only_l1_passes_that_wrote_a_file_are_listed() -> None:
    base = {"type": "context_compression", "level": "l1", "tokens_before": 900}
    assert _from_event(event({**base, "status": "started"})) is None
    quiet = {**base, "status": "completed", "tokens_after": 900, "tokens_saved": 0, "offloaded": 0}
    assert _from_event(event(quiet)) is None
    # A later call's pass repeats the earlier offload in its view: saved again, nothing written.
    repeated = {**quiet, "tokens_after": 400, "tokens_saved": 500, "offloaded": 1, "files_written": []}
    assert _from_event(event(repeated)) is None
    wrote = {**repeated, "offloaded": 2, "files_written": ["outputs/large_tool_results/q-1.txt"]}
    listed = _from_event(event(wrote))
    assert listed is not None and listed["files_written"] == wrote["files_written"]
    failed = _from_event(event({**base, "status": "failed", "error": "disk full"}))
    assert failed is not None and failed["error"] == "disk full"
