"""MMMU-style multiple-choice rows (``format="mmmu"``) → :class:`McItem` for ``lcm-mc``.

A local copy of MMMU (or a data set laid out like it): a ``.jsonl`` file (one row a line) or a
``.json`` file (a list of rows), with image paths relative to the file's folder. Fields read:

- ``id``: kept as a string.
- ``question``: MMMU's ``<image 1>``-style placeholders are stripped (the image is given to
  the model separately), then runs of spaces collapsed and a space left before punctuation
  removed.
- ``options``: a list of strings, or MMMU's Python-literal string such as ``"['1.5', '2']"``;
  at least two. An empty list (MMMU's open questions) is an error for that item.
- ``answer``: the correct option's letter ("A", "B", ...); missing, null, "" or "?" (hidden
  test answers) means unlabelled. A list of letters (several correct answers) is an error.
- the image: ``image`` or MMMU's ``image_1`` … ``image_7`` (null or "" when unused); exactly
  one must be set: lcm-mc gives the model one image, so rows with several images are errors,
  as are rows with none.
- ``category`` if present, else ``subfield``, else the subject taken from an MMMU id such as
  ``validation_Art_Theory_12`` → ``Art_Theory``.

Example row::

    {"id": "validation_Physics_3", "question": "<image 1> What is the net force on the block?",
     "options": "['2 N', '4 N', '6 N', '8 N']", "answer": "B", "image_1": "images/validation_Physics_3_1.png"}

→ ``McItem(id="validation_Physics_3", question="What is the net force on the block?",
options=("2 N", "4 N", "6 N", "8 N"), answer=1, category="Physics")``.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from vlgate.evaluators.loaders.common import FieldProblem, Rows, image_field, load_rows, text
from vlgate.evaluators.loaders.items import LoadedDataset, McItem

OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
IMAGE_FIELDS = ("image",) + tuple(f"image_{n}" for n in range(1, 8))
_PLACEHOLDER = re.compile(r"<image\s*\d+>", re.IGNORECASE)
_MMMU_ID = re.compile(r"^(?:dev|validation|test)_(.+)_\d+$")
UNLABELLED_ANSWERS = ("", "?")


def strip_placeholders(question: str) -> str:
    """The question without ``<image N>`` placeholders, whitespace tidied."""
    stripped = _PLACEHOLDER.sub("", question)
    stripped = re.sub(r"[ \t]+", " ", stripped)
    stripped = re.sub(r" +([,.;:?!])", r"\1", stripped)
    return "\n".join(line.strip() for line in stripped.strip().splitlines())


def parse_options(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)  # MMMU stores "['a', 'b']"; literal_eval runs no code
        except (ValueError, SyntaxError):
            raise FieldProblem("options", f"not a list or a Python-literal list: {value[:80]!r}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(option, (str, int, float)) for option in value):
        raise FieldProblem("options", f"expected a list of option texts, got {value!r}")
    options = tuple(str(option).strip() for option in value)
    if len(options) < 2:
        raise FieldProblem("options", f"has {len(options)} option(s); lcm-mc needs a multiple-choice item (MMMU's open questions have none)")
    return options


def parse_answer(value: Any, n_options: int) -> int | None:
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


def category_of(row: dict[str, Any]) -> str | None:
    for name in ("category", "subfield"):
        if isinstance(row.get(name), str) and row[name].strip():
            return row[name].strip()
    match = _MMMU_ID.match(str(row.get("id", "")))
    return match.group(1) if match else None


def load_mmmu(rows: Rows, verify: bool = True) -> LoadedDataset[McItem]:
    base = rows.path.parent

    def parse(row: dict[str, Any]) -> McItem:
        if "options" not in row:
            raise FieldProblem("options", "missing")
        options = parse_options(row["options"])
        answer = parse_answer(row.get("answer"), len(options))
        used = [name for name in IMAGE_FIELDS if row.get(name) not in (None, "")]
        if not used:
            raise FieldProblem("image_1", "no image (neither 'image' nor 'image_1' is set); lcm-mc needs one image per item")
        if len(used) > 1:
            raise FieldProblem(used[1], f"{len(used)} images ({', '.join(used)}); lcm-mc gives the model exactly one image per item")
        image = image_field(row, used[0], base, verify)
        question = strip_placeholders(text(row, "question"))
        if not question:
            raise FieldProblem("question", "empty once the <image N> placeholders are stripped")
        return McItem(str(row["id"]), image, question, options, answer, category_of(row))

    return load_rows("lcm-mc", rows, parse)


def looks_mmmu(row: dict[str, Any]) -> bool:
    return "question" in row and "options" in row and (any(name in row for name in IMAGE_FIELDS[1:]) or isinstance(row.get("options"), str) or isinstance(row.get("answer"), str))
