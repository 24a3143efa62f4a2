"""``load_dataset(evaluator, path, format)``: the one entry point from a data set on disk to the
items a runner consumes.

| evaluator | formats (module) | item |
| --- | --- | --- |
| ``lcm-mc`` | ``vlgate`` (:mod:`.local`), ``mmmu`` (:mod:`.mmmu`), ``easy-vqa`` (:mod:`.easyvqa`) | McItem |
| ``lcm-nb`` | ``vlgate``, ``naturalbench``, ``naturalbench-lmms-eval`` (:mod:`.naturalbench`) | NbUnit |
| ``vlind`` | ``vlgate``, ``vlind-bench`` (:mod:`.vlind_bench`) | VlindItem |
| ``genception`` | ``vlgate`` (category folders), ``mme`` (category folders, or lmms-eval's MME parquet; :mod:`.mme`) | GenceptionItem |
| ``decc`` | ``vlgate``, ``aokvqa`` (:mod:`.aokvqa`) | DeccItem |
| ``yes-no`` | ``vlgate``, ``easy-vqa`` (its yes/no questions) | YesNoItem (input of :func:`.pairing.pair_unlabelled`) |

A format names the fields of a row; the rows come from JSON / JSON Lines or from a Hugging
Face release layout (parquet, or ``save_to_disk`` arrow files, images embedded; :mod:`.tables`),
whichever ``path`` holds. ``path`` is the data file, or a folder holding it: the format's usual
file name there (``items.jsonl``/``units.jsonl`` for vlgate, ``data.json`` for vlind-bench,
``questions.json`` for easy-vqa),
else the release layout when the folder holds ``.parquet``/``.arrow`` files (sub-folders
included), else the only ``.jsonl``/``.json`` file in the folder; or a glob pattern of
``.parquet``/``.arrow`` files (one split of a release, e.g. ``MMMU/*/validation-*.parquet``).
A synthetic world's root folder works too (its ``mc/``, ``nb/``, ... sub-folder is used).
``format="auto"`` looks at the first row's fields (e.g. ``Image_0`` → naturalbench,
``Index`` + ``Image`` + ``Question`` → naturalbench-lmms-eval, ``image_1`` or a letter answer →
mmmu, ``choices`` → aokvqa, ``best_img_id`` → vlind-bench, ``question`` + ``image_id`` without
``image``/``options`` → easy-vqa, otherwise the local format when its fields are there); for
genception, a release layout is MME's parquet, a folder otherwise category folders. A format
whose data file holds rows that are not JSON objects reads them itself (``ROW_READERS``:
easy-VQA's ``questions.json`` is a list of ``[question, answer, image_id]`` lists), when it is
the format asked for, or with ``format="auto"`` when the file has that shape.

An unknown evaluator or format, a format that does not apply to the evaluator, a path that
does not exist, or a data file that cannot be read at all is a ValueError; a bad item is one
ItemError in ``LoadedDataset.errors`` and the other items still load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, overload

from vlgate.evaluators.loaders import aokvqa, easyvqa, local, mmmu, naturalbench, tables, vlind_bench
from vlgate.evaluators.loaders.common import Rows, read_rows
from vlgate.evaluators.loaders.items import DeccItem, GenceptionItem, LoadedDataset, McItem, NbUnit, VlindItem
from vlgate.evaluators.loaders.mme import load_categories, load_mme_table
from vlgate.evaluators.loaders.pairing import YesNoItem

#: What :func:`load_dataset` returns for some evaluator: the items of one of the evaluators.
EvaluatorDataset = (
    LoadedDataset[McItem] | LoadedDataset[NbUnit] | LoadedDataset[VlindItem] | LoadedDataset[GenceptionItem] | LoadedDataset[DeccItem] | LoadedDataset[YesNoItem]
)
#: ``loader(rows, verify, **format_options)`` (genception's: ``loader(folder, verify, **options)``);
#: each format's loader takes its own options (``FORMAT_OPTIONS``), so the rest is not typed here.
Loader = Callable[..., EvaluatorDataset]

#: evaluator → {format: loader(rows, verify)}; genception's loaders take a folder instead.
FORMATS: dict[str, dict[str, Loader]] = {
    "lcm-mc": {"vlgate": local.load_mc, "mmmu": mmmu.load_mmmu, "easy-vqa": easyvqa.load_easy_vqa_mc},
    "lcm-nb": {"vlgate": local.load_nb, "naturalbench": naturalbench.load_naturalbench, "naturalbench-lmms-eval": naturalbench.load_naturalbench_lmms_eval},
    "vlind": {"vlgate": local.load_vlind, "vlind-bench": vlind_bench.load_vlind_bench},
    "genception": {"vlgate": load_categories, "mme": load_categories},
    "decc": {"vlgate": local.load_decc, "aokvqa": aokvqa.load_aokvqa},
    "yes-no": {"vlgate": local.load_yes_no, "easy-vqa": easyvqa.load_easy_vqa_yes_no},
}
EVALUATORS = tuple(FORMATS)
ALIASES = {"yesno": "yes-no", "yes_no": "yes-no"}

#: format="auto": (format, test on the first row), tried in order.
DETECTORS: dict[str, list[tuple[str, Callable[[Mapping[str, object]], bool]]]] = {
    "lcm-mc": [("vlgate", lambda row: local.looks_local("lcm-mc", row)), ("mmmu", mmmu.looks_mmmu), ("easy-vqa", easyvqa.looks_easy_vqa)],
    "lcm-nb": [
        ("naturalbench", naturalbench.looks_naturalbench),
        ("naturalbench-lmms-eval", naturalbench.looks_naturalbench_lmms_eval),
        ("vlgate", lambda row: local.looks_local("lcm-nb", row)),
    ],
    "vlind": [("vlgate", lambda row: local.looks_local("vlind", row)), ("vlind-bench", vlind_bench.looks_vlind_bench)],
    "decc": [("aokvqa", aokvqa.looks_aokvqa), ("vlgate", lambda row: local.looks_local("decc", row))],
    "yes-no": [("vlgate", lambda row: local.looks_local("yes-no", row)), ("easy-vqa", easyvqa.looks_easy_vqa)],
}

#: The file a folder of each format is expected to hold (otherwise: its only .jsonl/.json file).
DEFAULT_FILES = {"vlgate": local.DATA_FILES, "vlind-bench": {"vlind": vlind_bench.DATA_FILE}, "easy-vqa": dict.fromkeys(("lcm-mc", "yes-no"), easyvqa.DATA_FILE)}

#: Formats whose data file holds rows that are not JSON objects: (does a file hold them?, read them).
ROW_READERS: dict[str, tuple[Callable[[Path], bool], Callable[[Path], Rows]]] = {"easy-vqa": (easyvqa.holds_question_lists, easyvqa.read_questions)}

#: The options a format's loader takes besides (rows, verify): VLind-Bench's inclusion rules,
#: A-OKVQA's COCO folder.
FORMAT_OPTIONS: dict[str, tuple[str, ...]] = {"vlind-bench": ("vote_threshold", "style"), "aokvqa": ("coco_dir",)}


def _evaluator_name(evaluator: str) -> str:
    name = ALIASES.get(evaluator, evaluator)
    if name not in FORMATS:
        raise ValueError(f"unknown evaluator {evaluator!r}; expected one of {', '.join(EVALUATORS)}")
    return name


def _check_format(evaluator: str, format: str) -> None:
    if format == "auto" or format in FORMATS[evaluator]:
        return
    known = sorted({name for formats in FORMATS.values() for name in formats})
    choices = ", ".join([*FORMATS[evaluator], "auto"])
    if format in known:
        raise ValueError(f"format {format!r} does not apply to evaluator {evaluator!r}; its formats are {choices}")
    raise ValueError(f"unknown format {format!r}; evaluator {evaluator!r} reads {choices}")


def release_files(evaluator: str, format: str, path: Path) -> list[Path]:
    """The release layout's table files at ``path`` ([]: read JSON): a ``.parquet``/``.arrow``
    file, or a folder holding such files and not the format's usual JSON data file."""
    if path.is_dir():
        formats = [format] if format != "auto" else list(FORMATS[evaluator])
        if any((path / DEFAULT_FILES[name][evaluator]).is_file() for name in formats if evaluator in DEFAULT_FILES.get(name, {})):
            return []
    return tables.table_files(path)


def data_file(evaluator: str, format: str, path: Path) -> Path:
    """The data file to read for ``path`` (a file, or a folder holding one)."""
    if path.is_file():
        if path.suffix not in (".jsonl", ".json"):
            raise ValueError(f"{path}: expected a .jsonl or .json data file")
        return path
    formats = [format] if format != "auto" else list(FORMATS[evaluator])
    for name in formats:
        default = DEFAULT_FILES.get(name, {}).get(evaluator)
        if default and (path / default).is_file():
            return path / default
    candidates = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json") and not p.name.startswith("."))
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        splits = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith(".") and any(q.is_file() and q.suffix in (".jsonl", ".json") for q in p.iterdir()))
        hint = f" (its sub-folders {', '.join(splits)} hold one: point at one of them)" if splits else ""
        raise ValueError(f"{path}: no .jsonl or .json data file for {evaluator}{hint}")
    raise ValueError(f"{path}: {len(candidates)} data files ({', '.join(p.name for p in candidates)}); pass the one to read")


def read_data_rows(evaluator: str, format: str, file: Path) -> Rows:
    """The rows of a JSON / JSON Lines data file: a ``ROW_READERS`` format's own reader when it
    is the format asked for (or ``format="auto"`` and the file has its shape), else :func:`read_rows`."""
    for name, (holds, read) in ROW_READERS.items():
        if name in FORMATS[evaluator] and format in (name, "auto") and holds(file):
            return read(file)
    return read_rows(file)


def detect_format(evaluator: str, rows: Rows) -> str:
    """The format of a data file, from its first row (the local format for an empty file)."""
    if not rows.rows:
        return "vlgate"
    first = rows.rows[0].data
    for name, looks_like in DETECTORS[evaluator]:
        if looks_like(first):
            return name
    choices = ", ".join(FORMATS[evaluator])
    raise ValueError(f"{rows.rows[0].source}: cannot tell the format for {evaluator} from the fields {sorted(first)}; pass format= one of {choices}")


@overload
def load_dataset(evaluator: Literal["lcm-mc"], path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> LoadedDataset[McItem]: ...
@overload
def load_dataset(evaluator: Literal["lcm-nb"], path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> LoadedDataset[NbUnit]: ...
@overload
def load_dataset(evaluator: Literal["vlind"], path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> LoadedDataset[VlindItem]: ...
@overload
def load_dataset(evaluator: Literal["genception"], path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> LoadedDataset[GenceptionItem]: ...
@overload
def load_dataset(evaluator: Literal["decc"], path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> LoadedDataset[DeccItem]: ...
@overload
def load_dataset(
    evaluator: Literal["yes-no", "yesno", "yes_no"], path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object
) -> LoadedDataset[YesNoItem]: ...
@overload
def load_dataset(evaluator: str, path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> EvaluatorDataset: ...
def load_dataset(evaluator: str, path: str | Path, format: str = "auto", *, verify_images: bool = True, **options: object) -> EvaluatorDataset:
    """The items of the data set at ``path`` for ``evaluator``, and one ItemError per bad item.

    ``verify_images`` (default on) opens and verifies every image at load time (see
    :mod:`.common` for what that costs and catches); off, only existence is checked.
    ``options`` go to the format's loader (``FORMAT_OPTIONS``: ``vote_threshold`` and
    ``style`` for vlind-bench; ``image_suffixes`` for genception's category folders); one the
    data's format does not take is a ValueError."""
    evaluator = _evaluator_name(evaluator)
    _check_format(evaluator, format)
    path = Path(path)
    if not path.exists() and not tables.has_glob(path):
        raise ValueError(f"{evaluator} data {path}: no such file or folder")
    if path.exists():
        path = local.world_path(evaluator, path)
        files = [] if evaluator == "genception" and format == "vlgate" else release_files(evaluator, format, path)
    else:
        files = tables.glob_files(path)
    if evaluator == "genception":
        unknown = sorted(set(options) - {"image_suffixes"})
        if unknown:
            raise ValueError(f"{path}: genception's data takes image_suffixes alone as a loader option (got {', '.join(unknown)})")
        if files and format == "vlgate":
            raise ValueError(f"{path}: genception's vlgate format is category folders; lmms-eval's MME parquet is format mme")
        # a table names its images in its rows: image_suffixes filters category folders only
        if files:
            return load_mme_table(tables.read_table_rows(path, files), verify_images)
        load_folders: Loader = load_categories  # its options (image_suffixes) are checked above and by its signature
        return load_folders(path, verify_images, **options)
    rows = tables.read_table_rows(path, files) if files else read_data_rows(evaluator, format, data_file(evaluator, format, path))
    chosen = detect_format(evaluator, rows) if format == "auto" else format
    unknown = sorted(set(options) - set(FORMAT_OPTIONS.get(chosen, ())))
    if unknown:
        takes = [name for name, known in FORMAT_OPTIONS.items() if set(unknown) <= set(known)]
        where = f"the {' or '.join(takes)} format only" if takes else "no format"
        raise ValueError(f"{rows.path}: {', '.join(unknown)} apply to {where}; this {evaluator} data is in the {chosen} format")
    return FORMATS[evaluator][chosen](rows, verify_images, **options)
