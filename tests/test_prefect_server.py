"""The local Prefect server a command starts before its imports (cli/prefect_server.py):
fresh homes start from a migrated seed database, `vlgate validate` runs its flow on the
server and stops it, and a process whose Prefect is configured or imported is left alone."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from vlgate import tag_keys, tracking
from vlgate.cli.prefect_server import LocalPrefectServer, ensure_seed_database, seed_database_path


def test_no_server_where_prefect_is_configured_or_already_imported(tmp_path, monkeypatch):
    import prefect  # noqa: F401  # the test process has imported it: its settings are fixed

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert LocalPrefectServer.start(tmp_path) is None
    monkeypatch.setenv("PREFECT_API_URL", "http://prefect.example:4200/api")
    assert LocalPrefectServer.start(tmp_path) is None
    assert os.environ["PREFECT_API_URL"] == "http://prefect.example:4200/api"


@pytest.mark.service
def test_the_seed_database_is_migrated_once_per_prefect_version(tmp_path, monkeypatch):
    from importlib.metadata import version

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed = seed_database_path()
    assert seed == tmp_path / "cache" / "vlgate" / f"prefect-{version('prefect')}.db"
    with open(tmp_path / "log", "w") as log:
        assert ensure_seed_database(log) == seed
    assert list(seed.parent.iterdir()) == [seed]  # one self-contained file: no scratch folder, no write-ahead log
    database = sqlite3.connect(f"file:{seed}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in database.execute("select name from sqlite_master where type = 'table'")}
        (revision,) = database.execute("select version_num from alembic_version").fetchone()
        (journal,) = database.execute("pragma journal_mode").fetchone()
    finally:
        database.close()
    assert {"flow_run", "task_run", "deployment", "alembic_version"} <= tables
    assert revision
    assert journal == "delete"
    modified = seed.stat().st_mtime_ns
    with open(tmp_path / "log", "w") as log:
        ensure_seed_database(log)
    assert seed.stat().st_mtime_ns == modified  # kept, not migrated again


@pytest.mark.service
@pytest.mark.timeout(600)
def test_vlgate_validate_runs_its_flow_on_a_local_server_and_stops_it(tiny_world, smoke_home, child_env):
    world, _ = tiny_world
    home, env = smoke_home, child_env
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"models": {"tiny": {"suite": "suite.yaml", "policy": "gate.yaml"}}}))
    tracking.register_checkpoint(tracking.connect(home), "tiny", world / "checkpoints" / "vlm-steps3", home=home)

    def validate(*args: str) -> subprocess.CompletedProcess:
        command = [str(Path(sys.executable).parent / "vlgate"), "validate", *args]
        return subprocess.run(command, env=env | {"VLGATE_HOME": str(home)}, capture_output=True, text=True, timeout=540)

    done = validate("tiny", "1", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "great_expectations" not in done.stderr  # GX ran (a new home's first expectations), its INFO lines stay out
    assert json.loads(done.stdout)["outcome"] == "promoted"
    # the flow ran on the home's own server: its database (seeded, then used) holds the run
    database = sqlite3.connect(home / "prefect" / "prefect.db")
    try:
        flows = {row[0] for row in database.execute("select name from flow")}
        states = {row[0] for row in database.execute("select state_type from flow_run")}
    finally:
        database.close()
    assert flows == {"vlgate-validate"}  # its evaluation is tasks of that flow run, on the runner vlgate.yaml names
    assert states == {"COMPLETED"}
    # and that server is gone: the address it announced in its log answers no more
    announced = re.search(r"PREFECT_API_URL=(http://127\.0\.0\.1:\d+/api)", (home / "prefect" / "server.log").read_text())
    assert announced is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{announced.group(1)}/health", timeout=2)

    # a new home's first command creates MLflow's tables without saying so
    fresh = subprocess.run(
        [str(Path(sys.executable).parent / "vlgate"), "register", "tiny", str(world / "checkpoints" / "vlm-steps3")],
        env=env | {"VLGATE_HOME": str(home / "another-home")}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert fresh.returncode == 0 and json.loads(fresh.stdout)["version"] == "1", fresh.stderr[-3000:]
    assert fresh.stderr == ""
    # what CI acts on: rejected (a rule failed on the numbers) exits 3, could not judge 4
    (home / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/n": 5}, "resamples": 200}))  # 4 items scored
    rejected = validate("tiny", "1")
    assert rejected.returncode == 3, rejected.stderr[-3000:]
    assert rejected.stdout.splitlines()[:2] == ["tiny v1: rejected", "  fail            lcm-mc/n floor: 4.0000 >= 5.0 fails"]
    config = {"models": {"tiny": {"suite": "suite.yaml", "policy": "gate.yaml"}, "broken": {"suite": "no-such-suite.yaml", "policy": "gate.yaml"}}}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    tracking.register_checkpoint(tracking.connect(home), "broken", world / "checkpoints" / "vlm-steps3", home=home)
    # a suite that does not load is bad input, found before anything runs or is recorded
    missing = validate("broken", "1", "--json")
    assert missing.returncode == 2 and f"suite {home / 'no-such-suite.yaml'}: no such file" in missing.stderr, missing.stderr[-3000:]
    assert tag_keys.OUTCOME not in tracking.connect(home).get_model_version("broken", "1").tags
    assert _servers_of(home) == []  # the server that started beside the check is stopped with the refusal
    # data that is not there is found by the evaluator: it failed, so the version could not be judged
    (home / "broken-suite.yaml").write_text(yaml.safe_dump({"name": "broken", "evaluators": {"lcm-mc": {"data": "no-such-data"}}}))
    config["models"]["broken"]["suite"] = "broken-suite.yaml"
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    unjudged = validate("broken", "1", "--json")
    assert unjudged.returncode == 4, unjudged.stderr[-3000:]
    assert json.loads(unjudged.stdout)["outcome"] == "could not judge"
    assert tracking.connect(home).get_model_version("broken", "1").tags[tag_keys.OUTCOME] == "could not judge"


def _servers_of(home: Path) -> list[str]:
    """The process ids of Prefect servers still running on ``home``'s database."""
    found = []
    for process in Path("/proc").iterdir():
        try:
            environment = (process / "environ").read_bytes().split(b"\0") if process.name.isdigit() else []
            if f"PREFECT_HOME={home / 'prefect'}".encode() in environment and b"server" in (process / "cmdline").read_bytes():
                found.append(process.name)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.service
@pytest.mark.timeout(300)
def test_a_terminated_command_takes_its_prefect_server_with_it(tmp_path):
    """`kill PID` on a command that started a local Prefect server stops that server too."""
    import signal
    import time

    home = tmp_path / "home"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from vlgate.cli.prefect_server import local_prefect_server\n"
        "with local_prefect_server(Path(sys.argv[1])) as server:\n"
        "    from prefect.settings import get_current_settings\n"
        "    print(server.url, get_current_settings().flows.heartbeat_frequency, flush=True)\n"
        "    time.sleep(600)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    process = subprocess.Popen([sys.executable, "-c", script, str(home)], env=env, stdout=subprocess.PIPE, text=True)
    url, heartbeat = process.stdout.readline().split()
    assert heartbeat == "None"  # its own server has no services to read flow heartbeats
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=1)
        except httpx.ConnectError:
            return
        time.sleep(0.2)
    raise AssertionError(f"the Prefect server at {url} outlived its command")


def test_flow_heartbeats_are_off_only_where_nothing_reads_them():
    """A local server without services reads no heartbeats, and each flow's end waits for
    its heartbeat thread; a server with services (or the user's own) keeps them."""
    from prefect.settings import get_current_settings

    from vlgate.cli.prefect_server import _without_flow_heartbeats

    default = get_current_settings().flows.heartbeat_frequency
    assert default is not None
    with _without_flow_heartbeats(True):
        assert get_current_settings().flows.heartbeat_frequency is None
    with _without_flow_heartbeats(False):
        assert get_current_settings().flows.heartbeat_frequency == default
    assert get_current_settings().flows.heartbeat_frequency == default


@pytest.mark.service
@pytest.mark.timeout(300)
def test_a_flows_last_log_lines_reach_the_server_before_it_stops(tmp_path):
    """Prefect sends flow logs in batches from a background worker; the command's own
    server must get the last batch before it stops, or the lines are lost and the exit
    prints "Error logging to API"."""
    home = tmp_path / "home"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from vlgate.cli.prefect_server import local_prefect_server\n"
        "with local_prefect_server(Path(sys.argv[1])):\n"
        "    from prefect import flow, get_run_logger\n"
        "    @flow(name='last-words')\n"
        "    def last_words():\n"
        "        get_run_logger().warning('the flow is about to end')\n"
        "    last_words()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    done = subprocess.run([sys.executable, "-c", script, str(home)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Error logging to API" not in done.stderr
    connection = sqlite3.connect(home / "prefect" / "prefect.db")
    try:
        messages = [row[0] for row in connection.execute("SELECT message FROM log")]
    finally:
        connection.close()
    assert "the flow is about to end" in messages
