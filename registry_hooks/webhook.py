"""The receiver for MLflow's model-registry webhooks (MLflow ≥ 3.3, event
``model_version.created``).

Each delivery is checked before anything happens (mlflow/webhooks/delivery.py): its
body is at most ``max_body_bytes`` (read no further: a larger ``Content-Length`` is
refused unread, a stream is cut at the limit); ``X-MLflow-Signature`` must be ``v1,`` + base64(HMAC-SHA256(secret,
"{delivery_id}.{timestamp}.{body}")), compared in constant time; ``X-MLflow-Timestamp``
must be within ``max_age_s`` of now (either way: a replay of an old delivery, or a
sender with a broken clock); ``X-MLflow-Delivery-Id`` must not have been handled before
(kept in the state database, so a replay is refused after a restart and by every
replica). A verified ``model_version.created`` of a configured model is offered to the
dispatcher, which claims the version (exactly once, whatever else offers it) and starts
its validation flow. A delivery id is recorded once the delivery has been handled, so a
delivery that failed midway (500) is handled again when MLflow retries it.

A signed body is still checked before anything is claimed: it must be a delivery
(:class:`Delivery`), and a ``model_version.created`` must carry the fields MLflow sends
(:class:`ModelVersionCreated`, after ``mlflow/webhooks/types.py``'s
``ModelVersionCreatedPayload``): a name that is a non-empty string, a version that is a
registry version number. Headers are read defensively: a signature or timestamp with
characters no real one has is refused like any other mismatch.

Responses: 202 claimed and started; 200 already claimed, a duplicate delivery, a model
vlgate is not configured for, or an event vlgate does not act on (MLflow does not need
to retry those); 401 bad or missing signature; 400 stale timestamp or malformed body;
413 body over the limit.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from vlgate.registry_hooks.deliveries import DeliveryLog
from vlgate.registry_hooks.dispatch import Dispatcher
from vlgate.versions import VERSION_PATTERN

if TYPE_CHECKING:
    from mlflow import MlflowClient

SIGNATURE_HEADER = "X-MLflow-Signature"
TIMESTAMP_HEADER = "X-MLflow-Timestamp"
DELIVERY_HEADER = "X-MLflow-Delivery-Id"
PATH = "/webhooks/mlflow"


class Delivery(BaseModel):
    """A webhook delivery's envelope: which event it is, and its data."""

    model_config = ConfigDict(extra="ignore", strict=True)

    entity: str
    action: str
    data: dict[str, object] = Field(default_factory=dict)


class ModelVersionCreated(BaseModel):
    """The ``data`` of MLflow's ``model_version.created``: the fields vlgate acts on."""

    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(min_length=1, max_length=1000)
    #: the registry numbers versions 1, 2, ...: anything else names no version
    version: str = Field(pattern=VERSION_PATTERN)


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"data.{'.'.join(map(str, first['loc']))}: {first['msg']}"


def signature(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """MLflow's v1 signature of a delivery."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()


class DeliveryRejected(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def verify(secret: str, headers: Mapping[str, str], body: bytes, max_age_s: float, now: float | None = None) -> str:
    """The delivery id of an authentic, fresh delivery; DeliveryRejected otherwise."""
    delivery_id, timestamp, given = headers.get(DELIVERY_HEADER), headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER)
    if not (delivery_id and timestamp and given):
        raise DeliveryRejected(401, f"missing {SIGNATURE_HEADER}, {TIMESTAMP_HEADER} or {DELIVERY_HEADER}")
    # a real signature is base64 text; comparing bytes keeps any other header a mismatch
    # (compare_digest raises on non-ASCII text)
    if not hmac.compare_digest(signature(secret, delivery_id, timestamp, body).encode(), given.encode("utf-8", "surrogateescape")):
        raise DeliveryRejected(401, "signature does not match the shared secret")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise DeliveryRejected(400, f"{TIMESTAMP_HEADER} {timestamp[:40]!r} is not a Unix time")
    age = (time.time() if now is None else now) - int(timestamp)
    if abs(age) > max_age_s:
        raise DeliveryRejected(400, f"{TIMESTAMP_HEADER} is {age:.0f} s from now (allowed: ±{max_age_s:.0f} s)")
    return delivery_id


#: MLflow's model_version.created payloads are a few hundred bytes (name, version, source,
#: run id, tags, description); 1 MiB leaves room for long tags and descriptions
MAX_BODY_BYTES = 1 << 20


async def bounded_body(request: Request, limit: int) -> bytes:
    """The request body, read only while it stays within ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise DeliveryRejected(413, f"body of {declared} bytes refused unread (limit {limit})")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise DeliveryRejected(413, f"body over the limit of {limit} bytes")
    return bytes(body)


def create_app(dispatcher: Dispatcher, secret: str, max_age_s: float = 300, max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
    if not secret:
        raise ValueError("the webhook receiver needs a shared secret (VLGATE_WEBHOOK_SECRET): unsigned deliveries are never accepted")

    async def receive(request: Request) -> JSONResponse:
        try:
            body = await bounded_body(request, max_body_bytes)
            delivery_id = verify(secret, request.headers, body, max_age_s)
            payload = json.loads(body)
        except DeliveryRejected as rejected:
            return JSONResponse({"error": str(rejected)}, status_code=rejected.status)
        except (ValueError, RecursionError):
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        try:
            delivery = Delivery.model_validate(payload)
        except ValidationError as error:
            first = error.errors()[0]
            return JSONResponse({"error": f"not a webhook delivery: {'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}"}, status_code=400)
        # the state database (and the registry, for "is it configured") block: in a worker
        # thread, so a database waiting on a lock never stalls the event loop (/healthz, other deliveries)
        return await run_in_threadpool(deliver, delivery_id, delivery)

    def deliver(delivery_id: str, delivery: Delivery) -> JSONResponse:
        deliveries = DeliveryLog(dispatcher.claims.db)
        if deliveries.seen(delivery_id):
            return JSONResponse({"duplicate_delivery": delivery_id}, status_code=200)
        response = handle(delivery)
        # recorded only now: a delivery that raised on the way (500) is handled on MLflow's retry
        deliveries.first(delivery_id)
        deliveries.forget_before(datetime.now(timezone.utc) - timedelta(seconds=2 * max_age_s))
        return response

    def handle(delivery: Delivery) -> JSONResponse:
        if (delivery.entity, delivery.action) != ("model_version", "created"):
            return JSONResponse({"ignored": f"{delivery.entity[:100]}.{delivery.action[:100]}"}, status_code=200)
        try:
            created = ModelVersionCreated.model_validate(delivery.data)
        except ValidationError as error:
            return JSONResponse({"error": f"model_version.created: {_problem(error)}"}, status_code=400)
        if not dispatcher.configured(created.name):
            return JSONResponse({"ignored": f"model {created.name!r} is not configured (vlgate.yaml models: or default:)"}, status_code=200)
        claimed = dispatcher.offer(created.name, created.version, via="webhook")
        return JSONResponse({"model": created.name, "version": created.version, "claimed": claimed}, status_code=202 if claimed else 200)

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route(PATH, receive, methods=["POST"]), Route("/healthz", health)])


def ensure_webhook(client: MlflowClient, url: str, secret: str, name: str = "vlgate") -> str:
    """Register (or point at ``url``) the tracking server's webhook for new versions;
    returns its id. Needs a tracking server with a SQL store."""
    page = client.list_webhooks(max_results=1000)
    for hook in page:
        if hook.name == name:
            client.update_webhook(hook.webhook_id, url=url, secret=secret, events=["model_version.created"], status="ACTIVE")
            return hook.webhook_id
    return client.create_webhook(name=name, url=url, events=["model_version.created"], secret=secret).webhook_id
