"""A claim names the Prefect flow run validating it, so that a flow run Prefect reports
crashed is run again at once and one still queued for a worker is not taken for lost; and
it counts the attempts lost with their process, so that one that crashes every time is
failed closed instead of run forever."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.add_column("vlgate_claims", sa.Column("flow_run_id", sa.String(64)))
    op.add_column("vlgate_claims", sa.Column("crashes", sa.Integer, nullable=False, server_default="0"))
