"""What a local stack is on disk (``vlgate stack up`` writes it, ``down`` and ``status``
read it): its state file ``stack.json``, the credentials and other secret files kept in its
folder for their owner only, the exposure check on its host, its databases' names, and the
Prefect deployments it deploys. ``cli/stack.py`` starts and stops the processes it names.
"""


from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from pydantic import BaseModel, ConfigDict, Field, JsonValue, SecretStr, field_serializer

from vlgate.cli.processes import StackError
from vlgate.tracking.permissions import ADMIN, READONLY, SERVICE, Account

if TYPE_CHECKING:
    pass

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
