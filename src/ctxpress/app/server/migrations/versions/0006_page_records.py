"""The page's records (issue 20): manual compressions, and archived conversations.

`manual_compressions`: one row per manual compression that wrote a summary, so the status panel's
event list shows it after a reload (automatic compressions are in `run_events`).
`conversations.archived_at`: an archived conversation is hidden from the list, never deleted.

Revision ID: 0006_page_records
Revises: 0003_token_expiry
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_page_records"
down_revision: str | None = "0004_compressing_marker"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types (a migration must not change when the models do).
ID = sa.String(32)
SERIAL_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "manual_compressions",
        sa.Column("id", SERIAL_KEY, autoincrement=True, nullable=False),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("tokens_before", sa.BigInteger(), nullable=False),
        sa.Column("tokens_after", sa.BigInteger(), nullable=False),
        sa.Column("cutoff_index", sa.BigInteger(), nullable=False),
        sa.Column("summary_count", sa.Integer(), nullable=True),
        sa.Column("file_path", sa.String(500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_manual_compressions"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_manual_compressions_conversation_id_conversations",
        ),
    )
    op.create_index(
        "ix_manual_compressions_conversation_id_id", "manual_compressions", ["conversation_id", "id"]
    )
    with op.batch_alter_table("conversations") as table:
        table.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as table:
        table.drop_column("archived_at")
    op.drop_index("ix_manual_compressions_conversation_id_id", table_name="manual_compressions")
    op.drop_table("manual_compressions")
