"""Alembic environment and revisions of the service schema (run by `ctxpress.server.db.upgrade_database`)."""
