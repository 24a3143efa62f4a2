"""An evaluator's items as a run takes them: its data set loaded (once per validation under
:func:`remembering_items`) and, at a sequential look, the look's share of them
(:class:`ItemSelection`) or exactly the items named (:class:`ItemIds`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from vlgate.evaluators import images, registry
from vlgate.evaluators.loaders.items import ItemError
from vlgate.evaluators.runners.base import EvaluatorSettings, Identified

T = TypeVar("T")
IdentifiedItem = TypeVar("IdentifiedItem", bound=Identified)


class ItemSelection(BaseModel):
    """A look of the sequential gate: the first ``fraction`` of an evaluator's items in an
    order that is random (seeded) and stratified by its breakdown field, so that every look
    is a fair sample of the whole (``metrics/sequential.py:stratified_order``). The order is
    the same at every look, so a look's items are the earlier look's and more: each item
    stays in its shard, and its record is reused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    fraction: float = Field(gt=0, le=1)

    def apply(self, items: list[T], group_field: str | None, evaluator: str) -> list[T]:
        from vlgate.evaluators.metrics.sequential import items_at, stratified_order

        strata = [getattr(item, group_field, None) if group_field else None for item in items]
        order = stratified_order(list(range(len(items))), strata, self.seed)
        return [items[index] for index in order[: items_at(self.fraction, len(items))]]


class ItemIds(BaseModel):
    """Exactly the items named, per evaluator, in the data set's order: the champion on the
    candidate's items it has no records of (``flows/champion_items.py``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ids: dict[str, tuple[str, ...]]

    def apply(self, items: list[IdentifiedItem], group_field: str | None, evaluator: str) -> list[IdentifiedItem]:
        wanted = set(self.ids.get(evaluator, ()))
        return [item for item in items if str(item.id) in wanted]


_item_memo_holders = 0


_item_memo: dict[tuple[object, ...], tuple[tuple[Identified, ...], tuple[ItemError, ...]]] = {}


_item_memo_lock = threading.Lock()


@contextlib.contextmanager
def remembering_items() -> Iterator[None]:
    """While open, an evaluator's data set is loaded (read, parsed, every image opened and
    verified) once in this process, and every later shard, merge and count of the same
    entry gets the same items: a validation's looks read one fixed data set, as its plan's
    digests describe it. Forgotten when the last open context exits, so that a long-running
    service reads the data again at its next validation. The items are frozen dataclasses:
    sharing them is safe."""
    global _item_memo_holders
    with _item_memo_lock:
        _item_memo_holders += 1
    try:
        yield
    finally:
        with _item_memo_lock:
            _item_memo_holders -= 1
            if _item_memo_holders == 0:
                _item_memo.clear()


def load_items(
    name: str, spec: EvaluatorSettings, out: Path, selection: ItemSelection | ItemIds | None = None, max_image_pixels: int = images.DEFAULT_MAX_PIXELS
) -> tuple[Sequence[Identified], list[ItemError]]:
    """The items to run (and the loader's per-item errors): :func:`loaded_items` (once per
    validation under :func:`remembering_items`); of those, a look's ``selection``."""
    definition = registry.get(name)
    # an evaluator's own loader may write beside its records (lcm-nb's pairing): one load per output folder
    key = (name, spec.model_dump_json(), max_image_pixels, str(out) if definition.load_items is not None else None)
    with _item_memo_lock:
        remembered = _item_memo.get(key) if _item_memo_holders else None
    if remembered is None:
        items, errors = loaded_items(name, spec, out, max_image_pixels)
        remembered = (tuple(items), tuple(errors))
        with _item_memo_lock:
            if _item_memo_holders:
                _item_memo[key] = remembered
    items, errors = list(remembered[0]), list(remembered[1])
    return (items if selection is None else selection.apply(items, definition.group_field, name)), errors


def loaded_items(name: str, spec: EvaluatorSettings, out: Path, max_image_pixels: int = images.DEFAULT_MAX_PIXELS) -> tuple[Sequence[Identified], list[ItemError]]:
    """The items to run (and the loader's per-item errors): the evaluator's own
    ``load_items`` where the registry names one, else its data set's loader, told what the
    suite's protocol reads (``Protocol.loader_options``) and the entry's own options; of
    those, the entry's ``limit``. A loader that decodes an image (comparing two) does so
    within the suite's ``max_image_pixels``."""
    from vlgate.evaluators.loaders import load_dataset

    definition = registry.get(name)
    with images.pixel_budget(max_image_pixels):
        if definition.load_items is not None:
            return definition.load_items(spec, out)
        # the protocol reads the data as its released code does; the entry's own rules come on top
        options = {**definition.protocol(spec.protocol).loader_options, **spec.loader_options()}
        dataset = load_dataset(name, spec.data, spec.format, verify_images=True, **options)
        return dataset.items[: spec.limit], dataset.errors
