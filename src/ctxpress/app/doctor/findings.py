"""What `ctxpress doctor` reports: one finding per row of the spec's symptom table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "problem", "info"]

#: The symptom table's rows, in the spec's order.
SYMPTOMS: dict[str, str] = {
    "started_not_completed": "an event shows started but never completed",
    "old_content_missing": "old content cannot be found after a summary",
    "thread_busy": "manual compression returns thread_busy",
    "context_too_large": "the task still says the context is too large",
    "summary_in_front_end": "summary text appears in the front end",
}


@dataclass(frozen=True)
class Finding:
    symptom: str  # a key of SYMPTOMS
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return SYMPTOMS[self.symptom]


@dataclass(frozen=True)
class DoctorReport:
    conversation_id: str
    agent: str
    overview: list[str]
    findings: list[Finding]

    def finding(self, symptom: str) -> Finding:
        return next(finding for finding in self.findings if finding.symptom == symptom)

    @property
    def problems(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.status == "problem"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "agent": self.agent,
            "overview": self.overview,
            "findings": [
                {
                    "symptom": finding.symptom,
                    "title": finding.title,
                    "status": finding.status,
                    "summary": finding.summary,
                    "details": finding.details,
                    "data": finding.data,
                }
                for finding in self.findings
            ],
        }
