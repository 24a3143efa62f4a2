"""The real deployment's topology on one machine, without Docker (``vlgate stack up|down``):
what ``infra/compose.yaml`` runs, as processes on 127.0.0.1 under one folder.

- PostgreSQL: the machine's cluster (``--postgres URL``), or a throw-away cluster made with
  ``initdb`` in the stack's folder. Four databases on it, named after the folder: MLflow's
  backend store, the Prefect server's, vlgate's state (claims, deliveries, locks) and
  MLflow's users and grants (beside the rest: one place to back up, and ``down --purge``
  drops it with them);
- ``mlflow server`` on PostgreSQL with its artifacts in the folder, webhooks allowed to
  loopback, and (unless ``--no-auth``) MLflow's basic-auth app: an admin, the service
  account ``vlgate`` every stack process uses and a read-only account, each with the least
  grants its work needs (``vlgate/tracking/permissions.py``, infra/README.md's table);
- ``prefect server start`` on PostgreSQL (API, UI, scheduler), behind Prefect's one shared
  auth string unless ``--no-auth`` (Prefect's open-source server has no per-user accounts);
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
register``, ``vlgate status``) are in ``FOLDER/env``, the service account's credentials
included. The servers bind to ``--host`` (127.0.0.1); another address without
authentication is refused.

Secrets are generated with :mod:`secrets` and kept in the folder in files only their owner
reads (0600, ``SECRET_FILES`` in ``cli/stack_state.py``; ``vlgate stack status`` warns about any that is not):
never in a log, a command line, MLflow or what ``up`` prints.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml

from vlgate.cli.processes import StackError, alive, answers, free_port, run, stop_group, wait_until

if TYPE_CHECKING:
    from vlgate.flows.settings import ServiceConfig
from vlgate.cli.stack_state import (
    AUTH_CONFIG_FILE,
    CREDENTIALS_FILE,
    DEFAULT_HOST,
    ENV_FILE,
    KEY_FILE,
    STACK_FILE,
    VALIDATE_DEPLOYMENT,
    WEBHOOK_SECRET_FILE,
    WORK_POOL,
    StackCredentials,
    StackProcess,
    StackState,
    client_host,
    code_root,
    database_names,
    exposure_problem,
    prefect_file,
    sqlalchemy_url,
    stack_deployments,
    write_private,
)
from vlgate.values import replaced


class LocalStack:
    """Starts and stops the topology in ``folder`` for the vlgate home ``home``."""

    def __init__(self, folder: Path, home: Path, echo: Callable[[str], None] = print):
        self.folder, self.home, self.echo = folder.resolve(), home.resolve(), echo
        self.logs = self.folder / "logs"

    # --- up ---------------------------------------------------------------------------

    def up(self, workers: int, postgres: str | None, *, auth: bool = True, host: str = DEFAULT_HOST) -> StackState:
        """Start everything; ``auth`` False (``--no-auth``) only for a throw-away stack on loopback."""
        if workers < 1:
            raise StackError(f"--workers {workers}: a stack needs at least one worker")
        problem = exposure_problem(host, auth)
        if problem:
            raise StackError(problem)
        running = self.read_state()
        if running is not None and any(alive(p.pid) for p in running.processes):
            raise StackError(f"a stack is already up in {self.folder} (vlgate stack down --dir {self.folder} first)")
        config = self._service_config()  # a broken vlgate.yaml is refused before anything starts
        if not auth:
            print(
                f"stack: authentication is OFF (--no-auth): anyone who reaches MLflow or Prefect on {host} can register versions, move the champion alias, "
                "delete runs and read every artifact; for a throw-away local stack only",
                file=sys.stderr,
            )
        self.logs.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)  # the folder holds the secrets, the artifacts and the logs
        try:
            return self._up(workers, postgres, config, auth, host)
        except BaseException:
            self._stop_started()
            raise

    def _service_config(self) -> ServiceConfig:
        from vlgate.flows.settings import ServiceConfig

        return ServiceConfig.load(self.home)

    def _up(self, workers: int, postgres: str | None, config: ServiceConfig, auth: bool, host: str) -> StackState:
        own_cluster = None
        if postgres is None:
            postgres, own_cluster = self._start_cluster()
        databases = database_names(self.folder)
        address = client_host(host)
        mlflow_url, prefect_url = f"http://{address}:{free_port()}", f"http://{address}:{free_port()}"
        webhook_url = f"http://{config.webhook.host}:{config.webhook.port}/webhooks/mlflow"
        if auth:
            self._credentials()
        state = StackState(
            folder=str(self.folder), home=str(self.home), postgres=postgres, own_cluster=own_cluster, databases=databases,
            mlflow_url=mlflow_url, prefect_url=prefect_url, webhook_url=webhook_url, workers=workers, auth=auth, host=host,
        )  # fmt: skip
        self._write(state)  # from here on, `down` can stop what was started, whatever fails next
        create_databases(postgres, databases.values())
        self.echo(f"stack: PostgreSQL {postgres}, databases {', '.join(databases.values())}")
        state = self._on_a_free_port(state, "mlflow_url", self._start_mlflow)
        self.echo(f"stack: MLflow {state.mlflow_url}" + (f" (basic-auth; credentials in {self.folder / CREDENTIALS_FILE})" if auth else " (no authentication)"))
        state = self._on_a_free_port(state, "prefect_url", self._start_prefect)
        self.echo(f"stack: Prefect {state.prefect_url}" + (" (auth string)" if auth else " (no authentication)"))
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

    def _on_a_free_port(self, state: StackState, url: Literal["mlflow_url", "prefect_url"], start: Callable[[StackState], None], tries: int = 3) -> StackState:
        """``start`` the server at the state's ``url``; where its port was taken between
        choosing it and binding it (another process on a busy machine), on another free
        port, up to ``tries`` times. The state as the server runs (also written)."""
        for attempt in range(1, tries + 1):
            try:
                start(state)
                return state
            except StackError as error:
                if "address already in use" not in str(error).lower() or attempt == tries:
                    raise
            moved = f"{getattr(state, url).rsplit(':', 1)[0]}:{free_port()}"
            state = replaced(state, **{url: moved})
            self._write(replaced(self.read_state() or state, **{url: moved}))
        raise AssertionError("unreachable: the last try returns or raises")

    def _credentials(self) -> StackCredentials:
        """The stack's credentials: those of an earlier start (its accounts live on in the auth
        database), or new ones, written 0600 before anything uses them."""
        path = self.folder / CREDENTIALS_FILE
        if path.is_file():
            return StackCredentials.read(self.folder)
        credentials = StackCredentials.generate()
        write_private(path, credentials.model_dump_json(indent=2))
        return credentials

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
        # loopback only whatever --host says: the cluster trusts every local connection
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=off"  # throw-away: durability is not its job
        run([*as_owner, pg_ctl, "-D", str(data), "-o", options, "-l", str(data / "server.log"), "-w", "start"], self.logs / "pg_ctl.log")
        return f"postgresql://postgres@127.0.0.1:{port}", str(data)

    def _start_mlflow(self, state: StackState) -> None:
        key_file = self.folder / KEY_FILE
        if not key_file.is_file():
            from cryptography.fernet import Fernet

            write_private(key_file, Fernet.generate_key().decode())
        port = state.mlflow_url.rsplit(":", 1)[1]
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"{sqlalchemy_url(state.postgres, 'psycopg2')}/{state.databases['mlflow']}",
            "--artifacts-destination", (self.folder / "artifacts").as_uri(), "--serve-artifacts",
            "--host", state.host, "--port", port, "--workers", "1",
        ]  # fmt: skip
        env = {
            "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
            "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
            "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": key_file.read_text().strip(),
        }
        if state.auth:
            from vlgate.tracking.permissions import auth_config_text

            credentials = state.credentials()
            config = self.folder / AUTH_CONFIG_FILE
            write_private(config, auth_config_text(f"{sqlalchemy_url(state.postgres, 'psycopg2')}/{state.databases['auth']}", credentials.admin))
            command += ["--app-name", "basic-auth"]
            env |= {"MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_FLASK_SERVER_SECRET_KEY": credentials.flask_secret_key.get_secret_value()}
        process, log = self._start("mlflow", command, env, state)
        wait_until(lambda: answers(f"{state.mlflow_url}/health"), 180, "MLflow server", process, log)
        if state.auth:
            self._provision(state)

    def _provision(self, state: StackState) -> None:
        """The service and read-only accounts and their grants, made by the admin."""
        from vlgate.tracking.permissions import AuthError, provision_accounts

        credentials = state.credentials()
        try:
            provision_accounts(state.mlflow_url, credentials.admin, {"service": credentials.service, "readonly": credentials.readonly})
        except AuthError as error:
            raise StackError(
                f"{error}; if the auth database {state.databases['auth']} was made with other credentials than {self.folder / CREDENTIALS_FILE}, vlgate stack down --purge and up again"
            ) from None

    def _start_prefect(self, state: StackState) -> None:
        port = state.prefect_url.rsplit(":", 1)[1]
        env = {
            "PREFECT_HOME": str(self.folder / "prefect"),
            "PREFECT_API_DATABASE_CONNECTION_URL": f"{sqlalchemy_url(state.postgres, 'asyncpg')}/{state.databases['prefect']}",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_API_URL": state.prefect_api,
        }
        if state.auth:  # the server checks it; its own services call the API with it too
            auth_string = state.credentials().prefect_auth_string.get_secret_value()
            env |= {"PREFECT_SERVER_API_AUTH_STRING": auth_string, "PREFECT_API_AUTH_STRING": auth_string}
        command = [prefect_cli(), "server", "start", "--host", state.host, "--port", port]
        process, log = self._start("prefect-server", command, env, state)
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

    def _serve_env(self, state: StackState) -> dict[str, str]:
        """``vlgate serve``'s environment, made anew at each (re)start: the webhook's secret is
        read from the variable vlgate.yaml's ``webhook.secret_env`` names, where the stack is
        started (a rotated secret), else from ``FOLDER/webhook-secret`` (generated once)."""
        from vlgate.flows.settings import DEFAULT_WEBHOOK_SECRET_ENV

        webhook = self._service_config().webhook
        secret = os.environ.get(webhook.secret_env, "")
        if not secret:
            if webhook.secret_env != DEFAULT_WEBHOOK_SECRET_ENV:
                raise StackError(f"vlgate.yaml's webhook.secret_env names {webhook.secret_env}, which is not set here: export it with the webhook secret first")
            secret_file = self.folder / WEBHOOK_SECRET_FILE
            if not secret_file.is_file():
                write_private(secret_file, secrets.token_hex(32))
            secret = secret_file.read_text().strip()
        return state.environment() | {"VLGATE_VALIDATE_DEPLOYMENT": VALIDATE_DEPLOYMENT, webhook.secret_env: secret, "VLGATE_WEBHOOK_URL": state.webhook_url}

    def _start_serve(self, state: StackState, command: list[str] | None = None) -> StackProcess:
        """``vlgate serve`` started and answering; with authentication, its webhook then
        registered by the admin with the secret serve got (the service account may not manage
        webhooks: MLflow leaves that to admins)."""
        env = self._serve_env(state)
        process, log = self._start("serve", command or [vlgate_cli(), "serve", "--no-drift"], env, state)
        webhook = state.webhook_url.rsplit("/webhooks/", 1)[0]
        wait_until(lambda: answers(f"{webhook}/healthz"), 180, "vlgate serve", process, log)
        if state.auth:
            from mlflow.exceptions import MlflowException

            from vlgate.tracking.permissions import AuthError, register_webhook

            secret = env[self._service_config().webhook.secret_env]
            try:
                register_webhook(state.mlflow_url, state.credentials().admin, state.webhook_url, secret)
            except (AuthError, MlflowException) as error:
                raise StackError(f"registering MLflow's webhook as {state.credentials().admin.username!r}: {str(error).splitlines()[0]}") from None
        return next(p for p in (self.read_state() or state).processes if p.name == "serve")

    def _start(self, name: str, command: list[str], env: dict[str, str], state: StackState) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.logs / f"{name}.log"
        with open(log, "ab") as out:
            process = subprocess.Popen(command, env=os.environ | env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.folder)
        current = self.read_state() or state
        started = StackProcess(name=name, pid=process.pid, log=str(log), command=command, env=env)
        self._write(replaced(current, processes=[*(p for p in current.processes if p.name != name), started]))
        return process, log

    def restart(self, name: str) -> StackProcess:
        """Stop one of the stack's processes and start it again as it was (a server
        restarted under running flows); returns it as started again. ``serve`` gets its
        environment anew: a webhook secret rotated in vlgate.yaml (``webhook.secret_env``)
        is the one it checks from now on, and the one MLflow's webhook is signed with."""
        state = self.read_state()
        if state is None:
            raise StackError(f"no stack in {self.folder}")
        old = next((p for p in state.processes if p.name == name), None)
        if old is None:
            raise StackError(f"the stack runs no {name!r} (it runs {', '.join(p.name for p in state.processes)})")
        if name == "serve":
            self._serve_env(state)  # a secret_env that names nothing is refused before serve is stopped
            stop_group(old.pid)
            return self._start_serve(state, old.command)
        stop_group(old.pid)
        process, log = self._start(name, old.command, old.env, state)
        url = {"mlflow": f"{state.mlflow_url}/health", "prefect-server": f"{state.prefect_api}/health"}.get(name)
        if url is not None:
            wait_until(lambda: answers(url), 240, f"{name} started again", process, log)
        return next(p for p in (self.read_state() or state).processes if p.name == name)

    def _write(self, state: StackState) -> None:
        # stack.json holds the webhook secret, MLflow's key and the credentials, as the processes got them
        write_private(self.folder / STACK_FILE, state.model_dump_json(indent=2))
        lines = [f"export {name}={shlex.quote(value)}" for name, value in state.environment().items()]
        write_private(self.folder / ENV_FILE, "\n".join(lines) + "\n")

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

