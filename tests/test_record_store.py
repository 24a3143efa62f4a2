"""The record store keeps every good line: a damaged line anywhere costs that record only."""

from __future__ import annotations

import json

from vlgate.evaluators.runners.store import RecordStore


def _line(n: int) -> str:
    return json.dumps({"id": f"q{n}", "fingerprint": f"fp:{n}", "p": 0.5}) + "\n"


def test_a_damaged_line_in_the_middle_costs_only_that_record(tmp_path):
    path = tmp_path / "records.jsonl"
    damaged = [
        _line(1),
        _line(2),
        '{"id": "q3", "fingerprint": "fp:3", "p": 0.\x00\x00\n',  # a spoiled block
        _line(4),
        "[1, 2]\n",  # JSON, not a record
        '{"id": "q5"}\n',  # a record without its fingerprint
        "\n",
        _line(6),
        '{"id": "q7", "fingerprint": "fp:7", "p"',  # what a kill leaves at the end
    ]
    path.write_text("".join(damaged))
    store = RecordStore(path)
    assert sorted(store.by_fingerprint) == ["fp:1", "fp:2", "fp:4", "fp:6"]
    assert store.torn_lines == 4
    assert path.read_text() == _line(1) + _line(2) + _line(4) + _line(6)  # rewritten: appends follow good lines
    store.append([json.loads(_line(7))])
    assert sorted(RecordStore(path).by_fingerprint) == ["fp:1", "fp:2", "fp:4", "fp:6", "fp:7"]
    assert not list(tmp_path.glob("*.rewrite"))


def test_an_intact_store_is_left_untouched(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(_line(1) + _line(2))
    before = path.stat().st_mtime_ns
    store = RecordStore(path)
    assert store.torn_lines == 0 and len(store.by_fingerprint) == 2
    assert path.stat().st_mtime_ns == before
