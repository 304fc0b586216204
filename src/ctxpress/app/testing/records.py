"""The service's tables, read and seeded directly (beside the API, to check what it stored)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, create_engine, text

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import Conversation
from ctxpress.app.server.repositories import AgentRepository, ConversationRepository, UserRepository
from ctxpress.app.server.settings import Settings


def query_sql(settings: Settings, sql: str, **params: Any) -> list[Row[Any]]:
    """Read the service's tables directly (a separate, synchronous connection)."""
    target = settings.database()
    driver = "sqlite" if target.backend == "sqlite" else "postgresql+psycopg"
    engine = create_engine(target.sqlalchemy_url.set(drivername=driver))
    try:
        with engine.connect() as connection:
            return list(connection.execute(text(sql), params).all())
    finally:
        engine.dispose()


async def add_conversation(database: Database, owner: str = "alice") -> str:
    """A user (if new), the `echo` agent record and a conversation; returns the conversation id."""
    async with database.session() as session:
        users = UserRepository(session)
        user = await users.by_name(owner) or await users.add(owner, is_admin=False)
        await AgentRepository(session).upsert(
            "echo", description="", model="m", builtin_model=False, capabilities=[]
        )
        conversation = await ConversationRepository(session).add(
            Conversation(owner_id=user.id, agent_name="echo", workdir="workdirs/x")
        )
        await session.commit()
        return conversation.id
