"""Conversation pressure (S19, S22): the last main-model request's size per conversation, and `stale`.

Revision ID: 0002_conversation_pressure
Revises: 0001_initial
Create Date: 2025-01-02
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0002_conversation_pressure"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types (a migration must not change when the models do).
ID = sa.String(32)


def _timestamp(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _tokens(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.BigInteger(), nullable=True)


def upgrade() -> None:
    op.create_table(
        "conversation_pressure",
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        _tokens("total_tokens"),
        _tokens("threshold_tokens"),
        _tokens("system_tokens"),
        _tokens("tools_tokens"),
        _tokens("summary_tokens"),
        _tokens("messages_tokens"),
        _timestamp("recorded_at", nullable=True),
        sa.Column("stale", sa.Boolean(), nullable=False),
        _timestamp("invalidated_at", nullable=True),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_conversation_pressure"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_conversation_pressure_conversation_id_conversations",
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_conversation_pressure_run_id_runs"),
    )


def downgrade() -> None:
    op.drop_table("conversation_pressure")
