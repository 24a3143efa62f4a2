"""The seams between vlgate's flows and its shared state: what the flows ask of the named
locks and of the notification outbox (:class:`NamedLockManager`, :class:`NotificationOutbox`,
the types of ``ServiceContext.locks`` and ``.outbox``), and an in-memory implementation of
each (:class:`MemoryNamedLocks`, :class:`MemoryOutbox`), as Prefect's ``LockManager`` has its
``MemoryLockManager``.

The production implementations are the SQL ones on the home's state database
(``locks.NamedLocks``, ``outbox.Outbox``): shared by every process and machine of one
deployment, and durable. The in-memory ones are for unit tests and single-process use: they
keep the same contract (``tests/test_seams.py`` runs one suite over both), thread-safe, but
hold nothing across processes and lose everything when the process ends.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import sqlalchemy as sa
from sqlalchemy import event

from vlgate.registry_hooks.notifications import ChannelConfig, Notification
from vlgate.registry_hooks.outbox import (
    BACKOFF_CAP_S,
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    FIRST_BACKOFF_S,
    ChannelCounts,
    DeliveryReport,
    OutboxDelivery,
    OutboxRow,
    OutboxState,
)
from vlgate.registry_hooks.senders import Sender
from vlgate.registry_hooks.state_db import aware, utc_now

if TYPE_CHECKING:
    from vlgate.registry_hooks.locks import NamedLocks
    from vlgate.registry_hooks.outbox import Outbox


log = logging.getLogger("vlgate.outbox")


class NamedLockManager(Protocol):
    """Named locks with a lease: one holder of a name at a time, whichever process holds it
    (a gate decision per registered model: ``gate:{model}``)."""

    def hold(self, name: str, ttl_seconds: float = 600, wait_seconds: float = 900, poll_seconds: float = 0.2) -> AbstractContextManager[None]:
        """Hold ``name`` for the block; released when it ends, however it ends.

        - One holder at a time: a second ``hold`` of a held name waits, trying again every
          ``poll_seconds``, and raises ``TimeoutError`` once ``wait_seconds`` have passed.
          Not re-entrant: a holder that asks again waits for itself.
        - A lease, not a renewal: the lock is held until ``ttl_seconds`` after it was taken
          (read on the implementation's clock, UTC). Past that (strictly after), a holder
          that died is overtaken by the next ``hold``; the overtaken holder's release then
          frees nothing, since the lock is another's.
        - No order among waiters: whichever tries first once it is free takes it."""
        ...


class NotificationOutbox(Protocol):
    """Notifications written in the same transaction as what they report, delivered after it
    commits, at least once per (notification, channel) (``outbox.py`` has the whole story)."""

    def enqueue(self, connection: sa.Connection, notification: Notification, channels: Iterable[ChannelConfig]) -> int:
        """A pending row for each channel of ``channels`` that takes the notification's event,
        in the caller's transaction (``connection``): it exists once that transaction
        commits, and never if it (or the savepoint it was written in) rolls back. A
        (idempotency key, channel) already in the outbox is left as it is. The rows added."""
        ...

    def notify(self, notification: Notification, channels: Iterable[ChannelConfig]) -> int:
        """:meth:`enqueue` in a transaction of its own (an event not tied to another write)."""
        ...

    def deliver_due(
        self, channels: Sequence[ChannelConfig], now: datetime | None = None, send: Sender | None = None, limit: int = 100,
        budget_s: float | None = None, keys: Collection[str] | None = None,
    ) -> DeliveryReport:  # fmt: skip
        """One pass of the deliverer, at ``now`` (else the UTC time): the pending rows with
        ``next_attempt_at`` <= now, the earliest first (then the oldest), of ``keys`` when given,
        at most ``limit`` sends, none started after ``budget_s``.

        - Each row is claimed before its send, at most once: ``next_attempt_at`` moves to now
          + the lease by a compare-and-set, so of several deliverers exactly one sends it. A
          deliverer that dies mid-send leaves the row to be sent again when the lease expires.
        - Sent: ``delivered`` (attempts + 1), even if its lease expired meanwhile.
        - A failed send, while the deliverer still holds the lease: attempts + 1,
          ``last_error`` ("attempt n/max: ..."), next try after a backoff doubling from ``first_backoff_s``
          (longer where the receiver asked), ``failed`` after ``max_attempts``; its channel is
          held back for the rest of the pass. A lease lost meanwhile records nothing.
        - A row whose channel is not in ``channels`` fails for good, saying so.
        Raises only when the store itself fails."""
        ...

    def counts(self) -> dict[str, ChannelCounts]:
        """Rows pending, failed and delivered per channel name, sorted by name."""
        ...

    def failed_rows(self, limit: int = 20) -> list[OutboxRow]:
        """The rows that failed for good, the latest enqueued first."""
        ...

    def rows(self, key: str | None = None, limit: int = 1000) -> list[OutboxRow]:
        """The rows of one idempotency key (or all), the latest enqueued first."""
        ...


class MemoryNamedLocks:
    """:class:`NamedLockManager` in this process's memory, for unit tests and single-process
    use: the SQL ``NamedLocks``' semantics (lease read on ``clock``, expired strictly after
    ``ttl_seconds``, the wait on the monotonic clock), none of its reach across processes."""

    def __init__(self, clock: Callable[[], datetime] = utc_now):
        self.clock = clock
        self._changed = threading.Condition(threading.Lock())
        self._held: dict[str, tuple[object, datetime]] = {}  # name: (holder, lease expires)

    @contextlib.contextmanager
    def hold(self, name: str, ttl_seconds: float = 600, wait_seconds: float = 900, poll_seconds: float = 0.2) -> Iterator[None]:
        holder = object()
        deadline = time.monotonic() + wait_seconds
        with self._changed:
            while True:
                now = self.clock()
                held = self._held.get(name)
                if held is None or held[1] < now:  # free, or its holder's lease has expired
                    self._held[name] = (holder, now + timedelta(seconds=ttl_seconds))
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lock {name!r} still held after {wait_seconds:.0f} s")
                self._changed.wait(poll_seconds)  # woken early by a release
        try:
            yield
        finally:
            with self._changed:
                held = self._held.get(name)
                if held is not None and held[0] is holder:
                    del self._held[name]
                    self._changed.notify_all()


class _CallerTransaction:
    """The rows a caller's connection enqueued that its transaction has not committed yet: by
    the savepoint (``NestedTransaction``; None: the transaction itself) they were written in.
    A released savepoint's rows join its parent, the innermost savepoint at the next event
    (:meth:`settle`): SQLAlchemy moves to the parent only after the release event."""

    def __init__(self) -> None:
        self.by_savepoint: dict[object | None, list[OutboxRow]] = {}
        self.released: list[OutboxRow] = []

    def settle(self, connection: sa.Connection) -> None:
        if self.released:
            self.by_savepoint.setdefault(connection.get_nested_transaction(), []).extend(self.released)
            self.released = []

    def add(self, connection: sa.Connection, rows: list[OutboxRow]) -> None:
        self.settle(connection)
        self.by_savepoint.setdefault(connection.get_nested_transaction(), []).extend(rows)

    def all(self) -> list[OutboxRow]:
        return [row for rows in self.by_savepoint.values() for row in rows] + self.released

    def clear(self) -> None:
        self.by_savepoint, self.released = {}, []


class MemoryOutbox(OutboxDelivery):
    """:class:`NotificationOutbox` in this process's memory, for unit tests and single-process
    use. Delivery is the SQL ``Outbox``'s own code (``OutboxDelivery``: claims, leases,
    backoff, attempts); only the rows live in a dict under a ``threading.Lock``, so a claim
    is always won (``DeliveryReport.skipped`` stays 0).

    :meth:`enqueue` joins the caller's SQLAlchemy transaction as the SQL one does: the rows
    wait, by savepoint, for its commit (they appear then) or rollback (they never do),
    followed through the connection's events. They take their id when enqueued; a key and
    channel already enqueued by a transaction still open counts as present. Times are the
    UTC clock's, or the ``now`` a call is given, as in the SQL one."""

    def __init__(self, max_attempts: int = DEFAULT_MAX_ATTEMPTS, lease_s: float = DEFAULT_LEASE_S, first_backoff_s: float = FIRST_BACKOFF_S, backoff_cap_s: float = BACKOFF_CAP_S):
        super().__init__(max_attempts, lease_s, first_backoff_s, backoff_cap_s)
        self._lock = threading.Lock()
        self._rows: dict[int, OutboxRow] = {}  # committed, by id
        self._ids = itertools.count(1)
        self._open: weakref.WeakKeyDictionary[sa.Connection, _CallerTransaction] = weakref.WeakKeyDictionary()

    # --- writing -------------------------------------------------------------------------

    def enqueue(self, connection: sa.Connection, notification: Notification, channels: Iterable[ChannelConfig]) -> int:
        if not connection.in_transaction():
            connection.begin()  # what the SQL outbox's INSERT does (autobegin): the rows wait for the caller's commit
        with self._lock:
            rows = self._new_rows(notification, channels)
            self._joined(connection).add(connection, rows)
        return len(rows)

    def notify(self, notification: Notification, channels: Iterable[ChannelConfig]) -> int:
        with self._lock:
            rows = self._new_rows(notification, channels)
            self._rows.update((row.id, row) for row in rows)
        return len(rows)

    def _new_rows(self, notification: Notification, channels: Iterable[ChannelConfig]) -> list[OutboxRow]:
        """The rows to add (under the lock): one per channel that takes the event, none for a
        (key, channel) committed or waiting in an open transaction."""
        taken = {(row.idempotency_key, row.channel) for row in self._rows.values()}
        taken |= {(row.idempotency_key, row.channel) for pending in list(self._open.values()) for row in pending.all()}
        now, payload = utc_now(), notification.model_dump_json()
        rows: list[OutboxRow] = []
        for channel in channels:
            if not channel.accepts(notification.event) or (notification.idempotency_key, channel.name) in taken:
                continue
            taken.add((notification.idempotency_key, channel.name))
            rows.append(
                OutboxRow(
                    id=next(self._ids), idempotency_key=notification.idempotency_key, channel=channel.name, event=str(notification.event),
                    state=OutboxState.PENDING, attempts=0, next_attempt_at=now, last_error=None, created_at=now, delivered_at=None, payload=payload,
                )  # fmt: skip
            )
        return rows

    def _joined(self, connection: sa.Connection) -> _CallerTransaction:
        """The rows waiting on ``connection``'s transaction, its events followed from the first."""
        pending = self._open.get(connection)
        if pending is not None:
            return pending
        pending = self._open[connection] = _CallerTransaction()

        def settled(conn: sa.Connection, *_: object) -> None:
            with self._lock:
                pending.settle(conn)

        def released(conn: sa.Connection, *_: object) -> None:
            with self._lock:
                pending.settle(conn)
                pending.released = pending.by_savepoint.pop(conn.get_nested_transaction(), [])

        def rolled_back_to(conn: sa.Connection, *_: object) -> None:
            with self._lock:
                pending.settle(conn)
                pending.by_savepoint.pop(conn.get_nested_transaction(), None)

        def committed(conn: sa.Connection) -> None:
            with self._lock:
                present = {(row.idempotency_key, row.channel) for row in self._rows.values()}
                self._rows.update((row.id, row) for row in pending.all() if (row.idempotency_key, row.channel) not in present)
                pending.clear()

        def rolled_back(conn: sa.Connection) -> None:
            with self._lock:
                pending.clear()

        event.listen(connection, "savepoint", settled)
        event.listen(connection, "release_savepoint", released)
        event.listen(connection, "rollback_savepoint", rolled_back_to)
        event.listen(connection, "commit", committed)
        event.listen(connection, "rollback", rolled_back)
        return pending

    # --- delivering: the storage steps -----------------------------------------------

    def _claim_next(self, now: datetime, report: DeliveryReport, keys: Collection[str] | None = None) -> tuple[OutboxRow, datetime] | None:
        wanted = set(keys) if keys is not None else None
        with self._lock:
            due = [
                row
                for row in self._rows.values()
                if row.state is OutboxState.PENDING and row.next_attempt_at <= now and row.channel not in report.held_back and (wanted is None or row.idempotency_key in wanted)
            ]
            if not due:
                return None
            row = min(due, key=lambda found: (found.next_attempt_at, found.id))
            lease = now + self.lease
            self._rows[row.id] = replace(row, next_attempt_at=lease)
            return row, lease

    def _mark_delivered(self, row_id: int, at: datetime) -> None:
        with self._lock:
            row = self._rows.get(row_id)
            if row is not None and row.state is OutboxState.PENDING:
                self._rows[row_id] = replace(row, state=OutboxState.DELIVERED, attempts=row.attempts + 1, delivered_at=aware(at), last_error=None)

    def _settle_failure(self, row_id: int, lease: datetime, attempts: int, last_error: str, failed: bool, next_attempt_at: datetime) -> bool:
        with self._lock:
            row = self._rows.get(row_id)
            if row is None or row.state is not OutboxState.PENDING or row.next_attempt_at != lease:
                return False
            state = OutboxState.FAILED if failed else OutboxState.PENDING
            self._rows[row_id] = replace(row, state=state, attempts=attempts, last_error=last_error, next_attempt_at=next_attempt_at)
            return True

    # --- reading and housekeeping --------------------------------------------------------

    def counts(self) -> dict[str, ChannelCounts]:
        found: dict[str, dict[str, int]] = {}
        with self._lock:
            for row in self._rows.values():
                states = found.setdefault(row.channel, {})
                states[row.state.value] = states.get(row.state.value, 0) + 1
        return {channel: ChannelCounts(**states) for channel, states in sorted(found.items())}

    def failed_rows(self, limit: int = 20) -> list[OutboxRow]:
        return self._latest(lambda row: row.state is OutboxState.FAILED, limit)

    def rows(self, key: str | None = None, limit: int = 1000) -> list[OutboxRow]:
        return self._latest(lambda row: key is None or row.idempotency_key == key, limit)

    def _latest(self, where: Callable[[OutboxRow], bool], limit: int) -> list[OutboxRow]:
        with self._lock:
            return [row for _, row in sorted(self._rows.items(), reverse=True) if where(row)][:limit]

    def requeue_failed(self, channel: str | None = None, now: datetime | None = None) -> int:
        """As the SQL ``Outbox.requeue_failed``: failed rows (of ``channel``, or all) pending
        again, their attempts reset, due at ``now``. How many."""
        due = aware(now) if now else utc_now()
        with self._lock:
            found = [row for row in self._rows.values() if row.state is OutboxState.FAILED and (channel is None or row.channel == channel)]
            for row in found:
                self._rows[row.id] = replace(row, state=OutboxState.PENDING, attempts=0, next_attempt_at=due)
        return len(found)

    def forget_delivered_before(self, cutoff: datetime) -> int:
        """As the SQL ``Outbox.forget_delivered_before``: the rows delivered before ``cutoff`` deleted."""
        cutoff = aware(cutoff)
        with self._lock:
            gone = [row.id for row in self._rows.values() if row.state is OutboxState.DELIVERED and row.delivered_at is not None and row.delivered_at < cutoff]
            for row_id in gone:
                del self._rows[row_id]
        return len(gone)


if TYPE_CHECKING:  # mypy holds every implementation to its protocol

    def _implements(sql_locks: NamedLocks, memory_locks: MemoryNamedLocks, sql_outbox: Outbox, memory_outbox: MemoryOutbox) -> tuple[NamedLockManager, NamedLockManager, NotificationOutbox, NotificationOutbox]:
        return sql_locks, memory_locks, sql_outbox, memory_outbox


def deliver_forever(outbox: NotificationOutbox, channels: Sequence[ChannelConfig], stop: threading.Event, interval_s: float = 5.0, send: Sender | None = None) -> None:
    """The service's deliverer: ``outbox.deliver_due`` every ``interval_s`` until ``stop``
    is set (run it in a thread; several processes may each run one). Nothing it meets
    stops it: a state database that is down is logged and tried again on the next pass."""
    while not stop.is_set():
        try:
            report = outbox.deliver_due(channels, send=send)
            if report.delivered or report.failed:
                log.info("outbox: %d delivered, %d to retry, %d failed", report.delivered, report.retried, report.failed)
        except Exception:
            log.exception("outbox: a delivery pass failed; trying again in %g s", interval_s)
        stop.wait(interval_s)
