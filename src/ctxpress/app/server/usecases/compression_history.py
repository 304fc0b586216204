"""The compressions of a conversation as the status panel lists them (issue 20, item 3).

From the service's record, so the list survives a reload: the automatic compressions its runs
streamed (`context_compression` run events) and the manual ones (`manual_compressions`), oldest
first, one item per compression — what happened, never the `started` half. An L1 pass is listed
only when it wrote a tool result to the workdir (`files_written`): the middleware rebuilds the L1
view on every model call above the threshold, and those passes repeat the same offloads (and the
same `tokens_saved`) — nothing new to a reader.

Each summary carries the id of the first message it kept (`kept_from_message_id`, the message at
its cutoff in the agent state), so the page can mark in the chat where earlier messages were
summarised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation, ManualCompression, RunEvent
from ctxpress.app.server.repositories.compressions import CompressionRepository
from ctxpress.app.server.runtime.agents import AgentRegistry, thread_config
from ctxpress.events import COMPLETED, FAILED, L1, L2

AUTOMATIC: Final = "automatic"
MANUAL: Final = "manual"
Trigger = Literal["automatic", "manual"]


@dataclass(frozen=True)
class CompressionRecord:
    trigger: Trigger
    status: str
    level: str
    reason: str | None
    tokens_before: int | None
    tokens_after: int | None
    tokens_saved: int | None
    offloaded: int | None
    #: The tool results this pass wrote to the workdir (L1's new offloads).
    files_written: list[str]
    arguments_truncated: int | None
    cutoff_index: int | None
    #: Which summary of the conversation this is (1, 2, …); None for L1 and failures.
    summary_number: int | None
    file_path: str | None
    error: str | None
    run_id: str | None
    kept_from_message_id: str | None
    created_at: datetime


class CompressionHistoryService:
    def __init__(self, *, database: Database, agents: AgentRegistry) -> None:
        self.database = database
        self.agents = agents

    async def of_conversation(self, conversation: Conversation) -> list[CompressionRecord]:
        async with self.database.session() as session:
            repository = CompressionRepository(session)
            automatic = await repository.automatic(conversation.id)
            manual = await repository.manual(conversation.id)
        message_ids = await self._state_message_ids(conversation)
        drafts = [_from_event(event) for event in automatic] + [_from_manual(row) for row in manual]
        ordered = sorted(
            (draft for draft in drafts if draft is not None), key=lambda item: item["created_at"]
        )
        return _numbered(ordered, message_ids)

    async def _state_message_ids(self, conversation: Conversation) -> list[str | None]:
        runtime = self.agents.get(conversation.agent_name)
        if runtime is None:
            return []
        snapshot = await runtime.graph.aget_state(thread_config(conversation.id))
        return [getattr(message, "id", None) for message in (snapshot.values or {}).get("messages") or []]


def _from_event(event: RunEvent) -> dict[str, Any] | None:
    data = event.data
    status = data.get("status")
    if status not in (COMPLETED, FAILED):
        return None
    if status == COMPLETED and data.get("level") == L1 and not _l1_changed(data):
        return None
    return {
        "trigger": AUTOMATIC,
        "status": status,
        "level": data.get("level"),
        "reason": data.get("reason"),
        "tokens_before": data.get("tokens_before"),
        "tokens_after": data.get("tokens_after"),
        "tokens_saved": data.get("tokens_saved"),
        "offloaded": data.get("offloaded"),
        "files_written": list(data.get("files_written") or []),
        "arguments_truncated": data.get("arguments_truncated"),
        "cutoff_index": data.get("cutoff_index"),
        "file_path": data.get("file_path"),
        "error": data.get("error"),
        "run_id": event.run_id,
        "created_at": event.created_at,
    }


def _l1_changed(data: dict[str, Any]) -> bool:
    return bool(data.get("files_written"))


def _from_manual(row: ManualCompression) -> dict[str, Any]:
    return {
        "trigger": MANUAL,
        "status": COMPLETED,
        "level": L2,
        "reason": None,
        "tokens_before": row.tokens_before,
        "tokens_after": row.tokens_after,
        "tokens_saved": max(0, row.tokens_before - row.tokens_after),
        "offloaded": None,
        "files_written": [],
        "arguments_truncated": None,
        "cutoff_index": row.cutoff_index,
        "file_path": row.file_path,
        "error": None,
        "run_id": None,
        "created_at": row.created_at,
    }


def _numbered(drafts: Sequence[dict[str, Any]], message_ids: Sequence[str | None]) -> list[CompressionRecord]:
    records = []
    summaries = 0
    for draft in drafts:
        cutoff = draft["cutoff_index"]
        is_summary = draft["status"] == COMPLETED and draft["level"] == L2 and cutoff is not None
        summaries += is_summary
        kept_from = message_ids[cutoff] if is_summary and 0 <= cutoff < len(message_ids) else None
        records.append(
            CompressionRecord(
                **draft,
                summary_number=summaries if is_summary else None,
                kept_from_message_id=kept_from,
            )
        )
    return records
