"""The scheduled drift check (ARCHITECTURE.md, what the service promises).

    drift_check(model):
        score the champion on its reference batch (once; records are cached) and on the new batch
        compare each label-free per-sample score: two-sample KS test (Holm across the scores) + mean-drop threshold
        log a drift run to the model's experiment (tag vlgate.drift=true|false)
        on drift, emit the Prefect event ``vlgate.drift.detected``

The batches are drift suites (label-free evaluators on unlabelled data: VL-LCM on
randomly paired NaturalBench-format units, GenCeption, DeCC). ``models.NAME.drift`` in
``vlgate.yaml`` names the reference suite and the suite of the new batch; a data
pipeline refreshes the new batch's folder and the cron deployment (``vlgate serve``, or
``infra/prefect.yaml``) runs this flow on it. ``batch=`` scores another suite instead.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from prefect import flow, get_run_logger, task
from prefect.tasks import exponential_backoff
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from vlgate import tag_keys, tracking
from vlgate.evaluators import registry
from vlgate.evaluators.runners.cache import RecordCacheSettings  # a task parameter: resolved at run time
from vlgate.evaluators.running.suite import Suite, SuiteSummary
from vlgate.flows import notifying, progress
from vlgate.flows.context import ServiceContext
from vlgate.flows.recording import RUN_NOTE, log_suite_datasets, where_it_runs
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from vlgate.evaluators.metrics.drift import DriftResult as ScoreDrift
    from vlgate.evaluators.output import SummaryJson


@task(name="score-batch", retries=2, retry_delay_seconds=exponential_backoff(backoff_factor=5))
def score_batch(
    model_uri: str, suite: Suite, out: str, cache_dir: str, shown_as: str = "", part: str = "", record_cache: RecordCacheSettings | None = None
) -> SuiteSummary:
    """The champion's records on one batch (resumable: fingerprinted records are reused,
    from the batch's folder or from the shared record cache, so that the reference batch
    is scored once for the same weights, whichever champion version or worker checks);
    its items are published as ``part``
    of ``shown_as`` (``flows/progress.py``). ``record_cache``: the cache's settings
    (default: ``vlgate.yaml``'s ``record_cache``)."""
    from vlgate.evaluators.running.suite import RunOptions, run_suite
    from vlgate.registry_hooks.record_cache import open_record_cache

    progress.stage(shown_as, progress.Stage.SCORING, part=part)
    items_done = progress.suite_counter(shown_as, part)
    cache = open_record_cache(record_cache or ServiceContext.current().config.record_cache.settings())
    return run_suite(model_uri, suite, Path(out), RunOptions(cache_dir=Path(cache_dir), record_cache=cache, progress=False), on_progress=items_done)


def per_sample_scores(folder: Path, evaluator: str, column: str) -> np.ndarray:
    """One per-sample column (the definition's ``drift_score``) of an evaluator's records folder."""
    from vlgate.evaluators.output import EvaluatorOutput

    samples = EvaluatorOutput.from_folder(evaluator, folder / evaluator).samples
    if samples is None:
        raise ValueError(f"drift: no valid {evaluator} records in {folder / evaluator}")
    return samples[column].to_numpy(dtype=float)


def _suite_key(suite: Suite) -> str:
    """The folder a batch's records go to: the suite's content as loaded (not its file's
    bytes: a comment changes nothing) and its data files' names and sizes; for an lmms-eval
    task, whose docs are its own and no ``data`` folder, the task's digest (its data files' content)."""
    from vlgate.evaluators.lmms.tasks import LmmsEvalSettings, load_task

    material = [suite.model_dump_json()]
    for settings in suite.evaluators.values():
        if isinstance(settings, LmmsEvalSettings):
            material.append(load_task(settings).digest)
        else:
            material.append(str(sorted((p.name, p.stat().st_size) for p in Path(settings.data).rglob("*") if p.is_file())))
    return hashlib.sha256("".join(material).encode()).hexdigest()[:12]


def drift_note(batch: str, results: Sequence[ScoreDrift]) -> str:
    """A drift run's description in MLflow's UI (markdown): the outcome, the batch, and each
    check's means."""
    drifted = [r.metric for r in results if r.drifted]
    lines = [f"**{'drifted' if drifted else 'no drift'}** on batch `{tag_keys.cut(batch)}`" + (f": {', '.join(drifted)}." if drifted else "."), ""]
    for r in results:
        means = f"{r.mean_reference:.4f} → {r.mean_current:.4f}" if r.mean_reference is not None and r.mean_current is not None else "not testable"
        lines.append(f"- {r.metric}: {means}{' (drift)' if r.drifted else ''}")
    return "\n".join(lines)


@dataclass(frozen=True)
class BatchChecked:
    """What one drift check found: the batch's suite file, each evaluator's summary on the
    batch, every score's check, and the data sets compared (context, suite: the reference
    and the batch), logged as the run's inputs."""

    batch: str
    evaluators: Mapping[str, SummaryJson]
    results: Sequence[ScoreDrift]
    suites: Sequence[tuple[str, Suite]] = ()


def log_drift_run(client: MlflowClient, champion: VersionRef, checked: BatchChecked, home: Path | None = None, where: dict[str, str] | None = None) -> str:
    """One drift run in the model's experiment, named by the version, the batch and the
    time it was checked: tags ``vlgate.kind=drift``, ``vlgate.drift=true|false``, the checks
    in brief (``TAG_DRIFT_CHECKS``) and ``where`` (the flow run and process that checked:
    ``recording.where_it_runs``), a description (:func:`drift_note`), the checked data sets
    as its inputs, the batch's metrics, each check's statistics (``drift/METRIC/...``) and
    ``drift.json`` with every check."""
    from mlflow.entities import Metric

    batch, evaluators, results = checked.batch, checked.evaluators, checked.results
    drifted = any(r.drifted for r in results)
    experiment = tracking.experiment_id(client, tracking.validation_experiment(champion.model), home)
    tags = {tag_keys.KIND: tag_keys.RunKind.DRIFT, tag_keys.MODEL: champion.model, tag_keys.VERSION: champion.version, tag_keys.DRIFT: str(drifted).lower(), tag_keys.BATCH: batch} | (where or {})
    tags[RUN_NOTE] = tag_keys.cut(drift_note(batch, results))
    checks = json.dumps([[r.metric, r.mean_current, r.drifted] for r in results], separators=(",", ":"))
    if len(checks) <= tag_keys.MAX_VALUE_CHARS:
        tags[tag_keys.DRIFT_CHECKS] = checks
    checked_at = datetime.now(timezone.utc)
    name = f"{champion} drift check: {'/'.join(Path(batch).parts[-2:])} {checked_at:%Y-%m-%d %H:%M:%S} UTC"
    run_id = tracking.create_run_once(client, experiment, name, tags)
    for context, suite in checked.suites:
        log_suite_datasets(client, run_id, suite, context)
    now = int(time.time() * 1000)
    metrics = []
    for evaluator, entry in evaluators.items():
        metrics += [Metric(k, v, now, 0) for k, v in tracking.flatten_metrics(tracking.split_breakdowns(entry.get("metrics") or {})[0], evaluator)]
    for result in results:
        for key in ("mean_reference", "mean_current", "mean_drop", "statistic", "p_value", "p_adjusted"):
            value = getattr(result, key)
            if value is not None:
                metrics.append(Metric(tracking.mlflow_metric_name(f"drift/{result.metric}/{key}"), float(value), now, 0))
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    client.log_dict(run_id, {"drifted": drifted, "checks": [r.as_dict() for r in results]}, "drift.json")
    client.set_terminated(run_id)
    return run_id


class DriftOutcome(StrEnum):
    """A drift check's outcome: no drift, drifted, or could not check (no score was
    testable: too few samples, every evaluator failed, or no champion to check)."""

    NO_DRIFT = "no drift"
    DRIFTED = "drifted"
    NOT_CHECKED = "could not check"


class DriftResult(BaseModel):
    """What the drift flow returns and ``vlgate drift --json`` prints: the champion checked,
    the outcome, its run and every score's check (``DriftResult.as_dict`` of the metric
    layer); ``error`` when it could not check at all."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str | None
    outcome: DriftOutcome
    drifted: bool = False
    run_id: str | None = None
    checks: list[dict[str, str | int | float | bool | None]] = Field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, JsonValue]:
        """The fields that were set, as JSON values."""
        return self.model_dump(mode="json", exclude_unset=True)


NO_CHAMPION = "no champion yet: nothing to check for drift"

#: The Prefect event a drift emits; an automation (a notification, a retraining
#: deployment) triggers on it.
DRIFT_EVENT = "vlgate.drift.detected"


def emit_drift_event(checked: VersionRef, run_id: str, drifted: Sequence[ScoreDrift]) -> None:
    from prefect.events import emit_event

    emit_event(
        event=DRIFT_EVENT,
        resource={"prefect.resource.id": f"vlgate.model.{checked.model}", "prefect.resource.name": checked.model},
        payload={"version": checked.version, "run_id": run_id, "metrics": [r.metric for r in drifted], "reasons": [r.reason for r in drifted]},
    )


@flow(name="vlgate-drift", log_prints=True)
def drift_check(model_name: str, batch: str | None = None) -> DriftResult:
    """Compare the champion's label-free scores on the new batch with its reference batch."""
    from vlgate.evaluators.metrics.drift import detect_drifts

    logger = get_run_logger()
    context = ServiceContext.open()
    home, service_config = context.home, context.config
    config = service_config.for_model(model_name)
    if config is None or config.drift is None:
        raise ValueError(f"registered model {model_name!r} has no drift section in {home / 'vlgate.yaml'}")
    drift = config.drift
    client = context.tracking
    champion = tracking.champion_version(client, model_name)
    if champion is None:  # a scheduled check before the first promotion: nothing failed
        logger.warning("drift: %s has no champion yet: nothing to check", model_name)
        return DriftResult(model=model_name, version=None, outcome=DriftOutcome.NOT_CHECKED, error=NO_CHAMPION, checks=[])
    checked = VersionRef(model=model_name, version=champion)
    model_uri = checked.uri
    batch_suite = Path(batch) if batch else drift.batch
    shown_as = progress.subject(checked, drift_batch=batch_suite.parent.name)
    progress.stage(shown_as, progress.Stage.STARTED)
    folder = home / "drift" / model_name / f"v{champion}"
    cache = str(home / "model-cache")
    reference_suite, current_suite = Suite.from_file(drift.reference), Suite.from_file(batch_suite)  # read once, here
    reference_out = folder / f"reference-{_suite_key(reference_suite)}"
    records = service_config.record_cache.settings(home)
    reference = score_batch(model_uri, reference_suite, str(reference_out), cache, shown_as, "reference", records)
    current_out = folder / f"batch-{_suite_key(current_suite)}"
    current = score_batch(model_uri, current_suite, str(current_out), cache, shown_as, "new batch", records)
    progress.stage(shown_as, progress.Stage.TESTING)

    scores = {}
    for definition in registry.definitions():
        evaluator, score = definition.name, definition.drift_score
        if score is None or evaluator not in reference["evaluators"] or evaluator not in current["evaluators"]:
            continue
        if "error" in reference["evaluators"][evaluator] or "error" in current["evaluators"][evaluator]:
            logger.warning("drift: %s failed on a batch; not compared", evaluator)
            continue
        ref_scores = per_sample_scores(reference_out, evaluator, score.column)
        new_scores = per_sample_scores(current_out, evaluator, score.column)
        scores[f"{evaluator}/{score.metric}"] = (ref_scores, new_scores)
    results = detect_drifts(scores, alpha=drift.alpha, max_mean_drop=drift.max_mean_drop)  # Holm across the scores of the batch
    drifted = [r for r in results if r.drifted]

    datasets = [("drift reference", reference_suite), ("drift batch", current_suite)]
    run_id = log_drift_run(client, checked, BatchChecked(str(batch_suite), current["evaluators"], results, datasets), home, where_it_runs())
    outcome = DriftOutcome.DRIFTED if drifted else DriftOutcome.NO_DRIFT if any(r.p_value is not None for r in results) else DriftOutcome.NOT_CHECKED
    summary = DriftResult(model=model_name, version=checked.version, drifted=bool(drifted), outcome=outcome, run_id=run_id, checks=[r.as_dict() for r in results])
    if drifted:
        emit_drift_event(checked, run_id, drifted)
        logger.warning("drift in %s: %s", checked, "; ".join(r.reason for r in drifted))
    if outcome is not DriftOutcome.NO_DRIFT:  # drift found, or a champion that could not be checked: the team is told
        page = notifying.run_url(client.tracking_uri, client.get_run(run_id).info.experiment_id, run_id)
        reasons = [f"{r.metric}: {r.reason}" for r in (drifted or results)] or ["no evaluator of the suites has a label-free score to test"]  # each names its score
        notifying.tell(home, notifying.drift_notification(model_name, checked.version, run_id, bool(drifted), reasons, page), service_config.notify_channels(model_name))
    progress.stage(shown_as, progress.Stage.DONE, detail=outcome)
    return summary
