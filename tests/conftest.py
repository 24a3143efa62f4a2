"""Shared test helpers."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

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
    from vlgate.evaluators.world.build import build_world

    out = tmp_path_factory.mktemp("tiny-world")
    return out, build_world(out, "small", seed=0, vlm_steps=(0, 3), llm_steps=2, prior_steps=2)


@pytest.fixture(scope="session")
def default_world(tmp_path_factory):
    """The small world exactly as `vlgate make-world` (and the demo) puts it in place: the
    shipped world, copied and checked against its hashes. Returns (folder, manifest)."""
    from vlgate.evaluators.world.build import build_world

    out = tmp_path_factory.mktemp("default-world")
    return out, build_world(out, "small", seed=0)
