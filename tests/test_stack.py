"""The real deployment's topology run for real on this machine (``vlgate stack``, cli/stack.py):
MLflow and a Prefect server on PostgreSQL, the deployments of infra/prefect.yaml on the work
pool ``vlgate-gpu``, process workers, and ``vlgate serve`` dispatching each new version to the
pool through MLflow's own webhook. The stacks run with authentication on (their default):
every call here authenticates as the stack's service account, as its processes do.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth), as test_service_postgres.py."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from test_service_postgres import _postgres_up

from vlgate import tag_keys
from vlgate.cli.processes import free_port, group_alive
from vlgate.cli.stack import LocalStack
from vlgate.cli.stack_state import StackState, database_names, stack_deployments
from vlgate.versions import VersionRef

pytestmark = [pytest.mark.world, pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(1200)]

POSTGRES = "postgresql://postgres@127.0.0.1:5432"
if not _postgres_up():  # pragma: no cover - test_service_postgres makes this a failure in CI
    pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432", allow_module_level=True)

#: the versions registered at once: four of the tiny world's checkpoints, two for each worker
CHECKPOINTS = ("vlm-steps0", "vlm-steps3", "vlm-language-prior", "vlm-answer-prior")
#: floors only: a decision that does not depend on which version was champion when it was
#: judged, so the stack's (two at a time, in whatever order they finish) and a sequential
#: `vlgate validate`'s are comparable version by version. The tiny world's versions score
#: lcm-mc/lcm 0.390 to 0.399 on its 8 items: this floor rejects the two least trained,
#: vlm-steps0 and vlm-steps3, and promotes the others.
POLICY = {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.395}, "resamples": 200}


def write_home(home: Path, world: Path, items: int = 8, batch_size: int = 8, data: Path | None = None, **service: object) -> None:
    """A home validating the model ``stacked`` on ``items`` lcm-mc items of the tiny world
    (or of ``data``); the poller looks rarely unless ``service`` says otherwise: every
    version reaches the service through MLflow's webhook."""
    home.mkdir(parents=True, exist_ok=True)
    evaluator = {"data": str(data or world / "data" / "mc"), "limit": items, "protocol": "vlgate"}
    suite = {"name": "smoke", "batch_size": batch_size, "evaluators": {"lcm-mc": evaluator}}
    (home / "suite.yaml").write_text(yaml.safe_dump(suite))
    (home / "gate.yaml").write_text(yaml.safe_dump(POLICY))
    config = {"models": {"stacked": {"suite": "suite.yaml", "policy": "gate.yaml"}}, "poll_interval_s": 600, "webhook": {"port": free_port()}} | service
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))


def logs_on_failure(state: StackState) -> None:
    """The end of every process's log, printed when a test fails (``down --purge`` removes them)."""
    for process in state.processes:
        path = Path(process.log)
        if path.is_file():
            print(f"==== {process.name} ({path})\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:]))


@contextlib.contextmanager
def showing_logs(state: StackState) -> Iterator[None]:
    try:
        yield
    except BaseException:
        logs_on_failure(state)
        raise


def prefect_headers(state: StackState) -> dict[str, str]:
    """What a Prefect client sends for the stack's auth string (none without authentication)."""
    auth_string = state.environment().get("PREFECT_API_AUTH_STRING")
    return {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()} if auth_string else {}


def as_service_account(patch: pytest.MonkeyPatch, state: StackState) -> None:
    """This process's MLflow calls authenticated as the stack's service account."""
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        if name in state.environment():
            patch.setenv(name, state.environment()[name])


def flow_runs(state: StackState) -> list[dict]:
    """The validation deployment's flow runs, as Prefect's API has them."""
    filter_ = {"deployments": {"name": {"any_": ["vlgate-validate"]}}, "limit": 200}
    response = httpx.post(f"{state.prefect_api}/flow_runs/filter", json=filter_, headers=prefect_headers(state), timeout=30)
    response.raise_for_status()
    return response.json()


def test_the_stack_file_deploys_infra_s_validation_and_a_drift_check_per_model(tmp_path):
    template = yaml.safe_load((Path(__file__).parents[1] / "infra" / "prefect.yaml").read_text())
    deployed = stack_deployments(template, {"b": "*/5 * * * *", "a": "0 3 * * *"}, tmp_path)
    names = [d["name"] for d in deployed["deployments"]]
    assert names == ["vlgate-validate", "vlgate-drift-a", "vlgate-drift-b"]
    validate, drift_a, _ = deployed["deployments"]
    assert validate == next(d for d in template["deployments"] if d["name"] == "vlgate-validate")
    assert drift_a["parameters"] == {"model_name": "a"} and drift_a["schedules"][0]["cron"] == "0 3 * * *" and drift_a["work_pool"] == {"name": "vlgate-gpu"}
    assert deployed["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": str(tmp_path)}}]
    assert [d["name"] for d in stack_deployments(template, {}, tmp_path)["deployments"]] == ["vlgate-validate"]
    names = database_names(tmp_path / "one")
    assert names != database_names(tmp_path / "two") and set(names) == {"mlflow", "prefect", "state", "auth"}


def test_versions_registered_at_once_each_run_once_on_a_worker_decide_as_validate_and_the_drift_cron_runs_once_a_slot(tiny_world, tmp_path, monkeypatch):
    """Four versions registered at once on two workers, while the drift deployment's cron
    (every minute) runs on the same pool: each version is validated once, by a worker, with
    the decision `vlgate validate` makes; each drift slot has one flow run, run by a worker,
    and each logs one drift check of the champion."""
    from mlflow import MlflowClient

    from vlgate import tracking
    from vlgate.registry_hooks.claims import ClaimStore

    world, _ = tiny_world
    home = tmp_path / "home"
    write_home(home, world)
    with_drift_cron(home, world, tmp_path)
    stack = LocalStack(tmp_path / "stack", home)
    state = stack.up(workers=2, postgres=POSTGRES)  # with authentication: every process, and this test, as the service account
    environment = state.environment()
    try:
        assert state.auth and environment["MLFLOW_TRACKING_USERNAME"] == "vlgate"
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        from vlgate.tracking import permissions

        assert permissions.authenticated_user() == "vlgate" and not permissions.current_user().is_admin
        client = MlflowClient(state.mlflow_url, state.mlflow_url)
        client.create_registered_model("stacked")
        registered = {name: tracking.register_checkpoint(client, f"source-{name}", world / "checkpoints" / name, home=home) for name in CHECKPOINTS}
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(registered)) as pool:  # registrations at once, as a sweep makes them
            created = dict(zip(registered, pool.map(lambda source: client.create_model_version("stacked", source.source, run_id=source.run_id, model_id=tracking.version_logged_model(source)), registered.values())))
        checkpoint_of = {str(version.version): name for name, version in created.items()}
        claims = ClaimStore(state.environment()["VLGATE_STATE_DB"])
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not (len(claims.all("stacked")) == len(CHECKPOINTS) and all(c.state in ("done", "failed") for c in claims.all("stacked"))):
            time.sleep(2)
        elapsed = time.monotonic() - started
        all_claims = claims.all("stacked")
        assert len(all_claims) == len(CHECKPOINTS) and {c.state for c in all_claims} == {"done"}, [(c.version, c.state, c.detail) for c in all_claims]
        assert {c.claimed_via for c in all_claims} == {"webhook"} and {c.attempts for c in all_claims} == {1}  # MLflow's webhook, each once
        runs = {r["parameters"]["version"]: r for r in flow_runs(state)}
        versions = [str(n) for n in range(1, len(CHECKPOINTS) + 1)]
        assert len(flow_runs(state)) == len(CHECKPOINTS) and sorted(runs, key=int) == versions  # one flow run per version
        assert {r["state_type"] for r in runs.values()} == {"COMPLETED"} and {r["work_pool_name"] for r in runs.values()} == {"vlgate-gpu"}
        experiment = client.get_experiment_by_name("vlgate/stacked").experiment_id
        validation_runs = client.search_runs([experiment], tag_keys.runs_of_kind(tag_keys.RunKind.VALIDATION), max_results=50)
        assert sorted((r.data.tags[tag_keys.VERSION] for r in validation_runs), key=int) == versions  # one MLflow run each
        serve = next(p.pid for p in state.processes if p.name == "serve")
        by_worker: dict[str, list[tuple[datetime, datetime]]] = {}
        for run in validation_runs:
            flow_run = runs[run.data.tags[tag_keys.VERSION]]
            assert run.data.tags[tag_keys.FLOW_RUN] == flow_run["id"]
            worker, where = run.data.tags[tag_keys.EXECUTED_BY].split(" on ")
            pid = int(where.rsplit(" pid ", 1)[1])
            # the flow ran in the process the worker started for it, not in vlgate serve
            assert pid == int(str(flow_run["infrastructure_pid"]).rsplit(":", 1)[-1]) and pid != serve
            by_worker.setdefault(worker, []).append((datetime.fromisoformat(flow_run["start_time"]), datetime.fromisoformat(flow_run["end_time"])))
        assert set(by_worker) == {"vlgate-gpu-0", "vlgate-gpu-1"}, by_worker  # both workers took flows
        for intervals in by_worker.values():  # and each ran one at a time
            intervals.sort()
            assert all(earlier[1] <= later[0] for earlier, later in zip(intervals, intervals[1:])), intervals
        decisions = {checkpoint_of[v]: client.get_model_version("stacked", v).tags[tag_keys.DECISION] for v in checkpoint_of}
        # the service account moved the alias: the champion is a promoted version
        assert decisions[checkpoint_of[client.get_model_version_by_alias("stacked", "champion").version]] == "promoted"
        print(f"{len(CHECKPOINTS)} versions decided by 2 workers in {elapsed:.0f} s: {decisions}")
        promoted = {v for v, name in checkpoint_of.items() if decisions[name] == "promoted"}
        drift_checks_on_the_pool(Stacked(stack, state, world, home), promoted)
    except BaseException:
        logs_on_failure(state)
        raise
    finally:
        stack.down(purge=True)
    assert not (tmp_path / "stack").exists()
    # the same versions validated one by one on the embedded default, by the flow `vlgate validate` runs
    for name in environment:
        monkeypatch.delenv(name, raising=False)
    alone = tmp_path / "alone"
    write_home(alone, world)
    monkeypatch.setenv("VLGATE_HOME", str(alone))
    from vlgate.flows.validation import validate_model_version

    embedded = tracking.connect(alone)
    for name in CHECKPOINTS:
        tracking.register_checkpoint(embedded, "stacked", world / "checkpoints" / name, home=alone)
    for version in range(1, len(CHECKPOINTS) + 1):
        validate_model_version("stacked", str(version))
    assert {name: embedded.get_model_version("stacked", str(v)).tags[tag_keys.DECISION] for v, name in enumerate(CHECKPOINTS, 1)} == decisions
    assert [name for name in CHECKPOINTS if decisions[name] == "rejected"] == ["vlm-steps0", "vlm-steps3"]  # the floor tells the versions apart


def test_down_stops_every_process_and_a_second_up_is_refused_while_one_runs(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"webhook": {"port": free_port()}}))
    stack = LocalStack(tmp_path / "stack", home)
    state = stack.up(workers=1, postgres=None, auth=False)  # a throw-away cluster made with initdb; --no-auth
    try:
        assert state.own_cluster is not None and state.postgres != POSTGRES
        assert {p.name for p in state.processes} == {"mlflow", "prefect-server", "worker-0", "serve"}
        with pytest.raises(Exception, match="already up"):
            LocalStack(tmp_path / "stack", home).up(workers=1, postgres=None)
    finally:
        stack.down(purge=True)
    assert not any(group_alive(process.pid) for process in state.processes)
    import psycopg2

    with pytest.raises(psycopg2.OperationalError):  # the throw-away cluster is gone too
        psycopg2.connect(f"{state.postgres}/postgres", connect_timeout=3)


# --- crashed runs ---------------------------------------------------------------------------------

#: the fault stack's service settings: a short lease and a quick poller, so that a test sees
#: recovery within seconds (the defaults, 90 s and 30 s, bound it at 2 minutes)
#: the versions share their weights: without the record cache each computes its records, and can be killed doing it
FAULT_SERVICE = {"lease_s": 30, "poll_interval_s": 3, "record_cache": {"kind": "off"}}
LONG_ITEMS = 240


@pytest.fixture(scope="module")
def fault_stack(tiny_world, tmp_path_factory):
    world, _ = tiny_world
    root = tmp_path_factory.mktemp("fault-stack")
    home = root / "home"
    # the world's 48 items five times over, one a batch: a validation of about half a minute, long
    # enough to be interrupted while it scores
    data = root / "mc-long"
    data.mkdir()
    (data / "images").symlink_to(world / "data" / "mc" / "images")
    rows = [json.loads(line) for line in (world / "data" / "mc" / "items.jsonl").read_text().splitlines()]
    (data / "items.jsonl").write_text("".join(json.dumps(row | {"id": f"{row['id']}-{n}"}) + "\n" for n in range(5) for row in rows))
    write_home(home, world, items=LONG_ITEMS, batch_size=1, data=data, **FAULT_SERVICE)
    stack = LocalStack(root / "stack", home)
    state = stack.up(workers=2, postgres=POSTGRES)
    from mlflow import MlflowClient

    with pytest.MonkeyPatch.context() as patch:
        as_service_account(patch, state)
        MlflowClient(state.mlflow_url, state.mlflow_url).create_registered_model("stacked")
        yield stack, state, world, home
    stack.down(purge=True)


class Stacked:
    """The test's side of a stack: registering, and reading claims, flow runs and runs."""

    def __init__(self, stack: LocalStack, state: StackState, world: Path, home: Path):
        from mlflow import MlflowClient

        from vlgate.registry_hooks.claims import ClaimStore

        self.stack, self.state, self.world, self.home = stack, state, world, home
        self.client = MlflowClient(state.mlflow_url, state.mlflow_url)
        self.claims = ClaimStore(state.environment()["VLGATE_STATE_DB"])

    def register(self, checkpoint: str) -> str:
        """A new version of ``stacked`` with the checkpoint's weights (uploaded once)."""
        from vlgate import tracking

        with pytest.MonkeyPatch.context() as patch:
            for name, value in self.state.environment().items():
                patch.setenv(name, value)
            source = tracking.register_checkpoint(self.client, f"source-{checkpoint}", self.world / "checkpoints" / checkpoint, home=self.home)
        return str(self.client.create_model_version("stacked", source.source, run_id=source.run_id, model_id=tracking.version_logged_model(source)).version)

    def records(self, version: str) -> int:
        return sum(len(path.read_text().splitlines()) for path in (self.home / "validations" / "stacked" / version).rglob("*.jsonl") if path.parent.name != "expectations")

    def flow_runs(self, version: str) -> list[dict]:
        return sorted((r for r in flow_runs(self.state) if r["parameters"]["version"] == version), key=lambda r: r["created"])

    def wait(self, predicate, seconds: float, what: str):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            time.sleep(0.5)
        raise AssertionError(f"{what} after {seconds} s; claims: {[(c.version, c.state, c.attempts, c.detail) for c in self.claims.all('stacked')]}")

    def running_flow(self, version: str) -> dict:
        """The version's flow run once its evaluator has written a few records."""
        self.wait(lambda: self.records(version) >= 20, 300, f"v{version} wrote no records")
        return next(r for r in self.flow_runs(version) if r["state_type"] == "RUNNING")

    def decided(self, version: str) -> None:
        self.wait(lambda: (c := self.claims.get(VersionRef(model="stacked", version=version))) is not None and c.state in ("done", "failed"), 600, f"v{version} was not decided")

    def finished_flow_runs(self, version: str) -> list[dict]:
        """The version's flow runs once the last has reported its end to Prefect (a flow
        finishes its claim before its final state reaches the server)."""
        def ended() -> list[dict] | None:
            runs = self.flow_runs(version)
            return runs if runs and runs[-1]["state_type"] in ("COMPLETED", "FAILED", "CRASHED") else None

        return self.wait(ended, 120, f"v{version}'s last flow run did not end")

    def validation_runs(self, version: str) -> list:
        experiment = self.client.get_experiment_by_name("vlgate/stacked").experiment_id
        return self.client.search_runs([experiment], f"tags.`{tag_keys.VERSION}` = '{version}' and {tag_keys.runs_of_kind(tag_keys.RunKind.VALIDATION)}")

    def metrics(self, version: str) -> dict[str, float]:
        (run,) = self.validation_runs(version)
        return {k: v for k, v in run.data.metrics.items() if k.startswith("lcm-mc/")}


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_killed_flow_or_worker_is_validated_again_once_resuming_its_records_with_one_decision(fault_stack):
    """SIGKILL of the flow's process (the worker sees it die: Prefect marks the run Crashed)
    and SIGKILL of a worker with its flow (nobody tells Prefect: the lease runs out): each
    version is sent to the pool again within the bound, once, resumes from the records it
    wrote, logs into its one MLflow run and is decided once, with the metrics of an
    uninterrupted validation of the same checkpoint."""
    stacked = Stacked(*fault_stack)
    with showing_logs(stacked.state):
        killed_flow_and_worker(stacked)


def killed_flow_and_worker(stacked: Stacked) -> None:
    import signal

    uninterrupted = stacked.register("vlm-steps3")
    stacked.decided(uninterrupted)

    # 1. the flow's process dies
    version = stacked.register("vlm-steps3")
    flow_run = stacked.running_flow(version)
    run_id = stacked.claims.get(VersionRef(model="stacked", version=version)).run_id
    os.kill(int(str(flow_run["infrastructure_pid"]).rsplit(":", 1)[-1]), signal.SIGKILL)
    killed = time.monotonic()
    stacked.wait(lambda: len(stacked.flow_runs(version)) == 2, 120, "no second flow run")
    sent_again = time.monotonic() - killed
    stacked.decided(version)
    claim = stacked.claims.get(VersionRef(model="stacked", version=version))
    assert (claim.state, claim.attempts, claim.crashes, claim.run_id) == ("done", 2, 1, run_id)
    first, second = stacked.finished_flow_runs(version)
    assert (first["state_type"], second["state_type"]) == ("CRASHED", "COMPLETED")
    assert sent_again < FAULT_SERVICE["poll_interval_s"] + 30  # Crashed is seen at the next poll
    (run,) = stacked.validation_runs(version)  # the same MLflow run, decided once
    assert run.info.run_id == run_id and run.data.tags[tag_keys.FLOW_RUN] == second["id"] and tag_keys.DECISION in run.data.tags
    resumed = json.loads(Path(stacked.client.download_artifacts(run_id, "evaluators/lcm-mc/run.json", str(stacked.home / "dl-1"))).read_text())["entry"]
    assert resumed["reused"] >= 20 and resumed["reused"] + resumed["computed"] == LONG_ITEMS  # the records written before the kill were kept
    assert stacked.metrics(version) == stacked.metrics(uninterrupted)

    # 2. a worker dies with its flow: Prefect still has the run Running; the lease runs out
    version = stacked.register("vlm-steps3")
    flow_run = stacked.running_flow(version)
    flow_pid = int(str(flow_run["infrastructure_pid"]).rsplit(":", 1)[-1])
    worker = parent_pid(flow_pid)
    (lost,) = [p for p in stacked.state.processes if p.pid == worker]
    os.killpg(worker, signal.SIGKILL)  # the worker's process group
    with contextlib.suppress(ProcessLookupError):  # and its flow, wherever that runs
        os.kill(flow_pid, signal.SIGKILL)
    killed = time.monotonic()
    stacked.wait(lambda: len(stacked.flow_runs(version)) == 2, 120, "no second flow run after the worker died")
    sent_again = time.monotonic() - killed
    stacked.decided(version)
    claim = stacked.claims.get(VersionRef(model="stacked", version=version))
    assert (claim.state, claim.attempts, claim.crashes) == ("done", 2, 1)
    first, second = stacked.finished_flow_runs(version)
    # Prefect's server may find the lost run itself (its worker went quiet: Crashed); else the
    # lease runs out and vlgate cancels it
    assert first["state_type"] in ("CRASHED", "CANCELLING", "CANCELLED") and second["state_type"] == "COMPLETED", first["state_type"]
    assert sent_again < FAULT_SERVICE["lease_s"] + FAULT_SERVICE["poll_interval_s"] + 30
    assert len(stacked.validation_runs(version)) == 1 and stacked.metrics(version) == stacked.metrics(uninterrupted)
    stacked.stack.restart(lost.name)  # the pool has both its workers again
    print(f"sent again {sent_again:.0f} s after the worker died; Prefect has the lost run {first['state_type']} ({first['state']['message']})")


def test_the_servers_restarted_mid_flow_leave_one_validation_and_one_decision(fault_stack):
    """Prefect's server, then MLflow's, restarted while one flow runs."""
    stacked = Stacked(*fault_stack)
    with showing_logs(stacked.state):
        restarted_mid_flow(stacked, ("prefect-server", "mlflow"))


def restarted_mid_flow(stacked: Stacked, servers: tuple[str, ...]) -> None:
    version = stacked.register("vlm-steps3")
    stacked.running_flow(version)
    for server in servers:
        stacked.stack.restart(server)
    stacked.decided(version)
    claim = stacked.claims.get(VersionRef(model="stacked", version=version))
    assert claim.state == "done", claim.detail
    (run,) = stacked.validation_runs(version)
    assert run.info.run_id == claim.run_id and stacked.client.get_model_version("stacked", version).tags[tag_keys.DECISION] == claim.detail
    assert len([r for r in stacked.finished_flow_runs(version) if r["state_type"] == "COMPLETED"]) == 1


# --- drift on the pool -----------------------------------------------------------------------------


def drift_suite(folder: Path, world: Path, seed: int) -> Path:
    """A drift suite of lcm-nb alone on an unlabelled batch of 16 yes/no items (the world's
    full drift suite runs GenCeption and DeCC too: minutes a check on two cores)."""
    from vlgate.evaluators.world.datasets import build_unlabelled_batch

    build_unlabelled_batch(folder, world / "checkpoints", n=16, seed=seed)
    suite = {"name": folder.name, "batch_size": 16, "evaluators": {"lcm-nb": {"data": str(folder / "yesno"), "pair_seed": seed, "protocol": "vlgate"}}}
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    return folder / "suite.yaml"


def with_drift_cron(home: Path, world: Path, folder: Path) -> None:
    """The model's drift check on the stack's pool every minute."""
    config = yaml.safe_load((home / "vlgate.yaml").read_text())
    reference, batch = drift_suite(folder / "reference", world, 1), drift_suite(folder / "incoming", world, 2)
    config["models"]["stacked"]["drift"] = {"reference": str(reference), "batch": str(batch), "cron": "* * * * *"}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))


def drift_checks_on_the_pool(stacked: Stacked, promoted: set[str]) -> None:
    """Once a champion is in place, the cron's next slot checks it: every slot scheduled has
    one flow run, however many workers poll; each logged check names a finished flow run on
    the pool, run in a worker's process (not vlgate serve), one check a flow run."""
    state = stacked.state

    def drift_runs() -> list[dict]:
        filter_ = {"deployments": {"name": {"any_": ["vlgate-drift-stacked"]}}, "limit": 200}
        return httpx.post(f"{state.prefect_api}/flow_runs/filter", json=filter_, headers=prefect_headers(state), timeout=30).json()

    def checked() -> list:
        experiment = stacked.client.get_experiment_by_name("vlgate/stacked").experiment_id
        return stacked.client.search_runs([experiment], tag_keys.runs_of_kind(tag_keys.RunKind.DRIFT))

    def finished_checks() -> tuple[list, list[dict]] | None:
        """The checks and the flow runs once a check is logged and every logged check's flow
        run has completed (a check is logged before its flow run ends)."""
        checks, runs = checked(), drift_runs()
        state_of = {r["id"]: r["state_type"] for r in runs}
        finished = [c for c in checks if state_of.get(c.data.tags[tag_keys.FLOW_RUN]) == "COMPLETED"]
        return (checks, runs) if finished and len(finished) == len(checks) else None

    checks, runs = stacked.wait(finished_checks, 300, "no finished drift check of the champion")
    slots = [r["expected_start_time"] for r in runs]
    assert len(slots) == len(set(slots)), slots  # one flow run a slot, however many workers poll
    assert all(datetime.fromisoformat(slot).second == 0 for slot in slots)  # on the cron's minutes
    finished = {r["id"]: r for r in runs if r["state_type"] == "COMPLETED"}
    assert not [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")], [(r["state_type"], r["state"]["message"]) for r in runs]
    serve = next(p.pid for p in state.processes if p.name == "serve")
    for run in checks:  # each check names a finished flow run on the pool, run in a worker's process
        flow_run = finished[run.data.tags[tag_keys.FLOW_RUN]]
        worker, where = run.data.tags[tag_keys.EXECUTED_BY].split(" on ")
        pid = int(where.rsplit(" pid ", 1)[1])
        assert worker.startswith("vlgate-gpu-") and flow_run["work_pool_name"] == "vlgate-gpu" and pid != serve
        assert pid == int(str(flow_run["infrastructure_pid"]).rsplit(":", 1)[-1])
        assert run.data.tags[tag_keys.VERSION] in promoted and run.data.tags[tag_keys.DRIFT] in ("true", "false")  # a champion of its time
    assert len({run.data.tags[tag_keys.FLOW_RUN] for run in checks}) == len(checks)  # one check a flow run
    print(f"{len(runs)} drift slots scheduled, {len(finished)} run, {len(checks)} champion checks")
