"""easy-VQA (``format="easy-vqa"``) → :class:`McItem` for ``lcm-mc``, :class:`YesNoItem` for ``yes-no``.

easy-VQA (Victor Zhou, MIT; PyPI ``easy-vqa`` 1.0, github.com/vzhou842/easy-VQA) is a rendered
data set: 64x64 images of one shape (rectangle, circle or triangle) in one of eight colours,
and short questions about them, generated from fixed templates (upstream ``gen_data/``). The
package ships its data inside itself::

    easy_vqa/data/answers.txt             the 13 answers, one a line (in no meaningful order)
    easy_vqa/data/test/questions.json     9,673 questions about 1,000 images
    easy_vqa/data/test/images/ID.png      image ID (0 … 999)
    easy_vqa/data/train/questions.json    38,575 questions about 4,000 images
    easy_vqa/data/train/images/ID.png

``questions.json`` is a JSON list of ``[question, answer, image_id]`` lists (what the package's
``get_test_questions()`` returns as three parallel lists), e.g.
``["what is the red shape?", "triangle", 0]``. ``answers.txt`` is not read.

**Where ``data:`` points.** A suite's ``data:`` is a path (the suite resolves it against its
own folder, and the service hashes and watches the files under it), so there is no
non-path spelling such as ``easy-vqa:test``: point ``data:`` (or ``load_dataset``'s
``path``) at a split's folder of the installed package, ``…/site-packages/easy_vqa/data/test``,
which :func:`package_split` returns (``python -c "from vlgate.evaluators.loaders.easyvqa
import package_split; print(package_split('test'))"``), or at its ``questions.json``, or at
a folder laid out the same way (``questions.json`` beside ``images/ID.png``). The package's
``data/`` folder itself holds both splits and is refused, naming them. Evaluate on ``test``.

**Items.** One per question, in file order:

- ``id``: ``SPLIT-INDEX``, the name of the folder holding ``questions.json`` (``test``) and the
  question's 0-based index in it (the package has no ids; its API indexes questions the same
  way): ``test-0``, ``test-1``, …
- ``image``: ``images/{image_id}.png`` beside ``questions.json``, checked like every loader's
  images (:func:`~.common.check_image`; a missing or broken one is an ItemError on ``image_id``).
- the question type, from the question's template (upstream ``gen_data/questions.py``): a
  ``what`` question naming ``color`` asks for the colour, else one naming ``shape`` asks for
  the shape; an ``is``/``does`` question is yes/no. Anything else is an ItemError on ``question``.
- ``lcm-mc``: the options are the closed answer set of the type, in this fixed order (the
  order of upstream's ``Shape`` and ``Color`` enums, ``gen_data/shape.py`` and ``color.py``):
  shape ``rectangle, circle, triangle``; color ``black, gray, red, green, blue, yellow, teal,
  brown``; yes/no ``yes, no`` (:data:`OPTIONS`). ``answer`` is the index of the row's answer
  among them; ``category`` is the type: ``shape``, ``color`` or ``yes_no``.
- ``yes-no``: the yes/no questions only (7,136 of the test split's 9,673); the shape and
  colour questions are no yes/no items and are left out without an error. ``category`` is
  what the question asks about: ``shape`` ("is there a circle?") or ``color`` ("is there a
  red shape?"). These are the image-question pairs ``lcm-nb``'s unlabelled pairing takes
  (``pair_seed``).

An answer outside its type's set is an ItemError on ``answer`` (null: unlabelled). A row that
is not a list of three is an ItemError on the row; an ``image_id`` that is not a non-negative
integer one on ``image_id``.

A list of JSON objects (or JSON Lines) with the fields ``id, question, answer, image_id`` is
read the same way (its ids as written); ``format="auto"`` takes a JSON list of lists, or rows
with ``question`` and ``image_id`` but no ``image``/``options``/``choices``, for easy-VQA.

Example: the test split's first row ``["what is the red shape?", "triangle", 0]`` →
``McItem(id="test-0", image=…/test/images/0.png, question="what is the red shape?",
options=("rectangle", "circle", "triangle"), answer=2, category="shape")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vlgate.evaluators.loaders.common import FieldProblem, Row, Rows, check_image, load_rows, read_json_list, text
from vlgate.evaluators.loaders.items import ItemError, LoadedDataset, McItem
from vlgate.evaluators.loaders.pairing import YesNoItem

#: The package's data file in each split's folder.
DATA_FILE = "questions.json"
SHAPES = ("rectangle", "circle", "triangle")
COLORS = ("black", "gray", "red", "green", "blue", "yellow", "teal", "brown")
YES_NO = ("yes", "no")
#: question type → its options, in the fixed order above (upstream's enum order; yes first).
OPTIONS = {"shape": SHAPES, "color": COLORS, "yes_no": YES_NO}
FIELDS = ("question", "answer", "image_id")


def package_split(split: str = "test") -> Path:
    """The installed ``easy-vqa`` package's folder of ``split`` ("test" or "train")."""
    try:
        import easy_vqa
    except ImportError:
        raise ValueError("easy-vqa is not installed (pip install easy-vqa)") from None
    if split not in ("test", "train"):
        raise ValueError(f"easy-vqa has the splits 'test' and 'train', not {split!r}")
    return Path(easy_vqa.__file__).parent / "data" / split


def holds_question_lists(path: Path) -> bool:
    """Whether a data file is the package's shape: a ``.json`` list whose entries are lists."""
    if path.suffix != ".json":
        return False
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip()
    return head.startswith(b"[") and head[1:].lstrip().startswith(b"[")


def read_questions(path: Path) -> Rows:
    """The rows of a package-style ``questions.json``: each ``[question, answer, image_id]``
    as a row ``{id: SPLIT-INDEX, question, answer, image_id}``, its source ``FILE[INDEX]``.
    An entry that is not a list of three is one ItemError; a file that is no JSON list is a
    ValueError."""
    path = Path(path)
    split = path.parent.name
    rows, errors = [], []
    for index, entry in enumerate(read_json_list(path, "[question, answer, image_id] lists")):
        source = f"{path}[{index}]"
        if isinstance(entry, list) and len(entry) == len(FIELDS):
            rows.append(Row({"id": f"{split}-{index}", **dict(zip(FIELDS, entry))}, source))
        else:
            shape = f"a list of {len(entry)}" if isinstance(entry, list) else type(entry).__name__
            errors.append(ItemError(source, f"{split}-{index}", None, f"expected a [question, answer, image_id] list, got {shape}"))
    return Rows(rows, errors, path)


def question_type(question: str) -> str:
    """``shape``, ``color`` or ``yes_no``, from the question's template (FieldProblem otherwise)."""
    words = question.lower().rstrip("?").split()
    if words and words[0] == "what":
        if "color" in words:
            return "color"
        if "shape" in words:
            return "shape"
    elif words and words[0] in ("is", "does"):
        return "yes_no"
    raise FieldProblem("question", f"not one of easy-VQA's question forms (what color/shape ..., is/does ...): {question!r}")


def _answer(row: Mapping[str, object], kind: str) -> str | None:
    value = row.get("answer")
    if value is None:
        return None
    answer = text(row, "answer").lower()
    if answer not in OPTIONS[kind]:
        raise FieldProblem("answer", f"{value!r} is not an answer to a {kind} question (one of {', '.join(OPTIONS[kind])})")
    return answer


class _Images:
    """Each image checked once per load (a test image is asked about about ten times)."""

    def __init__(self, base: Path, verify: bool):
        self.base, self.verify = base, verify
        self.checked: dict[int, Path | FieldProblem] = {}

    def __call__(self, row: Mapping[str, object]) -> Path:
        image_id = row.get("image_id")
        if image_id is None:
            raise FieldProblem("image_id", "missing")
        if isinstance(image_id, bool) or not isinstance(image_id, int) or image_id < 0:
            raise FieldProblem("image_id", f"expected a non-negative integer, got {image_id!r}")
        if image_id not in self.checked:
            try:
                self.checked[image_id] = check_image(self.base / "images" / f"{image_id}.png", "image_id", self.verify)
            except FieldProblem as problem:
                self.checked[image_id] = problem
        found = self.checked[image_id]
        if isinstance(found, FieldProblem):
            raise found
        return found


def load_easy_vqa_mc(rows: Rows, verify: bool = True) -> LoadedDataset[McItem]:
    image = _Images(rows.path.parent, verify)

    def parse(row: Mapping[str, object]) -> McItem:
        question = text(row, "question")
        kind = question_type(question)
        answer = _answer(row, kind)
        options = OPTIONS[kind]
        return McItem(str(row["id"]), image(row), question, options, None if answer is None else options.index(answer), kind)

    return load_rows("lcm-mc", rows, parse)


def load_easy_vqa_yes_no(rows: Rows, verify: bool = True) -> LoadedDataset[YesNoItem]:
    image = _Images(rows.path.parent, verify)

    def parse(row: Mapping[str, object]) -> YesNoItem | None:
        question = text(row, "question")
        if question_type(question) != "yes_no":
            return None
        answer = _answer(row, "yes_no")
        about = "color" if any(word in COLORS for word in question.lower().rstrip("?").split()) else "shape"
        return YesNoItem(str(row["id"]), image(row), question, answer, about)

    loaded = load_rows("yes-no", rows, parse)
    return LoadedDataset("yes-no", [item for item in loaded.items if item is not None], loaded.errors, loaded.source)


def looks_easy_vqa(row: Mapping[str, object]) -> bool:
    """A row of :func:`read_questions` (or an object row with the same fields)."""
    return "question" in row and "image_id" in row and not any(name in row for name in ("image", "options", "choices"))
