"""Alembic environment and revisions of the service schema (run by `ctxpress.app.server.db.upgrade_database`)."""
