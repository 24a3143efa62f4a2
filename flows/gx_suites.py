"""A suite of expectations run on one frame by Great Expectations, and its results
remembered by what they depend on (GX's version, the table, every expectation, the frame's
digest), in this process and under ``$VLGATE_HOME/expectation-results``: a later look,
or another version with the same records, given the same suite on the same frame gets
the results GX computed for exactly that, without importing GX (what a cached look paid
for most: benchmarks/RESULTS.md).

Great Expectations is imported on the first call that needs it: the import alone takes
seconds. One ephemeral Data Context (in memory, progress bars off) is built then and
reused; each frame is passed as a batch parameter, and a lock makes concurrent calls
(Prefect's thread pool) take turns.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np
import pandas as pd
from pydantic import JsonValue

from vlgate.home import vlgate_home

if TYPE_CHECKING:
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.core.expectation_validation_result import ExpectationValidationResult

# Nothing here may phone home (GX reads this when a context is created).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

#: the two tables an evaluator's output is checked as (``flows/expectations.py``)
RECORDS, METRICS = "records", "metrics"
_SHOWN_EXAMPLES = 5  # unexpected values kept per failed expectation


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


def run_expectations(table: str, frame: pd.DataFrame, expectations: list[Expectation]) -> list[ExpectationResult]:
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
