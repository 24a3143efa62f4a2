"""The notification outbox and its delivery (registry_hooks/outbox.py, notifications.py):
against a real HTTP receiver on 127.0.0.1 and the real state database (SQLite in tmp_path;
PostgreSQL too when a server answers on 127.0.0.1:5432)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import sqlalchemy as sa
import yaml
from pydantic import ValidationError

from vlgate.config import ConfigError, load_yaml_model
from vlgate.registry_hooks.notifications import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, AppriseChannel, Notification, NotifyConfig, NotifyEvent, WebhookChannel, notification_key
from vlgate.registry_hooks.outbox import Outbox, OutboxState, backoff_s
from vlgate.registry_hooks.senders import DeliveryError, NotificationRejected, apprise_url, send_notification, signature, signed_headers, verify_notification
from vlgate.registry_hooks.state_db import StateDatabase, metadata
from vlgate.versions import VersionRef

SECRET = "hmac-shared-s3cret-value"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def later(days: int) -> datetime:
    """A deliverer's clock ``days`` from now: every row enqueued is due then."""
    return datetime.now(timezone.utc) + timedelta(days=days)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Receiver:
    """A real HTTP server on 127.0.0.1 recording every POST (path, headers, body); answers
    ``status`` (200 unless set)."""

    def __init__(self, port: int | None = None):
        self.port = port or _free_port()
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/vlgate"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.requests.append((self.path, dict(self.headers), body))
                    status = receiver.status
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def deliveries(self) -> list[str]:
        with self.lock:
            return [headers.get(DELIVERY_HEADER, "") for _, headers, _ in self.requests]


@pytest.fixture
def receiver():
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture
def db(tmp_path):
    return StateDatabase(f"sqlite:///{tmp_path}/state.db")


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("VLGATE_TEST_HOOK_SECRET", SECRET)
    return monkeypatch


def webhook(receiver: Receiver, name: str = "hook", events: list[str] | None = None) -> WebhookChannel:
    return WebhookChannel.model_validate({"kind": "webhook", "name": name, "url": receiver.url, "secret_env": "VLGATE_TEST_HOOK_SECRET", "events": events, "timeout_s": 5, "allow_private_addresses": True})


def note(key: str = "k-1", event: NotifyEvent = NotifyEvent.DECISION_PROMOTED, **fields) -> Notification:
    values = {"idempotency_key": key, "event": event, "model": "vlm", "version": "3", "outcome": "promoted", "reasons": ["all checks passed"], "occurred_at": T0} | fields
    return Notification(**values)


def test_payload_names_its_schema_round_trips_and_keeps_the_first_reasons():
    notification = note(
        reasons=[f"reason {i}" for i in range(9)] + ["x" * 2000],
        items_saved=12.5,
        champion_before="2",
        champion_after="3",
        run_url="http://mlflow/run/1",
        report_url="http://mlflow/report",
        command="vlgate approve vlm 3",
    )
    data = json.loads(notification.to_json())
    assert data["schema"] == "vlgate.notification/1" and data["event"] == "decision-promoted" and data["occurred_at"].startswith("2026-01-01T12:00:00")
    assert data["reasons"] == [f"reason {i}" for i in range(5)]  # the first few
    assert Notification.from_json(notification.to_json()) == notification
    with pytest.raises(ValidationError):
        Notification.from_json(json.dumps(data | {"schema": "vlgate.notification/2"}))
    with pytest.raises(ValidationError):
        Notification.from_json(json.dumps(data | {"surprise": 1}))
    with pytest.raises(ValidationError):  # a time without a zone is not a moment
        note(occurred_at=datetime(2026, 1, 1))
    key = notification_key(NotifyEvent.AWAITING_APPROVAL, "a" * 500, "7")
    assert key == notification_key(NotifyEvent.AWAITING_APPROVAL, "a" * 500, "7") != notification_key(NotifyEvent.AWAITING_APPROVAL, "a" * 500, "8")
    assert len(key) <= 128 and key.startswith("awaiting-approval:")


def test_title_and_body_show_data_safely():
    hostile = note(model="evil\x1b[31mred\u202e", reasons=["line one\nFAKE: forged line", "bell\x07"], command="vlgate approve 'evil' 3")
    title, body = hostile.title(), hostile.body()
    for text in (title, body):
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\n" not in title and "\\x1b[31m" in title and title.endswith("v3 promoted")
    assert "- line one\\nFAKE: forged line" in body.splitlines()  # the data's newline cannot forge a line
    assert "Next: vlgate approve 'evil' 3" in body
    for separator in ("\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c"):  # every line break a chat client may honour
        assert len(note(model=f"m{separator}FAKE{separator}x").title().splitlines()) == 1


def test_our_signature_is_the_one_the_mlflow_receiver_verifies():
    from vlgate.registry_hooks.webhook import signature as mlflow_signature

    body = b'{"a": 1}'
    assert signature(SECRET, "abc", "1700000000", body) == mlflow_signature(SECRET, "abc", "1700000000", body)


def test_a_signed_webhook_is_delivered_once_and_verifies_forged_and_stale_ones_are_refused_distinctly(db, receiver, env):
    outbox, channel = Outbox(db), webhook(receiver)
    with db.engine.begin() as connection:
        assert outbox.enqueue(connection, note(), [channel]) == 1
    report = outbox.deliver_due([channel])
    assert (report.delivered, report.retried, report.failed) == (1, 0, 0)
    assert outbox.deliver_due([channel]).delivered == 0  # delivered once
    [(path, headers, body)] = receiver.requests
    assert path == "/hooks/vlgate" and headers[DELIVERY_HEADER] == "k-1" and headers[SIGNATURE_HEADER].startswith("v1,")
    assert verify_notification(SECRET, headers, body, max_age_s=300) == note()
    [row] = outbox.rows()
    assert (row.state, row.attempts, row.last_error) == (OutboxState.DELIVERED, 1, None) and row.delivered_at is not None

    with pytest.raises(NotificationRejected) as forged:
        verify_notification("another-secret", headers, body, max_age_s=300)
    assert forged.value.reason == "bad signature"
    with pytest.raises(NotificationRejected) as tampered:
        verify_notification(SECRET, headers, body.replace(b'"vlm"', b'"evil"'), max_age_s=300)
    assert tampered.value.reason == "bad signature"
    with pytest.raises(NotificationRejected) as stale:
        verify_notification(SECRET, headers, body, max_age_s=300, now=int(headers[TIMESTAMP_HEADER]) + 301)
    assert stale.value.reason == "stale"
    old = signed_headers(SECRET, note(), body, now=time.time() - 3600)  # a genuine signature, an hour old
    with pytest.raises(NotificationRejected) as replay:
        verify_notification(SECRET, old, body, max_age_s=300)
    assert replay.value.reason == "stale"
    with pytest.raises(NotificationRejected) as missing:
        verify_notification(SECRET, {DELIVERY_HEADER: "k-1"}, body, max_age_s=300)
    assert missing.value.reason == "missing header"


def test_an_apprise_url_from_the_environment_delivers_to_the_same_receiver(db, receiver, monkeypatch):
    monkeypatch.setenv("VLGATE_TEST_APPRISE_URL", f"json://127.0.0.1:{receiver.port}/apprise/path")
    channel = AppriseChannel(name="chat", url_env="VLGATE_TEST_APPRISE_URL", allow_private_addresses=True)
    outbox = Outbox(db)
    outbox.notify(note(reasons=["floor met"]), [channel])
    assert outbox.deliver_due([channel]).delivered == 1
    [(path, _, body)] = receiver.requests
    sent = json.loads(body)
    assert path == "/apprise/path" and sent["title"] == "vlgate: vlm v3 promoted"
    assert "Outcome: promoted" in sent["message"] and "- floor met" in sent["message"]


def test_a_bad_or_missing_apprise_url_fails_the_delivery_clearly_without_showing_it(db, monkeypatch, caplog):
    channel = AppriseChannel(name="chat", url_env="VLGATE_TEST_APPRISE_URL", events=["decision-rejected"])
    outbox = Outbox(db, max_attempts=2)
    outbox.notify(note(event=NotifyEvent.DECISION_REJECTED), [channel])
    outbox.notify(note(key="k-2"), [channel])  # not an event the channel takes: no row
    assert [row.idempotency_key for row in outbox.rows()] == ["k-1"]
    report = outbox.deliver_due([channel], now=later(1))
    assert report.retried == 1 and "VLGATE_TEST_APPRISE_URL (url_env) is not set" in outbox.rows()[0].last_error
    leaked = "notaschema-9f8e7d6c5b4a"
    monkeypatch.setenv("VLGATE_TEST_APPRISE_URL", f"bogus://{leaked}/token")
    with pytest.raises(DeliveryError, match="not one Apprise understands"):
        apprise_url(channel)
    report = outbox.deliver_due([channel], now=later(2))
    [row] = outbox.failed_rows()
    assert report.failed == 1 and row.attempts == 2 and "VLGATE_TEST_APPRISE_URL is not one Apprise understands" in row.last_error
    assert leaked not in row.last_error and leaked not in caplog.text
    # Apprise logs a URL it cannot parse: vlgate strips its secret parts from the line
    monkeypatch.setenv("VLGATE_TEST_APPRISE_URL", "json://user:SuperSecretPw99@")
    with pytest.raises(DeliveryError, match="not one Apprise understands"):
        apprise_url(channel)
    assert "Unparseable JSON URL" in caplog.text and "SuperSecretPw99" not in caplog.text


def test_receiver_down_attempts_and_backoff_are_recorded_nothing_is_lost_and_each_is_delivered_once_when_it_is_back(db, env):
    down = Receiver()  # a port with nobody listening yet
    channel = webhook(down)
    outbox = Outbox(db)
    with db.engine.begin() as connection:
        for i in range(3):
            outbox.enqueue(connection, note(key=f"k-{i}"), [channel])
    now = later(1)
    for attempt in range(1, 4):
        for tried in range(1, 4):  # a channel that failed is held back for the rest of a pass: one row a pass
            report = outbox.deliver_due([channel], now=now)
            assert (report.delivered, report.retried, report.failed, report.held_back) == (0, 1, 0, ["hook"])
            assert sorted(row.attempts for row in outbox.rows()) == sorted([attempt] * tried + [attempt - 1] * (3 - tried))
        rows = outbox.rows()
        assert {row.attempts for row in rows} == {attempt} and {row.state for row in rows} == {OutboxState.PENDING}
        assert {row.next_attempt_at for row in rows} == {now + timedelta(seconds=5 * 2 ** (attempt - 1))}  # 5 s, 10 s, 20 s
        assert all(row.last_error.startswith(f"attempt {attempt}/10: webhook 127.0.0.1:{down.port}: ConnectError") for row in rows)
        assert SECRET not in rows[0].last_error
        assert outbox.deliver_due([channel], now=now).delivered == 0  # nothing due before its backoff
        now += timedelta(seconds=5 * 2 ** (attempt - 1))
    assert outbox.counts()["hook"].pending == 3
    down.start()
    try:
        assert outbox.deliver_due([channel], now=now).delivered == 3
        assert outbox.deliver_due([channel], now=now + timedelta(days=1)).delivered == 0
        assert sorted(down.deliveries()) == ["k-0", "k-1", "k-2"]  # each exactly once
    finally:
        down.stop()
    counts = outbox.counts()["hook"]
    assert (counts.pending, counts.failed, counts.delivered) == (0, 0, 3)


def test_backoff_doubles_from_5_s_to_an_hour_and_max_attempts_fails_the_row(db, receiver, env):
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [5, 10, 20, 40] and backoff_s(10) == 2560 and backoff_s(11) == backoff_s(50) == 3600
    receiver.status = 404
    channel = webhook(receiver)
    outbox = Outbox(db, max_attempts=3)
    outbox.notify(note(), [channel])
    now = later(1)
    for _ in range(3):
        report = outbox.deliver_due([channel], now=now)
        now += timedelta(hours=1)
    assert report.failed == 1 and len(receiver.requests) == 3
    [row] = outbox.failed_rows()
    assert row.attempts == 3 and row.last_error.startswith("attempt 3/3: webhook") and "HTTP 404, refused by the receiver" in row.last_error
    assert outbox.deliver_due([channel], now=now).delivered == 0  # failed stays failed
    receiver.status = 200
    assert outbox.requeue_failed("hook", now=now) == 1 and outbox.deliver_due([channel], now=now).delivered == 1


def test_transient_answers_are_said_and_retried(db, receiver, env):
    receiver.status = 503
    channel = webhook(receiver)
    outbox = Outbox(db)
    outbox.notify(note(), [channel])
    assert outbox.deliver_due([channel], now=later(1)).retried == 1
    assert "HTTP 503 (transient)" in outbox.rows()[0].last_error


def test_enqueue_is_idempotent_per_key_and_channel_and_part_of_the_callers_transaction(db, receiver, env):
    outbox = Outbox(db)
    hook, other = webhook(receiver), webhook(receiver, name="ops", events=["validation-failed"])
    with db.engine.begin() as connection:
        assert outbox.enqueue(connection, note(), [hook, other]) == 1  # "ops" does not take promotions
        assert outbox.enqueue(connection, note(), [hook, other]) == 0
    assert outbox.notify(note(), [hook]) == 0
    assert len(outbox.rows()) == 1
    with pytest.raises(RuntimeError), db.engine.begin() as connection:  # the reported write rolled back: no notification
        outbox.enqueue(connection, note(key="k-rolled-back"), [hook])
        raise RuntimeError("the decision's write failed")
    assert [row.idempotency_key for row in outbox.rows()] == ["k-1"]


def test_a_channel_no_longer_configured_fails_its_rows_with_that_reason(db, receiver, env):
    outbox = Outbox(db)
    outbox.notify(note(), [webhook(receiver, name="gone")])
    report = outbox.deliver_due([webhook(receiver)])
    assert report.failed == 1 and not receiver.requests
    assert "channel 'gone' is no longer configured" in outbox.failed_rows()[0].last_error


def test_a_sender_that_raises_never_reaches_the_caller(db, receiver, env):
    outbox = Outbox(db)
    outbox.notify(note(), [webhook(receiver)])

    def broken(channel, notification):
        raise KeyError("bug in a sender")

    report = outbox.deliver_due([webhook(receiver)], send=broken)
    assert report.retried == 1 and "KeyError" in outbox.rows()[0].last_error


def racing_deliverers(outbox: Outbox, channel: WebhookChannel, deliverers: int = 4) -> None:
    barrier = threading.Barrier(deliverers)
    errors: list[BaseException] = []

    def deliver():
        try:
            barrier.wait()
            outbox.deliver_due([channel])
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=deliver) for _ in range(deliverers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


def test_deliverers_racing_send_each_message_once(db, receiver, env):
    outbox, channel = Outbox(db), webhook(receiver)
    with db.engine.begin() as connection:
        for i in range(24):
            outbox.enqueue(connection, note(key=f"k-{i}"), [channel])
    racing_deliverers(outbox, channel)
    assert sorted(receiver.deliveries()) == sorted(f"k-{i}" for i in range(24))  # each once
    assert outbox.counts()["hook"].delivered == 24


@pytest.mark.parametrize(
    ("channel", "key", "expected"),
    [
        ({"kind": "webhook", "name": "w", "url": "http://h/x", "secret_env": "S", "events": ["decision-promoted", "promoted-ish"]}, "channels.0.webhook.events.1", "Input should be"),
        ({"kind": "webhook", "name": "w", "url": "ftp://h/x", "secret_env": "S"}, "channels.0.webhook.url", "http:// or https://"),
        ({"kind": "webhook", "name": "w", "url": "http://h:notaport/x", "secret_env": "S"}, "channels.0.webhook.url", "does not parse"),
        ({"kind": "webhook", "name": "w", "url": "http://h/x", "secret_env": "inline-Secret-Value-42"}, "channels.0.webhook.secret_env", "must name the environment variable"),
        ({"kind": "apprise", "name": "a", "url_env": "slack://inline-Secret-Value-42/B/C"}, "channels.0.apprise.url_env", "must name the environment variable"),
        ({"kind": "webhook", "name": "w", "url": "https://user:inline-Secret-Value-42@h/x", "secret_env": "S"}, "channels.0.webhook.url", "must not carry credentials"),
        ({"kind": "pager", "name": "p"}, "channels.0", "does not match any of the expected tags"),
    ],
)
def test_a_bad_channel_is_refused_when_read_naming_the_key_never_the_secret(tmp_path, channel, key, expected):
    import yaml

    path = tmp_path / "notify.yaml"
    path.write_text(yaml.safe_dump({"channels": [channel]}))
    with pytest.raises(ConfigError) as refused:
        load_yaml_model(NotifyConfig, path, "notify config")
    assert f"{key}: " in str(refused.value) and expected in str(refused.value)
    assert "inline-Secret-Value-42" not in str(refused.value)
    with pytest.raises(ValidationError) as raw:
        NotifyConfig.model_validate({"channels": [channel]})
    assert "inline-Secret-Value-42" not in str(raw.value) and "inline-Secret-Value-42" not in repr(raw.value)


def test_channel_names_are_unique_and_configs_hold_no_secret(receiver, env, monkeypatch):
    monkeypatch.setenv("VLGATE_TEST_APPRISE_URL", "json://127.0.0.1:1/secret-token-in-url")
    with pytest.raises(ValidationError, match="the name 'hook' is used twice"):
        NotifyConfig.model_validate({"channels": [webhook(receiver).model_dump(), {"kind": "apprise", "name": "hook", "url_env": "X"}]})
    config = NotifyConfig.model_validate({"channels": [webhook(receiver).model_dump(), {"kind": "apprise", "name": "chat", "url_env": "VLGATE_TEST_APPRISE_URL"}]})
    assert NotifyConfig.model_validate_json(config.model_dump_json()) == config
    for shown in (repr(config), str(config), config.model_dump_json()):
        assert SECRET not in shown and "secret-token-in-url" not in shown
    assert [channel.name for channel in config.channels] == ["hook", "chat"] and config.named("chat").accepts(NotifyEvent.TEST)


def test_the_state_tables_are_what_the_migrations_build(db):
    inspector = sa.inspect(db.engine)
    assert set(inspector.get_table_names()) == {*metadata.tables, "vlgate_schema_version"}
    for table in metadata.tables.values():
        found = {column["name"]: column["nullable"] for column in inspector.get_columns(table.name)}
        assert found == {column.name: column.nullable for column in table.columns}, table.name
        assert set(inspector.get_pk_constraint(table.name)["constrained_columns"]) == {column.name for column in table.primary_key}, table.name
    assert {tuple(unique["column_names"]) for unique in inspector.get_unique_constraints("vlgate_outbox")} == {("idempotency_key", "channel")}
    assert "ix_vlgate_outbox_due" in {index["name"] for index in inspector.get_indexes("vlgate_outbox")}
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT version_num FROM vlgate_schema_version").scalar() == "0006"


PG = "postgresql+psycopg2://postgres@127.0.0.1:5432"


def _postgres_up() -> bool:
    try:
        import psycopg2

        psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=3).close()
        return True
    except Exception:
        return False


@pytest.fixture
def postgres_db():
    if not _postgres_up():
        if os.environ.get("VLGATE_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432, and VLGATE_REQUIRE_POSTGRES=1")
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (set VLGATE_REQUIRE_POSTGRES=1 to fail instead)")
    import psycopg2

    database = f"vlgate_outbox_{secrets.token_hex(4)}"
    admin = psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {database}")
    db = StateDatabase(f"{PG}/{database}")
    try:
        yield db
    finally:
        db.engine.dispose()
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.close()


def test_on_postgresql_enqueue_is_idempotent_and_racing_deliverers_send_each_once(postgres_db, receiver, env):
    test_the_state_tables_are_what_the_migrations_build(postgres_db)
    outbox, channel = Outbox(postgres_db), webhook(receiver)
    with postgres_db.engine.begin() as connection:
        for i in range(16):
            assert outbox.enqueue(connection, note(key=f"k-{i}"), [channel]) == 1
        assert outbox.enqueue(connection, note(key="k-0"), [channel]) == 0
    assert outbox.notify(note(key="k-1"), [channel]) == 0 and len(outbox.rows()) == 16
    racing_deliverers(outbox, channel)
    assert sorted(receiver.deliveries()) == sorted(f"k-{i}" for i in range(16))
    assert outbox.counts()["hook"].delivered == 16
    receiver.status = 500
    outbox.notify(note(key="k-late"), [channel])
    assert outbox.deliver_due([channel]).retried == 1 and outbox.rows("k-late")[0].attempts == 1


class TricklingReceiver:
    """A real socket server on 127.0.0.1 that answers ``200 OK`` with ``Content-Length: 40``
    and then one byte every ``every_s`` (or, with ``every_s=None``, takes the request and
    never answers): every read is quick, the delivery endless."""

    def __init__(self, every_s: float | None):
        self.every_s, self.connections = every_s, 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/vlgate"

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by stop()
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.recv(65536)
            if self.every_s is None:
                self.stopped.wait()
                return
            try:
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n")
                for _ in range(40):
                    if self.stopped.wait(self.every_s):
                        return
                    connection.sendall(b"x")
            except OSError:
                return

    def stop(self) -> None:
        self.stopped.set()
        self.server.close()


def test_a_channel_s_timeout_bounds_the_whole_delivery_not_each_read(env):
    """The reproduction: one byte every 1.5 s of a 40-byte answer, timeout_s 3; the delivery
    ends at its 3 s, where a timeout on each read let it run for as long as the bytes came."""
    trickle = TricklingReceiver(every_s=1.5)
    try:
        channel = WebhookChannel.model_validate({"kind": "webhook", "name": "slow", "url": trickle.url, "secret_env": "VLGATE_TEST_HOOK_SECRET", "timeout_s": 3, "allow_private_addresses": True})
        begun = time.monotonic()
        with pytest.raises(DeliveryError, match="no complete answer within 3 s") as refused:
            send_notification(channel, note())
        assert 2.9 < time.monotonic() - begun < 5.0
        assert not refused.value.permanent
    finally:
        trickle.stop()


def test_a_hanging_receiver_costs_a_pass_one_deadline_and_a_command_s_pass_has_a_budget(db, env, receiver):
    """Five rows to a receiver that never answers: one send is tried (its deadline), the
    other four wait for the next pass untouched; a healthy channel's rows are still sent in
    the same pass. A command's budget stops a pass from starting more sends."""
    hang = TricklingReceiver(every_s=None)
    try:
        stuck = WebhookChannel.model_validate({"kind": "webhook", "name": "stuck", "url": hang.url, "secret_env": "VLGATE_TEST_HOOK_SECRET", "timeout_s": 1, "allow_private_addresses": True})
        healthy = webhook(receiver)
        outbox = Outbox(db)
        with db.engine.begin() as connection:
            for i in range(5):
                outbox.enqueue(connection, note(key=f"k-{i}"), [stuck, healthy])
        begun = time.monotonic()
        report = outbox.deliver_due([stuck, healthy], now=later(1))
        assert time.monotonic() - begun < 3.5
        assert (report.delivered, report.retried, report.held_back) == (5, 1, ["stuck"])
        assert sorted(row.attempts for row in outbox.rows() if row.channel == "stuck") == [0, 0, 0, 0, 1]
        assert hang.connections == 1
        with db.engine.begin() as connection:
            for i in range(5, 10):
                outbox.enqueue(connection, note(key=f"k-{i}"), [healthy])
        spent = outbox.deliver_due([healthy], now=later(1), budget_s=0)
        assert spent.out_of_time and spent.delivered == 0
        only = outbox.deliver_due([stuck, healthy], now=later(2), keys=["k-7"])
        assert only.delivered == 1 and receiver.deliveries().count("k-7") == 1 and "k-8" not in receiver.deliveries()
    finally:
        hang.stop()


def test_the_outbox_lease_outlasts_the_longest_delivery(db):
    from vlgate.registry_hooks.notifications import MAX_DELIVERY_S

    with pytest.raises(ValueError, match="longer than the longest delivery"):
        Outbox(db, lease_s=MAX_DELIVERY_S)
    with pytest.raises(ValidationError):
        WebhookChannel.model_validate({"kind": "webhook", "name": "w", "url": "https://hooks.example/x", "secret_env": "S", "timeout_s": MAX_DELIVERY_S + 1})
    assert Outbox(db).lease.total_seconds() > MAX_DELIVERY_S


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("localhost", "the loopback host"),
        ("api.localhost", "the loopback host"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("[::1]", "loopback"),
        ("[fe80::1]", "link-local"),
        ("[::ffff:169.254.169.254]", "link-local"),  # IPv4-mapped
        ("[64:ff9b::a00:1]", "private"),  # NAT64 of 10.0.0.1
        ("0.0.0.0", "unspecified"),
        ("127.1", "not a canonical IP address"),
        ("0177.0.0.1", "not a canonical IP address"),
        ("2130706433", "not a canonical IP address"),
    ],
)
def test_a_webhook_to_a_non_public_address_is_refused_when_the_configuration_is_read(tmp_path, host, kind):
    path = tmp_path / "notify.yaml"
    channel = {"kind": "webhook", "name": "w", "url": f"http://{host}:8080/hook", "secret_env": "S"}
    path.write_text(yaml.safe_dump({"channels": [channel]}))
    with pytest.raises(ConfigError) as refused:
        load_yaml_model(NotifyConfig, path, "notify config")
    assert "channels.0.webhook" in str(refused.value) and kind in str(refused.value) and "allow_private_addresses: true" in str(refused.value)
    allowed = NotifyConfig.model_validate({"channels": [channel | {"allow_private_addresses": True}]})
    assert allowed.channels[0].allow_private_addresses
    assert NotifyConfig.model_validate({"channels": [channel | {"url": "https://8.8.8.8/hook"}]}).channels[0].url == "https://8.8.8.8/hook"


def test_a_name_that_resolves_to_a_non_public_address_is_refused_when_sending(env, receiver, monkeypatch):
    """The machine's own host name passes the configuration (a name: checked after DNS) and
    resolves to a loopback or private address here; the connection is refused before a byte
    of the notification leaves, for webhooks and for Apprise's custom-host URLs alike."""
    from vlgate.registry_hooks.notifications import address_problem

    name = socket.gethostname()
    resolved = {info[4][0] for info in socket.getaddrinfo(name, receiver.port, type=socket.SOCK_STREAM)}
    assert resolved and all(address_problem(address) is not None for address in resolved), f"{name} resolves to {resolved}: the test needs a name of a non-public address"
    hook = WebhookChannel.model_validate({"kind": "webhook", "name": "w", "url": f"http://{name}:{receiver.port}/hooks/vlgate", "secret_env": "VLGATE_TEST_HOOK_SECRET"})
    with pytest.raises(DeliveryError, match="not sent: .* is a (loopback|private) address") as refused:
        send_notification(hook, note())
    assert refused.value.permanent and receiver.requests == []
    send_notification(hook.model_copy(update={"allow_private_addresses": True}), note())
    assert len(receiver.requests) == 1
    monkeypatch.setenv("VLGATE_TEST_APPRISE_URL", f"json://{name}:{receiver.port}/chat")
    chat = AppriseChannel.model_validate({"kind": "apprise", "name": "chat", "url_env": "VLGATE_TEST_APPRISE_URL", "timeout_s": 5})
    with pytest.raises(DeliveryError, match="not sent: .* is a (loopback|private) address"):
        send_notification(chat, note())
    assert len(receiver.requests) == 1
    send_notification(chat.model_copy(update={"allow_private_addresses": True}), note())
    assert len(receiver.requests) == 2


def test_a_decision_whose_notification_cannot_be_queued_stands_and_status_says_nobody_was_told(tmp_path, receiver, env):
    """The documented exception to "a notification exists exactly when the decision does": an
    outbox that refuses the write (here its table is gone) leaves the claim's final state as
    it was decided, and the claim says why it was not told; a later decision told clears it."""
    import io

    from rich.console import Console

    from vlgate.cli.service import status_table
    from vlgate.flows.notifying import in_transaction
    from vlgate.registry_hooks.claims import ClaimStore

    claims = ClaimStore(f"sqlite:///{tmp_path}/state.db")
    outbox, channel = Outbox(claims.db), webhook(receiver)
    assert claims.claim(VersionRef(model="vlm", version="3"), via="poller") and claims.claim(VersionRef(model="vlm", version="4"), via="poller")
    assert claims.finish(VersionRef(model="vlm", version="4"), "promoted", also=in_transaction(outbox, note(key="told", version="4"), [channel]))
    assert claims.get(VersionRef(model="vlm", version="4")).untold is None and [row.idempotency_key for row in outbox.rows()] == ["told"]
    with claims.db.engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE vlgate_outbox RENAME TO vlgate_outbox_away")
    assert claims.finish(VersionRef(model="vlm", version="3"), "promoted", also=in_transaction(outbox, note(key="lost"), [channel]))
    claim = claims.get(VersionRef(model="vlm", version="3"))
    assert (claim.state, claim.detail) == ("done", "promoted")
    assert claim.untold is not None and claim.untold.startswith("the decision-promoted notification could not be queued: OperationalError")
    version = {"version": "3", "state": str(claim.state), "attempts": 1, "crashes": 0, "decision": "promoted", "reasons": [], "detail": claim.detail, "untold": claim.untold}
    console = Console(file=io.StringIO(), width=250)
    console.print(status_table({"tracking_uri": "sqlite:///x", "models": [{"name": "vlm", "champion": "3", "versions": [version]}]}))
    shown = console.file.getvalue()
    assert "done (not told)" in shown and "not told: the decision-promoted notification could not be queued" in shown
    with claims.db.engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE vlgate_outbox_away RENAME TO vlgate_outbox")
    assert claims.begin(VersionRef(model="vlm", version="3"), "f-2", rerun=True) is not None  # judged again, and told this time
    assert claims.finish(VersionRef(model="vlm", version="3"), "rejected", also=in_transaction(outbox, note(key="again"), [channel]))
    assert claims.get(VersionRef(model="vlm", version="3")).untold is None


HOSTILE_NAME = "vlm $(echo INJECTED) `echo TICKS`; echo SEMI 'q\""


def pasted(command: str) -> list[str]:
    """The words a real shell gives ``vlgate`` when a person pastes ``command`` (vlgate
    replaced by a function printing its arguments one a line): nothing of it runs."""
    done = subprocess.run(["bash", "-c", "vlgate() { printf '%s\\n' \"$@\"; }; " + command], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_command_shown_to_paste_quotes_the_model_name():
    """A model named with $(...), backticks, ; and quotes (MLflow takes it): the sign-off
    command of its notification, the release hint of a failure, the re-judgement hint and the
    report's diff command give bash the name as one word, and run nothing of it."""
    from vlgate.decisions import DecisionKind, DecisionRecord, Judge, Outcome
    from vlgate.flows.notifying import decision_notification, failure_notification
    from vlgate.gate.rendering import alias_moved
    from vlgate.versions import VersionRef

    awaiting = DecisionRecord(
        outcome=Outcome.AWAITING_APPROVAL, sequence=1, kind=DecisionKind.VALIDATION, judged_at=T0, alias_moved=False,
        champion_before="2", champion_after="2", judged_by=Judge(process="host pid 1", user="ci"), policy_path="gate.yaml",
    )  # fmt: skip
    told = decision_notification(VersionRef(model=HOSTILE_NAME, version="3"), "run-1", awaiting, None, None, None)
    assert told.command is not None and told.command.endswith('--reason "..."  (or vlgate reject)')
    assert pasted(told.command.split("  (or")[0]) == ["approve", HOSTILE_NAME, "3", "--reason", "..."]
    assert f"Next: {told.command}" in told.body()
    failed = failure_notification(VersionRef(model=HOSTILE_NAME, version="3"), "boom", 1)
    assert failed.command is not None and pasted(failed.command) == ["release", HOSTILE_NAME, "3"]
    hint = alias_moved(VersionRef(model=HOSTILE_NAME, version="3"), "1", "2")
    assert pasted(hint.split(": ", 1)[1].removesuffix(" judges it against v2")) == ["gate", HOSTILE_NAME, "3", "--against-current", "--apply"]


def test_the_report_s_diff_command_quotes_every_word():
    from markupsafe import Markup

    from vlgate.dashboards.report import _environment

    template = _environment().from_string('<code>{{ "vlgate"|shell("diff", model, "3", "2", "--evaluator", "lcm-mc") }}</code>')
    html = template.render(model=HOSTILE_NAME)
    command = Markup(html.removeprefix("<code>").removesuffix("</code>")).unescape()
    assert pasted(command) == ["diff", HOSTILE_NAME, "3", "2", "--evaluator", "lcm-mc"]
