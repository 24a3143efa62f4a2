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

Great Expectations is imported on the first call, not with this module: the import
alone takes seconds and the CLI imports flows for unrelated commands. One ephemeral
Data Context (in memory, progress bars off) is built then and reused; each frame is
passed as a batch parameter, and a lock makes concurrent calls (Prefect's thread
pool) take turns.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np
import pandas as pd
from pydantic import JsonValue, TypeAdapter

from vlgate.evaluators import registry
from vlgate.evaluators.definition import Column, EvaluatorDefinition, Metric
from vlgate.home import vlgate_home

if TYPE_CHECKING:
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.core.expectation_validation_result import ExpectationValidationResult

__all__ = ["ExpectationReport", "validate_evaluator_output"]

# Nothing here may phone home (GX reads this when a context is created).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

RECORDS, METRICS = "records", "metrics"
_AS_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)
#: checked on their own terms, not by range: n equals the data set's size, n_skipped is 0;
#: n_item_errors (items that could not be loaded) is already in the row count
_CHECKED_APART = ("n", "n_skipped", "n_item_errors")
_SHOWN_EXAMPLES = 5  # unexpected values kept per failed expectation


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


class Observed(TypedDict, total=False):
    """What GX saw for one expectation, in short (JSON values only)."""

    observed_value: JsonValue
    element_count: int
    unexpected_count: int
    missing_count: int
    unexpected_examples: list[JsonValue]
    #: the expectation could not be evaluated
    exception: str | None


class ExpectationResult(TypedDict):
    """One GX result as the report keeps it (JSON values only)."""

    expectation: str
    table: str
    column: str | None
    kwargs: dict[str, JsonValue]
    success: bool
    observed: Observed
    #: why a rate or count past its usable bounds makes the output unusable
    unusable: NotRequired[str]


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
# Running GX


def _jsonable(value: object) -> JsonValue:
    """Plain JSON values: numpy scalars unwrapped, NaN/inf to None, containers walked."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _observed(result: ExpectationValidationResult) -> Observed:
    """The short summary of one GX ExpectationValidationResult."""
    info = result.exception_info or {}
    if info.get("raised_exception"):
        return {"exception": _text(info.get("exception_message"))}
    for nested in info.values():  # a metric that failed to resolve is keyed by its metric id
        if isinstance(nested, dict) and nested.get("raised_exception"):
            return {"exception": _text(nested.get("exception_message"))}
    raw = result.result or {}
    observed: Observed = {}
    if "observed_value" in raw:
        observed["observed_value"] = _jsonable(raw["observed_value"])
    element_count, unexpected_count, missing_count = (_count(raw.get(key)) for key in ("element_count", "unexpected_count", "missing_count"))
    if element_count is not None:
        observed["element_count"] = element_count
    if unexpected_count is not None:
        observed["unexpected_count"] = unexpected_count
    if missing_count is not None:
        observed["missing_count"] = missing_count
    if raw.get("partial_unexpected_list"):
        observed["unexpected_examples"] = [_jsonable(value) for value in list(raw["partial_unexpected_list"])[:_SHOWN_EXAMPLES]]
    return observed


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None


_gx_modules: tuple[ModuleType, ModuleType] | None = None
_batch_definitions: dict[str, BatchDefinition[pd.DataFrame]] = {}
# One context for the process, built on first use. GX objects are not documented as
# thread-safe, so validations take turns (GX is pure Python, so little is lost).
_gx_lock = threading.Lock()


def _gx() -> tuple[ModuleType, ModuleType]:
    """Import GX on first use (seconds) and quiet its logging."""
    global _gx_modules
    if _gx_modules is None:
        import great_expectations as gx
        import great_expectations.expectations as gxe

        # GX sets some of its module loggers to INFO itself (the ephemeral docs site's
        # "Created temporary directory" line): every one of them, not only the package's
        for name in ["great_expectations", *logging.Logger.manager.loggerDict]:
            if name.split(".")[0] == "great_expectations":
                logging.getLogger(name).setLevel(logging.ERROR)
        _gx_modules = (gx, gxe)
    return _gx_modules


def _batch_definition(table: str) -> BatchDefinition[pd.DataFrame]:
    """The cached whole-frame batch definition of ``table``; call with ``_gx_lock`` held.

    A fresh ephemeral context and data source per call would cost time on every
    evaluator (each change of its config is serialised); the frame itself travels as a batch parameter, so
    nothing of one call's data stays behind in the shared objects.
    """
    if not _batch_definitions:
        gx, _ = _gx()
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = context.data_sources.add_pandas("vlgate")
        for name in (RECORDS, METRICS):
            _batch_definitions[name] = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
    return _batch_definitions[table]


def _cell(value: object) -> object:
    """A frame's cell as JSON holds it exactly (floats by their round-tripping repr): unlike
    :func:`_jsonable`, which makes NaN None and unknown values text, nothing is merged, so
    two different frames never share a digest."""
    if isinstance(value, np.ndarray):
        return [_cell(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_cell(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _cell(item) for key, item in value.items()}
    return value


def frame_digest(frame: pd.DataFrame) -> str:
    """What a suite's results depend on in ``frame``, byte for byte: its columns, dtypes,
    index and every cell (numbers as their machine bytes, anything else as exact JSON). Two
    frames with one digest are the same table to GX."""
    digest = hashlib.sha256(json.dumps([[str(c) for c in frame.columns], [str(t) for t in frame.dtypes], len(frame)]).encode())
    digest.update(json.dumps([_cell(label) for label in frame.index.tolist()], default=repr).encode())
    for name in frame.columns:
        column = frame[name]
        if column.dtype.kind in "biufcmM":
            digest.update(np.ascontiguousarray(column.to_numpy()).tobytes())
        else:
            digest.update(json.dumps([_cell(value) for value in column.tolist()], default=repr).encode())
    return digest.hexdigest()


@dataclass
class Expectation:
    """One GX expectation as vlgate states it: GX's class name (``kind``), its arguments and
    its meta. Built into GX's own object only when GX runs (:func:`_validate_with_gx`): a
    suite whose results are known needs no GX at all, not even its import."""

    kind: str
    kwargs: dict[str, object]
    meta: dict[str, object] = field(default_factory=dict)


class _Expectations:
    """``EXPECT.ExpectColumnToExist(column="id")``: an :class:`Expectation` named as GX's class is."""

    def __getattr__(self, kind: str) -> Callable[..., Expectation]:
        if not kind.startswith("Expect"):
            raise AttributeError(kind)
        return lambda **kwargs: Expectation(kind, kwargs)


EXPECT = _Expectations()


def _suite_key(table: str, frame: pd.DataFrame, expectations: list[Expectation]) -> str:
    """The key of one suite's results: GX's version, the table, every expectation (class,
    arguments and meta, in order) and the frame's digest."""
    from importlib.metadata import version

    stated = [[expectation.kind, expectation.kwargs, expectation.meta] for expectation in expectations]
    material = json.dumps([version("great_expectations"), table, stated, frame_digest(frame)], sort_keys=True, default=repr)
    return hashlib.sha256(material.encode()).hexdigest()


#: A suite's results by :func:`_suite_key`, in this process and under
#: ``$VLGATE_HOME/expectation-results``: a later look, or another version with the same
#: records, that validates the same frame against the same suite is given the results GX
#: computed for exactly that, instead of GX building its graph again (what a cached look
#: paid for most: benchmarks/RESULTS.md). A result file that does not read back is computed again.
_results_memo: dict[str, list[ExpectationResult]] = {}
_RESULTS_FOLDER = "expectation-results"


def _remembered(key: str) -> list[ExpectationResult] | None:
    if key in _results_memo:
        return _results_memo[key]
    path = vlgate_home() / _RESULTS_FOLDER / f"{key}.json"
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, list) or not all(isinstance(entry, dict) and isinstance(entry.get("success"), bool) for entry in found):
        return None
    with contextlib.suppress(OSError):  # its last use, for `vlgate cache prune --older-than`
        os.utime(path)
    _results_memo[key] = found
    return found


def prune_expectation_results(home: Path, older_than: timedelta) -> int:
    """Remove the kept suite results last used longer than ``older_than`` ago (``vlgate
    cache prune --older-than``); how many. A removed one is computed again when needed."""
    cutoff = time.time() - older_than.total_seconds()
    removed = 0
    for path in (home / _RESULTS_FOLDER).glob("*.json") if (home / _RESULTS_FOLDER).is_dir() else ():
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    return removed


def _remember(key: str, results: list[ExpectationResult]) -> None:
    _results_memo[key] = results
    folder = vlgate_home() / _RESULTS_FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        scratch = folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        scratch.write_text(json.dumps(results, allow_nan=True))
        os.replace(scratch, folder / f"{key}.json")
    except OSError as error:  # a folder that cannot be written: the results stand, computed each time
        logging.getLogger("vlgate.expectations").warning("expectation results not kept in %s: %s", folder, error)


def _run_suite(table: str, frame: pd.DataFrame, expectations: list[Expectation]) -> list[ExpectationResult]:
    """Validate ``frame`` against ``expectations`` in one GX pass; results in the given
    order. The same suite on the same frame (:func:`_suite_key`) is given the results GX
    gave before."""
    key = _suite_key(table, frame, expectations)
    known = _remembered(key)
    if known is None:
        # as JSON holds them, so that a result computed now and one read back are the same values
        known = json.loads(json.dumps(_validate_with_gx(table, frame, expectations), allow_nan=True))
        _remember(key, known)
    return copy.deepcopy(known)


def _validate_with_gx(table: str, frame: pd.DataFrame, expectations: list[Expectation]) -> list[ExpectationResult]:
    gx, gxe = _gx()
    built = []
    for index, expectation in enumerate(expectations):
        made = getattr(gxe, expectation.kind)(**expectation.kwargs)
        # GX returns results in its own order (errored ones first): tag each to restore ours.
        made.meta = {**expectation.meta, "vlgate_index": index}
        built.append(made)
    suite = gx.ExpectationSuite(name=f"vlgate-{table}", expectations=built)
    with _gx_lock:
        batch = _batch_definition(table).get_batch(batch_parameters={"dataframe": frame})
        validation = batch.validate(suite, result_format={"result_format": "BASIC", "partial_unexpected_count": _SHOWN_EXAMPLES})
    ordered = sorted(validation.results, key=lambda r: r.expectation_config.meta["vlgate_index"])
    results: list[ExpectationResult] = []
    for expectation, result in zip(expectations, ordered):
        kwargs = {str(k): _jsonable(v) for k, v in result.expectation_config.kwargs.items() if k != "batch_id"}
        results.append(
            {
                "expectation": expectation.kind,
                "table": table,
                "column": _text(kwargs.get("column")),
                "kwargs": kwargs,
                "success": bool(result.success),
                "observed": _observed(result),
            }
        )
        if result.expectation_config.meta.get("unusable"):
            results[-1]["unusable"] = result.expectation_config.meta["unusable"]
    return results


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
    results = _run_suite(RECORDS, records, _records_expectations(definition, records, expected_rows))
    metrics_frame, metric_expectations = _metrics_frame_and_expectations(definition, records, metrics, expected_rows)
    results += _run_suite(METRICS, metrics_frame, metric_expectations)
    return ExpectationReport(evaluator, all(r["success"] for r in results), results)
