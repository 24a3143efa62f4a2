"""What a notification is, where it may go, and how one is sent (docs/notifications.md).

A notification is a versioned, typed payload (:class:`Notification`, schema
``vlgate.notification/1``) carrying an idempotency key: the outbox (``outbox.py``) delivers
each at least once per channel, so a receiver that sees the same key twice drops the copy.

Channels are configured (:class:`NotifyConfig`) and checked when the configuration is read:
an unknown event, a malformed URL, a secret written where the NAME of the environment
variable holding it belongs are refused then, naming the key. Secrets are references, never
values: a configuration holds environment variable names only, so its repr, str and JSON
never show one; the values are read from the environment when a notification is sent.

Two kinds of channel:

- ``webhook``: a signed JSON POST of the payload. Headers ``X-Vlgate-Delivery`` (the
  idempotency key), ``X-Vlgate-Timestamp`` (Unix seconds) and ``X-Vlgate-Signature``:
  ``v1,`` + base64(HMAC-SHA256(secret, "{delivery}.{timestamp}.{body}")), MLflow's webhook
  signature construction (the one ``webhook.py`` verifies on the way in). A receiver checks
  one with :func:`verify_notification`.
- ``apprise``: any service Apprise reaches (Slack, Teams, e-mail, ``json://`` ...), sent a
  plain-text title and body (:meth:`Notification.title`, :meth:`Notification.body`). The
  Apprise URL lives in the environment, so it is checked when a notification is sent: one
  Apprise does not understand makes that delivery fail with a clear error. Apprise's own log
  lines are stripped of the URL's secret parts while vlgate sends through it.

Sending raises :class:`DeliveryError` (one line, never a secret) on every problem; the
outbox records it and tries again later.

This module imports neither the receiver nor MLflow: flows, the CLI and the service all
build notifications, and the signature helper here is the pure one (``webhook.signature``
computes the same bytes).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vlgate.config import CONFIG_MODEL
from vlgate.text import visible

log = logging.getLogger("vlgate.notifications")

#: The payload's schema name; a receiver refuses any other.
SCHEMA: Final = "vlgate.notification/1"

DELIVERY_HEADER: Final = "X-Vlgate-Delivery"
TIMESTAMP_HEADER: Final = "X-Vlgate-Timestamp"
SIGNATURE_HEADER: Final = "X-Vlgate-Signature"

#: How many of a decision's reasons a notification carries, and how long each may be.
MAX_REASONS: Final = 5
MAX_REASON_CHARS: Final = 500


class NotifyEvent(StrEnum):
    """What happened: the events a channel may subscribe to."""

    DECISION_PROMOTED = "decision-promoted"
    DECISION_REJECTED = "decision-rejected"
    DECISION_INCONCLUSIVE = "decision-inconclusive"
    DECISION_COULD_NOT_JUDGE = "decision-could-not-judge"
    AWAITING_APPROVAL = "awaiting-approval"
    APPROVED = "approved"
    REJECTED_BY_PERSON = "rejected-by-person"
    APPROVAL_EXPIRED = "approval-expired"
    DRIFT_FOUND = "drift-found"
    DRIFT_NOT_CHECKED = "drift-not-checked"
    VALIDATION_FAILED = "validation-failed"
    RECOVERY_GAVE_UP = "recovery-gave-up"
    TEST = "test"

    @property
    def phrase(self) -> str:
        """How a chat title says it (``m v3 promoted``)."""
        return _PHRASES[self]


_PHRASES: Final = {
    NotifyEvent.DECISION_PROMOTED: "promoted",
    NotifyEvent.DECISION_REJECTED: "rejected",
    NotifyEvent.DECISION_INCONCLUSIVE: "inconclusive",
    NotifyEvent.DECISION_COULD_NOT_JUDGE: "could not be judged",
    NotifyEvent.AWAITING_APPROVAL: "awaits approval",
    NotifyEvent.APPROVED: "approved",
    NotifyEvent.REJECTED_BY_PERSON: "rejected by a person",
    NotifyEvent.APPROVAL_EXPIRED: "approval expired",
    NotifyEvent.DRIFT_FOUND: "drift found",
    NotifyEvent.DRIFT_NOT_CHECKED: "drift not checked",
    NotifyEvent.VALIDATION_FAILED: "validation failed",
    NotifyEvent.RECOVERY_GAVE_UP: "recovery gave up",
    NotifyEvent.TEST: "test notification",
}


def notification_key(event: NotifyEvent, *parts: str) -> str:
    """An idempotency key for ``event`` about ``parts`` (model, version, decision record
    number, ...): the same parts give the same key, whatever their length or characters
    (``event:`` + 48 hex digits of their SHA-256, within the outbox's 128 characters)."""
    digest = hashlib.sha256(json.dumps([str(event), *parts]).encode()).hexdigest()
    return f"{event}:{digest[:48]}"


class Notification(BaseModel):
    """One notification, the payload every channel is sent (webhooks as JSON, chat channels as
    :meth:`title` and :meth:`body`). A value: frozen, nothing unknown kept; its JSON names
    its schema (``"schema": "vlgate.notification/1"``) and reads back to an equal value."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    schema_name: Literal["vlgate.notification/1"] = Field(default=SCHEMA, alias="schema")
    #: the same for every copy of this notification: a receiver drops a key seen before
    idempotency_key: str = Field(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")
    event: NotifyEvent
    model: str = Field(min_length=1, max_length=1000)
    version: str | None = Field(default=None, max_length=64)
    #: the decision's outcome (``vlgate.decisions.Outcome``), where there is one
    outcome: str | None = Field(default=None, max_length=64)
    #: the first few reasons (:data:`MAX_REASONS`, each cut to :data:`MAX_REASON_CHARS`)
    reasons: list[str] = Field(default_factory=list)
    items_saved: float | None = None
    champion_before: str | None = Field(default=None, max_length=64)
    champion_after: str | None = Field(default=None, max_length=64)
    run_url: str | None = Field(default=None, max_length=2000)
    report_url: str | None = Field(default=None, max_length=2000)
    #: what to run next, e.g. the ``vlgate approve ...`` command of a version awaiting approval
    command: str | None = Field(default=None, max_length=2000)
    occurred_at: AwareDatetime

    @field_validator("reasons", mode="before")
    @classmethod
    def _first_reasons(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            return [reason[:MAX_REASON_CHARS] if isinstance(reason, str) else reason for reason in list(value)[:MAX_REASONS]]
        return value

    def to_json(self) -> bytes:
        """The payload as sent and stored: compact JSON, UTF-8."""
        return self.model_dump_json().encode()

    @classmethod
    def from_json(cls, data: str | bytes) -> Notification:
        """A payload read back; ValidationError when it is not a ``vlgate.notification/1``."""
        return cls.model_validate_json(data)

    def title(self) -> str:
        """One line for a chat channel's title, data shown safely (:func:`vlgate.text.visible`)."""
        subject = self.model if self.version is None else f"{self.model} v{self.version}"
        return visible(f"vlgate: {subject} {self.event.phrase}")[:250]

    def body(self) -> str:
        """Plain text for a chat channel, one fact a line; every value from data is shown with
        its control characters escaped, so a name or reason cannot forge lines or colours."""
        lines: list[str] = []
        if self.outcome is not None:
            lines.append(f"Outcome: {visible(self.outcome)}")
        if self.reasons:
            lines.append("Reasons:")
            lines.extend(f"- {visible(reason)}" for reason in self.reasons)
        if self.items_saved is not None:
            lines.append(f"Items saved: {self.items_saved:g}")
        if self.champion_before is not None or self.champion_after is not None:
            lines.append(f"Champion: {visible(self.champion_before or 'none')} -> {visible(self.champion_after or 'none')}")
        if self.run_url is not None:
            lines.append(f"Run: {visible(self.run_url)}")
        if self.report_url is not None:
            lines.append(f"Report: {visible(self.report_url)}")
        if self.command is not None:
            lines.append(f"Next: {visible(self.command)}")
        lines.append(f"At: {self.occurred_at.isoformat(timespec='seconds')} ({visible(self.idempotency_key)})")
        return "\n".join(lines)


# --- configuration ------------------------------------------------------------------------

#: An environment variable's name as vlgate asks for one: upper case, digits, underscores.
#: Upper case only, so that a secret pasted where its variable's name belongs is refused.
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
#: A channel's name: what the outbox rows, ``vlgate status`` and logs call it.
CHANNEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: Channel configs hide refused input in their errors: a value refused there may be a secret.
CHANNEL_MODEL = CONFIG_MODEL | ConfigDict(frozen=True, hide_input_in_errors=True)


def _env_name(value: str, key: str) -> str:
    if not ENV_NAME.fullmatch(value):
        # the value is not repeated: it may be the secret itself
        raise ValueError(f"{key} must name the environment variable holding it (upper case, digits, _, e.g. VLGATE_NOTIFY_SECRET), not hold the value itself")
    return value


class _Channel(BaseModel):
    model_config = CHANNEL_MODEL

    name: str = Field(pattern=CHANNEL_NAME)
    #: the events sent to this channel; absent: all of them
    events: list[NotifyEvent] | None = None

    def accepts(self, event: NotifyEvent) -> bool:
        return self.events is None or event in self.events


class AppriseChannel(_Channel):
    """A channel Apprise sends to; its URL (which holds the service's token) is read from the
    environment variable ``url_env`` when a notification is sent."""

    kind: Literal["apprise"] = "apprise"
    url_env: str

    @field_validator("url_env")
    @classmethod
    def _url_env(cls, value: str) -> str:
        return _env_name(value, "url_env")


class WebhookChannel(_Channel):
    """A signed JSON POST to ``url``, signed with the secret in environment variable ``secret_env``."""

    kind: Literal["webhook"] = "webhook"
    url: str = Field(max_length=2000)
    secret_env: str
    timeout_s: float = Field(default=10.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.isascii() or any(char.isspace() or not char.isprintable() for char in value):
            raise ValueError("url must be an http:// or https:// URL without spaces or control characters")
        try:
            parts = urllib.parse.urlsplit(value)
            parts.port  # noqa: B018 -- raises on a malformed port
        except ValueError:
            raise ValueError("url must be an http:// or https:// URL (it does not parse)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("url must not carry credentials (user:password@): the receiver authenticates vlgate by the signature (secret_env)")
        return value

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, value: str) -> str:
        return _env_name(value, "secret_env")


#: One configured channel, told apart by its ``kind``.
ChannelConfig = AppriseChannel | WebhookChannel


class NotifyConfig(BaseModel):
    """``notify:`` of ``vlgate.yaml``: the channels notifications go to (none: none are sent)."""

    model_config = CHANNEL_MODEL

    channels: list[Annotated[AppriseChannel | WebhookChannel, Field(discriminator="kind")]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> NotifyConfig:
        seen: set[str] = set()
        for channel in self.channels:
            if channel.name in seen:
                raise ValueError(f"channels: the name {channel.name!r} is used twice (each channel needs its own: outbox rows are kept per name)")
            seen.add(channel.name)
        return self

    def named(self, name: str) -> ChannelConfig | None:
        return next((channel for channel in self.channels if channel.name == name), None)


def config_problem(error: ValidationError) -> str:
    """A refused notify configuration in one line naming each key (never its value)."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {str(e['msg']).removeprefix('Value error, ')}".removeprefix(": ") for e in error.errors())


# --- sending ------------------------------------------------------------------------------


class DeliveryError(Exception):
    """A notification not delivered: one line, no secret. ``permanent``: the receiver refused
    it (a 4xx other than 408/429) and a retry will only pass once the receiver changes;
    ``retry_after_s``: the receiver asked for that wait (``Retry-After``)."""

    def __init__(self, message: str, permanent: bool = False, retry_after_s: float | None = None):
        super().__init__(one_line(message))
        self.permanent = permanent
        self.retry_after_s = retry_after_s


def one_line(text: str, limit: int = 1000) -> str:
    """``text`` as one line of at most ``limit`` characters, control characters escaped."""
    return visible(" ".join(text.split()))[:limit]


def signature(secret: str, delivery: str, timestamp: str, body: bytes) -> str:
    """The v1 signature of a notification: ``v1,`` + base64(HMAC-SHA256(secret,
    "{delivery}.{timestamp}.{body}")) (MLflow's construction; ``webhook.signature`` computes
    the same, and could import this one)."""
    signed = f"{delivery}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()


def signed_headers(secret: str, notification: Notification, body: bytes, now: float | None = None) -> dict[str, str]:
    """The headers of a signed webhook POST of ``body`` (the notification's JSON)."""
    timestamp = str(int(time.time() if now is None else now))
    return {
        "Content-Type": "application/json",
        "User-Agent": "vlgate-notifications/1",
        DELIVERY_HEADER: notification.idempotency_key,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(secret, notification.idempotency_key, timestamp, body),
    }


class NotificationRejected(Exception):
    """A notification a receiver must not act on. ``reason``: ``missing header``, ``bad
    signature``, ``stale`` (timestamp too far from now: a replay, or a broken clock),
    ``bad timestamp`` or ``bad payload``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def verify_notification(secret: str, headers: Mapping[str, str], body: bytes, max_age_s: float = 300, now: float | None = None) -> Notification:
    """The notification of an authentic, fresh webhook POST (for receivers, and tests);
    :class:`NotificationRejected` otherwise. The signature is checked first, so a forgery is
    ``bad signature`` whatever its timestamp; a genuine one outside ``max_age_s`` of now is
    ``stale``. A receiver should also drop a ``X-Vlgate-Delivery`` it has handled before
    (delivery is at least once)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    delivery, timestamp, given = (lowered.get(name.lower()) for name in (DELIVERY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER))
    if not (delivery and timestamp and given):
        raise NotificationRejected("missing header", f"needs {DELIVERY_HEADER}, {TIMESTAMP_HEADER} and {SIGNATURE_HEADER}")
    if not hmac.compare_digest(signature(secret, delivery, timestamp, body).encode(), given.encode("utf-8", "surrogateescape")):
        raise NotificationRejected("bad signature", "the signature does not match the shared secret")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise NotificationRejected("bad timestamp", f"{TIMESTAMP_HEADER} is not a Unix time")
    age = (time.time() if now is None else now) - int(timestamp)
    if abs(age) > max_age_s:
        raise NotificationRejected("stale", f"{TIMESTAMP_HEADER} is {age:.0f} s from now (allowed: ±{max_age_s:.0f} s)")
    try:
        notification = Notification.from_json(body)
    except ValidationError as error:
        raise NotificationRejected("bad payload", f"not a {SCHEMA}: {config_problem(error)}") from None
    if notification.idempotency_key != delivery:
        raise NotificationRejected("bad payload", f"{DELIVERY_HEADER} is not the payload's idempotency_key")
    return notification


def _environment_value(environ: Mapping[str, str], variable: str, key: str, channel: str) -> str:
    value = environ.get(variable, "")
    if not value.strip():
        raise DeliveryError(f"channel {channel!r}: environment variable {variable} ({key}) is not set", permanent=True)
    return value


def _retry_after(value: str | None) -> float | None:
    if value is not None and value.strip().isdigit():
        return float(value.strip())
    return None


def send_webhook(channel: WebhookChannel, notification: Notification, environ: Mapping[str, str] | None = None) -> None:
    """POST the notification, signed, to the channel's URL; DeliveryError unless a 2xx answers.
    Retried by the outbox: connection errors, timeouts, 408, 429 and 5xx (transient), and
    every other refusal too (``permanent``, said in the error)."""
    import httpx

    secret = _environment_value(os.environ if environ is None else environ, channel.secret_env, "secret_env", channel.name)
    body = notification.to_json()
    host = urllib.parse.urlsplit(channel.url).netloc
    try:
        response = httpx.post(channel.url, content=body, headers=signed_headers(secret, notification, body), timeout=channel.timeout_s)
    except httpx.TimeoutException:
        raise DeliveryError(f"webhook {host}: no answer within {channel.timeout_s:g} s") from None
    except httpx.HTTPError as error:
        raise DeliveryError(f"webhook {host}: {type(error).__name__}: {error}") from None
    if 200 <= response.status_code < 300:
        return
    said = one_line(response.text, 200)
    if response.status_code in (408, 429) or response.status_code >= 500:
        raise DeliveryError(f"webhook {host}: HTTP {response.status_code} (transient): {said}", retry_after_s=_retry_after(response.headers.get("retry-after")))
    raise DeliveryError(f"webhook {host}: HTTP {response.status_code}, refused by the receiver (a retry passes only once it changes): {said}", permanent=True)


# Apprise logs the URLs it loads and fails on, and an Apprise URL holds the service's token:
# while vlgate sends, each apprise log line is stripped of the URL's secret parts, and the
# sending thread's warnings are kept for the error it records.
_APPRISE_LOGGER = "apprise"
_secrets_lock = threading.Lock()
_secrets: dict[str, int] = {}
_redactor_installed = False


def _secret_parts(url: str) -> list[str]:
    """The parts of an Apprise URL that may be a token: everything but the scheme, a host
    name with a dot, and short parts (an id, a port)."""
    parts = [url]
    scheme, _, rest = url.partition("://")
    for piece in re.split(r"[/@:?&=#,]+", rest):
        piece = urllib.parse.unquote(piece)
        if len(piece) >= 6 and not re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|localhost", piece):
            parts.append(piece)
    return sorted(set(parts), key=len, reverse=True)


def _redact(text: str) -> str:
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class _RedactApprise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        with _secrets_lock:
            active = bool(_secrets)
        if active:
            record.msg, record.args = _redact(record.getMessage()), None
        return True


class _ThreadCapture(logging.Handler):
    """The warnings apprise logs from one thread (the one sending)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.lines.append(record.getMessage())


@contextlib.contextmanager
def _apprise_guard(url: str) -> Iterator[_ThreadCapture]:
    global _redactor_installed
    logger = logging.getLogger(_APPRISE_LOGGER)
    parts = _secret_parts(url)
    with _secrets_lock:
        if not _redactor_installed:
            logger.addFilter(_RedactApprise())
            _redactor_installed = True
        for part in parts:
            _secrets[part] = _secrets.get(part, 0) + 1
    capture = _ThreadCapture()
    logger.addHandler(capture)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)
        with _secrets_lock:
            for part in parts:
                _secrets[part] -= 1
                if not _secrets[part]:
                    del _secrets[part]


def apprise_url(channel: AppriseChannel, environ: Mapping[str, str] | None = None) -> str:
    """The channel's Apprise URL from the environment, checked by Apprise; DeliveryError
    (naming the variable, never its value) when it is unset or not one Apprise understands.
    ``vlgate notify test`` and status checks can call this without sending anything."""
    import apprise

    url = _environment_value(os.environ if environ is None else environ, channel.url_env, "url_env", channel.name).strip()
    with _apprise_guard(url):
        if not apprise.Apprise().add(url):
            raise DeliveryError(f"channel {channel.name!r}: the URL in {channel.url_env} is not one Apprise understands (see https://github.com/caronc/apprise/wiki)", permanent=True)
    return url


def send_apprise(channel: AppriseChannel, notification: Notification, environ: Mapping[str, str] | None = None) -> None:
    """Send the notification's title and body through Apprise; DeliveryError when Apprise
    says it was not delivered (Apprise does not say why in a way that tells transient from
    permanent: the outbox retries it)."""
    import apprise

    url = apprise_url(channel, environ)
    notifier = apprise.Apprise()
    with _apprise_guard(url) as captured:
        notifier.add(url)
        try:
            sent = notifier.notify(title=notification.title(), body=notification.body())
        except Exception as error:  # a plugin's own bug: recorded like any failed delivery
            raise DeliveryError(_redact(f"apprise: {type(error).__name__}: {error}")) from None
    if not sent:
        said = captured.lines[-1] if captured.lines else "no reason given"
        raise DeliveryError(f"apprise channel {channel.name!r}: not delivered: {said}")


#: How the outbox sends one notification to one channel (tests and tools may pass their own).
Sender = Callable[[ChannelConfig, Notification], None]


def send_notification(channel: ChannelConfig, notification: Notification, environ: Mapping[str, str] | None = None) -> None:
    """Send ``notification`` to ``channel`` now; DeliveryError (one line, no secret) when it
    was not delivered."""
    if isinstance(channel, WebhookChannel):
        send_webhook(channel, notification, environ)
    else:
        send_apprise(channel, notification, environ)


def channels_for(channels: Sequence[ChannelConfig], event: NotifyEvent) -> list[ChannelConfig]:
    """The channels subscribed to ``event``."""
    return [channel for channel in channels if channel.accepts(event)]


def probe_notification(model: str = "vlgate") -> Notification:
    """A ``test`` notification (``vlgate notify test``): a new idempotency key each time."""
    now = datetime.now(timezone.utc)
    return Notification(idempotency_key=notification_key(NotifyEvent.TEST, model, now.isoformat()), event=NotifyEvent.TEST, model=model, occurred_at=now)
