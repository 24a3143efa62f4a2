"""Shared test helpers."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml

# Prefect reads its settings once per process: its local state (ephemeral server database,
# task results) goes to one throwaway folder for the whole test session, never ~/.prefect.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="vlgate-test-prefect-"))
os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", os.path.join(os.environ["PREFECT_HOME"], "results"))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
# Code that falls back to the default home (`vlgate evaluate`'s model and evaluator caches)
# writes into a throwaway one, never ./vlgate-data or a developer's own VLGATE_HOME.
os.environ["VLGATE_HOME"] = tempfile.mkdtemp(prefix="vlgate-test-home-")

DATA = Path(__file__).parent / "data"


@pytest.fixture
def write_records(tmp_path):
    """Write records (dicts, or raw strings for malformed lines) as a JSONL file and return its path."""

    def write(records, name="records.jsonl"):
        path = tmp_path / name
        with open(path, "w") as handle:
            for record in records:
                handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
        return path

    return write


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """The small synthetic world with barely trained checkpoints (3 VLM steps, 2 LLM steps):
    real model code paths at test speed. Returns (folder, manifest)."""
    from vlgate.evaluators.world.build import TrainingRecipe, build_world

    out = tmp_path_factory.mktemp("tiny-world")
    return out, build_world(out, "small", seed=0, training=TrainingRecipe(vlm_steps=(0, 3), llm_steps=2, fault_steps=2))


@pytest.fixture(scope="session")
def default_world(tmp_path_factory):
    """The small world exactly as `vlgate make-world` (and the demo) puts it in place: the
    shipped world, copied and checked against its hashes. Returns (folder, manifest)."""
    from vlgate.evaluators.world.build import build_world

    out = tmp_path_factory.mktemp("default-world")
    return out, build_world(out, "small", seed=0)


@pytest.fixture
def smoke_home(tiny_world, tmp_path):
    """A fresh VLGATE_HOME with a one-evaluator suite (lcm-mc, 4 items of the tiny world)
    and a lenient gate: ``suite.yaml`` and ``gate.yaml``; the test writes ``vlgate.yaml``."""
    world, _ = tiny_world
    home = tmp_path / "home"
    home.mkdir()
    (home / "suite.yaml").write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    (home / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200}))
    return home


@pytest.fixture
def child_env():
    """This process's environment without the stores the test session points at, for a
    vlgate child process that must find its own under its VLGATE_HOME."""
    inherited = ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "PREFECT_API_URL", "PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")
    return {k: v for k, v in os.environ.items() if k not in inherited}


#: A child process that opens the claim store at ``sys.argv[2]`` (a Unix time), as a
#: freshly started receiver, poller or flow does, and prints "ok" or the error's first line.
_OPEN_STORE = """
import sys, time
from vlgate.registry_hooks.claims import ClaimStore
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
try:
    ClaimStore(sys.argv[1])
    print("ok")
except Exception as error:
    print(type(error).__name__, str(error).splitlines()[0])
"""


@pytest.fixture
def open_stores_at_once():
    """``open(url, processes)``: that many processes open the state database at ``url`` at
    the same moment (a service starting its receiver, poller and flows together); the
    list of what each printed."""
    import subprocess
    import sys
    import time

    def open_stores(url: str, processes: int = 6) -> list[str]:
        start = time.time() + 8  # every child has imported SQLAlchemy by then
        children = [subprocess.Popen([sys.executable, "-c", _OPEN_STORE, url, str(start)], stdout=subprocess.PIPE, text=True) for _ in range(processes)]
        return [child.communicate(timeout=120)[0].strip() for child in children]

    return open_stores
