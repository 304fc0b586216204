from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation, Message, User, new_id
from ctxpress.app.server.errors import AgentNotConfiguredError, NotFoundError, UnknownAgentError
from ctxpress.app.server.repositories.agents import AgentRepository
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.messages import MessageRepository
from ctxpress.app.server.runtime.agents import AgentRegistry, thread_config
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.app.server.serialization import storable_text, to_jsonable

#: The longest automatic title (taken from the first question).
AUTOMATIC_TITLE_CHARS = 40


@dataclass(frozen=True)
class AgentState:
    """A JSON-ready snapshot of a conversation's agent state (the checkpoint's view, S15/S16)."""

    agent: str
    checkpoint_id: str | None
    values: dict[str, Any]
    next: list[str]
    interrupts: list[dict[str, Any]]


class ConversationService:
    def __init__(self, *, database: Database, agents: AgentRegistry, workdirs: ConversationWorkdirs) -> None:
        self.database = database
        self.agents = agents
        self.workdirs = workdirs

    async def sync_agents(self) -> None:
        """Record the configured agents (conversations reference them by name)."""
        async with self.database.session() as session:
            repository = AgentRepository(session)
            for runtime in self.agents.all():
                await repository.upsert(
                    runtime.name,
                    description=runtime.definition.description,
                    model=runtime.definition.model.label,
                    builtin_model=runtime.builtin_model,
                    capabilities=list(runtime.definition.capabilities),
                )
            await session.commit()

    async def create(self, user: User, *, agent_name: str | None, title: str) -> Conversation:
        name = agent_name or self.agents.default_name
        if self.agents.get(name) is None:
            raise UnknownAgentError(f"no agent named {name!r}")
        conversation_id = new_id()
        # The workdir exists before anything may write to it (owner-only permissions, S24).
        self.workdirs.for_conversation(conversation_id)
        async with self.database.session() as session:
            conversation = await ConversationRepository(session).add(
                Conversation(
                    id=conversation_id,
                    owner_id=user.id,
                    agent_name=name,
                    # PostgreSQL refuses NUL in text: the same repair as the chat record (U+FFFD).
                    title=storable_text(title),
                    workdir=self.workdirs.relative_location(conversation_id),
                )
            )
            await session.commit()
        return conversation

    async def get_owned(self, user: User, conversation_id: str) -> Conversation:
        """The conversation if `user` owns it; 404 otherwise (whether it exists is not revealed)."""
        async with self.database.session() as session:
            conversation = await ConversationRepository(session).get_owned(conversation_id, user.id)
        if conversation is None:
            raise NotFoundError("conversation not found")
        return conversation

    async def list_owned(
        self,
        user: User,
        *,
        before: datetime | None,
        limit: int,
        title_contains: str = "",
        archived: bool = False,
    ) -> list[Conversation]:
        async with self.database.session() as session:
            # The search text repaired like stored titles (PostgreSQL refuses NUL in text).
            return await ConversationRepository(session).list_owned(
                user.id,
                before=before,
                limit=limit,
                title_contains=storable_text(title_contains),
                archived=archived,
            )

    async def update(
        self, user: User, conversation_id: str, *, title: str | None, archived: bool | None
    ) -> Conversation:
        """Rename and/or archive (hide from the list, the record stays) or bring back."""
        async with self.database.session() as session:
            repository = ConversationRepository(session)
            conversation = await repository.get_owned(conversation_id, user.id)
            if conversation is None:
                raise NotFoundError("conversation not found")
            if title is not None:
                await repository.set_title(conversation, storable_text(title.strip()))
            if archived is not None:
                await repository.set_archived(conversation, archived)
            await session.commit()
            await session.refresh(conversation)
        return conversation

    async def messages(self, conversation: Conversation, *, after: int, limit: int) -> list[Message]:
        """The complete chat record, oldest first, `limit` messages with ids above `after`."""
        async with self.database.session() as session:
            return await MessageRepository(session).page(conversation.id, after=after, limit=limit)

    async def agent_state(self, conversation: Conversation) -> AgentState:
        """Read through the agent's canonical compiled graph, never from checkpoint tables (S19)."""
        runtime = self.agents.get(conversation.agent_name)
        if runtime is None:
            raise AgentNotConfiguredError(f"agent {conversation.agent_name!r} is not configured any more")
        snapshot = await runtime.graph.aget_state(thread_config(conversation.id))
        return AgentState(
            agent=runtime.name,
            checkpoint_id=(snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
            values=to_jsonable(snapshot.values or {}),
            next=list(snapshot.next),
            interrupts=[{"id": item.id, "value": to_jsonable(item.value)} for item in snapshot.interrupts],
        )


def automatic_title(question: str, limit: int = AUTOMATIC_TITLE_CHARS) -> str:
    """The question's first line, spaces collapsed, cut to `limit` characters (with "…")."""
    first_line = next((line for line in question.splitlines() if line.strip()), "")
    words = " ".join(first_line.split())
    return storable_text(words if len(words) <= limit else words[: limit - 1].rstrip() + "…")
