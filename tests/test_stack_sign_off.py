"""Human sign-off in the real deployment (``vlgate stack``, authentication on;
flows/approval.py): a version that passes every rule of a policy wanting approval suspends
its flow run for the sign-off (the Prefect UI's form), holding no worker slot while it waits;
``vlgate approve|reject`` signs as the person's MLflow user, who must hold MANAGE on the
registered model (a refusal is recorded and changes nothing), then resumes that flow run.

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
from test_stack import POSTGRES, flow_runs, logs_on_failure, prefect_headers, write_home

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


def person(state, username: str, manage: bool) -> dict[str, str]:
    """A person's MLflow account, made by the stack's admin: EDIT on the model's validation
    experiment (their sign-off is a record there) and, with ``manage``, MANAGE on the
    registered model (``stacked``), else READ; the environment their shell would have."""
    import secrets

    admin = state.credentials().admin.basic()
    password = secrets.token_urlsafe(18)
    api = f"{state.mlflow_url}/api/2.0/mlflow"
    experiment = httpx.get(f"{api}/experiments/get-by-name", params={"experiment_name": "vlgate/stacked"}, auth=admin, timeout=30).json()["experiment"]["experiment_id"]
    grant = f"{state.mlflow_url}/api/3.0/mlflow/users/permissions/grant"
    for url, body in (
        (f"{api}/users/create", {"username": username, "password": password}),
        (grant, {"username": username, "resource_type": "experiment", "resource_id": experiment, "permission": "EDIT"}),
        (grant, {"username": username, "resource_type": "registered_model", "resource_id": "stacked", "permission": "MANAGE" if manage else "READ"}),
    ):
        response = httpx.post(url, json=body, auth=admin, timeout=30)
        assert response.status_code == 200, (url, response.text)
    return state.environment() | {"MLFLOW_TRACKING_USERNAME": username, "MLFLOW_TRACKING_PASSWORD": password}


def test_a_version_awaiting_approval_suspends_its_flow_without_holding_the_worker_and_the_cli_resumes_it(tiny_world, tmp_path, monkeypatch):
    world, _ = tiny_world
    home = tmp_path / "home"
    write_home(home, world)
    policy = yaml.safe_load((home / "gate.yaml").read_text()) | {"approval": {"approvers": ["alice"], "expires_after": "1d"}}
    (home / "gate.yaml").write_text(yaml.safe_dump(policy))
    stack = LocalStack(tmp_path / "stack", home)
    state = stack.up(workers=1, postgres=POSTGRES)  # one worker: the second version runs only if the first's suspended flow left it
    env = state.environment()
    assert env["MLFLOW_TRACKING_USERNAME"] == "vlgate"  # authentication on: this process is the service account
    try:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        client = tracking.connect()
        # the team's model, made by someone else than the service (MLflow gives its creator MANAGE)
        made = httpx.post(f"{state.mlflow_url}/api/2.0/mlflow/registered-models/create", json={"name": "stacked"}, auth=state.credentials().admin.basic(), timeout=30)
        assert made.status_code == 200, made.text
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
        form = httpx.get(f"{state.prefect_api}/flow_runs/{runs['1']['id']}", headers=prefect_headers(state), timeout=30).json()["state"]["state_details"]
        assert form["pause_reschedule"] and form["run_input_keyset"]  # the UI's form, and a rescheduled (slot-free) suspension

        alice, mallory = person(state, "alice", manage=True), person(state, "mallory", manage=False)
        run_1 = client.get_model_version("stacked", "1").tags[tag_keys.VALIDATION_RUN]
        service = vlgate(env, "approve", "stacked", "1", "--reason", "ship it")  # the service account holds EDIT, not MANAGE
        assert service.returncode == 2 and "vlgate does not hold MANAGE on the registered model stacked" in service.stderr
        claimed = vlgate(mallory, "approve", "stacked", "1", "--reason", "ship it", "--by", "alice")  # nobody signs as another
        assert claimed.returncode == 2 and "the signer is the MLflow user of the credentials (mallory)" in claimed.stderr
        readonly = state.credentials().readonly
        looking = vlgate(env | {"MLFLOW_TRACKING_USERNAME": readonly.username, "MLFLOW_TRACKING_PASSWORD": readonly.password.get_secret_value()}, "approve", "stacked", "1", "--reason", "ship it")
        assert looking.returncode == 2 and "vlgate-readonly does not hold MANAGE" in looking.stderr and "the refusal is not recorded" in looking.stderr  # it may write nothing
        refused = vlgate(mallory, "approve", "stacked", "1", "--reason", "ship it")
        assert refused.returncode == 2 and "mallory does not hold MANAGE on the registered model stacked" in refused.stderr
        history = tracking.decision_history(client, run_1)
        assert [(r.kind, r.outcome, r.judged_by.user, r.judged_by.verified) for r in history[1:]] == [
            (DecisionKind.REFUSED_SIGN_OFF, Outcome.AWAITING_APPROVAL, "vlgate", True), (DecisionKind.REFUSED_SIGN_OFF, Outcome.AWAITING_APPROVAL, "mallory", True),
        ]  # fmt: skip
        assert by_version()["1"]["state_name"] == "Suspended" and tracking.champion_version(client, "stacked") is None  # nothing resumed or moved

        approved = vlgate(alice, "approve", "stacked", "1", "--reason", "ship it", "--json")
        assert approved.returncode == 0, approved.stderr
        answer = json.loads(approved.stdout)
        assert (answer["kind"], answer["outcome"], answer["judged_by"]["user"], answer["judged_by"]["verified"], answer["sequence"]) == ("approval", "promoted", "alice", True, 4)
        assert answer["judged_by"]["request_id"] == f"{runs['1']['id']}/sign-off-1"  # the answer to that suspension
        assert tracking.champion_version(client, "stacked") == "1"

        rejected = vlgate(alice, "reject", "stacked", "2", "--reason", "one is enough", "--json")
        assert rejected.returncode == 3, rejected.stderr
        assert json.loads(rejected.stdout)["judged_by"]["request_id"] == f"{runs['2']['id']}/sign-off-1"
        assert tracking.champion_version(client, "stacked") == "1" and client.get_model_version("stacked", "2").tags[tag_keys.DECISION] == "rejected"
        # both flow runs were resumed, ran again on the worker, found their answer on record and ended
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and {r["state_type"] for r in by_version().values()} != {"COMPLETED"}:
            time.sleep(2)
        assert {v: r["state_type"] for v, r in by_version().items()} == {"1": "COMPLETED", "2": "COMPLETED"}
        for version, sequence in (("1", 4), ("2", 2)):  # nothing appended twice by the resumed runs
            assert [r.sequence for r in tracking.decision_history(client, client.get_model_version("stacked", version).tags[tag_keys.VALIDATION_RUN])][-1] == sequence
        assert len(flow_runs(state)) == 2  # resumed, not run again
    except BaseException:
        logs_on_failure(state)
        raise
    finally:
        stack.down(purge=True)
