"""A suite: which evaluators to run on which data, with which helper models; and the one
function that runs it on a model (``vlgate evaluate``, and the validation flow's tasks).

A suite file is YAML with paths relative to the file: ``name``, ``batch_size``,
``backend``, ``policy`` ({trust_remote_code, allow_pickle}), ``max_image_pixels`` (the pixel
budget every data-set image is opened within: an image whose header declares more is that
item's error, refused before it is decoded; default 40,000,000, at most 89,478,485,
``evaluators/images.py``), ``vllm`` (engine settings
passed to ``vllm.LLM`` when ``backend: vllm``: ``dtype``, ``max_model_len``,
``gpu_memory_utilization``, ``limit_mm_per_prompt``, ...; ignored by the other backends)
and ``evaluators`` (one entry per evaluator, fields below). ``vlgate make-world`` writes a complete one
(``evaluators.world.build.WORLD_SUITE``).

Output under ``out``: ``EVALUATOR/records.jsonl`` (per-sample records, each with its
fingerprint; written as batches complete, so a rerun resumes), ``EVALUATOR/metrics.json``,
``EVALUATOR/errors.jsonl`` (items that could not be loaded), and ``summary.json``.

A distributed run splits one evaluator's items into shards (``run_evaluator_shard`` of an
:class:`EvaluatorShard`: items k, k+N, k+2N, ... into ``EVALUATOR/shards/K-of-N.jsonl``,
resumable the same way) and
``merge_shards`` puts the records back in item order and scores them as one run: the
same files and metrics as ``run_suite``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, SerializeAsAny, ValidationError, ValidationInfo, create_model, field_validator

from vlgate.config import CONFIG_MODEL, load_yaml_model
from vlgate.evaluators import images, protocols, registry
from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.backends.base import VisionLanguageBackend
from vlgate.evaluators.backends.deferred import Deferred
from vlgate.evaluators.backends.kinds import BackendOptions
from vlgate.evaluators.backends.loading import LoadPolicy
from vlgate.evaluators.lmms.tasks import KIND as LMMS_EVAL
from vlgate.evaluators.lmms.tasks import LmmsEvalSettings, TaskError
from vlgate.evaluators.loaders.items import ItemError
from vlgate.evaluators.metrics.common import Metrics
from vlgate.evaluators.output import EvaluatorSummary, ShardResult, SummaryJson
from vlgate.evaluators.records import Record, parse_jsonl
from vlgate.evaluators.runners.base import EvaluatorSettings, ItemProgress, Runner, RunnerContext, RunResult
from vlgate.evaluators.runners.cache import RecordCache
from vlgate.evaluators.runners.store import RecordStore, record_fingerprint
from vlgate.evaluators.running.items import ItemIds, ItemSelection, load_items
from vlgate.evaluators.scoring import score, validate

Item = TypeVar("Item")
Prepared = TypeVar("Prepared")


class SuiteSummary(TypedDict):
    """What ``run_suite`` returns and writes (``summary.json``): the model, the suite, the
    backend's description and each evaluator's summary entry (``EvaluatorSummary.as_json``)."""

    model: str
    suite: str
    backend: dict[str, JsonValue]
    evaluators: dict[str, SummaryJson]


def _settings_model(known: tuple[tuple[str, type[EvaluatorSettings]], ...]) -> type[BaseModel]:
    """The ``evaluators:`` section as a model: one optional field per registered evaluator,
    typed by the registry's settings model, so a bad entry is named by its path
    (``evaluators.lcm-mc.data: Field required``) and an unknown evaluator is refused."""
    fields: dict[str, Any] = {name.replace("-", "_"): (settings | None, Field(default=None, alias=name)) for name, settings in known}
    return create_model("Evaluators", __config__=ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=False), **fields)


def _is_task_entry(entry: object) -> bool:
    return isinstance(entry, LmmsEvalSettings) or (isinstance(entry, Mapping) and entry.get("kind") == LMMS_EVAL)


def _task_entries(tasks: Mapping[str, object], base: Path | None) -> dict[str, EvaluatorSettings]:
    """The ``kind: lmms-eval`` entries, each validated, its task loaded through lmms-eval and
    its evaluator defined under the entry's name (``evaluators/lmms/``): a task that does
    not exist or cannot be built is refused here, when the suite is read."""
    from vlgate.evaluators.lmms.definition import definition_for

    entries: dict[str, EvaluatorSettings] = {}
    for name, entry in tasks.items():
        if isinstance(entry, Mapping) and isinstance(entry.get("include_path"), str) and base is not None and not Path(entry["include_path"]).is_absolute():
            entry = {**entry, "include_path": str(base / entry["include_path"])}
        try:
            settings = entry if isinstance(entry, LmmsEvalSettings) else LmmsEvalSettings.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            raise ValueError(f"evaluators.{name}.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        try:
            registry.define(definition_for(name, settings))
        except (TaskError, registry.DefinitionConflict) as error:
            raise ValueError(f"evaluators.{name}: {error}") from None
        entries[name] = settings
    return entries


def define_logged_tasks(suite_text: str, base: Path | None = None) -> list[str]:
    """The lmms-eval evaluators of a suite as a validation run logged it (under ``config/``),
    defined in this process as reading the suite defined them in the flow's (``base``: the
    suite's folder then, which a relative ``include_path`` names a folder in): what a report,
    ``vlgate diff`` or a judgement read back from MLflow needs to read those evaluators'
    records. The names defined."""
    from vlgate.config import parse_yaml

    entries = (parse_yaml(suite_text) or {}).get("evaluators") or {}
    tasks = {name: entry for name, entry in entries.items() if _is_task_entry(entry) and name not in registry.names()} if isinstance(entries, dict) else {}
    return list(_task_entries(tasks, base))


class Suite(BaseModel):
    model_config = CONFIG_MODEL

    name: str
    batch_size: int = Field(default=8, ge=1)
    backend: str = Field(default="transformers", description="the backend the candidate runs on (evaluators/backends/kinds.py)")
    policy: LoadPolicy = LoadPolicy()
    max_image_pixels: int = Field(
        default=images.DEFAULT_MAX_PIXELS,
        gt=0,
        le=images.LARGEST_BUDGET,
        description="an image whose header declares more pixels (width × height) is its item's error, never decoded (evaluators/images.py)",
    )
    vllm: dict[str, Any] = Field(default_factory=dict)
    champion_items: Literal["evaluate", "shared"] = Field(
        default="evaluate",
        description=(
            "a comparison whose champion has no records of some of the candidate's items: 'evaluate' runs the champion on exactly "
            "those items before judging (the record cache makes that their cost alone), 'shared' compares on the items both have "
            "(flows/champion_items.py)"
        ),
    )
    #: dumped as each entry's own settings model (with its own fields), not as the base class
    evaluators: dict[str, SerializeAsAny[EvaluatorSettings]]

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        backends.get(value)  # UnknownBackendError (a ValueError) names the known ones
        return value

    def backend_options(self, cache_dir: Path | None = None) -> BackendOptions:
        """How the suite loads a model: its load policy, batch size and engine settings."""
        return BackendOptions(policy=self.policy, cache_dir=cache_dir, batch_size=self.batch_size, engine=self.vllm)

    @field_validator("evaluators", mode="before")
    @classmethod
    def _by_registry(cls, value: object, info: ValidationInfo) -> object:
        """Each entry validated by its evaluator's settings model, in the registry's order;
        then the lmms-eval tasks, their folders read relative to the suite file's (the
        validation context's ``base``)."""
        if not isinstance(value, dict) or all(isinstance(v, EvaluatorSettings) and not isinstance(v, LmmsEvalSettings) for v in value.values()):
            return value
        tasks = {name: entry for name, entry in value.items() if _is_task_entry(entry)}
        known = tuple((definition.name, definition.settings) for definition in registry.definitions() if definition.name not in tasks)
        parsed = _settings_model(known).model_validate({name: entry for name, entry in value.items() if name not in tasks})
        entries: dict[str, EvaluatorSettings] = {name: getattr(parsed, name.replace("-", "_")) for name, _ in known if getattr(parsed, name.replace("-", "_")) is not None}
        entries |= _task_entries(tasks, (info.context or {}).get("base"))
        for name, entry in entries.items():
            try:
                registry.get(name).protocol(entry.protocol)
            except protocols.UnknownProtocolError as error:
                raise ValueError(f"evaluators.{name}.protocol: {error}") from None
        return entries

    def protocols(self) -> dict[str, str]:
        """Each evaluator's protocol as its records will carry it (``Protocol.as_run``)."""
        return {name: registry.get(name).protocol(spec.protocol).as_run(**spec.protocol_overrides()) for name, spec in self.evaluators.items()}

    @classmethod
    def from_file(cls, path: str | Path) -> Suite:
        path = Path(path)
        return load_yaml_model(cls, path, "suite", context={"base": path.parent.resolve()}).relative_to(path.parent)

    def relative_to(self, base: Path) -> Suite:
        """Resolve relative data and model paths against the suite file's folder."""
        updated = {}
        for name, spec in self.evaluators.items():
            changes: dict[str, Any] = {"data": spec.data if spec.data.is_absolute() else base / spec.data}
            for field_name in spec.model_fields_with_paths:
                value = getattr(spec, field_name, None)
                if value and (base / value).exists():
                    changes[field_name] = str(base / value)
            updated[name] = spec.model_copy(update=changes)
        return self.model_copy(update={"evaluators": updated})


def finish_evaluator(result: RunResult, out: Path) -> Metrics:
    """Rewrite the records file in item order with only this run's records, validate them
    against the record contract, score them, and write metrics and errors beside them."""
    folder = out / result.evaluator
    ordered = folder / "records.jsonl"
    temporary = folder / "records.jsonl.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        for record in result.records:
            handle.write(json.dumps(record) + "\n")
    os.replace(temporary, ordered)
    valid = validate(result.evaluator, parse_jsonl(json.dumps(r) for r in result.records), source=str(ordered))
    extra_inputs = registry.get(result.evaluator).features
    features = extra_inputs(valid.records, folder) if extra_inputs is not None else None
    metrics = score(valid, features=features)
    metrics["n_item_errors"] = len(result.errors)
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
    with open(folder / "errors.jsonl", "w", encoding="utf-8") as handle:
        for error in result.errors:
            handle.write(json.dumps({"source": error.source, "id": error.item_id, "field": error.field, "message": error.message}) + "\n")
    return metrics


def transformers_batch_size(suite: Suite) -> int:
    """Requests a transformers forward pass holds under ``suite`` (``backends.transformers_batch_size``)."""
    return backends.transformers_batch_size(suite.batch_size)


def load_vlm(model: str, suite: Suite, cache_dir: Path | None = None) -> VisionLanguageBackend:
    """The candidate model behind the suite's backend (loaded on first use where the backend
    can describe it first: ``backends/deferred.py``)."""
    return backends.load(suite.backend, model, suite.backend_options(cache_dir))


# Candidate models kept loaded across the shards of one evaluation (``holding_models``),
# per thread: a thread's backend is never used by another
_hold_lock = threading.Lock()
_holders = 0
_held: dict[tuple[Any, ...], VisionLanguageBackend] = {}


@contextlib.contextmanager
def holding_models() -> Iterator[None]:
    """While open, the candidate model a shard loads in this process stays loaded for the
    next shard of the same model and suite settings in the same thread, instead of every
    evaluator loading it again (on a GPU, a 7B model's weights; here, the weights and the
    chat template's child process); closed when the last open context exits. The
    validation flow holds it around its evaluator tasks (``flows/evaluation.py``)."""
    global _holders
    with _hold_lock:
        _holders += 1
    try:
        yield
    finally:
        with _hold_lock:
            _holders -= 1
            released = list(_held.values()) if _holders == 0 else []
            if _holders == 0:
                _held.clear()
        for vlm in released:
            vlm.close()


def _shard_vlm(model: str, suite: Suite, cache_dir: Path | None) -> tuple[VisionLanguageBackend, bool]:
    """(the candidate model for one shard, whether it is held: then the shard must not close it)."""
    key = (model, suite.backend, suite.policy.model_dump_json(), json.dumps(suite.vllm, sort_keys=True, default=str), suite.batch_size, str(cache_dir), threading.get_ident())
    with _hold_lock:
        held = _held.get(key) if _holders else None
        if held is not None and not (isinstance(held, Deferred) and held.load_error is not None):  # a failed load is tried again
            return held, True
    vlm = load_vlm(model, suite, cache_dir)
    with _hold_lock:
        if _holders:
            _held[key] = vlm
            return vlm, True
    return vlm, False


def count_items(suite: Suite, evaluators: set[str]) -> dict[str, int]:
    """The items the suite runs of each of ``evaluators`` (their data sets loaded as a run loads them)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        return {name: len(load_items(name, spec, Path(scratch) / name, max_image_pixels=suite.max_image_pixels)[0]) for name, spec in suite.evaluators.items() if name in evaluators}


def make_runner(name: str, spec: EvaluatorSettings, vlm: VisionLanguageBackend, out: Path, suite: Suite, cache_dir: Path | None = None) -> Runner[Any, Any]:
    """The evaluator's runner from its registry factory; the caller closes it (``runner.close()``
    releases the helper models it loaded). Its ``prepare`` opens each item's images within
    the suite's ``max_image_pixels`` (an image over it is that item's error)."""
    definition = registry.get(name)
    context = RunnerContext(vlm=vlm, out=out, policy=suite.policy, cache_dir=cache_dir, protocol=definition.protocol(spec.protocol), engine=suite.vllm)
    runner = definition.build_runner(spec, context)
    runner.prepare = _within_budget(runner.prepare, suite.max_image_pixels)
    return runner


def _within_budget(prepare: Callable[[Item], Prepared], max_image_pixels: int) -> Callable[[Item], Prepared]:
    def prepare_within_budget(item: Item) -> Prepared:
        with images.pixel_budget(max_image_pixels):
            return prepare(item)

    return prepare_within_budget


class _ShardWorkers(TypedDict, total=False):
    shard_workers: list[str]


def finished_entry(result: RunResult, out: Path, n_items: int, n_load_errors: int, models: Mapping[str, JsonValue], protocol: str, shard_workers: list[str] | None = None) -> EvaluatorSummary:
    """One evaluator's summary entry: its records finished and scored (``finish_evaluator``),
    the counts, and the protocol it ran under."""
    fields: _ShardWorkers = {"shard_workers": shard_workers} if shard_workers is not None else {}
    return EvaluatorSummary(
        protocol=protocol,
        metrics=finish_evaluator(result, out),
        n_items=n_items,
        n_load_errors=n_load_errors,
        reused=result.reused,
        computed=result.computed,
        from_cache=result.from_cache,
        item_errors=[str(error) for error in result.errors],
        models=models,
        **fields,
    )


@dataclass(frozen=True)
class RunOptions:
    """How a run goes, beside what it runs (nothing here changes a record): the folder
    model downloads are cached in, the shared record cache records are looked up in before
    they are computed (and put in after, beside ``out``'s own records files), and whether
    a progress bar is drawn. One object, so that ``run_suite`` and ``run_evaluator_shard``
    take the same knobs the same way."""

    cache_dir: Path | None = None
    record_cache: RecordCache | None = None
    progress: bool = False


class EvaluatorShard(BaseModel):
    """One shard of one evaluator's items: items ``index``, ``index + n_shards``, ... of
    its data set (of a look's selection). A model because it crosses Prefect's task
    boundary (``flows/evaluation.py``), whose cache key reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluator: str
    index: int = 0
    n_shards: int = 1

    def take(self, items: Sequence[Item]) -> Sequence[Item]:
        """This shard's items of all of the evaluator's ``items``, in their order."""
        return items[self.index :: self.n_shards]


def run_suite(
    model: str,
    suite: Suite,
    out: Path,
    options: RunOptions = RunOptions(progress=True),
    only: list[str] | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> SuiteSummary:
    """Run every evaluator of the suite (or the ``only`` ones) on ``model``; write records,
    metrics and ``summary.json`` (``summary-EVALUATOR.json`` for a single evaluator, so
    evaluators run as separate tasks do not overwrite each other's summary).
    ``on_progress(evaluator, done, total)``: each runner's items as they complete.
    ``options``: the model cache, the shared record cache and the progress bar
    (:class:`RunOptions`; by default a bar is drawn).

    An evaluator that fails is reported in the summary (``error``) and the others still
    run; records already written stay in its records file for the next attempt."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    selected = {name: spec for name, spec in suite.evaluators.items() if only is None or name in only}
    if only is not None and set(only) - set(selected):
        raise ValueError(f"suite {suite.name!r} has no evaluator {sorted(set(only) - set(selected))}")
    vlm = load_vlm(model, suite, options.cache_dir)
    summary: SuiteSummary = {"model": model, "suite": suite.name, "backend": {}, "evaluators": {}}
    try:
        for name, spec in selected.items():
            try:
                items, load_errors = load_items(name, spec, out, max_image_pixels=suite.max_image_pixels)
                runner = make_runner(name, spec, vlm, out, suite, options.cache_dir)
                try:
                    counter = functools.partial(on_progress, name) if on_progress is not None else None
                    result = runner.run(items, RecordStore(out / name / "records.jsonl", options.record_cache), suite.batch_size, options.progress, on_progress=counter)
                finally:
                    runner.close()
                result.errors = load_errors + result.errors
                entry = finished_entry(result, out, len(items), len(load_errors), runner.models, runner.protocol)
            except Exception as error:  # one evaluator's failure must not discard the others' results
                if isinstance(vlm, Deferred) and vlm.load_error is error:
                    raise  # the candidate itself does not load: nothing can be evaluated (as a load before the first evaluator)
                entry = EvaluatorSummary.failed(str(error) if isinstance(error, TaskError) else f"{type(error).__name__}: {error}", bad_input=isinstance(error, TaskError))
            summary["evaluators"][name] = entry.as_json()
        summary["backend"] = vars(vlm.info)  # the loaded model's, or only its description when every record came from the cache
    finally:
        vlm.close()
    summary_name = f"summary-{only[0]}.json" if only is not None and len(only) == 1 else "summary.json"
    (out / summary_name).write_text(json.dumps(summary, indent=2, default=str))
    return summary


def shard_store_path(out: Path, evaluator: str, shard: int, n_shards: int) -> Path:
    return Path(out) / evaluator / "shards" / f"{shard}-of-{n_shards}.jsonl"


def _spec(suite: Suite, evaluator: str) -> EvaluatorSettings:
    specs = suite.evaluators
    if evaluator not in specs:
        raise ValueError(f"suite {suite.name!r} has no evaluator {evaluator!r} (it has {sorted(specs)})")
    return specs[evaluator]


def run_evaluator_shard(
    model: str,
    suite: Suite,
    out: Path,
    shard: EvaluatorShard,
    options: RunOptions = RunOptions(),
    on_progress: ItemProgress | None = None,
    selection: ItemSelection | ItemIds | None = None,
) -> ShardResult:
    """The ``shard``'s items of its evaluator on ``model`` (of a look's ``selection``).
    Raises when the evaluator fails (the caller retries; records already written are
    kept). Returns what ``merge_shards`` needs: the records' fingerprints in item order,
    the item errors and the counts. ``on_progress(done, total)``: the shard's items as
    they complete. ``options``: as ``run_suite``'s (a worker process builds its record
    cache from the run's settings; by default no progress bar)."""
    if not 0 <= shard.index < shard.n_shards:
        raise ValueError(f"shard {shard.index} is not in 0..{shard.n_shards - 1}")
    evaluator = shard.evaluator
    spec = _spec(suite, evaluator)
    out = Path(out)
    items, _ = load_items(evaluator, spec, out, selection, suite.max_image_pixels)
    vlm, held = _shard_vlm(model, suite, options.cache_dir)
    try:
        runner = make_runner(evaluator, spec, vlm, out, suite, options.cache_dir)
        try:
            store = RecordStore(shard_store_path(out, evaluator, shard.index, shard.n_shards), options.record_cache)
            result = runner.run(shard.take(items), store, suite.batch_size, options.progress, on_progress=on_progress)
        finally:
            runner.close()
    finally:
        if not held:
            vlm.close()
    return ShardResult(
        shard=shard.index,
        n_shards=shard.n_shards,
        fingerprints=[record_fingerprint(record) for record in result.records],
        item_errors=[{"source": error.source, "item_id": error.item_id, "field": error.field, "message": error.message} for error in result.errors],
        reused=result.reused,
        computed=result.computed,
        from_cache=result.from_cache,
        models=runner.models,
        protocol=runner.protocol,
        worker=f"{socket.gethostname()}:{os.getpid()}",
    )


def merge_shards(suite: Suite, out: Path, evaluator: str, shards: list[ShardResult], selection: ItemSelection | ItemIds | None = None) -> EvaluatorSummary:
    """Every shard's records, back in item order (a look's order), written and scored as
    one run; returns the evaluator's summary entry (as ``run_suite`` has it)."""
    out = Path(out)
    n_shards = {shard.n_shards for shard in shards}
    if len(n_shards) != 1 or sorted(shard.shard for shard in shards) != list(range(next(iter(n_shards), 0))):
        raise ValueError(f"{evaluator}: shards {[(s.shard, s.n_shards) for s in shards]} are not one complete split")
    items, load_errors = load_items(evaluator, _spec(suite, evaluator), out, selection, suite.max_image_pixels)
    position: dict[JsonValue, int] = {item.id: index for index, item in enumerate(items)}
    records: list[Record] = []
    for shard in shards:
        store = RecordStore(shard_store_path(out, evaluator, shard.shard, shard.n_shards))
        for key in shard.fingerprints:
            record = store.get(key)
            if record is None:
                raise ValueError(f"{evaluator}: shard {shard.shard}-of-{shard.n_shards} lists a record its store does not hold ({key})")
            records.append(record)
    records.sort(key=lambda record: position[record["id"]])
    item_errors = [ItemError(**error) for shard in shards for error in shard.item_errors]
    reused, computed, from_cache = sum(shard.reused for shard in shards), sum(shard.computed for shard in shards), sum(shard.from_cache for shard in shards)
    result = RunResult(evaluator, records, errors=load_errors + item_errors, reused=reused, computed=computed, from_cache=from_cache)
    workers = [shard.worker for shard in sorted(shards, key=lambda shard: shard.shard)]
    return finished_entry(result, out, len(items), len(load_errors), shards[0].models, shards[0].protocol, shard_workers=workers)
