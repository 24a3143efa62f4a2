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
reads (0600, :data:`SECRET_FILES`; ``vlgate stack status`` warns about any that is not):
never in a log, a command line, MLflow or what ``up`` prints.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, SecretStr, field_serializer

from vlgate.cli.processes import StackError, alive, answers, free_port, run, stop_group, wait_until
from vlgate.tracking.permissions import ADMIN, READONLY, SERVICE, Account

if TYPE_CHECKING:
    from vlgate.flows.settings import ServiceConfig

STACK_FILE = "stack.json"
ENV_FILE = "env"
WORK_POOL = "vlgate-gpu"
VALIDATE_DEPLOYMENT = "vlgate-validate/vlgate-validate"
#: the webhook encryption key MLflow stores webhook secrets under (any Fernet key, fixed per
#: stack: a new one at each start could not decrypt what the last one stored)
KEY_FILE = "mlflow-webhook-key"
#: the webhook's shared secret, unless vlgate.yaml's webhook.secret_env names a variable set
#: where the stack is started
WEBHOOK_SECRET_FILE = "webhook-secret"
#: the accounts' passwords, Prefect's auth string and the MLflow auth app's session key
CREDENTIALS_FILE = "credentials.json"
#: MLflow's basic-auth config (MLFLOW_AUTH_CONFIG_PATH): its database and admin
AUTH_CONFIG_FILE = "mlflow-auth.ini"
#: every file of the folder that holds a secret: written 0600, checked by ``stack status``
SECRET_FILES = (STACK_FILE, ENV_FILE, WEBHOOK_SECRET_FILE, KEY_FILE, CREDENTIALS_FILE, AUTH_CONFIG_FILE)
DEFAULT_HOST = "127.0.0.1"
#: the variables of :meth:`StackState.environment` that hold a secret (shown as ``<secret>``)
SECRET_VARIABLES = frozenset({"MLFLOW_TRACKING_PASSWORD", "PREFECT_API_AUTH_STRING"})


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by its owner only: created 0600 (never readable by
    others, not even for a moment), and an existing file made 0600 before it is written."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)


def loose_secret_files(folder: Path) -> list[tuple[Path, int]]:
    """The stack's secret files that others may read or write (path, mode)."""
    found = []
    for name in SECRET_FILES:
        path = folder / name
        if path.is_file() and path.stat().st_mode & 0o077:
            found.append((path, path.stat().st_mode & 0o777))
    return found


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (a name other than localhost counts as not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_problem(host: str, auth: bool) -> str | None:
    """Why binding the servers to ``host`` with ``auth`` is refused: a server others can reach
    without authentication lets anyone register versions, move the champion alias and read
    every artifact."""
    if auth or is_loopback(host):
        return None
    return f"--host {host} --no-auth: servers reachable from other machines without authentication are refused; drop --no-auth, or bind to 127.0.0.1"


def client_host(host: str) -> str:
    """The address this machine's clients use for servers bound to ``host``."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class StackCredentials(BaseModel):
    """``FOLDER/credentials.json`` (0600): the secrets the stack generated at its first start
    and keeps for the next (the accounts live on in the auth database)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    admin: Account
    service: Account
    readonly: Account
    #: Prefect's one shared credential, ``user:password`` (PREFECT_SERVER_API_AUTH_STRING / PREFECT_API_AUTH_STRING)
    prefect_auth_string: SecretStr
    #: MLflow's auth app signs its CSRF tokens with it (MLFLOW_FLASK_SERVER_SECRET_KEY): fixed across restarts
    flask_secret_key: SecretStr

    @field_serializer("prefect_auth_string", "flask_secret_key", when_used="json")
    def _reveal(self, value: SecretStr) -> str:
        return value.get_secret_value()

    @classmethod
    def generate(cls) -> StackCredentials:
        def password() -> SecretStr:
            return SecretStr(secrets.token_urlsafe(24))

        return cls(
            admin=Account(username=ADMIN.username, password=password()),
            service=Account(username=SERVICE.username, password=password()),
            readonly=Account(username=READONLY.username, password=password()),
            prefect_auth_string=SecretStr(f"vlgate:{secrets.token_urlsafe(24)}"),
            flask_secret_key=SecretStr(secrets.token_hex(32)),
        )

    @classmethod
    def read(cls, folder: Path) -> StackCredentials:
        path = folder / CREDENTIALS_FILE
        try:
            return cls.model_validate_json(path.read_text())
        except (OSError, ValueError) as error:
            raise StackError(f"{path}: the stack's credentials cannot be read ({error.__class__.__name__}); vlgate stack down --purge and up again makes new ones") from None


def service_environment(credentials: StackCredentials) -> dict[str, str]:
    """How a client authenticates as the service account, with the standard variables: MLflow's
    client sends MLFLOW_TRACKING_USERNAME/PASSWORD, Prefect's PREFECT_API_AUTH_STRING."""
    return {
        "MLFLOW_TRACKING_USERNAME": credentials.service.username,
        "MLFLOW_TRACKING_PASSWORD": credentials.service.password.get_secret_value(),
        "PREFECT_API_AUTH_STRING": credentials.prefect_auth_string.get_secret_value(),
    }


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
    #: MLflow's basic-auth app and Prefect's auth string on (False: --no-auth, or a stack.json
    #: from before authentication)
    auth: bool = False
    #: the address the servers bind to
    host: str = DEFAULT_HOST
    processes: list[StackProcess] = Field(default_factory=list)

    @property
    def prefect_api(self) -> str:
        return f"{self.prefect_url}/api"

    def credentials(self) -> StackCredentials:
        return StackCredentials.read(Path(self.folder))

    def environment(self) -> dict[str, str]:
        """What a process needs to be part of the stack (every vlgate command included): where
        each server is and, with authentication, the service account's credentials."""
        return self.public_environment() | (service_environment(self.credentials()) if self.auth else {})

    def public_environment(self) -> dict[str, str]:
        """:meth:`environment` as it may be shown: the secrets as ``<secret>`` (read from nothing,
        so it can be shown after ``down --purge`` removed them)."""
        shown = {"MLFLOW_TRACKING_USERNAME": SERVICE.username, **{name: "<secret>" for name in sorted(SECRET_VARIABLES)}} if self.auth else {}
        return {
            "VLGATE_HOME": self.home,
            "MLFLOW_TRACKING_URI": self.mlflow_url,
            "MLFLOW_REGISTRY_URI": self.mlflow_url,
            "PREFECT_API_URL": self.prefect_api,
            "VLGATE_STATE_DB": f"{sqlalchemy_url(self.postgres, 'psycopg2')}/{self.databases['state']}",
            **shown,
        }


def sqlalchemy_url(postgres: str, driver: str) -> str:
    """``postgresql://user@host:port`` as SQLAlchemy's URL for ``driver`` (psycopg2, asyncpg)."""
    return postgres.replace("postgresql://", f"postgresql+{driver}://", 1).rstrip("/")


def database_names(folder: Path) -> dict[str, str]:
    """The stack's databases, named after its folder: two stacks on one cluster never share one."""
    tag = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:8]
    return {role: f"vlgate_{tag}_{role}" for role in ("mlflow", "prefect", "state", "auth")}


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
            state = state.model_copy(update={url: moved})
            self._write((self.read_state() or state).model_copy(update={url: moved}))
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
        self._write(current.model_copy(update={"processes": [*(p for p in current.processes if p.name != name), started]}))
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


def describe(state: StackState) -> list[str]:
    """What ``vlgate stack up`` prints: where each UI is, how another shell joins, and where
    the credentials are (never the credentials themselves)."""
    folder = Path(state.folder)
    if state.auth:
        auth = (
            f"MLflow basic-auth (accounts {ADMIN.username}, {SERVICE.username}, {READONLY.username}) and Prefect's auth string; "
            f"passwords in {folder / CREDENTIALS_FILE}, the service account's in {folder / ENV_FILE}"
        )
    else:
        auth = "OFF (--no-auth): anyone who reaches these ports can change everything"
    return [
        f"MLflow      {state.mlflow_url}",
        f"Prefect     {state.prefect_url}  (pool {WORK_POOL}: {state.workers} worker(s), one flow each)",
        f"webhook     {state.webhook_url}",
        f"PostgreSQL  {state.postgres}  (databases {', '.join(state.databases.values())})",
        f"auth        {auth}",
        f"logs        {folder / 'logs'}",
        f"other shells: source {folder / ENV_FILE}",
        f"stop: vlgate stack down --dir {state.folder}",
    ]


def state_json(state: StackState) -> dict[str, JsonValue]:
    """The state as ``--json`` prints it: no secret (the processes' environments are left
    out, the environment's credentials shown as ``<secret>``: they are in FOLDER/env)."""
    dumped: dict[str, JsonValue] = json.loads(state.model_dump_json(exclude={"processes": {"__all__": {"env"}}}))
    return dumped | {"environment": dict(state.public_environment())}
