"""Alembic environment: migrations always run on a connection handed over by `upgrade_database`."""

from __future__ import annotations

from alembic import context

from ctxpress.app.server.db.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "ctxpress migrations run programmatically (ctxpress.app.server.db.upgrade_database, or `ctxpress serve`)"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
