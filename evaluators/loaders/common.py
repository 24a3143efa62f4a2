"""What every loader shares: reading rows from JSON / JSON Lines, turning a row into an item
or into one :class:`ItemError`, and checking image files.

A loader's row parser raises :class:`FieldProblem` (field name + why) for anything wrong with
a row; :func:`load_rows` turns that into an :class:`ItemError` naming the file and line (JSON
Lines) or the list index (a JSON array), the item id and the field, skips the row and goes on.

Image checks (:func:`check_image`, on by default): the file must exist, and PIL must open it
and ``verify()`` it, which reads far less than a full decode (benchmarks/RESULTS.md,
"Checking images"), so decoding waits for the runner's
:func:`~vlgate.evaluators.loaders.items.open_image`, which reports a failure as the same kind of
per-item error. What ``verify()`` catches: a missing or empty file, a file that is no image,
and for PNG a truncated file or a broken chunk checksum. It does not decode JPEG data, so a
truncated JPEG passes here and fails later in ``open_image``. ``verify()`` decodes no pixels,
so an image whose header declares more pixels than the suite's budget (``max_image_pixels``,
:mod:`vlgate.evaluators.images`) passes here, and ``open_image`` refuses it, before decoding,
as that item's error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, overload

from pydantic import JsonValue

from vlgate.evaluators.images import opened_header
from vlgate.evaluators.loaders.items import ItemError, LoadedDataset
from vlgate.evaluators.records import read_jsonl

T = TypeVar("T")

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class FieldProblem(Exception):
    """One thing wrong with one row: the field and why (becomes an ItemError)."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field, self.message = field, message


@dataclass(frozen=True)
class Row:
    """One JSON object of a data file and where it came from ("FILE:LINE" or "FILE[INDEX]").
    ``data`` holds JSON values, or for a release table (:mod:`.tables`) the values pyarrow
    gives and :class:`EmbeddedImage` cells: loaders check each field's type as they read it."""

    data: Mapping[str, object]
    source: str


@dataclass
class Rows:
    """The rows of a data set. ``path`` is the data file (or, for a release layout of several
    table files, their folder joined with ``*.parquet``/``*.arrow``, so that its parent is
    still the folder); ``layout`` is ``"json"`` for JSON / JSON Lines, else ``"parquet"`` or
    ``"arrow"`` (:mod:`.tables`)."""

    rows: list[Row]
    errors: list[ItemError]
    path: Path
    layout: str = "json"


@dataclass(frozen=True)
class EmbeddedImage:
    """An image cell of a release table (:mod:`.tables`), already written to a file: the file
    to read, or why there is none (no bytes, bytes that are no image). Image fields of a table
    row hold one of these where a JSON row holds a path."""

    path: Path | None
    problem: str | None = None
    sha256: str | None = None

    def checked(self, field: str, verify: bool = True) -> Path:
        if self.path is None:
            raise FieldProblem(field, self.problem or "no image")
        return check_image(self.path, field, verify)


def read_json_list(path: Path, of: str) -> list[JsonValue]:
    """The top-level list of a ``.json`` file; a file that cannot be parsed at all, or is
    not a list (of ``of``, as the message says), is a ValueError."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, list):
        raise ValueError(f"{path}: expected a JSON list of {of}, got {type(value).__name__}")
    return value


def read_rows(path: Path) -> Rows:
    """The objects of a ``.jsonl`` file (one per line) or a ``.json`` file (a list of objects).

    A line that is not a JSON object is one ItemError; a ``.json`` file that cannot be parsed
    at all, or is not a list, is a ValueError (nothing in it can be trusted)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        parsed = read_jsonl(path)
        rows = [Row(record, f"{path}:{line}") for record, line in zip(parsed.records, parsed.lines)]
        errors = [ItemError(f"{path}:{error.line}", None, None, error.message) for error in parsed.errors]
        return Rows(rows, errors, path)
    rows, errors = [], []
    for index, entry in enumerate(read_json_list(path, "objects")):
        if isinstance(entry, dict):
            rows.append(Row(entry, f"{path}[{index}]"))
        else:
            errors.append(ItemError(f"{path}[{index}]", None, None, f"expected a JSON object, got {type(entry).__name__}"))
    return Rows(rows, errors, path)


def load_rows(
    evaluator: str,
    rows: Rows,
    parse: Callable[[Mapping[str, object]], T],
    id_field: str = "id",
    id_of: Callable[[Mapping[str, object]], object] | None = None,
) -> LoadedDataset[T]:
    """Parse every row; a row that raises FieldProblem, or repeats an earlier id, is one ItemError
    and is skipped. Ids must be unique because records are matched to items by id."""
    dataset: LoadedDataset[T] = LoadedDataset(evaluator, [], list(rows.errors), str(rows.path))
    first_seen: dict[str, str] = {}
    for row in rows.rows:
        raw_id = id_of(row.data) if id_of else row.data.get(id_field)
        valid_id = isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id).strip() != ""
        item_id = str(raw_id) if valid_id else None
        try:
            if item_id is None:
                raise FieldProblem(id_field, "missing" if raw_id is None else f"must be a non-empty string or integer, got {raw_id!r}")
            if item_id in first_seen:
                raise FieldProblem(id_field, f"duplicate id (first at {first_seen[item_id]})")
            item = parse(row.data)
        except FieldProblem as problem:
            dataset.errors.append(ItemError(row.source, item_id, problem.field, problem.message))
            continue
        first_seen[item_id] = row.source
        dataset.items.append(item)
    return dataset


# ---- field readers: each returns the value or raises FieldProblem ----


@overload
def text(row: Mapping[str, object], name: str, optional: Literal[False] = False) -> str: ...
@overload
def text(row: Mapping[str, object], name: str, optional: bool) -> str | None: ...
def text(row: Mapping[str, object], name: str, optional: bool = False) -> str | None:
    """A non-empty string field, verbatim: a released text is asked byte for byte as its
    authors' code asks it (NaturalBench has questions that begin with a space), so nothing is
    stripped; a field of whitespace only is refused."""
    value = row.get(name)
    if value is None:
        if optional:
            return None
        raise FieldProblem(name, "missing")
    if not isinstance(value, str) or not value.strip():
        raise FieldProblem(name, f"expected a non-empty string, got {value!r}")
    return value


def text_list(row: Mapping[str, object], name: str, length: int | None = None, minimum: int = 1) -> tuple[str, ...]:
    """A list of non-empty strings, each verbatim (as :func:`text`)."""
    value = row.get(name)
    if value is None:
        raise FieldProblem(name, "missing")
    if not isinstance(value, list) or not all(isinstance(entry, str) and entry.strip() for entry in value):
        raise FieldProblem(name, f"expected a list of non-empty strings, got {value!r}")
    if length is not None and len(value) != length:
        raise FieldProblem(name, f"has {len(value)} entries, expected {length}")
    if len(value) < minimum:
        raise FieldProblem(name, f"has {len(value)} entries, expected at least {minimum}")
    return tuple(value)


def integer(row: Mapping[str, object], name: str) -> int:
    value = row.get(name)
    if value is None:
        raise FieldProblem(name, "missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldProblem(name, f"expected an integer, got {value!r}")
    return value


def resolve(base: Path, relative: str) -> Path:
    """An image path from a data file: relative to the data set's folder unless absolute."""
    path = Path(relative)
    return path if path.is_absolute() else base / path


def check_image(path: Path, field: str, verify: bool = True) -> Path:
    """``path`` if it is an image file PIL can open (and verify); FieldProblem otherwise."""
    if not path.is_file():
        raise FieldProblem(field, f"image file not found: {path}")
    if verify:
        try:
            with opened_header(path) as image:
                image.verify()
        except Exception as error:  # any failure to read is this item's problem, never the data set's
            raise FieldProblem(field, f"image {path} cannot be read ({type(error).__name__}: {error})") from None
    return path


def image_field(row: Mapping[str, object], name: str, base: Path, verify: bool, label: str | None = None) -> Path:
    """A path field naming an image relative to ``base`` (or a table's :class:`EmbeddedImage`), checked."""
    value = row.get(name)
    if isinstance(value, EmbeddedImage):
        return value.checked(label or name, verify)
    return check_image(resolve(base, text(row, name)), label or name, verify)


def image_list_field(row: Mapping[str, object], name: str, base: Path, verify: bool, length: int | None = None) -> tuple[Path, ...]:
    paths = text_list(row, name, length)
    return tuple(check_image(resolve(base, value), f"{name}[{index}]", verify) for index, value in enumerate(paths))


def image_files(folder: Path, suffixes: Iterable[str] = IMAGE_SUFFIXES) -> list[Path]:
    """The image files directly in ``folder`` (by suffix in any case, hidden files skipped), sorted by name."""
    wanted = {suffix.lower() for suffix in suffixes}
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in wanted and not p.name.startswith("."))


def first_existing(candidates: Iterable[Path]) -> Path | None:
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None
