"""The service against a real MLflow tracking server process on 127.0.0.1 backed by
PostgreSQL (ARCHITECTURE.md, what the service promises): webhooks delivered by the server itself, the poller beside them,
vlgate's claims in PostgreSQL too.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). `.ci/run` starts it and
sets VLGATE_REQUIRE_POSTGRES=1, so there a missing server fails instead of skipping."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from test_registry_hooks import migrated_schema_is_the_stores

from vlgate import tag_keys, tracking
from vlgate.flows.validation import validate_model_version
from vlgate.registry_hooks.claims import ClaimStore
from vlgate.registry_hooks.dispatch import Dispatcher, Poller
from vlgate.versions import VersionRef

pytestmark = [pytest.mark.world, pytest.mark.service, pytest.mark.slow]

PG = "postgresql+psycopg2://postgres@127.0.0.1:5432"  # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3


def _postgres_up() -> bool:
    try:
        import psycopg2

        psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=3).close()
        return True
    except Exception:
        return False


if not _postgres_up():
    if os.environ.get("VLGATE_REQUIRE_POSTGRES") == "1":
        raise RuntimeError("PostgreSQL is not reachable on 127.0.0.1:5432, and VLGATE_REQUIRE_POSTGRES=1")
    pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (set VLGATE_REQUIRE_POSTGRES=1 to fail instead)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_http(url: str, seconds: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {seconds} s")


class MlflowServer:
    """``mlflow server`` on a fresh PostgreSQL database, with webhooks allowed to loopback."""

    def __init__(self, folder: Path, database: str):
        self.folder, self.database = folder, database
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        env = os.environ | {
            "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
            "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
            "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": "HJd6QzvT3dxHfGf2Q0f3w3yqv0l8-gCR0k4mTtTq0aU=",
            "MLFLOW_WEBHOOK_CACHE_TTL": "1",
        }
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"{PG}/{self.database}",
            "--artifacts-destination", (self.folder / "artifacts").as_uri(),
            "--serve-artifacts", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]  # fmt: skip
        log = open(self.folder / f"mlflow-server-{self.port}.log", "a")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(f"{self.url}/health")

    def stop(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, 9)
            self.process.wait()
            self.process = None


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    import psycopg2

    database = f"vlgate_test_{secrets.token_hex(4)}"
    admin = psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {database}")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"), database)
    server.start()
    yield server
    server.stop()
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    admin.close()


@pytest.fixture
def service(mlflow_server, tmp_path, monkeypatch, tiny_world):
    """VLGATE_HOME for one test, pointed at the server; claims in the same PostgreSQL database."""
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("VLGATE_STATE_DB", f"{PG}/{mlflow_server.database}")
    return tmp_path


def test_processes_opening_a_fresh_state_database_at_once_all_succeed(open_stores_at_once):
    """As on SQLite (test_registry_hooks): several processes creating vlgate's tables in a
    new PostgreSQL database at once; without the advisory lock some got "relation already exists"."""
    import psycopg2

    database = f"vlgate_state_{secrets.token_hex(4)}"
    admin = psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {database}")
    try:
        assert open_stores_at_once(f"{PG}/{database}") == ["ok"] * 6
        claims = ClaimStore(f"{PG}/{database}")
        migrated_schema_is_the_stores(claims)  # the migrations build the same schema on PostgreSQL
        assert claims.claim(VersionRef(model="m", version="1"), via="poller") is True and claims.claim(VersionRef(model="m", version="1"), via="webhook") is False
        claims.engine.dispose()
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.close()


def start_receiver(dispatcher: Dispatcher, secret: str):
    import uvicorn

    from vlgate.registry_hooks.webhook import PATH, create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(dispatcher, secret), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    _wait_http(f"http://127.0.0.1:{port}/healthz", 30)
    return server, f"http://127.0.0.1:{port}{PATH}"


def configure(home: Path, name: str, suite: Path, policy: dict) -> None:
    (home / "gate.yaml").write_text(yaml.safe_dump(policy))
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"models": {name: {"suite": str(suite), "policy": "gate.yaml"}}}))


def wait_until(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} after {seconds} s")


def test_webhook_from_a_real_server_validates_and_moves_the_champion(service, default_world):
    world, _ = default_world  # a trained version: usable output, promoted by the lenient policy
    configure(service, "pg-model", world / "suite.yaml", {"required": ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200})
    secret = secrets.token_hex(16)
    claims = ClaimStore.for_home(service)
    dispatcher = Dispatcher(claims, start=validate_model_version)
    receiver, url = start_receiver(dispatcher, secret)
    client = tracking.connect(service)
    from vlgate.registry_hooks.webhook import ensure_webhook

    hook = ensure_webhook(client, url, secret)
    assert ensure_webhook(client, url, secret) == hook  # registering again reuses it
    try:
        version = tracking.register_checkpoint(client, "pg-model", world / "checkpoints" / "vlm-steps10000", home=service)
        wait_until(lambda: claims.get(VersionRef(model="pg-model", version=str(version.version))) is not None, 60, "no webhook delivery")
        assert claims.get(VersionRef(model="pg-model", version=str(version.version))).claimed_via == "webhook"
        wait_until(lambda: claims.get(VersionRef(model="pg-model", version=str(version.version))).state in ("done", "failed"), 600, "validation did not finish")
        dispatcher.wait()
    finally:
        receiver.should_exit = True
        client.delete_webhook(hook)
    fresh = tracking.connect(service)  # what any MlflowClient on the server sees
    mv = fresh.get_model_version("pg-model", str(version.version))
    assert mv.tags[tag_keys.DECISION] == "promoted", mv.tags.get(tag_keys.REASONS)
    assert tracking.champion_version(fresh, "pg-model") == str(version.version)
    metrics = fresh.get_run(mv.tags[tag_keys.VALIDATION_RUN]).data.metrics
    written = (service / "validations" / "pg-model" / str(version.version) / "lcm-mc" / "metrics.json").read_text()
    import json

    assert metrics["lcm-mc/lcm"] == pytest.approx(json.loads(written)["lcm"], abs=1e-12)
    assert {"lcm-nb/lcm", "genception/gc_at_3", "decc/reliable_rate/multi", "vlind/s_ck"} <= set(metrics)
    check_the_ui_view(tracking.connect(service).tracking_uri, "pg-model", str(version.version))


def check_the_ui_view(url: str, name: str, version: str) -> None:
    """What MLflow's UI reads, through the same REST API: the version links its validation
    run; the experiment opens on its runs; headline metrics at top level, breakdowns as
    tables; params worth comparing on (digests are tags)."""
    import httpx

    api = f"{url}/api/2.0/mlflow"
    model_version = httpx.get(f"{api}/model-versions/get", params={"name": name, "version": version}).json()["model_version"]
    tags = {tag["key"]: tag["value"] for tag in model_version.get("tags", [])}
    run_id = tags[tag_keys.VALIDATION_RUN]
    run = httpx.get(f"{api}/runs/get", params={"run_id": run_id}).json()["run"]
    experiment_id = run["info"]["experiment_id"]
    assert f"{tracking.VALIDATION_LINK}[{run_id}](#/experiments/{experiment_id}/runs/{run_id})" in model_version["description"]
    experiment = httpx.get(f"{api}/experiments/get", params={"experiment_id": experiment_id}).json()["experiment"]
    assert {tag["key"]: tag["value"] for tag in experiment["tags"]}[tag_keys.EXPERIMENT_KIND] == "custom_model_development"
    metric_names = {metric["key"] for metric in run["data"]["metrics"]}
    assert {"lcm-mc/lcm", "lcm-mc/acc", "lcm-nb/lcm", "vlind/s_ck", "genception/gc_at_3", "decc/reliable_rate/multi"} <= metric_names
    assert not [m for m in metric_names if "/by_" in m] and len(metric_names) < 120
    params = {param["key"]: param["value"] for param in run["data"]["params"]}
    protocols = {f"protocol.{name}" for name in params["evaluators"].split(",")}
    assert set(params) == {"suite", "backend", "evaluators", "policy", "model_uri"} | protocols and params["backend"] == "transformers"
    assert {params[name] for name in protocols} == {"vlgate-1"}  # the world's suite runs every evaluator under vlgate's prompts
    run_tags = {tag["key"]: tag["value"] for tag in run["data"]["tags"]}
    assert all(len(run_tags[f"vlgate.fingerprints.{e}"]) == 16 for e in params["evaluators"].split(","))
    listed = httpx.get(f"{api}/artifacts/list", params={"run_id": run_id, "path": "tables"}).json()["files"]
    tables = {Path(entry["path"]).name for entry in listed}
    assert {"lcm-mc.json", "decc.json"} <= tables and any(".by_" in table for table in tables), tables


#: versions created at once: more than the dispatcher's two workers take at a time, several times over
VERSIONS = 12


def test_twelve_concurrent_versions_webhooks_and_poller_each_validated_exactly_once(service, tiny_world, mlflow_server):
    """12 versions created at once; the server's webhooks and a fast poller race for every
    one; the MLflow server is also killed and restarted while flows run."""
    world, _ = tiny_world
    data = world / "data" / "mc"
    suite = service / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(data), "limit": 4, "protocol": "vlgate"}}}))
    configure(service, "many", suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "regressions": {"lcm-mc/lcm": {"max_drop": 1.0}}, "resamples": 200})
    from vlgate.registry_hooks.webhook import ensure_webhook

    secret = secrets.token_hex(16)
    claims = ClaimStore.for_home(service)
    dispatcher = Dispatcher(claims, workers=2, start=validate_model_version, configured=lambda name: name == "many")
    receiver, url = start_receiver(dispatcher, secret)
    client = tracking.connect(service)
    hook = ensure_webhook(client, url, secret)
    poller = Poller(service, dispatcher, interval=0.3).start()
    try:
        client.create_registered_model("many")
        template = tracking.register_checkpoint(client, "many-template", world / "checkpoints" / "vlm-steps3", home=service)
        with ThreadPoolExecutor(max_workers=10) as pool:
            versions = list(pool.map(lambda _: client.create_model_version("many", template.source, run_id=template.run_id, model_id=tracking.version_logged_model(template)), range(VERSIONS)))
        assert sorted(int(v.version) for v in versions) == list(range(1, VERSIONS + 1))
        wait_until(lambda: len(claims.all("many")) == VERSIONS, 120, "not every version was claimed")
        # the tracking server goes away for a while during the runs; MLflow's client retries
        mlflow_server.stop()
        time.sleep(3)
        mlflow_server.start()
        wait_until(lambda: all(c.state in ("done", "failed") for c in claims.all("many")), 900, "validations did not finish")
        dispatcher.wait()
    finally:
        poller.stop()
        receiver.should_exit = True
        tracking.connect(service).delete_webhook(hook)
    all_claims = claims.all("many")
    assert len(all_claims) == VERSIONS and {c.attempts for c in all_claims} == {1}
    assert {c.state for c in all_claims} == {"done"}, [c.detail for c in all_claims if c.state != "done"]
    assert {c.claimed_via for c in all_claims} <= {"webhook", "poller"}
    fresh = tracking.connect(service)
    experiment = fresh.get_experiment_by_name("vlgate/many").experiment_id
    runs = fresh.search_runs([experiment], "tags.`vlgate.kind` = 'validation'", max_results=100)
    assert sorted(int(r.data.tags["vlgate.version"]) for r in runs) == list(range(1, VERSIONS + 1))  # exactly one run per version
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(fresh.get_model_version("many", str(v)).tags.get(tag_keys.DECISION) == "promoted" for v in range(1, VERSIONS + 1))


def test_an_outage_longer_than_the_clients_retries_is_retried_until_the_version_is_validated_once(service, tiny_world, mlflow_server, monkeypatch):
    """MLflow is down when the claimed version's flow starts, for longer than its client's
    retries and the flow's registry wait: the claim is deferred with a back-off (not failed,
    no verdict), and once the server is back the poller's take-over validates it, once."""
    world, _ = tiny_world
    suite = service / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    configure(service, "outage", suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200})
    config = yaml.safe_load((service / "vlgate.yaml").read_text()) | {"registry_wait_s": 1, "retry_after_s": 1}
    (service / "vlgate.yaml").write_text(yaml.safe_dump(config))
    tracking.register_checkpoint(tracking.connect(service), "outage", world / "checkpoints" / "vlm-steps3", home=service)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the client gives up at once: the outage outlasts it
    claims = ClaimStore.for_home(service)
    dispatcher = Dispatcher(claims, start=validate_model_version, configured=lambda name: name == "outage")
    mlflow_server.stop()
    try:
        assert dispatcher.offer("outage", "1", via="webhook")
        dispatcher.wait()
        deferred = claims.get(VersionRef(model="outage", version="1"))
        assert deferred.state == "claimed" and deferred.detail.startswith("retrying after 1 s (attempt 1): MlflowException")
        time.sleep(1.5)
        assert dispatcher.recover() == [("outage", "1")]  # still down: deferred again, for twice as long
        dispatcher.wait()
        again = claims.get(VersionRef(model="outage", version="1"))
        assert again.state == "claimed" and again.attempts == 2 and again.detail.startswith("retrying after 2 s (attempt 2)")
    finally:
        mlflow_server.start()
    wait_until(lambda: bool(dispatcher.recover()) or claims.get(VersionRef(model="outage", version="1")).state == "done", 60, "the deferred claim was not taken over")
    dispatcher.wait()
    dispatcher.close()
    done = claims.get(VersionRef(model="outage", version="1"))
    assert done.state == "done" and done.attempts == 3, done.detail
    fresh = tracking.connect(service)
    runs = fresh.search_runs([fresh.get_experiment_by_name("vlgate/outage").experiment_id], "tags.`vlgate.kind` = 'validation'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # validated exactly once
    assert fresh.get_model_version("outage", "1").tags.get(tag_keys.DECISION) == "promoted"
