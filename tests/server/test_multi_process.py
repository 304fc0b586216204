"""Several service processes: on PostgreSQL they share one queue; on SQLite a second one is refused."""

from __future__ import annotations

import threading

import pytest

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.app import create_app
from ctxpress.app.testing.api import create_conversation, send, wait_for_status
from ctxpress.app.testing.live_server import LiveServer
from tests.fakes import ScriptedChatModel

from .conftest import ServerFactory, SettingsFactory
from .fakes import echo_script


def gated_agent(gate: threading.Event) -> AgentDefinition:
    return AgentDefinition(
        name="echo",
        model=ModelSpec(model=ScriptedChatModel(script=echo_script, gate=gate)),
        tools=(),
        capabilities=(),
    )


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_two_services_share_the_postgres_queue(start_server: ServerFactory) -> None:
    gate_a, gate_b = threading.Event(), threading.Event()
    service_a = start_server(agents=[gated_agent(gate_a)], max_concurrent_runs=1)
    service_b = start_server(agents=[gated_agent(gate_b)], max_concurrent_runs=1)
    token = service_a.create_user("alice")
    via_a, via_b = service_a.client(token), service_b.client(token)

    busy = send(via_a, create_conversation(via_a), "占住 A")
    assert busy["started"] is True
    # A has no free slot: the request waits in the shared queue, and B claims it (SKIP LOCKED).
    waiting = send(via_a, create_conversation(via_a), "由 B 执行")
    assert waiting["queued_because"] == "workers_busy"
    assert wait_for_status(via_b, waiting["run"]["id"], {"running"})["status"] == "running"
    assert service_b.services.worker.active_run_ids == [waiting["run"]["id"]]

    # Cancelling through A a run that B executes: B's heartbeat sees the request.
    assert via_a.post(f"/api/runs/{waiting['run']['id']}/cancel").status_code == 200
    assert wait_for_status(via_a, waiting["run"]["id"], {"cancelled"}, timeout=20)["status"] == "cancelled"
    gate_a.set()
    gate_b.set()
    assert wait_for_status(via_b, busy["run"]["id"], {"succeeded"})["status"] == "succeeded"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_data_dir_serves_one_process(
    start_server: ServerFactory, make_settings: SettingsFactory, capfd: pytest.CaptureFixture[str]
) -> None:
    start_server(agents=[gated_agent(threading.Event())])
    second = LiveServer(create_app(make_settings(), agents=[gated_agent(threading.Event())]))
    with pytest.raises(RuntimeError, match="did not start"):
        second.start()
    # uvicorn logs the lifespan failure on stderr.
    assert "another ctxpress service is already using this data directory" in capfd.readouterr().err
