"""The seams' contracts (registry_hooks/seams.py): one suite run over each implementation of
the named locks and of the notification outbox, the SQL ones on a real SQLite state database
in tmp_path and the in-memory ones, so that a unit test may take either and rely on the same
behaviour. Sends go to a recording sender: what reaches a real receiver is
tests/test_notifications.py's."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from vlgate.registry_hooks.locks import NamedLocks
from vlgate.registry_hooks.notifications import MAX_DELIVERY_S, Notification, NotifyEvent, WebhookChannel
from vlgate.registry_hooks.outbox import DEFAULT_LEASE_S, ChannelCounts, Outbox, OutboxState
from vlgate.registry_hooks.seams import MemoryNamedLocks, MemoryOutbox
from vlgate.registry_hooks.senders import DeliveryError
from vlgate.registry_hooks.state_db import StateDatabase
from vlgate.versions import VersionRef

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
LEASE = timedelta(seconds=DEFAULT_LEASE_S)
KINDS = ["sql", "memory"]


class Clock:
    """A UTC clock that moves only when told."""

    def __init__(self, start: datetime = T0):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Recorder:
    """A sender that records (channel, idempotency key) of each send and delivers it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, channel, notification) -> None:
        with self.lock:
            self.sent.append((channel.name, notification.idempotency_key))

    def keys(self) -> list[str]:
        return [key for _, key in self.sent]


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
def db(tmp_path) -> StateDatabase:
    return StateDatabase(f"sqlite:///{tmp_path}/state.db")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def locks(kind, db, clock):
    return NamedLocks(db, clock=clock) if kind == "sql" else MemoryNamedLocks(clock=clock)


def make_outbox(kind: str, db: StateDatabase, **options):
    return Outbox(db, **options) if kind == "sql" else MemoryOutbox(**options)


@pytest.fixture
def outbox(kind, db):
    return make_outbox(kind, db)


def hook(name: str = "hook", events: list[str] | None = None) -> WebhookChannel:
    return WebhookChannel.model_validate({"kind": "webhook", "name": name, "url": "https://hooks.example/vlgate", "secret_env": "VLGATE_TEST_HOOK_SECRET", "events": events})


def note(key: str = "k-1", event: NotifyEvent = NotifyEvent.DECISION_PROMOTED) -> Notification:
    return Notification(idempotency_key=key, event=event, model="vlm", version="3", outcome="promoted", reasons=["all checks passed"], occurred_at=T0)


def later(days: int = 1) -> datetime:
    """A deliverer's time ``days`` from now: every row enqueued is due then."""
    return datetime.now(timezone.utc) + timedelta(days=days)


def failing(message: str = "webhook hooks.example: ConnectError", retry_after_s: float | None = None):
    def send(channel, notification):
        raise DeliveryError(message, retry_after_s=retry_after_s)

    return send


# --- named locks ---------------------------------------------------------------------------


def test_a_held_lock_refuses_a_second_holder_and_its_release_frees_it(locks):
    entered = []
    with locks.hold("gate:m"):
        with pytest.raises(TimeoutError, match=r"^lock 'gate:m' still held after 0 s$"):
            with locks.hold("gate:m", wait_seconds=0, poll_seconds=0.01):
                entered.append("second holder")
        with locks.hold("gate:other", wait_seconds=0):  # another name is another lock
            entered.append("other")
    with locks.hold("gate:m", wait_seconds=0):
        entered.append("after release")
    assert entered == ["other", "after release"]


def test_a_block_that_raises_releases_the_lock(locks):
    with pytest.raises(KeyError), locks.hold("gate:m"):
        raise KeyError("the decision failed")
    with locks.hold("gate:m", wait_seconds=0):
        pass


def test_a_waiter_takes_the_lock_once_the_holder_releases_it(locks):
    inside = threading.Event()

    def wait_for_it():
        with locks.hold("gate:m", wait_seconds=30, poll_seconds=0.01):
            inside.set()

    with locks.hold("gate:m"):
        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        assert not inside.wait(0.3)  # held: the waiter waits
    assert inside.wait(10)
    waiter.join(10)


def test_an_expired_lease_is_overtaken_and_the_overtaken_holders_release_frees_nothing(locks, clock):
    first = locks.hold("gate:m", ttl_seconds=60)
    first.__enter__()  # a holder that dies with the lock: it never releases in time
    clock.advance(60)  # the lease's last moment: still held
    with pytest.raises(TimeoutError), locks.hold("gate:m", wait_seconds=0, poll_seconds=0.01):
        pass
    clock.advance(1)
    with locks.hold("gate:m", ttl_seconds=60, wait_seconds=0):  # expired: taken over
        first.__exit__(None, None, None)  # the overtaken holder's late release
        with pytest.raises(TimeoutError), locks.hold("gate:m", wait_seconds=0, poll_seconds=0.01):
            pass  # still the new holder's
    with locks.hold("gate:m", wait_seconds=0):
        pass


def test_holders_in_threads_never_overlap(locks):
    inside, overlaps = [], []

    def hold():
        with locks.hold("gate:m", poll_seconds=0.01):
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            time.sleep(0.03)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [] and inside == []


# --- the outbox: writing ---------------------------------------------------------------------


def test_enqueue_belongs_to_the_callers_transaction_and_is_idempotent_per_key_and_channel(outbox, db):
    promotions, failures = hook("hook"), hook("ops", events=["validation-failed"])
    with db.engine.begin() as connection:
        assert outbox.enqueue(connection, note("k-1"), [promotions, failures]) == 1  # "ops" does not take promotions
        assert outbox.enqueue(connection, note("k-1"), [promotions, failures]) == 0
        assert outbox.rows() == []  # not before the commit
    [row] = outbox.rows()
    assert (row.idempotency_key, row.channel, row.event, row.state, row.attempts, row.last_error, row.delivered_at) == ("k-1", "hook", "decision-promoted", OutboxState.PENDING, 0, None, None)
    assert row.next_attempt_at == row.created_at and Notification.from_json(row.payload) == note("k-1")
    assert outbox.notify(note("k-1"), [promotions]) == 0
    assert outbox.notify(note("k-2", NotifyEvent.VALIDATION_FAILED), [promotions, failures]) == 2
    with pytest.raises(RuntimeError), db.engine.begin() as connection:  # what it reports rolled back: no notification
        assert outbox.enqueue(connection, note("k-rolled-back"), [promotions]) == 1
        raise RuntimeError("the decision's write failed")
    assert [(row.idempotency_key, row.channel) for row in outbox.rows()] == [("k-2", "ops"), ("k-2", "hook"), ("k-1", "hook")]  # the latest first
    assert [row.channel for row in outbox.rows("k-2", limit=1)] == ["ops"]
    assert outbox.notify(note("k-rolled-back"), [promotions]) == 1  # never was: added now


def test_a_savepoint_rolled_back_takes_its_rows_with_it_and_a_released_one_joins_its_parent(outbox, db):
    with db.engine.begin() as connection:
        with connection.begin_nested():
            outbox.enqueue(connection, note("kept"), [hook()])
        with pytest.raises(RuntimeError), connection.begin_nested():
            outbox.enqueue(connection, note("undone"), [hook()])
            raise RuntimeError("rolled back to the savepoint")
        with pytest.raises(RuntimeError), connection.begin_nested():
            with connection.begin_nested():  # released into the outer savepoint, which is rolled back
                outbox.enqueue(connection, note("undone-inside"), [hook()])
            raise RuntimeError("the outer savepoint rolled back")
        with connection.begin_nested():
            with connection.begin_nested():
                outbox.enqueue(connection, note("kept-inside"), [hook()])
        assert outbox.enqueue(connection, note("undone"), [hook()]) == 1  # its first write was undone
    assert sorted(row.idempotency_key for row in outbox.rows()) == ["kept", "kept-inside", "undone"]


def test_a_claims_final_state_and_its_notification_commit_together(kind, tmp_path):
    from vlgate.flows.notifying import in_transaction
    from vlgate.registry_hooks.claims import ClaimStore

    claims = ClaimStore(f"sqlite:///{tmp_path}/state.db")
    outbox = make_outbox(kind, claims.db)
    assert claims.claim(VersionRef(model="vlm", version="3"), via="poller")
    assert not claims.finish(VersionRef(model="vlm", version="3"), "promoted", attempt=7, also=in_transaction(outbox, note("stale"), [hook()]))  # not its attempt: nothing written
    assert claims.finish(VersionRef(model="vlm", version="3"), "promoted", also=in_transaction(outbox, note("told"), [hook()]))
    assert [row.idempotency_key for row in outbox.rows()] == ["told"] and claims.get(VersionRef(model="vlm", version="3")).untold is None


# --- the outbox: delivering ------------------------------------------------------------------


def test_due_rows_are_sent_once_each_the_earliest_first(outbox):
    for i in range(3):
        outbox.notify(note(f"k-{i}"), [hook()])
    sent, now = Recorder(), later()
    report = outbox.deliver_due([hook()], now=now, send=sent)
    assert (report.delivered, report.retried, report.failed, report.skipped, report.errors, report.held_back, report.out_of_time) == (3, 0, 0, 0, [], [], False)
    assert sent.keys() == ["k-0", "k-1", "k-2"]
    assert {(row.state, row.attempts, row.delivered_at, row.last_error) for row in outbox.rows()} == {(OutboxState.DELIVERED, 1, now, None)}
    assert outbox.deliver_due([hook()], now=later(2), send=sent).delivered == 0 and len(sent.sent) == 3
    assert outbox.counts() == {"hook": ChannelCounts(delivered=3)}


def test_a_failed_send_is_retried_after_a_doubling_backoff_and_fails_for_good_after_max_attempts(kind, db):
    outbox = make_outbox(kind, db, max_attempts=3)
    outbox.notify(note("k-1"), [hook()])
    outbox.notify(note("k-2"), [hook("chat")])
    sent, now, error = Recorder(), later(), "webhook hooks.example: ConnectError"

    def hook_down(channel, notification):
        if channel.name == "hook":
            raise DeliveryError(error)
        sent(channel, notification)

    report = outbox.deliver_due([hook(), hook("chat")], now=now, send=hook_down)
    assert (report.delivered, report.retried, report.failed, report.held_back, report.errors) == (1, 1, 0, ["hook"], [f"hook: {error}"])
    [row] = outbox.rows("k-1")
    assert (row.state, row.attempts, row.next_attempt_at, row.last_error) == (OutboxState.PENDING, 1, now + timedelta(seconds=5), f"attempt 1/3: {error}")
    assert outbox.deliver_due([hook()], now=now + timedelta(seconds=4.9), send=hook_down).retried == 0  # not due within its backoff
    assert outbox.deliver_due([hook()], now=now + timedelta(seconds=5), send=hook_down).retried == 1
    [row] = outbox.rows("k-1")
    assert (row.attempts, row.next_attempt_at) == (2, now + timedelta(seconds=15))  # 10 s after the second
    report = outbox.deliver_due([hook()], now=now + timedelta(seconds=15), send=hook_down)
    assert (report.retried, report.failed) == (0, 1)
    [row] = outbox.failed_rows()
    assert (row.idempotency_key, row.state, row.attempts, row.next_attempt_at, row.last_error) == ("k-1", OutboxState.FAILED, 3, now + timedelta(seconds=15), f"attempt 3/3: {error}")
    assert outbox.counts() == {"chat": ChannelCounts(delivered=1), "hook": ChannelCounts(failed=1)}
    assert outbox.deliver_due([hook()], now=later(30), send=sent).delivered == 0  # failed stays failed
    assert outbox.requeue_failed("chat") == 0 and outbox.requeue_failed("hook", now=now + timedelta(seconds=20)) == 1
    [row] = outbox.rows("k-1")
    assert (row.state, row.attempts, row.next_attempt_at) == (OutboxState.PENDING, 0, now + timedelta(seconds=20))
    assert outbox.deliver_due([hook()], now=now + timedelta(seconds=20), send=sent).delivered == 1 and sent.keys() == ["k-2", "k-1"]
    assert outbox.rows("k-1")[0].attempts == 1


@pytest.mark.parametrize(("retry_after_s", "wait_s"), [(None, 5), (2, 5), (120, 120), (10**6, 3600)])
def test_a_receivers_retry_after_lengthens_the_backoff_up_to_its_cap(outbox, retry_after_s, wait_s):
    outbox.notify(note(), [hook()])
    now = later()
    assert outbox.deliver_due([hook()], now=now, send=failing("busy", retry_after_s)).retried == 1
    assert outbox.rows()[0].next_attempt_at == now + timedelta(seconds=wait_s)


def test_a_row_whose_channel_is_gone_fails_for_good_saying_so(outbox):
    outbox.notify(note(), [hook("gone")])
    sent = Recorder()
    report = outbox.deliver_due([hook()], now=later(), send=sent)
    assert (report.failed, report.retried, sent.sent) == (1, 0, [])
    [row] = outbox.failed_rows()
    assert row.attempts == 1 and row.last_error == "attempt 1/10: channel 'gone' is no longer configured (vlgate.yaml notify: channels:)"


def test_a_deliverer_that_dies_mid_send_leaves_the_row_to_whoever_comes_after_its_lease(outbox):
    outbox.notify(note(), [hook()])
    now, sent = later(), Recorder()

    def killed(channel, notification):
        raise SystemExit("the deliverer's process is killed")

    with pytest.raises(SystemExit):
        outbox.deliver_due([hook()], now=now, send=killed)
    [row] = outbox.rows()
    assert (row.state, row.attempts, row.next_attempt_at) == (OutboxState.PENDING, 0, now + LEASE)  # claimed: leased
    assert outbox.deliver_due([hook()], now=now + LEASE - timedelta(seconds=1), send=sent).delivered == 0
    assert outbox.deliver_due([hook()], now=now + LEASE, send=sent).delivered == 1 and sent.keys() == ["k-1"]
    assert outbox.rows()[0].attempts == 1


def test_a_send_that_outlives_its_lease_records_no_failure_and_a_late_success_still_counts(outbox):
    outbox.notify(note("lost-then-failed"), [hook()])
    outbox.notify(note("lost-then-sent"), [hook("chat")])
    now, second, channels = later(), Recorder(), [hook(), hook("chat")]

    def outlived(channel, notification):  # while this send hangs, another deliverer takes the row after the lease
        if notification.idempotency_key == "lost-then-failed":
            assert outbox.deliver_due(channels, now=now + LEASE, send=second, keys=["lost-then-failed"]).delivered == 1
            raise DeliveryError("no answer")
        assert outbox.deliver_due(channels, now=now + LEASE, send=failing("refused"), keys=["lost-then-sent"]).retried == 1

    report = outbox.deliver_due(channels, now=now, send=outlived)
    assert (report.delivered, report.retried, report.failed, report.errors) == (1, 0, 0, [])  # the lost lease's failure is not recorded
    failed_late, sent_late = outbox.rows("lost-then-failed")[0], outbox.rows("lost-then-sent")[0]
    assert (failed_late.state, failed_late.attempts, failed_late.last_error) == (OutboxState.DELIVERED, 1, None)
    assert (sent_late.state, sent_late.attempts, sent_late.last_error) == (OutboxState.DELIVERED, 2, None)  # delivered: no third send
    assert second.keys() == ["lost-then-failed"]


def test_a_lease_lost_to_a_deliverer_that_failed_too_records_only_the_later_failure(outbox):
    outbox.notify(note(), [hook()])
    now = later()
    retry_at = now + LEASE + timedelta(seconds=5)

    def outlived(channel, notification):
        assert outbox.deliver_due([hook()], now=now + LEASE, send=failing("refused")).retried == 1
        raise DeliveryError("no answer")

    report = outbox.deliver_due([hook()], now=now, send=outlived)
    assert (report.retried, report.failed, report.errors, report.held_back) == (0, 0, [], [])
    [row] = outbox.rows()
    assert (row.state, row.attempts, row.next_attempt_at, row.last_error) == (OutboxState.PENDING, 1, retry_at, "attempt 1/10: refused")


def test_a_late_success_does_not_revive_a_row_failed_for_good_meanwhile(kind, db):
    outbox = make_outbox(kind, db, max_attempts=1)
    outbox.notify(note(), [hook()])
    now = later()

    def outlived(channel, notification):
        assert outbox.deliver_due([hook()], now=now + LEASE, send=failing("refused")).failed == 1

    outbox.deliver_due([hook()], now=now, send=outlived)
    [row] = outbox.rows()
    assert (row.state, row.attempts, row.delivered_at, row.last_error) == (OutboxState.FAILED, 1, None, "attempt 1/1: refused")


def test_a_channel_that_failed_is_held_back_for_the_rest_of_the_pass(outbox):
    for i in range(3):
        outbox.notify(note(f"k-{i}"), [hook(), hook("chat")])
    sent, now = Recorder(), later()

    def hook_down(channel, notification):
        sent(channel, notification)
        if channel.name == "hook":
            raise DeliveryError("down")

    report = outbox.deliver_due([hook(), hook("chat")], now=now, send=hook_down)
    assert (report.delivered, report.retried, report.held_back) == (3, 1, ["hook"])
    assert [channel for channel, _ in sent.sent].count("hook") == 1
    assert sorted(row.attempts for row in outbox.rows() if row.channel == "hook") == [0, 0, 1]


def test_the_earliest_next_attempt_goes_first_whatever_the_order_enqueued(outbox):
    outbox.notify(note("k-0"), [hook()])
    outbox.notify(note("k-1"), [hook()])
    now, sent = later(), Recorder()
    assert outbox.deliver_due([hook()], now=now + timedelta(seconds=100), send=failing(), keys=["k-0"]).retried == 1  # k-0 next at now + 105 s
    assert outbox.deliver_due([hook()], now=now, send=failing(), keys=["k-1"]).retried == 1  # k-1 next at now + 5 s
    assert outbox.deliver_due([hook()], now=now + timedelta(seconds=200), send=sent).delivered == 2
    assert sent.keys() == ["k-1", "k-0"]


def test_a_pass_keeps_to_its_keys_limit_and_budget(outbox):
    for i in range(4):
        outbox.notify(note(f"k-{i}"), [hook()])
    sent, now = Recorder(), later()
    assert outbox.deliver_due([hook()], now=now, send=sent, keys=["k-2"]).delivered == 1 and sent.keys() == ["k-2"]
    assert outbox.deliver_due([hook()], now=now, send=sent, limit=1).delivered == 1 and sent.keys() == ["k-2", "k-0"]
    spent = outbox.deliver_due([hook()], now=now, send=sent, budget_s=0)
    assert spent.out_of_time and spent.delivered == 0
    assert outbox.deliver_due([hook()], now=now, send=sent).delivered == 2 and sent.keys() == ["k-2", "k-0", "k-1", "k-3"]


def test_racing_deliverers_send_each_row_once(outbox, db):
    with db.engine.begin() as connection:
        for i in range(24):
            outbox.enqueue(connection, note(f"k-{i}"), [hook()])
    sent, barrier, errors = Recorder(), threading.Barrier(4), []

    def deliver():
        try:
            barrier.wait()
            outbox.deliver_due([hook()], send=sent)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and sorted(sent.keys()) == sorted(f"k-{i}" for i in range(24))
    assert outbox.counts() == {"hook": ChannelCounts(delivered=24)}


def test_delivered_rows_are_forgotten_before_a_cutoff_and_the_rest_kept(outbox):
    outbox.notify(note("sent"), [hook()])
    now = later()
    assert outbox.deliver_due([hook()], now=now, send=Recorder()).delivered == 1
    outbox.notify(note("waiting"), [hook()])
    assert outbox.forget_delivered_before(now) == 0
    assert outbox.forget_delivered_before(now + timedelta(seconds=1)) == 1
    assert [row.idempotency_key for row in outbox.rows()] == ["waiting"]


@pytest.mark.parametrize("options", [{"max_attempts": 0}, {"lease_s": MAX_DELIVERY_S}])
def test_an_outbox_refuses_settings_that_would_break_its_guarantees(kind, db, options):
    with pytest.raises(ValueError):
        make_outbox(kind, db, **options)


def test_the_service_context_still_builds_the_sql_implementations(tmp_path, monkeypatch):
    from vlgate.flows.context import ServiceContext

    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    context = ServiceContext(tmp_path)
    assert type(context.locks) is NamedLocks and type(context.outbox) is Outbox
    assert context.outbox.engine.url.database == str(tmp_path / "state.db")
