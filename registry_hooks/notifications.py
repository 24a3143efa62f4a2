"""What a notification is and where it may go (docs/notifications.md); ``senders.py`` sends
it and verifies one on a receiver's side.

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
  one with ``senders.verify_notification``.
- ``apprise``: any service Apprise reaches (Slack, Teams, e-mail, ``json://`` ...), sent a
  plain-text title and body (:meth:`Notification.title`, :meth:`Notification.body`). The
  Apprise URL lives in the environment, so it is checked when a notification is sent: one
  Apprise does not understand makes that delivery fail with a clear error. Apprise's own log
  lines are stripped of the URL's secret parts while vlgate sends through it.

Sending raises ``senders.DeliveryError`` (one line, never a secret) on every problem; the
outbox records it and tries again later.

This module imports neither the receiver nor MLflow: flows, the CLI and the service all
build notifications.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import re
import urllib.parse
from collections.abc import Sequence
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

#: The longest one delivery may take (a channel's ``timeout_s`` is at most this): the
#: outbox's lease on a row it sends is longer, so no second deliverer sends it meanwhile.
MAX_DELIVERY_S: Final = 60.0

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


# --- where a notification may go -------------------------------------------------------

# NAT64's well-known prefix (RFC 6052): its last 32 bits are an IPv4 address
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_problem(address: str) -> str | None:
    """Why vlgate does not send to ``address`` by default (``loopback``, ``private``,
    ``link-local`` (where cloud metadata services answer), ...), or None for a public one. An
    IPv6 form that carries an IPv4 address (mapped, 6to4, NAT64) is judged by that address,
    as MLflow judges its webhooks' (``mlflow.utils.validation._is_public_ip``)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None)
        ip = embedded or ip
    if ip.is_global and not ip.is_multicast:
        return None
    kinds = ("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback), ("link-local", ip.is_link_local), ("private", ip.is_private), ("multicast", ip.is_multicast)
    kind = next((name for name, holds in kinds if holds), "reserved")
    return f"{ip} is a {kind} address"


def host_problem(host: str) -> str | None:
    """Why a URL's host is refused before any lookup: ``localhost`` (and ``*.localhost``,
    RFC 6761), an IP address that is not public, or a number that is no canonical IP address
    (``127.1``, ``0177.0.0.1`` and ``2130706433`` reach loopback through the socket layer).
    A name is checked after DNS, when a notification is sent."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return f"{name} is the loopback host"
    if ":" in name or name.replace(".", "").isdigit():
        try:
            return address_problem(name)
        except ValueError:
            return f"{name} is not a canonical IP address"
    return None


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
        """Whether the channel takes ``event``: its ``events``, or every one; a test always."""
        return self.events is None or event in self.events or event is NotifyEvent.TEST


class AppriseChannel(_Channel):
    """A channel Apprise sends to; its URL (which holds the service's token) is read from the
    environment variable ``url_env`` when a notification is sent. ``timeout_s`` bounds the
    whole delivery; ``allow_private_addresses`` lets a custom-host URL (``json://``,
    ``xml://``, ``form://`` and their ``s`` forms) name a loopback, private or link-local host."""

    kind: Literal["apprise"] = "apprise"
    url_env: str
    timeout_s: float = Field(default=10.0, gt=0, le=MAX_DELIVERY_S)
    allow_private_addresses: bool = False

    @field_validator("url_env")
    @classmethod
    def _url_env(cls, value: str) -> str:
        return _env_name(value, "url_env")


class WebhookChannel(_Channel):
    """A signed JSON POST to ``url``, signed with the secret in environment variable
    ``secret_env``; ``timeout_s`` bounds the whole delivery, from the DNS lookup to the last
    byte of the answer. ``url`` must name a public host unless ``allow_private_addresses``
    (a receiver on the same machine or network, as in tests): checked here for an address or
    ``localhost`` in the URL, and again on every connection, after DNS."""

    kind: Literal["webhook"] = "webhook"
    url: str = Field(max_length=2000)
    secret_env: str
    timeout_s: float = Field(default=10.0, gt=0, le=MAX_DELIVERY_S)
    allow_private_addresses: bool = False

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

    @model_validator(mode="after")
    def _public_host(self) -> WebhookChannel:
        problem = None if self.allow_private_addresses else host_problem(urllib.parse.urlsplit(self.url).hostname or "")
        if problem is not None:
            raise ValueError(f"url: {problem}; vlgate sends only to public addresses unless the channel says allow_private_addresses: true")
        return self


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


def channels_for(channels: Sequence[ChannelConfig], event: NotifyEvent) -> list[ChannelConfig]:
    """The channels subscribed to ``event``."""
    return [channel for channel in channels if channel.accepts(event)]


def probe_notification(model: str = "vlgate") -> Notification:
    """A ``test`` notification (``vlgate notify test``): a new idempotency key each time."""
    now = datetime.now(timezone.utc)
    return Notification(idempotency_key=notification_key(NotifyEvent.TEST, model, now.isoformat()), event=NotifyEvent.TEST, model=model, occurred_at=now)
