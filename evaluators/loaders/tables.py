"""Release layouts from the Hugging Face Hub: parquet files, and ``datasets``' ``save_to_disk``
arrow files, read with pyarrow alone (no ``datasets`` dependency), images embedded as bytes.

What a suite's ``data:`` may name (the format modules then read the rows' fields exactly as
they read a JSON row's: :mod:`.naturalbench`, :mod:`.mmmu`, :mod:`.mme`, ...):

- one ``.parquet`` or ``.arrow`` file;
- a folder: a ``save_to_disk`` folder (``state.json`` lists its ``data-0000K-of-0000N.arrow``
  files; ``dataset_info.json`` beside it is not read), else every ``.parquet`` / ``.arrow`` file
  under it, sub-folders included (a snapshot of a Hub repository: ``data/train-00000-of-00003.parquet``,
  MMMU's ``Art/validation-00000-of-00001.parquet``, the parquet converter's
  ``default/test/0000.parquet``), hidden folders and ``datasets``' own ``cache-*.arrow`` skipped,
  files in path order;
- a glob pattern of such files, e.g. ``MMMU/*/validation-*.parquet``.

A folder (or pattern) whose files belong to several splits is refused, naming the splits and a
pattern for one: the split of a file is the ``SPLIT`` of Hub's ``SPLIT-0000K-of-0000N[-HASH]``
names (``BUILDER-SPLIT-…`` in ``datasets``' cache), else the word ``train``/``test``/``validation``/
``dev``/``val``/``testmini`` as the file's or its folder's name; other names have no split. A
``save_to_disk`` of a DatasetDict (``dataset_dict.json``) is the same: name one split's folder.

Each row is one :class:`~.common.Row`, its source ``FILE[ROW]`` (0-based within the file). A
file pyarrow cannot read makes the whole data set a ValueError, as an unreadable JSON file does.

**Images.** The ``datasets`` Image feature is a struct column ``{"bytes": binary, "path":
string}``; every such column is an image column. Items keep carrying image *paths* (the
least invasive choice: :func:`~.items.open_image`, the runners' ``prepare``, the record
store's content hash of an item and the report's sample review all take a path, and none of
them changes), so each embedded image is written once into a content-addressed cache,
``$VLGATE_HOME/image-cache/AB/ABCDEF….png`` (the sha256 of the bytes; the suffix from the
format PIL reads in the header), atomically (a temporary file renamed), and a cell becomes an
:class:`~.common.EmbeddedImage` holding that path. The same bytes are one file however often
and in whichever data set they occur; a second load writes nothing. The cache lives in
``VLGATE_HOME`` (the one folder of vlgate's state and caches), not beside the data,
since a downloaded data set may be read-only or a shared Hub cache. An item's fingerprint is
the same as if its images had been files: the store hashes the file's bytes, which are the
embedded bytes. A cell with no bytes but a ``path`` is read as a file path relative to the
table's folder; a cell with neither, or bytes PIL cannot identify as an image, is one
per-item error naming that field when a loader reads it (and nothing is written).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import JsonValue

from vlgate.evaluators.images import ImageTooLarge, opened_header, read_image
from vlgate.evaluators.loaders.common import EmbeddedImage, Row, Rows, resolve
from vlgate.home import vlgate_home

TABLE_SUFFIXES = (".parquet", ".arrow")
SPLIT_WORDS = frozenset({"train", "test", "validation", "dev", "val", "testmini"})
#: Hub's shard suffix: ``-00000-of-00003`` and, in some repositories, ``-a25dbe3b44c4fda6``.
_SHARD = re.compile(r"-\d{5}-of-\d{5}(?:-[0-9a-f]{8,})?$")
_IMAGE_SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "BMP": ".bmp", "WEBP": ".webp", "TIFF": ".tif", "MPO": ".jpg"}
BATCH_ROWS = 32  # rows converted to Python at a time: a few embedded images in memory, not a whole shard


def image_cache_dir() -> Path:
    """Where embedded images are extracted: ``$VLGATE_HOME/image-cache`` (absolute)."""
    return (vlgate_home() / "image-cache").resolve()


def has_glob(path: Path) -> bool:
    return glob.has_magic(str(path))


def glob_files(pattern: Path) -> list[Path]:
    """The table files a glob pattern matches (ValueError when it matches none)."""
    found = sorted(Path(p) for p in glob.glob(str(pattern), recursive=True) if Path(p).is_file() and Path(p).suffix in TABLE_SUFFIXES)
    if not found:
        raise ValueError(f"{pattern}: the pattern matches no .parquet or .arrow file")
    return found


def table_files(path: Path) -> list[Path]:
    """The table files ``path`` stands for ([] when it holds none): see the module docstring."""
    if path.is_file():
        return [path] if path.suffix in TABLE_SUFFIXES else []
    if not path.is_dir():
        return []
    if (path / "dataset_dict.json").is_file():
        declared = _json(path / "dataset_dict.json").get("splits")
        splits: Sequence[object] = (
            (declared if isinstance(declared, (list, str)) else [])
            or sorted(p.name for p in path.iterdir() if (p / "state.json").is_file()) or ["SPLIT"]
        )  # fmt: skip
        raise ValueError(f"{path}: a save_to_disk DatasetDict of splits {', '.join(map(str, splits))}; point data: at one split's folder, e.g. {path / str(splits[0])}")
    if (path / "state.json").is_file():
        listed = _json(path / "state.json").get("_data_files")
        entries = [entry.get("filename") for entry in listed if isinstance(entry, dict)] if isinstance(listed, list) else []
        filenames = [name for name in entries if isinstance(name, str)]
        if isinstance(listed, list) and listed and len(filenames) == len(listed):
            files = [path / name for name in filenames]
            missing = [str(file) for file in files if not file.is_file()]
            if missing:
                raise ValueError(f"{path}: state.json lists data files that are not there: {', '.join(missing)}")
            return files
    found = []
    for folder, subfolders, names in os.walk(path):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        found += [Path(folder) / name for name in names if Path(name).suffix in TABLE_SUFFIXES and not name.startswith((".", "cache-"))]
    return sorted(found)


def _json(path: Path) -> dict[str, JsonValue]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    return value if isinstance(value, dict) else {}


def split_of(file: Path) -> str | None:
    """The split a release file belongs to, from its name or its folder's (None: no split)."""
    stem = file.stem
    sharded = _SHARD.search(stem)
    word = _SHARD.sub("", stem).rsplit("-", 1)[-1]
    if sharded and word and word != "data":  # save_to_disk's data-0000K-of-0000N is no split
        return word
    if word in SPLIT_WORDS:
        return word
    return file.parent.name if file.parent.name in SPLIT_WORDS else None


def check_one_split(path: Path, files: list[Path]) -> None:
    splits: dict[str, Path] = {}
    for file in files:
        split = split_of(file)
        if split is not None:
            splits.setdefault(split, file)
    if len(splits) > 1:
        shown = "validation" if "validation" in splits else sorted(splits)[0]
        example = Path(os.path.commonpath([str(f.parent) for f in files])) / "**" / f"{shown}-*{splits[shown].suffix}"
        raise ValueError(f"{path}: files of {len(splits)} splits ({', '.join(sorted(splits))}); point data: at one split, e.g. the pattern {example}")


def _is_image_type(kind: pa.DataType) -> bool:
    if not pa.types.is_struct(kind) or kind.get_field_index("bytes") < 0:
        return False
    inner = kind.field(kind.get_field_index("bytes")).type
    return bool(pa.types.is_binary(inner) or pa.types.is_large_binary(inner))


def _batches(file: Path) -> Iterator[pa.RecordBatch]:
    if file.suffix == ".parquet":
        yield from pq.ParquetFile(file).iter_batches(batch_size=BATCH_ROWS)
        return
    with pa.memory_map(str(file)) as source:
        try:
            stream = pa.ipc.open_stream(source)  # what datasets writes (save_to_disk and its cache)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)  # the IPC file format, for arrow files written otherwise
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)
            return
        yield from stream


class ImageExtractor:
    """Turns image cells into :class:`EmbeddedImage` (writing each distinct image once)."""

    def __init__(self, cache: Path):
        self.cache = cache
        self.seen: dict[str, EmbeddedImage] = {}

    def __call__(self, cell: object, folder: Path) -> EmbeddedImage:
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data:
            name = cell.get("path") if isinstance(cell, dict) else None
            if isinstance(name, str) and name.strip():
                path = resolve(folder, name.strip())
                if path.is_file():
                    return EmbeddedImage(path)
                return EmbeddedImage(None, f"no image bytes, and its path {name!r} is not a file (looked for {path})")
            return EmbeddedImage(None, "no image bytes (and no path)")
        digest = hashlib.sha256(data).hexdigest()
        if digest in self.seen:
            return self.seen[digest]
        try:
            with opened_header(data) as image:
                kind = image.format or ""
        except Exception as error:  # whatever PIL raises on bytes it cannot identify is this cell's problem
            self.seen[digest] = EmbeddedImage(None, f"{len(data)} image bytes are not an image PIL can read ({type(error).__name__}: {error})", digest)
            return self.seen[digest]
        suffix = _IMAGE_SUFFIXES.get(kind) or (f".{kind.lower()}" if kind else ".img")
        target = self.cache / digest[:2] / f"{digest}{suffix}"
        if not (target.is_file() and target.stat().st_size == len(data)):  # named by its content: present is right, unless cut short
            _write_atomically(target, data)
        self.seen[digest] = EmbeddedImage(target, None, digest)
        return self.seen[digest]


def _write_atomically(target: Path, data: bytes) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise ValueError(f"cannot write the image cache {target.parent} ({error}); point VLGATE_HOME at a writable folder") from None


def read_table_rows(path: Path, files: list[Path], cache: Path | None = None) -> Rows:
    """The rows of the table files ``files`` (that ``path`` stands for), image cells extracted
    into ``cache`` (default :func:`image_cache_dir`). ValueError for files of several splits or
    a file pyarrow cannot read."""
    check_one_split(path, files)
    extract = ImageExtractor(cache or image_cache_dir())
    rows: list[Row] = []
    for file in files:
        kind = "parquet" if file.suffix == ".parquet" else "arrow"
        index = 0
        try:
            for batch in _batches(file):
                images = [field.name for field in batch.schema if _is_image_type(field.type)]
                for record in batch.to_pylist():
                    for name in images:
                        if record.get(name) is not None:
                            record[name] = extract(record[name], file.parent)
                    rows.append(Row(record, f"{file}[{index}]"))
                    index += 1
        except (pa.ArrowException, OSError) as error:
            raise ValueError(f"{file}: not a readable {kind} file ({type(error).__name__}: {error})") from None
    if len(files) == 1:
        label = files[0]
    else:
        label = Path(os.path.commonpath([str(file.parent) for file in files])) / f"*{files[0].suffix}"
    return Rows(rows, [], label, "parquet" if files[0].suffix == ".parquet" else "arrow")


def same_image(a: object, b: object) -> bool:
    """Whether two image cells (EmbeddedImage or path strings) hold the same image: the same
    bytes, or else the same pixels once decoded (bytes re-encoded by another writer), each
    within the pixel budget (:class:`~vlgate.evaluators.images.ImageTooLarge` otherwise)."""
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    if not isinstance(a, EmbeddedImage) or not isinstance(b, EmbeddedImage):
        return False
    if a.path is None or b.path is None:
        return a == b
    if a.path == b.path:
        return True
    try:
        with opened_header(a.path) as first, opened_header(b.path) as second:
            if first.size != second.size:
                return False
        return read_image(a.path).tobytes() == read_image(b.path).tobytes()
    except ImageTooLarge:  # not decoded to compare: the item's error says why
        raise
    except Exception:  # an unreadable one is reported where a loader reads it; here it only differs
        return False
