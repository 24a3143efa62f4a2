"""Per-sample records: JSON Lines in, validated records out (docs/metrics.md).

Every problem is reported as a :class:`RecordError` naming the line, the record
id and the field, and validation never stops at the first bad record: callers
either fail with all errors listed or skip the bad records and keep the rest.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
from pydantic import JsonValue

#: One per-sample record: a JSON object (its fields' meaning is the evaluator's schema's).
Record = dict[str, JsonValue]

_fast_loads: Callable[[str | bytes], JsonValue]
try:  # orjson is the faster parser; the standard library is the fallback and the NaN reader
    import orjson

    _fast_loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency of prefect
    _fast_loads = json.loads


@dataclass(frozen=True)
class RecordError:
    """One problem with one record (or one line that is no record at all)."""

    line: int
    record_id: JsonValue
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}"
        if self.record_id is not None:
            where += f" (id {self.record_id!r})"
        if self.field:
            where += f", field '{self.field}'"
        return f"{where}: {self.message}"

    def as_dict(self) -> dict[str, JsonValue]:
        return {"line": self.line, "id": self.record_id, "field": self.field, "error": self.message}


class InvalidRecordsError(ValueError):
    """Raised when records fail validation and skipping was not asked for."""

    def __init__(self, errors: list[RecordError], source: str = "records"):
        self.errors = errors
        shown = "\n".join(str(e) for e in errors[:20])
        more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
        super().__init__(f"{len(errors)} invalid record(s) in {source}:\n{shown}{more}")


@dataclass
class ParsedLines:
    """The JSON objects of a JSONL source with their 1-based line numbers, and the lines that were not objects."""

    records: list[Record] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)


def _loads(text: str | bytes) -> JsonValue:
    try:
        return _fast_loads(text)
    except ValueError:
        # json accepts NaN/Infinity, which orjson rejects; those are field errors, not syntax errors.
        try:
            return json.loads(text)
        except RecursionError:
            raise ValueError("nested too deeply") from None


def parse_jsonl(lines: Iterable[str | bytes]) -> ParsedLines:
    """Parse JSON Lines; blank lines are ignored, anything else that is not a JSON object is an error."""
    parsed = ParsedLines()
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            value = _loads(text)
        except ValueError as exc:
            parsed.errors.append(RecordError(number, None, None, f"not valid JSON ({exc})"))
            continue
        if not isinstance(value, dict):
            parsed.errors.append(RecordError(number, None, None, f"expected a JSON object, got {type(value).__name__}"))
            continue
        parsed.records.append(value)
        parsed.lines.append(number)
    return parsed


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Cyclic garbage collection off while millions of containers are built: parsed records
    hold no cycles, and the collector's passes over the growing heap were most of the time
    a million lcm-mc records took to parse (benchmarks/bench_score_lcm_mc.py, RESULTS.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_jsonl(path: str | Path) -> ParsedLines:
    """Read a JSONL file (binary, so the fast parser sees bytes)."""
    with open(path, "rb") as handle:
        return parse_jsonl_bytes(handle.read())


def parse_jsonl_bytes(data: bytes) -> ParsedLines:
    """A JSONL file's bytes as records, as :func:`parse_jsonl` parses them."""
    with paused_gc():
        return _parse_whole(data) or parse_jsonl(data.split(b"\n"))


#: pyarrow's JSON reader crashes the process (SIGSEGV) on deeply nested input; records
#: nest two or three levels, so anything deeper is left to the line parser
COLUMNAR_MAX_DEPTH = 16
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_depth(data: bytes) -> int:
    """An upper bound of the bracket nesting in ``data`` (brackets inside strings count
    too), counted in C in one pass."""
    brackets = np.frombuffer(data.translate(None, _NOT_BRACKETS), dtype=np.uint8)
    if not len(brackets):
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max())


def jsonl_table(data: bytes) -> pa.Table | None:
    """A JSONL file's bytes as one Arrow table, read column by column by pyarrow's
    (multi-threaded) JSON reader, when every line is one JSON object and each field has
    one type throughout; None otherwise, and then :func:`parse_jsonl_bytes` is the way
    to say what is wrong where. A blank line or two objects on a line also give None
    (the table's row count would not be its line count), so row ``i`` is line ``i + 1``."""
    if not data:
        return None
    if not data.isascii():  # pyarrow lets invalid UTF-8 through in strings; the line parser does not
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if nesting_depth(data) > COLUMNAR_MAX_DEPTH:
        return None
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    try:
        table = pa_json.read_json(pa.BufferReader(data))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    return table if table.num_rows == lines else None


def _parse_whole(data: bytes) -> ParsedLines | None:
    """The common case in one call of the fast parser: every line one JSON object, no blank
    lines. The lines are parsed as the elements of one JSON array, which costs a fraction
    of a call per line; anything else (a blank or broken line, NaN, a line holding two
    values) returns None, and the caller parses line by line to say which line is wrong."""
    if _fast_loads is json.loads or not data:
        return None
    lines = data.split(b"\n")
    if not lines[-1]:
        lines.pop()  # the final newline
    if not lines or b"" in lines:
        return None
    try:
        values = _fast_loads(b"[" + b",".join(lines) + b"]")
    except ValueError:
        return None
    # a line holding "{...},{...}" parses as two elements: only one value per line is this case
    if not isinstance(values, list) or len(values) != len(lines):
        return None
    records = [value for value in values if type(value) is dict]
    if len(records) != len(values):
        return None
    return ParsedLines(records=records, lines=list(range(1, len(values) + 1)))


# ---- field checks shared by the schemas: each returns an error message or None ----


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float, not a bool (which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters (a 400-digit integer in an error line is noise)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 12]}… ({len(text)} chars)"


def probability_problem(value: object, low: float = 0.0, high: float = 1.0) -> str | None:
    """Why ``value`` is not a probability in [low, high], or None if it is. Integers are
    compared as integers: one too large for a float is out of range, not an OverflowError."""
    if is_number(value):
        if isinstance(value, float) and math.isnan(value):
            return "is NaN"
        if not low <= value <= high:
            return f"{shown(value)} is outside [{low:g}, {high:g}]"
        return None
    return f"{shown(value)} is not a number"


def probability_list_problem(values: object, length: int | None = None, low: float = 0.0, high: float = 1.0) -> str | None:
    """Why ``values`` is not a list of probabilities (of ``length`` entries, if given)."""
    if not isinstance(values, list):
        return f"expected a list of numbers, got {type(values).__name__}"
    if length is not None and len(values) != length:
        return f"has {len(values)} entries, expected {length}"
    for index, value in enumerate(values):
        problem = probability_problem(value, low, high)
        if problem:
            return f"entry {index} {problem}"
    return None


def probability_matrix_problem(values: object, rows: int, cols: int) -> str | None:
    """Why ``values`` is not a rows×cols nested list of probabilities."""
    if not isinstance(values, list) or len(values) != rows:
        return f"expected {rows} rows of {cols} probabilities"
    for index, row in enumerate(values):
        problem = probability_list_problem(row, cols)
        if problem:
            return f"row {index}: {problem}"
    return None


def record_id_problem(record: Mapping[str, object]) -> str | None:
    if "id" not in record:
        return "missing"
    if not isinstance(record["id"], (str, int)) or isinstance(record["id"], bool):
        return f"must be a string or an integer, got {type(record['id']).__name__}"
    return None
