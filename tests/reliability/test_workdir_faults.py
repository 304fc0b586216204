"""Workdir writes fail during L1, during the history write of automatic L2, and during manual
compression (S13, S27, S28). Every fault is made twice: by the kernel (`real`) and by injecting the
same errno into the system calls of `LocalWorkdir` (`injected`); see `faults.py`.

Oracles, after the faulty turn and again after the conversation went on without the fault:
- SQL: every user message and every full tool result is in the chat record (S1);
- checkpoint: the summary event names a whole history file or says none could be saved (S27), and
  no state message is a view of a missing file;
- workdir: no temporary or half-written file, nothing in the faulty directory;
- what the model saw: never "saved at <path>" for a file that is not there (S13).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from ctxpress import CompressionConfig, ContextCompressionMiddleware, LocalWorkdir
from ctxpress.manual import ManualCompressionError, compress_now
from ctxpress.summary.recovery import recover_messages
from tests.fakes import ScriptedChatModel, tool_call
from tests.server.fakes import report_text

from .faults import FAULT_FORMS, FAULT_KINDS, FILLER_NAME, HISTORY_DIR, LARGE_DIR, FaultKind, workdir_problems
from .support import (
    TOPICS,
    assert_checkpoint_consistent,
    assert_offload_references_exist,
    assert_sql_record_complete,
    kb_agent,
    state_messages,
    state_values,
    turn,
    workdir_root,
)

FORMS = sorted(FAULT_FORMS)
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _files_under(root: Path, directory: str) -> list[Path]:
    base = root / directory
    if not base.exists():
        return []
    return sorted(path for path in base.rglob("*") if path.is_file() and path.name != FILLER_NAME)


# --- automatic compression, through the service ------------------------------------------------------


@SQLITE_ONLY
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_s13_l1_write_fault_keeps_originals_and_the_run_succeeds(
    start_server: Any, kind: FaultKind, form: str
) -> None:
    agent, recorder = kb_agent()
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)

    with FAULT_FORMS[form](root / LARGE_DIR, kind) as fault:
        faulty = turn(client, conversation_id, TOPICS[0])
        assert faulty.status == "succeeded", faulty.run
        assert _files_under(root, LARGE_DIR) == []
    if form == "injected":
        assert fault.refused >= 1, "the premise: L1 tried to store the result and was refused"
    completed = faulty.compression("completed")
    assert completed and completed[-1].get("offload_failures", 0) >= 1, faulty.compression()
    # S13: the model got the whole result (or a summary of it), never a view of a file that is absent.
    assert assert_offload_references_exist(recorder.requests, root) == 0
    assert any(report_text(TOPICS[0]) == m.content for r in recorder.requests for m in r)

    # Without the fault the conversation goes on and L1 stores the results this time.
    healthy = turn(client, conversation_id, TOPICS[1])
    assert healthy.status == "succeeded"
    assert _files_under(root, LARGE_DIR)
    assert assert_offload_references_exist(recorder.requests, root) >= 1
    values = state_values(client, conversation_id)
    assert_checkpoint_consistent(values, root)
    assert_sql_record_complete(settings, conversation_id, TOPICS[:2])
    stored = [m.content for m in state_messages(values) if isinstance(m, ToolMessage)]
    assert stored == [report_text(TOPICS[0]), report_text(TOPICS[1])], (
        "S2: the checkpoint keeps results whole"
    )


@SQLITE_ONLY
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_s27_history_write_fault_in_automatic_l2(start_server: Any, kind: FaultKind, form: str) -> None:
    agent, recorder = kb_agent()
    server = start_server(agents=[agent])
    client = server.client(server.create_user("alice"))
    conversation_id = client.post("/api/conversations", json={}).json()["id"]
    settings = server.services.settings
    root = workdir_root(settings, conversation_id)

    sent: list[str] = []
    with FAULT_FORMS[form](root / HISTORY_DIR, kind):
        l2: list[dict[str, Any]] = []
        for topic in TOPICS:
            sent.append(topic)
            faulty = turn(client, conversation_id, topic)
            assert faulty.status == "succeeded", faulty.run
            l2 = [e for e in faulty.compression("completed") if e["level"] == "l2"]
            if l2:
                break
        assert l2, "the premise: a summary was made while the history directory was faulty"
        assert l2[-1]["file_path"] is None and l2[-1]["history_error"]
        assert str(settings.data_dir) not in l2[-1]["history_error"], "no host path in events"
        assert _files_under(root, HISTORY_DIR) == []
        values = state_values(client, conversation_id)
        event = values["_summarization_event"]
        assert event["file_path"] is None  # S27: summarised without a history file, said so
        assert_checkpoint_consistent(values, root)

    # The conversation continues; the next summary saves its history again.
    saved_history = False
    for topic in TOPICS[len(sent) :]:
        sent.append(topic)
        healthy = turn(client, conversation_id, topic)
        assert healthy.status == "succeeded"
        if any(e["level"] == "l2" and e["file_path"] for e in healthy.compression("completed")):
            saved_history = True
            break
    assert saved_history, "no summary after the fault was lifted"
    values = state_values(client, conversation_id)
    assert_checkpoint_consistent(values, root)
    assert_sql_record_complete(settings, conversation_id, sent)
    assert_offload_references_exist(recorder.requests, root)
    assert workdir_problems(root) == []


# --- manual compression, at the engine level (the HTTP endpoint is in test_manual_endpoint.py) -------

THREAD = {"configurable": {"thread_id": "manual-faults"}}
MANUAL_CONFIG = CompressionConfig(
    summary_threshold=100, summary_keep_messages=2, summary_tool_result_token_limit=100
)


def _manual_agent(workdir: LocalWorkdir, turns: int = 3) -> Any:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def fetch(topic: str) -> str:
        """Fetch a long report."""
        return report_text(topic)

    script: list[Any] = []
    for index in range(turns):
        script += [tool_call("fetch", {"topic": TOPICS[index]}, f"m{index}"), AIMessage(f"结论{index}")]
    middleware = ContextCompressionMiddleware(MANUAL_CONFIG, workdir=workdir)
    agent = create_agent(
        ScriptedChatModel(script=script), [fetch], middleware=[middleware], checkpointer=InMemorySaver()
    )
    for index in range(turns):
        agent.invoke({"messages": [HumanMessage(TOPICS[index])]}, THREAD)
    return agent


async def _compress(agent: Any, workdir: LocalWorkdir) -> Any:
    values = (await agent.aget_state(THREAD)).values
    return await compress_now(
        values["messages"],
        values.get("_summarization_event"),
        config=MANUAL_CONFIG,
        workdir=workdir,
        summary_model=ScriptedChatModel(script=[AIMessage("手动摘要")]),
        thread_id="manual-faults",
    )


@pytest.mark.parametrize("directory", [HISTORY_DIR, LARGE_DIR])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", FAULT_KINDS)
async def test_s28_manual_compression_write_fault_publishes_nothing(
    tmp_path: Path, kind: FaultKind, form: str, directory: str
) -> None:
    root = tmp_path / "wd"
    workdir = LocalWorkdir(root)
    agent = _manual_agent(workdir)
    before = (await agent.aget_state(THREAD)).values
    assert before.get("_summarization_event") is None and len(before["messages"]) == 12

    with FAULT_FORMS[form](root / directory, kind):
        with pytest.raises(ManualCompressionError) as failure:
            await _compress(agent, workdir)
        assert _files_under(root, directory) == []
    assert failure.value.part == ("history" if directory == HISTORY_DIR else "compaction")
    assert str(root) not in str(failure.value), "no host path in the error"
    # S28: no new summary event; the checkpoint and the workdir are as they were.
    after = (await agent.aget_state(THREAD)).values
    assert after.get("_summarization_event") is None
    assert [m.id for m in after["messages"]] == [m.id for m in before["messages"]]
    assert workdir_problems(root) == []

    # Without the fault, both halves succeed and the event goes in through the graph.
    result = await _compress(agent, workdir)
    assert result.compressed and result.file_path
    await agent.aupdate_state(THREAD, {"_summarization_event": result.event})
    recovered = recover_messages(workdir, result.file_path)
    state = (await agent.aget_state(THREAD)).values
    assert [m.content for m in recovered] == [m.content for m in state["messages"][: result.cutoff_index]]
    assert workdir_problems(root) == []
