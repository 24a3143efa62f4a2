"""Who the MLflow credentials are and what they may do, when the tracking server runs MLflow's
basic-auth app (``mlflow server --app-name basic-auth``: ``vlgate stack up`` and
``infra/compose.yaml`` run it).

- :data:`ACCOUNTS`: the accounts a vlgate deployment has and their grants, applied by an
  admin with :func:`provision_accounts` (``vlgate stack`` at start, compose's ``mlflow-init``);
- :func:`register_webhook`: MLflow lets only admins manage webhooks, and the service account
  is none, so whoever holds the admin's credentials registers ``vlgate serve``'s webhook;
- :func:`check_service_account`: what ``vlgate serve`` checks before it starts (its account
  reads the configured registered models, sets their tags and ``champion`` alias, writes runs);
- :func:`authenticated_user` and :func:`can_manage_registered_model`, for sign-off.

How MLflow decides (``mlflow/server/auth``): a user's permission on a resource is the grant
naming it, else a wildcard (``*``) grant of its type, else ``default_permission``; admins pass
every check. Wildcard grants cover resources created later, so a model registered tomorrow
needs no new grant; the creator of an experiment or registered model gets MANAGE on it.

Credentials come from where MLflow's own client takes them (``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD``, or ``~/.mlflow/credentials``). Passwords are
:class:`~pydantic.SecretStr`: a log line or an error showing an :class:`Account` shows no password.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_serializer

from vlgate.tracking.naming import validation_experiment
from vlgate.tracking.server import tracking_uri

if TYPE_CHECKING:
    import requests

PermissionName = Literal["READ", "USE", "EDIT", "MANAGE", "NO_PERMISSIONS", "DENY"]
ResourceType = Literal["experiment", "registered_model"]
Capability = Literal["read", "use", "update", "delete", "manage"]

#: what each permission allows (mlflow/server/auth/permissions.py; tests/test_permissions.py
#: checks this copy against MLflow's, which cannot be imported without starting its auth app)
CAPABILITIES: dict[str, frozenset[Capability]] = {
    "READ": frozenset({"read"}),
    "USE": frozenset({"read", "use"}),
    "EDIT": frozenset({"read", "use", "update"}),
    "MANAGE": frozenset({"read", "use", "update", "delete", "manage"}),
    "NO_PERMISSIONS": frozenset(),
    "DENY": frozenset(),
}
#: the least permission that has each capability (what a refusal tells the admin to grant)
LEAST_WITH: dict[Capability, PermissionName] = {"read": "READ", "use": "USE", "update": "EDIT", "delete": "MANAGE", "manage": "MANAGE"}

#: what an account without a grant gets: nothing, so that a new account sees nothing until
#: an admin grants it something (MLflow's own default is READ for every account)
DEFAULT_PERMISSION: PermissionName = "NO_PERMISSIONS"

USERS_CURRENT = "/api/2.0/mlflow/users/current"
USERS_GET = "/api/2.0/mlflow/users/get"
USERS_CREATE = "/api/2.0/mlflow/users/create"
USERS_UPDATE_PASSWORD = "/api/2.0/mlflow/users/update-password"
PERMISSION_GET = "/api/3.0/mlflow/users/permissions/get"
PERMISSION_GRANT = "/api/3.0/mlflow/users/permissions/grant"
PERMISSION_REVOKE = "/api/3.0/mlflow/users/permissions/revoke"
EXPERIMENT_BY_NAME = "/api/2.0/mlflow/experiments/get-by-name"
TIMEOUT_S = 10.0


class AuthError(RuntimeError):
    """The tracking server refused the credentials, or could not say who they are (one line)."""


class Account(BaseModel):
    """An MLflow account's credentials. The password shows as ``**********`` everywhere but in
    ``model_dump_json`` (which writes the 0600 credentials file)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    username: str = Field(min_length=1)
    #: MLflow refuses passwords shorter than 12 characters
    password: SecretStr = Field(min_length=12)

    @field_serializer("password", when_used="json")
    def _reveal(self, value: SecretStr) -> str:
        return value.get_secret_value()

    def basic(self) -> tuple[str, str]:
        return self.username, self.password.get_secret_value()


class Grant(BaseModel):
    """One grant: ``permission`` on the resources of ``resource_type`` that ``pattern`` names
    (``*``: all of them, those created later included)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resource_type: ResourceType
    pattern: str = "*"
    permission: PermissionName
    why: str


class AccountRole(BaseModel):
    """An account a vlgate deployment has, what it is granted and why (infra/README.md's table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["admin", "service", "readonly"]
    username: str
    admin: bool = False
    grants: tuple[Grant, ...] = ()
    why: str


ADMIN = AccountRole(
    role="admin",
    username="vlgate-admin",
    admin=True,
    why="creates the other accounts and their grants and registers vlgate serve's webhook (MLflow lets only admins manage users and webhooks); held by whoever runs the deployment, never by a long-running process",
)
SERVICE = AccountRole(
    role="service",
    username="vlgate",
    grants=(
        Grant(resource_type="registered_model", permission="EDIT", why="read every version, register versions, set their tags and move the champion alias; not delete models or versions"),
        Grant(
            resource_type="experiment",
            permission="EDIT",
            why="read the runs versions come from, create and write validation and drift runs; it manages the experiments it creates (vlgate/MODEL)",
        ),
    ),
    why="vlgate serve, the workers' flows and the operator's vlgate commands (FOLDER/env)",
)
READONLY = AccountRole(
    role="readonly",
    username="vlgate-readonly",
    grants=(
        Grant(resource_type="registered_model", permission="READ", why="see every model, version, tag and alias"),
        Grant(resource_type="experiment", permission="READ", why="see every run, metric and artifact"),
    ),
    why="dashboards and people looking: reads everything, changes nothing",
)
ACCOUNTS: tuple[AccountRole, ...] = (ADMIN, SERVICE, READONLY)


def _call(uri: str, method: str, path: str, auth: tuple[str, str] | None, *, params: Mapping[str, str] | None = None, json: Mapping[str, str] | None = None) -> requests.Response:
    import requests
    from mlflow.utils.credentials import get_default_host_creds

    creds = get_default_host_creds(uri)  # TLS as MLflow's client has it (MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH)
    verify: bool | str = creds.server_cert_path or not creds.ignore_tls_verification
    try:
        return requests.request(method, f"{uri.rstrip('/')}{path}", auth=auth, params=params, json=json, timeout=TIMEOUT_S, verify=verify)
    except requests.RequestException as error:
        raise AuthError(f"MLflow {uri}: no answer to {path} ({type(error).__name__})") from None


def _error(response: requests.Response) -> str:
    """The server's error code, or the status: never the body's echo of what was sent."""
    try:
        return str(response.json().get("error_code") or response.status_code)
    except ValueError:
        return str(response.status_code)


def env_credentials(uri: str) -> tuple[str, str] | None:
    """The credentials MLflow's client would send to ``uri`` (None: it sends none)."""
    from mlflow.utils.credentials import get_default_host_creds

    creds = get_default_host_creds(uri)
    return (creds.username, creds.password) if creds.username and creds.password else None


class MlflowUser(BaseModel):
    model_config = ConfigDict(frozen=True)

    username: str
    is_admin: bool


def current_user(uri: str | None = None, auth: tuple[str, str] | None = None) -> MlflowUser | None:
    """Who the credentials (``auth``, else MLflow's client's) are, as the tracking server
    verified them; None when it runs no authentication (an embedded store, or a server
    without the basic-auth app). :class:`AuthError` when the server refuses them."""
    uri = uri or tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return None
    auth = auth or env_credentials(uri)
    response = _call(uri, "GET", USERS_CURRENT, auth)
    if response.status_code == 404:  # no basic-auth app: nobody is anybody
        return None
    if response.status_code == 401:
        if auth is None:
            raise AuthError(f"MLflow {uri} requires authentication: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (vlgate stack: source FOLDER/env)")
        raise AuthError(f"MLflow {uri} refused the credentials of {auth[0]!r} (401): check MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")
    if response.status_code != 200:
        raise AuthError(f"MLflow {uri}: {USERS_CURRENT} answered {response.status_code} ({_error(response)})")
    user = response.json()["user"]
    return MlflowUser(username=str(user["username"]), is_admin=bool(user["is_admin"]))


def authenticated_user() -> str | None:
    """The MLflow identity of the current credentials, verified by the tracking server (it
    authenticated the request that asked); None when MLflow runs without authentication."""
    user = current_user()
    return user.username if user is not None else None


def permission_of(uri: str, auth: tuple[str, str] | None, username: str, resource_type: ResourceType, resource_id: str) -> PermissionName | None:
    """``username``'s permission on the resource, resolved by the server as its own checks
    resolve it (a grant naming it, a wildcard grant, the default; admins are not special-cased
    here). None when the credentials may not ask (only the user themself or an admin may)."""
    params = {"username": username, "resource_type": resource_type, "resource_id": resource_id}
    response = _call(uri, "GET", PERMISSION_GET, auth, params=params)
    if response.status_code in (403, 404):
        return None
    if response.status_code != 200:
        raise AuthError(f"MLflow {uri}: {PERMISSION_GET} for {username!r} answered {response.status_code} ({_error(response)})")
    name = str(response.json()["permission"])
    if name not in CAPABILITIES:
        raise AuthError(f"MLflow {uri}: unknown permission {name[:40]!r} for {username!r}")
    return name  # type: ignore[return-value]  # checked against CAPABILITIES' keys, the Literal's values


def can_manage_registered_model(name: str, user: str) -> bool:
    """Whether ``user`` holds MANAGE on the registered model ``name`` (admins hold it on
    everything). Asked with the current credentials, which must be ``user``'s own or an
    admin's: anyone else may not know, and the answer is False (nothing is vouched for).
    Without authentication on the tracking server every caller may do everything: True."""
    uri = tracking_uri()
    auth = env_credentials(uri) if uri.startswith(("http://", "https://")) else None
    caller = current_user(uri, auth)
    if caller is None:
        return True
    if caller.username == user:
        if caller.is_admin:
            return True
    elif caller.is_admin:
        response = _call(uri, "GET", USERS_GET, auth, params={"username": user})
        if response.status_code != 200:  # no such user
            return False
        if bool(response.json()["user"]["is_admin"]):
            return True
    else:
        return False
    permission = permission_of(uri, auth, user, "registered_model", name)
    return permission is not None and "manage" in CAPABILITIES[permission]


# --- what vlgate serve needs -----------------------------------------------------------------


class Need(BaseModel):
    """One thing the service account must be able to do, on one resource."""

    model_config = ConfigDict(frozen=True)

    what: str
    resource_type: ResourceType
    resource: str
    #: the experiment's id when the resource is an experiment that exists (its name otherwise)
    resource_id: str
    capability: Capability


def service_needs(models: Iterable[str], any_model: bool, experiments: Mapping[str, str | None]) -> list[Need]:
    """What ``vlgate serve`` (and the flows it starts, with the same account) does in MLflow:
    for each configured model, read its versions, set their tags and move its ``champion``
    alias, and write its validation runs into ``vlgate/MODEL`` (created, and then managed, by
    the account when it does not exist: ``experiments`` maps each name to its id or None);
    read the runs versions come from. ``any_model``: vlgate.yaml has a ``default:``, so any
    registered model may be validated."""
    needs: list[Need] = []
    names = [*sorted(models), *(["*"] if any_model else [])]
    for model in names:
        shown = "every registered model" if model == "*" else f"registered model {model!r}"
        needs.append(Need(what=f"read {shown} and its versions", resource_type="registered_model", resource=model, resource_id=model, capability="read"))
        needs.append(Need(what=f"set tags on {shown}'s versions and move its champion alias", resource_type="registered_model", resource=model, resource_id=model, capability="update"))
    needs.append(Need(what="read the runs registered versions come from (their checkpoints)", resource_type="experiment", resource="*", resource_id="*", capability="read"))
    for name, experiment_id in sorted(experiments.items()):
        if experiment_id is not None:
            needs.append(Need(what=f"create and write runs in experiment {name!r}", resource_type="experiment", resource=name, resource_id=experiment_id, capability="update"))
    return needs


def missing(needs: Sequence[Need], permissions: Mapping[tuple[str, str], PermissionName | None]) -> list[tuple[Need, PermissionName | None]]:
    """The needs the permissions (``(resource_type, resource_id)`` → permission) do not meet,
    each with the permission found there."""
    gaps: list[tuple[Need, PermissionName | None]] = []
    for need in needs:
        found = permissions.get((need.resource_type, need.resource_id))
        if found is None or need.capability not in CAPABILITIES[found]:
            gaps.append((need, found))
    return gaps


def describe_gaps(username: str, gaps: Sequence[tuple[Need, PermissionName | None]]) -> str:
    """One line naming what is missing: the first gap in full, the rest counted."""
    need, found = gaps[0]
    resource = "*" if need.resource == "*" else need.resource
    line = (
        f"MLflow account {username!r} cannot {need.what}: it needs {LEAST_WITH[need.capability]} on {need.resource_type.replace('_', ' ')} {resource!r} "
        f"(it has {found or 'no answer'}); have an MLflow admin grant it (infra/README.md, 'Authentication')"
    )
    return line + (f", and {len(gaps) - 1} more" if len(gaps) > 1 else "")


def check_service_account(models: Iterable[str], any_model: bool, uri: str | None = None) -> MlflowUser | None:
    """Raise :class:`AuthError` (one line naming the first missing permission) unless the
    current credentials can do what ``vlgate serve`` needs (:func:`service_needs`); the
    verified user (None: MLflow runs without authentication, nothing to check)."""
    uri = uri or tracking_uri()
    auth = env_credentials(uri) if uri.startswith(("http://", "https://")) else None
    user = current_user(uri, auth)
    if user is None or user.is_admin:
        return user
    models = list(models)
    experiments: dict[str, str | None] = {}
    for model in models:
        name = validation_experiment(model)
        response = _call(uri, "GET", EXPERIMENT_BY_NAME, auth, params={"experiment_name": name})
        if response.status_code == 200:
            experiments[name] = str(response.json()["experiment"]["experiment_id"])
        elif response.status_code == 404:
            experiments[name] = None  # the account creates it, and manages it as its creator
        elif response.status_code == 403:
            raise AuthError(describe_gaps(user.username, [(Need(what=f"read experiment {name!r}", resource_type="experiment", resource=name, resource_id=name, capability="read"), None)]))
        else:
            raise AuthError(f"MLflow {uri}: {EXPERIMENT_BY_NAME} answered {response.status_code} ({_error(response)})")
    needs = service_needs(models, any_model, experiments)
    permissions: dict[tuple[str, str], PermissionName | None] = {(n.resource_type, n.resource_id): permission_of(uri, auth, user.username, n.resource_type, n.resource_id) for n in needs}
    gaps = missing(needs, permissions)
    if gaps:
        raise AuthError(describe_gaps(user.username, gaps))
    return user


# --- what an admin sets up -------------------------------------------------------------------


def provision_accounts(uri: str, admin: Account, accounts: Mapping[str, Account], roles: Sequence[AccountRole] = ACCOUNTS) -> None:
    """As ``admin``: each role's account (``accounts``: role → credentials) created, or its
    password set to the given one, and granted exactly the role's grants. Run again, it changes
    nothing. The admin account itself is MLflow's to create (its auth config's admin_username
    and admin_password, at the server's first start)."""
    auth = admin.basic()
    me = current_user(uri, auth)
    if me is None:
        raise AuthError(f"MLflow {uri} runs without authentication (no basic-auth app): no accounts to create")
    if not me.is_admin:
        raise AuthError(f"MLflow account {admin.username!r} is no admin: it cannot create accounts")
    for role in roles:
        if role.admin:
            continue
        account = accounts[role.role]
        created = _call(uri, "POST", USERS_CREATE, auth, json={"username": account.username, "password": account.password.get_secret_value()})
        if created.status_code == 400 and _error(created) == "RESOURCE_ALREADY_EXISTS":
            updated = _call(uri, "PATCH", USERS_UPDATE_PASSWORD, auth, json={"username": account.username, "password": account.password.get_secret_value()})
            if updated.status_code != 200:
                raise AuthError(f"MLflow {uri}: setting the password of {account.username!r} answered {updated.status_code} ({_error(updated)})")
        elif created.status_code != 200:
            raise AuthError(f"MLflow {uri}: creating the account {account.username!r} answered {created.status_code} ({_error(created)})")
        for grant in role.grants:
            _grant(uri, auth, account.username, grant)


def _grant(uri: str, auth: tuple[str, str], username: str, grant: Grant) -> None:
    body = {"username": username, "resource_type": grant.resource_type, "resource_id": grant.pattern, "permission": grant.permission}
    response = _call(uri, "POST", PERMISSION_GRANT, auth, json=body)
    if response.status_code == 400 and _error(response) == "RESOURCE_ALREADY_EXISTS":  # granted before, perhaps otherwise: made what it should be
        revoked = _call(uri, "POST", PERMISSION_REVOKE, auth, json={k: v for k, v in body.items() if k != "permission"})
        if revoked.status_code == 200:
            response = _call(uri, "POST", PERMISSION_GRANT, auth, json=body)
    if response.status_code != 200:
        raise AuthError(f"MLflow {uri}: granting {grant.permission} on {grant.resource_type} {grant.pattern!r} to {username!r} answered {response.status_code} ({_error(response)})")


def register_webhook(uri: str, admin: Account, url: str, secret: str, name: str = "vlgate") -> str:
    """As ``admin`` (MLflow lets only admins manage webhooks): the tracking server's webhook
    for new versions registered, or pointed at ``url`` with ``secret`` (a rotated secret takes
    effect here); returns its id. The same webhook ``registry_hooks.webhook.ensure_webhook``
    registers when ``vlgate serve`` runs as an admin, or without authentication."""
    from mlflow.entities.webhook import WebhookEvent, WebhookStatus
    from mlflow.store.model_registry.rest_store import RestStore
    from mlflow.utils.rest_utils import MlflowHostCreds

    username, password = admin.basic()
    store = RestStore(lambda: MlflowHostCreds(uri, username=username, password=password))
    events = [WebhookEvent.from_str("model_version.created")]
    for hook in store.list_webhooks(max_results=1000):
        if hook.name == name:
            store.update_webhook(hook.webhook_id, url=url, secret=secret, events=events, status=WebhookStatus.ACTIVE)
            return str(hook.webhook_id)
    return str(store.create_webhook(name=name, url=url, events=events, secret=secret).webhook_id)


#: how long MLflow's auth app trusts a password it has checked. Its check is a deliberately slow
#: hash (werkzeug's scrypt) on every request: uncached, it is most of a busy server's CPU
#: (infra/README.md has the figures). The cache is per server worker; a password changed or
#: an account deleted through MLflow's API is forgotten at once on the worker that did it,
#: on the others within this time.
AUTH_CACHE_TTL_S = 60


def auth_config_text(database_uri: str, admin: Account, default_permission: PermissionName = DEFAULT_PERMISSION) -> str:
    """MLflow's basic-auth config file (``MLFLOW_AUTH_CONFIG_PATH``): where its users and grants
    live, the default for an account without a grant, the admin MLflow creates on its first
    start, and how long a checked password is trusted (:data:`AUTH_CACHE_TTL_S`). MLflow reads
    it with configparser's interpolation: ``%`` is written ``%%``."""

    def value(text: str) -> str:
        if "\n" in text or "\r" in text:
            raise ValueError("a basic-auth config value cannot hold a line break")
        return text.replace("%", "%%")

    lines = [
        "[mlflow]",
        f"default_permission = {default_permission}",
        f"database_uri = {value(database_uri)}",
        f"admin_username = {value(admin.username)}",
        f"admin_password = {value(admin.password.get_secret_value())}",
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth",
        f"auth_cache_ttl_seconds = {AUTH_CACHE_TTL_S}",
    ]
    return "\n".join(lines) + "\n"
