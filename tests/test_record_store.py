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


def _counting_runner(model: str, computed: list[str]):
    """A runner on ``model`` whose compute records the items it had to compute."""
    from vlgate.evaluators.runners.base import Runner

    def compute(batch):
        computed.extend(item["id"] for item, _ in batch)
        return [{"id": item["id"], "score": float(len(item["id"]))} for item, _ in batch]

    return Runner("toy", {"vlm": model}, "toy-1", lambda item: item["id"], compute)


def test_a_local_miss_is_taken_from_the_cache_copied_into_the_file_and_counted(tmp_path):
    """A second version with identical weights (the same digest) computes nothing: its records
    come from the cache, into its own records file, counted as from_cache."""
    from vlgate.evaluators.runners.cache import FolderRecordCache

    cache = FolderRecordCache(tmp_path / "record-cache")
    items = [{"id": f"item-{n}"} for n in range(10)]
    computed: list[str] = []
    first = _counting_runner("sha256:w", computed).run(items, RecordStore(tmp_path / "v1" / "records.jsonl", cache), batch_size=4, progress=False)
    assert (first.reused, first.from_cache, first.computed) == (0, 0, 10) and len(computed) == 10
    assert cache.stats().entries == 10
    computed.clear()
    grown = [*items, {"id": "item-10"}, {"id": "item-11"}]  # the suite gained two items
    second = _counting_runner("sha256:w", computed).run(grown, RecordStore(tmp_path / "v2" / "records.jsonl", cache), batch_size=4, progress=False)
    assert (second.reused, second.from_cache, second.computed) == (0, 10, 2) and computed == ["item-10", "item-11"]
    assert second.records[:10] == first.records
    on_disk = RecordStore(tmp_path / "v2" / "records.jsonl")  # the version's folder is complete without the cache
    assert sorted(on_disk.by_fingerprint) == sorted(record["fingerprint"] for record in second.records)
    again = _counting_runner("sha256:w", computed).run(grown, RecordStore(tmp_path / "v2" / "records.jsonl", cache), progress=False)
    assert (again.reused, again.from_cache, again.computed) == (12, 0, 0)  # its own file first
    other = _counting_runner("sha256:other", computed).run(items[:3], RecordStore(tmp_path / "v3" / "records.jsonl", cache), progress=False)
    assert (other.from_cache, other.computed) == (0, 3)  # other weights: other fingerprints, no hit


def test_a_cache_that_does_not_answer_is_a_miss_not_the_runs_failure(tmp_path, caplog):
    from vlgate.evaluators.runners.cache import FolderRecordCache

    class Broken(FolderRecordCache):
        def get_many(self, fingerprints):
            raise ConnectionError("database away")

        def put(self, records):
            raise ConnectionError("database away")

    computed: list[str] = []
    result = _counting_runner("sha256:w", computed).run([{"id": "a"}, {"id": "b"}], RecordStore(tmp_path / "r.jsonl", Broken(tmp_path / "c")), progress=False)
    assert (result.from_cache, result.computed) == (0, 2) and len(RecordStore(tmp_path / "r.jsonl").by_fingerprint) == 2
    assert "did not answer" in caplog.text and "did not take" in caplog.text
