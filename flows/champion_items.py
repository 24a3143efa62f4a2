"""The champion on the candidate's items it has no records of (the suite's ``champion_items``).

A comparison with the champion pairs the two versions' records item by item. When the
suite gained items after the champion was validated, the champion has no records of
them, and the comparison would be made on fewer (and older) items than the candidate ran.
With ``champion_items: evaluate``, the default, the validation first evaluates the
champion on exactly those items, through the same evaluation flow and record cache (their
cost alone), and logs the records on the *candidate's* run under
``champion-items/vN/EVALUATOR/records.jsonl``. Every judgement of that run reads them back
(a later look, ``vlgate gate``): the champion's own run, whose decision is on record, is
never changed. With ``shared``, comparisons use the items both versions have.

A judgement against another champion than the one completed (``--against-current``, or
an alias that moved meanwhile) finds no records for it, and compares on the shared items.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from mlflow import MlflowClient

from vlgate import tracking
from vlgate.evaluators.output import EvaluatorOutput, EvaluatorSummary
from vlgate.evaluators.records import Record, read_jsonl
from vlgate.evaluators.running.items import ItemIds
from vlgate.flows.plan import ValidationPlan
from vlgate.flows.recording import version_outputs
from vlgate.versions import VersionRef

log = logging.getLogger(__name__)

#: the candidate run's artifact folder holding the champion's records of its missing items
CHAMPION_ITEMS = "champion-items"
#: the candidate run's metric ``champion_items/EVALUATOR``: the champion's records evaluated for it
CHAMPION_ITEMS_METRIC = "champion_items"


def artifact_folder(champion_version: str) -> str:
    return f"{CHAMPION_ITEMS}/v{champion_version}"


def item_id(record: Record) -> str:
    return str(record["id"])


def missing_items(candidate: Mapping[str, EvaluatorOutput], champion: Mapping[str, EvaluatorOutput]) -> ItemIds:
    """Per evaluator both versions ran, the candidate's items the champion has no record of,
    in the candidate's order."""
    ids: dict[str, tuple[str, ...]] = {}
    for name, output in candidate.items():
        theirs = champion.get(name)
        if output.error is not None or theirs is None or theirs.error is not None:
            continue
        held = {item_id(record) for record in theirs.records}
        lacking = tuple(dict.fromkeys(item_id(record) for record in output.records if item_id(record) not in held))
        if lacking:
            ids[name] = lacking
    return ItemIds(ids=ids)


def with_champion_items(champion: dict[str, EvaluatorOutput], added: Mapping[str, list[Record]]) -> dict[str, EvaluatorOutput]:
    """The champion's outputs with the records evaluated for a candidate added (never one
    of an item it has already); its own metrics and expectations' verdict as its run has them."""
    merged = dict(champion)
    for name, records in added.items():
        own = champion.get(name)
        if own is None or own.error is not None:
            continue
        held = {item_id(record) for record in own.records}
        new = [record for record in records if item_id(record) not in held]
        if new:
            merged[name] = EvaluatorOutput.from_records(
                name, own.records + new, own.metrics, summary=own.summary, expectations=own.expectations, expectations_passed=own.expectations_passed
            )
    return merged


def logged_champion_items(client: MlflowClient, run_id: str, champion_version: str) -> dict[str, list[Record]]:
    """The champion's records a candidate's run holds (empty when it holds none)."""
    folder = artifact_folder(champion_version)
    if not any(True for _ in client.list_artifacts(run_id, folder)):
        return {}
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(client.download_artifacts(run_id, folder, scratch))
        return {path.parent.name: read_jsonl(path).records for path in sorted(local.glob("*/records.jsonl"))}


def champion_outputs(client: MlflowClient, champion: VersionRef, run_id: str) -> dict[str, EvaluatorOutput]:
    """The champion's outputs as a judgement of the run ``run_id`` compares with: its own
    run's, and the records evaluated for this candidate on the items it lacked."""
    return with_champion_items(version_outputs(client, champion), logged_champion_items(client, run_id, champion.version))


Evaluate = Callable[[ValidationPlan, str], dict[str, EvaluatorSummary]]


def evaluate_champion_items(
    client: MlflowClient, plan: ValidationPlan, run_id: str, candidate: Mapping[str, EvaluatorOutput], champion_version: str, out: Path, evaluate: Evaluate
) -> dict[str, int]:
    """Evaluate the champion on the candidate's items it lacks (``evaluate``: the
    validation's evaluation step, as the candidate's), log its records on the candidate's
    run and how many there are (``champion_items/EVALUATOR``); returns those counts. An evaluator that fails on
    the champion is logged and left out: its comparison is made on the shared items."""
    from mlflow.entities import Metric

    missing = missing_items(candidate, version_outputs(client, VersionRef(model=plan.model, version=champion_version)))
    if not missing.ids:
        return {}
    folder = out / CHAMPION_ITEMS / f"v{champion_version}"
    entries = evaluate(plan.for_champion(champion_version, missing), str(folder))
    evaluated: dict[str, int] = {}
    for name, entry in entries.items():
        if entry.error is not None:
            log.warning("%s v%s: the champion v%s could not be evaluated on %d new %s item(s), compared on the shared items: %s", plan.model, plan.version, champion_version, len(missing.ids[name]), name, entry.error)
            continue
        client.log_artifact(run_id, str(folder / name / "records.jsonl"), f"{artifact_folder(champion_version)}/{name}")
        evaluated[name] = len(read_jsonl(folder / name / "records.jsonl").records)
    now = int(time.time() * 1000)
    metrics = [Metric(tracking.mlflow_metric_name(f"{CHAMPION_ITEMS_METRIC}/{name}"), float(n), now, 0) for name, n in evaluated.items()]
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    return evaluated
