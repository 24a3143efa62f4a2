"""Human sign-off in the real deployment (``vlgate stack``, flows/approval.py): a version that
passes every rule of a policy wanting approval suspends its flow run for the sign-off (the
Prefect UI's form), holding no worker slot while it waits, and ``vlgate approve|reject``
resumes that same flow run, which applies the answer.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth), as test_stack.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from test_service_postgres import _postgres_up
from test_stack import POSTGRES, flow_runs, logs_on_failure, write_home

from vlgate import tag_keys, tracking
from vlgate.cli.stack import LocalStack
from vlgate.decisions import DecisionKind, Outcome

pytestmark = [pytest.mark.world, pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(1200)]

if not _postgres_up():  # pragma: no cover - test_service_postgres makes this a failure in CI
    pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432", allow_module_level=True)

#: the tiny world's versions this lenient floor promotes (test_stack.py's POLICY): both pass every rule
PASSING = ("vlm-language-prior", "vlm-answer-prior")


def vlgate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The vlgate command line as another shell of the stack runs it (``source FOLDER/env``)."""
    command = [str(Path(sys.executable).parent / "vlgate"), *args]
    return subprocess.run(command, env=os.environ | env, capture_output=True, text=True, timeout=600)


def test_a_version_awaiting_approval_suspends_its_flow_without_holding_the_worker_and_the_cli_resumes_it(tiny_world, tmp_path, monkeypatch):
    world, _ = tiny_world
    home = tmp_path / "home"
    write_home(home, world)
    policy = yaml.safe_load((home / "gate.yaml").read_text()) | {"approval": {"approvers": ["alice"], "expires_after": "1d"}}
    (home / "gate.yaml").write_text(yaml.safe_dump(policy))
    stack = LocalStack(tmp_path / "stack", home)
    state = stack.up(workers=1, postgres=POSTGRES)  # one worker: the second version runs only if the first's suspended flow left it
    env = state.environment()
    try:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        client = tracking.connect()
        client.create_registered_model("stacked")
        for checkpoint in PASSING:
            source = tracking.register_checkpoint(client, f"source-{checkpoint}", world / "checkpoints" / checkpoint, home=home)
            client.create_model_version("stacked", source.source, run_id=source.run_id)

        def by_version() -> dict[str, dict]:
            return {r["parameters"]["version"]: r for r in flow_runs(state)}

        def suspended(versions: tuple[str, ...]) -> bool:
            runs = by_version()
            return all(v in runs and runs[v]["state_name"] == "Suspended" for v in versions)

        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not suspended(("1", "2")):
            time.sleep(2)
        runs = by_version()
        assert suspended(("1", "2")), {v: r["state_name"] for v, r in runs.items()}
        assert runs["1"]["state_type"] == "PAUSED" and runs["2"]["state_type"] == "PAUSED"
        # both ran on the one worker: the first, suspended, did not keep its slot
        for version in ("1", "2"):
            mv = client.get_model_version("stacked", version)
            assert mv.tags[tag_keys.DECISION] == "awaiting approval" and tracking.latest_decision(client, mv.tags[tag_keys.VALIDATION_RUN]).outcome is Outcome.AWAITING_APPROVAL
        assert tracking.champion_version(client, "stacked") is None
        form = httpx.get(f"{state.prefect_api}/flow_runs/{runs['1']['id']}", timeout=30).json()["state"]["state_details"]
        assert form["pause_reschedule"] and form["run_input_keyset"]  # the UI's form, and a rescheduled (slot-free) suspension

        refused = vlgate(env, "approve", "stacked", "1", "--reason", "ship it", "--by", "mallory")
        assert refused.returncode == 2 and "not among the policy's approvers" in refused.stderr
        run_1 = client.get_model_version("stacked", "1").tags[tag_keys.VALIDATION_RUN]
        history = tracking.decision_history(client, run_1)
        assert [(r.kind, r.outcome) for r in history] == [(DecisionKind.VALIDATION, Outcome.AWAITING_APPROVAL), (DecisionKind.REFUSED_SIGN_OFF, Outcome.AWAITING_APPROVAL)]
        assert by_version()["1"]["state_name"] == "Suspended" and tracking.champion_version(client, "stacked") is None  # nothing resumed or moved

        approved = vlgate(env, "approve", "stacked", "1", "--reason", "ship it", "--by", "alice", "--json")
        assert approved.returncode == 0, approved.stderr
        answer = json.loads(approved.stdout)
        assert (answer["kind"], answer["outcome"], answer["judged_by"]["user"], answer["sequence"]) == ("approval", "promoted", "alice", 3)
        assert answer["judged_by"]["flow_run_id"] == runs["1"]["id"]  # the suspended flow run applied it
        assert tracking.champion_version(client, "stacked") == "1"
        assert by_version()["1"]["state_type"] == "COMPLETED"

        rejected = vlgate(env, "reject", "stacked", "2", "--reason", "one is enough", "--by", "alice", "--json")
        assert rejected.returncode == 3, rejected.stderr
        assert json.loads(rejected.stdout)["judged_by"]["flow_run_id"] == runs["2"]["id"]
        assert by_version()["2"]["state_type"] == "COMPLETED" and tracking.champion_version(client, "stacked") == "1"
        assert client.get_model_version("stacked", "2").tags[tag_keys.DECISION] == "rejected"
        assert len(flow_runs(state)) == 2  # resumed, not run again
    except BaseException:
        logs_on_failure(state)
        raise
    finally:
        stack.down(purge=True)
