"""NaturalBench-format units from separate image–question pairs, by seeded random pairing
(docs/metrics.md#lcm-nb, unlabelled data; VL-LCM paper §3.3, last paragraph).

Unit for pairs a, b: images (V_a, V_b), texts (T_a, T_b), ``answer=None``, ``text_kind="question"``,
id ``"{a.id}+{b.id}"``, category the pair's category when both share it.

How the pairing is drawn (choices where the paper is silent):

- Order: the pairs sorted by SHA-256 of ``"{seed}:{id}"``; consecutive compatible items are
  paired. A hash rather than a random generator, so the units depend only on the seed and the
  items themselves: not on the order of the input file, nor on the numpy or Python version. The
  returned :class:`Pairing` is still what should be recorded: :func:`units_from_pairing`
  rebuilds exactly those units.
- Compatible: different image files and different question texts (case and spacing ignored).
  The paper asks for pairs "with less chance of being true logically for crossing
  image-question pairs"; with the same image or the same question a crossing pair *is* one of
  the original pairs, so such partners are skipped and the next compatible one is taken.
- Each item is in at most one unit. Items left without a partner (the odd one out, or one
  compatible with none of the remaining items) are listed in ``Pairing.unpaired``, never
  dropped silently.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict, TypeVar

from vlgate.evaluators.loaders.items import NbUnit

T = TypeVar("T")


class Identified(Protocol):
    """An item a pairing names by its id."""

    @property
    def id(self) -> str: ...


ItemT = TypeVar("ItemT", bound=Identified)


class PairingRecord(TypedDict):
    """:meth:`Pairing.as_dict`: a pairing as it is recorded (JSON); ``unpaired`` and ``method``
    may be absent from an older record."""

    seed: int
    pairs: list[list[str]]
    unpaired: NotRequired[list[str]]
    method: NotRequired[str]

#: Names the ordering rule, recorded with every pairing so a change of rule is visible.
PAIRING_METHOD = "sha256(seed:id) order, greedy compatible neighbours, v1"


@dataclass(frozen=True)
class YesNoItem:
    """One image–question pair (the local ``yesno/items.jsonl``): a yes/no question about an image."""

    id: str
    image: Path
    question: str
    answer: str | None = None  # "yes" | "no"
    category: str | None = None


@dataclass(frozen=True)
class Pairing:
    """Which items formed which unit, under which seed: record it with the run's results."""

    seed: int
    pairs: tuple[tuple[str, str], ...]
    unpaired: tuple[str, ...] = ()
    method: str = PAIRING_METHOD

    def as_dict(self) -> PairingRecord:
        return {"seed": self.seed, "method": self.method, "pairs": [list(pair) for pair in self.pairs], "unpaired": list(self.unpaired)}

    @classmethod
    def from_dict(cls, data: PairingRecord) -> Pairing:
        return cls(int(data["seed"]), tuple((str(a), str(b)) for a, b in data["pairs"]), tuple(str(i) for i in data.get("unpaired", ())), data.get("method", PAIRING_METHOD))


def seeded_order(items: Sequence[ItemT], seed: int, key: Callable[[ItemT], str] = lambda item: item.id) -> list[ItemT]:
    """``items`` in a pseudo-random order that depends only on ``seed`` and each item's id."""
    return sorted(items, key=lambda item: (hashlib.sha256(f"{seed}:{key(item)}".encode()).hexdigest(), key(item)))


def greedy_pairs(ordered: Sequence[T], compatible: Callable[[T, T], bool]) -> tuple[list[tuple[T, T]], list[T]]:
    """Walk ``ordered``: each unpaired item takes the first later unpaired item it is compatible with."""
    pending = list(ordered)
    pairs: list[tuple[T, T]] = []
    unpaired: list[T] = []
    while pending:
        first = pending.pop(0)
        partner = next((index for index, other in enumerate(pending) if compatible(first, other)), None)
        if partner is None:
            unpaired.append(first)
        else:
            pairs.append((first, pending.pop(partner)))
    return pairs, unpaired


def normalised_text(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip().casefold()


def _check_unique_ids(items: Sequence[Identified]) -> None:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise ValueError(f"duplicate item id {item.id!r}: a pairing names items by id, so ids must be unique")
        seen.add(item.id)


def _unit(a: YesNoItem, b: YesNoItem) -> NbUnit:
    category = a.category if a.category == b.category else None
    return NbUnit(f"{a.id}+{b.id}", (a.image, b.image), (a.question, b.question), None, category, "question")


def crossing_is_new(image_of: Callable[[T], Path], text_of: Callable[[T], str]) -> Callable[[T, T], bool]:
    """Compatibility test: different image files and different texts (keys computed once per item)."""
    keys: dict[int, tuple[str, str]] = {}

    def key(item: T) -> tuple[str, str]:
        if id(item) not in keys:
            keys[id(item)] = (os.path.normpath(os.path.abspath(image_of(item))), normalised_text(text_of(item)))
        return keys[id(item)]

    def compatible(a: T, b: T) -> bool:
        (image_a, text_a), (image_b, text_b) = key(a), key(b)
        return image_a != image_b and text_a != text_b

    return compatible


def pair_unlabelled(pairs: Sequence[YesNoItem], seed: int) -> tuple[list[NbUnit], Pairing]:
    """Units from image–question pairs by seeded random pairing, and the pairing to record.

    Same items and seed → same units, whatever the input order; every item is in exactly one
    unit or in ``Pairing.unpaired``."""
    _check_unique_ids(pairs)
    matched, left = greedy_pairs(seeded_order(pairs, seed), crossing_is_new(lambda item: item.image, lambda item: item.question))
    pairing = Pairing(seed, tuple((a.id, b.id) for a, b in matched), tuple(item.id for item in left))
    return [_unit(a, b) for a, b in matched], pairing


def units_from_pairing(pairs: Sequence[YesNoItem], pairing: Pairing) -> list[NbUnit]:
    """The units of a recorded pairing, rebuilt from the same image–question pairs (so a later
    model version is scored on exactly those units even if the pairing rule changes)."""
    _check_unique_ids(pairs)
    by_id = {item.id: item for item in pairs}
    missing = sorted({i for pair in pairing.pairs for i in pair} - by_id.keys())
    if missing:
        shown = ", ".join(repr(i) for i in missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise ValueError(f"the recorded pairing names {len(missing)} item(s) not in the data: {shown}")
    return [_unit(by_id[a], by_id[b]) for a, b in pairing.pairs]
