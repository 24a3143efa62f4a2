"""Exactly-once validation: one row per model version in vlgate's own state database.

Why a unique row and not a registry tag: MLflow's registry has no compare-and-set on
tags, so "read the tag, then set it" from the webhook receiver and the poller at the
same moment lets both win. ``INSERT`` into a table whose primary key is
``(model_name, version)`` is atomic in every SQL database: exactly one caller's insert
succeeds, whichever path (webhook, poller, a repeated or late delivery) gets there
first. The row also carries the validation's state, its MLflow run id (so a restarted
flow logs into the same run), the Prefect flow run that runs it, and a lease that the
running flow renews (:meth:`ClaimStore.heartbeat`): a claim whose worker died is taken
over by a conditional ``UPDATE`` on its attempt count (again one winner), never by a second
insert. Each take-over is the next attempt; the flow holding an older attempt can no
longer finish, fail or defer the claim, so one validation decides.

A model deleted and registered again under its old name starts again at version 1, so
``(model_name, version)`` alone would let the new v1 inherit the old v1's finished claim
and never be validated. Each claim therefore records the version's registration time
(``registered_at``, MLflow's ``creation_timestamp``): a claim offered with another
registration time replaces the old row (one winner, by a conditional ``UPDATE``). A claim
offered without one (a webhook racing the registry) never replaces a row; the poller,
which reads the registry, does. Rows written before this column existed adopt the time on
first sight instead of being validated again.

The rows live in vlgate's state database (``state_db.py``), beside the webhook deliveries
seen and the named locks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from vlgate.registry_hooks.state_db import StateDatabase, aware, claims_table, default_owner, owner_is_gone, utc_now
from vlgate.versions import VersionRef

#: more writes made in the transaction that sets a claim's final state
Also = Callable[[sa.Connection], object]

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
#: How long a claim lives without being renewed: a running flow renews it every third of
#: this; a worker that dies unseen is noticed once it runs out.
DEFAULT_LEASE_S = 90.0


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
    #: the Prefect flow run validating it (the last attempt's)
    flow_run_id: str | None = None
    #: attempts lost with their process (a crashed flow run, a worker gone)
    crashes: int = 0
    #: why the notification of the final state could not be queued (``vlgate status`` shows it)
    untold: str | None = None

    @property
    def subject(self) -> VersionRef:
        """The version claimed."""
        return VersionRef(model=self.model_name, version=self.version)

    def as_dict(self) -> dict[str, object]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in vars(self).items()}


@dataclass(frozen=True)
class Begun:
    """A flow run that took up a claim: the attempt it runs (handed to :meth:`ClaimStore.finish`,
    :meth:`ClaimStore.fail` and :meth:`ClaimStore.defer`), and whether the version had been
    decided before (its validation run again)."""

    attempt: int
    rerun: bool


def _row(subject: VersionRef) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]]:
    """The where clause of one version's claim row."""
    return claims_table.c.model_name == subject.model, claims_table.c.version == subject.version


class ClaimStore:
    """The claims of vlgate's state database."""

    def __init__(self, url: str | StateDatabase, lease_seconds: float = DEFAULT_LEASE_S):
        self.db = url if isinstance(url, StateDatabase) else StateDatabase(url)
        self.url, self.engine = self.db.url, self.db.engine
        self.lease = timedelta(seconds=lease_seconds)

    @classmethod
    def for_home(cls, home: Path, lease_seconds: float = DEFAULT_LEASE_S) -> ClaimStore:
        return cls(StateDatabase.url_for_home(home), lease_seconds)

    def claim(self, subject: VersionRef, via: str, owner: str | None = None, registered_at: str | None = None) -> bool:
        """True for exactly one caller per (model, version, registration), ever. The version
        is in its canonical form (a :class:`VersionRef` is nothing else): "01" would claim
        version 1 a second time."""
        now = utc_now()
        row = {
            "model_name": subject.model,
            "version": subject.version,
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

    def _replace_if_re_registered(self, row: dict[str, object]) -> bool:
        """The row of an earlier registration under the same name and number becomes this
        registration's claim (True for one caller); a row without a time adopts this one."""
        key = (claims_table.c.model_name == row["model_name"], claims_table.c.version == row["version"])
        with self.engine.begin() as connection:
            connection.execute(claims_table.update().where(*key, claims_table.c.registered_at.is_(None)).values(registered_at=row["registered_at"]))
            replaced = connection.execute(
                claims_table.update()
                .where(*key, claims_table.c.registered_at.is_not(None), claims_table.c.registered_at != row["registered_at"])
                # attempts moves on, so a heartbeat still beating for the old registration's flow stops
                .values(
                    {name: value for name, value in row.items() if name not in ("model_name", "version", "attempts")}
                    | {"attempts": claims_table.c.attempts + 1, "run_id": None, "detail": None, "flow_run_id": None, "crashes": 0}
                )
            ).rowcount
        if replaced:
            log.info("%s v%s was registered again (%s): claimed anew", row["model_name"], row["version"], row["registered_at"])
        return replaced == 1

    def take_over(self, subject: VersionRef, attempts: int, owner: str | None = None, detail: str | None = None, crashed: bool = False) -> bool:
        """Make the claim's next attempt (its validation was lost: a crashed flow run, a
        lease run out): back to ``claimed``, the lease started again, the flow run
        forgotten. True for exactly one caller: the claim must still be live and at
        ``attempts``, so two pollers that saw the same loss do not both run it again.
        ``crashed``: the attempt was lost with its process (counted in ``crashes``)."""
        now = utc_now()
        values: dict[str, object] = {"state": ClaimState.CLAIMED, "owner": owner or default_owner(), "lease_expires": now + self.lease, "attempts": claims_table.c.attempts + 1, "updated_at": now, "flow_run_id": None}
        if crashed:
            values["crashes"] = claims_table.c.crashes + 1
        if detail is not None:
            values["detail"] = detail[:4000]
        statement = (
            claims_table.update().where(*_row(subject)).where(claims_table.c.state.in_(LIVE_STATES), claims_table.c.attempts == attempts).values(**values)
        )
        with self.engine.begin() as connection:
            return connection.execute(statement).rowcount == 1

    def defer(self, subject: VersionRef, detail: str, first_delay_s: float, cap_s: float = RETRY_CAP_S, attempt: int | None = None) -> float:
        """A validation stopped by a transient fault (a server that did not answer) goes back
        to ``claimed`` with its lease ending after a back-off that doubles per attempt
        (``first_delay_s``, up to ``cap_s``), so the poller takes it over and runs it again
        (:meth:`take_over`, one winner) instead of recording a verdict. Returns the delay.
        ``attempt``: only while the claim is still at that attempt (see :meth:`begin`)."""
        claim = self.get(subject)
        attempts = claim.attempts if claim is not None else 1
        delay = min(cap_s, first_delay_s * 2 ** (attempts - 1))
        now = utc_now()
        statement = self._where(subject, attempt).values(
            state=ClaimState.CLAIMED, lease_expires=now + timedelta(seconds=delay), detail=f"retrying after {delay:g} s (attempt {attempts}): {detail}"[:4000], updated_at=now
        )
        with self.engine.begin() as connection:
            connection.execute(statement)
        return delay

    def live(self) -> list[Claim]:
        """The claims a flow is meant to be validating (claimed or running)."""
        with self.engine.connect() as connection:
            return [self._claim(row) for row in connection.execute(claims_table.select().where(claims_table.c.state.in_(LIVE_STATES)))]

    def begin(self, subject: VersionRef, flow_run_id: str | None = None, rerun: bool = False) -> Begun | None:
        """This flow run takes up the claim, or None when another is validating it (then
        :meth:`wait` for that one's decision). One winner, by conditional ``UPDATE``s:

        - ``claimed`` (new, taken over, or deferred after a transient fault) → ``running``
          at the same attempt;
        - ``running`` under this same flow run (Prefect running it again) → resumed;
        - ``done`` or ``failed``, when ``rerun`` asks for it (an operator's ``vlgate
          validate``) → ``running`` at the next attempt: the version is validated again,
          into the same MLflow run; without ``rerun`` (a flow run the service sent) None:
          the decision made stands;
        - ``running`` under another flow run → None, even with its lease out: the poller's
          recovery (or :meth:`wait`) takes a lost one over first, so one flow decides."""
        now = utc_now()
        key = _row(subject)
        claim = self.get(subject)
        if claim is None:
            return None
        mine: dict[str, object] = {"flow_run_id": flow_run_id, "lease_expires": now + self.lease, "updated_at": now, "owner": default_owner()}
        values: dict[str, object]
        if claim.state == ClaimState.CLAIMED:
            where, values, rerun = (claims_table.c.state == ClaimState.CLAIMED,), {"state": ClaimState.RUNNING} | mine, False
        elif claim.state == ClaimState.RUNNING and flow_run_id is not None and claim.flow_run_id == flow_run_id:
            where, values, rerun = (claims_table.c.flow_run_id == flow_run_id,), mine, False
        elif claim.state in (ClaimState.DONE, ClaimState.FAILED) and rerun:
            where, values, rerun = (claims_table.c.state == claim.state,), {"state": ClaimState.RUNNING, "attempts": claims_table.c.attempts + 1, "crashes": 0} | mine, True
        else:
            return None
        with self.engine.begin() as connection:
            won = connection.execute(claims_table.update().where(*key, claims_table.c.attempts == claim.attempts, *where).values(**values)).rowcount == 1
        if not won:  # another caller moved it first: it validates
            return None
        return Begun(attempt=claim.attempts + (1 if rerun else 0), rerun=rerun)

    def wait(self, subject: VersionRef, poll_s: float = 1.0) -> Claim | None:
        """Until the claim's validation is decided (``done`` or ``failed``), which another
        flow run is running; returned then. A holder lost with its process (its lease run
        out while ``running``, or its process on this host ended) is taken over here: the
        claim comes back ``claimed`` for the caller to :meth:`begin`."""
        import time

        while True:
            claim = self.get(subject)
            if claim is None or claim.state in (ClaimState.DONE, ClaimState.FAILED, ClaimState.CLAIMED):
                return claim  # None: released meanwhile, the caller claims it again
            if claim.lease_expires < utc_now():
                self.take_over(subject, claim.attempts, detail=f"attempt {claim.attempts + 1}: the last flow stopped renewing its lease", crashed=True)
                continue
            if owner_is_gone(claim.owner):  # it ran here and ended: its lease need not run out first
                self.take_over(subject, claim.attempts, detail=f"attempt {claim.attempts + 1}: the last flow's process ({claim.owner}) ended", crashed=True)
                continue
            time.sleep(poll_s)

    def renew(self, subject: VersionRef) -> None:
        """The lease starts again from now."""
        self._set(subject, {"lease_expires": utc_now() + self.lease})

    def record_flow_run(self, subject: VersionRef, flow_run_id: str) -> None:
        """The Prefect flow run sent to validate the version (by the dispatcher, before a worker takes it)."""
        self._set(subject, {"flow_run_id": flow_run_id})

    def record_run(self, subject: VersionRef, run_id: str) -> None:
        """The validation run the flow logs to, so that a flow run again finds it."""
        self._set(subject, {"run_id": run_id})

    def finish(self, subject: VersionRef, decision: str | None = None, attempt: int | None = None, also: Also | None = None) -> bool:
        """Decided: ``done``, with the decision as the claim's detail. ``attempt``: only while
        the claim is at that attempt; False when it was taken over meanwhile. ``also``: more
        writes in the same transaction, made only when the claim was finished here (the
        decision's notifications: ``outbox.py``)."""
        return self._set(subject, {"state": ClaimState.DONE} | ({"detail": decision[:4000]} if decision is not None else {}), attempt, also)

    def fail(self, subject: VersionRef, reason: str, attempt: int | None = None, also: Also | None = None) -> bool:
        """The validation errored: ``failed`` (final until an operator releases it), with why.
        ``attempt`` and ``also`` as for :meth:`finish`."""
        return self._set(subject, {"state": ClaimState.FAILED, "detail": reason[:4000]}, attempt, also)

    @staticmethod
    def mark_untold(connection: sa.Connection, subject: VersionRef, reason: str | None) -> None:
        """In the transaction of a claim's final state: why its notification could not be
        queued (None: it was)."""
        connection.execute(claims_table.update().where(*_row(subject)).values(untold=None if reason is None else reason[:4000]))

    def holds(self, subject: VersionRef, attempt: int) -> bool:
        """Whether the claim is still live at ``attempt`` (nobody took it over)."""
        claim = self.get(subject)
        return claim is not None and claim.state in LIVE_STATES and claim.attempts == attempt

    def _where(self, subject: VersionRef, attempt: int | None) -> sa.Update:
        statement = claims_table.update().where(*_row(subject))
        return statement if attempt is None else statement.where(claims_table.c.attempts == attempt)

    def _set(self, subject: VersionRef, values: dict[str, object], attempt: int | None = None, also: Also | None = None) -> bool:
        """``values`` (the row's columns) written with the time of the change, on the claim at
        ``attempt`` (None: at any); ``also`` runs in the same transaction where it changed."""
        values = {"updated_at": utc_now()} | values
        with self.engine.begin() as connection:
            changed = connection.execute(self._where(subject, attempt).values(**values)).rowcount == 1
            if changed and also is not None:
                also(connection)
            return changed

    @contextlib.contextmanager
    def heartbeat(self, subject: VersionRef, interval_s: float | None = None) -> Iterator[None]:
        """Keep the claim's lease alive while the block runs (every third of the lease by
        default), so a flow that outlives one lease is not taken over while its worker
        lives; once the worker dies the beats stop and the lease runs out. A
        claim taken over meanwhile (its attempt count moved on) or finished is left alone,
        and a beat that cannot reach the database is tried again at the next one."""
        claim = self.get(subject)
        if claim is None:
            yield
            return
        interval = interval_s if interval_s is not None else self.lease.total_seconds() / 3
        stop = threading.Event()
        mine = (
            *_row(subject),
            claims_table.c.attempts == claim.attempts,
            claims_table.c.state.in_(LIVE_STATES),
        )

        def beat() -> None:
            while not stop.wait(interval):
                now = utc_now()
                try:
                    with self.engine.begin() as connection:
                        renewed = connection.execute(claims_table.update().where(*mine).values(lease_expires=now + self.lease, updated_at=now)).rowcount
                except Exception as error:  # transient: the next beat tries again, well within the lease
                    log.warning("lease of %s not renewed: %s", subject, error)
                    continue
                if not renewed:
                    return

        thread = threading.Thread(target=beat, name=f"vlgate-lease-{subject.model}-{subject.version}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=max(interval, 1.0))

    def release(self, subject: VersionRef) -> None:
        """Forget a claim so the version is validated again (an operator's decision)."""
        with self.engine.begin() as connection:
            connection.execute(claims_table.delete().where(*_row(subject)))

    def get(self, subject: VersionRef) -> Claim | None:
        query = claims_table.select().where(*_row(subject))
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
    def _claim(row: Row[tuple[object, ...]]) -> Claim:
        values = dict(row._mapping)
        values.pop("updated_at", None)
        values["claimed_at"] = aware(values["claimed_at"])
        values["lease_expires"] = aware(values["lease_expires"])
        values["state"] = ClaimState(values["state"])
        return Claim(**values)
