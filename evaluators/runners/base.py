"""The loop every runner shares: fingerprint each item, reuse what the store has, open
the images of the rest (a bad image is that item's error, not the run's), compute
batch by batch, and write each batch as it completes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from tqdm.auto import tqdm

from vlgate.evaluators.loaders.items import ItemError, ItemLoadError
from vlgate.evaluators.runners.store import RecordStore, fingerprint

Item = TypeVar("Item")
Prepared = TypeVar("Prepared")


@dataclass
class RunResult:
    """Records in item order (reused and new alike), the items that failed, and counts."""

    evaluator: str
    records: list[dict[str, Any]]
    errors: list[ItemError] = field(default_factory=list)
    reused: int = 0
    computed: int = 0


@dataclass
class Runner(Generic[Item, Prepared]):
    """``prepare`` reads an item's inputs (images) and may raise :class:`ItemLoadError`;
    ``compute`` turns a batch of prepared items into one record each (without
    ``fingerprint``, which the loop adds)."""

    evaluator: str
    models: dict[str, str]
    prompt_version: str
    prepare: Callable[[Item], Prepared]
    compute: Callable[[list[tuple[Item, Prepared]]], list[dict[str, Any]]]
    settings: dict[str, Any] = field(default_factory=dict)

    def key(self, item: Item) -> str:
        return fingerprint(self.models, self.evaluator, self.prompt_version, item, self.settings)

    def run(self, items: Sequence[Item], store: RecordStore, batch_size: int = 8, progress: bool = True) -> RunResult:
        keys = [self.key(item) for item in items]
        todo = [i for i, key in enumerate(keys) if key not in store]
        result = RunResult(self.evaluator, [], reused=len(items) - len(todo))
        failed: set[int] = set()
        bar = tqdm(total=len(todo), desc=self.evaluator, unit="item", disable=not progress or not todo, leave=False)
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
                    record["fingerprint"] = keys[index]
                store.append(records)
                result.computed += len(records)
            bar.update(len(todo[start : start + batch_size]))
        bar.close()
        result.records = [store.get(key) for i, key in enumerate(keys) if i not in failed]  # type: ignore[misc]
        return result
