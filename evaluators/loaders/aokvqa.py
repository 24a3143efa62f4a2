"""A-OKVQA-style rows (``format="aokvqa"``) → :class:`DeccItem` for ``decc``.

A local copy of A-OKVQA: its ``.json`` file (a list, e.g. ``aokvqa_v1p0_val.json``) or a
``.jsonl`` file, with the COCO images beside it. Fields read:

- ``question_id``: the item id.   ``question``.
- ``choices``: the options (at least two).
- ``correct_choice_idx``: 0-based; the item's answer is that choice's *text*, as in the local
  DeCC format (missing or null, as in A-OKVQA's test split: unlabelled).
- the image: an explicit ``image`` path if the row has one, else ``image_id`` (an integer)
  → ``images/{image_id:012d}.jpg``, else COCO's own layout ``{split}2017/{image_id:012d}.jpg``
  when the row has ``split`` (A-OKVQA's rows do: "train", "val", "test"): in ``coco_dir``
  when the suite's decc entry names one (A-OKVQA's README keeps COCO in its own folder,
  ``$COCO_DIR``, beside ``$AOKVQA_DIR``), else in the data file's folder. Relative paths are
  the data file's folder's.

Not read: ``direct_answers``, ``difficult_direct_answer``, ``rationales``. A-OKVQA has no
sub-questions, so ``sub_questions`` is None and DeCC's decomposer writes them.

Example row::

    {"question_id": "22MexNkBPpdZGX6sxbxVBH", "image_id": 299207, "split": "val",
     "question": "What is the man by the bags awaiting?", "choices": ["skateboarder", "train", "delivery", "cab"],
     "correct_choice_idx": 3}

→ ``DeccItem(id="22MexNkBPpdZGX6sxbxVBH", image=ROOT/images/000000299207.jpg,
options=("skateboarder", "train", "delivery", "cab"), answer="cab", sub_questions=None)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vlgate.evaluators.loaders.common import FieldProblem, Rows, check_image, first_existing, image_field, integer, load_rows, text, text_list
from vlgate.evaluators.loaders.items import DeccItem, LoadedDataset


def coco_image(row: Mapping[str, object], base: Path, verify: bool, coco_dir: Path | None = None) -> Path:
    if row.get("image") is not None:
        return image_field(row, "image", base, verify)
    image_id = integer(row, "image_id")
    name = f"{image_id:012d}.jpg"
    candidates = [base / "images" / name]
    if isinstance(row.get("split"), str):
        candidates += [folder / f"{row['split']}2017" / name for folder in ((coco_dir,) if coco_dir is not None else ()) + (base,)]
    found = first_existing(candidates)
    if found is None:
        raise FieldProblem("image_id", f"image file not found: {' or '.join(str(c) for c in candidates)}")
    return check_image(found, "image_id", verify)


def load_aokvqa(rows: Rows, verify: bool = True, coco_dir: Path | None = None) -> LoadedDataset[DeccItem]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> DeccItem:
        choices = text_list(row, "choices", minimum=2)
        answer = None
        if row.get("correct_choice_idx") is not None:
            index = integer(row, "correct_choice_idx")
            if not 0 <= index < len(choices):
                raise FieldProblem("correct_choice_idx", f"{index} is not an index into the {len(choices)} choices")
            answer = choices[index]
        question = text(row, "question")
        return DeccItem(str(row["question_id"]), coco_image(row, base, verify, coco_dir), question, choices, answer, None)

    return load_rows("decc", rows, parse, id_field="question_id")


def looks_aokvqa(row: Mapping[str, object]) -> bool:
    return "choices" in row or "correct_choice_idx" in row or "image_id" in row
