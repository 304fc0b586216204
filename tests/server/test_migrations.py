"""Migrations (run at start) on both databases: idempotent, identical to the models, append-only record."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from langchain_core.messages import HumanMessage
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.migrate import alembic_config, upgrade_database
from ctxpress.app.server.db.models import Base
from ctxpress.app.server.repositories import MessageRepository
from ctxpress.app.testing.records import add_conversation


async def test_schema_matches_the_models_and_upgrades_are_idempotent(database: Database) -> None:
    await upgrade_database(database)  # a second run changes nothing
    async with database.engine.connect() as connection:
        differences = await connection.run_sync(
            lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts={"compare_type": True}), Base.metadata
            )
        )
        version = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
    assert differences == []
    assert version == ScriptDirectory.from_config(alembic_config()).get_current_head()


@pytest.mark.parametrize("statement", ["UPDATE messages SET content = 'rewritten'", "DELETE FROM messages"])
async def test_the_chat_record_is_append_only(database: Database, statement: str) -> None:
    conversation_id = await add_conversation(database)
    async with database.session() as session:
        await MessageRepository(session).append(conversation_id, None, HumanMessage("原话", id="m1"))
        await session.commit()
    async with database.session() as session:
        with pytest.raises(DBAPIError, match="append-only"):
            await session.execute(text(statement))
        await session.rollback()
    async with database.session() as session:
        page = await MessageRepository(session).page(conversation_id, after=0, limit=10)
    assert [(message.content, message.lc_id) for message in page] == [("原话", "m1")]


async def test_text_the_databases_refuse_is_stored_repaired(database: Database) -> None:
    conversation_id = await add_conversation(database)
    async with database.session() as session:
        stored = await MessageRepository(session).append(conversation_id, None, HumanMessage("a\x00b\ud800c"))
        duplicate = await MessageRepository(session).append(
            conversation_id, None, HumanMessage("x", id="same")
        )
        again = await MessageRepository(session).append(conversation_id, None, HumanMessage("y", id="same"))
        await session.commit()
    async with database.session() as session:
        page = await MessageRepository(session).page(conversation_id, after=0, limit=10)
    assert stored is not None and [message.id for message in page][:1] == [stored]
    assert page[0].content == "a\ufffdb\ufffdc"
    assert duplicate is not None and again is None, "a message id is recorded once"
    assert [(message.lc_id, message.content) for message in page[1:]] == [("same", "x")]
