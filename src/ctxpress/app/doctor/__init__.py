"""`ctxpress doctor CONVERSATION`: walk the spec's symptom table for one conversation.

report = await diagnose(settings, conversation_id)        # opens the service's data like `serve`
for finding in report.findings: ...                         # one per symptom: ok | problem | info
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxpress.app.doctor.checks import CHECKS
from ctxpress.app.doctor.findings import SYMPTOMS, DoctorReport, Finding
from ctxpress.app.doctor.snapshot import ConversationNotFoundError, ConversationSnapshot, load_snapshot
from ctxpress.app.server.agents_file import AgentDefinition
from ctxpress.app.server.settings import Settings


def examine(snapshot: ConversationSnapshot, *, context_window: int | None = None) -> DoctorReport:
    """Run every check of the symptom table on a loaded snapshot."""
    runtime = snapshot.runtime
    overview = [
        f"agent {snapshot.agent_name}"
        + (
            f" (model {runtime.definition.model.label}{', built-in offline' if runtime.builtin_model else ''})"
            if runtime
            else ""
        ),
        f"{len(snapshot.runs)} runs ({', '.join(f'{run.status}' for run in snapshot.runs[-5:]) or 'none'}"
        f"{', …' if len(snapshot.runs) > 5 else ''}), {len(snapshot.messages)} messages in the chat record",
        f"checkpoint: {len(snapshot.state_messages)} messages"
        + (", summarised" if snapshot.summarization_event else "")
        + (f"; {len(snapshot.state_interrupts)} pending interrupt(s)" if snapshot.state_interrupts else ""),
        f"workdir: {len(snapshot.workdir_files)} files" if snapshot.workdir else "workdir: not created yet",
    ]
    findings = [check(snapshot, context_window) for check in CHECKS]
    return DoctorReport(snapshot.conversation_id, snapshot.agent_name, overview, findings)


async def diagnose(
    settings: Settings,
    conversation_id: str,
    *,
    agents: Sequence[AgentDefinition] | None = None,
    context_window: int | None = None,
) -> DoctorReport:
    snapshot = await load_snapshot(settings, conversation_id, agents)
    return examine(snapshot, context_window=context_window)


__all__ = [
    "SYMPTOMS",
    "ConversationNotFoundError",
    "ConversationSnapshot",
    "DoctorReport",
    "Finding",
    "diagnose",
    "examine",
    "load_snapshot",
]
