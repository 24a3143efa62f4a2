"""What a record schema is, the array helpers every schema shares, and validation against
one. Each evaluator's schema lives in its package (``vl_lcm/schema.py``, ``vlind/schema.py``,
``genception/schema.py``, ``decc/schema.py``); its definition says which is whose, and
``scoring.validate`` validates by evaluator name.

Validation runs in two passes so that a million records stay cheap: a per-record
pass over structure (fields present, list lengths, labels), then the numbers are
stacked into arrays and range-checked in one vectorised step. Only the rows that
fail the vectorised check are inspected one by one, to name the exact entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import JsonValue

from vlgate.evaluators.records import (
    InvalidRecordsError,
    ParsedLines,
    Record,
    RecordError,
    jsonl_table,
    parse_jsonl_bytes,
    record_id_problem,
)

if TYPE_CHECKING:
    import pandas as pd

Problem = tuple[str, str]  # (field, message)
#: a schema's arrays by name: what an evaluator's ``per_sample`` reads (NumPy arrays, or
#: object Series for text fields)
Arrays = dict[str, "np.ndarray | pd.Series"]
#: one field's per-record check: why the value is wrong, or None
FieldCheck = Callable[[JsonValue], "str | None"]


def stack(rows: Sequence[JsonValue], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stack nested number lists into a float array; ragged 1-D rows are zero-padded to ``width``.

    Returns the array and a mask of rows holding something other than numbers.
    """
    try:
        array = np.array(rows)
        if array.dtype.kind in "fiu" and (width is None or (array.ndim == 2 and array.shape[1] == width)):
            # numpy reads true/false among numbers as 1/0: JSON booleans are no probabilities
            return array.astype(np.float64, copy=False), np.fromiter(map(_holds_bool, rows), dtype=bool, count=len(rows))
    except ValueError:  # ragged
        pass
    if width is not None:
        shape = (width,)
    else:  # every row should have the first row's shape; a ragged first row is judged by its length
        first = rows[0]
        try:
            shape = np.array(first).shape
        except ValueError:  # a ragged nested list
            shape = (len(first) if isinstance(first, Sized) else 0,)
    array = np.zeros((len(rows), *shape))
    non_numeric = np.zeros(len(rows), dtype=bool)
    for index, row in enumerate(rows):
        try:
            values = np.array(row)
        except ValueError:
            values = np.array([], dtype=object)
        if values.dtype.kind not in "fiu" or _holds_bool(row):
            non_numeric[index] = True
        elif width is not None and values.ndim == 1:
            array[index, : values.shape[0]] = values
        elif width is None and values.shape == shape:
            array[index] = values
        else:
            non_numeric[index] = True
    return array, non_numeric


def as_list(value: JsonValue) -> list[JsonValue]:
    """A field the structure checks found to be a list, as ``arrays`` and ``set_problems``
    read it (they are given structurally valid records only)."""
    assert isinstance(value, list), "a list field of a structurally valid record"
    return value


def _holds_bool(value: object) -> bool:
    """Whether a (nested) list holds a JSON boolean anywhere (the types collected in C)."""
    if type(value) is not list:
        return type(value) is bool
    kinds = set(map(type, value))
    return bool in kinds or (list in kinds and any(_holds_bool(item) for item in value if type(item) is list))


def outside(array: np.ndarray, low: float, high: float) -> np.ndarray:
    """Rows with any entry outside [low, high] or NaN (NaN fails both comparisons)."""
    inside = np.asarray((array >= low) & (array <= high))
    return np.asarray(~inside.reshape(len(array), -1).all(axis=1))


def ids_plainly_valid(table: pa.Table) -> bool:
    """Every record has an id, all integers or all strings, and no id repeats."""
    if "id" not in table.column_names:
        return False
    ids = table.column("id")
    kind = ids.type
    if ids.null_count or not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return False
    return pc.count_distinct(ids).as_py() == table.num_rows


def probability_rows(table: pa.Table, name: str) -> np.ndarray | None:
    """A column of number lists, one length throughout, every entry in [0, 1], as an
    (N, K) array; None otherwise."""
    if name not in table.column_names:
        return None
    column = table.column(name).combine_chunks()
    if not pa.types.is_list(column.type) or column.null_count:
        return None
    if not (pa.types.is_floating(column.type.value_type) or pa.types.is_integer(column.type.value_type)):
        return None
    shortest, longest = (value.as_py() for value in pc.min_max(pc.list_value_length(column)).values())
    if shortest is None or shortest != longest:
        return None
    values = pc.list_flatten(column)
    if values.null_count:
        return None
    rows = values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False).reshape(len(column), shortest)
    return None if outside(rows, 0, 1).any() else rows


def option_indices(table: pa.Table, name: str, options: int) -> np.ndarray | None:
    """An optional option-index column (absent or null = -1), every index in [0, options); None otherwise."""
    if name not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int64)
    column = table.column(name)
    if pa.types.is_null(column.type):
        return np.full(table.num_rows, -1, dtype=np.int64)
    if not pa.types.is_integer(column.type):
        return None
    indices = pc.fill_null(column, -1).to_numpy().astype(np.int64, copy=False)
    present = indices[indices != -1] if column.null_count else indices
    return indices if ((present >= 0) & (present < options)).all() else None


class Schema:
    """A record contract: structure per record, then numbers as arrays."""

    def structure_problems(self, record: Record) -> Iterator[Problem]:
        raise NotImplementedError

    def plainly_valid(self, record: Record) -> bool:
        """A cheap test that the record's structure is fine; False only means "ask structure_problems"."""
        return False

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        """Arrays for structurally valid records, and the numeric problems by row."""
        raise NotImplementedError

    def set_problems(self, records: list[Record]) -> dict[int, Problem]:
        """Problems that only show across records (e.g. a differing T); none by default."""
        return {}

    def columnar_arrays(self, table: pa.Table) -> Arrays | None:
        """The arrays of a table of records (:func:`records.jsonl_table`) when every record
        is plainly valid, judged column by column; None whenever anything might not be
        (then the records are validated one by one, which names what is wrong). Schemas
        without this fast path always say None."""
        return None

    @staticmethod
    def _numeric_problems(records: Sequence[Record], fields_and_checks: Sequence[tuple[str, FieldCheck]], masks: Sequence[np.ndarray]) -> dict[int, Problem]:
        """Turn flagged rows into precise messages with the per-record checkers."""
        problems: dict[int, Problem] = {}
        for (name, check), mask in zip(fields_and_checks, masks):
            for row in map(int, np.flatnonzero(mask)):
                if row not in problems:
                    problems[row] = (name, check(records[row][name]) or "invalid")
        return problems


class ValidRecords:
    """Records that passed their schema, their arrays, and what was rejected. Records
    read column by column (the fast path of :func:`validate_file`) keep their ``table``
    and become dicts only when something asks for ``records``; such dicts carry every
    field of the file, None where a record lacked it (as :meth:`column` reads it)."""

    def __init__(
        self,
        evaluator: str,
        records: list[Record] | None,
        lines: list[int],
        arrays: Arrays,
        errors: list[RecordError] | None = None,
        table: pa.Table | None = None,
    ):
        if records is None and table is None:
            raise ValueError("records or a table of them")
        self.evaluator = evaluator
        self._records = records
        self.lines = lines
        self.arrays = arrays
        self.errors = errors or []
        self.table = table

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            assert self.table is not None
            self._records = self.table.to_pylist()
        return self._records

    def __len__(self) -> int:
        return len(self.lines)

    def column(self, name: str) -> list[JsonValue] | np.ndarray:
        """One field of every record (None where absent); a numpy array for an integer
        field read column by column."""
        if self._records is None and self.table is not None:
            if name not in self.table.column_names:
                return [None] * len(self)
            column = self.table.column(name)
            if pa.types.is_integer(column.type) and column.null_count == 0:
                return column.to_numpy()
            return column.to_pylist()
        return [r.get(name) for r in self.records]


def protocol_problems(records: Sequence[Mapping[str, JsonValue]]) -> dict[int, Problem]:
    """One protocol per set (``evaluators/protocols.py``): records measured under another
    protocol than most of the set's (or without one beside records with one) are named,
    since their numbers are not comparable. A record's ``protocol`` must be a string."""
    found = [record.get("protocol") for record in records]
    problems: dict[int, Problem] = {row: ("protocol", f"must be a string, got {type(value).__name__}") for row, value in enumerate(found) if value is not None and not isinstance(value, str)}
    named = [value if isinstance(value, str) else None for value in found]
    if len(set(named)) > 1:
        expected = max(set(named), key=lambda value: (named.count(value), value is not None))  # the most common; a tie goes to a named one
        shown = lambda value: f"protocol {value!r}" if value is not None else "no protocol"
        for row, value in enumerate(named):
            if value != expected and row not in problems:
                problems[row] = ("protocol", f"was measured under {shown(value)} but the other records under {shown(expected)}: score one protocol per set")
    return problems


def validate_against(schema: Schema, evaluator: str, parsed: ParsedLines, skip_invalid: bool = False, source: str = "records") -> ValidRecords:
    """Check parsed records against ``schema`` (the one of ``evaluator``).

    Without ``skip_invalid`` any problem raises :class:`InvalidRecordsError` listing
    every bad record; with it, the bad records are dropped and listed in ``errors``.
    """
    errors = list(parsed.errors)
    seen_ids: dict[object, int] = {}
    rows: list[int] = []  # indices into parsed.records still valid
    plainly_valid = schema.plainly_valid
    for row, record in enumerate(parsed.records):
        record_id = record.get("id")
        if type(record_id) in (str, int) and record_id not in seen_ids and plainly_valid(record):
            seen_ids[record_id] = parsed.lines[row]
            rows.append(row)
            continue
        line = parsed.lines[row]
        problem = record_id_problem(record)
        if problem:
            errors.append(RecordError(line, None if problem == "missing" else record_id, "id", problem))
            continue
        if record_id in seen_ids:
            errors.append(RecordError(line, record_id, "id", f"duplicate id (first on line {seen_ids[record_id]})"))
            continue
        seen_ids[record_id] = line
        problems = list(schema.structure_problems(record))
        errors.extend(RecordError(line, record_id, name, message) for name, message in problems)
        if not problems:
            rows.append(row)

    def drop(found: dict[int, Problem]) -> None:
        errors.extend(
            RecordError(parsed.lines[rows[i]], parsed.records[rows[i]]["id"], name, message) for i, (name, message) in found.items()
        )
        rows[:] = [row for i, row in enumerate(rows) if i not in found]

    drop(protocol_problems([parsed.records[row] for row in rows]))
    drop(schema.set_problems([parsed.records[row] for row in rows]))
    records = [parsed.records[row] for row in rows]
    arrays, numeric_problems = schema.arrays(records) if records else ({}, {})
    if numeric_problems:
        drop(numeric_problems)
        records = [parsed.records[row] for row in rows]
        arrays = schema.arrays(records)[0] if records else {}
    errors.sort(key=lambda e: e.line)
    if errors and not skip_invalid:
        raise InvalidRecordsError(errors, source)
    return ValidRecords(evaluator, records, [parsed.lines[row] for row in rows], arrays, errors)


def _one_protocol(column: pa.ChunkedArray) -> bool:
    return pa.types.is_string(column.type) and column.null_count == 0 and len(pc.unique(column)) <= 1


def validate_file(schema: Schema, evaluator: str, path: str | Path, skip_invalid: bool = False) -> ValidRecords:
    """A JSONL file checked against ``schema``: column by column when the schema has a
    fast path and every record is plainly valid (a million lcm-mc records: about a
    third of the time, benchmarks/bench_score_lcm_mc.py), otherwise record by record
    exactly as :func:`validate_against` does, which names every problem."""
    data = Path(path).read_bytes()
    table = jsonl_table(data) if type(schema).columnar_arrays is not Schema.columnar_arrays else None
    if table is not None and "protocol" in table.column_names and not _one_protocol(table.column("protocol")):
        table = None  # the row path names the odd records
    arrays = schema.columnar_arrays(table) if table is not None else None
    if table is not None and arrays is not None:
        return ValidRecords(evaluator, None, list(range(1, table.num_rows + 1)), arrays, table=table)
    return validate_against(schema, evaluator, parse_jsonl_bytes(data), skip_invalid=skip_invalid, source=str(path))
