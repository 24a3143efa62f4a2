"""An lmms-eval task as a vlgate evaluator: the :class:`EvaluatorDefinition` of one suite entry,
built from the task lmms-eval loaded, so that every metric of the task's ``metric_list`` is
the vlgate metric ``ENTRY/METRIC``: logged, checked by Great Expectations, gated (floors,
and regressions against the champion paired on doc ids) and shown as the other evaluators'
metrics are (docs/lmms-eval.md).

- **The aggregate** of a metric is the task's own aggregation function on the per-doc
  values ``process_results`` gave, in doc order; it must be a finite number, or the
  metric cannot be gated (:class:`UnpairableAggregationError`, naming the task and metric).
- **Resampling** (the gate's bootstrap and leave-one-out): a metric whose aggregation is
  lmms-eval's own ``mean`` of numbers is a weighted mean, linear in the docs; any other
  aggregation is called on each resampled list of docs (the generic path).
- **Great Expectations** fails a run where more than :data:`MAX_EMPTY_SHARE` of the
  answers are empty (a backend that loses its output must not pass as a model that knows
  nothing), or more than :data:`MAX_UNPARSED_SHARE` are answers the task's extraction
  filters cannot read (their fallback, lmms-eval's ``[invalid]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vlgate.evaluators import schemas
from vlgate.evaluators.definition import Column, DriftScore, EvaluatorDefinition, ItemScore, Metric, count_metric, indicator_column
from vlgate.evaluators.lmms.runner import TaskDoc, build_runner, doc_images, load_docs, protocol_of, task_code
from vlgate.evaluators.lmms.tasks import LmmsEvalSettings, LoadedTask, TaskError, load_task, one_line, scoring_digest
from vlgate.evaluators.metrics.common import MetricValues, Weights, weighted_mean
from vlgate.evaluators.records import Record
from vlgate.evaluators.schemas import Arrays, Problem

#: the share of empty answers past which Great Expectations fails the run
MAX_EMPTY_SHARE = 0.25
#: the share of answers the task's extraction filters cannot read past which Great Expectations fails the run
MAX_UNPARSED_SHARE = 0.5
#: the per-sample column of a doc's own ``score`` (:func:`scored_metrics`)
DOC_SCORE = "doc_score"


class UnpairableAggregationError(TaskError):
    """A task metric whose aggregation gives something the gate cannot compare (not a finite number)."""


class TaskSchema(schemas.Schema):
    """docs/lmms-eval.md: ``{"id", "doc_id", "response", "filtered", "results"}``, ``results``
    holding the metrics ``process_results`` gave for the doc (all of the task's, or some)."""

    def __init__(self, metrics: Sequence[str]):
        self.metrics = tuple(metrics)

    def structure_problems(self, record: Record) -> Any:
        if not isinstance(record.get("doc_id"), int) or isinstance(record.get("doc_id"), bool):
            yield ("doc_id", "must be the doc's integer index")
        if not isinstance(record.get("response"), str):
            yield ("response", "must be the model's text")
        if not isinstance(record.get("filtered"), dict):
            yield ("filtered", "must map each filter ensemble to its response")
        if not isinstance(record.get("unparsed"), bool):
            yield ("unparsed", "must say whether the scored filters found nothing to read (true or false)")
        results = record.get("results")
        if not isinstance(results, dict):
            yield ("results", "must map each metric to process_results's value")
            return

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        arrays: Arrays = {"response": pd.Series([record["response"] for record in records], dtype=object), "unparsed": np.asarray([bool(record.get("unparsed")) for record in records])}
        for metric in self.metrics:  # a doc's process_results may give some metrics only (MME's: one of two by category)
            arrays[f"results.{metric}"] = pd.Series([record["results"].get(metric) for record in records], dtype=object)  # type: ignore[union-attr]
        return arrays, {}


def _per_sample(arrays: Arrays, metrics: Sequence[str], scored: Sequence[str] = ()) -> pd.DataFrame:
    """One row a doc: the response, whether it is empty, and each metric's per-doc value as
    ``process_results`` gave it (numbers as floats where every doc's is a number; None
    where a doc gave none); with ``scored`` metrics, :data:`DOC_SCORE`: the ``score`` in
    the first of them the doc gave (MME's docs give one of two by category)."""
    responses = pd.Series(arrays["response"], dtype=object)
    unparsed = np.asarray(arrays["unparsed"], dtype=int)
    frame = pd.DataFrame({"response": responses.to_numpy(), "empty": (responses.str.strip() == "").astype(int).to_numpy(), "unparsed": unparsed})
    for metric in metrics:
        values = list(arrays[f"results.{metric}"])
        numeric = all(isinstance(value, int | float) and not isinstance(value, bool) for value in values)
        frame[metric] = np.asarray(values, dtype=float) if numeric and values else pd.Series(values, dtype=object).to_numpy()
    if scored:
        per_doc = zip(*(arrays[f"results.{metric}"] for metric in scored))
        frame[DOC_SCORE] = np.asarray([next((value["score"] for value in values if isinstance(value, Mapping) and isinstance(value.get("score"), int | float)), np.nan) for values in per_doc], dtype=float)
    return frame


def _aggregate(loaded: LoadedTask, evaluator: str, frame: pd.DataFrame) -> MetricValues:
    """Each metric by the task's own aggregation on the docs' values, in order; ``n_empty``."""
    metrics: MetricValues = {"n": len(frame), "n_empty": int(frame["empty"].sum()) if len(frame) else 0, "n_unparsed": int(frame["unparsed"].sum()) if len(frame) else 0}
    for spec in loaded.metrics:
        # the docs that gave the metric, as lmms-eval collects them
        values = [value for value in frame[spec.name].tolist() if value is not None and not (isinstance(value, float) and math.isnan(value))]
        if not values:
            metrics[spec.name] = None
            continue
        try:
            with task_code(spec.name):
                value = spec.aggregate(values)
        except Exception as error:  # the task's own code: on a subset of its docs (the gate's resamples) it may refuse
            raise UnpairableAggregationError(
                f"lmms-eval task {loaded.name!r} ({evaluator}): the aggregation of {spec.name!r} fails on {len(values)} of its docs ({type(error).__name__}: {one_line(error)}); "
                "vlgate resamples docs to gate a metric, and this aggregation needs its docs whole"
            ) from error
        if isinstance(value, bool) or not isinstance(value, int | float | np.number) or not math.isfinite(float(value)):
            raise UnpairableAggregationError(f"lmms-eval task {loaded.name!r} ({evaluator}): the aggregation of {spec.name!r} gives {type(value).__name__} {str(value)[:80]!r}, not a finite number; vlgate cannot gate it")
        metrics[spec.name] = float(value)
    return metrics


def _resampled(loaded: LoadedTask, frame: pd.DataFrame, weights: Weights) -> dict[str, np.ndarray]:
    """The metrics that are lmms-eval's ``mean`` of numbers, as weighted means (linear in the docs)."""
    return {spec.name: weighted_mean(frame[spec.name].to_numpy(dtype=float), weights) for spec in loaded.metrics if spec.is_mean and frame[spec.name].dtype.kind == "f"}


#: the docs :func:`ungateable` scores with an empty answer to try each aggregation on resamples
PROBED_DOCS = 6


def _probe(loaded: LoadedTask) -> list[Mapping[str, Any]]:
    """The task's ``process_results`` on its first :data:`PROBED_DOCS` docs, each answered
    with an empty string; none for a task whose ``process_results`` refuses an empty answer."""
    docs = [loaded.doc(doc_id) for doc_id in range(min(PROBED_DOCS, len(loaded.docs)))]
    try:
        with task_code("probe"):
            return [loaded.task.process_results(doc, [""]) for doc in docs]
    except Exception:  # an empty answer is no answer the task has to take
        return []


def ungateable(loaded: LoadedTask, results: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Why a rule cannot gate each metric whose aggregation fails on the docs resampled:
    each aggregation on the probed docs' values (:func:`_probe`) without the first and with
    the first twice (what the gate's leave-one-out and bootstrap hand it). MME's needs every
    question's two docs (it asserts so): its metrics are logged and shown, and a policy that
    names one is refused when it is read."""
    reasons = {}
    for spec in loaded.metrics:
        values = [result[spec.name] for result in results if spec.name in result]
        if len(values) < 2:
            continue
        for resampled, how in ((values[1:], "without one of its docs"), ([*values, values[0]], "with one of its docs twice")):
            try:
                with task_code("probe"):
                    spec.aggregate(resampled)
            except Exception as error:
                reasons[spec.name] = (
                    f"lmms-eval task {loaded.name!r}: the aggregation of {spec.name!r} fails {how} ({type(error).__name__}: {one_line(error)}); "
                    "vlgate resamples docs to gate a metric, so no rule can gate it (it is still logged and shown)"
                )
                break
    return reasons


def scored_metrics(loaded: LoadedTask, results: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The metrics whose per-doc value is a record holding a numeric ``score`` (POPE's and
    MME's 0/1 correctness of the doc), on every probed doc that gave them: the docs lost and
    won of a task none of whose metrics is a mean of numbers."""
    scored = []
    for spec in loaded.metrics:
        values = [result[spec.name] for result in results if spec.name in result]
        if values and all(isinstance(value, Mapping) and isinstance(value.get("score"), int | float) and not isinstance(value.get("score"), bool) for value in values):
            scored.append(spec.name)
    return tuple(scored)


def drift_metric(loaded: LoadedTask, settings: LmmsEvalSettings) -> str | None:
    """The entry's ``drift_metric``, which must be one of the task's metrics and a mean of
    per-doc numbers (a drift check compares the per-doc values of two batches with a KS
    test); :class:`TaskError` otherwise. Whether it needs a label is the task's to say:
    vlgate cannot tell from outside which fields ``process_results`` reads."""
    if settings.drift_metric is None:
        return None
    spec = next((spec for spec in loaded.metrics if spec.name == settings.drift_metric), None)
    if spec is None:
        raise TaskError(f"lmms-eval task {loaded.name!r}: drift_metric {settings.drift_metric!r} is not one of its metrics ({', '.join(s.name for s in loaded.metrics)})")
    if not spec.is_mean:
        raise TaskError(f"lmms-eval task {loaded.name!r}: drift_metric {spec.name!r} is not lmms-eval's mean of per-doc numbers; a drift check compares per-doc values")
    if not spec.higher_is_better:
        raise TaskError(f"lmms-eval task {loaded.name!r}: drift_metric {spec.name!r} is better lower; a drift check flags a fall of its metric's mean")
    return spec.name


def definition_for(name: str, settings: LmmsEvalSettings) -> EvaluatorDefinition:
    """The evaluator of the suite entry ``name``: its task loaded (:func:`load_task`)."""
    loaded = load_task(settings)
    names = [spec.name for spec in loaded.metrics]
    probed = _probe(loaded)
    refused = ungateable(loaded, probed)
    drift = drift_metric(loaded, settings)
    metrics = tuple(
        Metric(spec.name, None, None, direction="higher" if spec.higher_is_better else "lower", labelled=spec.name != drift, headline=True, ungateable=refused.get(spec.name, ""))
        for spec in loaded.metrics
    )
    means = [spec for spec in loaded.metrics if spec.is_mean]
    # a label-free share says nothing of which docs a version got right
    item_scores = tuple(ItemScore(spec.name, "higher" if spec.higher_is_better else "lower", (spec.name,)) for spec in means if spec.name != drift)
    scored = scored_metrics(loaded, probed) if not means else ()
    if scored:  # the doc's own score, behind every metric that carries it
        first = next(spec for spec in loaded.metrics if spec.name == scored[0])
        item_scores = (ItemScore(DOC_SCORE, "higher" if first.higher_is_better else "lower", scored),)
    return EvaluatorDefinition(
        name=name,
        title=f"lmms-eval {loaded.name}",
        schema=TaskSchema(names),
        per_sample=lambda arrays: _per_sample(arrays, names, scored),
        aggregate=lambda frame: _aggregate(loaded, name, frame),
        metrics=(
            *metrics,
            count_metric("n_empty", max_share=MAX_EMPTY_SHARE, unusable="empty answers: a backend that loses its output is not a model that knows nothing"),
            count_metric("n_unparsed", max_share=MAX_UNPARSED_SHARE, unusable="answers the task's filters cannot read: a prompt or template the model does not follow is no measure of what it knows"),
        ),
        columns=(
            Column("response", free_text=True),
            indicator_column("empty"),
            indicator_column("unparsed"),
            *(Column(metric, opaque=True) for metric in names),
            *((Column(DOC_SCORE, None, None, nullable=True),) if scored else ()),
        ),
        settings=LmmsEvalSettings,
        build_runner=lambda spec, context: build_runner(spec, context, name),
        protocols=(protocol_of(loaded),),
        example=Path(),
        load_items=lambda spec, _out: load_docs(spec),
        resampled=(lambda frame, weights: _resampled(loaded, frame, weights)) if means else None,
        item_scores=item_scores,
        drift_score=DriftScore(drift, drift) if drift else None,
        item_fields=("prompt", "response"),
        item_images=lambda record: doc_images(loaded, record),
        # the drift metric is scored apart (label-free, no item score): part of the scoring
        scored_by=(f"lmms-eval task {loaded.name!r}" + (f" with drift_metric {drift!r}" if drift else ""), f"{scoring_digest(loaded.task)}+{drift or ''}"),
    )


__all__ = ["MAX_EMPTY_SHARE", "MAX_UNPARSED_SHARE", "TaskDoc", "TaskSchema", "UnpairableAggregationError", "definition_for"]
