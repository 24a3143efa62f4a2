"""NatConBench-style units (NaturalBench format) built from ConBench-style items, as the VL-LCM
paper's Appendix B builds NatConBench from ConBench.

What the appendix says, and how it is followed:

- Pairs are drawn within a category ("under each category"), from two items of the same kind.
- Multiple-choice pairs: two MC items, retained if their images and their ground-truth answers
  differ; they may share the question text. Each text pairs the question with its own answer,
  asked as a yes/no question the way VL-LCM adapts an MC item (App. C):
  ``'{question} Is the answer "{answer text}"?'``.
- True/False pairs: two T/F items, retained if their images and their questions differ and
  both ground-truth answers are "yes". Each text is the item's question.
- The unit is V1, T1 from the first item and V2, T2 from the second, so (V1,T1) and (V2,T2) are
  the "yes" pairs: ``answer="c1"`` (the appendix's layout), ``text_kind="question"``.

Where the appendix is silent (choices):

- Which pairs and how many: the seeded order and greedy rule of :mod:`.pairing` (SHA-256 of
  ``"{seed}:{id}"``), within each (category, kind) group; every item is in at most one unit.
- Items that cannot be in a unit are listed in ``Pairing.unpaired``: no ground truth, a T/F
  answer that is not "yes", or no retainable partner left in its group.
- Answers are compared as option texts (case and spacing ignored), so two MC items whose
  correct options are both "B" but say different things count as different answers.
- Units are always c1, as in the appendix; the four MC tests of §2.2 put the correct option
  first in two tests and second in the other two, so a letter bias does not favour c1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from vlgate.evaluators.loaders.items import McItem, NbUnit
from vlgate.evaluators.loaders.pairing import PAIRING_METHOD, Pairing, greedy_pairs, normalised_text, seeded_order

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class ConBenchItem:
    """One ConBench-style discriminative item: ``kind`` "mc" (options, answer = option letter
    or text) or "tf" (a yes/no question, answer "yes"/"no")."""

    id: str
    image: Path
    question: str
    kind: str
    answer: str | None = None
    category: str | None = None
    options: tuple[str, ...] | None = None

    @classmethod
    def from_mc(cls, item: McItem) -> ConBenchItem:
        answer = item.options[item.answer] if item.answer is not None else None
        return cls(item.id, item.image, item.question, "mc", answer, item.category, item.options)

    def answer_text(self) -> str | None:
        """The correct answer as text: an option letter is replaced by its option."""
        if self.answer is None:
            return None
        letter = self.answer.strip().strip("()").upper()
        if self.kind == "mc" and self.options and len(letter) == 1 and letter in OPTION_LETTERS[: len(self.options)]:
            return self.options[OPTION_LETTERS.index(letter)]
        return self.answer.strip()


def _eligible(item: ConBenchItem) -> bool:
    if item.kind == "mc":
        return item.answer_text() is not None
    if item.kind == "tf":
        return item.answer is not None and normalised_text(item.answer) == "yes"
    return False


def _retained(a: ConBenchItem, b: ConBenchItem) -> bool:
    if Path(a.image) == Path(b.image):
        return False
    if a.kind == "mc":
        return normalised_text(a.answer_text() or "") != normalised_text(b.answer_text() or "")
    return normalised_text(a.question) != normalised_text(b.question)


def _text(item: ConBenchItem) -> str:
    return f'{item.question} Is the answer "{item.answer_text()}"?' if item.kind == "mc" else item.question


def natconbench_units(items: Sequence[ConBenchItem | McItem], seed: int) -> tuple[list[NbUnit], Pairing]:
    """NatConBench-style units from ConBench-style MC and T/F items (VL-LCM App. B), and the
    pairing to record. Same items and seed → same units, whatever the input order."""
    normalised = [ConBenchItem.from_mc(item) if isinstance(item, McItem) else item for item in items]
    ids = [item.id for item in normalised]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate item ids: a pairing names items by id, so ids must be unique")
    unusable = [item.id for item in normalised if not _eligible(item)]
    usable = [item for item in normalised if _eligible(item)]

    def group_key(item: ConBenchItem) -> tuple[str, str]:
        return (item.category or "", item.kind)

    units: list[NbUnit] = []
    pairs: list[tuple[str, str]] = []
    unpaired = list(unusable)
    for (category, _kind), group in groupby(sorted(usable, key=group_key), key=group_key):
        matched, left = greedy_pairs(seeded_order(list(group), seed), _retained)
        unpaired += [item.id for item in left]
        for a, b in matched:
            pairs.append((a.id, b.id))
            units.append(NbUnit(f"{a.id}+{b.id}", (a.image, b.image), (_text(a), _text(b)), "c1", category or None, "question"))
    return units, Pairing(seed, tuple(pairs), tuple(sorted(unpaired)), method=f"natconbench (VL-LCM App. B): {PAIRING_METHOD}")
