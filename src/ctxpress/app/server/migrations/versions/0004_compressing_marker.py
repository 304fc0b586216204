"""A manual compression marks its conversation: `conversations.compressing_until` (NULL: none).

Run intake answers 409 `thread_busy` (`compressing`) at once instead of waiting for the lock, and
`GET …/status` says the conversation is busy while the compression holds it (issue 16).

Revision ID: 0004_compressing_marker
Revises: 0003_token_expiry
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_compressing_marker"
down_revision: str | None = "0003_token_expiry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as table:
        table.add_column(sa.Column("compressing_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as table:
        table.drop_column("compressing_until")
