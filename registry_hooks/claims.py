"""Exactly-once validation: one row per model version in vlgate's own state database.

Why a unique row and not a registry tag: MLflow's registry has no compare-and-set on
tags, so "read the tag, then set it" from the webhook receiver and the poller at the
same moment lets both win. ``INSERT`` into a table whose primary key is
``(model_name, version)`` is atomic in every SQL database: exactly one caller's insert
succeeds, whichever path (webhook, poller, a repeated or late delivery) gets there
first. The row also carries the validation's state, its MLflow run id (so a restarted
flow logs into the same run) and a lease: a claim whose worker died is taken over by
a conditional ``UPDATE ... WHERE lease_expires < now`` (again one winner), never by a
second insert.

A model deleted and registered again under its old name starts again at version 1, so
``(model_name, version)`` alone would let the new v1 inherit the old v1's finished claim
and never be validated. Each claim therefore records the version's registration time
(``registered_at``, MLflow's ``creation_timestamp``): a claim offered with another
registration time replaces the old row (one winner, by a conditional ``UPDATE``). A claim
offered without one (a webhook racing the registry) never replaces a row; the poller,
which reads the registry, does. Rows written before this column existed adopt the time on
first sight instead of being validated again.

The same database keeps the webhook delivery ids already seen (replay protection that
survives a restart and is shared by every receiver replica) and short-lived named
locks (one gate decision per registered model at a time, so two candidates judged
concurrently cannot both compare against a stale champion).

``VLGATE_STATE_DB`` picks the database (``postgresql://...`` in a real deployment);
the embedded default is ``sqlite:///$VLGATE_HOME/state.db``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from vlgate.registry_hooks import migrations

log = logging.getLogger("vlgate.claims")

#: A claim's life: claimed → running → done | failed. ``failed`` is final too: a version
#: whose validation errored is not promoted and its reasons are recorded (fail closed);
#: re-validating it is an explicit operator action (``release``).
class ClaimState(StrEnum):
    CLAIMED = "claimed"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


#: the states whose lease may run out (a worker holds them)
LIVE_STATES = (ClaimState.CLAIMED, ClaimState.RUNNING)
#: The longest wait before a validation stopped by a transient fault runs again.
RETRY_CAP_S = 1800.0
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
    sa.Column("registered_at", sa.String(32)),  # the version's creation_timestamp (ms), see above
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


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything vlgate writes is UTC
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Claim:
    model_name: str
    version: str
    state: ClaimState
    claimed_via: str
    owner: str
    claimed_at: datetime
    lease_expires: datetime
    attempts: int
    run_id: str | None
    detail: str | None
    registered_at: str | None = None

    def as_dict(self) -> dict:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in vars(self).items()}


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


class ClaimStore:
    """Claims, webhook deliveries and locks in one SQL database."""

    def __init__(self, url: str, lease_seconds: float = 3 * 3600):
        self.url = url
        self.lease = timedelta(seconds=lease_seconds)
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

    @classmethod
    def for_home(cls, home: Path, **kwargs) -> ClaimStore:
        return cls(os.environ.get("VLGATE_STATE_DB") or f"sqlite:///{Path(home).resolve()}/state.db", **kwargs)

    # --- claims -------------------------------------------------------------------
    def claim(self, model_name: str, version: str, via: str, owner: str | None = None, registered_at: str | None = None) -> bool:
        """True for exactly one caller per (model, version, registration), ever."""
        now = _now()
        row = {
            "model_name": model_name,
            "version": str(version),
            "state": ClaimState.CLAIMED,
            "claimed_via": via,
            "owner": owner or default_owner(),
            "claimed_at": now,
            "lease_expires": now + self.lease,
            "attempts": 1,
            "updated_at": now,
            "registered_at": registered_at,
        }
        try:
            with self.engine.begin() as connection:
                connection.execute(claims_table.insert().values(**row))
        except IntegrityError:
            return registered_at is not None and self._replace_if_re_registered(row)
        return True

    def _replace_if_re_registered(self, row: dict) -> bool:
        """The row of an earlier registration under the same name and number becomes this
        registration's claim (True for one caller); a row without a time adopts this one."""
        key = (claims_table.c.model_name == row["model_name"], claims_table.c.version == row["version"])
        with self.engine.begin() as connection:
            connection.execute(claims_table.update().where(*key, claims_table.c.registered_at.is_(None)).values(registered_at=row["registered_at"]))
            replaced = connection.execute(
                claims_table.update()
                .where(*key, claims_table.c.registered_at.is_not(None), claims_table.c.registered_at != row["registered_at"])
                # attempts moves on, so a heartbeat still beating for the old registration's flow stops
                .values({name: value for name, value in row.items() if name not in ("model_name", "version", "attempts")} | {"attempts": claims_table.c.attempts + 1, "run_id": None, "detail": None})
            ).rowcount
        if replaced:
            log.info("%s v%s was registered again (%s): claimed anew", row["model_name"], row["version"], row["registered_at"])
        return replaced == 1

    def take_over_expired(self, model_name: str, version: str, owner: str | None = None) -> bool:
        """Take over a claim whose lease ran out before it finished (its worker died);
        True for exactly one caller."""
        now = _now()
        statement = (
            claims_table.update()
            .where(claims_table.c.model_name == model_name, claims_table.c.version == str(version))
            .where(claims_table.c.state.in_(LIVE_STATES), claims_table.c.lease_expires < now)
            .values(owner=owner or default_owner(), lease_expires=now + self.lease, attempts=claims_table.c.attempts + 1, updated_at=now)
        )
        with self.engine.begin() as connection:
            return connection.execute(statement).rowcount == 1

    def defer(self, model_name: str, version: str, detail: str, first_delay_s: float, cap_s: float = RETRY_CAP_S) -> float:
        """A validation stopped by a transient fault (a server that did not answer) goes back
        to ``claimed`` with its lease ending after a back-off that doubles per attempt
        (``first_delay_s``, up to ``cap_s``), so the poller takes it over and runs it again
        (:meth:`take_over_expired`, one winner) instead of recording a verdict. Returns the delay."""
        claim = self.get(model_name, version)
        attempts = claim.attempts if claim is not None else 1
        delay = min(cap_s, first_delay_s * 2 ** (attempts - 1))
        now = _now()
        statement = (
            claims_table.update()
            .where(claims_table.c.model_name == model_name, claims_table.c.version == str(version))
            .values(state=ClaimState.CLAIMED, lease_expires=now + timedelta(seconds=delay), detail=f"retrying after {delay:g} s (attempt {attempts}): {detail}"[:4000], updated_at=now)
        )
        with self.engine.begin() as connection:
            connection.execute(statement)
        return delay

    def expired(self) -> list[Claim]:
        now = _now()
        query = claims_table.select().where(claims_table.c.state.in_(LIVE_STATES), claims_table.c.lease_expires < now)
        with self.engine.connect() as connection:
            return [self._claim(row) for row in connection.execute(query)]

    def start(self, model_name: str, version: str) -> None:
        """The flow runs: ``running``, the lease renewed."""
        self._set(model_name, version, state=ClaimState.RUNNING, renew=True)

    def renew(self, model_name: str, version: str) -> None:
        """The lease starts again from now."""
        self._set(model_name, version, renew=True)

    def record_run(self, model_name: str, version: str, run_id: str) -> None:
        """The validation run the flow logs to, so that a flow run again finds it."""
        self._set(model_name, version, run_id=run_id)

    def finish(self, model_name: str, version: str, decision: str | None = None) -> None:
        """Decided: ``done``, with the decision as the claim's detail."""
        self._set(model_name, version, state=ClaimState.DONE, detail=decision)

    def fail(self, model_name: str, version: str, reason: str) -> None:
        """The validation errored: ``failed`` (final until an operator releases it), with why."""
        self._set(model_name, version, state=ClaimState.FAILED, detail=reason)

    def _set(self, model_name: str, version: str, state: ClaimState | None = None, run_id: str | None = None, detail: str | None = None, renew: bool = False) -> None:
        values: dict = {"updated_at": _now()}
        if state is not None:
            values["state"] = state
        if run_id is not None:
            values["run_id"] = run_id
        if detail is not None:
            values["detail"] = detail[:4000]
        if renew:
            values["lease_expires"] = _now() + self.lease
        statement = claims_table.update().where(claims_table.c.model_name == model_name, claims_table.c.version == str(version)).values(**values)
        with self.engine.begin() as connection:
            connection.execute(statement)

    @contextlib.contextmanager
    def heartbeat(self, model_name: str, version: str, interval_s: float | None = None) -> Iterator[None]:
        """Keep the claim's lease alive while the block runs (every third of the lease by
        default), so a flow that outlives one lease is not taken over while its worker
        lives; once the worker dies the beats stop and the lease runs out as before. A
        claim taken over meanwhile (its attempt count moved on) or finished is left alone,
        and a beat that cannot reach the database is tried again at the next one."""
        claim = self.get(model_name, version)
        if claim is None:
            yield
            return
        interval = interval_s if interval_s is not None else self.lease.total_seconds() / 3
        stop = threading.Event()
        mine = (
            claims_table.c.model_name == model_name,
            claims_table.c.version == str(version),
            claims_table.c.attempts == claim.attempts,
            claims_table.c.state.in_(LIVE_STATES),
        )

        def beat() -> None:
            while not stop.wait(interval):
                now = _now()
                try:
                    with self.engine.begin() as connection:
                        renewed = connection.execute(claims_table.update().where(*mine).values(lease_expires=now + self.lease, updated_at=now)).rowcount
                except Exception as error:  # transient: the next beat tries again, well within the lease
                    log.warning("lease of %s v%s not renewed: %s", model_name, version, error)
                    continue
                if not renewed:
                    return

        thread = threading.Thread(target=beat, name=f"vlgate-lease-{model_name}-{version}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=max(interval, 1.0))

    def release(self, model_name: str, version: str) -> None:
        """Forget a claim so the version is validated again (an operator's decision)."""
        with self.engine.begin() as connection:
            connection.execute(claims_table.delete().where(claims_table.c.model_name == model_name, claims_table.c.version == str(version)))

    def get(self, model_name: str, version: str) -> Claim | None:
        query = claims_table.select().where(claims_table.c.model_name == model_name, claims_table.c.version == str(version))
        with self.engine.connect() as connection:
            row = connection.execute(query).first()
        return None if row is None else self._claim(row)

    def all(self, model_name: str | None = None) -> list[Claim]:
        query = claims_table.select().order_by(claims_table.c.model_name, claims_table.c.claimed_at)
        if model_name is not None:
            query = query.where(claims_table.c.model_name == model_name)
        with self.engine.connect() as connection:
            return [self._claim(row) for row in connection.execute(query)]

    @staticmethod
    def _claim(row) -> Claim:
        values = dict(row._mapping)
        values.pop("updated_at", None)
        values["claimed_at"] = _aware(values["claimed_at"])
        values["lease_expires"] = _aware(values["lease_expires"])
        values["state"] = ClaimState(values["state"])
        return Claim(**values)

    # --- webhook deliveries -----------------------------------------------------------
    def delivery_seen(self, delivery_id: str) -> bool:
        """Whether a delivery id was recorded (by :meth:`first_delivery`) already."""
        with self.engine.connect() as connection:
            found = connection.execute(sa.select(deliveries_table.c.delivery_id).where(deliveries_table.c.delivery_id == delivery_id)).first()
        return found is not None

    def first_delivery(self, delivery_id: str) -> bool:
        """Record a delivery id as handled: True the first time, False for a replay."""
        try:
            with self.engine.begin() as connection:
                connection.execute(deliveries_table.insert().values(delivery_id=delivery_id, received_at=_now()))
        except IntegrityError:
            return False
        return True

    def forget_deliveries_before(self, cutoff: datetime) -> int:
        """Delivery ids older than the receiver's timestamp tolerance can go: a replay that
        old is refused on its timestamp anyway."""
        with self.engine.begin() as connection:
            return connection.execute(deliveries_table.delete().where(deliveries_table.c.received_at < cutoff)).rowcount

    # --- named locks ------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, name: str, ttl_seconds: float = 600, wait_seconds: float = 900, poll_seconds: float = 0.2) -> Iterator[None]:
        """Hold the named lock; a holder that died is overtaken after ``ttl_seconds``."""
        owner = f"{default_owner()}:{time.monotonic_ns()}"
        deadline = time.monotonic() + wait_seconds
        while True:
            now = _now()
            try:
                with self.engine.begin() as connection:
                    connection.execute(locks_table.delete().where(locks_table.c.name == name, locks_table.c.expires < now))
                    connection.execute(locks_table.insert().values(name=name, owner=owner, expires=now + timedelta(seconds=ttl_seconds)))
                break
            except IntegrityError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lock {name!r} still held after {wait_seconds:.0f} s") from None
                time.sleep(poll_seconds)
        try:
            yield
        finally:
            with self.engine.begin() as connection:
                connection.execute(locks_table.delete().where(locks_table.c.name == name, locks_table.c.owner == owner))
