"""The real deployment's topology on one machine, without Docker (``vlgate stack up|down``):
what ``infra/compose.yaml`` runs, as processes on 127.0.0.1 under one folder.

- PostgreSQL: the machine's cluster (``--postgres URL``), or a throw-away cluster made with
  ``initdb`` in the stack's folder. Three databases on it, named after the folder: MLflow's
  backend store, the Prefect server's, and vlgate's state (claims, deliveries, locks).
- ``mlflow server`` on PostgreSQL with its artifacts in the folder, webhooks allowed to
  loopback;
- ``prefect server start`` on PostgreSQL (API, UI, scheduler);
- the work pool ``vlgate-gpu`` (process workers) and the deployments of ``infra/prefect.yaml``,
  deployed with ``prefect deploy``: ``vlgate-validate`` as it is there, and the drift
  deployment once per model that has a ``drift:`` entry in ``vlgate.yaml`` (its cron and
  model; none when no model has one), their code pulled from the installed vlgate;
- N process workers on the pool, ``--limit 1`` each: one validation per worker (per GPU) at
  a time, worker K seeing GPU K only (``CUDA_VISIBLE_DEVICES``);
- ``vlgate serve --no-drift`` with its webhook registered with the MLflow server and every
  new version sent to the pool (``VLGATE_VALIDATE_DEPLOYMENT``).

Every process runs in its own process group with its log in ``FOLDER/logs/``; what was
started is written to ``FOLDER/stack.json``, which ``down`` reads to stop it all (the
databases stay unless ``--purge``). The stack's settings for other shells (``vlgate
register``, ``vlgate status``) are in ``FOLDER/env``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from vlgate.cli.processes import StackError, alive, answers, free_port, run, stop_group, wait_until

if TYPE_CHECKING:
    from vlgate.flows.settings import ServiceConfig

STACK_FILE = "stack.json"
ENV_FILE = "env"
WORK_POOL = "vlgate-gpu"
VALIDATE_DEPLOYMENT = "vlgate-validate/vlgate-validate"
#: the webhook encryption key MLflow stores webhook secrets under (any Fernet key, fixed per
#: stack: a new one at each start could not decrypt what the last one stored)
KEY_FILE = "mlflow-webhook-key"


class StackProcess(BaseModel):
    """One process the stack started: its name, process (and group) id and log, and how
    to start it again (its command and the environment the stack gave it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    pid: int
    log: str
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)


class StackState(BaseModel):
    """``FOLDER/stack.json``: where everything is and what to stop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    folder: str
    home: str
    postgres: str
    #: the throw-away cluster's data folder (None: the stack used a cluster it was given)
    own_cluster: str | None = None
    databases: dict[str, str]
    mlflow_url: str
    prefect_url: str
    webhook_url: str
    workers: int
    processes: list[StackProcess] = Field(default_factory=list)

    @property
    def prefect_api(self) -> str:
        return f"{self.prefect_url}/api"

    def environment(self) -> dict[str, str]:
        """What a process needs to be part of the stack (every vlgate command included)."""
        return {
            "VLGATE_HOME": self.home,
            "MLFLOW_TRACKING_URI": self.mlflow_url,
            "MLFLOW_REGISTRY_URI": self.mlflow_url,
            "PREFECT_API_URL": self.prefect_api,
            "VLGATE_STATE_DB": f"{sqlalchemy_url(self.postgres, 'psycopg2')}/{self.databases['state']}",
        }


def sqlalchemy_url(postgres: str, driver: str) -> str:
    """``postgresql://user@host:port`` as SQLAlchemy's URL for ``driver`` (psycopg2, asyncpg)."""
    return postgres.replace("postgresql://", f"postgresql+{driver}://", 1).rstrip("/")


def database_names(folder: Path) -> dict[str, str]:
    """The stack's databases, named after its folder: two stacks on one cluster never share one."""
    tag = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:8]
    return {role: f"vlgate_{tag}_{role}" for role in ("mlflow", "prefect", "state")}


def code_root() -> Path:
    """The folder the installed vlgate's ``flows/`` lies in (a checkout, or site-packages/vlgate)."""
    import vlgate.flows

    return Path(vlgate.flows.__file__).resolve().parent.parent


def prefect_file() -> Path:
    """``infra/prefect.yaml`` of this vlgate's checkout."""
    path = code_root() / "infra" / "prefect.yaml"
    if not path.is_file():
        raise StackError(f"vlgate stack deploys infra/prefect.yaml, which this installation lacks ({path}); run it from a checkout of vlgate")
    return path


class PrefectDeployment(TypedDict, total=False):
    """A deployment of ``infra/prefect.yaml``: the fields the stack reads or sets (the others
    are kept as they are)."""

    name: str
    schedules: list[dict[str, JsonValue]]
    parameters: dict[str, JsonValue]


class PrefectFile(TypedDict, total=False):
    """``infra/prefect.yaml``: the sections the stack reads or sets (the others are kept)."""

    pull: list[dict[str, JsonValue]]
    deployments: list[PrefectDeployment]


def stack_deployments(template: PrefectFile, drift: dict[str, str], pull_directory: Path) -> PrefectFile:
    """``infra/prefect.yaml`` as the stack deploys it: the validation deployment as it is, the
    drift deployment once per model with a drift entry (``drift``: model → cron), and the
    code pulled from ``pull_directory`` instead of the image's checkout."""
    validate, drift_template = (next(d for d in template["deployments"] if d["name"] == name) for name in ("vlgate-validate", "vlgate-drift"))
    drifts: list[PrefectDeployment] = []
    for model, cron in sorted(drift.items()):
        schedule: dict[str, JsonValue] = {**drift_template["schedules"][0], "cron": cron}
        drifts.append({**drift_template, "name": f"vlgate-drift-{model}", "schedules": [schedule], "parameters": {"model_name": model}})
    return {**template, "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": str(pull_directory)}}], "deployments": [validate, *drifts]}


class LocalStack:
    """Starts and stops the topology in ``folder`` for the vlgate home ``home``."""

    def __init__(self, folder: Path, home: Path, echo: Callable[[str], None] = print):
        self.folder, self.home, self.echo = folder.resolve(), home.resolve(), echo
        self.logs = self.folder / "logs"

    # --- up ---------------------------------------------------------------------------

    def up(self, workers: int, postgres: str | None) -> StackState:
        if workers < 1:
            raise StackError(f"--workers {workers}: a stack needs at least one worker")
        running = self.read_state()
        if running is not None and any(alive(p.pid) for p in running.processes):
            raise StackError(f"a stack is already up in {self.folder} (vlgate stack down --dir {self.folder} first)")
        config = self._service_config()  # a broken vlgate.yaml is refused before anything starts
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            return self._up(workers, postgres, config)
        except BaseException:
            self._stop_started()
            raise

    def _service_config(self) -> ServiceConfig:
        from vlgate.flows.settings import ServiceConfig

        return ServiceConfig.load(self.home)

    def _up(self, workers: int, postgres: str | None, config: ServiceConfig) -> StackState:
        own_cluster = None
        if postgres is None:
            postgres, own_cluster = self._start_cluster()
        databases = database_names(self.folder)
        mlflow_url, prefect_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        webhook_url = f"http://{config.webhook.host}:{config.webhook.port}/webhooks/mlflow"
        state = StackState(
            folder=str(self.folder), home=str(self.home), postgres=postgres, own_cluster=own_cluster, databases=databases,
            mlflow_url=mlflow_url, prefect_url=prefect_url, webhook_url=webhook_url, workers=workers,
        )  # fmt: skip
        self._write(state)  # from here on, `down` can stop what was started, whatever fails next
        create_databases(postgres, databases.values())
        self.echo(f"stack: PostgreSQL {postgres}, databases {', '.join(databases.values())}")
        self._start_mlflow(state)
        self.echo(f"stack: MLflow {state.mlflow_url}")
        self._start_prefect(state)
        self.echo(f"stack: Prefect {state.prefect_url}")
        self._deploy(state, {name: model.drift.cron for name, model in config.models.items() if model.drift is not None})
        self.echo(f"stack: work pool {WORK_POOL} and its deployments; starting {workers} worker(s) and vlgate serve")
        for index in range(workers):
            self._start(
                f"worker-{index}",
                [prefect_cli(), "worker", "start", "--pool", WORK_POOL, "--type", "process", "--limit", "1", "--name", f"{WORK_POOL}-{index}"],
                state.environment() | {"CUDA_VISIBLE_DEVICES": str(index)},
                state,
            )
        self._start_serve(state)
        return self.read_state() or state

    def _start_cluster(self) -> tuple[str, str]:
        """A throw-away PostgreSQL cluster in the folder, trusting local connections. As root
        it runs as the ``postgres`` user (PostgreSQL refuses to run as root), in a folder of
        that user's under the system's temporary folder (the stack's own may lie where that
        user cannot go), linked from the stack's folder."""
        initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise StackError("no initdb/pg_ctl on PATH for a throw-away PostgreSQL cluster: install PostgreSQL, or give --postgres postgresql://USER@HOST:PORT")
        as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        link = self.folder / "postgres"
        if as_owner and not link.is_symlink():
            import tempfile

            data = Path(tempfile.mkdtemp(prefix="vlgate-stack-postgres-"))
            shutil.chown(data, "postgres", "postgres")
            link.symlink_to(data)
        data = link.resolve()
        if not (data / "PG_VERSION").is_file():
            data.mkdir(parents=True, exist_ok=True)
            run([*as_owner, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync"], self.logs / "initdb.log")
        port = free_port()
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=off"  # throw-away: durability is not its job
        run([*as_owner, pg_ctl, "-D", str(data), "-o", options, "-l", str(data / "server.log"), "-w", "start"], self.logs / "pg_ctl.log")
        return f"postgresql://postgres@127.0.0.1:{port}", str(data)

    def _start_mlflow(self, state: StackState) -> None:
        key_file = self.folder / KEY_FILE
        if not key_file.is_file():
            from cryptography.fernet import Fernet

            key_file.write_bytes(Fernet.generate_key())
            key_file.chmod(0o600)
        port = state.mlflow_url.rsplit(":", 1)[1]
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"{sqlalchemy_url(state.postgres, 'psycopg2')}/{state.databases['mlflow']}",
            "--artifacts-destination", (self.folder / "artifacts").as_uri(), "--serve-artifacts",
            "--host", "127.0.0.1", "--port", port, "--workers", "1",
        ]  # fmt: skip
        env = {
            "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
            "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
            "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": key_file.read_text().strip(),
        }
        process, log = self._start("mlflow", command, env, state)
        wait_until(lambda: answers(f"{state.mlflow_url}/health"), 180, "MLflow server", process, log)

    def _start_prefect(self, state: StackState) -> None:
        port = state.prefect_url.rsplit(":", 1)[1]
        env = {
            "PREFECT_HOME": str(self.folder / "prefect"),
            "PREFECT_API_DATABASE_CONNECTION_URL": f"{sqlalchemy_url(state.postgres, 'asyncpg')}/{state.databases['prefect']}",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_API_URL": state.prefect_api,
        }
        process, log = self._start("prefect-server", [prefect_cli(), "server", "start", "--host", "127.0.0.1", "--port", port], env, state)
        wait_until(lambda: answers(f"{state.prefect_api}/health"), 240, "Prefect server", process, log)

    def _deploy(self, state: StackState, drift: dict[str, str]) -> None:
        """The pool (process workers) and the deployments, with ``prefect deploy``."""
        env = os.environ | state.environment()
        inspected = subprocess.run([prefect_cli(), "work-pool", "inspect", WORK_POOL], env=env, capture_output=True, text=True)
        if inspected.returncode != 0:
            run([prefect_cli(), "work-pool", "create", WORK_POOL, "--type", "process"], self.logs / "deploy.log", env=env)
        template = yaml.safe_load(prefect_file().read_text())
        deployments = self.folder / "prefect.yaml"
        deployments.write_text(yaml.safe_dump(stack_deployments(template, drift, code_root()), sort_keys=False))
        # entrypoints are paths in the installed vlgate: deploy from there, naming the stack's file
        run([prefect_cli(), "--no-prompt", "deploy", "--all", "--prefect-file", str(deployments)], self.logs / "deploy.log", env=env, cwd=code_root())

    def _start_serve(self, state: StackState) -> None:
        secret_file = self.folder / "webhook-secret"
        if not secret_file.is_file():
            secret_file.write_text(secrets.token_hex(32))
            secret_file.chmod(0o600)
        env = state.environment() | {
            "VLGATE_VALIDATE_DEPLOYMENT": VALIDATE_DEPLOYMENT,
            "VLGATE_WEBHOOK_SECRET": secret_file.read_text().strip(),
            "VLGATE_WEBHOOK_URL": state.webhook_url,
        }
        process, log = self._start("serve", [vlgate_cli(), "serve", "--no-drift"], env, state)
        webhook = state.webhook_url.rsplit("/webhooks/", 1)[0]
        wait_until(lambda: answers(f"{webhook}/healthz"), 180, "vlgate serve", process, log)

    def _start(self, name: str, command: list[str], env: dict[str, str], state: StackState) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.logs / f"{name}.log"
        with open(log, "ab") as out:
            process = subprocess.Popen(command, env=os.environ | env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.folder)
        current = self.read_state() or state
        started = StackProcess(name=name, pid=process.pid, log=str(log), command=command, env=env)
        self._write(current.model_copy(update={"processes": [*(p for p in current.processes if p.name != name), started]}))
        return process, log

    def restart(self, name: str) -> StackProcess:
        """Stop one of the stack's processes and start it again as it was (a server
        restarted under running flows); returns it as started again."""
        state = self.read_state()
        if state is None:
            raise StackError(f"no stack in {self.folder}")
        old = next((p for p in state.processes if p.name == name), None)
        if old is None:
            raise StackError(f"the stack runs no {name!r} (it runs {', '.join(p.name for p in state.processes)})")
        stop_group(old.pid)
        process, log = self._start(name, old.command, old.env, state)
        url = {"mlflow": f"{state.mlflow_url}/health", "prefect-server": f"{state.prefect_api}/health"}.get(name)
        if url is not None:
            wait_until(lambda: answers(url), 240, f"{name} started again", process, log)
        return next(p for p in (self.read_state() or state).processes if p.name == name)

    def _write(self, state: StackState) -> None:
        path = self.folder / STACK_FILE
        path.touch(mode=0o600)  # it holds the webhook secret and MLflow's key, as the processes got them
        path.write_text(state.model_dump_json(indent=2))
        lines = [f"export {name}={value}" for name, value in state.environment().items()]
        (self.folder / ENV_FILE).write_text("\n".join(lines) + "\n")

    def _stop_started(self) -> None:
        state = self.read_state()
        if state is not None:
            self.stop(state, purge=False)

    # --- down -------------------------------------------------------------------------

    def read_state(self) -> StackState | None:
        path = self.folder / STACK_FILE
        if not path.is_file():
            return None
        try:
            return StackState.model_validate_json(path.read_text())
        except ValueError as error:
            raise StackError(f"{path}: not a stack vlgate wrote ({error.__class__.__name__}); stop its processes by hand") from None

    def down(self, purge: bool = False) -> StackState:
        state = self.read_state()
        if state is None:
            raise StackError(f"no stack in {self.folder} (no {STACK_FILE})")
        self.stop(state, purge)
        return state

    def stop(self, state: StackState, purge: bool) -> None:
        """Every process, last started first (the service before its servers), then the
        throw-away cluster; with ``purge``, the databases and the folder too."""
        for process in reversed(state.processes):
            stop_group(process.pid)
        (self.folder / STACK_FILE).unlink(missing_ok=True)
        if purge and state.own_cluster is None:
            drop_databases(state.postgres, state.databases.values())
        if state.own_cluster is not None:
            as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
            pg_ctl = shutil.which("pg_ctl") or "pg_ctl"
            subprocess.run([*as_owner, pg_ctl, "-D", state.own_cluster, "-m", "fast", "-w", "stop"], capture_output=True)
        if purge:
            if state.own_cluster is not None:
                shutil.rmtree(state.own_cluster, ignore_errors=True)
            shutil.rmtree(self.folder, ignore_errors=True)


def create_databases(postgres: str, names: Iterable[str]) -> None:
    import psycopg2

    try:
        admin = psycopg2.connect(f"{postgres}/postgres", connect_timeout=10)
    except psycopg2.OperationalError as error:
        raise StackError(f"PostgreSQL {postgres}: cannot connect ({str(error).strip()})") from None
    admin.autocommit = True
    try:
        cursor = admin.cursor()
        for name in names:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        admin.close()


def drop_databases(postgres: str, names: Iterable[str]) -> None:
    import psycopg2

    admin = psycopg2.connect(f"{postgres}/postgres", connect_timeout=10)
    admin.autocommit = True
    try:
        for name in names:
            admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


def prefect_cli() -> str:
    return shutil.which("prefect", path=str(Path(sys.executable).parent)) or "prefect"


def vlgate_cli() -> str:
    return shutil.which("vlgate", path=str(Path(sys.executable).parent)) or "vlgate"


def describe(state: StackState) -> list[str]:
    """What ``vlgate stack up`` prints: where each UI is, and how another shell joins."""
    return [
        f"MLflow      {state.mlflow_url}",
        f"Prefect     {state.prefect_url}  (pool {WORK_POOL}: {state.workers} worker(s), one flow each)",
        f"webhook     {state.webhook_url}",
        f"PostgreSQL  {state.postgres}  (databases {', '.join(state.databases.values())})",
        f"logs        {Path(state.folder) / 'logs'}",
        f"other shells: source {Path(state.folder) / ENV_FILE}",
        f"stop: vlgate stack down --dir {state.folder}",
    ]


def state_json(state: StackState) -> dict[str, JsonValue]:
    dumped: dict[str, JsonValue] = json.loads(state.model_dump_json())
    return dumped | {"environment": dict(state.environment())}
