"""A claim remembers its version's creation time (``registered_at``, MLflow's
creation_timestamp in ms), so that a version number that comes back after its model was
deleted and registered again is told apart from the one that was claimed."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.add_column("vlgate_claims", sa.Column("registered_at", sa.String(32)))
