"""An lmms-eval task's suite entry (``kind: lmms-eval``), and the task, loaded through lmms-eval's own API (``TaskManager``, ``get_task_dict``)
and held once per process: its docs, its prompts (``doc_to_messages``), its filters, its
``process_results`` and its aggregations are the task's own code, never re-read from YAML.

lmms-eval is imported only here, and only when a suite names a task (its import takes
seconds and a gigabyte). Its loguru logger is set to warnings (lmms-eval logs every YAML
it indexes at DEBUG), and the Pillow setting its import changes is put back (``_undo_lmms_eval_settings``).

A task's **digest** covers what decides its answers and scores: lmms-eval's version, the
task's whole configuration (with every function it names replaced by the function's
module, name and the sha256 of its source file: a changed ``utils.py`` is a changed task;
and every local data file by its name and content's sha256, not where it lies),
the overrides of the suite entry and the generation settings as run. It is part of every
record's fingerprint, so a changed task never reuses old answers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import inspect
import json
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, JsonValue

from vlgate.evaluators.runners.base import EvaluatorSettings

#: lmms-eval's own default where a task sets no ``max_new_tokens`` (its Hugging Face model classes)
DEFAULT_MAX_NEW_TOKENS = 1024
#: lmms-eval's model name tasks are resolved for: its LLaVA class on Hugging Face, whose
#: chat path (``doc_to_messages`` through the processor's chat template) vlgate's backends follow
MODEL_NAME = "llava_hf"


#: the ``kind`` that makes a suite entry an lmms-eval task
KIND = "lmms-eval"


class LmmsEvalSettings(EvaluatorSettings):
    """``task``: a task of the installed lmms-eval, or one found under ``include_path`` (the
    team's own task folder in lmms-eval's format); the overrides lmms-eval itself accepts.
    The entry's name in the suite is the evaluator's name, and its metrics are
    ``NAME/METRIC``. ``data`` is not read: a task's docs come from its own ``dataset_path``."""

    model_fields_with_paths = ("include_path",)

    kind: Literal["lmms-eval"]
    task: str = Field(min_length=1)
    include_path: str | None = Field(default=None, description="a folder of task YAMLs in lmms-eval's format, searched besides the installed tasks")
    data: Path = Path(".")
    lmms_eval_specific_kwargs: dict[str, JsonValue] | None = Field(default=None, description="merged over the task's own lmms_eval_specific_kwargs.default, as lmms-eval merges them")
    generation_kwargs: dict[str, JsonValue] | None = Field(default=None, description="merged over the task's own generation_kwargs; greedy only")
    drift_metric: str | None = Field(
        default=None, min_length=1, description="the task's metric drift checks compare between batches: a mean of per-doc numbers that needs no label (the task's to say)"
    )

    def protocol_overrides(self) -> Mapping[str, int | str | None]:
        """The task's digest (its first 12 hex digits): the protocol as run names the task as
        it was run, so the gate never compares a candidate and a champion on two versions of it."""
        return {"task": load_task(self).digest[:12]}


class TaskError(ValueError):
    """A task that cannot be used, in one line naming the task (and the doc and field)."""


@dataclass(frozen=True)
class Generation:
    """The generation settings as run: greedy, at most ``max_new_tokens`` new tokens.
    lmms-eval's Hugging Face model classes ignore ``until``, and so does vlgate."""

    max_new_tokens: int

    def as_json(self) -> dict[str, JsonValue]:
        return {"max_new_tokens": self.max_new_tokens, "do_sample": False}


@dataclass(frozen=True)
class AggregationSpec:
    """One metric of the task's ``metric_list``: its aggregation and which way is better."""

    name: str
    aggregate: Callable[[list[Any]], Any]
    higher_is_better: bool
    #: lmms-eval's own ``mean``: the metric is the mean of its per-doc values
    is_mean: bool


@dataclass
class LoadedTask:
    """A task as lmms-eval built it, and what vlgate reads off it."""

    name: str
    task: Any
    docs: Sequence[Mapping[str, Any]]
    generation: Generation
    metrics: tuple[AggregationSpec, ...]
    filters: tuple[str, ...]
    digest: str
    version: str

    def doc(self, doc_id: int) -> Mapping[str, Any]:
        return self.docs[doc_id]


_loaded: dict[str, LoadedTask] = {}
_loading = threading.Lock()


def load_task(settings: LmmsEvalSettings) -> LoadedTask:
    """The entry's task, built once per process for the same entry; :class:`TaskError`
    (one line naming the task) where lmms-eval cannot build it, it names no such task, or
    it asks for something vlgate cannot decide on."""
    key = settings.model_dump_json(exclude={"data"})  # not read; a suite resolves it against its folder
    with _loading:
        if key not in _loaded:
            _loaded[key] = _build(settings)
        return _loaded[key]


def _undo_lmms_eval_settings() -> None:
    """lmms-eval's loguru logger at warnings, no progress bar of ``datasets`` reading a task's
    docs, and Pillow's refusal of truncated images back: lmms-eval's ``api/task.py`` sets
    ``ImageFile.LOAD_TRUNCATED_IMAGES`` when it is imported, which would let a truncated
    data-set image of every evaluator in the process load silently (``evaluators/images.py``
    refuses it)."""
    import datasets
    from loguru import logger
    from PIL import ImageFile

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    datasets.disable_progress_bars()
    ImageFile.LOAD_TRUNCATED_IMAGES = False


_managers: dict[str | None, Any] = {}


def _task_manager(include_path: str | None) -> Any:
    if include_path not in _managers:
        _undo_lmms_eval_settings()
        from lmms_eval.tasks import TaskManager

        try:
            _managers[include_path] = TaskManager(verbosity="WARNING", include_path=include_path, model_name=MODEL_NAME)
        except Exception as error:  # a YAML under include_path that lmms-eval cannot index
            raise TaskError(f"lmms-eval cannot index the tasks under {include_path or 'its own tasks folder'}: {type(error).__name__}: {one_line(error)}") from error
        finally:
            _undo_lmms_eval_settings()
    return _managers[include_path]


def _build(settings: LmmsEvalSettings) -> LoadedTask:
    name = settings.task
    if settings.include_path is not None and not Path(settings.include_path).is_dir():
        raise TaskError(f"lmms-eval task {name!r}: include_path {settings.include_path} is not a folder")
    manager = _task_manager(settings.include_path)
    if name not in manager.all_subtasks:
        known = "groups and tags" if name in manager.all_tasks else "tasks"
        hint = f"; it is one of lmms-eval's {known}, name one of its tasks" if name in manager.all_tasks else ""
        raise TaskError(f"lmms-eval task {name!r}: no such task in lmms-eval {_version()}{' or under ' + settings.include_path if settings.include_path else ''}{hint}")
    from lmms_eval.tasks import get_task_dict

    try:
        task = get_task_dict([name], manager, task_type="chat")[name]
    except KeyError as error:  # lmms-eval builds the first doc's prompt and target as it builds the task
        field = error.args[0] if error.args else "?"
        if field in _splits(manager, name):
            raise TaskError(f"lmms-eval task {name!r}: its data has no split {field!r}, which the task reads its docs from (the keys of dataset_kwargs.data_files name the splits)") from error
        raise TaskError(f"lmms-eval task {name!r}, doc 0: the doc lacks the field {field!r}, which the task reads (lmms-eval reads its first doc as it builds the task)") from error
    except Exception as error:  # a task's utils that cannot be imported, a dataset that cannot be read: lmms-eval raises anything
        raise TaskError(f"lmms-eval task {name!r} cannot be built: {type(error).__name__}: {one_line(error)}") from error
    finally:
        _undo_lmms_eval_settings()
    if task.OUTPUT_TYPE != "generate_until":
        raise TaskError(f"lmms-eval task {name!r}: output_type {task.OUTPUT_TYPE!r}; vlgate runs generate_until tasks")
    if settings.lmms_eval_specific_kwargs:
        task.lmms_eval_specific_kwargs = {**(task.lmms_eval_specific_kwargs or {}), **settings.lmms_eval_specific_kwargs}
    generation = _generation(name, {**(task.config.generation_kwargs or {}), **(settings.generation_kwargs or {})})
    try:
        docs = task.eval_docs
    except Exception as error:
        raise TaskError(f"lmms-eval task {name!r}: its docs cannot be read: {type(error).__name__}: {one_line(error)}") from error
    from lmms_eval.api.metrics import mean

    aggregations, better = task.aggregation(), task.higher_is_better()
    metrics = tuple(AggregationSpec(metric, function, bool(better.get(metric, True)), function is mean) for metric, function in aggregations.items())
    filters = tuple(ensemble.name for ensemble in getattr(task, "_filters", ()))
    version = _version()
    return LoadedTask(name, task, docs, generation, metrics, filters, task_digest(task, settings, generation, version), version)


def _splits(manager: Any, name: str) -> set[str]:
    """The splits the task's YAML names (test, validation, training, few-shot)."""
    try:
        config = manager._get_config(name)
    except Exception:  # the index lmms-eval keeps is its own; without it, no split is named
        return set()
    return {str(config[key]) for key in ("test_split", "validation_split", "training_split", "fewshot_split") if isinstance(config, Mapping) and config.get(key)}


def _generation(name: str, kwargs: Mapping[str, Any]) -> Generation:
    """The task's generation settings with the entry's overrides, refused where they sample
    or search: vlgate decides on greedy answers, as lmms-eval's models give them at temperature 0."""
    temperature = kwargs.get("temperature") or 0
    if not isinstance(temperature, int | float) or temperature > 0 or kwargs.get("do_sample"):
        raise TaskError(f"lmms-eval task {name!r}: generation_kwargs samples (temperature {temperature!r}, do_sample {kwargs.get('do_sample')!r}); vlgate decides on greedy answers only")
    if (kwargs.get("num_beams") or 1) != 1:
        raise TaskError(f"lmms-eval task {name!r}: generation_kwargs num_beams {kwargs['num_beams']!r}; vlgate decodes greedily (num_beams 1)")
    limit = kwargs.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise TaskError(f"lmms-eval task {name!r}: generation_kwargs max_new_tokens {limit!r} is not a positive integer")
    return Generation(limit)


def _version() -> str:
    return importlib.metadata.version("lmms_eval")


def one_line(error: BaseException) -> str:
    """The error's message on one line; where it was raised when it has none (lmms-eval
    raises a bare TypeError for a task without doc_to_target)."""
    if str(error):
        return " ".join(str(error).split())[:300]
    frames = traceback.extract_tb(error.__traceback__)
    return f"raised at {Path(frames[-1].filename).name}:{frames[-1].lineno} ({frames[-1].name})" if frames else repr(error)


def task_digest(task: Any, settings: LmmsEvalSettings, generation: Generation, version: str) -> str:
    """sha256 of what decides the task's answers and scores (module docstring)."""
    config = dataclasses.asdict(task.config)
    if isinstance(config.get("dataset_kwargs"), Mapping) and "data_files" in config["dataset_kwargs"]:
        config["dataset_kwargs"] = {**config["dataset_kwargs"], "data_files": _data_files(config["dataset_kwargs"]["data_files"])}
    payload = {
        "lmms_eval": version,
        "config": _canonical(config),
        "lmms_eval_specific_kwargs": _canonical(task.lmms_eval_specific_kwargs),
        "filters": [[ensemble.name, [_canonical(type(f)) for f in ensemble.filters], [_canonical(vars(f)) for f in ensemble.filters]] for ensemble in getattr(task, "_filters", ())],
        "generation": generation.as_json(),
    }
    return _sha256_of(payload)


def scoring_digest(task: Any) -> str:
    """sha256 of what a task's metrics are computed with: its metric list (each metric's
    name, aggregation and direction) and ``process_results``, functions by their module,
    name and source file's sha256. Two tasks that differ only in their docs, prompts or
    generation (a task's drift batches) score alike."""
    config = dataclasses.asdict(task.config)
    return _sha256_of({"metric_list": _canonical(config.get("metric_list")), "process_results": _canonical(config.get("process_results"))})


def _sha256_of(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


_source_digests: dict[str, str] = {}
_file_digests: dict[tuple[str, int, int], str] = {}


def _data_files(value: Any) -> Any:
    """``dataset_kwargs.data_files`` with each local file as its name and content's sha256,
    not the absolute path lmms-eval resolved it to: a task folder moved elsewhere is the same
    task, and a data file changed under the same name is another."""
    if isinstance(value, Mapping):
        return {str(key): _data_files(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_data_files(item) for item in value]
    if isinstance(value, str) and Path(value).is_file():
        stat = Path(value).stat()
        key = (str(Path(value).resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _file_digests:
            digest = hashlib.sha256()
            with open(value, "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    digest.update(block)
            _file_digests[key] = digest.hexdigest()
        return {"file": Path(value).name, "sha256": _file_digests[key]}
    return value


def _canonical(value: Any) -> Any:
    """A config value as stable JSON: functions and classes as their module, name and
    source file's sha256 (never their address)."""
    if callable(value) and hasattr(value, "__qualname__"):
        module = inspect.getmodule(value)
        source = getattr(module, "__file__", None)
        if source is not None and source not in _source_digests:
            _source_digests[source] = hashlib.sha256(Path(source).read_bytes()).hexdigest()
        return {"function": f"{getattr(value, '__module__', '?')}.{value.__qualname__}", "source_sha256": _source_digests.get(source or "", None)}
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value) if " at 0x" not in repr(value) else type(value).__qualname__
