"""A full garbage collection does not stall the service for a quarter of a second.

Python's collector visits every tracked object when it runs a full (generation 2) collection, which it
does on its own once enough objects have survived younger ones. A service process holds hundreds of
thousands of objects made at startup (LangChain, LangGraph, SQLAlchemy, FastAPI, the compiled graphs)
that live as long as the process: on a slow two-core machine each such collection paused the event
loop, and every request of every user in it, for 215-256 ms (seen as the one slow probe in
`test_lock_starvation.py`). `ctxpress serve` moves what startup made out of the collector's reach
(`gc.freeze()`), so a full collection visits only what the service made since.

The measurement is taken inside a real `ctxpress serve` process (`heap_probe.py`) after a turn, and
compared with the same collection in the same process with its startup objects back in reach.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ctxpress.app.testing.processes import ServiceProcess, create_user

from .support import turn
from .test_sigkill import wait_for_point

PROBE = (sys.executable, str(Path(__file__).with_name("heap_probe.py")), "{port}", "{control}")
#: A full collection as served visits at most this share of what it visits with nothing frozen.
MAX_SHARE = 0.25


def test_a_full_collection_visits_only_what_the_service_made_since_startup(
    make_settings: Any, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    settings = make_settings()
    service = ServiceProcess(settings, control, tmp_path / "serve.log", command=PROBE, tuning_env={})
    user_token = create_user(settings, "alice")
    service.start()
    try:
        client = service.client(user_token)
        conversation_id = client.post("/api/conversations", json={}).json()["id"]
        assert turn(client, conversation_id, "你好").status == "succeeded"
        (control / "measure").touch()
        wait_for_point(report_file := control / "heap.json", timeout=60)
    finally:
        service.stop()
    report = json.loads(report_file.read_text())
    as_served, unfrozen = report["as_served"], report["unfrozen"]
    assert as_served["tracked"] <= MAX_SHARE * unfrozen["tracked"], report
    assert as_served["seconds"] <= MAX_SHARE * unfrozen["seconds"], report
