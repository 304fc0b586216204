"""The chat service's knowledge base: beside its SQLite database, or in its PostgreSQL database."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ctxpress.app.kb.knowledge_base import KnowledgeBase
from ctxpress.app.kb.postgres_store import PostgresKnowledgeStore
from ctxpress.app.kb.sqlite_store import SqliteKnowledgeStore
from ctxpress.app.kb.store import KnowledgeStore

if TYPE_CHECKING:
    from ctxpress.app.server.settings import DatabaseTarget, Settings

SQLITE_FILE_NAME = "kb.sqlite3"


def sqlite_knowledge_base_path(target: DatabaseTarget, data_dir: Path) -> Path:
    """`<data dir>/kb.sqlite3` for the default database; `<name>.kb.sqlite3` beside any other SQLite file."""
    database = target.sqlalchemy_url.database
    if not database:
        return data_dir / SQLITE_FILE_NAME
    path = Path(database)
    return path.with_name(SQLITE_FILE_NAME if path.parent == data_dir else f"{path.stem}.kb.sqlite3")


def store_for(settings: Settings) -> KnowledgeStore:
    """The knowledge base's store where the service keeps its data (PostgreSQL or SQLite)."""
    target = settings.database()
    if target.backend == "postgresql":
        return PostgresKnowledgeStore(target.checkpoint_target)  # the libpq form of the database URL
    return SqliteKnowledgeStore(sqlite_knowledge_base_path(target, settings.data_dir))


def open_knowledge_base(settings: Settings) -> KnowledgeBase:
    return KnowledgeBase(store_for(settings))
