"""Exactly-once claims, the webhook receiver's checks, and the poller (no model runs here:
the dispatcher's flow is replaced by a recorder; the real flow is in test_service_e2e)."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from starlette.testclient import TestClient

from vlgate.flows.context import ServiceContext
from vlgate.registry_hooks.claims import ClaimStore
from vlgate.registry_hooks.deliveries import DeliveryLog
from vlgate.registry_hooks.dispatch import Dispatcher, poll_once
from vlgate.registry_hooks.webhook import DELIVERY_HEADER, PATH, SIGNATURE_HEADER, TIMESTAMP_HEADER, create_app, signature
from vlgate.versions import VersionRef

pytestmark = pytest.mark.service

SECRET = "s3cret"


@pytest.fixture
def claims(tmp_path):
    return ClaimStore(f"sqlite:///{tmp_path}/state.db")


class Recorder:
    """Stands in for the validation flow: records which versions were started."""

    def __init__(self):
        self.started: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, model_name, version):
        with self.lock:
            self.started.append((model_name, version))


def test_exactly_one_of_many_concurrent_claims_wins(claims):
    barrier = threading.Barrier(8)
    wins = []

    def contend(i):
        barrier.wait()
        wins.append(claims.claim(VersionRef(model="m", version="1"), via=f"thread-{i}"))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(wins) == [False] * 7 + [True]
    assert claims.get(VersionRef(model="m", version="1")).state == "claimed"
    assert claims.claim(VersionRef(model="m", version="2"), via="poller") is True  # another version is its own claim


def test_processes_opening_a_fresh_state_database_at_once_all_succeed(tmp_path, open_stores_at_once):
    """A service starting its receiver, poller and flows together on a new home: each
    creates the tables it finds missing, and without a lock the losers failed with "table
    already exists"."""
    url = f"sqlite:///{tmp_path}/state.db"
    assert open_stores_at_once(url) == ["ok"] * 6
    claims = ClaimStore(url)
    assert claims.claim(VersionRef(model="m", version="1"), via="poller") is True and claims.get(VersionRef(model="m", version="1")).state == "claimed"


def test_a_busy_answer_to_the_switch_to_wal_is_retried_and_a_wal_file_is_not_switched_again(tmp_path, monkeypatch):
    """SQLite may answer the journal-mode switch "database is locked" at once (a process
    creating the tables meanwhile): that was a crash of the opening process; it is a retry."""
    import sqlite3

    import sqlalchemy as sa

    from vlgate.registry_hooks import state_db

    real_create_engine = sa.create_engine
    switches: list[str] = []

    def engine_answering_busy_once(*args, **kwargs):
        engine = real_create_engine(*args, **kwargs)

        @sa.event.listens_for(engine, "before_cursor_execute")
        def busy_once(connection, cursor, statement, *rest):
            if statement == "PRAGMA journal_mode=WAL":
                switches.append(statement)
                if len(switches) == 1:  # what SQLAlchemy raises for the driver's answer
                    raise sa.exc.OperationalError(statement, None, sqlite3.OperationalError("database is locked"))

        return engine

    monkeypatch.setattr(state_db.sa, "create_engine", engine_answering_busy_once)
    url = f"sqlite:///{tmp_path}/state.db"
    ClaimStore(url)
    assert switches == ["PRAGMA journal_mode=WAL"] * 2  # refused once, then done
    with sqlite3.connect(tmp_path / "state.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    claims = ClaimStore(url)  # already WAL: no switch, so nothing to be refused
    assert switches == ["PRAGMA journal_mode=WAL"] * 2
    assert claims.claim(VersionRef(model="m", version="1"), via="poller") is True


def test_a_claim_is_taken_over_once_per_attempt_and_the_older_attempt_can_no_longer_decide(claims):
    claims.claim(VersionRef(model="m", version="1"), via="webhook")
    first = claims.begin(VersionRef(model="m", version="1"), flow_run_id="run-a").attempt
    assert first == 1 and claims.get(VersionRef(model="m", version="1")).flow_run_id == "run-a"
    assert claims.take_over(VersionRef(model="m", version="1"), attempts=1, detail="lost", crashed=True) is True
    assert claims.take_over(VersionRef(model="m", version="1"), attempts=1) is False  # a second poller that saw the same loss
    taken = claims.get(VersionRef(model="m", version="1"))
    assert (taken.state, taken.attempts, taken.crashes, taken.flow_run_id, taken.detail) == ("claimed", 2, 1, None, "lost")
    assert not claims.holds(VersionRef(model="m", version="1"), first) and claims.holds(VersionRef(model="m", version="1"), 2)
    assert claims.finish(VersionRef(model="m", version="1"), "promoted", attempt=first) is False  # the old flow decides nothing
    assert claims.fail(VersionRef(model="m", version="1"), "boom", attempt=first) is False and claims.get(VersionRef(model="m", version="1")).state == "claimed"
    second = claims.begin(VersionRef(model="m", version="1"), flow_run_id="run-b").attempt
    assert second == 2 and claims.finish(VersionRef(model="m", version="1"), "rejected", attempt=second) is True
    assert claims.get(VersionRef(model="m", version="1")).state == "done" and claims.take_over(VersionRef(model="m", version="1"), attempts=2) is False  # a finished claim stays


def test_delivery_ids_are_seen_once(claims):
    """(The named locks' contract is tests/test_seams.py's, on the SQL and the in-memory locks.)"""
    deliveries = DeliveryLog(claims.db)
    assert deliveries.first("d-1") is True
    assert deliveries.first("d-1") is False
    assert deliveries.seen("d-1") and not deliveries.seen("d-2")


def test_our_signature_is_mlflows_own():
    from mlflow.webhooks.delivery import _generate_hmac_signature

    body = json.dumps({"entity": "model_version", "action": "created", "data": {"name": "m", "version": "1"}})
    assert signature(SECRET, "abc", "1700000000", body.encode()) == _generate_hmac_signature(SECRET, "abc", "1700000000", body)


def _delivery(name="m", version="1", delivery_id="d-1", timestamp=None, secret=SECRET, entity="model_version", action="created"):
    body = json.dumps({"entity": entity, "action": action, "timestamp": "now", "data": {"name": name, "version": version, "source": "x", "run_id": None, "tags": {}, "description": None}}).encode()
    timestamp = str(int(time.time())) if timestamp is None else str(timestamp)
    headers = {DELIVERY_HEADER: delivery_id, TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, delivery_id, timestamp, body), "Content-Type": "application/json"}
    return body, headers


def test_webhook_checks_signature_age_and_replays_then_claims_once(claims):
    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder)
    client = TestClient(create_app(dispatcher, SECRET, max_age_s=300))

    body, headers = _delivery(secret="wrong")
    assert client.post(PATH, content=body, headers=headers).status_code == 401
    body, headers = _delivery()
    tampered = body.replace(b'"version": "1"', b'"version": "9"')
    assert client.post(PATH, content=tampered, headers=headers).status_code == 401
    body, headers = _delivery(delivery_id="old", timestamp=int(time.time()) - 301)
    response = client.post(PATH, content=body, headers=headers)
    assert response.status_code == 400 and "s from now" in response.json()["error"]
    body, headers = _delivery()
    del headers[SIGNATURE_HEADER]
    assert client.post(PATH, content=body, headers=headers).status_code == 401

    body, headers = _delivery(delivery_id="d-1")
    first = client.post(PATH, content=body, headers=headers)
    assert first.status_code == 202 and first.json() == {"model": "m", "version": "1", "claimed": True}
    replayed = client.post(PATH, content=body, headers=headers)  # replayed delivery: handled once, and MLflow told so (docs/service.md)
    assert (replayed.status_code, replayed.json()) == (200, {"duplicate_delivery": "d-1"})
    body, headers = _delivery(delivery_id="d-2")  # the same event delivered again (a retry): new id, same version
    second = client.post(PATH, content=body, headers=headers)
    assert second.status_code == 200 and second.json()["claimed"] is False
    body, headers = _delivery(delivery_id="d-3", entity="registered_model", action="created")
    assert client.post(PATH, content=body, headers=headers).json() == {"ignored": "registered_model.created"}
    dispatcher.wait()
    assert recorder.started == [("m", "1")]
    assert claims.get(VersionRef(model="m", version="1")).claimed_via == "webhook"


def test_receiver_refuses_to_run_without_a_secret(claims):
    with pytest.raises(ValueError, match="shared secret"):
        create_app(Dispatcher(claims, start=Recorder()), "")


def test_poller_claims_unclaimed_versions_of_configured_models_oldest_first(tmp_path, claims):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    for name in ("kept", "ignored"):
        client.create_registered_model(name)
        for _ in range(3):
            client.create_model_version(name, source=str(tmp_path))
    claims.claim(VersionRef(model="kept", version="2"), via="webhook")  # the webhook got there first
    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder, configured=lambda name: name == "kept")
    assert poll_once(client, dispatcher) == [("kept", "1"), ("kept", "3")]
    assert poll_once(client, dispatcher) == []  # nothing new
    dispatcher.wait()
    assert recorder.started == [("kept", "1"), ("kept", "3")]


@pytest.mark.parametrize("quoted", ["o'brien", 'say "hi"', "both'\"quotes", "back\\slash"])
def test_model_names_with_quotes_are_polled_and_listed_and_break_nothing_else(tmp_path, claims, quoted):
    """MLflow's filter strings have no escape: a name with a quote once broke the poller's
    query (and `vlgate status`) for every model."""
    from vlgate import tracking
    from vlgate.cli.service import service_status

    home = tmp_path / "home"
    client = tracking.connect(home)
    for name, versions in ((quoted, 2), ("plain", 1), ("o", 1), ("say ", 1)):  # near-names must not match
        client.create_registered_model(name)
        for _ in range(versions):
            client.create_model_version(name, source=str(tmp_path))
    assert [str(v.version) for v in tracking.model_versions(client, quoted)] == ["1", "2"]
    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder)
    expected = [(quoted, "1"), (quoted, "2"), ("plain", "1"), ("o", "1"), ("say ", "1")]
    assert sorted(poll_once(client, dispatcher)) == sorted(expected)
    dispatcher.wait()
    assert sorted(recorder.started) == sorted(expected)
    listed = {model["name"]: [v["version"] for v in model["versions"]] for model in service_status(ServiceContext.open(home))["models"]}
    assert listed == {quoted: ["1", "2"], "plain": ["1"], "o": ["1"], "say ": ["1"]}
    (only,) = service_status(ServiceContext.open(home), quoted)["models"]
    assert only["name"] == quoted


# --- the receiver under hostile or unlucky deliveries, over real HTTP on 127.0.0.1 ----------


class Receiver:
    """The webhook app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, dispatcher: Dispatcher, max_body_bytes: int = 64 * 1024):
        import socket

        import uvicorn

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}{PATH}"
        app = create_app(dispatcher, SECRET, max_age_s=300, max_body_bytes=max_body_bytes)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Receiver:
        import httpx

        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise TimeoutError("the receiver did not start")

    def __exit__(self, *_exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def test_an_oversized_body_is_refused_before_it_is_read(claims):
    import http.client

    import httpx

    recorder = Recorder()
    with Receiver(Dispatcher(claims, start=recorder), max_body_bytes=64 * 1024) as receiver:
        # a declared 400 MiB body: answered 413 with nothing sent (the old receiver read it all first)
        connection = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        connection.putrequest("POST", PATH)
        connection.putheader("Content-Length", str(400 << 20))
        connection.endheaders()
        assert connection.getresponse().status == 413
        connection.close()

        # a chunked stream with no length: cut off at the limit
        def stream():
            for _ in range(64):  # 4 MiB
                yield b"x" * 65536

        assert httpx.post(receiver.url, content=stream(), timeout=30).status_code == 413
        # and the receiver still serves a genuine delivery
        body, headers = _delivery(delivery_id="after")
        assert httpx.post(receiver.url, content=body, headers=headers, timeout=10).status_code == 202
    assert recorder.started == [("m", "1")]


def test_a_model_that_is_not_configured_is_never_claimed_by_the_webhook(claims):
    import httpx

    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder, configured=lambda name: name == "m")
    with Receiver(dispatcher) as receiver:
        body, headers = _delivery(name="elsewhere", delivery_id="e-1")
        response = httpx.post(receiver.url, content=body, headers=headers, timeout=10)
        assert response.status_code == 200 and "not configured" in response.json()["ignored"]
    dispatcher.wait()
    assert claims.get(VersionRef(model="elsewhere", version="1")) is None  # no claim row: configuring the model later lets the poller take it
    assert recorder.started == []
    assert dispatcher.offer("elsewhere", "1", via="poller") is False  # the poller's path has the same rule


def test_a_delivery_that_failed_midway_is_handled_when_mlflow_retries_it(claims, monkeypatch):
    import httpx

    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder)
    real_claim, calls = claims.claim, []

    def claim_failing_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise ConnectionError("state database away for a moment")
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(claims, "claim", claim_failing_once)
    with Receiver(dispatcher) as receiver:
        body, headers = _delivery(delivery_id="retried")
        assert httpx.post(receiver.url, content=body, headers=headers, timeout=10).status_code == 500
        retry = httpx.post(receiver.url, content=body, headers=headers, timeout=10)  # MLflow resends the same delivery
        assert retry.status_code == 202 and retry.json()["claimed"] is True
        replay = httpx.post(receiver.url, content=body, headers=headers, timeout=10)
        assert replay.json() == {"duplicate_delivery": "retried"}
    dispatcher.wait()
    assert recorder.started == [("m", "1")]


def test_a_state_database_waiting_on_a_lock_does_not_stall_the_receiver(tmp_path):
    """Another process holds the state database's write lock (a long transaction, a
    migration): a delivery waits for it, and meanwhile /healthz and the refusal of a bad
    delivery still answer at once. The receiver called the database on its event loop, so
    one waiting delivery stalled every request."""
    import sqlite3
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    claims = ClaimStore(f"sqlite:///{tmp_path}/state.db")
    recorder = Recorder()
    holder = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    with Receiver(Dispatcher(claims, start=recorder)) as receiver, ThreadPoolExecutor(1) as pool:
        holder.execute("BEGIN EXCLUSIVE")
        body, headers = _delivery(delivery_id="waits")
        waiting = pool.submit(httpx.post, receiver.url, content=body, headers=headers, timeout=60)
        time.sleep(1.0)  # the delivery is inside the receiver, waiting for the lock
        assert not waiting.done()
        started = time.monotonic()
        assert httpx.get(receiver.url.replace(PATH, "/healthz"), timeout=5).json() == {"ok": True}
        assert httpx.post(receiver.url, content=b"{}", headers={SIGNATURE_HEADER: "v1,forged"}, timeout=5).status_code == 401
        assert time.monotonic() - started < 2.0
        holder.execute("COMMIT")
        response = waiting.result(timeout=60)
        assert response.status_code == 202 and response.json()["claimed"] is True
    holder.close()
    assert recorder.started == [("m", "1")]


def test_a_flow_that_outlives_its_lease_is_not_taken_over_while_its_worker_lives(tmp_path):
    """Two workers share the state database; the first one's flow runs for three leases.
    The second worker's takeover sweep (the poller's recover) finds nothing to take
    while the first one beats; once that worker is gone (no beats, not finished), the
    claim is taken over exactly once."""
    url = f"sqlite:///{tmp_path}/state.db"
    first, second = ClaimStore(url, lease_seconds=1.0), ClaimStore(url, lease_seconds=1.0)
    taken_over = Recorder()
    sweeper = Dispatcher(second, start=taken_over)
    sweeps: list[list] = []

    def slow_flow(model_name, version):
        first.begin(VersionRef(model=model_name, version=version))
        with first.heartbeat(VersionRef(model=model_name, version=version), interval_s=0.2):
            for _ in range(15):  # 3 s: three leases
                time.sleep(0.2)
                sweeps.append(sweeper.recover())
        first.finish(VersionRef(model=model_name, version=version))

    worker = Dispatcher(first, start=slow_flow)
    assert sweeper.recover() == []  # the second worker is up, its database opened, before the first one's flow starts
    assert worker.offer("m", "1", via="poller")
    worker.wait()
    assert sweeps and all(found == [] for found in sweeps)
    assert first.get(VersionRef(model="m", version="1")).state == "done" and first.get(VersionRef(model="m", version="1")).attempts == 1

    # a worker that dies mid-flow: its beats stop with it, the lease runs out, one takeover
    assert first.claim(VersionRef(model="m", version="2"), via="poller")
    first.begin(VersionRef(model="m", version="2"))
    with first.heartbeat(VersionRef(model="m", version="2"), interval_s=0.2):
        time.sleep(1.5)
        assert sweeper.recover() == []
    time.sleep(1.2)  # the "process" is gone: no more beats
    assert sweeper.recover() == [("m", "2")]
    assert Dispatcher(first, start=Recorder()).recover() == []  # exactly once
    sweeper.wait()
    assert taken_over.started == [("m", "2")]
    assert second.get(VersionRef(model="m", version="2")).attempts == 2 and second.get(VersionRef(model="m", version="2")).crashes == 1  # lost with its process: a crash
    assert "flow stopped renewing its lease" in second.get(VersionRef(model="m", version="2")).detail


def test_recovery_follows_prefect_s_word_on_each_flow_run(tmp_path, monkeypatch):
    """What the poller's recover does with each live claim, given Prefect's state of its
    flow run (here a stand-in for Prefect's API): crashed → run again at once; queued with
    its lease out → kept alive; running with its lease out (the worker died unseen) → run
    again, the old flow run cancelled; cancelled → failed on record; a deferred retry →
    run again, not a crash; Prefect away → nothing judged that needs its word; the
    ``max_crashes``-th crash → failed closed, on record."""
    from vlgate.registry_hooks import dispatch
    from vlgate.registry_hooks.dispatch import FlowRunState

    claims = ClaimStore(f"sqlite:///{tmp_path}/state.db", lease_seconds=60)
    prefect: dict[str, FlowRunState] = {}
    cancelled, gave_up = [], []
    monkeypatch.setattr(dispatch, "flow_run_states", lambda ids: {i: prefect[i] for i in ids if i in prefect})
    monkeypatch.setattr(dispatch, "cancel_flow_run", lambda flow_run_id, why: cancelled.append(flow_run_id))
    started = Recorder()
    dispatcher = Dispatcher(claims, start=started, max_crashes=2, give_up=lambda subject, reason: gave_up.append((subject.model, subject.version, reason)))

    def claimed(version: str, flow_run: str, state: str, running: bool = True, expired: bool = False) -> None:
        claims.claim(VersionRef(model="m", version=version), via="webhook")
        claims.record_flow_run(VersionRef(model="m", version=version), flow_run)
        if running:
            claims.begin(VersionRef(model="m", version=version), flow_run_id=flow_run)
        if expired:
            claims.lease = timedelta(seconds=-1)
            claims.renew(VersionRef(model="m", version=version))
            claims.lease = timedelta(seconds=60)
        prefect[flow_run] = FlowRunState(state, f"{state.lower()} here")

    claimed("1", "fr-1", "CRASHED")  # lease still running: Prefect's word is enough
    claimed("2", "fr-2", "SCHEDULED", running=False, expired=True)
    claimed("3", "fr-3", "RUNNING", expired=True)
    claimed("4", "fr-4", "CANCELLED")
    claimed("5", "fr-5", "RUNNING")  # alive: nothing to do
    claims.claim(VersionRef(model="m", version="6"), via="poller")
    claims.begin(VersionRef(model="m", version="6"))
    claims.defer(VersionRef(model="m", version="6"), "ConnectionError: away", first_delay_s=-1.0)  # its retry is due at once
    assert sorted(dispatcher.recover()) == [("m", "1"), ("m", "3"), ("m", "6")]
    dispatcher.wait()
    assert sorted(started.started) == [("m", "1"), ("m", "3"), ("m", "6")]
    one, two, three, four, five, six = (claims.get(VersionRef(model="m", version=str(v))) for v in range(1, 7))
    assert (one.state, one.attempts, one.crashes) == ("claimed", 2, 1) and "flow run fr-1 crashed (crashed here)" in one.detail
    assert (two.state, two.attempts) == ("claimed", 1) and two.lease_expires > datetime.now(timezone.utc)  # queued: renewed
    assert (three.attempts, three.crashes) == (2, 1) and cancelled == ["fr-3"] and "stopped renewing its lease" in three.detail
    assert four.state == "failed" and four.detail.startswith("flow run fr-4 cancelled (cancelled here); vlgate release m 4")
    assert gave_up == [("m", "4", four.detail)]
    assert (five.state, five.attempts) == ("running", 1)
    assert (six.attempts, six.crashes) == (2, 0) and "transient fault" in six.detail  # a retry, not a crash
    # the run again crashes too: the second crash is the limit here
    claims.begin(VersionRef(model="m", version="1"), flow_run_id="fr-1b")
    prefect["fr-1b"] = FlowRunState("CRASHED", "exited with status -9")
    assert dispatcher.recover() == []
    failed = claims.get(VersionRef(model="m", version="1"))
    assert failed.state == "failed" and failed.detail.startswith("validation crashed 2 times, the limit (last: flow run fr-1b crashed (exited with status -9))")
    assert gave_up[-1] == ("m", "1", failed.detail)

    def away(ids):
        raise ConnectionError("Prefect away")

    monkeypatch.setattr(dispatch, "flow_run_states", away)
    claims.lease = timedelta(seconds=-1)
    claims.renew(VersionRef(model="m", version="5"))
    assert dispatcher.recover() == [] and claims.get(VersionRef(model="m", version="5")).attempts == 1  # no word from Prefect: left alone


def test_a_flow_waiting_for_one_of_this_process_s_threads_keeps_its_claim(tmp_path):
    claims = ClaimStore(f"sqlite:///{tmp_path}/state.db", lease_seconds=0.5)
    release = threading.Event()
    ran = Recorder()

    def blocking(model_name, version):
        ran(model_name, version)
        release.wait(30)

    dispatcher = Dispatcher(claims, workers=1, start=blocking)
    assert dispatcher.offer("m", "1", via="poller") and dispatcher.offer("m", "2", via="poller")
    time.sleep(1.0)  # both leases out: v1 "runs" (no heartbeat in this stand-in), v2 waits for the thread
    assert dispatcher.recover() == [] and claims.get(VersionRef(model="m", version="2")).attempts == 1  # renewed, not taken for lost
    assert claims.get(VersionRef(model="m", version="2")).lease_expires > datetime.now(timezone.utc)
    release.set()
    dispatcher.wait()


def test_a_deleted_and_re_created_models_version_is_validated_again_exactly_once(tmp_path, claims):
    """The new v1 of a model registered again under its old name must not inherit the old
    v1's finished claim; the old registration's rows stay untouched otherwise."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model("m")
    client.create_model_version("m", source=str(tmp_path))
    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder)
    assert poll_once(client, dispatcher) == [("m", "1")]
    claims.record_run(VersionRef(model="m", version="1"), "old-run")
    claims.finish(VersionRef(model="m", version="1"))
    assert poll_once(client, dispatcher) == []
    client.delete_registered_model("m")
    time.sleep(0.01)  # a later creation_timestamp (milliseconds)
    client.create_registered_model("m")
    again = client.create_model_version("m", source=str(tmp_path))
    # a webhook for the new v1 does not know its registration time: it cannot replace the row
    assert not dispatcher.offer("m", "1", via="webhook")
    assert poll_once(client, dispatcher) == [("m", "1")]
    assert poll_once(client, dispatcher) == []
    claim = claims.get(VersionRef(model="m", version="1"))
    assert claim.state == "claimed" and claim.run_id is None and claim.registered_at == str(again.creation_timestamp) and claim.attempts == 2
    dispatcher.wait()
    assert recorder.started == [("m", "1"), ("m", "1")]


def test_claims_written_before_registration_times_adopt_one_without_revalidating(tmp_path):
    """A state database from before ``registered_at`` existed: the column is added on open,
    and the poller's first round records each version's time instead of claiming it again."""
    import sqlalchemy as sa
    from mlflow import MlflowClient

    url = f"sqlite:///{tmp_path}/state.db"
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # the table as it was
        connection.exec_driver_sql(
            "CREATE TABLE vlgate_claims (model_name VARCHAR(256) NOT NULL, version VARCHAR(64) NOT NULL, state VARCHAR(16) NOT NULL, "
            "claimed_via VARCHAR(32) NOT NULL, owner VARCHAR(256) NOT NULL, claimed_at DATETIME NOT NULL, lease_expires DATETIME NOT NULL, "
            "attempts INTEGER NOT NULL, run_id VARCHAR(64), detail TEXT, updated_at DATETIME NOT NULL, PRIMARY KEY (model_name, version))"
        )
        connection.exec_driver_sql(
            "INSERT INTO vlgate_claims VALUES ('m', '1', 'done', 'poller', 'old:1', '2026-01-01 00:00:00', '2026-01-01 03:00:00', 1, 'run-1', NULL, '2026-01-01 00:00:00')"
        )
    engine.dispose()
    claims = ClaimStore(url)
    assert claims.get(VersionRef(model="m", version="1")).registered_at is None and claims.get(VersionRef(model="m", version="1")).state == "done"
    assert schema_revision(claims) == "0006"  # stamped as the first schema, then migrated
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model("m")
    version = client.create_model_version("m", source=str(tmp_path))
    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder)
    assert poll_once(client, dispatcher) == []
    adopted = claims.get(VersionRef(model="m", version="1"))
    assert adopted.registered_at == str(version.creation_timestamp) and adopted.state == "done" and adopted.run_id == "run-1"
    assert recorder.started == []


def _signed(payload: object, delivery_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    timestamp = str(int(time.time()))
    return body, {DELIVERY_HEADER: delivery_id, TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(SECRET, delivery_id, timestamp, body), "Content-Type": "application/json"}


def test_malformed_deliveries_signed_or_not_are_refused_with_4xx_and_claim_nothing(claims):
    import http.client

    import httpx

    recorder = Recorder()
    dispatcher = Dispatcher(claims, start=recorder)
    with Receiver(dispatcher) as receiver:
        # a signature header with bytes no base64 signature has: refused as a mismatch, not a crash
        body, headers = _delivery(delivery_id="bytes")
        connection = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        connection.putrequest("POST", PATH)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            connection.putheader(name, value.encode("latin-1") if name != SIGNATURE_HEADER else "v1,é€ü".encode())
        connection.endheaders(body)
        assert connection.getresponse().status == 401
        connection.close()
        # a correctly signed timestamp in digits that are not ASCII (int() would read them);
        # the server reads header bytes as latin-1, so that is what the sender signed
        body, headers = _delivery(delivery_id="digits")
        encoded = {name: value.encode() for name, value in headers.items()} | {TIMESTAMP_HEADER: "１７００００００００".encode()}
        encoded[SIGNATURE_HEADER] = signature(SECRET, "digits", encoded[TIMESTAMP_HEADER].decode("latin-1"), body).encode()
        assert httpx.post(receiver.url, content=body, headers=encoded, timeout=10).status_code == 400

        created = {"entity": "model_version", "action": "created"}
        signed_but_malformed = [
            [1, 2, 3],  # not an object
            {"entity": ["model_version"], "action": "created", "data": {"name": "m", "version": "1"}},
            {**created, "data": "m/1"},  # data a string
            {**created, "data": {"name": "m", "version": {"x": 1}}},  # version an object
            {**created, "data": {"name": "m", "version": 1.5}},
            {**created, "data": {"name": "m", "version": "../1"}},
            {**created, "data": {"name": "", "version": "1"}},
            {**created, "data": {"name": {"m": 1}, "version": "1"}},
            {**created, "data": {"name": "m"}},
        ]
        for n, payload in enumerate(signed_but_malformed):
            body, headers = _signed(payload, f"malformed-{n}")
            response = httpx.post(receiver.url, content=body, headers=headers, timeout=10)
            assert response.status_code == 400, (payload, response.text)
        # the receiver still takes a genuine delivery afterwards
        body, headers = _signed({**created, "data": {"name": "m", "version": "2", "source": "s", "run_id": None, "tags": {}, "description": None}}, "genuine")
        assert httpx.post(receiver.url, content=body, headers=headers, timeout=10).status_code == 202
    dispatcher.wait()
    assert recorder.started == [("m", "2")]
    assert [(claim.model_name, claim.version) for claim in claims.all()] == [("m", "2")]


def schema_revision(claims: ClaimStore) -> str:
    with claims.engine.connect() as connection:
        return connection.exec_driver_sql("SELECT version_num FROM vlgate_schema_version").scalar()


def migrated_schema_is_the_stores(claims: ClaimStore) -> None:
    """The tables the migrations build are the ones the store's queries are written against:
    the same columns, nullability and primary keys, at the last revision."""
    import sqlalchemy as sa

    from vlgate.registry_hooks.state_db import metadata

    inspector = sa.inspect(claims.engine)
    assert set(inspector.get_table_names()) == {*metadata.tables, "vlgate_schema_version"}
    for table in metadata.tables.values():
        found = {column["name"]: column["nullable"] for column in inspector.get_columns(table.name)}
        assert found == {column.name: column.nullable for column in table.columns}, table.name
        assert set(inspector.get_pk_constraint(table.name)["constrained_columns"]) == {column.name for column in table.primary_key}, table.name
    assert schema_revision(claims) == "0006"


def test_a_new_state_database_is_built_by_the_migrations_to_the_stores_schema(tmp_path):
    migrated_schema_is_the_stores(ClaimStore(f"sqlite:///{tmp_path}/state.db"))


def test_a_state_database_at_the_last_revision_opens_unchanged(tmp_path):
    url = f"sqlite:///{tmp_path}/state.db"
    first = ClaimStore(url)
    first.claim(VersionRef(model="m", version="1"), via="poller")
    again = ClaimStore(url)
    assert again.get(VersionRef(model="m", version="1")).state == "claimed" and schema_revision(again) == "0006"


def test_one_flow_run_takes_up_a_claim_the_others_wait_and_a_decided_one_runs_again_only_when_asked(tmp_path):
    """``begin``: a claimed version goes to exactly one of several flow runs; one already
    running under another flow run is not taken up (its caller waits); a decided one is
    taken up again only by an explicit re-run, as the next attempt. ``wait`` returns once
    the validation is decided, and takes over a holder whose lease ran out."""
    url = f"sqlite:///{tmp_path}/state.db"
    claims = ClaimStore(url)
    assert claims.claim(VersionRef(model="m", version="1"), via="manual")
    results = []
    barrier = threading.Barrier(4)

    def begin(flow_run: str) -> None:
        store = ClaimStore(url)
        barrier.wait()
        results.append((flow_run, store.begin(VersionRef(model="m", version="1"), flow_run)))

    threads = [threading.Thread(target=begin, args=(f"fr-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [(flow_run, begun) for flow_run, begun in results if begun is not None]
    assert len(winners) == 1 and winners[0][1].attempt == 1 and winners[0][1].rerun is False
    holder = winners[0][0]
    assert claims.get(VersionRef(model="m", version="1")).flow_run_id == holder and claims.get(VersionRef(model="m", version="1")).state == "running"
    assert claims.begin(VersionRef(model="m", version="1"), holder).attempt == 1  # the same flow run, run again by Prefect, resumes
    assert claims.begin(VersionRef(model="m", version="1"), "fr-other", rerun=True) is None  # running under another: wait for it

    waited = []
    waiter = threading.Thread(target=lambda: waited.append(claims.wait(VersionRef(model="m", version="1"), poll_s=0.05)))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive()  # still running: the waiter waits
    assert claims.finish(VersionRef(model="m", version="1"), "promoted", attempt=1)
    waiter.join(timeout=5)
    assert waited[0].state == "done" and waited[0].detail == "promoted"

    assert claims.begin(VersionRef(model="m", version="1"), "fr-service") is None  # a flow run the service sent: the decision stands
    again = claims.begin(VersionRef(model="m", version="1"), "fr-operator", rerun=True)
    assert (again.attempt, again.rerun) == (2, True) and claims.get(VersionRef(model="m", version="1")).state == "running"
    assert not claims.holds(VersionRef(model="m", version="1"), 1) and claims.holds(VersionRef(model="m", version="1"), 2)

    # the re-run's process dies: its lease runs out, and the waiter takes it over for its caller to begin
    claims.lease = timedelta(seconds=-1)
    claims.renew(VersionRef(model="m", version="1"))
    claims.lease = timedelta(seconds=60)
    taken = claims.wait(VersionRef(model="m", version="1"), poll_s=0.05)
    assert (taken.state, taken.attempts, taken.crashes) == ("claimed", 3, 1)
    assert claims.begin(VersionRef(model="m", version="1"), "fr-waiter").attempt == 3


def test_a_version_is_claimed_and_offered_only_in_the_registry_s_form(claims):
    from vlgate.versions import VersionError

    for text in ("01", "1.0", "abc", "", "0", "-1", " 1", "1 ", "１"):
        with pytest.raises(VersionError):  # a claim takes a VersionRef, which holds none of these
            VersionRef.of("m", text)
    started = Recorder()
    dispatcher = Dispatcher(claims, start=started)
    assert dispatcher.offer("m", "01", via="webhook") is False and dispatcher.offer("m", "7", via="webhook") is True
    dispatcher.wait()
    assert started.started == [("m", "7")] and [c.version for c in claims.all()] == ["7"]


def test_a_model_name_vlgate_cannot_show_as_written_is_not_offered_nor_configured(claims, tmp_path):
    """Another tool registered it (MLflow takes a line break in a name): neither the poller
    nor the webhook claims it, and vlgate.yaml cannot configure it."""
    from vlgate.config import ConfigError
    from vlgate.flows.settings import ServiceConfig

    started = Recorder()
    dispatcher = Dispatcher(claims, start=started)
    for name in ("vlm\u2028FAKE v9 promoted", "vlm\nFAKE", "vlm\x1b[2J"):
        assert dispatcher.offer(name, "1", via="poller") is False
    assert dispatcher.offer("vlm $(echo INJECTED)", "1", via="poller") is True  # a name the registry takes: quoted wherever it is shown
    dispatcher.wait()
    assert started.started == [("vlm $(echo INJECTED)", "1")] and [c.model_name for c in claims.all()] == ["vlm $(echo INJECTED)"]
    (tmp_path / "vlgate.yaml").write_text('models:\n  "vlm\\u2028x": {suite: suite.yaml, policy: gate.yaml}\n')
    with pytest.raises(ConfigError) as refused:
        ServiceConfig.load(tmp_path)
    assert "models" in str(refused.value) and "cannot hold \\u2028" in str(refused.value) and "\u2028" not in str(refused.value)


def test_a_claim_whose_process_on_this_host_ended_is_taken_over_at_once_not_when_its_lease_runs_out(tmp_path):
    """`vlgate validate` killed mid-flow and run again: the new one takes the claim over as
    soon as it sees the old process gone, instead of waiting out a lease of minutes."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/state.db"
    claims = ClaimStore(url, lease_seconds=600)
    assert claims.claim(VersionRef(model="m", version="1"), via="manual")
    begun = (
        "from vlgate.registry_hooks.claims import ClaimStore; from vlgate.versions import VersionRef; import sys; "
        "sys.exit(ClaimStore(sys.argv[1], lease_seconds=600).begin(VersionRef(model='m', version='1'), 'fr-killed') is None)"
    )
    subprocess.run([sys.executable, "-c", begun, url], check=True)
    held = claims.get(VersionRef(model="m", version="1"))
    assert held.state == "running" and held.lease_expires > datetime.now(timezone.utc) + timedelta(seconds=500)
    started = time.monotonic()
    taken = claims.wait(VersionRef(model="m", version="1"), poll_s=30)  # one look, no sleep: the process is gone
    assert time.monotonic() - started < 10
    assert (taken.state, taken.attempts, taken.crashes) == ("claimed", 2, 1) and held.owner in taken.detail


def test_only_a_process_of_this_host_and_pid_namespace_is_said_to_be_gone():
    import os
    import socket
    import subprocess
    from pathlib import Path

    from vlgate.registry_hooks.state_db import default_owner, owner_is_gone

    host, pid, namespace = default_owner().split(":")
    assert (host, int(pid)) == (socket.gethostname(), os.getpid()) and not owner_is_gone(default_owner())
    ended = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{ended.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.02)
    assert owner_is_gone(f"{host}:{ended.pid}:{namespace}")  # ended, not yet reaped: a zombie
    ended.wait()
    assert owner_is_gone(f"{host}:{ended.pid}:{namespace}")  # reaped: no such process
    # elsewhere, or not said where: only the lease tells
    assert not owner_is_gone(f"another-{host}:{ended.pid}:{namespace}")
    assert not owner_is_gone(f"{host}:{ended.pid}:1{namespace}")
    assert not owner_is_gone(f"{host}:{ended.pid}")
    assert not owner_is_gone(f"{host}:{ended.pid}:unknown")
