"""NaturalBench rows (``format="naturalbench"``, and lmms-eval's one-row-per-pair variant,
``format="naturalbench-lmms-eval"``) → :class:`NbUnit` for ``lcm-nb``.

A copy of NaturalBench: the Hub release itself (``BaiqiL/NaturalBench``:
``data/train-0000K-of-00003.parquet``, images embedded; read by :mod:`.tables`), or its
columns with images saved as files in a ``.jsonl`` or ``.json`` file, image paths relative to
the file's folder. One row per unit; fields read (the Hub columns, which the authors'
``naturalbench_vqa.py`` reads):

- ``Index`` (or ``id``): the unit id, kept as a string.
- ``Image_0``, ``Image_1``: V1, V2.   ``Question_0``, ``Question_1``: T1, T2.
- ``Image_0_Question_0``, ``Image_1_Question_0``, ``Image_0_Question_1``,
  ``Image_1_Question_1``: "Yes" / "No" (any case) for each image–question pair of a yes_no
  unit, "A" / "B" (any case) for a multiple_choice unit.
- ``Question_Type`` (the dataset card once printed it as ``Question Type``; both are read):
  ``yes_no`` (missing means yes_no) or ``multiple_choice`` (each question carries its
  options, "…\\nOption: A:…; B:…;"); any other value is an error for that unit. A
  multiple_choice unit is ``NbUnit(question_type="multiple_choice", options=("A", "B"))``:
  the runner asks each (V_i, T_j) with the MC suffix and reads P over "A" and "B", and
  "A" plays the role of "Yes" everywhere (``p_yes`` is P(A), c1/c2 from the A/B pattern).

  Why "A" is "yes": both released harnesses (Baiqi-Li/NaturalBench ``naturalbench_vqa.py``,
  lmms-eval ``tasks/naturalbench/utils.py``) map an answer to 1 when it says "yes" (yes_no)
  or "A" (multiple_choice) and to 0 for "no" / "B" (``extract_answer``), and ``get_scores``
  compares those 1/0 with one fixed pattern for every unit of either type: q0_i0 = 1,
  q0_i1 = 0, q1_i0 = 0, q1_i1 = 1. So a multiple_choice unit's gold answers are laid out as
  a yes_no unit's with A for Yes and B for No, and the paper (VL-LCM §3.3) says the same: "the
  answer (a1) is 'yes' or 'A' on one image, and (a2) 'no' or 'B' on another". vlgate reads
  the pattern from each unit's own gold answers (below) rather than assuming it, as it does
  for yes_no units; a release laid out as the harnesses assume reads as c1 throughout.
- ``category`` if present (NaturalBench has none; its ``Source`` is not a category).

The answer follows docs/metrics.md#lcm-nb: c1 when (V1,T1) and (V2,T2) are the "yes" pairs, c2 when
(V1,T2) and (V2,T1) are:

| Image_0_Question_0 | Image_0_Question_1 | Image_1_Question_0 | Image_1_Question_1 | answer |
| --- | --- | --- | --- | --- |
| Yes (A) | No (B) | No (B) | Yes (A) | c1 |
| No (B) | Yes (A) | Yes (A) | No (B) | c2 |
| (all four missing or empty) | | | | None (unlabelled) |

Any other pattern (e.g. all "Yes"), or a yes_no unit answered A/B (or the reverse), is an
error for that unit: it is not a NaturalBench unit.

Example row::

    {"Index": 7, "Question_Type": "yes_no", "Image_0": "images/7_0.jpg", "Image_1": "images/7_1.jpg",
     "Question_0": "Is the dog asleep?", "Question_1": "Is the dog awake?",
     "Image_0_Question_0": "Yes", "Image_1_Question_0": "No", "Image_0_Question_1": "No", "Image_1_Question_1": "Yes"}

→ ``NbUnit(id="7", texts=("Is the dog asleep?", "Is the dog awake?"), answer="c1", text_kind="question")``;
the same row with ``"Question_Type": "multiple_choice"`` and answers "A", "B", "B", "A" →
``NbUnit(..., answer="c1", question_type="multiple_choice", options=("A", "B"))``.

**lmms-eval's variant** (``BaiqiL/NaturalBench-lmms-eval``, split ``test``, 7,600 rows; the
fields lmms-eval's ``tasks/naturalbench`` reads): one row per (image, question) pair with
``Index``, ``Image``, ``Question``, ``Question_Type`` and ``answer``. It regroups without
ambiguity, exactly as lmms-eval's own aggregation does (it asserts row ``4k + m`` has
``Index == 4k + m``): unit ``k`` is the rows with ``Index`` 4k … 4k+3, in the order
q0_i0, q0_i1, q1_i0, q1_i1, i.e. (V1,T1), (V2,T1), (V1,T2), (V2,T2). So V1 is the image of
rows 4k and 4k+2, V2 of rows 4k+1 and 4k+3, T1 the question of rows 4k and 4k+1, T2 of rows
4k+2 and 4k+3, and the answers fill ``Image_i_Question_j`` as above. Unit id: ``str(k)``.
A unit missing one of its four rows, or whose rows disagree (two different questions for T1,
two different images for V1 — compared by bytes, else by pixels — or two question types), is
one error; otherwise the regrouped unit is read as a release row is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from vlgate.evaluators.loaders.common import FieldProblem, Row, Rows, image_field, load_rows, text
from vlgate.evaluators.loaders.items import ItemError, LoadedDataset, NbUnit
from vlgate.evaluators.loaders.tables import same_image

#: (image i, question j) answer fields, in the order y11, y12, y21, y22 of docs/metrics.md#lcm-nb.
ANSWER_FIELDS = ("Image_0_Question_0", "Image_0_Question_1", "Image_1_Question_0", "Image_1_Question_1")
PATTERNS = {("yes", "no", "no", "yes"): "c1", ("no", "yes", "yes", "no"): "c2"}
#: Question_Type → its two answers, the one that plays "yes" first (the harnesses' extract_answer: 1 for yes / A, 0 for no / B).
ANSWERS = {"yes_no": ("Yes", "No"), "multiple_choice": ("A", "B")}
#: What a multiple_choice unit is asked over (NbUnit.options); yes_no units keep the default, None (Yes/No).
MC_OPTIONS = ANSWERS["multiple_choice"]


def answer_from_pattern(answers: Mapping[str, object], question_type: str = "yes_no") -> str | None:
    """c1 / c2 from the four answers (keyed by ANSWER_FIELDS): Yes/No for a yes_no unit, A/B
    (A in Yes's place) for a multiple_choice one; None when all are absent."""
    values = [answers.get(name) for name in ANSWER_FIELDS]
    if all(value is None or (isinstance(value, str) and not value.strip()) for value in values):
        return None
    yes, no = ANSWERS[question_type]
    as_yes_no = {yes.lower(): "yes", no.lower(): "no"}
    for name, value in zip(ANSWER_FIELDS, values):
        if not isinstance(value, str) or value.strip().lower() not in as_yes_no:
            raise FieldProblem(name, f"expected {yes!r} or {no!r}{'' if question_type == 'yes_no' else ' (multiple_choice)'}, got {value!r}")
    pattern = tuple(as_yes_no[str(value).strip().lower()] for value in values)
    if pattern not in PATTERNS:
        shown = ", ".join(f"{name}={value}" for name, value in zip(ANSWER_FIELDS, values))
        raise FieldProblem(
            "Image_*_Question_*",
            f"answers {shown} are not a NaturalBench pattern: one image must say {yes} to exactly the question the other says {no} to",
        )
    return PATTERNS[pattern]


def unit_id(row: Mapping[str, object]) -> object:
    return row.get("Index", row.get("id"))


def load_naturalbench(rows: Rows, verify: bool = True) -> LoadedDataset[NbUnit]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> NbUnit:
        kind = question_type(row)
        if not isinstance(kind, str) or kind not in ANSWERS:
            raise FieldProblem("Question_Type", f"expected 'yes_no' or 'multiple_choice', got {kind!r}")
        texts = (text(row, "Question_0"), text(row, "Question_1"))
        answer = answer_from_pattern(row, kind)
        images = (image_field(row, "Image_0", base, verify), image_field(row, "Image_1", base, verify))
        unit = NbUnit(str(unit_id(row)), images, texts, answer, text(row, "category", optional=True), "question")
        return unit if kind == "yes_no" else dataclasses.replace(unit, question_type=kind, options=MC_OPTIONS)

    return load_rows("lcm-nb", rows, parse, id_field="Index", id_of=unit_id)


def question_type(row: Mapping[str, object]) -> object:
    return row.get("Question_Type", row.get("Question Type", "yes_no"))


def looks_naturalbench(row: Mapping[str, object]) -> bool:
    return "Image_0" in row or "Question_0" in row


# ---- lmms-eval's variant: one row per (image, question) pair ----

#: Index % 4 → the release column of that pair's answer (lmms-eval: q0_i0, q0_i1, q1_i0, q1_i1).
PAIR_FIELDS = ("Image_0_Question_0", "Image_1_Question_0", "Image_0_Question_1", "Image_1_Question_1")
_SOURCE = re.compile(r"^(.*)\[(\d+)\]$")


def _unit_source(members: list[Row]) -> str:
    """``FILE[4k,4k+1,4k+2,4k+3]`` when the rows share a file, else their sources joined."""
    parsed = [_SOURCE.match(row.source) for row in members]
    if all(parsed) and len({m.group(1) for m in parsed if m}) == 1:
        return f"{parsed[0].group(1) if parsed[0] else ''}[{','.join(m.group(2) for m in parsed if m)}]"
    return "; ".join(row.source for row in members)


def _unit_row(unit: int, members: dict[int, Row]) -> dict[str, object]:
    """The release row of unit ``unit`` from its four pair rows (FieldProblem if they do not make one)."""
    missing = [4 * unit + m for m in range(4) if m not in members]
    if missing:
        raise FieldProblem("Index", f"rows with Index {', '.join(map(str, missing))} are missing: unit {unit} is the rows with Index {4 * unit}..{4 * unit + 3}")
    rows = [members[m].data for m in range(4)]
    for a, b, field, what in ((0, 1, "Question", "T1"), (2, 3, "Question", "T2")):
        if text(rows[a], field) != text(rows[b], field):
            raise FieldProblem(field, f"Index {4 * unit + a} and {4 * unit + b} should ask the same question ({what}): {rows[a][field]!r} vs {rows[b][field]!r}")
    for a, b, what in ((0, 2, "V1"), (1, 3, "V2")):
        if rows[a].get("Image") is None or rows[b].get("Image") is None:
            continue  # reported as the missing image it is when the unit's image is read
        if not same_image(rows[a]["Image"], rows[b]["Image"]):
            raise FieldProblem("Image", f"Index {4 * unit + a} and {4 * unit + b} should show the same image ({what}) but do not")
    kinds = {str(question_type(row)) for row in rows}
    if len(kinds) > 1:
        raise FieldProblem("Question_Type", f"the four rows of unit {unit} disagree: {', '.join(sorted(kinds))}")
    unit_row: dict[str, object] = {"Index": unit, "Question_Type": question_type(rows[0])}
    unit_row.update(Image_0=rows[0].get("Image"), Image_1=rows[1].get("Image"), Question_0=rows[0].get("Question"), Question_1=rows[2].get("Question"))
    unit_row.update({name: row.get("answer") for name, row in zip(PAIR_FIELDS, rows)})
    category = rows[0].get("category")
    if isinstance(category, str):
        unit_row["category"] = category
    return unit_row


def regroup_pairs(rows: Rows) -> Rows:
    """lmms-eval's pair rows → release rows, one per unit (units in Index order); a row without
    a usable Index, a repeated Index, or a unit that does not regroup is one ItemError."""
    errors = list(rows.errors)
    groups: dict[int, dict[int, Row]] = {}
    for row in rows.rows:
        index = row.data.get("Index")
        if isinstance(index, str) and index.strip().isdigit():
            index = int(index)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            errors.append(ItemError(row.source, None, "Index", "missing" if index is None else f"expected a non-negative integer, got {index!r}"))
            continue
        unit, position = divmod(index, 4)
        members = groups.setdefault(unit, {})
        if position in members:
            errors.append(ItemError(row.source, str(unit), "Index", f"duplicate Index {index} (first at {members[position].source})"))
            continue
        members[position] = row
    regrouped = []
    for unit in sorted(groups):
        members = groups[unit]
        source = _unit_source([members[m] for m in sorted(members)])
        try:
            regrouped.append(Row(_unit_row(unit, members), source))
        except FieldProblem as problem:
            errors.append(ItemError(source, str(unit), problem.field, problem.message))
    return Rows(regrouped, errors, rows.path, rows.layout)


def load_naturalbench_lmms_eval(rows: Rows, verify: bool = True) -> LoadedDataset[NbUnit]:
    return load_naturalbench(regroup_pairs(rows), verify)


def looks_naturalbench_lmms_eval(row: Mapping[str, object]) -> bool:
    return "Index" in row and "Question" in row and "Image" in row and "Question_0" not in row
