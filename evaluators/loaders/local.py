"""The project's own local format ("vlgate"): what the synthetic world writes
(:mod:`vlgate.evaluators.world.datasets`), usable for any data set laid out the same way.

One JSON object per line; image paths are relative to the folder of the ``.jsonl`` file (or
absolute). ``id`` is a string or an integer (kept as a string) and unique in the file.

| evaluator | file | fields read (``?`` = optional) | item |
| --- | --- | --- | --- |
| ``lcm-mc`` | ``mc/items.jsonl`` | ``id, image, question, options: [K >= 2], answer?: int (0-based), category?`` | McItem |
| ``lcm-nb`` | ``nb/units.jsonl`` | ``id, images: [V1, V2], statements: [T1, T2] (or questions: [T1, T2]), answer?: "c1"/"c2", category?`` | NbUnit |
| ``vlind`` | ``vlind/items.jsonl`` | ``id, concept, context, true_statement, false_statement, existent_noun, non_existent_noun, factual_image, counterfactual_images: [best, ...]`` | VlindItem |
| ``decc`` | ``decc/items.jsonl`` | ``id, image, question, options?: [...], answer?: str (as in the file: option text or letter), sub_questions?: [...]`` | DeccItem |
| ``yes-no`` | ``yesno/items.jsonl`` | ``id, image, question, answer?: "yes"/"no", category?`` | YesNoItem |
| ``genception`` | ``genception/CATEGORY/*.png`` | category folders, read by :mod:`.mme` | GenceptionItem |

Example lines::

    {"id": "mc-0000", "image": "images/mc-0000.png", "question": "What color is the star?",
     "options": ["red", "green", "blue", "yellow"], "answer": 2, "category": "color"}
    {"id": "nb-0000", "images": ["images/nb-0000-v1.png", "images/nb-0000-v2.png"],
     "statements": ["There is a red star.", "There is a blue star."], "answer": "c1", "category": "attribute"}

``statements`` give units with ``text_kind="statement"``, ``questions`` (yes/no questions)
``text_kind="question"``. Extra fields (the world's ``sub_answers``, for instance) are ignored.
The first counterfactual image of a VLind item is its best one (``best_image``: VP and CB ask
about it); LP asks about every listed image, the best one included.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vlgate.evaluators.loaders.common import FieldProblem, Rows, image_field, image_list_field, load_rows, text, text_list
from vlgate.evaluators.loaders.items import DeccItem, LoadedDataset, McItem, NbUnit, VlindItem
from vlgate.evaluators.loaders.pairing import YesNoItem

#: The data file each evaluator's local data set keeps in its folder.
DATA_FILES = {"lcm-mc": "items.jsonl", "lcm-nb": "units.jsonl", "vlind": "items.jsonl", "decc": "items.jsonl", "yes-no": "items.jsonl"}

#: The synthetic world's sub-folder for each evaluator, so a world's root folder can be given.
WORLD_FOLDERS = {"lcm-mc": "mc", "lcm-nb": "nb", "vlind": "vlind", "decc": "decc", "yes-no": "yesno", "genception": "genception"}


def _category(row: Mapping[str, object]) -> str | None:
    return text(row, "category", optional=True)


def load_mc(rows: Rows, verify: bool = True) -> LoadedDataset[McItem]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> McItem:
        options = text_list(row, "options", minimum=2)
        answer = row.get("answer")
        if answer is not None and (isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(options)):
            raise FieldProblem("answer", f"expected a 0-based option index below {len(options)} or null, got {answer!r}")
        image = image_field(row, "image", base, verify)
        return McItem(str(row["id"]), image, text(row, "question"), options, answer, _category(row))

    return load_rows("lcm-mc", rows, parse)


def load_nb(rows: Rows, verify: bool = True) -> LoadedDataset[NbUnit]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> NbUnit:
        if "statements" in row:
            texts, kind = text_list(row, "statements", length=2), "statement"
        elif "questions" in row:
            texts, kind = text_list(row, "questions", length=2), "question"
        else:
            raise FieldProblem("statements", "missing (a unit needs 'statements' or 'questions': [T1, T2])")
        answer = row.get("answer")
        if answer not in (None, "c1", "c2"):
            raise FieldProblem("answer", f"expected 'c1', 'c2' or null, got {answer!r}")
        images = image_list_field(row, "images", base, verify, length=2)
        return NbUnit(str(row["id"]), (images[0], images[1]), (texts[0], texts[1]), answer, _category(row), kind)

    return load_rows("lcm-nb", rows, parse)


def load_vlind(rows: Rows, verify: bool = True) -> LoadedDataset[VlindItem]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> VlindItem:
        fields = ("concept", "context", "true_statement", "false_statement", "existent_noun", "non_existent_noun")
        values = {name: text(row, name) for name in fields}
        factual = image_field(row, "factual_image", base, verify)
        counterfactual = image_list_field(row, "counterfactual_images", base, verify)
        return VlindItem(str(row["id"]), **values, factual_image=factual, best_image=counterfactual[0], counterfactual_images=counterfactual)

    return load_rows("vlind", rows, parse)


def load_decc(rows: Rows, verify: bool = True) -> LoadedDataset[DeccItem]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> DeccItem:
        options = text_list(row, "options", minimum=2) if row.get("options") is not None else None
        sub_questions = text_list(row, "sub_questions") if row.get("sub_questions") is not None else None
        answer = row.get("answer")
        if isinstance(answer, int) and not isinstance(answer, bool):
            answer = str(answer)  # a count answer written as a number is the same short answer
        elif answer is not None:
            answer = text(row, "answer")
        image = image_field(row, "image", base, verify)
        return DeccItem(str(row["id"]), image, text(row, "question"), options, answer, sub_questions)

    return load_rows("decc", rows, parse)


def load_yes_no(rows: Rows, verify: bool = True) -> LoadedDataset[YesNoItem]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> YesNoItem:
        answer = row.get("answer")
        if answer is not None:
            answer = answer.strip().lower() if isinstance(answer, str) else answer
            if answer not in ("yes", "no"):
                raise FieldProblem("answer", f"expected 'yes', 'no' or null, got {row.get('answer')!r}")
        image = image_field(row, "image", base, verify)
        return YesNoItem(str(row["id"]), image, text(row, "question"), answer, _category(row))

    return load_rows("yes-no", rows, parse)


LOADERS = {"lcm-mc": load_mc, "lcm-nb": load_nb, "vlind": load_vlind, "decc": load_decc, "yes-no": load_yes_no}


def looks_local(evaluator: str, row: Mapping[str, object]) -> bool:
    """Whether a first row has the local format's shape (used by format="auto")."""
    if evaluator == "lcm-mc":
        mmmu_like = "image_1" in row or isinstance(row.get("answer"), str) or "<image" in str(row.get("question", ""))
        return isinstance(row.get("options"), list) and "image" in row and not mmmu_like
    if evaluator == "lcm-nb":
        return "images" in row and ("statements" in row or "questions" in row)
    if evaluator == "vlind":
        return "factual_image" in row
    if evaluator == "decc":
        return "image" in row and "question" in row and "choices" not in row and "image_id" not in row
    return "image" in row and "question" in row  # yes-no


def world_path(evaluator: str, path: Path) -> Path:
    """A synthetic world's root folder stands for its sub-folder for ``evaluator``."""
    folder = WORLD_FOLDERS.get(evaluator)
    has_own_file = evaluator in DATA_FILES and (path / DATA_FILES[evaluator]).is_file()
    if folder and path.is_dir() and (path / folder).is_dir() and not has_own_file:
        return path / folder
    return path

