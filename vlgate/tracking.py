"""MLflow: where vlgate reads registered versions and writes validation runs, tags and the
``champion`` alias.

Layout (what MLflow's compare view shows): one experiment per registered model,
``vlgate/MODEL``, one validation run per version (``MODEL v3``), metrics
``EVALUATOR/METRIC``, tags ``vlgate.model`` / ``vlgate.version`` / ``vlgate.decision``.
MLflow refuses ``@`` in metric names, so ``gc@3`` is logged as ``gc_at_3``
(``mlflow_metric_name``); nothing else is renamed.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlgate import tag_keys
from vlgate.home import vlgate_home

CHAMPION = "champion"
EXPERIMENT_PREFIX = "vlgate/"


#: Every URI :func:`connect` itself exported: ``mlflow.set_tracking_uri`` also sets
#: ``MLFLOW_TRACKING_URI`` (for subprocesses, e.g. Dask workers, to inherit), and none of
#: those values may stand in for a user's setting when this process connects to another
#: home — not the last one only: code that saved and restored the variable around a
#: connection (a test's monkeypatch) puts back an older one.
_exported_uris: set[str] = set()


def tracking_uri(home: Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` (as the user or a parent process set it) or the embedded
    default: SQLite under ``$VLGATE_HOME/mlflow``."""
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured and configured not in _exported_uris:
        return configured
    folder = (home or vlgate_home()).resolve() / "mlflow"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder}/mlflow.db"


def embedded(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def transient(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from or during) is a server that did not
    answer: a refused or dropped connection, a timeout, or 5xx answers until the client's
    retries ran out. MLflow's REST client wraps these in an ``MlflowException`` whose
    context holds the original. Such a fault is retried later, never made a verdict."""
    import requests

    # not the builtin TimeoutError: Prefect's task and flow time limits raise subclasses of
    # it, and a task that ran out of time would be run again forever
    kinds: tuple[type[BaseException], ...] = (ConnectionError, requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.RetryError)
    try:
        import httpx

        kinds += (httpx.TransportError,)
    except ImportError:  # pragma: no cover - httpx is a dependency
        pass
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class TrackingUnreachable(ConnectionError):
    """The tracking server did not answer at all (refused, timed out, unknown host)."""


def require_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Raise :class:`TrackingUnreachable` naming ``uri`` when an HTTP tracking server does not
    answer within ``timeout_s``. Operator commands check this first: MLflow's own client
    retries a refused connection with backoff for minutes before it gives up. Any HTTP
    answer counts as reachable (a proxy's 401 included); other schemes are not checked."""
    if not uri.startswith(("http://", "https://")):
        return
    import httpx

    try:
        httpx.get(f"{uri.rstrip('/')}/health", timeout=timeout_s)
    except httpx.TransportError as error:
        raise TrackingUnreachable(f"MLflow tracking server {uri} is unreachable ({type(error).__name__}: {error}); is it running, and is MLFLOW_TRACKING_URI right?") from None


def connect(home: Path | None = None):
    """An ``MlflowClient`` on the configured tracking/registry store (also made the
    process default, so ``mlflow.artifacts`` and ``models:/`` URIs resolve against it)."""
    import mlflow
    from mlflow import MlflowClient

    uri = tracking_uri(home)
    users = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if not users or users in _exported_uris:
        _exported_uris.add(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _pages(search: Any) -> Iterator[Any]:
    """Every item of a paged MLflow search (``search(page_token)`` → a PagedList)."""
    token = None
    while True:
        page = search(token)
        yield from page
        token = page.token
        if not token:
            return


#: runs per page of ``search_all_runs`` (MLflow's own maximum is 50,000)
RUNS_PAGE = 1000


def search_all_runs(client, experiment_ids: list[str], filter_string: str, page_size: int | None = None) -> list[Any]:
    """Every run the filter matches, page after page: a model's scheduled drift checks
    outgrow any one page (hourly: 8,760 a year), and one page silently keeps the newest."""
    size = page_size or RUNS_PAGE
    return list(_pages(lambda token: client.search_runs(experiment_ids, filter_string=filter_string, max_results=size, page_token=token)))


def wait_for_version(client, model_name: str, version: str, timeout_s: float = 120.0, first_wait_s: float = 1.0) -> Any:
    """The registered version, waited for: a webhook can arrive before the registry
    answers for the version it announces, and a tracking server can be away for a
    moment. Retries with doubling waits until ``timeout_s``, then raises the last error
    (the caller records it; a transient fault never becomes a verdict before that)."""
    import time

    from mlflow.exceptions import MlflowException

    deadline, wait = time.monotonic() + timeout_s, first_wait_s
    while True:
        try:
            return client.get_model_version(model_name, str(version))
        except MlflowException:
            if time.monotonic() + wait > deadline:
                raise
        time.sleep(wait)
        wait *= 2


def registered_models(client) -> list[Any]:
    """Every registered model, all pages of them."""
    return list(_pages(lambda token: client.search_registered_models(max_results=1000, page_token=token)))


def version_number(version: Any) -> float:
    """A registry version as a number for ordering (``"10"`` after ``"3"``); anything else last."""
    try:
        return float(version)
    except (TypeError, ValueError):
        return float("inf")


def model_versions(client, model_name: str) -> list[Any]:
    """Every version of ``model_name``, oldest first. MLflow's filter strings have no escape
    character, so a name is quoted with the quote it does not contain; a name holding both
    kinds is matched here over every version instead (a name must never change, or break,
    the query it is put into)."""
    if "'" not in model_name:
        query: str | None = f"name='{model_name}'"
    elif '"' not in model_name:
        query = f'name="{model_name}"'
    else:
        query = None
    found = _pages(lambda token: client.search_model_versions(query, max_results=10000, page_token=token))
    return sorted((version for version in found if version.name == model_name), key=lambda version: int(version.version))


def experiment_id(client, name: str, home: Path | None = None) -> str:
    """The experiment's id, created on first use (opening on its runs in MLflow's UI: MLflow
    3 opens an experiment on its GenAI overview unless tagged as model development); on
    the embedded store its artifacts go under ``$VLGATE_HOME/mlflow/artifacts`` (not the
    working directory)."""
    from mlflow.exceptions import MlflowException

    existing = client.get_experiment_by_name(name)
    if existing is not None:
        if tag_keys.EXPERIMENT_KIND not in existing.tags:  # made by an older vlgate
            client.set_experiment_tag(existing.experiment_id, tag_keys.EXPERIMENT_KIND, tag_keys.EXPERIMENT_KIND_VALUE)
        return existing.experiment_id
    location = None
    if embedded(client.tracking_uri):
        location = ((home or vlgate_home()).resolve() / "mlflow" / "artifacts" / hashlib.sha1(name.encode()).hexdigest()[:12]).as_uri()
    try:
        return client.create_experiment(name, artifact_location=location, tags={tag_keys.EXPERIMENT_KIND: tag_keys.EXPERIMENT_KIND_VALUE})
    except MlflowException:  # created meanwhile by another process
        return client.get_experiment_by_name(name).experiment_id


def validation_experiment(model_name: str) -> str:
    return f"{EXPERIMENT_PREFIX}{model_name}"


_INVALID = re.compile(r"[^/\w.\- :]")


def mlflow_metric_name(name: str) -> str:
    """``genception/gc@3`` → ``genception/gc_at_3``; MLflow accepts only ``[/\\w.\\- :]``."""
    return _INVALID.sub("_", name.replace("@", "_at_"))


#: the line vlgate adds to a registered version's description (flows/recording.py)
VALIDATION_LINK = "vlgate validation run: "


def registered_description(description: str | None) -> str:
    """A version's description as its registration wrote it, without vlgate's link line."""
    return "\n".join(line for line in (description or "").splitlines() if not line.startswith(VALIDATION_LINK)).strip()


def split_breakdowns(metrics: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A metrics dict as its set-level metrics and its breakdowns (``by_<field>``: group →
    metrics): the first are MLflow metrics, the second MLflow tables (a run with every
    breakdown flattened carries hundreds of metrics)."""
    top = {key: value for key, value in metrics.items() if not (key.startswith("by_") and isinstance(value, dict))}
    return top, {key: value for key, value in metrics.items() if key not in top}


def breakdown_frame(field: str, groups: dict[str, Any]) -> Any:
    """One breakdown as a table: a row per group (the field's value first), a column per metric."""
    import pandas as pd

    def cell(value: Any) -> Any:  # numbers (None where undefined); anything else is not a metric
        return value if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)) else None

    return pd.DataFrame([{field: str(group), **{key: cell(value) for key, value in values.items()}} for group, values in groups.items() if isinstance(values, dict)])


def flatten_metrics(metrics: dict[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    """Every finite number in a metrics dict, nested keys joined by ``/``."""
    for key, value in metrics.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict):
            yield from flatten_metrics(value, name)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf"):
            yield mlflow_metric_name(name), float(value)


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be registered as it is (bad input: exit 2)."""


def links_leaving(folder: Path) -> list[tuple[Path, Path]]:
    """Every symbolic link under ``folder`` (as ``os.walk`` meets them, which is how MLflow
    uploads a folder) whose target lies outside it, or does not exist: (link, target)."""
    root = Path(folder).resolve()
    leaving = []
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent) / name
            if path.is_symlink():
                target = path.resolve()
                if not target.exists() or not target.is_relative_to(root):
                    leaving.append((path, target))
    return leaving


def model_name_problem(name: str) -> str | None:
    """Why MLflow's registry refuses ``name`` as a registered model's name, or None: its rule
    (``mlflow.utils.validation._validate_model_name``) is not blank, no ``/`` or ``:``, and
    not ``.`` or ``..``. Checked before anything is uploaded; the registry says so only after."""
    if not name.strip():
        return "a registered model's name cannot be blank"
    if "/" in name or ":" in name:
        return "a registered model's name cannot contain '/' or ':' (MLflow's rule)"
    if name in (".", ".."):
        return "a registered model's name cannot be '.' or '..'"
    return None


def check_uploadable(folder: Path) -> None:
    """CheckpointError unless every file MLflow would upload from ``folder`` lies inside it."""
    leaving = links_leaving(folder)
    if leaving:
        link, target = leaving[0]
        more = f" (and {len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise CheckpointError(
            f"{folder}: {link.relative_to(folder)} links to {target}, outside the checkpoint{more}; nothing was uploaded. "
            "Register a copy with its links resolved (cp -rL), or download with --local-dir"
        )


def register_checkpoint(client, model_name: str, folder: Path, description: str = "", tags: dict[str, str] | None = None, home: Path | None = None):
    """Log a checkpoint folder to a run and register it as a new version of ``model_name``
    (a tracking server refuses a version whose source is a bare local path, so the
    checkpoint goes into the run's artifacts first). Idempotent per checkpoint content:
    the same weights registered twice give the existing version back.

    A folder with a link out of it is refused before anything is uploaded: MLflow copies a
    linked file's content, so ``secrets -> ~/.ssh/id_ed25519`` would land in the artifact
    store for everyone who can read the model. Links inside the folder are fine."""
    from mlflow.exceptions import MlflowException

    from vlgate.evaluators.backends.loading import model_digest

    problem = model_name_problem(model_name)
    if problem:
        raise CheckpointError(f"model name {model_name!r}: {problem}; nothing was uploaded")
    check_uploadable(folder)
    digest = model_digest(folder)
    try:
        client.create_registered_model(model_name)
    except MlflowException:
        pass  # exists
    for version in model_versions(client, model_name):
        if version.tags.get(tag_keys.CHECKPOINT_DIGEST) == digest:
            return version
    experiment = experiment_id(client, f"{model_name} (registrations)", home)
    run = client.get_run(create_run_once(client, experiment, Path(folder).name, {tag_keys.KIND: tag_keys.RunKind.REGISTRATION, tag_keys.CHECKPOINT_DIGEST: digest}))
    client.log_artifacts(run.info.run_id, str(folder), artifact_path="checkpoint")
    client.set_terminated(run.info.run_id)
    source = f"{run.info.artifact_uri}/checkpoint"
    return client.create_model_version(model_name, source, run_id=run.info.run_id, description=description, tags={tag_keys.CHECKPOINT_DIGEST: digest, **(tags or {})})


def create_run_once(client, experiment: str, run_name: str, tags: dict[str, str], token: str | None = None) -> str:
    """``client.create_run`` that leaves one run. ``create_run`` is not idempotent: when the
    tracking server commits a run and dies before answering, MLflow's client retries the
    POST and a second run appears. The run carries ``token`` (one per logical run; a fresh
    one by default), and the earliest run with it is the one returned; later twins are deleted."""
    token = token or uuid.uuid4().hex
    created = client.create_run(experiment, run_name=run_name, tags={**tags, "mlflow.runName": run_name, tag_keys.RUN_TOKEN: token}).info.run_id
    return first_run_with_token(client, experiment, token) or created


def first_run_with_token(client, experiment: str, token: str) -> str | None:
    """The earliest active run made under ``token``, deleting any later twin; None if none."""
    runs = client.search_runs([experiment], f"tags.`{tag_keys.RUN_TOKEN}` = '{token}'", max_results=50)
    if not runs:
        return None
    first, *twins = sorted(runs, key=lambda run: (run.info.start_time, run.info.run_id))
    for twin in twins:
        client.delete_run(twin.info.run_id)
    return first.info.run_id


def champion_version(client, model_name: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(model_name, CHAMPION).version)  # an int from some stores
    except MlflowException:
        return None


def logged_metric_name(name: str) -> str:
    """Back from MLflow's name to vlgate's (docs/metrics.md): ``genception/gc_at_3`` → ``genception/gc@3``."""
    return name.replace("_at_", "@")


def validation_runs(client, model_name: str, include_run: str | None = None) -> dict[str, Any]:
    """Version → its latest finished validation run (and ``include_run`` even while it is
    still running: the flow correlates the version it is validating)."""
    experiment = client.get_experiment_by_name(validation_experiment(model_name))
    if experiment is None:
        return {}
    runs = search_all_runs(client, [experiment.experiment_id], tag_keys.runs_of_kind(tag_keys.RunKind.VALIDATION))
    latest = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):
        if run.info.status == "FINISHED" or run.info.run_id == include_run:
            latest[run.data.tags.get(tag_keys.VERSION)] = run
    return dict(sorted(latest.items(), key=lambda item: int(item[0]) if str(item[0]).isdigit() else 0))


def reasons_tag(reasons: list[str]) -> str:
    """One reason per line (a reason may itself contain "; ")."""
    text = "\n".join(reasons)
    return text if len(text) <= tag_keys.MAX_VALUE_CHARS else text[: tag_keys.MAX_VALUE_CHARS - 40] + " … (all reasons: decision.json)"
