"""MMMU-style multiple-choice rows (``format="mmmu"``) → :class:`McItem` for ``lcm-mc``.

A local copy of MMMU (or a data set laid out like it): a ``.jsonl`` file (one row a line) or a
``.json`` file (a list of rows), with image paths relative to the file's folder. Fields read:

- ``id``: kept as a string.
- ``question``: as written, MMMU's ``<image 1>``-style placeholders included: both released
  harnesses ask it so (the authors' ``construct_prompt``; lmms-eval with
  ``interleaved_format: false``), and the protocols' prompts (``evaluators/vl_lcm/prompts.py``) are theirs.
- ``options``: a list of strings, or MMMU's Python-literal string such as ``"['1.5', '2']"``;
  at least two. An empty list (MMMU's open questions) is an error for that item.
- ``answer``: the correct option's letter ("A", "B", ...); missing, null, "" or "?" (hidden
  test answers) means unlabelled. A list of letters (several correct answers) is an error.
- the images: ``image``, or MMMU's ``image_1`` … ``image_7`` (null or "" when unused): at least
  one. A multi-image question keeps every one that is set, in number order (``McItem.image``
  is ``image_1``, ``McItem.more_images`` the rest); they must be ``image_1`` … ``image_k``
  without a gap, since the question's ``<image N>`` placeholders name them. A row setting
  ``image`` and an ``image_N`` is an error, and so is each bad image (named by its field).
  Which of them a request carries is the protocol's rule (``MultipleChoicePrompts.images``).
- the category, MMMU's breakdown (its subject, as the authors' and lmms-eval's scoring take
  it): ``category`` if present, else the subject of an MMMU id (``validation_Art_Theory_12``
  → ``Art_Theory``), else ``subfield``.

**The Hub release** (``MMMU/MMMU``: one config per subject, ``Art/validation-00000-of-00001.parquet``,
``dev``/``validation``/``test`` splits, images embedded in ``image_1`` … ``image_7``; read by
:mod:`.tables`; point ``data:`` at one split, e.g. ``MMMU/*/validation-*.parquet``): the same
fields are read the same way (the subject of ``validation_Art_1`` is ``Art``, the config the
row comes from). Not read: ``explanation``, ``img_type``, ``topic_difficulty``,
``question_type`` (an ``open`` question has options ``"[]"`` and is the error above).
Several images: all are loaded; the authors' ``mmmu/`` harness gives the model ``image_1``
only (``process_single_sample``) and lmms-eval every image its prompt names, in number
order (``mmmu_doc_to_visual``): the ``mmmu`` and ``lmms-eval`` protocols send those, and
``vlgate`` sends all of an item's images (``evaluators/vl_lcm/prompts.py``).

Example row::

    {"id": "validation_Physics_3", "question": "<image 1> What is the net force on the block?",
     "options": "['2 N', '4 N', '6 N', '8 N']", "answer": "B", "image_1": "images/validation_Physics_3_1.png"}

→ ``McItem(id="validation_Physics_3", question="<image 1> What is the net force on the block?",
options=("2 N", "4 N", "6 N", "8 N"), answer=1, category="Physics")``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from vlgate.evaluators.loaders.common import FieldProblem, Rows, image_field, load_rows, text
from vlgate.evaluators.loaders.items import LoadedDataset, McItem

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
IMAGE_FIELDS = ("image",) + tuple(f"image_{n}" for n in range(1, 8))
_MMMU_ID = re.compile(r"^(?:dev|validation|test)_(.+)_\d+$")
UNLABELLED_ANSWERS = ("", "?")


def parse_options(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        written = value
        try:
            value = ast.literal_eval(written)  # MMMU stores "['a', 'b']"; literal_eval runs no code
        except (ValueError, SyntaxError):
            raise FieldProblem("options", f"not a list or a Python-literal list: {written[:80]!r}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(option, (str, int, float)) for option in value):
        raise FieldProblem("options", f"expected a list of option texts, got {value!r}")
    options = tuple(str(option) for option in value)  # verbatim: construct_prompt writes each as it is
    if len(options) < 2:
        raise FieldProblem("options", f"has {len(options)} option(s); lcm-mc needs a multiple-choice item (MMMU's open questions have none)")
    return options


def parse_answer(value: object, n_options: int) -> int | None:
    if value is None or (isinstance(value, str) and value.strip() in UNLABELLED_ANSWERS):
        return None
    if isinstance(value, str) and value.strip().startswith("["):
        raise FieldProblem("answer", f"several correct answers ({value}); lcm-mc needs exactly one")
    if isinstance(value, list):
        raise FieldProblem("answer", f"several correct answers ({value}); lcm-mc needs exactly one")
    letter = value.strip().upper() if isinstance(value, str) else None
    if letter is None or len(letter) != 1 or letter not in OPTION_LETTERS[:n_options]:
        raise FieldProblem("answer", f"expected an option letter A-{OPTION_LETTERS[n_options - 1]}, got {value!r}")
    return OPTION_LETTERS.index(letter)


def subject_of(row: Mapping[str, object]) -> str | None:
    """MMMU's breakdown: ``category``, else the id's subject, else ``subfield``."""
    category = row.get("category")
    if isinstance(category, str) and category.strip():
        return category.strip()
    match = _MMMU_ID.match(str(row.get("id", "")))
    if match:
        return match.group(1)
    subfield = row.get("subfield")
    return subfield.strip() if isinstance(subfield, str) and subfield.strip() else None


def load_mmmu(rows: Rows, verify: bool = True) -> LoadedDataset[McItem]:
    base = rows.path.parent

    def parse(row: Mapping[str, object]) -> McItem:
        if "options" not in row:
            raise FieldProblem("options", "missing")
        options = parse_options(row["options"])
        answer = parse_answer(row.get("answer"), len(options))
        used = [name for name in IMAGE_FIELDS if row.get(name) not in (None, "")]
        if not used:
            raise FieldProblem("image_1", "no image (neither 'image' nor 'image_1' is set); lcm-mc needs an image per item")
        if len(used) > 1:
            if used[0] == "image":
                raise FieldProblem(used[1], f"both 'image' and {used[1]!r} are set; a row names its images one way or the other")
            numbered = IMAGE_FIELDS[1 : len(used) + 1]
            if tuple(used) != numbered:
                gap = next(name for name in numbered if name not in used)
                raise FieldProblem(gap, f"not set, but {', '.join(used)} are; a multi-image question's images are image_1, image_2, ... without a gap (its <image N> placeholders name them)")
        images = [image_field(row, name, base, verify) for name in used]
        return McItem(str(row["id"]), images[0], text(row, "question"), options, answer, subject_of(row), tuple(images[1:]))

    return load_rows("lcm-mc", rows, parse)


def looks_mmmu(row: Mapping[str, object]) -> bool:
    return "question" in row and "options" in row and (any(name in row for name in IMAGE_FIELDS[1:]) or isinstance(row.get("options"), str) or isinstance(row.get("answer"), str))
