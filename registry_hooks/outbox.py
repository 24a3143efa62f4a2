"""The notification outbox: notifications written in the same transaction as what they
report, and delivered after it commits (docs/notifications.md).

Why an outbox: a decision recorded and a notification sent are two systems; sending from
inside the decision's code either loses the message (the process dies after the commit) or
announces what was never committed (it dies before). :meth:`Outbox.enqueue` writes one row
per channel inside the caller's transaction, so the notification exists exactly when what it
reports does; a deliverer (:meth:`Outbox.deliver_due`, run by the service in a loop:
:func:`seams.deliver_forever`) sends the rows after.

Guarantees:

- at least once per (notification, channel): a row leaves ``pending`` only once its channel
  accepted it (``delivered``) or it ran out of attempts (``failed``); a deliverer that dies
  mid-send leaves the row to be sent again when its lease runs out. Receivers drop repeats
  by the idempotency key (``X-Vlgate-Delivery``, ``idempotency_key`` in the payload);
- one row per (idempotency key, channel): enqueueing the same notification again does
  nothing (``INSERT ... ON CONFLICT DO NOTHING``);
- two deliverers never send one row at the same time: each row is claimed by a
  compare-and-set on ``next_attempt_at`` (moved to now + lease where it still holds the value
  read), so of several deliverers that saw it due exactly one sends it;
- a failed send is an attempt: ``attempts`` + 1, ``last_error`` (one line, never a secret),
  and the next try after a backoff doubling from 5 s up to 1 h (longer when the receiver asks
  with ``Retry-After``); after ``max_attempts`` the row is ``failed`` (shown by ``vlgate
  status``; :meth:`Outbox.requeue_failed` sends it again);
- delivery problems never reach the code that reported the event: they are logged and
  recorded on the row.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from vlgate.registry_hooks.notifications import MAX_DELIVERY_S, ChannelConfig, Notification, config_problem
from vlgate.registry_hooks.senders import DeliveryError, Sender, one_line, send_notification
from vlgate.registry_hooks.state_db import StateDatabase, aware, outbox_table, utc_now

log = logging.getLogger("vlgate.outbox")

#: The first wait after a failed send; each further failure doubles it, up to the cap.
FIRST_BACKOFF_S = 5.0
BACKOFF_CAP_S = 3600.0
DEFAULT_MAX_ATTEMPTS = 10
#: How long a deliverer holds a row while it sends: longer than any send may take (a
#: channel's ``timeout_s`` bounds its whole delivery, and is at most ``MAX_DELIVERY_S``);
#: a row held past it is sent again by another.
DEFAULT_LEASE_S = 300.0
#: What a command (``vlgate validate``, ``approve``, ``drift``, ``serve --once``) spends
#: starting deliveries at its end: the rows still due after it wait for the next deliverer.
#: A command waits at most this plus one delivery's deadline.
COMMAND_DELIVERY_BUDGET_S = 20.0


#: Where the deliverer reads the time (fixed in tests).
_Clock = Callable[[], datetime]


class OutboxState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


def backoff_s(attempts: int, first_s: float = FIRST_BACKOFF_S, cap_s: float = BACKOFF_CAP_S) -> float:
    """The wait after the ``attempts``-th failed send: first_s, 2·first_s, 4·first_s, ... up to cap_s."""
    return min(cap_s, first_s * 2 ** min(max(attempts - 1, 0), 30))


@dataclass(frozen=True)
class OutboxRow:
    """One notification for one channel."""

    id: int
    idempotency_key: str
    channel: str
    event: str
    state: OutboxState
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    payload: str

    def as_dict(self) -> dict[str, object]:
        """For ``--json``: the row without its payload, times in ISO 8601."""
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in vars(self).items() if k != "payload"}


@dataclass(frozen=True)
class ChannelCounts:
    pending: int = 0
    failed: int = 0
    delivered: int = 0


@dataclass
class DeliveryReport:
    """What one :meth:`Outbox.deliver_due` pass did."""

    delivered: int = 0
    #: sends that failed and will be tried again
    retried: int = 0
    #: rows that failed for good this pass (out of attempts, or a channel no longer configured)
    failed: int = 0
    #: due rows another deliverer claimed first
    skipped: int = 0
    #: ``channel: error`` of each failed send, in order
    errors: list[str] = field(default_factory=list)
    #: channels whose send failed this pass: their other due rows wait for the next one
    held_back: list[str] = field(default_factory=list)
    #: whether the pass stopped at its time budget with rows perhaps still due
    out_of_time: bool = False


class OutboxDelivery(ABC):
    """How every outbox delivers (the SQL :class:`Outbox`; the in-memory one of ``seams.py``):
    the pass, its claims and leases, backoff and attempts, written once over three storage
    steps a subclass supplies (:meth:`_claim_next`, :meth:`_mark_delivered`,
    :meth:`_settle_failure`), so that every outbox follows the one policy."""

    def __init__(self, max_attempts: int = DEFAULT_MAX_ATTEMPTS, lease_s: float = DEFAULT_LEASE_S, first_backoff_s: float = FIRST_BACKOFF_S, backoff_cap_s: float = BACKOFF_CAP_S):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if lease_s <= MAX_DELIVERY_S:
            raise ValueError(f"lease_s must be longer than the longest delivery ({MAX_DELIVERY_S:g} s), or a second deliverer sends a row the first is still sending")
        self.max_attempts = max_attempts
        self.lease = timedelta(seconds=lease_s)
        self.first_backoff_s, self.backoff_cap_s = first_backoff_s, backoff_cap_s

    # --- delivering ----------------------------------------------------------------------

    def deliver_due(
        self, channels: Sequence[ChannelConfig], now: datetime | None = None, send: Sender | None = None, limit: int = 100,
        budget_s: float | None = None, keys: Collection[str] | None = None,
    ) -> DeliveryReport:  # fmt: skip
        """Send the pending rows that are due (``next_attempt_at`` <= now), one at a time, each
        claimed first so no other deliverer sends it meanwhile; at most ``limit`` sends, none
        started after ``budget_s`` (a command's end: :data:`COMMAND_DELIVERY_BUDGET_S`), only
        the rows of ``keys`` when given. A channel whose send fails is held back for the rest
        of the pass, so a receiver that hangs costs one deadline a pass, not one a row. A row
        whose channel is no longer configured fails with that reason. Never raises for a
        delivery problem (only when the state database itself fails)."""
        send = send or send_notification
        clock = (lambda: aware(now)) if now is not None else utc_now
        by_name = {channel.name: channel for channel in channels}
        report = DeliveryReport()
        started = time.monotonic()
        for _ in range(limit):
            if budget_s is not None and time.monotonic() - started >= budget_s:
                report.out_of_time = True
                break
            claimed = self._claim_next(clock(), report, keys)
            if claimed is None:
                break
            failures = len(report.errors)
            self._deliver(claimed, by_name.get(claimed[0].channel), send, clock, report)
            if len(report.errors) > failures and claimed[0].channel not in report.held_back:
                report.held_back.append(claimed[0].channel)
        return report

    def _deliver(self, claimed: tuple[OutboxRow, datetime], channel: ChannelConfig | None, send: Sender, clock: _Clock, report: DeliveryReport) -> None:
        row, lease = claimed
        if channel is None:
            self._failed(row, lease, clock(), f"channel {row.channel!r} is no longer configured (vlgate.yaml notify: channels:)", final=True, report=report)
            return
        try:
            notification = Notification.from_json(row.payload)
        except ValidationError as error:
            self._failed(row, lease, clock(), f"the stored payload is not a readable vlgate.notification/1: {config_problem(error)}", final=True, report=report)
            return
        try:
            send(channel, notification)
        except DeliveryError as error:
            self._failed(row, lease, clock(), str(error), final=False, report=report, retry_after_s=error.retry_after_s)
            return
        except Exception as error:  # a sender's own bug: recorded like a failed send, never raised into the loop
            log.exception("sending outbox row %s to %r raised", row.id, row.channel)
            self._failed(row, lease, clock(), f"{type(error).__name__}: {error}", final=False, report=report)
            return
        # delivered, even when this deliverer's lease ran out meanwhile: no third send
        self._mark_delivered(row.id, clock())
        report.delivered += 1
        log.info("notification %s (%s) delivered to %r", notification.idempotency_key, notification.event, row.channel)

    def _failed(self, row: OutboxRow, lease: datetime, now: datetime, error: str, final: bool, report: DeliveryReport, retry_after_s: float | None = None) -> None:
        attempts = row.attempts + 1
        error = one_line(error)
        final = final or attempts >= self.max_attempts
        delay = max(backoff_s(attempts, self.first_backoff_s, self.backoff_cap_s), min(retry_after_s or 0.0, self.backoff_cap_s))
        # only while this deliverer still holds the row (its lease is the value it set)
        next_attempt_at = now if final else now + timedelta(seconds=delay)
        if not self._settle_failure(row.id, lease, attempts, f"attempt {attempts}/{self.max_attempts}: {error}", failed=final, next_attempt_at=next_attempt_at):
            log.warning("outbox row %s (%r): lost its lease while sending; its failure is not recorded: %s", row.id, row.channel, error)
            return
        report.errors.append(f"{row.channel}: {error}")
        if final:
            report.failed += 1
            log.error("notification %s to %r failed for good after %d attempt(s): %s", row.idempotency_key, row.channel, attempts, error)
        else:
            report.retried += 1
            log.warning("notification %s to %r not delivered (attempt %d/%d, next in %g s): %s", row.idempotency_key, row.channel, attempts, self.max_attempts, delay, error)

    # --- storage: what each outbox does its own way ------------------------------------

    @abstractmethod
    def _claim_next(self, now: datetime, report: DeliveryReport, keys: Collection[str] | None = None) -> tuple[OutboxRow, datetime] | None:
        """The next due row (pending, ``next_attempt_at`` <= now; of ``keys``, if given; not of
        a channel held back this pass), the earliest ``next_attempt_at`` first, then the
        oldest, claimed: its ``next_attempt_at`` moved to now + lease (the returned time) by a
        compare-and-set, so that of several deliverers exactly one gets it (each that lost a
        race counted in ``report.skipped``). None when none is due."""

    @abstractmethod
    def _mark_delivered(self, row_id: int, at: datetime) -> None:
        """The row delivered at ``at`` (attempts + 1, no error) if it is still pending."""

    @abstractmethod
    def _settle_failure(self, row_id: int, lease: datetime, attempts: int, last_error: str, failed: bool, next_attempt_at: datetime) -> bool:
        """A failed send recorded (``failed``: for good) only while the deliverer still holds
        the row (pending, its ``next_attempt_at`` still ``lease``); whether it was."""


class Outbox(OutboxDelivery):
    """The outbox of vlgate's state database."""

    def __init__(self, db: StateDatabase, max_attempts: int = DEFAULT_MAX_ATTEMPTS, lease_s: float = DEFAULT_LEASE_S, first_backoff_s: float = FIRST_BACKOFF_S, backoff_cap_s: float = BACKOFF_CAP_S):
        super().__init__(max_attempts, lease_s, first_backoff_s, backoff_cap_s)
        self.db, self.engine = db, db.engine

    # --- writing -------------------------------------------------------------------------

    def enqueue(self, connection: sa.Connection, notification: Notification, channels: Iterable[ChannelConfig]) -> int:
        """Add ``notification`` for each of ``channels`` subscribed to its event, in the
        caller's transaction (``connection`` from ``engine.begin()``): it is sent only if that
        transaction commits. A (key, channel) already in the outbox is left as it is. Returns
        the rows added."""
        now = utc_now()
        payload = notification.model_dump_json()
        rows = [
            {
                "idempotency_key": notification.idempotency_key,
                "channel": channel.name,
                "event": str(notification.event),
                "payload": payload,
                "state": OutboxState.PENDING.value,
                "attempts": 0,
                "next_attempt_at": now,
                "created_at": now,
            }
            for channel in channels
            if channel.accepts(notification.event)
        ]
        return sum(self._insert_once(connection, row) for row in rows)

    def _insert_once(self, connection: sa.Connection, row: dict[str, object]) -> int:
        dialect = connection.dialect.name
        if dialect in ("sqlite", "postgresql"):
            insert = (sqlite.insert if dialect == "sqlite" else postgresql.insert)(outbox_table)
            statement = insert.values(**row).on_conflict_do_nothing(index_elements=["idempotency_key", "channel"])
            return max(connection.execute(statement).rowcount, 0)
        try:  # another database: the duplicate's error undone by a savepoint, the caller's transaction kept
            with connection.begin_nested():
                connection.execute(outbox_table.insert().values(**row))
        except IntegrityError:
            return 0
        return 1

    def notify(self, notification: Notification, channels: Iterable[ChannelConfig]) -> int:
        """:meth:`enqueue` in a transaction of its own (for events not tied to another write)."""
        with self.engine.begin() as connection:
            return self.enqueue(connection, notification, channels)

    # --- delivering: the storage steps -----------------------------------------------

    def _claim_next(self, now: datetime, report: DeliveryReport, keys: Collection[str] | None = None) -> tuple[OutboxRow, datetime] | None:
        """The next due row (of ``keys``, if given; not of a channel held back this pass),
        claimed (its lease set: the returned time), or None when none is due."""
        columns = outbox_table.c
        where = [columns.state == OutboxState.PENDING.value, columns.next_attempt_at <= now]
        if report.held_back:
            where.append(columns.channel.not_in(report.held_back))
        if keys is not None:
            where.append(columns.idempotency_key.in_(list(keys)))
        while True:
            with self.engine.connect() as connection:
                found = connection.execute(outbox_table.select().where(*where).order_by(columns.next_attempt_at, columns.id).limit(1)).first()
            if found is None:
                return None
            row = _row(found)
            lease = now + self.lease
            with self.engine.begin() as connection:
                won = connection.execute(
                    outbox_table.update()
                    .where(columns.id == row.id, columns.state == OutboxState.PENDING.value, columns.next_attempt_at == found.next_attempt_at)
                    .values(next_attempt_at=lease)
                ).rowcount
            if won == 1:
                return row, lease
            report.skipped += 1  # another deliverer claimed it between the read and the update

    def _mark_delivered(self, row_id: int, at: datetime) -> None:
        with self.engine.begin() as connection:
            connection.execute(
                outbox_table.update()
                .where(outbox_table.c.id == row_id, outbox_table.c.state == OutboxState.PENDING.value)
                .values(state=OutboxState.DELIVERED.value, attempts=outbox_table.c.attempts + 1, delivered_at=at, last_error=None)
            )

    def _settle_failure(self, row_id: int, lease: datetime, attempts: int, last_error: str, failed: bool, next_attempt_at: datetime) -> bool:
        values: dict[str, object] = {"attempts": attempts, "last_error": last_error, "next_attempt_at": next_attempt_at}
        if failed:
            values["state"] = OutboxState.FAILED.value
        with self.engine.begin() as connection:
            updated = connection.execute(
                outbox_table.update().where(outbox_table.c.id == row_id, outbox_table.c.state == OutboxState.PENDING.value, outbox_table.c.next_attempt_at == lease).values(**values)
            ).rowcount
        return updated == 1

    # --- reading and housekeeping --------------------------------------------------------

    def counts(self) -> dict[str, ChannelCounts]:
        """Rows pending, failed and delivered per channel name (``vlgate status``)."""
        columns = outbox_table.c
        found: dict[str, dict[str, int]] = {}
        with self.engine.connect() as connection:
            for channel, state, count in connection.execute(sa.select(columns.channel, columns.state, sa.func.count()).group_by(columns.channel, columns.state)):
                found.setdefault(channel, {})[state] = count
        return {
            channel: ChannelCounts(**{state: count for state, count in states.items() if state in OutboxState.__members__.values()})
            for channel, states in sorted(found.items())
        }

    def failed_rows(self, limit: int = 20) -> list[OutboxRow]:
        """The rows that failed for good, the latest first."""
        return self._rows(outbox_table.c.state == OutboxState.FAILED.value, limit)

    def rows(self, key: str | None = None, limit: int = 1000) -> list[OutboxRow]:
        """The rows of one idempotency key (or all), the latest first."""
        return self._rows(outbox_table.c.idempotency_key == key if key is not None else sa.true(), limit)

    def _rows(self, where: sa.ColumnElement[bool], limit: int) -> list[OutboxRow]:
        with self.engine.connect() as connection:
            return [_row(found) for found in connection.execute(outbox_table.select().where(where).order_by(outbox_table.c.id.desc()).limit(limit))]

    def requeue_failed(self, channel: str | None = None, now: datetime | None = None) -> int:
        """Failed rows (of one channel, or all) back to pending with their attempts reset (an
        operator's action once the receiver is fixed). Returns how many."""
        where = [outbox_table.c.state == OutboxState.FAILED.value] + ([outbox_table.c.channel == channel] if channel is not None else [])
        with self.engine.begin() as connection:
            return connection.execute(outbox_table.update().where(*where).values(state=OutboxState.PENDING.value, attempts=0, next_attempt_at=aware(now) if now else utc_now())).rowcount

    def forget_delivered_before(self, cutoff: datetime) -> int:
        """Delete the rows delivered before ``cutoff`` (the outbox is not an archive)."""
        with self.engine.begin() as connection:
            return connection.execute(outbox_table.delete().where(outbox_table.c.state == OutboxState.DELIVERED.value, outbox_table.c.delivered_at < cutoff)).rowcount



def _row(found: sa.Row[tuple[object, ...]]) -> OutboxRow:
    values = found._mapping
    delivered_at = values["delivered_at"]
    return OutboxRow(
        id=int(values["id"]),
        idempotency_key=str(values["idempotency_key"]),
        channel=str(values["channel"]),
        event=str(values["event"]),
        state=OutboxState(values["state"]),
        attempts=int(values["attempts"]),
        next_attempt_at=aware(values["next_attempt_at"]),
        last_error=values["last_error"],
        created_at=aware(values["created_at"]),
        delivered_at=aware(delivered_at) if delivered_at is not None else None,
        payload=str(values["payload"]),
    )
