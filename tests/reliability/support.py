"""What the reliability tests share: agents with recording models, turns over HTTP, and the oracles
that read the SQL record, the checkpoint (through the state endpoint) and the workdir."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, messages_from_dict

from ctxpress.app.server.agents_file import AgentDefinition, ModelSpec
from ctxpress.app.server.settings import Settings
from ctxpress.app.testing.api import SseEvent, read_events, send
from ctxpress.app.testing.records import query_sql
from ctxpress.compaction.content import content_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.config import CompressionConfig
from ctxpress.middleware import DEFAULT_SUMMARY_TIMEOUT_S
from tests.fakes import ScriptedChatModel
from tests.middleware.conftest import assert_provider_valid
from tests.server.fakes import fetch_report, report_text, report_tool_script

from .faults import workdir_problems

TOPICS = ("季度营收", "客户名单", "合同条款", "风险评估", "交付计划", "人员安排", "预算调整", "供应商")

#: One raw report (~2,400 tokens) is above the threshold, its L1 view is not; a few turns reach L2.
COMPRESSION = CompressionConfig(
    summary_threshold=1.25, summary_tool_result_token_limit=100, summary_keep_messages=2
)


@dataclass
class Recorder:
    """A model script that records every request it answers (thread-safe)."""

    script: Callable[[Sequence[BaseMessage]], AIMessage]
    requests: list[list[BaseMessage]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, messages: Sequence[BaseMessage]) -> AIMessage:
        with self._lock:
            self.requests.append(list(messages))
        return self.script(messages)


def summary_text(messages: Sequence[BaseMessage]) -> AIMessage:
    return AIMessage("摘要：用户先后询问了几份报告，助手逐一给出了结论。")


def kb_agent(
    *,
    main: Callable[[Sequence[BaseMessage]], AIMessage] | None = None,
    summary: Callable[[Sequence[BaseMessage]], AIMessage] | ScriptedChatModel | None = None,
    compression: CompressionConfig = COMPRESSION,
    name: str = "kb",
    gate: threading.Event | None = None,
    summary_timeout: float | None = DEFAULT_SUMMARY_TIMEOUT_S,
) -> tuple[AgentDefinition, Recorder]:
    """The knowledge-base agent of the tests: `fetch_report` plus the workdir file tools."""
    recorder = Recorder(main or report_tool_script)
    summary_model = (
        summary
        if isinstance(summary, ScriptedChatModel)
        else ScriptedChatModel(script=summary or summary_text, model_name="summarizer")
    )
    agent = AgentDefinition(
        name=name,
        default=True,
        model=ModelSpec(model=ScriptedChatModel(script=recorder, gate=gate, model_name="main")),
        summary_model=ModelSpec(model=summary_model),
        tools=(fetch_report, "write_file", "read_file", "list_files"),
        capabilities=("context_compression",),
        compression=compression,
        summary_timeout=summary_timeout,
    )
    return agent, recorder


@dataclass(frozen=True)
class Turn:
    run: dict[str, Any]
    events: list[SseEvent]

    @property
    def status(self) -> str:
        finished = [e for e in self.events if e.type == "run_finished"]
        return str(finished[-1].data["status"]) if finished else "unfinished"

    def compression(self, status: str | None = None) -> list[dict[str, Any]]:
        return [
            e.data
            for e in self.events
            if e.type == "context_compression" and (status is None or e.data["status"] == status)
        ]


def turn(client: httpx.Client, conversation_id: str, text: str, timeout: float = 60) -> Turn:
    accepted = send(client, conversation_id, text)
    events = read_events(client, accepted["run"]["id"], timeout=timeout)
    run = client.get(f"/api/runs/{accepted['run']['id']}").json()
    return Turn(run, events)


# --- oracles ----------------------------------------------------------------------------------------


def sql_messages(settings: Settings, conversation_id: str) -> list[Any]:
    return query_sql(
        settings,
        "SELECT id, role, content, run_id FROM messages WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )


def assert_sql_record_complete(settings: Settings, conversation_id: str, user_texts: Sequence[str]) -> None:
    """S1/S16: every user message is in SQL, in order; every tool result is there in full."""
    rows = sql_messages(settings, conversation_id)
    assert [row.content for row in rows if row.role == "user"] == list(user_texts)
    tools = [row.content for row in rows if row.role == "tool"]
    reports = {report_text(text) for text in user_texts}
    for content in tools:
        assert parse_offload_reference(content) is None, "the chat record never holds a compacted view"
        if content.startswith("第0段"):
            assert content in reports, "a tool result in SQL is cut"


def state_values(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    response = client.get(f"/api/conversations/{conversation_id}/state")
    assert response.status_code == 200, response.text
    values: dict[str, Any] = response.json()["values"]
    return values


def state_messages(values: dict[str, Any]) -> list[BaseMessage]:
    return messages_from_dict(values.get("messages", []))


def workdir_root(settings: Settings, conversation_id: str) -> Path:
    return settings.workdirs_dir / conversation_id


def assert_checkpoint_consistent(values: dict[str, Any], root: Path, *, allow_temp: bool = False) -> None:
    """The checkpoint is whole: its event (if any) names an existing, whole history file or none,
    its cutoff points at the message it names, and no state message is a view of a missing file."""
    messages = state_messages(values)
    event = values.get("_summarization_event")
    if event:
        cutoff = event["cutoff_index"]
        assert 0 < cutoff < len(messages)
        assert messages[cutoff].id == event["first_kept_id"]
        if event["file_path"]:
            assert (root / event["file_path"]).is_file(), "the event names a history file that is absent"
        else:
            assert "could not be saved" in json.dumps(event["summary_message"], ensure_ascii=False)
    for message in messages:
        reference = parse_offload_reference(content_text(message.content))
        if reference is not None:
            assert (root / reference.path).is_file(), f"state points at a missing file {reference.path}"
    assert_provider_valid(messages)
    assert workdir_problems(root, allow_temp=allow_temp) == []


def assert_offload_references_exist(requests: Sequence[Sequence[BaseMessage]], root: Path) -> int:
    """S13: the model was never shown "saved at <path>" for a file that is not (whole) in the workdir."""
    checked = 0
    for request in requests:
        for message in request:
            if not isinstance(message, ToolMessage):
                continue
            reference = parse_offload_reference(content_text(message.content))
            if reference is None:
                continue
            path = root / reference.path
            assert path.is_file(), f"the model was told {reference.path} holds a result, but it is absent"
            checked += 1
    return checked


def assert_history_chain(values: dict[str, Any], root: Path) -> int:
    """S14/S15: the current event's history file, followed back through `previous_history_file`,
    covers [0, cutoff) without gap or overlap, and holds exactly the state's summarised messages
    (ids, in order; offloaded results restored whole). Returns the number of files in the chain."""
    from ctxpress.summary.event import is_summary_message
    from ctxpress.summary.recovery import recover_messages
    from ctxpress.workdir import LocalWorkdir

    event = values.get("_summarization_event")
    if not event:
        return 0
    workdir = LocalWorkdir(root)
    messages = state_messages(values)
    chain: list[tuple[str, dict[str, Any]]] = []
    path = event["file_path"]
    while path:
        header = json.loads((root / path).read_text("utf-8").splitlines()[0])
        chain.append((path, header))
        path = header.get("previous_history_file")
    recovered: list[BaseMessage] = []
    position = 0
    for path, header in reversed(chain):
        start, end = header["range"]
        assert start == position, f"{path} starts at {start}, not where the previous file ended ({position})"
        raw = [m for m in recover_messages(workdir, path) if not is_summary_message(m)]
        assert len(raw) == end - start, f"{path} holds {len(raw)} messages for the range {start}-{end}"
        recovered.extend(raw)
        position = end
    if chain:
        assert position == event["cutoff_index"], "the history files stop short of the cutoff"
        assert [m.id for m in recovered] == [m.id for m in messages[:position]]
    return len(chain)
