"""The state database's schema as versioned Alembic migrations (``versions/``), applied by
``StateDatabase`` when it opens the database (``state_db.upgrade_schema``). A schema change is a
new file in ``versions/`` whose ``down_revision`` is the last one's; the version applied is
kept in ``vlgate_schema_version`` (not Alembic's default ``alembic_version``, which MLflow's
own tables use when the state shares MLflow's PostgreSQL database)."""

from pathlib import Path

#: the table holding the applied revision
VERSION_TABLE = "vlgate_schema_version"
#: the folder Alembic reads the environment and ``versions/`` from
SCRIPTS = Path(__file__).parent
