"""`ctxpress doctor` on conversations built to show each row of the spec's symptom table, on SQLite and
PostgreSQL, against a live service (the doctor opens its data the way `ctxpress serve` does).

Where the symptom comes from a real run, the run is real (the default agent, the built-in offline
model, the knowledge base); where it needs a failure the service cannot be made to produce on demand
(a worker dying in the middle of a compression, a broken middleware leaking the summary), the rows
are written into the service's own tables as that failure would leave them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from typer.testing import CliRunner

from ctxpress.app.cli import app
from ctxpress.app.doctor import DoctorReport, diagnose
from ctxpress.app.models import BUILTIN_LABEL
from ctxpress.app.server.agents_file import load_agents_file
from ctxpress.app.server.db.models import RUN_FAILED, RUN_RUNNING, Conversation
from ctxpress.app.server.repositories.messages import MessageRepository
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.runtime import events
from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.api import create_conversation, read_events, send, wait_for_status
from ctxpress.app.testing.live_server import LiveServer
from tests.conftest import require_shared_data
from tests.server.conftest import (
    ServerFactory,
    SettingsFactory,
    backend,
    database_url,
    make_settings,
    postgres_database,
    start_server,
)

#: The service tests' fixtures (both databases, a live server), used here by name.
SERVICE_FIXTURES = (backend, database_url, make_settings, postgres_database, start_server)

runner = CliRunner()
SMALL_COMPRESSION = {
    "CTXPRESS_SUMMARY_THRESHOLD": "2",
    "CTXPRESS_SUMMARY_TOOL_RESULT_TOKEN_LIMIT": "300",
    "CTXPRESS_SUMMARY_KEEP_MESSAGES": "4",
}
SEARCHES = [
    "全聚德的电话是多少？",
    "故宫附近有什么酒店？",
    "烤鸭 人均消费",
    "颐和园的门票多少钱？",
    "王府井有哪些餐馆？",
]


def cli_options(settings: Settings) -> list[str]:
    found = ["--data-dir", str(settings.data_dir)]
    return [*found, "--database-url", settings.database_url] if settings.database_url else found


def doctor(settings: Settings, conversation_id: str, **kwargs: Any) -> DoctorReport:
    return asyncio.run(diagnose(settings, conversation_id, **kwargs))


def add_knowledge(settings: Settings) -> None:
    added = runner.invoke(
        app, ["kb", "add", str(require_shared_data("kb", "crosswoz")), *cli_options(settings)]
    )
    assert added.exit_code == 0, added.output


def turn(server: LiveServer, token: str, conversation_id: str, text: str) -> list[Any]:
    client = server.client(token)
    run = send(client, conversation_id, text)["run"]
    return read_events(client, run["id"])


@pytest.fixture
def offline_service(
    start_server: ServerFactory, make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[LiveServer, Settings, str]:
    """The service with its default agent (small compression settings) and the CrossWOZ records."""
    for name, value in SMALL_COMPRESSION.items():
        monkeypatch.setenv(name, value)
    settings = make_settings()
    add_knowledge(settings)
    server = start_server()
    return server, settings, server.create_user("alice")


def test_a_healthy_conversation_has_no_findings(offline_service: tuple[LiveServer, Settings, str]) -> None:
    server, settings, token = offline_service
    conversation_id = create_conversation(server.client(token))
    turn(server, token, conversation_id, "全聚德的电话是多少？")
    report = doctor(settings, conversation_id)
    assert report.problems == [], [finding.summary for finding in report.problems]
    assert report.finding("started_not_completed").data["events"] == 2  # L1 started + completed
    assert "after L1" in " ".join(report.finding("context_too_large").details)
    result = runner.invoke(app, ["doctor", conversation_id, *cli_options(settings)], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "no problems found" in result.stdout and result.stdout.count("ok ") >= 5


def test_a_compression_that_started_and_never_completed_names_the_run_and_its_error(
    offline_service: tuple[LiveServer, Settings, str],
) -> None:
    server, settings, token = offline_service
    conversation_id = create_conversation(server.client(token))
    turn(server, token, conversation_id, "全聚德的电话是多少？")
    crash = "the run's lease expired: its worker stopped while the run was executing"

    async def worker_died_during_a_summary() -> str:
        # What a worker killed between `started` and the model call leaves behind, after the recovery sweep.
        async with server.services.database.session() as session:
            conversation = await session.get(Conversation, conversation_id)
            assert conversation is not None
            runs = RunRepository(session)
            run = await runs.add(
                conversation, input={"text": "烤鸭 人均消费", "message_id": "m-crash"}, status=RUN_RUNNING
            )
            await server.services.events.append(session, run.id, events.RUN_STARTED, {"run_id": run.id})
            await server.services.events.append(
                session,
                run.id,
                events.CONTEXT_COMPRESSION,
                {"type": "context_compression", "status": "started", "level": "l2", "tokens_before": 5123},
            )
            runs.finish(run, RUN_FAILED, crash)
            await server.services.events.append(session, run.id, events.ERROR, {"message": crash})
            await server.services.events.append(
                session, run.id, events.RUN_FINISHED, {"status": RUN_FAILED, "error": crash}
            )
            await session.commit()
            return run.id

    run_id = server.call(worker_died_during_a_summary())
    finding = doctor(settings, conversation_id).finding("started_not_completed")
    assert finding.status == "problem"
    assert (
        run_id in finding.summary
        and "l2 compression started" in finding.summary
        and "5123" in finding.summary
    )
    assert any(crash in detail for detail in finding.details)
    assert any("run_finished" not in detail and "finished: failed" in detail for detail in finding.details)


def test_old_content_is_found_through_the_checkpoint_until_the_history_file_goes(
    offline_service: tuple[LiveServer, Settings, str],
) -> None:
    server, settings, token = offline_service
    conversation_id = create_conversation(server.client(token))
    levels: list[str] = []
    for question in SEARCHES:
        levels += [
            e.data["level"]
            for e in turn(server, token, conversation_id, question)
            if e.type == "context_compression"
        ]
        if "l2" in levels:
            break
    assert "l2" in levels
    found = doctor(settings, conversation_id).finding("old_content_missing")
    assert found.status == "ok" and "read back in full" in found.summary
    history = found.summary.split("the history file ", 1)[1].split(" ", 1)[0]
    assert history.startswith("outputs/conversation_history/")

    (server.services.workdirs.for_conversation(conversation_id).root / history).unlink()
    missing = doctor(settings, conversation_id).finding("old_content_missing")
    assert (
        missing.status == "problem"
        and f"the history file {history} named by the checkpoint is missing" in missing.summary
    )
    assert any("cutoff_index" in detail for detail in missing.details)


def test_thread_busy_says_who_holds_the_conversation(
    offline_service: tuple[LiveServer, Settings, str],
) -> None:
    server, settings, token = offline_service
    client = server.client(token)
    conversation_id = create_conversation(client)
    waiting = send(client, conversation_id, "帮我查一下")["run"]  # too vague: the agent asks (ask_user)
    wait_for_status(client, waiting["id"], {"waiting_input"})
    queued = send(client, conversation_id, "烤鸭")
    assert queued["queued"] and queued["queued_because"] == "waiting_input"

    finding = doctor(settings, conversation_id).finding("thread_busy")
    assert finding.status == "problem" and "waiting for the user's answer" in finding.summary
    assert finding.data == {"reason": "waiting_input", "active_run_id": waiting["id"], "queued": 1}
    details = "\n".join(finding.details)
    assert (
        "你想在知识库里查什么" in details
        and queued["run"]["id"] in details
        and f"/api/runs/{waiting['id']}/resume" in details
    )
    busy = client.post(f"/api/conversations/{conversation_id}/compress")
    assert (
        busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
    )  # what the doctor explains

    result = runner.invoke(app, ["doctor", conversation_id, *cli_options(settings)], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "FOUND  manual compression returns thread_busy" in result.stdout
    as_json = runner.invoke(app, ["doctor", conversation_id, "--json", *cli_options(settings)])
    statuses = {item["symptom"]: item["status"] for item in json.loads(as_json.stdout)["findings"]}
    assert statuses["thread_busy"] == "problem" and statuses["summary_in_front_end"] == "ok"


AGENTS_TOML = """
[agents.tight]
default = true
description = "内置离线模型，上下文窗口很小"
tools = ["query_kb", "ask_user", "ls", "read_file", "grep", "write_file", "edit_file"]

[agents.tight.model]
model = "builtin"
kwargs = { context_window = 1500 }

[agents.tight.compression]
summary_threshold = 2
summary_keep_messages = 4
summary_tool_result_token_limit = 300
"""


def test_a_context_still_too_large_is_explained_with_the_figures(
    start_server: ServerFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    agents_file = tmp_path / "agents.toml"
    agents_file.write_text(AGENTS_TOML, encoding="utf-8")
    settings = make_settings(agents_file=agents_file)
    add_knowledge(settings)
    server = start_server(agents=load_agents_file(agents_file))
    token = server.create_user("alice")
    conversation_id = create_conversation(server.client(token))
    turn(server, token, conversation_id, "全聚德的电话是多少？")

    finding = doctor(settings, conversation_id).finding("context_too_large")
    assert finding.status == "problem"
    assert "summary_threshold (2,048) is not below the model's context window (1,500)" in finding.summary
    details = "\n".join(finding.details)
    assert "7 tool schemas" in details and "after L1 (deterministic compaction)" in details
    assert "summary_keep_messages 4" in details and "largest in the L1 view" in details

    result = runner.invoke(
        app,
        ["doctor", conversation_id, "--agents", str(agents_file), *cli_options(settings)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 1 and "FOUND  the task still says the context is too large" in result.stdout


def test_summary_text_in_the_chat_record_is_found(offline_service: tuple[LiveServer, Settings, str]) -> None:
    server, settings, token = offline_service
    conversation_id = create_conversation(server.client(token))
    levels: list[str] = []
    for question in SEARCHES:
        levels += [
            e.data["level"]
            for e in turn(server, token, conversation_id, question)
            if e.type == "context_compression"
        ]
        if "l2" in levels:
            break
    assert doctor(settings, conversation_id).finding("summary_in_front_end").status == "ok"
    state = server.call(
        server.services.conversations.agent_state(server.call(_conversation(server, conversation_id)))
    )
    summary = state.values["_summarization_event"]["summary_message"]["data"]["content"]

    async def leak_the_summary() -> None:
        # What a middleware calling the summary model without TAG_NOSTREAM would leave in the record (S21).
        async with server.services.database.session() as session:
            await MessageRepository(session).append(
                conversation_id, None, AIMessage(content=summary.split("\n\n", 1)[1], id="leaked-summary")
            )
            await session.commit()

    server.call(leak_the_summary())
    finding = doctor(settings, conversation_id).finding("summary_in_front_end")
    assert finding.status == "problem" and "contains summary text" in finding.summary
    assert any("TAG_NOSTREAM" in detail for detail in finding.details)
    assert summary.split("\n\n", 1)[1].startswith(BUILTIN_LABEL)


def test_summary_text_announced_on_a_run_stream_is_found(
    offline_service: tuple[LiveServer, Settings, str],
) -> None:
    """Streamed text lives only as the stored `message` events that replace the live deltas (issue
    17): summary text announced there is a leak to the front end (S21) even when the chat record
    itself is clean."""
    server, settings, token = offline_service
    conversation_id = create_conversation(server.client(token))
    run_id = ""
    for question in SEARCHES:
        streamed = turn(server, token, conversation_id, question)
        run_id = next(e.data["run_id"] for e in streamed if e.type == "run_started")
        if any(e.type == "context_compression" and e.data["level"] == "l2" for e in streamed):
            break
    state = server.call(
        server.services.conversations.agent_state(server.call(_conversation(server, conversation_id)))
    )
    summary = state.values["_summarization_event"]["summary_message"]["data"]["content"]
    assert doctor(settings, conversation_id).finding("summary_in_front_end").status == "ok"

    async def announce_the_summary() -> None:
        async with server.services.database.session() as session:
            await server.services.events.append(
                session,
                run_id,
                events.MESSAGE,
                {"message_id": "leaked", "role": "assistant", "content": summary.split("\n\n", 1)[1]},
            )
            await session.commit()

    server.call(announce_the_summary())
    finding = doctor(settings, conversation_id).finding("summary_in_front_end")
    assert finding.status == "problem" and "message events" in finding.summary, finding


async def _conversation(server: LiveServer, conversation_id: str) -> Conversation:
    async with server.services.database.session() as session:
        conversation = await session.get(Conversation, conversation_id)
    assert conversation is not None
    return conversation


def test_an_unknown_conversation_is_an_error(make_settings: SettingsFactory) -> None:
    settings = make_settings()
    result = runner.invoke(app, ["doctor", "f" * 32, *cli_options(settings)])
    assert result.exit_code == 2 and "no conversation" in result.stderr
