"""How a notification is sent and how a receiver checks one (docs/notifications.md): the
signed JSON webhook (HMAC-SHA256 over delivery id, timestamp and body, the construction of
MLflow's webhook signatures that ``webhook.py`` verifies on the way in) and Apprise URLs.
Every problem is a :class:`DeliveryError`: one line, never a secret."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import hmac
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TypeVar

from pydantic import ValidationError

from vlgate.registry_hooks.notifications import DELIVERY_HEADER, SCHEMA, SIGNATURE_HEADER, TIMESTAMP_HEADER, AppriseChannel, ChannelConfig, Notification, WebhookChannel, address_problem, config_problem, host_problem
from vlgate.text import visible


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


T = TypeVar("T")

#: How much of a receiver's answer is read (for the error line of a refusal).
_ANSWER_BYTES = 4096


def within_deadline(seconds: float, work: Callable[[], Awaitable[T]]) -> T:
    """``await work()`` cut off after ``seconds`` in all (TimeoutError), however slowly the
    other side trickles: asyncio cancels the request and closes its connection, where a
    socket timeout bounds only each read. In a thread of its own where this one runs an
    event loop already."""

    async def bounded() -> T:
        return await asyncio.wait_for(work(), seconds)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vlgate-send") as pool:
        return pool.submit(asyncio.run, bounded()).result()


class _AddressRefused(Exception):
    """A connection that reached an address the channel may not send to."""


def _peer_guard(channel: WebhookChannel) -> Callable[[str, dict[str, object]], Awaitable[None]]:
    """httpx's ``trace`` hook that checks the peer of each new TCP connection before TLS or
    a byte of the request: the address DNS gave at the moment of connecting, so a name that
    resolves elsewhere later (DNS rebinding) gains nothing (MLflow's webhooks check the same
    way, ``mlflow/webhooks/ssrf.py``)."""

    async def check(event: str, info: dict[str, object]) -> None:
        if event != "connection.connect_tcp.complete" or channel.allow_private_addresses:
            return
        stream = info["return_value"]
        peer = stream.get_extra_info("server_addr")  # type: ignore[attr-defined]
        problem = address_problem(peer[0]) if peer else "the connection's peer address is unknown"
        if problem is not None:
            await stream.aclose()  # type: ignore[attr-defined]
            raise _AddressRefused(problem)

    return check


def send_webhook(channel: WebhookChannel, notification: Notification, environ: Mapping[str, str] | None = None) -> None:
    """POST the notification, signed, to the channel's URL, all within the channel's
    ``timeout_s``; DeliveryError unless a 2xx answers. Retried by the outbox: connection
    errors, timeouts, 408, 429 and 5xx (transient), and every other refusal too
    (``permanent``, said in the error), a host that resolves to an address the channel may
    not reach among them."""
    import httpx

    secret = _environment_value(os.environ if environ is None else environ, channel.secret_env, "secret_env", channel.name)
    body = notification.to_json()
    host = urllib.parse.urlsplit(channel.url).netloc

    async def post() -> tuple[int, str | None, str]:
        async with httpx.AsyncClient(timeout=channel.timeout_s) as client:
            request = client.build_request("POST", channel.url, content=body, headers=signed_headers(secret, notification, body), extensions={"trace": _peer_guard(channel)})
            response = await client.send(request, stream=True)
            try:
                answer = b""
                async for chunk in response.aiter_raw():
                    answer += chunk
                    if len(answer) >= _ANSWER_BYTES:
                        break
            finally:
                await response.aclose()
            return response.status_code, response.headers.get("retry-after"), answer[:_ANSWER_BYTES].decode("utf-8", "replace")

    try:
        status, retry_after, text = within_deadline(channel.timeout_s, post)
    except (TimeoutError, httpx.TimeoutException):
        raise DeliveryError(f"webhook {host}: no complete answer within {channel.timeout_s:g} s (the channel's timeout_s, for the whole delivery)") from None
    except _AddressRefused as refused:
        raise DeliveryError(f"webhook {host}: not sent: {refused} (vlgate sends only to public addresses unless the channel says allow_private_addresses: true)", permanent=True) from None
    except httpx.HTTPError as error:
        raise DeliveryError(f"webhook {host}: {type(error).__name__}: {error}") from None
    if 200 <= status < 300:
        return
    said = one_line(text, 200)
    if status in (408, 429) or status >= 500:
        raise DeliveryError(f"webhook {host}: HTTP {status} (transient): {said}", retry_after_s=_retry_after(retry_after))
    raise DeliveryError(f"webhook {host}: HTTP {status}, refused by the receiver (a retry passes only once it changes): {said}", permanent=True)


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


#: Apprise's schemes that post to a host the URL names (its other services have fixed endpoints).
CUSTOM_HOST_SCHEMES = frozenset({"json", "jsons", "xml", "xmls", "form", "forms"})


def _apprise_host_problem(channel: AppriseChannel, url: str) -> str | None:
    """Why a custom-host Apprise URL may not be sent to: its host as written, then every
    address DNS gives it (Apprise connects by name itself, so unlike a webhook's connection
    this check precedes the connect)."""
    scheme = url.partition("://")[0].lower()
    if channel.allow_private_addresses or scheme not in CUSTOM_HOST_SCHEMES:
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    problem = host_problem(host)
    if problem is not None or not host:
        return problem or "the URL names no host"
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None  # unresolvable: Apprise's own send fails, as a transient error
    return next((problem for *_, address in found if (problem := address_problem(str(address[0]))) is not None), None)


def send_apprise(channel: AppriseChannel, notification: Notification, environ: Mapping[str, str] | None = None) -> None:
    """Send the notification's title and body through Apprise within the channel's
    ``timeout_s``; DeliveryError when Apprise says it was not delivered (Apprise does not say
    why in a way that tells transient from permanent: the outbox retries it), or did not say
    so in time. Apprise's plugins are blocking, so the send runs in a daemon thread with its
    sockets' timeouts set to ``timeout_s``; one cut off keeps its thread until those end."""
    import apprise

    url = apprise_url(channel, environ)
    outcome: list[bool | BaseException] = []
    captured_lines: list[str] = []

    def send() -> None:
        problem = _apprise_host_problem(channel, url)  # in the thread: its DNS lookup is within the deadline too
        if problem is not None:
            outcome.append(DeliveryError(f"apprise channel {channel.name!r}: not sent: {problem} (vlgate sends only to public addresses unless the channel says allow_private_addresses: true)", permanent=True))
            return
        notifier = apprise.Apprise()
        with _apprise_guard(url) as captured:
            notifier.add(url)
            for plugin in notifier:
                plugin.socket_connect_timeout = plugin.socket_read_timeout = channel.timeout_s
            try:
                outcome.append(bool(notifier.notify(title=notification.title(), body=notification.body())))
            except Exception as error:  # a plugin's own bug: recorded like any failed delivery
                outcome.append(error)
            captured_lines.extend(captured.lines)

    sender = threading.Thread(target=send, name="vlgate-apprise", daemon=True)
    sender.start()
    sender.join(channel.timeout_s)
    if not outcome:
        raise DeliveryError(f"apprise channel {channel.name!r}: no complete delivery within {channel.timeout_s:g} s (the channel's timeout_s)")
    if isinstance(outcome[0], DeliveryError):
        raise outcome[0]
    if isinstance(outcome[0], BaseException):
        raise DeliveryError(_redact(f"apprise: {type(outcome[0]).__name__}: {outcome[0]}"))
    if not outcome[0]:
        said = captured_lines[-1] if captured_lines else "no reason given"
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
