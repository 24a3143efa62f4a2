"""The first schema: claims, handled webhook deliveries and named locks."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "vlgate_claims",
        sa.Column("model_name", sa.String(256), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("claimed_via", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_expires", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("detail", sa.Text),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "vlgate_webhook_deliveries",
        sa.Column("delivery_id", sa.String(128), primary_key=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "vlgate_locks",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
    )
