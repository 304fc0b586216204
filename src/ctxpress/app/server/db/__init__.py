"""Persistence: SQLAlchemy models, the `Database` (engine + sessions) and programmatic migrations."""

from ctxpress.app.server.db.engine import Database, call_after_commit
from ctxpress.app.server.db.migrate import upgrade_database

__all__ = ["Database", "call_after_commit", "upgrade_database"]
