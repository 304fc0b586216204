"""Persistence: SQLAlchemy models, the `Database` (engine + sessions) and programmatic migrations."""

from ctxpress.server.db.engine import Database, call_after_commit
from ctxpress.server.db.migrate import upgrade_database

__all__ = ["Database", "call_after_commit", "upgrade_database"]
