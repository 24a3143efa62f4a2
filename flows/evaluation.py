"""The evaluation step of the validation flow: every evaluator of the suite on one version,
as Prefect tasks (one per evaluator shard, retried with backoff, results cached per version
and shard), merged, then checked once with Great Expectations into an
:class:`EvaluatorOutput` that the later steps read.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import Task, get_run_logger, task
from prefect.client.schemas.objects import TaskRun
from prefect.futures import PrefectFuture
from prefect.states import State
from prefect.task_runners import TaskRunner
from prefect.tasks import exponential_backoff
from pydantic import BaseModel, ConfigDict

from vlgate import tracking
from vlgate.evaluators.lmms.tasks import TaskError
from vlgate.evaluators.output import EvaluatorOutput, EvaluatorSummary, ShardResult
from vlgate.evaluators.runners.cache import RecordCacheSettings  # a parameter of the flow and its tasks: resolved at run time
from vlgate.evaluators.running.suite import EvaluatorShard  # a task's parameter, read by its cache key
from vlgate.flows import progress
from vlgate.flows.plan import ValidationPlan  # a flow's and a task's parameters are validated against it

if TYPE_CHECKING:
    from prefect.context import TaskRunContext

    from vlgate.evaluators.runners.base import ItemProgress
    from vlgate.flows.settings import EvaluationConfig


def data_state(path: Path) -> str:
    """sha256 of (name, size, time) of every data file under ``path``: a file, a folder, or
    a glob of one split's release tables (``MMMU/*/validation-*.parquet``)."""
    from vlgate.evaluators.loaders.tables import glob_files, has_glob

    path = Path(path)
    if has_glob(path) and not path.exists():
        files, base = glob_files(path), Path(path.anchor)
    else:
        files, base = ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())), path.parent
    listing = [(str(p.relative_to(base)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


class ShardInputs(BaseModel):
    """What a shard's results depend on outside the plan, read once per validation (as its
    data sets are read once, ``remembering_items``) and handed to every shard: the
    registered version's identity (its source, run and creation time, since a deleted
    model's version number comes back with other weights: ``mlflow_identity``) and the
    evaluator's data files (:func:`data_state`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version_identity: str
    data_state: str


def evaluator_cache_key(_context: TaskRunContext, parameters: Mapping[str, object]) -> str:
    """(The version's identity and the data files' state (:class:`ShardInputs`), evaluator,
    shard (:class:`EvaluatorShard`), what the evaluator's results depend on in the suite
    (``ValidationPlan.evaluator_digest``: its content, not its file's bytes), vlgate's
    version, the output folder: results are files there, the look's items) identifies a
    shard's result."""
    from vlgate import __version__

    plan, inputs, shard = parameters["plan"], parameters["inputs"], parameters["shard"]
    if not isinstance(plan, ValidationPlan) or not isinstance(inputs, ShardInputs) or not isinstance(shard, EvaluatorShard):  # Prefect validated the task's parameters against its signature
        raise TypeError(f"plan, inputs, shard: a ValidationPlan, ShardInputs and EvaluatorShard, not {type(plan).__name__}, {type(inputs).__name__} and {type(shard).__name__}")
    evaluator = shard.evaluator
    material = [
        inputs.version_identity,
        evaluator,
        shard.index,
        shard.n_shards,
        plan.evaluator_digest(evaluator),
        inputs.data_state,
        __version__,
        parameters["out"],
        plan.items.model_dump() if plan.items is not None else None,
    ]
    return "vlgate-evaluate-" + hashlib.sha256(json.dumps(material).encode()).hexdigest()


class ShardTimedOut(TimeoutError):
    """A shard ran past ``evaluation.task_timeout_s``. Final: running it again would only
    run out of time again."""


def within_time_limit(limit_s: float | None, on_progress: ItemProgress) -> ItemProgress:
    """``on_progress`` that also stops the shard (raises :class:`ShardTimedOut`) when items
    remain after ``limit_s`` seconds from now. Checked between batches, where the records so
    far are written: Prefect's own ``timeout_seconds`` cannot stop a task in a worker thread
    (it raises once the blocking call returns, or inside a half-written record). One batch is
    bounded by the backend's own limits (``max_new_tokens``, the HTTP timeout)."""
    started = time.monotonic()

    def report(done: int, total: int) -> None:
        on_progress(done, total)
        elapsed = time.monotonic() - started
        if limit_s is not None and done < total and elapsed > limit_s:
            raise ShardTimedOut(f"stopped after {elapsed:.1f} s (evaluation.task_timeout_s = {limit_s:g}) with {total - done} of {total} items left")

    return report


def retry_unless_timed_out(_task: Task[..., object], _run: TaskRun, state: State[object]) -> bool:
    """Retry a failed shard (a flaky loader, a worker lost) unless it ran out of time or its
    input cannot run as written (an lmms-eval task's :class:`TaskError`: the same again)."""
    return not isinstance(state.result(raise_on_failure=False), TimeoutError | TaskError)


@task(
    name="evaluate-shard",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_unless_timed_out,
    cache_key_fn=evaluator_cache_key,
    persist_result=True,
    result_serializer="json",
)
def evaluate_shard(
    plan: ValidationPlan,
    shard: EvaluatorShard,
    inputs: ShardInputs,
    out: str,
    cache_dir: str,
    time_limit_s: float | None = None,
    record_cache: RecordCacheSettings | None = None,
) -> ShardResult:
    """One shard of one evaluator on the plan's version; raises (so Prefect retries) when it
    fails. ``inputs``: what its cache key reads besides the plan and the shard (:func:`evaluator_cache_key`). Records are written as they complete, so a retry picks up where it stopped;
    its items are published as they complete (``flows/progress.py``). Past
    ``time_limit_s`` it stops for good (:func:`within_time_limit`). ``record_cache``: the
    shared record cache's settings, opened here (in a Dask worker, its own process: the
    folder the settings name, or the state database its environment names)."""
    from vlgate.evaluators.running.suite import RunOptions, run_evaluator_shard
    from vlgate.registry_hooks.record_cache import open_record_cache

    # a Dask worker is a process of its own: its registry is the MLflow that vlgate's
    # settings name (MLFLOW_TRACKING_URI, or VLGATE_HOME's), as the flow's, not an
    # MLFLOW_REGISTRY_URI it inherited, which would resolve models:/NAME/N to another model
    tracking.connect()
    subject = progress.subject(plan.subject)
    progress.stage(subject, progress.Stage.EVALUATING, evaluator=shard.evaluator, shard=shard.index, shards=shard.n_shards)
    items_done = within_time_limit(time_limit_s, progress.item_counter(subject, shard.evaluator, shard=shard.index, shards=shard.n_shards))
    cache = open_record_cache(record_cache) if record_cache is not None else None
    options = RunOptions(cache_dir=Path(cache_dir), record_cache=cache)
    return run_evaluator_shard(plan.model_uri, plan.suite, Path(out), shard, options, on_progress=items_done, selection=plan.items)


@dataclass(frozen=True)
class Evaluation:
    """The evaluation step of one validation, on a task runner started once for all of its
    looks (threads, or a Dask cluster, as ``vlgate.yaml`` names: for a run started here and
    for one a Prefect worker starts from the deployment alike). Calling it evaluates every
    evaluator of a plan's suite on the plan's version, each split into ``n_shards`` tasks
    of the validation's flow run, merged back into one result in the flow. An evaluator
    that still fails after its retries, or runs past ``task_timeout_s`` (a hung model, a
    template that loops), is an ``error`` entry; one stopped by a server that did not
    answer (``tracking.transient``) raises instead, so that the claim is retried later
    rather than judged. ``record_cache``: the shared record cache's settings, handed to
    every shard."""

    runner: TaskRunner[Any]
    cache_dir: str
    n_shards: int = 1
    task_timeout_s: float | None = None
    record_cache: RecordCacheSettings | None = None
    #: the versions' identities and the data sets' states, read once per validation (:class:`ShardInputs`)
    _read_once: dict[tuple[str, str], str] = field(default_factory=dict, init=False, repr=False)

    def __call__(self, plan: ValidationPlan, out: str) -> dict[str, EvaluatorSummary]:
        from vlgate.evaluators.running.suite import holding_models, merge_shards

        shards: dict[str, list[PrefectFuture[ShardResult]]] = {}
        entries: dict[str, EvaluatorSummary] = {}
        with holding_models():  # one load of the candidate per task thread, not one per evaluator
            for name in plan.suite.evaluators:
                inputs = self._inputs(plan, name)
                shards[name] = [self.runner.submit(evaluate_shard, self._shard_parameters(plan, name, inputs, shard, out)) for shard in range(self.n_shards)]
            for name, futures in shards.items():
                try:
                    # merged here, in the flow: local files under ``out``, which the flow reads next
                    entries[name] = merge_shards(plan.suite, Path(out), name, [future.result() for future in futures], plan.items)
                except Exception as error:  # after its retries: recorded, judged as missing (fail closed)
                    if tracking.transient(error):
                        raise
                    get_run_logger().warning("evaluator %s failed: %s", name, error)
                    entries[name] = EvaluatorSummary.failed(f"{type(error).__name__}: {error}")
        return entries

    def _inputs(self, plan: ValidationPlan, evaluator: str) -> ShardInputs:
        from vlgate.evaluators.backends.loading import mlflow_identity

        def once(kind: str, key: str, read: Callable[[], str]) -> str:
            if (kind, key) not in self._read_once:
                self._read_once[kind, key] = read()
            return self._read_once[kind, key]

        data = plan.suite.evaluators[evaluator].data
        return ShardInputs(
            version_identity=once("version", plan.model_uri, lambda: mlflow_identity(plan.model_uri)[1]),
            data_state=once("data", str(data), lambda: data_state(data)),
        )

    def _shard_parameters(self, plan: ValidationPlan, evaluator: str, inputs: ShardInputs, shard: int, out: str) -> dict[str, object]:
        return {
            "plan": plan, "shard": EvaluatorShard(evaluator=evaluator, index=shard, n_shards=self.n_shards), "inputs": inputs, "out": out,
            "cache_dir": self.cache_dir, "time_limit_s": self.task_timeout_s, "record_cache": self.record_cache,
        }  # fmt: skip


@contextmanager
def evaluation(settings: EvaluationConfig, cache_dir: str, record_cache: RecordCacheSettings | None) -> Iterator[Evaluation]:
    """An :class:`Evaluation` on the task runner ``settings`` name, started for the block
    (a local Dask cluster starts once per validation, not once per look)."""
    with settings.task_runner() as runner:
        yield Evaluation(runner, cache_dir, settings.shards, settings.task_timeout_s, record_cache)


def check_evaluator(evaluator: str, summary: EvaluatorSummary, folder: Path) -> EvaluatorOutput:
    """The evaluator's output, its records parsed and validated once, checked by Great
    Expectations: rows = the data set's items, ids unique, values in range, the label-free
    metrics present. If the check itself cannot run, the output is kept and its
    expectations count as failed."""
    if summary.error is not None:
        return EvaluatorOutput.failed(evaluator, summary.error)
    output = EvaluatorOutput.from_folder(evaluator, folder, summary, expectations_passed=False)
    try:
        from vlgate.flows.expectations import validate_evaluator_output

        if output.samples is None:
            raise ValueError("no valid records")
        report = validate_evaluator_output(evaluator, output.samples, output.metrics or {}, expected_rows=output.expected_rows)
    except Exception as error:  # fail closed, keep what was computed
        output.expectations = {"evaluator": evaluator, "success": False, "error": f"{type(error).__name__}: {error}"}
        return output
    output.expectations, output.expectations_passed = report.as_dict(), report.success
    return output
