"""Great Expectations suites for one evaluator's output on one model version (docs/metrics.md).

``validate_evaluator_output(evaluator, records, metrics, expected_rows)`` runs two GX
suites and returns one :class:`ExpectationReport` holding every GX result:

* **records**: the per-sample frame of ``vlgate.evaluators.scoring.per_sample_frame``
  (one row per record, ``id`` first);
* **metrics**: the dict ``vlgate.evaluators.scoring.score`` returns, turned into a
  one-row frame with one column per checked metric, so that the metric checks are GX
  results too and a failure names the metric as its column.

Applied to every evaluator
    records: the row count equals ``expected_rows`` (the data set's item count: a
    run that dropped or duplicated items must not be gated on); ``id`` exists, is
    not null and is unique (per-sample comparisons against the champion join on
    it); every column of the evaluator's frame exists.
    metrics: the evaluator's label-free metrics exist, are not null and are in
    range (a count in [0, n], or up to its ``max_share`` of n: unanswered questions
    of the LCM evaluators). They are the ones the gate and the unlabelled drift runs rely on, and
    an undefined one means the run cannot be judged (fail closed, as the gate
    does). ``n`` (when present) equals ``expected_rows``, since metrics over a
    partial set would not be comparable across versions; ``n_skipped`` (present
    only when ``score`` dropped invalid records) must be 0. Every other known
    metric, when present, is range-checked but may be null: labelled metrics are
    omitted or undefined on unlabelled data (docs/metrics.md#records) and that is not an error.
    usable output: a valid run can still be unusable — every answer unparseable,
    "true" to every statement, one description for every image — and then its scores
    measure the failure, not the skill. The definition's ``max_share`` of a count
    (unanswered or unparseable instances) and ``usable_low``/``usable_high`` of a rate
    (VLind-Bench's ``one_answer_share``, GenCeption's ``distinct_descriptions``) fail the
    run, the failure saying "unusable output" and why.

What each evaluator's columns and metrics are — ranges, value sets, nullability, which
metrics are required, which are counts, the pipeline order of VLind-Bench's stages —
comes from the evaluators' definitions (``evaluators/definition.py``). Templated names are
expanded from the run itself: GenCeption's ``s@1`` … ``s@T`` columns and its required
``gc@T`` take T from the per-sample frame. Breakdowns (``by_<field>``) are not checked
here; they hold the same metrics over subsets.

The suites run in ``flows/gx_suites.py``: Great Expectations imported on first need, and
each suite's results remembered by the suite and the frame.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pydantic import JsonValue, TypeAdapter

from vlgate.evaluators import registry
from vlgate.evaluators.definition import Column, EvaluatorDefinition, Metric
from vlgate.flows.gx_suites import EXPECT, METRICS, RECORDS, Expectation, ExpectationResult, Observed, run_expectations

__all__ = ["ExpectationReport", "validate_evaluator_output"]

_AS_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)
#: checked on their own terms, not by range: n equals the data set's size, n_skipped is 0;
#: n_item_errors (items that could not be loaded) is already in the row count
_CHECKED_APART = ("n", "n_skipped", "n_item_errors")


# ---------------------------------------------------------------------------
# What is expected: the definitions' columns and metrics


def _record_columns(definition: EvaluatorDefinition, records: pd.DataFrame) -> list[Column]:
    return [expanded for column in definition.columns for expanded in column.expand(list(records.columns))]


def _bounds(metric: Metric, expected_rows: int) -> tuple[float | None, float | None]:
    if metric.count:
        return (0, expected_rows if metric.max_share is None else math.floor(metric.max_share * expected_rows))
    return (metric.low, metric.high)


# ---------------------------------------------------------------------------
# The report


@dataclass
class ExpectationReport:
    """Every GX result for one evaluator's output: records suite first, then metrics suite.

    Each entry of ``results``: ``expectation`` (GX class name), ``table``
    ("records" or "metrics"), ``column`` (None for table-level and column-pair
    expectations), ``kwargs`` (the expectation's arguments), ``success`` and
    ``observed`` (a short JSON-able summary of what GX saw).
    """

    evaluator: str
    success: bool
    results: list[ExpectationResult] = field(default_factory=list)

    def failures(self) -> list[str]:
        """One readable line per failed expectation, naming the column and what was observed."""
        return [f"{self.evaluator} {_describe_failure(result)}" for result in self.results if not result["success"]]

    def as_dict(self) -> dict[str, JsonValue]:
        results: JsonValue = _AS_JSON.validate_python(self.results)  # TypedDicts of JSON values, checked as such
        return {"evaluator": self.evaluator, "success": self.success, "results": results, "failures": list[JsonValue](self.failures())}


def _examples(observed: Observed) -> str:
    shown = observed.get("unexpected_examples") or []
    return f" (e.g. {', '.join(map(repr, shown))})" if shown else ""


def _describe_failure(result: ExpectationResult) -> str:
    kind, table, column, kwargs, observed = result["expectation"], result["table"], result["column"], result["kwargs"], result["observed"]
    where = f"metric '{column}'" if table == METRICS else f"{table} column '{column}'"
    if "exception" in observed:
        return f"{where}: {kind} could not be evaluated: {observed['exception']}"
    count, total = observed.get("unexpected_count"), observed.get("element_count")
    if kind == "ExpectTableRowCountToEqual":
        return f"{table}: row count is {observed.get('observed_value')}, expected {kwargs['value']}"
    if kind == "ExpectColumnToExist":
        return f"{where} is missing"
    if table == METRICS and kind == "ExpectColumnValuesToNotBeNull":
        return f"{where} is null (undefined)"
    if table == METRICS and kind == "ExpectColumnValuesToBeBetween":
        shown = (observed.get("unexpected_examples") or ["?"])[0]
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        if not result.get("unusable"):
            return f"{where} = {shown!r} is outside [{low}, {high}]"
        side = f"above {high:g}" if isinstance(high, (int, float)) and isinstance(shown, (int, float)) and shown > high else f"below {low:g}"
        return f"{where} = {shown:.4g} is {side}: unusable output, {result['unusable']}"
    if kind == "ExpectColumnValuesToNotBeNull":
        return f"{where}: {count} of {total} values are null"
    if kind == "ExpectColumnValuesToBeUnique":
        return f"{where}: {count} of {total} values are duplicated{_examples(observed)}"
    if kind == "ExpectColumnValuesToBeBetween":
        return f"{where}: {count} of {total} values outside [{kwargs.get('min_value')}, {kwargs.get('max_value')}]{_examples(observed)}"
    if kind == "ExpectColumnValuesToBeInSet":
        return f"{where}: {count} of {total} values not in {kwargs.get('value_set')}{_examples(observed)}"
    if kind == "ExpectColumnPairValuesAToBeGreaterThanB":
        pair = f"{table} columns '{kwargs.get('column_A')}' >= '{kwargs.get('column_B')}'"
        return f"{pair}: {count} of {total} rows violate it{_examples(observed)}"
    return f"{where}: {kind} failed, observed {observed}"


# ---------------------------------------------------------------------------
# The two suites of an evaluator's output


def _records_expectations(definition: EvaluatorDefinition, records: pd.DataFrame, expected_rows: int) -> list[Expectation]:
    gxe = EXPECT
    present = set(records.columns)
    expectations: list[Expectation] = [
        gxe.ExpectTableRowCountToEqual(value=expected_rows),
        gxe.ExpectColumnToExist(column="id"),
    ]
    if "id" in present:  # checks on an absent column would only repeat "missing" as a GX error
        expectations += [gxe.ExpectColumnValuesToNotBeNull(column="id"), gxe.ExpectColumnValuesToBeUnique(column="id")]
    for column in _record_columns(definition, records):
        expectations.append(gxe.ExpectColumnToExist(column=column.name))
        if column.name not in present:
            continue
        if not column.nullable:
            expectations.append(gxe.ExpectColumnValuesToNotBeNull(column=column.name))
        if column.free_text or column.opaque:
            continue  # what the model wrote: any text (its diversity is a metric's check); a task's own per-doc value
        if column.text:
            expectations.append(gxe.ExpectColumnValueLengthsToBeBetween(column=column.name, min_value=1))
        elif column.values is not None:
            expectations.append(gxe.ExpectColumnValuesToBeInSet(column=column.name, value_set=list(column.values)))
        elif column.low is not None or column.high is not None:  # nulls are skipped by GX's map expectations, so nullable columns are range-checked where defined
            expectations.append(gxe.ExpectColumnValuesToBeBetween(column=column.name, min_value=column.low, max_value=column.high))
    for earlier, later in definition.ordered_columns:
        if earlier in present and later in present:
            expectations.append(gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A=earlier, column_B=later, or_equal=True))
    return expectations


def _as_number(value: object) -> float:
    """A metric value as a float; None and anything that is not a number become NaN (null to GX)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return math.nan
    return float(value)


def _metrics_frame_and_expectations(definition: EvaluatorDefinition, records: pd.DataFrame, metrics: Mapping[str, object], expected_rows: int) -> tuple[pd.DataFrame, list[Expectation]]:
    gxe = EXPECT
    columns: dict[str, float] = {}
    expectations: list[Expectation] = []

    def between(name: str, low: float | None, high: float | None, unusable: str = "") -> None:
        columns[name] = _as_number(metrics[name])
        if low is None and high is None:  # an unbounded metric (an lmms-eval task's): its column, not null where required
            return
        expectation = gxe.ExpectColumnValuesToBeBetween(column=name, min_value=low, max_value=high)
        if unusable:
            expectation.meta = {"unusable": unusable}
        expectations.append(expectation)

    def usable(name: str, metric: Metric) -> None:
        """A rate past its usable bounds: degenerate output, though a valid number."""
        if metric.usable_low is not None or metric.usable_high is not None:
            between(name, metric.usable_low, metric.usable_high, metric.unusable)

    values = definition.template_values(records, metrics)
    for metric in definition.required_metrics(values):
        name = metric.resolve(values)
        low, high = _bounds(metric, expected_rows)
        expectations.append(gxe.ExpectColumnToExist(column=name))
        if name in metrics:
            columns[name] = _as_number(metrics[name])
            expectations.append(gxe.ExpectColumnValuesToNotBeNull(column=name))
            between(name, low, high, metric.unusable if metric.count else "")
            usable(name, metric)
    if "n" in metrics:  # metrics over a partial set would not compare with other versions
        between("n", expected_rows, expected_rows)
    if "n_skipped" in metrics:  # score() skipped invalid records
        between("n_skipped", 0, 0)
    checked = set(columns)
    for name in metrics:
        if name in checked or not isinstance(name, str) or name in _CHECKED_APART:
            continue
        known = definition.metric(name)
        if known is not None:
            between(name, *_bounds(known, expected_rows), known.unusable if known.count else "")
            usable(name, known)
    return pd.DataFrame({name: [value] for name, value in columns.items()}, dtype="float64"), expectations


def validate_evaluator_output(evaluator: str, records: pd.DataFrame, metrics: Mapping[str, object] | None, expected_rows: int) -> ExpectationReport:
    """Validate one evaluator's per-sample frame and metrics for one model version with GX.

    ``records`` is ``per_sample_frame(...)`` of the evaluator's records, ``metrics``
    what ``score(...)`` returned for them and ``expected_rows`` the number of items
    in the data set. The report succeeds only when every expectation does.
    """
    definition = registry.get(evaluator)
    if isinstance(expected_rows, bool) or not isinstance(expected_rows, (int, np.integer)) or expected_rows < 0:
        raise ValueError(f"expected_rows must be a non-negative integer, got {expected_rows!r}")
    expected_rows = int(expected_rows)
    metrics = metrics or {}
    results = run_expectations(RECORDS, records, _records_expectations(definition, records, expected_rows))
    metrics_frame, metric_expectations = _metrics_frame_and_expectations(definition, records, metrics, expected_rows)
    results += run_expectations(METRICS, metrics_frame, metric_expectations)
    return ExpectationReport(evaluator, all(r["success"] for r in results), results)
