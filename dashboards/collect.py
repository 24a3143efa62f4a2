"""What a report shows, read back from MLflow alone (``MlflowClient``): the registry's
versions with their decision tags and ``champion`` alias, each version's validation run
(metrics, params, tags) and its artifacts (the decision records, correlations.json, the Great
Expectations results, every evaluator's records and metrics), and the drift runs.

So a report can be regenerated anywhere the tracking server is reachable, long after the
flow that produced the run has gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from pydantic import JsonValue

from vlgate import tag_keys, tracking
from vlgate.decisions import DecisionRecord, SequentialRecord
from vlgate.evaluators import registry
from vlgate.evaluators.item_diff import EvaluatorDiff, compare_outputs
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.power_plan import PowerPlan
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient


@dataclass
class ValidationReportData:
    model: str
    version: str
    run_id: str | None
    decision: str | None
    reasons: list[str]
    champion: str | None
    source: str | None
    description: str
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    run_status: str | None = None
    #: the validation run's experiment (its page in MLflow's UI is under it)
    experiment_id: str | None = None
    #: whether vlgate's fast paths are exact on these weights (the run's stamp; None: not checked)
    model_check: str | None = None
    started: datetime | None = None
    #: the gate's latest decision record (None: the version was not judged)
    gate: DecisionRecord | None = None
    #: every decision record of the run, the first first (the latest is ``gate``)
    history: list[DecisionRecord] = field(default_factory=list)
    #: a sequential policy's looks and the items they saved (None: judged once on every item)
    sequential: SequentialRecord | None = None
    #: what each rule of the policy can decide on the suite (``power.json``; None: not logged)
    power: PowerPlan | None = None
    #: ``correlations.json``: each pair of metrics → its coefficients and ``n``
    correlations: dict[str, dict[str, JsonValue]] = field(default_factory=dict)
    #: the versions' metrics the correlations were computed from (None: a run older than that file)
    correlation_versions: pd.DataFrame | None = None
    expectations: dict[str, dict[str, JsonValue]] = field(default_factory=dict)
    #: each evaluator's output as logged (records parsed once, in the downloaded folder)
    evaluators: dict[str, EvaluatorOutput] = field(default_factory=dict)
    #: the champion the gate judged this version against (the latest record's champion_before)
    judged_against: str | None = None
    #: the champion's outputs, as its validation run logged them
    champion_evaluators: dict[str, EvaluatorOutput] = field(default_factory=dict)
    #: each evaluator compared item by item with the champion's (what ``vlgate diff`` shows)
    item_diffs: dict[str, EvaluatorDiff] = field(default_factory=dict)
    #: the evaluators not compared with the champion's, and why
    not_compared: dict[str, str] = field(default_factory=dict)


def _read_json(path: Path) -> JsonValue:
    value: JsonValue = json.loads(path.read_text()) if path.is_file() else None
    return value


def _json_object(value: JsonValue) -> dict[str, JsonValue]:
    """A JSON file's object; {} for a file that is not there (None) or empty."""
    if not value:
        return {}
    assert isinstance(value, dict), f"expected a JSON object, got {type(value).__name__}"
    return value


def _json_text(value: JsonValue) -> str | None:
    assert value is None or isinstance(value, str), f"expected a JSON string, got {type(value).__name__}"
    return value


def _json_number(value: JsonValue) -> float | None:
    assert value is None or isinstance(value, (int, float)), f"expected a JSON number, got {type(value).__name__}"
    return value


def _download(client: MlflowClient, run_id: str, path: str, into: Path) -> Path | None:
    from mlflow.exceptions import MlflowException

    try:
        return Path(client.download_artifacts(run_id, path, str(into)))
    except (MlflowException, OSError):  # not logged (an evaluator that failed, an older run)
        return None


def load_validation(client: MlflowClient, subject: VersionRef, scratch: Path, runs: dict[str, dict[str, EvaluatorOutput]] | None = None) -> ValidationReportData:
    """Everything the report of one version needs; artifacts are downloaded into ``scratch``.
    ``runs`` keeps the evaluators' outputs of the runs read so far, by run id, so that the
    champion's run is downloaded once for all the versions judged against it."""
    model_name = subject.model
    model_version = client.get_model_version(model_name, subject.version)
    tags = model_version.tags
    reasons = tags.get(tag_keys.REASONS)
    data = ValidationReportData(
        model=model_name,
        version=subject.version,
        run_id=tags.get(tag_keys.VALIDATION_RUN),
        decision=tags.get(tag_keys.DECISION),
        reasons=reasons.split("\n") if reasons else [],
        champion=tracking.champion_version(client, model_name),
        source=model_version.source,
        description=tracking.registered_description(model_version.description),
    )
    if not data.run_id:
        return data
    run = client.get_run(data.run_id)
    data.metrics = {tracking.logged_metric_name(k): v for k, v in run.data.metrics.items()}
    data.params = dict(run.data.params)
    data.run_status = run.info.status
    data.experiment_id = run.info.experiment_id
    data.model_check = run.data.tags.get(tag_keys.MODEL_CHECK)
    data.started = datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc)
    scratch.mkdir(parents=True, exist_ok=True)
    data.history = tracking.decision_history(client, data.run_id)
    data.gate = data.history[-1] if data.history else None
    local = _download(client, data.run_id, "sequential.json", scratch)
    data.sequential = SequentialRecord.read(local) if local else None
    local = _download(client, data.run_id, "power.json", scratch)
    data.power = PowerPlan.model_validate(_read_json(local)) if local else None
    local = _download(client, data.run_id, "correlations.json", scratch)
    data.correlations = {pair: _json_object(values) for pair, values in _json_object(_read_json(local) if local else None).items()}
    local = _download(client, data.run_id, "correlation_versions.json", scratch)
    rows = _read_json(local) if local else None
    if rows is not None:
        data.correlation_versions = pd.DataFrame.from_dict(rows, orient="index", dtype=float)
        data.correlation_versions.index.name = "version"
    if data.gate is not None and len("\n".join(data.gate.reasons)) > len("\n".join(data.reasons)):
        data.reasons = list(data.gate.reasons)  # the tag may be truncated; the record has them all
    expectations = _download(client, data.run_id, "expectations", scratch)
    if expectations is not None:
        data.expectations = {p.stem: json.loads(p.read_text()) for p in sorted(expectations.glob("*.json"))}
    runs = {} if runs is None else runs
    data.evaluators = runs[data.run_id] = run_evaluators(client, data.run_id, scratch)
    _compare_with_champion(client, data, scratch, runs)
    return data


def run_evaluators(client: MlflowClient, run_id: str, scratch: Path) -> dict[str, EvaluatorOutput]:
    """Each evaluator's output a validation run logged, in registry order, downloaded into ``scratch``."""
    outputs: dict[str, EvaluatorOutput] = {}
    evaluators = _download(client, run_id, "evaluators", scratch)
    if evaluators is not None:
        tracking.define_run_tasks(client, run_id, [p.name for p in evaluators.iterdir() if p.is_dir()])
        order = {name: n for n, name in enumerate(registry.names())}
        for folder in sorted((p for p in evaluators.iterdir() if p.is_dir()), key=lambda p: (order.get(p.name, len(order)), p.name)):
            run_info = _json_object(_read_json(folder / "run.json"))
            output = EvaluatorOutput.from_folder(folder.name, folder, error=_json_text(run_info.get("error")))
            output.metrics = output.metrics or {}
            outputs[folder.name] = output
    return outputs


def _compare_with_champion(client: MlflowClient, data: ValidationReportData, scratch: Path, runs: dict[str, dict[str, EvaluatorOutput]]) -> None:
    """The item-level comparison with the champion the gate judged against, where it had one."""
    from mlflow.exceptions import MlflowException

    champion = data.gate.champion_before if data.gate is not None else None
    if not champion or str(champion) == data.version:
        return
    data.judged_against = str(champion)
    try:
        run_id = client.get_model_version(data.model, data.judged_against).tags.get(tag_keys.VALIDATION_RUN)
    except MlflowException:  # the champion's version was deleted since
        run_id = None
    if not run_id:
        data.not_compared = {name: f"v{champion}'s validation run is not in the registry" for name in data.evaluators}
        return
    if run_id not in runs:
        runs[run_id] = run_evaluators(client, run_id, scratch / f"champion-{run_id}")
    data.champion_evaluators = runs[run_id]
    data.item_diffs, data.not_compared = compare_outputs(data.evaluators, data.champion_evaluators)


def artifact_path(folder: Path | None, evaluator: str, recorded: str | None, data_roots: tuple[Path, ...] = ()) -> Path | None:
    """A file a record names by the path it had on the worker (``…/EVALUATOR/x/y.png``),
    found in the downloaded evaluator folder; or the recorded path itself where it still
    exists inside one of ``data_roots`` (data files such as seed images are not artifacts).
    Nothing else is opened: a record is data from a worker, and a report that followed any
    path it names would put that file (``/home/…/.ssh``, another team's images) on a page
    logged for everyone who can read the run."""
    if not recorded:
        return None
    parts = Path(recorded).parts
    if folder is not None and evaluator in parts:
        inside = folder.joinpath(*parts[len(parts) - parts[::-1].index(evaluator) :])
        if inside.is_file() and inside.resolve().is_relative_to(folder.resolve()):
            return inside
    path = Path(recorded)
    if path.is_absolute() and path.is_file() and any(path.resolve().is_relative_to(root.resolve()) for root in data_roots):
        return path
    return None


def leaderboard(client: MlflowClient, model_name: str) -> pd.DataFrame:
    """One row per registered version, from the registry and the runs alone: decision,
    champion mark, the validation run, and every logged metric (named as in docs/metrics.md)."""
    champion = tracking.champion_version(client, model_name)
    rows = []
    for version in tracking.model_versions(client, model_name):
        run_id = version.tags.get(tag_keys.VALIDATION_RUN)
        row: dict[str, object] = {
            "version": str(version.version),
            "decision": version.tags.get(tag_keys.DECISION, "pending"),
            "reasons": version.tags.get(tag_keys.REASONS, ""),
            "champion": str(version.version) == champion,
            "run_id": run_id,
            "registered": datetime.fromtimestamp(version.creation_timestamp / 1000, tz=timezone.utc),
        }
        if run_id:
            row |= {tracking.logged_metric_name(k): v for k, v in client.get_run(run_id).data.metrics.items()}
        rows.append(row)
    return pd.DataFrame(rows).set_index("version") if rows else pd.DataFrame(columns=["decision", "reasons", "champion", "run_id"])


DRIFT_COLUMNS = ["time", "version", "metric", "value", "drifted", "run_id", "batch"]


def drift_history(client: MlflowClient, model_name: str, scratch: Path) -> pd.DataFrame:
    """Every drift check of the model: time, version, metric, the new batch's mean and
    whether that metric drifted (from the run's drift.json)."""
    experiment = client.get_experiment_by_name(tracking.validation_experiment(model_name))
    if experiment is None:
        return pd.DataFrame(columns=DRIFT_COLUMNS)
    rows = []
    for run in tracking.search_all_runs(client, [experiment.experiment_id], tag_keys.runs_of_kind(tag_keys.RunKind.DRIFT)):
        for metric, value, drifted in _drift_checks(client, run, scratch):
            rows.append(
                {
                    "time": datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc),
                    "version": run.data.tags.get(tag_keys.VERSION),
                    "metric": metric,
                    "value": value,
                    "drifted": drifted,
                    "run_id": run.info.run_id,
                    "batch": run.data.tags.get(tag_keys.BATCH),
                }
            )
    return pd.DataFrame(rows, columns=DRIFT_COLUMNS).sort_values("time", kind="stable")


def _drift_checks(client: MlflowClient, run: Run, scratch: Path) -> list[tuple[str, float | None, bool]]:
    """(metric, mean of the checked batch, drifted) of each check of a drift run: from its
    ``TAG_DRIFT_CHECKS`` tag, else (older or oversized runs) from its drift.json."""
    brief = run.data.tags.get(tag_keys.DRIFT_CHECKS)
    if brief is not None:
        try:
            return [(str(metric), None if value is None else float(value), bool(drifted)) for metric, value, drifted in json.loads(brief)]
        except (ValueError, TypeError):  # not vlgate's writing: the artifact says the same
            pass
    local = _download(client, run.info.run_id, "drift.json", scratch / run.info.run_id)
    checks = _json_object(_read_json(local)).get("checks", []) if local else []
    assert isinstance(checks, list), f"expected a JSON array of checks, got {type(checks).__name__}"
    return [(str(check["metric"]), _json_number(check.get("mean_current")), bool(check.get("drifted"))) for check in map(_json_object, checks)]
