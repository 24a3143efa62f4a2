"""``vlgate status`` and ``vlgate serve``: the registry, the claims and the running service."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from pydantic import JsonValue

from vlgate import tag_keys, tracking
from vlgate.cli.prefect_server import local_prefect_server
from vlgate.config import ConfigError
from vlgate.flows.context import ServiceContext
from vlgate.flows.settings import DriftConfig, ServiceConfig, config_problem, drift_problem
from vlgate.registry_hooks.claims import ClaimStore
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
    from rich.table import Table

    from vlgate.registry_hooks.dispatch import Dispatcher

log = logging.getLogger("vlgate.serve")


class VersionStatus(TypedDict):
    """One registered version in ``vlgate status``: its claim, its decision tags and
    (``vlgate status MODEL VERSION``) every decision record of its run."""

    version: str
    state: str
    claimed_via: str | None
    attempts: int
    crashes: int
    detail: str | None
    #: why the notification of its final state could not be queued (None: it was, or none was due)
    untold: NotRequired[str | None]
    flow_run_id: str | None
    decision: str | None
    outcome: str | None
    reasons: list[str]
    validation_run_id: str | None
    decision_record: str | None
    sequential: str | None
    source: str | None
    description: str
    decisions: NotRequired[list[dict[str, JsonValue]]]


class ModelStatus(TypedDict):
    name: str
    champion: str | None
    versions: list[VersionStatus]


class DeliveryCounts(TypedDict):
    pending: int
    failed: int
    delivered: int


class FailedDelivery(TypedDict):
    channel: str
    event: str
    attempts: int
    last_error: str | None
    created_at: str


class ServiceStatus(TypedDict):
    """What ``vlgate status`` shows (``--json``: as it is): the models, and the notifications'
    deliveries per channel with those that failed for good (the latest first)."""

    tracking_uri: str
    models: list[ModelStatus]
    notifications: dict[str, DeliveryCounts]
    failed_deliveries: list[FailedDelivery]


def service_status(context: ServiceContext, model: str | None = None, version: str | None = None) -> ServiceStatus:
    """Every registered model: its champion and each version's validation state, decision
    and reasons (the latest decision record's, as the version's tags show it). With
    ``version`` (of ``model``), that version alone, with every decision record of its run,
    the first first."""
    client = context.tracking
    claims = {(c.model_name, c.version): c for c in ClaimStore.for_home(context.home).all(model)}  # read: no lease of its own
    models: list[ModelStatus] = []
    for registered in sorted(tracking.registered_models(client), key=lambda m: m.name):
        if model is not None and registered.name != model:
            continue
        versions: list[VersionStatus] = []
        for registered_version in tracking.model_versions(client, registered.name):
            if version is not None and str(registered_version.version) != version:
                continue
            claim = claims.get((registered.name, str(registered_version.version)))
            tags = registered_version.tags
            reasons = tags.get(tag_keys.REASONS)
            versions.append(
                {
                    "version": str(registered_version.version),
                    "state": claim.state if claim else "pending",
                    "claimed_via": claim.claimed_via if claim else None,
                    "attempts": claim.attempts if claim else 0,
                    "crashes": claim.crashes if claim else 0,
                    # what the claim says of its last attempt: why it was run again, or why it failed
                    "detail": claim.detail if claim else None,
                    "untold": claim.untold if claim else None,
                    "flow_run_id": claim.flow_run_id if claim else None,
                    "decision": tags.get(tag_keys.DECISION),
                    "outcome": tags.get(tag_keys.OUTCOME),
                    "reasons": reasons.split("\n") if reasons else [],
                    "validation_run_id": tags.get(tag_keys.VALIDATION_RUN),
                    # the latest decision record, which the tags show (the earlier ones stay beside it)
                    "decision_record": tags.get(tag_keys.DECISION_RECORD),
                    # a sequential policy: the look the decision was taken at and the items saved
                    "sequential": tags.get(tag_keys.SEQUENTIAL),
                    "source": registered_version.source,
                    "description": tracking.registered_description(registered_version.description),
                }
            )
            run_id = tags.get(tag_keys.VALIDATION_RUN)
            if version is not None:
                versions[-1]["decisions"] = [record.as_json() for record in tracking.decision_history(client, run_id)] if run_id else []
        models.append({"name": registered.name, "champion": tracking.champion_version(client, registered.name), "versions": versions})
    outbox = context.outbox
    counts: dict[str, DeliveryCounts] = {name: {"pending": c.pending, "failed": c.failed, "delivered": c.delivered} for name, c in outbox.counts().items()}
    failed: list[FailedDelivery] = [
        {"channel": row.channel, "event": row.event, "attempts": row.attempts, "last_error": row.last_error, "created_at": row.created_at.isoformat()} for row in outbox.failed_rows()
    ]
    return {"tracking_uri": client.tracking_uri, "models": models, "notifications": counts, "failed_deliveries": failed}


def status_table(status: ServiceStatus) -> Table:
    """``service_status`` as a rich table; every cell is data (names, states, reasons read
    back from the registry), shown as written: no markup, control characters escaped."""
    from rich.table import Table
    from rich.text import Text

    from vlgate.cli.terminal import data_text

    table = Table(title=data_text(f"vlgate status ({status['tracking_uri']})"))
    for column in ("model", "version", "state", "decision", "champion", "reasons"):
        table.add_column(column)
    for model in status["models"]:
        for version in model["versions"]:
            failed = [r for r in version["reasons"]] if version["decision"] == "rejected" else []
            state = version["state"]
            if state in ("claimed", "running") and version["attempts"] > 1:  # run again after a loss: say which attempt and why
                failed = [version["detail"] or ""]
                state = f"{state} (attempt {version['attempts']})"
            if version.get("untold"):  # decided, and nobody told: said before anything else
                failed = [f"not told: {version['untold']}", *failed]
                state = f"{state} (not told)"
            reasons = [data_text(reason) for reason in failed[:4]] + ([Text(f"… {len(failed) - 4} more")] if len(failed) > 4 else [])
            table.add_row(
                data_text(model["name"]),
                data_text(version["version"]),
                data_text(state),
                data_text(version["decision"] or "-"),
                "★" if model["champion"] == version["version"] else "",
                Text("\n").join(reasons),  # a reason a line, each with its own newlines escaped
            )
    return table


def serve(webhook: bool = True, once: bool = False, drift: bool = True) -> int:
    """Poller + webhook receiver + drift schedules, until interrupted."""
    context = ServiceContext.open()
    home, config = context.home, context.config  # first: a broken vlgate.yaml is one line (ConfigError), nothing started
    checked_evaluators()  # every evaluator, plugins included, agrees with itself before anything is served
    for name, model in [*config.models.items(), *([("default", config.default)] if config.default else [])]:
        problem = config_problem(model) or (drift_problem(model) if drift and not once else None)
        if problem:  # each model's suite and policy, checked against each other before anything is served
            raise ConfigError(f"model {name!r}: {problem}")
    preflight(home, config, webhook=webhook and not once)
    # vlgate's own decisions at INFO; the libraries (GX, MLflow, httpx) only when they warn
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("vlgate").setLevel(logging.INFO)
    # `kill -USR1 PID` writes every thread's stack to the log: how a stuck service is diagnosed
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    drift_configs = {name: c.drift for name, c in config.models.items() if c.drift is not None} if drift and not once else {}
    # the Prefect server (with the cron scheduler when drift is configured) starts before
    # any flow runs in this process: flows started earlier would bring up a temporary
    # server on the same database
    with local_prefect_server(home, services=bool(drift_configs)):
        return _serve(context, drift_configs, webhook=webhook, once=once)


def checked_evaluators() -> list[str]:
    """Every registered evaluator checked on its example records (``registry.check_definitions``);
    the names. A definition that disagrees with itself (a broken plugin) is a :class:`ConfigError`:
    one line naming it, exit 2, nothing started."""
    from vlgate.evaluators import registry
    from vlgate.evaluators.definition import DefinitionError

    try:
        return registry.check_definitions()
    except DefinitionError as error:
        raise ConfigError(str(error)) from None


def preflight(home: Path, config: ServiceConfig, *, webhook: bool) -> None:
    """What the service will need, checked before it starts anything (one line, exit 2,
    when not): the tracking server answering; with MLflow's authentication on, its account
    able to do what the service does (``vlgate/tracking/permissions.py``: read the configured
    models, set their tags and champion alias, write runs); the Prefect API taking its
    credentials; and the webhook port free to bind."""
    from vlgate.tracking import permissions

    uri = tracking.tracking_uri(home)
    try:
        tracking.require_reachable(uri)
    except tracking.TrackingUnreachable as error:
        raise ConfigError(str(error)) from None
    try:
        permissions.check_service_account(config.models, config.default is not None, uri)
    except permissions.AuthError as error:
        raise ConfigError(str(error)) from None
    prefect_refusal = prefect_auth_problem()
    if prefect_refusal:
        raise ConfigError(prefect_refusal)
    if webhook and config.webhook.secret():
        host, port = config.webhook.host, config.webhook.port
        try:
            with socket.create_server((host, port)):  # bound and closed: uvicorn binds it again at once
                pass
        except OSError as error:
            raise ConfigError(f"webhook {host}:{port}: cannot listen there ({error.strerror or error}); free the port or set webhook: port in vlgate.yaml") from None


def prefect_auth_problem() -> str | None:
    """Why the Prefect API at ``PREFECT_API_URL`` refuses this process's credentials
    (``PREFECT_API_AUTH_STRING``, what its server's ``PREFECT_SERVER_API_AUTH_STRING`` must
    equal), or None (accepted, no server named, or none answering: the flows report that)."""
    import base64

    import httpx

    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return None
    auth_string = os.environ.get("PREFECT_API_AUTH_STRING")
    headers = {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()} if auth_string else {}
    try:
        answer = httpx.get(f"{url.rstrip('/')}/admin/version", headers=headers, timeout=5)
    except httpx.HTTPError:
        return None
    if answer.status_code != 401:
        return None
    if not auth_string:
        return f"the Prefect API {url} requires authentication: set PREFECT_API_AUTH_STRING (vlgate stack: source FOLDER/env)"
    return f"the Prefect API {url} refused PREFECT_API_AUTH_STRING (401): it must equal the server's PREFECT_SERVER_API_AUTH_STRING"


def warn_underpowered_rules(context: ServiceContext) -> None:
    """Each configured model's power plan (``vlgate plan``), its warnings logged before
    anything is served: a rule the suite is too small to decide is named now, not after
    the GPU time is spent. A warning, not a refusal (the policy may mean it), and a plan
    that cannot be made (data not there yet) says so and stops nothing."""
    from vlgate.cli.power_plan import configured_power_plan

    for name, model in context.config.models.items():
        try:
            plan = configured_power_plan(context.tracking, name, model)
        except Exception as error:  # the plan is advice; validations report their own problems
            log.warning("model %r: no power plan (%s: %s)", name, type(error).__name__, error)
            continue
        for warning in plan.warnings:
            log.warning("model %r: %s (vlgate plan %s)", name, warning, name)


def _serve(context: ServiceContext, drift_configs: dict[str, DriftConfig], *, webhook: bool, once: bool) -> int:
    # the poller, webhook and flow threads import Prefect, MLflow's stores and the flows
    # lazily; importing them here first keeps those threads from importing the same
    # packages at the same moment as this one (a first poll was seen to hang doing so)
    import prefect  # noqa: F401
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore  # noqa: F401

    from vlgate.flows import drift as _drift  # noqa: F401
    from vlgate.flows.notifying import deliver_now
    from vlgate.flows.validation import validate_model_version
    from vlgate.registry_hooks.dispatch import Dispatcher, Poller, poll_once
    from vlgate.registry_hooks.seams import deliver_forever

    # in the Prefect server's context: the plan reads MLflow through modules that import
    # Prefect, whose settings must be the started server's
    warn_underpowered_rules(context)

    home, config, claims = context.home, context.config, context.claims
    deployment = os.environ.get("VLGATE_VALIDATE_DEPLOYMENT")
    workers = config.workers or max(1, len(config.models))
    dispatcher = Dispatcher(
        claims,
        workers=workers,
        deployment=deployment,
        start=None if deployment else validate_model_version,
        configured=lambda name: config.for_model(name) is not None,
        max_crashes=config.max_crashes,
        give_up=lambda subject, reason: gave_up(context, subject, reason),
    )
    client = context.tracking
    channels = config.all_channels()
    if once:
        claimed = poll_once(client, dispatcher)
        dispatcher.recover()
        dispatcher.wait()
        log.info("validated %d version(s): %s", len(claimed), claimed)
        deliver_now(home, channels)
        return 0
    stop_delivering = threading.Event()
    if channels:  # the deliverer: the outbox's notifications sent, retried with backoff
        threading.Thread(target=deliver_forever, args=(context.outbox, channels, stop_delivering), name="vlgate-notify", daemon=True).start()
    poller = Poller(home, dispatcher, config.poll_interval_s).start()
    if webhook:
        _start_webhook(client, dispatcher, config)
    try:
        if drift_configs:
            from prefect import serve as prefect_serve

            from vlgate.flows.drift import drift_check

            deployments = [
                drift_check.to_deployment(name=f"drift-{name}", cron=drift_config.cron, parameters={"model_name": name}) for name, drift_config in drift_configs.items()
            ]
            log.info("drift checks scheduled: %s", {name: c.cron for name, c in drift_configs.items()})
            prefect_serve(*deployments)  # type: ignore[arg-type]  # blocks until interrupted; sync to_deployment returns deployments
        else:
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_delivering.set()
        poller.stop()
        dispatcher.close()
    return 0


def gave_up(context: ServiceContext, subject: VersionRef, reason: str) -> None:
    """Crash recovery gave up on a version: failed closed on record, and the team told."""
    from vlgate.flows.notifying import failure_notification, tell
    from vlgate.flows.validation import record_failure
    from vlgate.registry_hooks.notifications import NotifyEvent

    record_failure(context, subject, reason)
    claim = context.claims.get(subject)
    attempts = claim.attempts if claim is not None else 0
    tell(context.home, failure_notification(subject, reason, attempts, NotifyEvent.RECOVERY_GAVE_UP), context.config.notify_channels(subject.model))


def _start_webhook(client: MlflowClient, dispatcher: Dispatcher, config: ServiceConfig) -> threading.Thread | None:
    import uvicorn

    from vlgate.registry_hooks.webhook import PATH, create_app, ensure_webhook
    from vlgate.tracking import permissions

    secret = config.webhook.secret()
    if not secret:
        log.warning("%s (vlgate.yaml webhook.secret_env) is not set: no webhook receiver (the poller still finds every version)", config.webhook.secret_env)
        return None
    app = create_app(dispatcher, secret, config.webhook.max_age_s, config.webhook.max_body_bytes)
    server = uvicorn.Server(uvicorn.Config(app, host=config.webhook.host, port=config.webhook.port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="vlgate-webhook", daemon=True)
    thread.start()
    if not tracking.embedded(client.tracking_uri):
        user = permissions.current_user(client.tracking_uri)
        if user is not None and not user.is_admin:
            # MLflow lets only admins manage webhooks, and this account is none (least privilege):
            # the admin registers it, with this secret (vlgate stack at start and restart; compose: mlflow-init)
            log.info("webhook: the MLflow account %r is no admin; an admin registers MLflow's webhook (vlgate stack, mlflow-init)", user.username)
            return thread
        url = os.environ.get("VLGATE_WEBHOOK_URL", f"http://{config.webhook.host}:{config.webhook.port}{PATH}")
        log.info("webhook %s registered with %s", ensure_webhook(client, url, secret), client.tracking_uri)
    else:
        log.info("embedded MLflow store: it sends no webhooks; the poller finds new versions")
    return thread
