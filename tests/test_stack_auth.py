"""Authentication and least privilege on the real deployment (``vlgate stack``, cli/stack.py;
vlgate/tracking/permissions.py): MLflow's basic-auth app and Prefect's auth string refuse
whoever does not authenticate, the read-only account changes nothing, ``vlgate serve`` refuses
to start on an account that lacks a permission, secret files are 0600, and a webhook secret
rotated in vlgate.yaml takes effect at restart, and a person signs off a version awaiting
approval as their own MLflow user. The whole loop run by the service account is
test_stack.py's versions-at-once test (the stacks there run with authentication too).

The first tests need no server; the others share one stack (needs PostgreSQL on
127.0.0.1:5432, user postgres, trust auth, as test_stack.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from vlgate.cli.stack import LocalStack
from vlgate.cli.stack_state import (
    CREDENTIALS_FILE,
    ENV_FILE,
    SECRET_FILES,
    StackCredentials,
    StackState,
    exposure_problem,
    loose_secret_files,
    state_json,
    write_private,
)


def stack_test(function):
    """Marked as test_stack.py's tests are: the stack runs MLflow, Prefect and the world's models."""
    for mark in (pytest.mark.world, pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(1200)):
        function = mark(function)
    return function


# --- no server ------------------------------------------------------------------------------------


def test_a_host_others_reach_without_authentication_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path / "home"))
    folder = tmp_path / "stack"
    assert main(["stack", "up", "--host", "0.0.0.0", "--no-auth", "--dir", str(folder), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--host 0.0.0.0 --no-auth" in err
    assert not folder.exists() and not (tmp_path / "home").exists()  # nothing started, nothing written
    assert exposure_problem("0.0.0.0", auth=True) is None and exposure_problem("127.0.0.1", auth=False) is None
    assert exposure_problem("::1", auth=False) is None and exposure_problem("localhost", auth=False) is None
    assert exposure_problem("10.1.2.3", auth=False) and exposure_problem("gpu-host.example", auth=False)
    with pytest.raises(Exception, match="--no-auth"):
        LocalStack(folder, tmp_path / "home").up(workers=1, postgres=None, auth=False, host="0.0.0.0")
    assert not folder.exists()


def _state(folder: Path, auth: bool) -> StackState:
    return StackState(
        folder=str(folder), home=str(folder / "home"), postgres="postgresql://postgres@127.0.0.1:5432",
        databases={"mlflow": "m", "prefect": "p", "state": "s", "auth": "a"},
        mlflow_url="http://127.0.0.1:1", prefect_url="http://127.0.0.1:2", webhook_url="http://127.0.0.1:3/webhooks/mlflow", workers=1, auth=auth,
    )  # fmt: skip


def test_the_environment_carries_the_service_account_and_the_files_holding_it_are_private(tmp_path):
    folder = tmp_path / "stack"
    folder.mkdir()
    credentials = StackCredentials.generate()
    write_private(folder / CREDENTIALS_FILE, credentials.model_dump_json())
    assert StackCredentials.read(folder) == credentials
    assert credentials.service.username == "vlgate" and credentials.prefect_auth_string.get_secret_value().startswith("vlgate:")
    env = _state(folder, auth=True).environment()
    assert env["MLFLOW_TRACKING_USERNAME"] == "vlgate" and env["MLFLOW_TRACKING_PASSWORD"] == credentials.service.password.get_secret_value()
    assert env["PREFECT_API_AUTH_STRING"] == credentials.prefect_auth_string.get_secret_value()
    assert not {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "PREFECT_API_AUTH_STRING"} & set(_state(folder, auth=False).environment())
    # what --json prints names no secret
    shown = json.dumps(state_json(_state(folder, auth=True)))
    assert credentials.service.password.get_secret_value() not in shown and credentials.prefect_auth_string.get_secret_value() not in shown
    assert credentials.admin.password.get_secret_value() not in repr(credentials)
    public = _state(folder, auth=True).public_environment()
    assert public == env | {"MLFLOW_TRACKING_PASSWORD": "<secret>", "PREFECT_API_AUTH_STRING": "<secret>"}
    # env is written 0600, and an existing readable one is made 0600 before it is written
    (folder / ENV_FILE).write_text("old")
    (folder / ENV_FILE).chmod(0o644)
    LocalStack(folder, folder / "home")._write(_state(folder, auth=True))
    assert stat.S_IMODE((folder / ENV_FILE).stat().st_mode) == 0o600 and stat.S_IMODE((folder / "stack.json").stat().st_mode) == 0o600
    assert f"export MLFLOW_TRACKING_PASSWORD={credentials.service.password.get_secret_value()}" in (folder / ENV_FILE).read_text()
    assert loose_secret_files(folder) == [] and {ENV_FILE, "stack.json", CREDENTIALS_FILE} <= set(SECRET_FILES)
    (folder / CREDENTIALS_FILE).chmod(0o640)
    assert loose_secret_files(folder) == [(folder / CREDENTIALS_FILE, 0o640)]
    (folder / CREDENTIALS_FILE).unlink()  # as after `down --purge`: what is shown needs no secret
    assert state_json(_state(folder, auth=True))["environment"] == public


def test_stopping_a_group_returns_once_nothing_of_it_runs_a_process_ignoring_sigterm_killed_and_zombies_not_counted():
    from vlgate.cli.processes import group_alive, stop_group

    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & wait"], start_new_session=True)
    time.sleep(0.5)
    assert group_alive(stubborn.pid)
    started = time.monotonic()
    stop_group(stubborn.pid, grace_s=1.0)
    assert not group_alive(stubborn.pid) and 1.0 <= time.monotonic() - started < 8
    ended = subprocess.Popen(["true"], start_new_session=True)  # exits; its status is not collected
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and group_alive(ended.pid):
        time.sleep(0.05)
    os.killpg(ended.pid, 0)  # a zombie still answers a signal ...
    assert not group_alive(ended.pid)  # ... and is not counted as running
    ended.wait()


def test_restart_takes_a_process_name_and_no_other_action_does(tmp_path, monkeypatch, capsys):
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path / "home"))
    assert main(["stack", "restart", "--dir", str(tmp_path / "stack")]) == 2
    assert main(["stack", "status", "serve", "--dir", str(tmp_path / "stack")]) == 2
    assert capsys.readouterr().err.count("restart takes the process to restart") == 2
    assert main(["stack", "restart", "serve", "--dir", str(tmp_path / "stack")]) == 2
    assert "no stack in" in capsys.readouterr().err


def test_the_webhook_secret_is_named_by_its_variable_never_written_in_the_file():
    from vlgate.flows.settings import ServiceConfig

    assert ServiceConfig.model_validate({"webhook": {"secret_env": "ROTATED_SECRET"}}).webhook.secret_env == "ROTATED_SECRET"
    assert ServiceConfig().webhook.secret_env == "VLGATE_WEBHOOK_SECRET"
    with pytest.raises(ValueError) as refused:
        ServiceConfig.model_validate({"webhook": {"secret_env": "9f2c1b-literal-secret"}})
    assert "9f2c1b-literal-secret" not in str(refused.value)
    with pytest.raises(ValueError):
        ServiceConfig.model_validate({"webhook": {"secret": "9f2c1b-literal-secret"}})


# --- infra/compose.yaml: the same set-up, parsed (no Docker engine runs here; test_infra.py checks the spec) ---

INFRA = Path(__file__).parent.parent / "infra"


def compose_document() -> dict:
    from test_infra import interpolate, read_env_file

    return yaml.safe_load(interpolate((INFRA / "compose.yaml").read_text(), read_env_file(INFRA / ".env.example")))


def test_compose_runs_mlflow_and_prefect_with_authentication_and_every_vlgate_process_as_the_service_account():
    from test_infra import read_env_file

    services = compose_document()["services"]
    example = read_env_file(INFRA / ".env.example")
    mlflow = services["mlflow"]
    assert "--app-name=basic-auth" in mlflow["command"] and mlflow["entrypoint"] == ["/bin/sh", "/app/infra/mlflow-auth.sh"]
    assert mlflow["environment"]["MLFLOW_AUTH_DATABASE_URI"].endswith("@postgres:5432/mlflow_auth") and "CREATE DATABASE mlflow_auth;" in (INFRA / "postgres" / "init.sql").read_text()
    assert mlflow["environment"]["MLFLOW_AUTH_ADMIN_PASSWORD"] == example["MLFLOW_ADMIN_PASSWORD"] and mlflow["environment"]["MLFLOW_FLASK_SERVER_SECRET_KEY"]
    auth_string = services["prefect"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"]
    assert auth_string == example["PREFECT_AUTH_STRING"] and services["prefect"]["environment"]["PREFECT_API_AUTH_STRING"] == auth_string
    for name in ("worker", "vlgate", "dask-worker"):  # every process running vlgate code (flow runs and Dask tasks inherit it)
        env = services[name]["environment"]
        assert env["MLFLOW_TRACKING_USERNAME"] == "vlgate" and env["MLFLOW_TRACKING_PASSWORD"] == example["VLGATE_MLFLOW_PASSWORD"], name
        assert env["PREFECT_API_AUTH_STRING"] == auth_string, name
    init = services["mlflow-init"]
    assert init["command"] == ["python", "/app/infra/mlflow_init.py"] and init["depends_on"]["mlflow"]["condition"] == "service_healthy"
    for name in ("vlgate", "worker"):  # their account exists, and serve's webhook is registered, before they start
        assert services[name]["depends_on"]["mlflow-init"]["condition"] == "service_completed_successfully"
    assert init["environment"]["VLGATE_WEBHOOK_SECRET"] == services["vlgate"]["environment"]["VLGATE_WEBHOOK_SECRET"]
    # the secrets are placeholders to replace, in a file git ignores
    for name in ("MLFLOW_ADMIN_PASSWORD", "VLGATE_MLFLOW_PASSWORD", "VLGATE_MLFLOW_READONLY_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY", "VLGATE_WEBHOOK_SECRET"):
        assert example[name].startswith("CHANGE-ME"), name
    assert example["PREFECT_AUTH_STRING"].startswith("vlgate:CHANGE-ME")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(INFRA / ".env")], cwd=INFRA, capture_output=True)
    assert ignored.returncode == 0


def test_compose_s_mlflow_entrypoint_writes_the_auth_config_mlflow_reads_private_to_its_user(tmp_path):
    from mlflow.server.auth.config import read_auth_config

    config = tmp_path / "auth" / "basic_auth.ini"
    env = {"PATH": os.environ["PATH"], "MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_AUTH_DATABASE_URI": "postgresql+psycopg2://u:pw@postgres:5432/mlflow_auth", "MLFLOW_AUTH_ADMIN_USERNAME": "vlgate-admin"}
    done = subprocess.run(["/bin/sh", str(INFRA / "mlflow-auth.sh"), "sh", "-c", "echo started"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "started\n", done.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(config))
        patch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", "from-the-environment")
        read = read_auth_config()
    assert (read.default_permission, read.database_uri, read.admin_username, read.admin_password) == ("NO_PERMISSIONS", env["MLFLOW_AUTH_DATABASE_URI"], "vlgate-admin", "from-the-environment")
    assert read.auth_cache_ttl_seconds == 60
    done = subprocess.run(["/bin/sh", str(INFRA / "mlflow-auth.sh"), "true"], env={k: v for k, v in env.items() if k != "MLFLOW_AUTH_DATABASE_URI"}, capture_output=True, text=True)
    assert done.returncode != 0 and "MLFLOW_AUTH_DATABASE_URI" in done.stderr


def test_mlflow_init_refuses_a_placeholder_left_from_the_example(tmp_path):
    from test_infra import read_env_file

    example = read_env_file(INFRA / ".env.example")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "VLGATE_"))} | {
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "VLGATE_WEBHOOK_URL": "http://vlgate:8765/webhooks/mlflow", "VLGATE_HOME": str(tmp_path),
        **{name: example[name] for name in ("MLFLOW_ADMIN_PASSWORD", "VLGATE_MLFLOW_PASSWORD", "VLGATE_MLFLOW_READONLY_PASSWORD", "VLGATE_WEBHOOK_SECRET")},
    }  # fmt: skip
    done = subprocess.run([sys.executable, str(INFRA / "mlflow_init.py")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == (
        "mlflow-init: MLFLOW_ADMIN_PASSWORD is still the CHANGE-ME placeholder of .env.example: make a secret for it (infra/.env.example says how)"
    )
    done = subprocess.run([sys.executable, str(INFRA / "mlflow_init.py")], env={k: v for k, v in env.items() if k != "VLGATE_MLFLOW_PASSWORD"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == "mlflow-init: VLGATE_MLFLOW_PASSWORD is not set (infra/.env)"


# --- one stack with authentication -------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_stack(tiny_world, tmp_path_factory):
    from test_service_postgres import _postgres_up
    from test_stack import POSTGRES, write_home

    if not _postgres_up():  # pragma: no cover - test_service_postgres makes this a failure in CI
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    world, _ = tiny_world
    root = tmp_path_factory.mktemp("auth-stack")
    home = root / "home"
    write_home(home, world)
    stack = LocalStack(root / "stack", home)
    state = stack.up(workers=1, postgres=POSTGRES)
    try:
        yield stack, state, home
    finally:
        stack.down(purge=True)


def accounts(state: StackState) -> StackCredentials:
    return state.credentials()


def prefect_auth(auth_string: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()}


@stack_test
def test_requests_without_or_with_wrong_credentials_are_refused(auth_stack):
    stack, state, _ = auth_stack
    credentials = accounts(state)
    search = f"{state.mlflow_url}/api/2.0/mlflow/registered-models/search"
    for url in (search, f"{state.mlflow_url}/"):  # the REST API and the UI page
        assert httpx.get(url, timeout=30).status_code == 401
        assert httpx.get(url, auth=(credentials.service.username, "not-the-password"), timeout=30).status_code == 401
        assert httpx.get(url, auth=("nobody", credentials.service.password.get_secret_value()), timeout=30).status_code == 401
        assert httpx.get(url, auth=credentials.readonly.basic(), timeout=30).status_code == 200
    filter_ = f"{state.prefect_api}/flow_runs/filter"
    assert httpx.post(filter_, json={}, timeout=30).status_code == 401
    assert httpx.post(filter_, json={}, headers=prefect_auth("vlgate:not-the-password"), timeout=30).status_code == 401
    assert httpx.post(filter_, json={}, headers=prefect_auth(credentials.prefect_auth_string.get_secret_value()), timeout=30).status_code == 200
    assert httpx.get(f"{state.mlflow_url}/health", timeout=30).status_code == 200 and httpx.get(f"{state.prefect_api}/health", timeout=30).status_code == 200


def as_account(monkeypatch: pytest.MonkeyPatch, state: StackState, username: str, password: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", state.mlflow_url)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", username)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


@stack_test
def test_the_read_only_account_reads_but_cannot_register_tag_or_move_the_alias(auth_stack, monkeypatch):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from vlgate.tracking import permissions

    _, state, _ = auth_stack
    credentials = accounts(state)
    client = MlflowClient(state.mlflow_url, state.mlflow_url)
    as_account(monkeypatch, state, *credentials.service.basic())
    client.create_registered_model("guarded")
    run = client.create_run(client.create_experiment("guarded-source"))
    version = client.create_model_version("guarded", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id).version
    client.set_registered_model_alias("guarded", "champion", version)
    assert permissions.authenticated_user() == "vlgate"
    assert permissions.can_manage_registered_model("guarded", "vlgate")  # it created the model: MLflow made it its manager
    assert not permissions.can_manage_registered_model("stacked", "vlgate-readonly")  # it may not ask about another account

    as_account(monkeypatch, state, *credentials.readonly.basic())
    assert permissions.authenticated_user() == "vlgate-readonly"
    assert client.get_model_version_by_alias("guarded", "champion").version == version  # it reads
    assert client.get_run(run.info.run_id).info.run_id == run.info.run_id
    refusals = {
        "register a version": lambda: client.create_model_version("guarded", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id),
        "set a tag": lambda: client.set_model_version_tag("guarded", version, "vlgate.decision", "promoted"),
        "move the alias": lambda: client.set_registered_model_alias("guarded", "champion", version),
        "delete the alias": lambda: client.delete_registered_model_alias("guarded", "champion"),
        "write a run": lambda: client.set_tag(run.info.run_id, "k", "v"),
    }
    for what, attempt in refusals.items():
        with pytest.raises(MlflowException) as refused:
            attempt()
        assert refused.value.error_code == "PERMISSION_DENIED", what
    assert not permissions.can_manage_registered_model("guarded", "vlgate-readonly")

    as_account(monkeypatch, state, *credentials.admin.basic())
    assert permissions.can_manage_registered_model("guarded", "vlgate-admin")  # admins manage everything
    assert not permissions.can_manage_registered_model("stacked", "vlgate")  # EDIT, not MANAGE, on a model it did not create
    assert client.get_model_version_by_alias("guarded", "champion").version == version and "vlgate.decision" not in client.get_model_version("guarded", version).tags


@stack_test
def test_secret_files_are_0600_and_status_warns_about_one_that_is_not(auth_stack, monkeypatch, capsys):
    from vlgate.cli.main import main

    _, state, home = auth_stack
    folder = Path(state.folder)
    for name in SECRET_FILES:
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    monkeypatch.setenv("VLGATE_HOME", str(home))
    (folder / ENV_FILE).chmod(0o644)
    try:
        assert main(["stack", "status", "--dir", str(folder), "--json"]) == 0
        out, err = capsys.readouterr()
    finally:
        (folder / ENV_FILE).chmod(0o600)
    assert err.strip() == f"warning: {folder / ENV_FILE} holds secrets and is mode 0644, readable by others: chmod 600 {folder / ENV_FILE}"
    answer = json.loads(out)
    assert answer["loose_secret_files"] == [{"path": str(folder / ENV_FILE), "mode": "0644"}] and answer["auth"] is True
    credentials = accounts(state)
    for secret in (credentials.service.password, credentials.admin.password, credentials.readonly.password, credentials.prefect_auth_string):
        assert secret.get_secret_value() not in out  # never echoed
    assert main(["stack", "status", "--dir", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "credentials.json" in out and credentials.service.password.get_secret_value() not in out
    secrets = [s.get_secret_value() for s in (credentials.service.password, credentials.admin.password, credentials.readonly.password, credentials.prefect_auth_string, credentials.flask_secret_key)]
    secrets.append((folder / "webhook-secret").read_text().strip())
    for log in (folder / "logs").glob("*.log"):  # no process logged one
        text = log.read_text(errors="replace")
        assert not [secret for secret in secrets if secret in text], log.name


@stack_test
def test_serve_on_an_account_lacking_a_permission_exits_2_naming_it(auth_stack):
    _, state, home = auth_stack
    credentials = accounts(state)
    env = os.environ | state.environment() | {"VLGATE_HOME": str(home), "MLFLOW_TRACKING_USERNAME": credentials.readonly.username, "MLFLOW_TRACKING_PASSWORD": credentials.readonly.password.get_secret_value()}
    command = [str(Path(sys.executable).parent / "vlgate"), "serve", "--once", "--no-drift"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert "MLflow account 'vlgate-readonly' cannot set tags on registered model 'stacked''s versions and move its champion alias" in line
    assert "needs EDIT on registered model 'stacked' (it has READ)" in line
    done = subprocess.run(command, env=env | {"MLFLOW_TRACKING_PASSWORD": "not-the-password"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "refused the credentials of 'vlgate-readonly' (401)" in done.stderr.strip().splitlines()[-1]


@stack_test
def test_compose_s_mlflow_init_sets_up_the_same_accounts_and_webhook_again_changing_nothing(auth_stack):
    """infra/mlflow_init.py, run against the stack's server with its credentials: what compose runs
    at every `up` leaves a set-up as the stack made it (and as it finds it)."""
    _, state, home = auth_stack
    credentials = accounts(state)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "VLGATE_"))} | {
        "MLFLOW_TRACKING_URI": state.mlflow_url, "VLGATE_HOME": str(home), "VLGATE_WEBHOOK_URL": state.webhook_url,
        "MLFLOW_ADMIN_USERNAME": credentials.admin.username, "MLFLOW_ADMIN_PASSWORD": credentials.admin.password.get_secret_value(),
        "VLGATE_MLFLOW_PASSWORD": credentials.service.password.get_secret_value(), "VLGATE_MLFLOW_READONLY_PASSWORD": credentials.readonly.password.get_secret_value(),
        "VLGATE_WEBHOOK_SECRET": (Path(state.folder) / "webhook-secret").read_text().strip(),
    }  # fmt: skip
    done = subprocess.run([sys.executable, str(INFRA / "mlflow_init.py")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "accounts vlgate and vlgate-readonly" in done.stdout and "signed with VLGATE_WEBHOOK_SECRET" in done.stdout
    for secret in (credentials.admin.password, credentials.service.password, credentials.readonly.password):
        assert secret.get_secret_value() not in done.stdout + done.stderr
    search = f"{state.mlflow_url}/api/2.0/mlflow/registered-models/search"
    assert httpx.get(search, auth=credentials.service.basic(), timeout=30).status_code == 200
    done = subprocess.run([sys.executable, str(INFRA / "mlflow_init.py")], env=env | {"MLFLOW_ADMIN_PASSWORD": "not-the-admin-password"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "refused the credentials of 'vlgate-admin' (401)" in done.stderr


#: the tiny world's versions this lenient floor promotes (test_stack.py's POLICY): both pass every rule
PASSING = ("vlm-language-prior", "vlm-answer-prior")


def vlgate_as(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
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


@stack_test
def test_a_version_awaiting_approval_suspends_its_flow_without_holding_the_worker_and_the_cli_resumes_it(auth_stack, tiny_world, monkeypatch):
    """Human sign-off (flows/approval.py): a version that passes every rule of a policy wanting
    approval suspends its flow run for the sign-off (the Prefect UI's form), holding no worker
    slot while it waits; ``vlgate approve|reject`` signs as the person's MLflow user, who must
    hold MANAGE on the registered model (a refusal is recorded and changes nothing), then
    resumes that flow run."""
    from test_stack import flow_runs, logs_on_failure, prefect_headers

    from vlgate import tag_keys, tracking
    from vlgate.decisions import DecisionKind, Outcome

    _, state, home = auth_stack
    world, _ = tiny_world
    policy = yaml.safe_load((home / "gate.yaml").read_text()) | {"approval": {"approvers": ["alice"], "expires_after": "1d"}}
    (home / "gate.yaml").write_text(yaml.safe_dump(policy))  # read by each flow run: the stack has one worker
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
            client.create_model_version("stacked", source.source, run_id=source.run_id, model_id=tracking.version_logged_model(source))

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
        service = vlgate_as(env, "approve", "stacked", "1", "--reason", "ship it")  # the service account holds EDIT, not MANAGE
        assert service.returncode == 2 and "vlgate does not hold MANAGE on the registered model stacked" in service.stderr
        claimed = vlgate_as(mallory, "approve", "stacked", "1", "--reason", "ship it", "--by", "alice")  # nobody signs as another
        assert claimed.returncode == 2 and "the signer is the MLflow user of the credentials (mallory)" in claimed.stderr
        readonly = state.credentials().readonly
        looking = vlgate_as(env | {"MLFLOW_TRACKING_USERNAME": readonly.username, "MLFLOW_TRACKING_PASSWORD": readonly.password.get_secret_value()}, "approve", "stacked", "1", "--reason", "ship it")
        assert looking.returncode == 2 and "vlgate-readonly does not hold MANAGE" in looking.stderr and "the refusal is not recorded" in looking.stderr  # it may write nothing
        refused = vlgate_as(mallory, "approve", "stacked", "1", "--reason", "ship it")
        assert refused.returncode == 2 and "mallory does not hold MANAGE on the registered model stacked" in refused.stderr
        history = tracking.decision_history(client, run_1)
        assert [(r.kind, r.outcome, r.judged_by.user, r.judged_by.verified) for r in history[1:]] == [
            (DecisionKind.REFUSED_SIGN_OFF, Outcome.AWAITING_APPROVAL, "vlgate", True), (DecisionKind.REFUSED_SIGN_OFF, Outcome.AWAITING_APPROVAL, "mallory", True),
        ]  # fmt: skip
        assert by_version()["1"]["state_name"] == "Suspended" and tracking.champion_version(client, "stacked") is None  # nothing resumed or moved

        approved = vlgate_as(alice, "approve", "stacked", "1", "--reason", "ship it", "--json")
        assert approved.returncode == 0, approved.stderr
        answer = json.loads(approved.stdout)
        assert (answer["kind"], answer["outcome"], answer["judged_by"]["user"], answer["judged_by"]["verified"], answer["sequence"]) == ("approval", "promoted", "alice", True, 4)
        assert answer["judged_by"]["request_id"] == f"{runs['1']['id']}/sign-off-1"  # the answer to that suspension
        assert tracking.champion_version(client, "stacked") == "1"

        rejected = vlgate_as(alice, "reject", "stacked", "2", "--reason", "one is enough", "--json")
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


@stack_test
def test_a_webhook_secret_rotated_in_vlgate_yaml_takes_effect_at_restart(auth_stack, monkeypatch):
    from mlflow.store.model_registry.rest_store import RestStore
    from mlflow.utils.rest_utils import MlflowHostCreds

    from vlgate.registry_hooks.webhook import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signature

    stack, state, home = auth_stack
    folder = Path(state.folder)
    old = (folder / "webhook-secret").read_text().strip()
    config = yaml.safe_load((home / "vlgate.yaml").read_text())

    def delivery(secret: str) -> int:
        body = json.dumps({"entity": "model_version", "action": "created", "data": {"name": "not-configured", "version": "1"}}).encode()
        delivery_id, timestamp = f"rotation-{time.time_ns()}", str(int(time.time()))
        headers = {SIGNATURE_HEADER: signature(secret, delivery_id, timestamp, body), TIMESTAMP_HEADER: timestamp, DELIVERY_HEADER: delivery_id}
        return httpx.post(state.webhook_url, content=body, headers=headers, timeout=30).status_code

    assert delivery(old) == 200
    new = "rotated-" + os.urandom(16).hex()
    monkeypatch.setenv("VLGATE_ROTATED_WEBHOOK_SECRET", new)
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config | {"webhook": config["webhook"] | {"secret_env": "VLGATE_ROTATED_WEBHOOK_SECRET"}}))
    stack.restart("serve")
    assert delivery(old) == 401  # the leaked secret signs nothing any more
    assert delivery(new) == 200
    serve = next(p for p in stack.read_state().processes if p.name == "serve")
    assert serve.env["VLGATE_ROTATED_WEBHOOK_SECRET"] == new and "VLGATE_WEBHOOK_SECRET" not in serve.env
    # and MLflow signs with the new secret: its own test delivery, sent as MLflow sends every one, is accepted
    admin = accounts(state).admin
    store = RestStore(lambda: MlflowHostCreds(state.mlflow_url, username=admin.username, password=admin.password.get_secret_value()))
    (hook,) = [h for h in store.list_webhooks(max_results=100) if h.name == "vlgate"]
    result = store.test_webhook(hook.webhook_id)
    assert result.success and result.response_status == 200, (result.response_status, result.response_body, result.error_message)
    # a secret_env that names nothing is refused before serve is stopped
    monkeypatch.delenv("VLGATE_ROTATED_WEBHOOK_SECRET")
    with pytest.raises(Exception, match="VLGATE_ROTATED_WEBHOOK_SECRET, which is not set"):
        stack.restart("serve")
    assert delivery(new) == 200
