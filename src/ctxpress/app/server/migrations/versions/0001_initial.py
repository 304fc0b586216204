"""Initial schema: users, tokens, agents, conversations, runs, append-only messages, run events, usage.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types (a migration must not change when the models do).
ID = sa.String(32)
JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SERIAL_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _timestamp(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", ID, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", ID, nullable=False),
        sa.Column("user_id", ID, nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("label", sa.String(64), nullable=False),
        _timestamp("created_at"),
        _timestamp("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_api_tokens_user_id_users"),
        sa.UniqueConstraint("token_sha256", name="uq_api_tokens_token_sha256"),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])
    op.create_table(
        "agents",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("builtin_model", sa.Boolean(), nullable=False),
        sa.Column("capabilities", JSON_DOC, nullable=False),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("name", name="pk_agents"),
    )
    op.create_table(
        "conversations",
        sa.Column("id", ID, nullable=False),
        sa.Column("owner_id", ID, nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("workdir", sa.String(200), nullable=False),
        sa.Column("next_queue_seq", sa.BigInteger(), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_conversations"),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_conversations_owner_id_users"),
        sa.ForeignKeyConstraint(["agent_name"], ["agents.name"], name="fk_conversations_agent_name_agents"),
    )
    op.create_index("ix_conversations_owner_id_created_at", "conversations", ["owner_id", "created_at"])
    op.create_table(
        "runs",
        sa.Column("id", ID, nullable=False),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("queue_seq", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("input", JSON_DOC, nullable=False),
        sa.Column("pending_resume", JSON_DOC, nullable=True),
        sa.Column("interrupts", JSON_DOC, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        _timestamp("lease_expires_at", nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _timestamp("created_at"),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], name="fk_runs_conversation_id_conversations"
        ),
        sa.UniqueConstraint("conversation_id", "queue_seq", name="uq_runs_conversation_id_queue_seq"),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'waiting_input', 'succeeded', 'failed', 'cancelled')",
            name="ck_runs_status",
        ),
    )
    op.create_index("ix_runs_conversation_id_status", "runs", ["conversation_id", "status"])
    op.create_index("ix_runs_status_lease_expires_at", "runs", ["status", "lease_expires_at"])
    op.create_table(
        "messages",
        sa.Column("id", SERIAL_KEY, autoincrement=True, nullable=False),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("lc_id", sa.String(200), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("payload", JSON_DOC, nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], name="fk_messages_conversation_id_conversations"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_messages_run_id_runs"),
        sa.UniqueConstraint("conversation_id", "lc_id", name="uq_messages_conversation_id_lc_id"),
    )
    op.create_index("ix_messages_conversation_id_id", "messages", ["conversation_id", "id"])
    op.create_table(
        "run_events",
        sa.Column("id", SERIAL_KEY, autoincrement=True, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("data", JSON_DOC, nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_run_events"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_run_events_run_id_runs"),
    )
    op.create_index("ix_run_events_run_id_id", "run_events", ["run_id", "id"])
    op.create_table(
        "usage_records",
        sa.Column("id", SERIAL_KEY, autoincrement=True, nullable=False),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("category", sa.String(16), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("reported", sa.Boolean(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_creation_tokens", sa.BigInteger(), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_usage_records"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], name="fk_usage_records_conversation_id_conversations"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_usage_records_run_id_runs"),
        sa.CheckConstraint("category IN ('main', 'summary')", name="ck_usage_records_category"),
    )
    op.create_index(
        "ix_usage_records_conversation_id_category", "usage_records", ["conversation_id", "category"]
    )
    _make_messages_append_only()


def _make_messages_append_only() -> None:
    """S1/S16 enforced by the database itself: no code path (compression included) can rewrite the record."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION ctxpress_messages_append_only() RETURNS trigger AS $$
            BEGIN
                RAISE EXCEPTION 'messages is append-only: % is not allowed', TG_OP;
            END;
            $$ LANGUAGE plpgsql
            """
        )
        op.execute(
            "CREATE TRIGGER messages_append_only BEFORE UPDATE OR DELETE ON messages "
            "FOR EACH ROW EXECUTE FUNCTION ctxpress_messages_append_only()"
        )
    else:
        for operation in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER messages_no_{operation.lower()} BEFORE {operation} ON messages "
                f"BEGIN SELECT RAISE(ABORT, 'messages is append-only: {operation} is not allowed'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS messages_append_only ON messages")
        op.execute("DROP FUNCTION IF EXISTS ctxpress_messages_append_only()")
    for table in (
        "usage_records",
        "run_events",
        "messages",
        "runs",
        "conversations",
        "agents",
        "api_tokens",
        "users",
    ):
        op.drop_table(table)
