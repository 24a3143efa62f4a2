"""`vlgate serve` as a process: its poller validates a newly registered version, and the
drift check's cron deployment (served through the Prefect server that vlgate starts
itself when PREFECT_API_URL is unset) runs on schedule and logs a drift run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from vlgate import tag_keys, tracking

pytestmark = [pytest.mark.world, pytest.mark.service, pytest.mark.slow]


def wait_until(predicate, seconds: float, what: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"vlgate serve exited with {process.returncode} before {what}")
        if predicate():
            return
        time.sleep(1)
    raise TimeoutError(f"{what}: not within {seconds} s")


@pytest.mark.timeout(900)
def test_serve_validates_new_versions_and_runs_the_drift_schedule(tiny_world, smoke_home, child_env, tmp_path):
    from vlgate.evaluators.world.datasets import build_unlabelled_batch

    world, _ = tiny_world
    home = smoke_home
    reference = build_unlabelled_batch(home / "batches" / "reference", world / "checkpoints", n=8, seed=1)
    batch = build_unlabelled_batch(home / "batches" / "incoming", world / "checkpoints", n=8, seed=2)
    drift = {"reference": str(reference), "batch": str(batch), "cron": "* * * * *"}
    config = {"models": {"tiny": {"suite": "suite.yaml", "policy": "gate.yaml", "drift": drift}}, "poll_interval_s": 1}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    env = child_env | {"VLGATE_HOME": str(home), "VLGATE_WEBHOOK_SECRET": ""}

    client = tracking.connect(home)
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps3", home=home)
    log = open(tmp_path / "serve.log", "w")
    process = subprocess.Popen([str(Path(sys.executable).parent / "vlgate"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: tracking.champion_version(client, "tiny") == "1", 300, "the poller's validation of v1", process)
        assert client.get_model_version("tiny", "1").tags[tag_keys.DECISION] == "promoted"
        experiment = client.get_experiment_by_name("vlgate/tiny").experiment_id

        def drift_runs():
            return client.search_runs([experiment], "tags.`vlgate.kind` = 'drift'")

        wait_until(lambda: len(drift_runs()) >= 1, 300, "a scheduled drift run", process)
        run = drift_runs()[0]
        assert run.data.tags["vlgate.version"] == "1" and run.data.tags["vlgate.drift"] in ("true", "false")
        assert run.data.tags["vlgate.batch"] == str(batch)
        assert (home / "prefect" / "server.log").is_file()  # vlgate started its own Prefect server
    except BaseException:
        if process.poll() is None:  # every thread's stack into serve.log (faulthandler), to see what it waits for
            os.kill(process.pid, signal.SIGUSR1)
            time.sleep(2)
        log.flush()
        print((tmp_path / "serve.log").read_text()[-8000:])
        raise
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    print((tmp_path / "serve.log").read_text()[-3000:])
