"""Experiments and runs: created once however the tracking server fails, and a model's
validation runs by version."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate import tag_keys
from vlgate.home import vlgate_home
from vlgate.tracking.naming import validation_experiment
from vlgate.tracking.paging import search_all_runs
from vlgate.tracking.server import embedded

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import Run


logger = logging.getLogger(__name__)

def experiment_id(client: MlflowClient, name: str, home: Path | None = None) -> str:
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
        experiment = client.get_experiment_by_name(name)
        if experiment is None:  # not created meanwhile: the refusal was something else
            raise
        return experiment.experiment_id


def create_run_once(client: MlflowClient, experiment: str, run_name: str, tags: dict[str, str], token: str | None = None) -> str:
    """``client.create_run`` that leaves one run. ``create_run`` is not idempotent: when the
    tracking server commits a run and dies before answering, MLflow's client retries the
    POST and a second run appears. The run carries ``token`` (one per logical run; a fresh
    one by default), and the earliest run with it is the one returned; later twins are deleted."""
    token = token or uuid.uuid4().hex
    created = client.create_run(experiment, run_name=run_name, tags={**tags, "mlflow.runName": run_name, tag_keys.RUN_TOKEN: token}).info.run_id
    return first_run_with_token(client, experiment, token) or created


def first_run_with_token(client: MlflowClient, experiment: str, token: str) -> str | None:
    """The earliest active run made under ``token``, deleting any later twin; None if none."""
    runs = client.search_runs([experiment], f"tags.`{tag_keys.RUN_TOKEN}` = '{token}'", max_results=50)
    if not runs:
        return None
    first, *twins = sorted(runs, key=lambda run: (run.info.start_time, run.info.run_id))
    for twin in twins:
        client.delete_run(twin.info.run_id)
    return first.info.run_id


def validation_runs(client: MlflowClient, model_name: str, include_run: str | None = None) -> dict[str, Run]:
    """Version → its latest finished validation run (and ``include_run`` even while it is
    still running: the flow correlates the version it is validating)."""
    experiment = client.get_experiment_by_name(validation_experiment(model_name))
    if experiment is None:
        return {}
    runs = search_all_runs(client, [experiment.experiment_id], tag_keys.runs_of_kind(tag_keys.RunKind.VALIDATION))
    latest: dict[str, Run] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time):
        version = run.data.tags.get(tag_keys.VERSION)
        if version is not None and (run.info.status == "FINISHED" or run.info.run_id == include_run):
            latest[version] = run
    return dict(sorted(latest.items(), key=lambda item: int(item[0]) if str(item[0]).isdigit() else 0))


def log_tables(client: MlflowClient, run_id: str, tables: Mapping[str, pd.DataFrame]) -> None:
    """Each frame as the MLflow table at its artifact path (``tables/x.json``), replacing one
    already there, in one upload: the file ``MlflowClient.log_table`` writes (pandas' split
    JSON, what ``load_table`` and the UI's artifact view read) and its entry in the run's
    ``mlflow.loggedArtifacts`` tag, set once. ``log_table`` itself appends a table to one
    of the same path (a look, a resumed run, logging it again would double its rows), and
    lists the run's artifacts and reads the run back for every table."""
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    if not tables:
        return
    with tempfile.TemporaryDirectory() as scratch:
        for artifact_file, frame in tables.items():
            path = Path(scratch) / artifact_file
            path.parent.mkdir(parents=True, exist_ok=True)
            # as log_table writes a .json table, but at pandas' full precision (its default keeps 10 decimals)
            frame.to_json(path, orient="split", index=False, date_format="iso", double_precision=15)
        client.log_artifacts(run_id, scratch)
    logged = json.loads(client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
    missing = [entry for entry in ({"path": artifact_file, "type": "table"} for artifact_file in tables) if entry not in logged]
    if missing:
        client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps(logged + missing))


def define_run_tasks(client: MlflowClient, run_id: str, evaluators: Iterable[str] | None = None) -> None:
    """The lmms-eval evaluators among ``evaluators`` (a run's evaluator folders; None: every
    one the run's suite names) that this process has not defined, defined from the suite the
    run logged (``config/``, under the name its ``vlgate.suite_path`` tag gives), so that a reader of the run reads their records as
    the flow wrote them, and a policy read beside it may name their metrics. A task that can
    no longer be built here (its folder gone) is logged and left out."""
    from vlgate.evaluators import registry
    from vlgate.evaluators.running.suite import define_logged_tasks

    if evaluators is not None and all(name in registry.names() for name in evaluators):
        return
    suite_path = client.get_run(run_id).data.tags.get(tag_keys.SUITE_PATH)
    if not suite_path:  # a run that logged no suite: nothing to define from
        return
    with tempfile.TemporaryDirectory() as scratch:
        try:
            suite = Path(client.download_artifacts(run_id, f"config/{Path(suite_path).name}", scratch)).read_text(encoding="utf-8")
        except Exception:  # its suite's artifact missing: nothing to define from
            return
    try:
        define_logged_tasks(suite, Path(suite_path).parent)  # a task folder named relative to the suite's, as the flow read it
    except ValueError as error:
        logger.warning("run %s: its suite's lmms-eval tasks cannot be built here: %s", run_id, error)
