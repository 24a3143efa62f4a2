"""The record cache shared by every worker of a deployment: one row per fingerprint, the
record's text and its checksum, its size, and when it was made and last used (for LRU
eviction) (``registry_hooks/record_cache.py``)."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "vlgate_record_cache",
        sa.Column("fingerprint", sa.String(128), primary_key=True),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_vlgate_record_cache_used_at", "vlgate_record_cache", ["used_at"])
