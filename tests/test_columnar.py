"""The column-by-column fast path of `vlgate score` (schemas.validate_file): on every file
it either takes, it gives exactly the metrics of the record-by-record path, and every
file that path would find fault with (or read differently) goes the record-by-record way,
so the same errors are named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vlgate.evaluators import registry
from vlgate.evaluators.records import jsonl_table, parse_jsonl_bytes
from vlgate.evaluators.schemas import validate_against, validate_file
from vlgate.evaluators.scoring import score, score_file

SCHEMA = registry.get("lcm-mc").schema


def _line(**fields) -> str:
    record = {"id": 0, "p_mc": [0.7, 0.2, 0.1], "p_yes": [0.9, 0.3, 0.2], "answer": 0, "category": "color"} | fields
    return json.dumps({k: v for k, v in record.items() if v is not _ABSENT})


_ABSENT = object()


def _file(tmp_path, lines: list[str], raw: bytes | None = None):
    path = tmp_path / "records.jsonl"
    path.write_bytes(raw if raw is not None else ("\n".join(lines) + "\n").encode())
    return path


def _row_path(path, skip_invalid=False):
    return validate_against(SCHEMA, "lcm-mc", parse_jsonl_bytes(path.read_bytes()), skip_invalid=skip_invalid, source=str(path))


def _sample_records(n: int = 200, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        p_mc = rng.dirichlet(np.ones(4)).round(4).tolist()
        answer = None if i % 7 == 0 else int(rng.integers(0, 4))
        lines.append(json.dumps({"id": f"q{i}", "p_mc": p_mc, "p_yes": rng.uniform(size=4).round(4).tolist(), "answer": answer, "category": ["color", "count", None][i % 3], "extra": {"k": i}}))
    return lines


def test_plainly_valid_files_are_read_by_columns_with_the_metrics_of_the_row_path(tmp_path):
    path = _file(tmp_path, _sample_records())
    columns = validate_file(SCHEMA, "lcm-mc", path)
    rows = _row_path(path)
    assert columns.table is not None  # the fast path took it
    assert len(columns) == len(rows) == 200
    assert columns.lines == rows.lines
    for name in ("p_mc", "p_yes", "answer"):
        np.testing.assert_array_equal(columns.arrays[name], rows.arrays[name])
    assert score(columns) == score(rows)
    assert columns.records == rows.records  # built from the table only when asked for
    assert score_file("lcm-mc", path)[0] == score(rows)


def test_integer_ids_and_a_missing_answer_column(tmp_path):
    path = _file(tmp_path, [json.dumps({"id": i, "p_mc": [1, 0], "p_yes": [0.25, 1]}) for i in range(6)])
    columns = validate_file(SCHEMA, "lcm-mc", path)
    assert columns.table is not None
    np.testing.assert_array_equal(columns.arrays["answer"], -np.ones(6, dtype=np.int64))
    np.testing.assert_array_equal(columns.column("id"), np.arange(6))
    assert score(columns) == score(_row_path(path))


@pytest.mark.parametrize(
    "lines, raw",
    [
        ([_line(id=1), _line(id=1)], None),  # duplicate id
        ([_line(id=1), _line(id="1")], None),  # mixed id types: valid, but not one column type
        ([_line(id=True)], None),  # a boolean id
        ([_line(id=None)], None),  # a null id
        ([_line(id=1), _line(id=2, p_mc=[0.5, 0.5], p_yes=[0.5, 0.5])], None),  # K differs between records (valid: padded)
        ([_line(id=1, p_mc=[0.5, True, 0.5])], None),  # a boolean probability
        ([_line(id=1, p_mc=[0.5, None, 0.5])], None),  # a null entry
        ([_line(id=1, p_mc=[0.5, 1.5, 0.1])], None),  # out of range
        ([_line(id=1, p_yes=[0.5, 0.5])], None),  # K mismatch within a record
        ([_line(id=1, p_mc=[1.0])], None),  # K < 2
        ([_line(id=1, answer=3)], None),  # unknown label
        ([_line(id=1, answer=1.0)], None),  # a float label
        ([_line(id=1, answer=False)], None),  # a boolean label
        ([_line(id=1, p_mc=_ABSENT)], None),  # a missing field
        ([_line(id=1), '{"id": 2, "p_mc": [0.5, NaN, 0.5], "p_yes": [0.1, 0.2, 0.3]}'], None),  # NaN
        ([_line(id=1), "", _line(id=2)], None),  # a blank line: line numbers must stay true
        ([_line(id=1) + " " + _line(id=2)], None),  # two objects on one line
        ([_line(id=1), "[1, 2]"], None),  # not an object
        ([_line(id=1), "{broken"], None),  # not JSON
        (None, b'{"id": "\xff", "p_mc": [0.5, 0.5], "p_yes": [0.5, 0.5]}\n'),  # not UTF-8
    ],
)
def test_anything_the_row_path_might_judge_differently_goes_the_row_path(tmp_path, lines, raw):
    path = _file(tmp_path, lines or [], raw)
    table = jsonl_table(path.read_bytes())
    assert table is None or SCHEMA.columnar_arrays(table) is None
    expected = _row_path(path, skip_invalid=True)
    got = validate_file(SCHEMA, "lcm-mc", path, skip_invalid=True)
    assert got.table is None
    assert [str(e) for e in got.errors] == [str(e) for e in expected.errors]
    assert got.records == expected.records


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbf" + b"\n".join(_line(id=i).encode() for i in range(3)) + b"\n",  # a byte order mark
        b"\r\n".join(_line(id=i).encode() for i in range(3)),  # CRLF, no final newline
        "\n".join(_line(id=i, category="cätegorie") for i in range(3)).encode(),  # UTF-8 beyond ASCII
    ],
)
def test_byte_order_mark_crlf_and_unicode_read_alike_both_ways(tmp_path, raw):
    path = _file(tmp_path, [], raw)
    columns, rows = validate_file(SCHEMA, "lcm-mc", path), _row_path(path)
    assert len(columns) == len(rows) == 3
    assert score(columns) == score(rows)


def test_json_booleans_are_no_probabilities_on_either_path(tmp_path):
    """numpy reads [true, 0.5] as [1.0, 0.5]: the row path must still name the boolean."""
    path = _file(tmp_path, [_line(id=1), _line(id=2, p_mc=[True, 0.0, 0.0]), _line(id=3, p_yes=[0.5, False, 0.5])])
    got = validate_file(SCHEMA, "lcm-mc", path, skip_invalid=True)
    assert [(e.record_id, e.field, e.message) for e in got.errors] == [(2, "p_mc", "entry 0 True is not a number"), (3, "p_yes", "entry 1 False is not a number")]
    assert [r["id"] for r in got.records] == [1]
    nb = {"id": 1, "p_yes": [[True, 0.5], [0.5, 0.5]], "p_text": [[0.5, 0.5], [0.5, 0.5]], "p_image": [[0.5, 0.5], [0.5, 0.5]], "answer": "c1"}
    (error,) = validate_against(registry.get("lcm-nb").schema, "lcm-nb", parse_jsonl_bytes(json.dumps(nb).encode()), skip_invalid=True).errors
    assert (error.field, error.message) == ("p_yes", "row 0: entry 0 True is not a number")


def test_deeply_nested_json_is_one_error_line_not_a_crash(tmp_path):
    """pyarrow's JSON reader dies with SIGSEGV on deep nesting: such a file never reaches it
    (run in a child process, so that a crash fails this test instead of the test run)."""
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "deep.jsonl"
    path.write_text('{"id": 1, "p_mc": ' + "[" * 100_000 + "]" * 100_000 + "}\n" + _line(id=2) + "\n")
    done = subprocess.run([str(Path(sys.executable).parent / "vlgate"), "score", "lcm-mc", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stderr.splitlines()[0] == f"{path}: line 1: not valid JSON (nested too deeply)"


def test_nesting_depth_bounds_the_brackets():
    from vlgate.evaluators.records import nesting_depth

    assert nesting_depth(b"") == 0
    assert nesting_depth(b'{"a": [1, 2]}\n{"b": 3}\n') == 2
    assert nesting_depth(b'{"a": "[[[["}') == 5  # brackets inside strings count: an upper bound
    assert nesting_depth(b"[" * 40 + b"]" * 40) == 40
