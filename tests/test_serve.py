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


def _stop(process: subprocess.Popen, sig: int) -> None:
    os.killpg(process.pid, sig)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.timeout(900)
def test_a_decision_still_undelivered_when_serve_is_killed_is_delivered_once_after_it_restarts(tiny_world, smoke_home, child_env, tmp_path):
    """The decision's notification is written with the claim's final state; serve killed
    (SIGKILL) while it is still undelivered, its receiver down, loses nothing: the next serve
    delivers it, signed, once."""
    from test_notifications import Receiver

    from vlgate.registry_hooks.outbox import DEFAULT_LEASE_S, Outbox
    from vlgate.registry_hooks.senders import verify_notification
    from vlgate.registry_hooks.state_db import StateDatabase

    world, _ = tiny_world
    home = smoke_home
    receiver = Receiver()  # its port kept, nothing listening yet
    channel = {"kind": "webhook", "name": "ci", "url": receiver.url, "secret_env": "VLGATE_TEST_NOTIFY_SECRET", "allow_private_addresses": True}
    config = {"models": {"tiny": {"suite": "suite.yaml", "policy": "gate.yaml"}}, "poll_interval_s": 1, "notify": {"channels": [channel]}}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    env = child_env | {"VLGATE_HOME": str(home), "VLGATE_WEBHOOK_SECRET": "", "VLGATE_TEST_NOTIFY_SECRET": "kill-test-s3cret"}
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps3", home=home)
    outbox = Outbox(StateDatabase.for_home(home))

    def serve(log_name: str) -> subprocess.Popen:
        log = open(tmp_path / log_name, "w")
        return subprocess.Popen([str(Path(sys.executable).parent / "vlgate"), "serve", "--no-drift"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    first = serve("serve-1.log")
    try:
        wait_until(lambda: client.get_model_version("tiny", "1").tags.get(tag_keys.DECISION) is not None, 300, "the poller's decision on v1", first)
        wait_until(lambda: (c := outbox.counts().get("ci")) is not None and c.pending == 1, 60, "the decision's notification in the outbox", first)
    except BaseException:
        print((tmp_path / "serve-1.log").read_text()[-6000:])
        raise
    finally:
        _stop(first, signal.SIGKILL)  # killed outright: no shutdown path runs
    assert receiver.requests == [] and outbox.counts()["ci"].pending == 1

    receiver.start()
    second = serve("serve-2.log")
    try:
        # killed while it held the row for a send, the first serve left it leased: the next
        # takes it once the lease runs out (outbox.DEFAULT_LEASE_S), so wait past that
        wait_until(lambda: len(receiver.requests) >= 1, DEFAULT_LEASE_S + 120, "the notification delivered by the restarted serve", second)
        time.sleep(3)  # a second delivery, were there one, would arrive by now
    except BaseException:
        print((tmp_path / "serve-2.log").read_text()[-6000:])
        raise
    finally:
        _stop(second, signal.SIGINT)
        receiver.stop()
    [(_, headers, body)] = receiver.requests
    told = verify_notification("kill-test-s3cret", headers, body)
    record = tracking.latest_decision(client, client.get_model_version("tiny", "1").tags[tag_keys.VALIDATION_RUN])
    assert (told.model, told.version, told.outcome, told.event) == ("tiny", "1", record.outcome.value, f"decision-{record.outcome.value}")
    assert outbox.counts()["ci"].delivered == 1 and outbox.counts()["ci"].pending == 0
