"""The loop every runner shares: fingerprint each item, reuse what the store has, open
the images of the rest (a bad image is that item's error, not the run's), compute
batch by batch, and write each batch as it completes.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, Field, JsonValue
from tqdm.auto import tqdm

from vlgate.config import CONFIG_MODEL
from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.backends.base import VisionLanguageBackend
from vlgate.evaluators.backends.kinds import BackendOptions
from vlgate.evaluators.backends.loading import LoadPolicy
from vlgate.evaluators.loaders.items import ItemError, ItemLoadError
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.store import RecordStore, fingerprint

Item = TypeVar("Item")
Prepared = TypeVar("Prepared")
P = TypeVar("P")
#: ``on_progress(done, total)`` of ``Runner.run``: items done (reused, computed or failed to load) out of all
ItemProgress = Callable[[int, int], None]


class EvaluatorSettings(BaseModel):
    """One evaluator's entry in a suite (paths relative to the suite file). An evaluator
    with options of its own subclasses this; the registry names the subclass."""

    model_config = CONFIG_MODEL

    #: fields naming a helper model: resolved against the suite's folder when that path exists
    model_fields_with_paths: ClassVar[tuple[str, ...]] = ()

    data: Path
    format: str = "auto"
    limit: int | None = Field(default=None, ge=1, description="score only the first N items (smoke runs)")
    protocol: str | None = Field(default=None, description="the evaluator's named protocol (its package's protocols.py); default: the benchmark's released code")

    def protocol_overrides(self) -> Mapping[str, int | str | None]:
        """The protocol's generation limits (or the benchmark's inclusion rules) this entry
        changes, by kind (None: unchanged)."""
        return {}

    def loader_options(self) -> dict[str, object]:
        """What this entry tells its data set's loader besides the path and format
        (``loaders.dataset.FORMAT_OPTIONS``): none by default."""
        return {}


@dataclass
class RunnerContext:
    """What a runner factory gets besides its settings: the candidate model, where the
    run writes (``out/EVALUATOR/``), the suite's load policy for helper models, the
    machine's model cache (helper caches shared by every candidate live beside it), and
    the protocol the suite chose (None: the evaluator's default)."""

    vlm: VisionLanguageBackend
    out: Path
    policy: LoadPolicy
    cache_dir: Path | None = None
    protocol: Protocol[Any] | None = None
    #: the suite's engine settings (its ``vllm:`` section), for helper models on that engine
    engine: Mapping[str, Any] = field(default_factory=dict)

    def chosen(self, protocols: tuple[Protocol[P], ...]) -> Protocol[P]:
        """The suite's protocol, else the first (default) of the evaluator's ``protocols``."""
        return self.protocol if self.protocol is not None else protocols[0]

    def load_helper(self, model: str, backend: str) -> VisionLanguageBackend:
        """A helper model (DeCC's LLM agent, its decomposer) behind ``backend``, loaded with
        the suite's load policy, model cache and engine settings, at the backend's own batch size."""
        return backends.load(backend, model, BackendOptions(policy=self.policy, cache_dir=self.cache_dir, engine=self.engine))

    @property
    def shared_cache(self) -> Path:
        return (self.cache_dir or self.out / ".cache") / "evaluator-cache"


@dataclass
class RunResult:
    """Records in item order (reused and new alike), the items that failed, and counts:
    ``reused`` from the run's own store, ``from_cache`` copied from the shared record cache
    (``runners/cache.py``), ``computed`` by this run."""

    evaluator: str
    records: list[Record]
    errors: list[ItemError] = field(default_factory=list)
    reused: int = 0
    computed: int = 0
    from_cache: int = 0


class Identified(typing.Protocol):
    """A data set's item as the suite handles it: named by its id (every loader's item type)."""

    @property
    def id(self) -> str: ...


class Closable(typing.Protocol):
    """A loaded model a runner releases when it is done (``close``)."""

    def close(self) -> None: ...


@dataclass
class Runner(Generic[Item, Prepared]):
    """``prepare`` reads an item's inputs (images) and may raise :class:`ItemLoadError`;
    ``compute`` turns a batch of prepared items into one record each (without
    ``fingerprint`` and ``protocol``, which the loop adds). ``protocol`` is the protocol
    as run (``Protocol.as_run``)."""

    evaluator: str
    models: dict[str, str]
    protocol: str
    prepare: Callable[[Item], Prepared]
    compute: Callable[[list[tuple[Item, Prepared]]], list[Record]]
    settings: dict[str, JsonValue] = field(default_factory=dict)
    #: helper models the factory loaded for this runner (encoders, generators, agents):
    #: closed by ``close``; the candidate model belongs to the caller
    owned: list[Closable] = field(default_factory=list)

    def close(self) -> None:
        """Release the helper models this runner loaded, last loaded first."""
        while self.owned:
            self.owned.pop().close()

    def key(self, item: Item) -> str:
        return fingerprint(self.models, self.evaluator, self.protocol, item, self.settings)

    def run(self, items: Sequence[Item], store: RecordStore, batch_size: int = 8, progress: bool = True, on_progress: ItemProgress | None = None) -> RunResult:
        """Every item's record (reused from ``store``, taken from its cache, or computed); ``progress``: a tqdm bar;
        ``on_progress(done, total)``: told the items done (reused, computed or failed to
        load) out of all, before the first batch and after each one, in this thread."""
        keys = [self.key(item) for item in items]
        local = sum(key in store for key in keys)
        store.take_from_cache(keys)  # what the store lacks and the shared cache has, copied into it
        todo = [i for i, key in enumerate(keys) if key not in store]
        result = RunResult(self.evaluator, [], reused=local, from_cache=len(items) - len(todo) - local)
        failed: set[int] = set()
        bar = tqdm(total=len(todo), desc=self.evaluator, unit="item", disable=not progress or not todo, leave=False)
        if on_progress is not None:
            on_progress(result.reused + result.from_cache, len(items))
        for start in range(0, len(todo), batch_size):
            batch: list[tuple[int, Item, Prepared]] = []
            for index in todo[start : start + batch_size]:
                try:
                    batch.append((index, items[index], self.prepare(items[index])))
                except ItemLoadError as error:
                    result.errors.append(error.error)
                    failed.add(index)
            if batch:
                records = self.compute([(item, prepared) for _, item, prepared in batch])
                for (index, _, _), record in zip(batch, records):
                    record["protocol"], record["fingerprint"] = self.protocol, keys[index]
                store.append(records)
                result.computed += len(records)
            bar.update(len(todo[start : start + batch_size]))
            if on_progress is not None:
                on_progress(result.reused + result.from_cache + min(start + batch_size, len(todo)), len(items))
        bar.close()
        result.records = [store.get(key) for i, key in enumerate(keys) if i not in failed]  # type: ignore[misc]
        return result
