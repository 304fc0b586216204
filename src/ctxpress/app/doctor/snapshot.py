"""Everything `ctxpress doctor` knows about one conversation, read the way the service reads it.

The service's database (its tables: runs, run events, the chat record), the checkpoint state
through the conversation agent's canonical compiled graph (S19: never the checkpoint tables
directly), and the conversation's workdir. Nothing is written: the database is opened like the CLI's
user commands open it, and the workdir is only read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from ctxpress.app.kb.tools import retrieval_tools
from ctxpress.app.server.agents_file import AgentDefinition
from ctxpress.app.server.db.models import Run
from ctxpress.app.server.knowledge import open_knowledge_base
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.messages import MessageRepository
from ctxpress.app.server.repositories.run_events import RunEventRepository
from ctxpress.app.server.repositories.runs import BusyState, RunRepository
from ctxpress.app.server.runtime.agents import AgentRegistry, AgentRuntime, thread_config
from ctxpress.app.server.runtime.checkpoints import open_checkpointer
from ctxpress.app.server.runtime.container import agent_definitions, open_database
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.app.server.settings import Settings
from ctxpress.middleware import EVENT_KEY
from ctxpress.workdir import LocalWorkdir, WorkdirFile


class ConversationNotFoundError(LookupError):
    """No conversation with that id in this service's database."""


@dataclass(frozen=True)
class StoredEvent:
    id: int
    type: str
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class RunFacts:
    id: str
    queue_seq: int
    status: str
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_expires_at: datetime | None
    attempts: int
    interrupts: list[dict[str, Any]]
    events: list[StoredEvent] = field(default_factory=list)

    def events_of(self, event_type: str) -> list[StoredEvent]:
        return [event for event in self.events if event.type == event_type]


@dataclass(frozen=True)
class RecordedMessage:
    id: int
    run_id: str | None
    role: str
    content: str


@dataclass
class ConversationSnapshot:
    conversation_id: str
    agent_name: str
    runs: list[RunFacts]
    messages: list[RecordedMessage]
    busy: BusyState | None
    workdir: LocalWorkdir | None
    workdir_files: list[WorkdirFile]
    #: The agent as configured now (None when the conversation's agent is not configured any more).
    runtime: AgentRuntime | None = None
    state_messages: list[BaseMessage] = field(default_factory=list)
    summarization_event: dict[str, Any] | None = None
    state_interrupts: list[dict[str, Any]] = field(default_factory=list)
    #: Why the checkpoint state could not be read, if it could not.
    state_error: str | None = None

    def run(self, run_id: str) -> RunFacts | None:
        return next((run for run in self.runs if run.id == run_id), None)


async def load_snapshot(
    settings: Settings, conversation_id: str, definitions: Sequence[AgentDefinition] | None = None
) -> ConversationSnapshot:
    """Read the conversation; `definitions` default to the service's (agents file or the default agent)."""
    async with open_database(settings) as database, database.session() as session:
        conversation = await ConversationRepository(session).get(conversation_id)
        if conversation is None:
            raise ConversationNotFoundError(
                f"no conversation {conversation_id!r} in {settings.database().describe()}"
            )
        runs = await RunRepository(session).all_for_conversation(conversation_id)
        events = await RunEventRepository(session).of_runs([run.id for run in runs])
        messages = await MessageRepository(session).all_for_conversation(conversation_id)
        busy = await RunRepository(session).busy_state(conversation_id)
    by_run: dict[str, list[StoredEvent]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(
            StoredEvent(event.id, event.type, dict(event.data), event.created_at)
        )
    snapshot = ConversationSnapshot(
        conversation_id=conversation_id,
        agent_name=conversation.agent_name,
        runs=[_run_facts(run, by_run.get(run.id, [])) for run in runs],
        messages=[RecordedMessage(m.id, m.run_id, m.role, m.content) for m in messages],
        busy=busy,
        workdir=None,
        workdir_files=[],
    )
    _read_workdir(snapshot, settings.workdirs_dir, conversation_id)
    await _read_state(snapshot, settings, definitions)
    return snapshot


def _run_facts(run: Run, events: list[StoredEvent]) -> RunFacts:
    return RunFacts(
        id=run.id,
        queue_seq=run.queue_seq,
        status=run.status,
        error=run.error,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        lease_expires_at=run.lease_expires_at,
        attempts=run.attempts,
        interrupts=list((run.interrupts or {}).get("items", [])),
        events=events,
    )


def _read_workdir(snapshot: ConversationSnapshot, workdirs_root: Path, conversation_id: str) -> None:
    if not (workdirs_root / conversation_id).is_dir():
        return  # never created: nothing was written (and the doctor creates nothing)
    workdir = ConversationWorkdirs(workdirs_root).for_conversation(conversation_id)
    snapshot.workdir = workdir
    snapshot.workdir_files = workdir.list_files()


async def _read_state(
    snapshot: ConversationSnapshot, settings: Settings, definitions: Sequence[AgentDefinition] | None
) -> None:
    configured = list(definitions) if definitions is not None else agent_definitions(settings)
    mine = [definition for definition in configured if definition.name == snapshot.agent_name]
    if not mine:
        names = ", ".join(definition.name for definition in configured)
        snapshot.state_error = (
            f"agent {snapshot.agent_name!r} is not configured here (configured: {names}); pass the service's "
            "agents file with --agents"
        )
        return
    retrieval = retrieval_tools(open_knowledge_base(settings))
    async with open_checkpointer(settings.database()) as checkpointer:
        registry = AgentRegistry(
            mine,
            checkpointer=checkpointer,
            workdirs=ConversationWorkdirs(settings.workdirs_dir),
            extra_tools=retrieval.available,
            unavailable_tools=retrieval.unavailable,
        )
        runtime = registry.get(snapshot.agent_name)
        assert runtime is not None
        snapshot.runtime = runtime
        try:
            state = await runtime.graph.aget_state(thread_config(snapshot.conversation_id))
        except Exception as exc:  # e.g. the checkpoint tables were never created
            snapshot.state_error = f"the checkpoint state cannot be read: {type(exc).__name__}: {exc}"[:400]
            return
    values = state.values or {}
    snapshot.state_messages = list(values.get("messages", []))
    event = values.get(EVENT_KEY)
    snapshot.summarization_event = dict(event) if isinstance(event, dict) else None
    snapshot.state_interrupts = [{"id": item.id, "value": item.value} for item in state.interrupts]
