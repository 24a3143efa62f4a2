"""A claim says when its final state was written but the notification of it could not be
queued (``untold``: why), so that ``vlgate status`` shows a decision nobody was told of."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.add_column("vlgate_claims", sa.Column("untold", sa.Text))
