"""The content-addressed record cache (evaluators/runners/cache.py, registry_hooks/record_cache.py):
hits and misses, damaged entries never used, two processes writing at once, LRU eviction
within the bound, prune and stats; for the folder cache and for the state database's table
(SQLite, and PostgreSQL when one answers on 127.0.0.1:5432)."""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from test_service_postgres import PG, _postgres_up

from vlgate.evaluators.runners.cache import FolderRecordCache, RecordCache, RecordCacheSettings, parse_age, parse_size, record_text
from vlgate.registry_hooks.record_cache import DatabaseRecordCache, open_record_cache
from vlgate.registry_hooks.state_db import StateDatabase, record_cache_table


def record(n: int, payload: str = "") -> dict:
    return {"id": f"item-{n}", "fingerprint": f"fp:{n:032x}", "score": n / 10, "answer": payload or f"answer {n}"}


def open_spec(spec: tuple[str, str], max_bytes: int | None = None) -> RecordCache:
    """A cache from a picklable spec: ("folder", path) or ("database", url)."""
    kind, where = spec
    return FolderRecordCache(Path(where), max_bytes) if kind == "folder" else DatabaseRecordCache(StateDatabase(where), max_bytes)


@pytest.fixture(params=["folder", "sqlite", "postgresql"])
def spec(request, tmp_path) -> Iterator[tuple[str, str]]:
    if request.param == "folder":
        yield ("folder", str(tmp_path / "record-cache"))
    elif request.param == "sqlite":
        yield ("database", f"sqlite:///{tmp_path}/state.db")
    else:
        if not _postgres_up():
            if os.environ.get("VLGATE_REQUIRE_POSTGRES") == "1":
                pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432, and VLGATE_REQUIRE_POSTGRES=1")
            pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (set VLGATE_REQUIRE_POSTGRES=1 to fail instead)")
        import psycopg2

        database = f"vlgate_cache_{secrets.token_hex(4)}"
        admin = psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres")
        admin.autocommit = True
        admin.cursor().execute(f"CREATE DATABASE {database}")
        try:
            yield ("database", f"{PG}/{database}")
        finally:
            admin.cursor().execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            admin.close()


@pytest.fixture
def make_cache(spec) -> Iterator[Callable[..., RecordCache]]:
    opened: list[RecordCache] = []

    def make(max_bytes: int | None = None) -> RecordCache:
        opened.append(open_spec(spec, max_bytes))
        return opened[-1]

    yield make
    for cache in opened:
        if isinstance(cache, DatabaseRecordCache):
            cache.engine.dispose()


def set_last_use(cache: RecordCache, fingerprint: str, seconds_ago: float) -> None:
    """Age an entry's last use (the LRU clock) by hand."""
    stamp = time.time() - seconds_ago
    if isinstance(cache, FolderRecordCache):
        os.utime(cache.path(fingerprint), (stamp, stamp))
    else:
        assert isinstance(cache, DatabaseRecordCache)
        from datetime import datetime, timezone

        with cache.engine.begin() as connection:
            connection.execute(sa.update(record_cache_table).where(record_cache_table.c.fingerprint == fingerprint).values(used_at=datetime.fromtimestamp(stamp, timezone.utc)))


def damage(cache: RecordCache, fingerprint: str, how: str) -> None:
    """Spoil an entry: bad JSON, a checksum that does not match, or another record's fingerprint."""
    other = record(999)
    if isinstance(cache, FolderRecordCache):
        path = cache.path(fingerprint)
        entry = json.loads(path.read_text())
        if how == "json":
            path.write_text(path.read_text()[:-7])
        elif how == "checksum":
            path.write_text(json.dumps(entry | {"record": entry["record"].replace("answer", "ANSWER")}))
        else:  # a whole, checksummed entry of another fingerprint under this one's name
            text = record_text(other)
            import hashlib

            path.write_text(json.dumps(entry | {"record": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}))
        return
    assert isinstance(cache, DatabaseRecordCache)
    table = record_cache_table
    with cache.engine.begin() as connection:
        text = connection.execute(sa.select(table.c.record).where(table.c.fingerprint == fingerprint)).scalar_one()
        if how == "json":
            import hashlib

            spoilt = text[:-7]
            values = {"record": spoilt, "sha256": hashlib.sha256(spoilt.encode()).hexdigest()}  # checksum of the torn text: the JSON is what fails
        elif how == "checksum":
            values = {"record": text.replace("answer", "ANSWER")}
        else:
            import hashlib

            other_text = record_text(other)
            values = {"record": other_text, "sha256": hashlib.sha256(other_text.encode()).hexdigest()}
        connection.execute(sa.update(table).where(table.c.fingerprint == fingerprint).values(**values))


def test_a_put_record_is_a_hit_by_exact_fingerprint_and_anything_else_a_miss(make_cache):
    cache = make_cache()
    assert cache.get(record(1)["fingerprint"]) is None
    cache.put([record(1), record(2)])
    assert cache.get(record(1)["fingerprint"]) == record(1)
    assert cache.get_many([record(2)["fingerprint"], record(3)["fingerprint"]]) == {record(2)["fingerprint"]: record(2)}
    assert cache.get("fp:" + "0" * 31 + "x") is None
    again = make_cache()  # another process's view: the same store
    assert again.get(record(2)["fingerprint"]) == record(2)
    cache.put([record(1, "a different answer")])  # the first writer's entry stands
    assert again.get(record(1)["fingerprint"]) == record(1)
    assert cache.stats().entries == 2


@pytest.mark.parametrize("how", ["json", "checksum", "fingerprint"])
def test_a_damaged_entry_is_a_miss_removed_and_taken_again(make_cache, how):
    cache = make_cache()
    cache.put([record(1), record(2)])
    damage(cache, record(1)["fingerprint"], how)
    assert cache.get(record(1)["fingerprint"]) is None
    assert cache.stats().entries == 1  # removed, not left for the next reader
    cache.put([record(1)])  # the recomputed record takes its place
    assert cache.get(record(1)["fingerprint"]) == record(1)
    assert cache.get(record(2)["fingerprint"]) == record(2)


def _writer(spec: tuple[str, str], own: int, rounds: int) -> None:
    cache = open_spec(spec)
    for _ in range(rounds):
        cache.put([record(n, "shared " * 20) for n in range(20)])  # the same fingerprints as the other writer
        cache.put([record(1000 * own + n) for n in range(20)])  # its own


def test_two_processes_writing_the_same_and_different_fingerprints_leave_valid_entries(spec):
    context = multiprocessing.get_context("spawn")
    if spec[0] == "database":
        open_spec(spec).stats()  # the schema built once first (opening also migrates, under its lock)
    writers = [context.Process(target=_writer, args=(spec, own, 5)) for own in (1, 2)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(120)
    assert [process.exitcode for process in writers] == [0, 0]
    cache = open_spec(spec)
    assert cache.stats().entries == 60
    for n in [*range(20), *(1000 + n for n in range(20)), *(2000 + n for n in range(20))]:
        expected = record(n, "shared " * 20) if n < 20 else record(n)
        assert cache.get(expected["fingerprint"]) == expected, n
    if isinstance(cache, FolderRecordCache):
        assert not list(cache.root.glob("*/.*.tmp"))  # no scratch file left behind


def test_puts_beyond_the_bound_evict_the_least_recently_used_first(make_cache):
    size = len(record_text(record(1, "x" * 1000)))
    cache = make_cache(max_bytes=int(size * 10.5) + (200 * 10 if isinstance(make_cache(), FolderRecordCache) else 0))
    cache.check_every = 1  # type: ignore[attr-defined]
    cache.put([record(n, "x" * 1000) for n in range(8)])
    for n in range(8):
        set_last_use(cache, record(n)["fingerprint"], seconds_ago=1000 - n)  # 0 the least recently used
    assert cache.get(record(0)["fingerprint"]) is not None  # a hit makes 0 the most recently used
    cache.put([record(n, "x" * 1000) for n in range(8, 12)])
    stats = cache.stats()
    assert stats.bytes <= cache.max_bytes
    kept = {n for n in range(12) if cache.get(record(n)["fingerprint"]) is not None}
    assert {0, 8, 9, 10, 11} <= kept
    assert {1, 2} & kept == set()  # the least recently used went first
    assert kept == {0, *range(12 - len(kept) + 1, 12)}


def test_the_bound_is_not_rescanned_at_every_put(tmp_path, monkeypatch):
    cache = FolderRecordCache(tmp_path / "c", max_bytes=10**9, check_every=100)
    scans = []
    real = cache._entries
    monkeypatch.setattr(cache, "_entries", lambda: scans.append(1) or real())
    for n in range(250):
        cache.put([record(n)])
    assert len(scans) == 3  # the first put, then every 100th


def test_prune_older_than_and_to_a_size_and_stats(make_cache):
    cache = make_cache()
    assert cache.stats().entries == 0 and cache.stats().oldest_use is None
    cache.put([record(n) for n in range(6)])
    for n, days in enumerate([40, 35, 28, 23, 18, 15]):
        set_last_use(cache, record(n)["fingerprint"], seconds_ago=86400 * days)
    stats = cache.stats()
    assert stats.entries == 6 and stats.bytes > 0
    assert stats.oldest_use is not None and stats.newest_use is not None
    assert 39 < (time.time() - stats.oldest_use.timestamp()) / 86400 < 41
    assert 14 < (time.time() - stats.newest_use.timestamp()) / 86400 < 16
    assert cache.prune(older_than=parse_age("30d")) == 2  # 40 and 35 days
    assert cache.get(record(1)["fingerprint"]) is None and cache.get(record(2)["fingerprint"]) is not None
    one = cache.stats().bytes // 4
    assert cache.prune(max_bytes=one * 2 + 1) >= 1
    assert cache.stats().bytes <= one * 2 + 1
    assert cache.get(record(2)["fingerprint"]) is not None  # just used: kept; 3 and 4 (least recently used) gone
    assert cache.get(record(3)["fingerprint"]) is None


def test_a_later_look_s_counts_carry_what_the_looks_before_took_from_the_cache_and_computed():
    from vlgate.evaluators.output import EvaluatorSummary

    first = EvaluatorSummary(n_items=100, reused=0, from_cache=80, computed=20)
    second = EvaluatorSummary(n_items=200, reused=100, from_cache=70, computed=30).counted_since(first)  # the first look's 100 in its store
    assert (second.reused, second.from_cache, second.computed) == (0, 150, 50)
    resumed = EvaluatorSummary(n_items=200, reused=140, from_cache=60, computed=0).counted_since(EvaluatorSummary(n_items=100, reused=40, from_cache=60, computed=0))
    assert (resumed.reused, resumed.from_cache, resumed.computed) == (80, 120, 0)  # 40 of each look's items made by an earlier attempt of the flow
    assert EvaluatorSummary.failed("boom").counted_since(first).error == "boom" and second.counted_since(None) is second


def test_sizes_and_ages_are_read_as_people_write_them():
    assert parse_size("20GB") == 20 * 10**9 and parse_size("5 MB") == 5 * 10**6 and parse_size("1GiB") == 2**30 and parse_size("1234") == 1234
    assert parse_age("30d") == timedelta(days=30) and parse_age("12h") == timedelta(hours=12)
    for bad in ("20 parsecs", "", "-1GB"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_age("a month")
    assert parse_size("9" * 400) == int("9" * 400)  # a bound of any length, never a float's overflow
    assert parse_age("36500d") == timedelta(days=36500)
    for too_long in ("1000000000d", "99999999999w", "9" * 400 + "s", "36501d"):
        with pytest.raises(ValueError, match="longer than an age may be"):
            parse_age(too_long)


def test_open_record_cache_builds_what_the_settings_name_once_per_process(tmp_path, monkeypatch):
    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    assert open_record_cache(RecordCacheSettings(kind="off"), tmp_path) is None
    folder = open_record_cache(RecordCacheSettings(kind="folder", max_bytes=10**6), tmp_path)
    assert isinstance(folder, FolderRecordCache) and folder.root == tmp_path / "record-cache"
    assert open_record_cache(RecordCacheSettings(kind="folder", max_bytes=10**6), tmp_path) is folder
    database = open_record_cache(RecordCacheSettings(kind="database"), tmp_path)
    assert isinstance(database, DatabaseRecordCache) and str(tmp_path) in database.stats().location


def test_the_setting_defaults_to_the_folder_on_one_machine_and_the_database_on_postgresql(tmp_path, monkeypatch):
    from vlgate.flows.settings import RecordCacheConfig

    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    monkeypatch.delenv("VLGATE_RECORD_CACHE", raising=False)
    assert RecordCacheConfig().settings(tmp_path) == RecordCacheSettings(kind="folder", max_bytes=20 * 10**9, folder=tmp_path.resolve() / "record-cache")
    monkeypatch.setenv("VLGATE_STATE_DB", "postgresql+psycopg2://vlgate@db:5432/vlgate")
    assert RecordCacheConfig(max_size="5GB").settings(tmp_path) == RecordCacheSettings(kind="database", max_bytes=5 * 10**9)
    assert RecordCacheConfig(kind="folder").settings(tmp_path).kind == "folder"  # said in the file: the file wins
    monkeypatch.setenv("VLGATE_RECORD_CACHE", "off")
    assert RecordCacheConfig().settings(tmp_path).kind == "off"


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        ("record_cache: {max_size: 20 parsecs}\n", "record_cache.max_size: '20 parsecs' is not a size"),
        ("record_cache: {kind: sometimes}\n", "record_cache.kind: Input should be 'auto', 'folder', 'database' or 'off'"),
        ("record_cache: {kind: folder, size: 5GB}\n", "record_cache.size"),
    ],
)
def test_a_malformed_setting_is_refused_when_the_file_is_read_naming_the_key(tmp_path, yaml_text, says):
    from vlgate.config import ConfigError
    from vlgate.flows.settings import ServiceConfig

    (tmp_path / "vlgate.yaml").write_text(yaml_text)
    with pytest.raises(ConfigError) as refused:
        ServiceConfig.load(tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_vlgate_cache_stats_and_prune(tmp_path, monkeypatch, capsys):
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    monkeypatch.delenv("VLGATE_RECORD_CACHE", raising=False)
    (tmp_path / "vlgate.yaml").write_text("record_cache: {kind: folder, max_size: 1MB}\n")
    cache = open_record_cache(RecordCacheSettings(kind="folder", max_bytes=10**6, folder=tmp_path.resolve() / "record-cache"))
    assert cache is not None
    cache.put([record(n) for n in range(5)])
    for n in range(5):
        set_last_use(cache, record(n)["fingerprint"], seconds_ago=86400 * (10 * n + 1))  # 1, 11, 21, 31, 41 days ago
    assert main(["cache", "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["kind"], stats["entries"], stats["max_bytes"]) == ("folder", 5, 10**6) and stats["bytes"] > 0
    assert main(["cache", "stats"]) == 0
    assert "5 records" in capsys.readouterr().out
    assert main(["cache", "prune", "--older-than", "30d", "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)
    assert (pruned["removed"], pruned["entries"]) == (2, 3)
    assert main(["cache", "prune", "--max-size", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0
    assert main(["cache", "prune"]) == 2 and "say what to remove" in capsys.readouterr().err
    assert main(["cache", "prune", "--older-than", "a month"]) == 2 and "not an age" in capsys.readouterr().err


def test_vlgate_cache_refuses_an_age_past_the_calendar_in_one_line(tmp_path, monkeypatch, capsys):
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    for age in ("1000000000d", "99999999999w"):
        assert main(["cache", "prune", "--older-than", age]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "longer than an age may be" in err and "Traceback" not in err


def test_pruning_a_read_only_cache_folder_is_one_line_and_exit_2(tmp_path):
    """A folder the user may not write: as root (which ignores mode bits) the command runs as
    nobody; the records stay, and stats still answer."""
    home = Path(tempfile.mkdtemp(prefix="vlgate-ro-", dir="/tmp"))
    try:
        home.chmod(0o777)
        (home / "vlgate.yaml").write_text("record_cache: {kind: folder}\n")
        (home / "vlgate.yaml").chmod(0o644)
        cache = FolderRecordCache(home / "record-cache", 10**6)
        cache.put([record(n) for n in range(3)])
        for folder in [cache.root, *cache.root.iterdir()]:
            folder.chmod(0o555)
        command = [sys.executable, "-m", "vlgate.cli.main", "cache", "prune", "--older-than", "0s"]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        environ = {key: value for key, value in os.environ.items() if key not in ("VLGATE_STATE_DB", "MLFLOW_TRACKING_URI", "VLGATE_RECORD_CACHE")}
        done = subprocess.run(command, env=environ | {"VLGATE_HOME": str(home), "HOME": str(home)}, capture_output=True, text=True, timeout=120, cwd=home)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
        assert "cannot remove" in done.stderr and "Permission denied" in done.stderr and str(cache.root) in done.stderr
        assert cache.stats().entries == 3
    finally:
        for folder in home.rglob("*"):
            if folder.is_dir():
                folder.chmod(0o755)
        shutil.rmtree(home)


@pytest.mark.world
def test_a_version_with_identical_weights_takes_every_record_from_the_cache_whole_runs_and_shards(tiny_world, tmp_path, monkeypatch):
    """run_suite and the shards (run_evaluator_shard + merge_shards) of another version with the
    same weights compute nothing and load no model; the counts say so in the summary, and the
    version's folder holds every record without the cache."""
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend
    from vlgate.evaluators.running.suite import EvaluatorShard, RunOptions, Suite, merge_shards, run_evaluator_shard, run_suite

    loads: list[str] = []
    load = TransformersBackend.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(TransformersBackend, "load", classmethod(lambda cls, reference, *args, **kwargs: loads.append(str(reference)) or load(cls, reference, *args, **kwargs)))

    world, manifest = tiny_world
    suite_path = tmp_path / "suite.yaml"
    suite_path.write_text(f"name: cached\nbatch_size: 4\nevaluators:\n  lcm-mc: {{data: {world}/data/mc, limit: 8}}\n  vlind: {{data: {world}/data/vlind, limit: 3}}\n")
    suite = Suite.from_file(suite_path)
    model = str(world / manifest["checkpoints"]["vlm"]["3"])
    cache = FolderRecordCache(tmp_path / "record-cache")
    first = run_suite(model, suite, tmp_path / "v1", RunOptions(record_cache=cache, progress=False))
    assert {name: (e["reused"], e["from_cache"], e["computed"]) for name, e in first["evaluators"].items()} == {"lcm-mc": (0, 0, 8), "vlind": (0, 0, 3)}
    assert loads == [model] and first["backend"]["device"] == "cpu"
    second = run_suite(model, suite, tmp_path / "v2", RunOptions(record_cache=cache, progress=False))
    assert {name: (e["reused"], e["from_cache"], e["computed"]) for name, e in second["evaluators"].items()} == {"lcm-mc": (0, 8, 0), "vlind": (0, 3, 0)}
    assert loads == [model] and second["backend"] == first["backend"] | {"device": "not loaded", "extra": {}}  # described by its digest only
    assert second["evaluators"]["lcm-mc"]["metrics"] == first["evaluators"]["lcm-mc"]["metrics"]
    assert (tmp_path / "v2" / "lcm-mc" / "records.jsonl").read_text() == (tmp_path / "v1" / "lcm-mc" / "records.jsonl").read_text()
    assert json.loads((tmp_path / "v2" / "summary.json").read_text())["evaluators"]["vlind"]["from_cache"] == 3
    shards = [run_evaluator_shard(model, suite, tmp_path / "v3", EvaluatorShard(evaluator="lcm-mc", index=shard, n_shards=2), RunOptions(record_cache=cache)) for shard in range(2)]
    assert [(s.from_cache, s.computed) for s in shards] == [(4, 0), (4, 0)]
    merged = merge_shards(suite, tmp_path / "v3", "lcm-mc", shards)
    assert (merged.from_cache, merged.computed, merged.metrics) == (8, 0, first["evaluators"]["lcm-mc"]["metrics"])
    assert loads == [model]


def test_the_validation_run_logs_the_records_from_the_cache(monkeypatch):
    """Each look's ``log_look`` logs ``records_from_cache/EVALUATOR`` (the report reads it back)."""
    from vlgate.evaluators.output import EvaluatorOutput, EvaluatorSummary
    from vlgate.flows import recording

    logged: list[tuple[str, float]] = []
    steps: list[int] = []

    class Client:
        def log_batch(self, run_id, metrics=(), tags=()):
            logged.extend((metric.key, metric.value) for metric in metrics)
            steps.extend(metric.step for metric in metrics)

        def log_dict(self, *args, **kwargs):
            pass

    monkeypatch.setattr(recording.tracking, "connect", lambda *args, **kwargs: Client())
    output = EvaluatorOutput("lcm-mc", summary=EvaluatorSummary(n_items=10, reused=0, from_cache=7, computed=3))
    recording.log_look.fn("run-1", {"lcm-mc": output})
    assert ("records_from_cache/lcm-mc", 7.0) in logged
    logged.clear()
    recording.log_look.fn("run-1", {"lcm-mc": output, "decc": EvaluatorOutput("decc", summary=EvaluatorSummary(n_items=2, from_cache=2))})
    assert logged == [("records_from_cache/lcm-mc", 7.0), ("records_from_cache/decc", 2.0)]  # one batch for the look
    assert steps[-2:] == [10, 2]  # each at the step of the items its evaluator's look evaluated


def _worker_reads(settings_json: str, home: str, fingerprint: str, answer: multiprocessing.Queue) -> None:
    """A Dask worker's side: the settings as the task parameter carried them, the cache opened here."""
    cache = open_record_cache(RecordCacheSettings.model_validate_json(settings_json), Path(home))
    assert cache is not None
    answer.put(cache.get(fingerprint))


@pytest.mark.parametrize("kind", ["folder", "database"])
def test_a_worker_process_opens_the_cache_from_the_settings_the_task_carries(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    settings = RecordCacheSettings(kind=kind, max_bytes=10**6, folder=tmp_path / "record-cache" if kind == "folder" else None)
    cache = open_record_cache(settings, tmp_path)
    assert cache is not None
    cache.put([record(7)])
    context = multiprocessing.get_context("spawn")
    answer = context.Queue()
    worker = context.Process(target=_worker_reads, args=(settings.model_dump_json(), str(tmp_path), record(7)["fingerprint"], answer))
    worker.start()
    found = answer.get(timeout=120)
    worker.join(60)
    assert worker.exitcode == 0 and found == record(7)


@pytest.mark.world
def test_vlgate_evaluate_takes_records_from_the_cache_and_says_so(tiny_world, tmp_path, monkeypatch, capsys):
    from vlgate.cli.main import main

    world, manifest = tiny_world
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    monkeypatch.delenv("VLGATE_RECORD_CACHE", raising=False)
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: cached\nevaluators:\n  lcm-mc: {{data: {world}/data/mc, limit: 5}}\n")
    model = str(world / manifest["checkpoints"]["vlm"]["3"])
    assert main(["evaluate", "--model", model, "--suite", str(suite), "--out", str(tmp_path / "v1"), "--quiet"]) == 0
    assert "record cache" not in capsys.readouterr().err
    assert main(["evaluate", "--model", model, "--suite", str(suite), "--out", str(tmp_path / "v2"), "--quiet"]) == 0
    assert "lcm-mc: 5 of 5 records from the record cache, 0 computed" in capsys.readouterr().err
    assert (tmp_path / "home" / "record-cache").is_dir()


@pytest.mark.world
@pytest.mark.service
@pytest.mark.slow
def test_vlgate_validate_of_identical_weights_under_another_model_takes_every_record_from_the_cache_and_says_so(tiny_world, tmp_path, monkeypatch, capsys):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from vlgate import tracking

    world, _ = tiny_world
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "VLGATE_RECORD_CACHE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"name": "s", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    # two looks: the second finds the first's records in its own store, and the counts are still every record's
    sequential = {"looks": [0.5, 1.0], "promote_early": False}
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200, "sequential": sequential}))
    (tmp_path / "vlgate.yaml").write_text(yaml.safe_dump({"models": {m: {"suite": "suite.yaml", "policy": "gate.yaml"} for m in ("a", "b")}}))
    client = tracking.connect(tmp_path)
    for model in ("a", "b"):  # the same weights, registered by two teams
        tracking.register_checkpoint(client, model, world / "checkpoints" / "vlm-steps3", home=tmp_path)

    def validate(*args: str) -> subprocess.CompletedProcess[str]:  # each its own process, as a shell runs it
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "PREFECT_API_URL", "VLGATE_RECORD_CACHE")}
        return subprocess.run([str(Path(sys.executable).parent / "vlgate"), "validate", *args], env=env | {"VLGATE_HOME": str(tmp_path)}, capture_output=True, text=True, timeout=600)

    first = validate("a", "1", "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (json.loads(first.stdout)["records_from_cache"], json.loads(first.stdout)["records_total"]) == ({"lcm-mc": 0}, {"lcm-mc": 4})
    second = validate("b", "1")
    assert second.returncode == 0 and "records from the cache: lcm-mc 4 of 4" in second.stdout, second.stdout + second.stderr[-2000:]
    assert json.loads(validate("b", "1", "--json").stdout)["sequential"]["looks"][-1]["look"]["index"] == 1  # both looks ran
    runs = [client.get_run(client.get_model_version(m, "1").tags["vlgate.validation_run_id"]).data.metrics for m in ("a", "b")]
    assert runs[1]["records_from_cache/lcm-mc"] == 4 and runs[0]["records_from_cache/lcm-mc"] == 0
    assert {k: v for k, v in runs[0].items() if k.startswith("lcm-mc/")} == {k: v for k, v in runs[1].items() if k.startswith("lcm-mc/")}
