"""API tokens may expire: `api_tokens.expires_at` (NULL: never). Revocation uses `revoked_at`.

Revision ID: 0003_token_expiry
Revises: 0002_conversation_pressure
Create Date: 2026-01-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_token_expiry"
down_revision: str | None = "0002_conversation_pressure"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as table:
        table.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as table:
        table.drop_column("expires_at")
