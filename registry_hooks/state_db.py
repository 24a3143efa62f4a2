"""vlgate's own state database: the claims (``claims.py``), the webhook deliveries seen
(``deliveries.py``), the named locks (``locks.py``), the notification outbox
(``outbox.py``) and the shared record cache (``record_cache.py``), in one SQL database whose schema is
built by the Alembic migrations of ``registry_hooks/migrations``.

``VLGATE_STATE_DB`` picks the database (``postgresql://...`` in a real deployment);
the embedded default is ``sqlite:///$VLGATE_HOME/state.db``. The tables below are what the
queries use; ``tests/test_registry_hooks.py`` holds them equal to what the migrations build.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

from vlgate.registry_hooks import migrations

#: PostgreSQL advisory lock held while the tables are created or updated (any fixed number
#: that no other application on the database uses for its own lock; "vlgate" in ASCII).
SCHEMA_LOCK_KEY = 0x766C67617465

metadata = sa.MetaData()

claims_table = sa.Table(
    "vlgate_claims",
    metadata,
    sa.Column("model_name", sa.String(256), primary_key=True),
    sa.Column("version", sa.String(64), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("claimed_via", sa.String(32), nullable=False),
    sa.Column("owner", sa.String(256), nullable=False),
    sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("lease_expires", sa.DateTime(timezone=True), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=1),
    sa.Column("run_id", sa.String(64)),
    sa.Column("detail", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("registered_at", sa.String(32)),  # the version's creation_timestamp (ms): a re-registration told apart (claims.py)
    sa.Column("flow_run_id", sa.String(64)),  # the Prefect flow run validating it
    sa.Column("crashes", sa.Integer, nullable=False, default=0, server_default="0"),  # attempts lost with their process
    sa.Column("untold", sa.Text),  # why the final state's notification could not be queued (None: it was, or none was due)
)

deliveries_table = sa.Table(
    "vlgate_webhook_deliveries",
    metadata,
    sa.Column("delivery_id", sa.String(128), primary_key=True),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
)

locks_table = sa.Table(
    "vlgate_locks",
    metadata,
    sa.Column("name", sa.String(256), primary_key=True),
    sa.Column("owner", sa.String(256), nullable=False),
    sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
)

#: Notifications to send (``outbox.py``): one row per notification and channel, written in the
#: transaction of what it reports and delivered after it commits, at least once.
outbox_table = sa.Table(
    "vlgate_outbox",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("idempotency_key", sa.String(128), nullable=False),
    sa.Column("channel", sa.String(64), nullable=False),  # the channel's name (vlgate.yaml notify: channels:)
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),  # the notification's JSON (vlgate.notification/1)
    sa.Column("state", sa.String(16), nullable=False),  # pending | delivered | failed
    sa.Column("attempts", sa.Integer, nullable=False, default=0, server_default="0"),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),  # also a deliverer's lease while it sends
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("delivered_at", sa.DateTime(timezone=True)),
    sa.UniqueConstraint("idempotency_key", "channel", name="uq_vlgate_outbox_key_channel"),
    sa.Index("ix_vlgate_outbox_due", "state", "next_attempt_at"),
)


#: Records by fingerprint, shared by every worker (``record_cache.py``): a record computed
#: once is not computed again for another version, model or run that asks for the same key.
record_cache_table = sa.Table(
    "vlgate_record_cache",
    metadata,
    sa.Column("fingerprint", sa.String(128), primary_key=True),
    sa.Column("record", sa.Text, nullable=False),  # the record's JSON, as its checksum covers it
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("bytes", sa.Integer, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("used_at", sa.DateTime(timezone=True), nullable=False),  # last hit: least recently used evicted first
    sa.Index("ix_vlgate_record_cache_used_at", "used_at"),
)

#: The revision of each schema a state database had before its schema was versioned,
#: told apart by the one column the second added: such a database is stamped with it once,
#: then upgraded like any other.
_UNVERSIONED = (("registered_at", "0002"), (None, "0001"))


def upgrade_schema(connection: sa.Connection) -> None:
    """Bring the state database to the latest revision of ``registry_hooks/migrations``
    (creating it when empty), on ``connection`` and inside the caller's schema lock."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations.SCRIPTS))
    config.attributes["connection"] = connection
    inspector = sa.inspect(connection)
    if claims_table.name in inspector.get_table_names() and migrations.VERSION_TABLE not in inspector.get_table_names():
        present = {column["name"] for column in inspector.get_columns(claims_table.name)}
        command.stamp(config, next(revision for column, revision in _UNVERSIONED if column is None or column in present))
    command.upgrade(config, "head")


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def aware(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything vlgate writes is UTC
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def default_owner() -> str:
    """``HOST:PID:PIDNS``: the host, the process and its PID namespace (processes in two
    containers on one host may share the host's name and a PID)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_pid_namespace()}"


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:  # no /proc: no process can be told dead by its PID here
        return "unknown"


def owner_is_gone(owner: str) -> bool:
    """Whether the process ``owner`` names (:func:`default_owner`) ran on this host, in this
    PID namespace, and runs no more (a zombie counts as ended). Another host's or
    namespace's process, or an owner in another form, is never said to be gone: only its
    lease tells."""
    host, _, rest = owner.partition(":")
    pid, _, namespace = rest.partition(":")
    if host != socket.gethostname() or namespace in ("", "unknown") or namespace != _pid_namespace() or not pid.isdigit():
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no such process
    return fields[0] in ("Z", "X")


#: Tries of the switch to WAL before "database is locked" is an error (about a minute in all).
WAL_ATTEMPTS = 12


def use_wal(engine: sa.Engine) -> None:
    """Put a SQLite state database in WAL mode (readers beside one writer), once per file.
    The switch cannot run inside the schema lock (SQLite refuses it in a transaction), and a
    process opening a fresh database while another creates the tables can be answered
    "database is locked" at once, without the busy timeout (SQLite's deadlock rule): the
    switch is skipped when the file is in WAL already and retried with backoff when busy."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            with engine.connect() as connection:
                if str(connection.exec_driver_sql("PRAGMA journal_mode").scalar()).lower() != "wal":
                    connection.exec_driver_sql("PRAGMA journal_mode=WAL")
            return
        except sa.exc.OperationalError as error:
            if "locked" not in str(error) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(min(10.0, 0.05 * 2**attempt))


class StateDatabase:
    """vlgate's state database, opened: its engine, and its schema brought to the latest
    migration when it is opened."""

    def __init__(self, url: str):
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            # concurrent writers (receiver threads, poller, flows) wait for the write lock instead of failing
            self.engine = sa.create_engine(url, connect_args={"timeout": 60})
            use_wal(self.engine)
        else:
            self.engine = sa.create_engine(url, pool_pre_ping=True)
        with self._schema_lock() as connection:
            upgrade_schema(connection)

    @contextlib.contextmanager
    def _schema_lock(self) -> Iterator[sa.Connection]:
        """A connection holding the database's schema lock until the block ends. Every
        process (the receiver, the poller, each flow, ``vlgate status``) opens the store, and
        "create the tables unless they exist" checks, then creates: two processes opening a
        fresh database at once both saw no table, and one failed with "table already
        exists". So the check and the creation happen under one lock: PostgreSQL's
        transaction-scoped advisory lock (its DDL is transactional), SQLite's write lock
        (``BEGIN IMMEDIATE``; the driver's own transaction handling is off for this block,
        since it would not begin one before DDL)."""
        if self.engine.dialect.name == "sqlite":
            with self.engine.connect() as connection:
                connection = connection.execution_options(isolation_level="AUTOCOMMIT")
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                try:
                    yield connection
                except BaseException:
                    connection.exec_driver_sql("ROLLBACK")
                    raise
                connection.exec_driver_sql("COMMIT")
            return
        with self.engine.begin() as connection:
            if self.engine.dialect.name == "postgresql":
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            yield connection

    @staticmethod
    def url_for_home(home: Path) -> str:
        """``VLGATE_STATE_DB``, else the embedded default under ``home``."""
        return os.environ.get("VLGATE_STATE_DB") or f"sqlite:///{Path(home).resolve()}/state.db"

    @classmethod
    def for_home(cls, home: Path) -> StateDatabase:
        return cls(cls.url_for_home(home))
