"""NaturalBench rows (``format="naturalbench"``) → :class:`NbUnit` for ``lcm-nb``.

A local copy of NaturalBench (its Hugging Face columns, images saved as files): a ``.jsonl``
or ``.json`` file, image paths relative to the file's folder. Fields read:

- ``Index`` (or ``id``): the unit id, kept as a string.
- ``Image_0``, ``Image_1``: V1, V2.   ``Question_0``, ``Question_1``: T1, T2.
- ``Image_0_Question_0``, ``Image_1_Question_0``, ``Image_0_Question_1``,
  ``Image_1_Question_1``: "Yes" / "No" (any case) for each image–question pair.
- ``Question_Type``: only ``yes_no`` units are read (missing means yes_no); NaturalBench's
  ``multiple_choice`` units are errors, since lcm-nb asks yes/no questions.
- ``category`` if present (NaturalBench has none; its ``Source`` is not a category).

The answer follows SPEC §2.2: c1 when (V1,T1) and (V2,T2) are the "yes" pairs, c2 when
(V1,T2) and (V2,T1) are:

| Image_0_Question_0 | Image_0_Question_1 | Image_1_Question_0 | Image_1_Question_1 | answer |
| --- | --- | --- | --- | --- |
| Yes | No | No | Yes | c1 |
| No | Yes | Yes | No | c2 |
| (all four missing or empty) | | | | None (unlabelled) |

Any other pattern (e.g. all "Yes") is an error for that unit: it is not a NaturalBench unit.

Example row::

    {"Index": 7, "Question_Type": "yes_no", "Image_0": "images/7_0.jpg", "Image_1": "images/7_1.jpg",
     "Question_0": "Is the dog asleep?", "Question_1": "Is the dog awake?",
     "Image_0_Question_0": "Yes", "Image_1_Question_0": "No", "Image_0_Question_1": "No", "Image_1_Question_1": "Yes"}

→ ``NbUnit(id="7", texts=("Is the dog asleep?", "Is the dog awake?"), answer="c1", text_kind="question")``.
"""

from __future__ import annotations

from typing import Any

from vlgate.evaluators.loaders.common import FieldProblem, Rows, image_field, load_rows, text
from vlgate.evaluators.loaders.items import LoadedDataset, NbUnit

#: (image i, question j) answer fields, in the order y11, y12, y21, y22 of SPEC §2.2.
ANSWER_FIELDS = ("Image_0_Question_0", "Image_0_Question_1", "Image_1_Question_0", "Image_1_Question_1")
PATTERNS = {("yes", "no", "no", "yes"): "c1", ("no", "yes", "yes", "no"): "c2"}


def answer_from_pattern(answers: dict[str, Any]) -> str | None:
    """c1 / c2 from the four Yes/No answers (keyed by ANSWER_FIELDS); None when all are absent."""
    values = [answers.get(name) for name in ANSWER_FIELDS]
    if all(value is None or (isinstance(value, str) and not value.strip()) for value in values):
        return None
    for name, value in zip(ANSWER_FIELDS, values):
        if not isinstance(value, str) or value.strip().lower() not in ("yes", "no"):
            raise FieldProblem(name, f"expected 'Yes' or 'No', got {value!r}")
    pattern = tuple(str(value).strip().lower() for value in values)
    if pattern not in PATTERNS:
        shown = ", ".join(f"{name}={value}" for name, value in zip(ANSWER_FIELDS, values))
        raise FieldProblem(
            "Image_*_Question_*", f"answers {shown} are not a NaturalBench pattern: one image must say Yes to exactly the question the other says No to"
        )
    return PATTERNS[pattern]


def unit_id(row: dict[str, Any]) -> Any:
    return row.get("Index", row.get("id"))


def load_naturalbench(rows: Rows, verify: bool = True) -> LoadedDataset[NbUnit]:
    base = rows.path.parent

    def parse(row: dict[str, Any]) -> NbUnit:
        kind = row.get("Question_Type", "yes_no")
        if kind != "yes_no":
            raise FieldProblem("Question_Type", f"{kind!r} units are not read; lcm-nb uses NaturalBench's yes_no units")
        texts = (text(row, "Question_0"), text(row, "Question_1"))
        answer = answer_from_pattern(row)
        images = (image_field(row, "Image_0", base, verify), image_field(row, "Image_1", base, verify))
        return NbUnit(str(unit_id(row)), images, texts, answer, text(row, "category", optional=True), "question")

    return load_rows("lcm-nb", rows, parse, id_field="Index", id_of=unit_id)


def looks_naturalbench(row: dict[str, Any]) -> bool:
    return "Image_0" in row or "Question_0" in row
