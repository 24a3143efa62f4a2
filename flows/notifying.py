"""What the flows tell the team (docs/notifications.md): a notification for each decision,
drift finding and failure, put in the outbox in the same transaction as the claim's final
state where there is one (``registry_hooks/outbox.py``), and sent by the deliverer
(``vlgate serve``'s, or the one ``vlgate validate`` and ``vlgate drift`` run once at
their end). Writing a notification never changes or delays a decision: the channels are
read from ``vlgate.yaml``, and an outbox that cannot be written is logged, not raised.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from vlgate.decisions import DecisionKind, DecisionRecord, Outcome
from vlgate.registry_hooks.claims import Also, ClaimStore
from vlgate.registry_hooks.notifications import ChannelConfig, Notification, NotifyEvent, notification_key
from vlgate.registry_hooks.outbox import COMMAND_DELIVERY_BUDGET_S, DeliveryReport, Outbox
from vlgate.registry_hooks.seams import NotificationOutbox
from vlgate.registry_hooks.senders import one_line
from vlgate.registry_hooks.state_db import StateDatabase
from vlgate.text import shell_command
from vlgate.tracking.naming import run_page_path
from vlgate.versions import VersionRef

log = logging.getLogger("vlgate.notify")

DECISION_EVENTS = {
    Outcome.PROMOTED: NotifyEvent.DECISION_PROMOTED,
    Outcome.REJECTED: NotifyEvent.DECISION_REJECTED,
    Outcome.INCONCLUSIVE: NotifyEvent.DECISION_INCONCLUSIVE,
    Outcome.COULD_NOT_JUDGE: NotifyEvent.DECISION_COULD_NOT_JUDGE,
    Outcome.AWAITING_APPROVAL: NotifyEvent.AWAITING_APPROVAL,
    Outcome.APPROVAL_EXPIRED: NotifyEvent.APPROVAL_EXPIRED,
}


def outbox_at(home: Path) -> Outbox:
    return Outbox(StateDatabase.for_home(home))


def run_url(tracking_uri: str, experiment_id: str | None, run_id: str | None) -> str | None:
    """The MLflow UI's page of a run, where the tracking server serves one (not an embedded store)."""
    if run_id is None or experiment_id is None or not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{tracking_uri.rstrip('/')}/{run_page_path(experiment_id, run_id)}"


def decision_notification(subject: VersionRef, run_id: str, record: DecisionRecord, items_saved: float | None, run_page: str | None, report: str | None) -> Notification:
    """A recorded decision: its outcome, first reasons, the champion before and after, and where to read more."""
    event = DECISION_EVENTS[record.outcome]
    if record.kind is DecisionKind.APPROVAL and record.outcome is Outcome.PROMOTED:
        event = NotifyEvent.APPROVED
    elif record.kind is DecisionKind.REJECTION:
        event = NotifyEvent.REJECTED_BY_PERSON
    waiting = record.outcome is Outcome.AWAITING_APPROVAL
    model, version = subject.model, subject.version
    return Notification(
        idempotency_key=notification_key(event, model, version, run_id, str(record.sequence)),
        event=event, model=model, version=version, outcome=record.outcome.value, reasons=record.reasons,
        items_saved=items_saved, champion_before=record.champion_before, champion_after=record.champion_after,
        run_url=run_page, report_url=Path(report).resolve().as_uri() if report else None,
        command=f'{shell_command("vlgate", "approve", model, version)} --reason "..."  (or vlgate reject)' if waiting else None,
        occurred_at=record.judged_at or datetime.now(UTC),
    )  # fmt: skip


def failure_notification(subject: VersionRef, reason: str, attempt: int, event: NotifyEvent = NotifyEvent.VALIDATION_FAILED) -> Notification:
    """A validation that failed after its retries, or a recovery that gave up on it."""
    model, version = subject.model, subject.version
    return Notification(
        idempotency_key=notification_key(event, model, version, str(attempt)), event=event, model=model, version=version,
        outcome=Outcome.COULD_NOT_JUDGE.value, reasons=[reason], command=shell_command("vlgate", "release", model, version), occurred_at=datetime.now(UTC),
    )  # fmt: skip


def drift_notification(model: str, version: str | None, run_id: str | None, drifted: bool, reasons: Sequence[str], run_page: str | None) -> Notification:
    """A drift check that found drift, or could not check."""
    event = NotifyEvent.DRIFT_FOUND if drifted else NotifyEvent.DRIFT_NOT_CHECKED
    now = datetime.now(UTC)
    return Notification(
        idempotency_key=notification_key(event, model, version or "-", run_id or now.isoformat()), event=event, model=model, version=version,
        outcome="drifted" if drifted else "could not check", reasons=list(reasons), run_url=run_page, occurred_at=now,
    )  # fmt: skip


def in_transaction(outbox: NotificationOutbox, notification: Notification, channels: Sequence[ChannelConfig]) -> Also:
    """The outbox write a claim's final state makes in its own transaction (``ClaimStore.finish``'s
    ``also``). The one exception to "a notification exists exactly when the decision does":
    an outbox write that fails rolls back alone (a savepoint), so that telling about a
    decision never undoes or repeats it; the claim then says why it was not told
    (``untold``, shown by ``vlgate status``), in the same transaction. The claim is the
    notification's own version's."""
    subject = VersionRef(model=notification.model, version=notification.version)  # type: ignore[arg-type]  # a claim's notification names its version

    def enqueue(connection: sa.Connection) -> int:
        if not channels:
            ClaimStore.mark_untold(connection, subject, None)
            return 0
        try:
            with connection.begin_nested():  # a failed write rolls back alone: the claim's state is kept
                added = outbox.enqueue(connection, notification, channels)
        except Exception as error:  # never let telling about a decision change it
            reason = f"the {notification.event} notification could not be queued: {type(error).__name__}: {one_line(str(error), 300)}"
            log.error("%s: %s", subject, reason)
            ClaimStore.mark_untold(connection, subject, reason)
            return 0
        ClaimStore.mark_untold(connection, subject, None)
        return added

    return enqueue


def tell(home: Path, notification: Notification, channels: Sequence[ChannelConfig]) -> None:
    """A notification not tied to a claim (drift, a recovery that gave up): in a transaction
    of its own, and never raised into the caller."""
    if not channels:
        return
    try:
        outbox_at(home).notify(notification, channels)
    except Exception as error:  # the event happened all the same; the log says it was not told
        log.error("could not queue the %s notification of %s: %s", notification.event, notification.model, error)


def deliver_now(home: Path, channels: Sequence[ChannelConfig]) -> DeliveryReport | None:
    """One pass of the deliverer at a command's end (``vlgate validate``/``drift``/``approve``,
    ``serve --once``), within :data:`COMMAND_DELIVERY_BUDGET_S`: a backlog, or a receiver
    that hangs, never holds the command longer; what is left waits for the next deliverer."""
    if not channels:
        return None
    try:
        return outbox_at(home).deliver_due(channels, budget_s=COMMAND_DELIVERY_BUDGET_S)
    except Exception as error:  # the state database away: the rows wait for the next deliverer
        log.error("could not deliver notifications now: %s", error)
        return None
