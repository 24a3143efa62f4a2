"""One-shot set-up of MLflow's accounts and webhook for ``infra/compose.yaml`` (its
``mlflow-init`` service, run by the MLflow admin once the server answers, at every
``docker compose up``): the service account ``vlgate`` and the read-only account with their
least-privilege grants, and ``vlgate serve``'s webhook with the secret vlgate.yaml's
``webhook.secret_env`` names (MLflow lets only admins manage webhooks, and ``vlgate serve``
runs as the service account). Run again, it changes nothing; with a rotated password or
webhook secret in ``infra/.env``, it sets the new one. ``vlgate stack up`` does the same
with ``vlgate.tracking.permissions`` (infra/README.md, "Authentication").

Environment: ``MLFLOW_TRACKING_URI``, ``MLFLOW_ADMIN_USERNAME``/``MLFLOW_ADMIN_PASSWORD``,
``VLGATE_MLFLOW_PASSWORD``, ``VLGATE_MLFLOW_READONLY_PASSWORD``, ``VLGATE_WEBHOOK_URL``,
``VLGATE_HOME`` (its vlgate.yaml) and the webhook secret's variable. Exit 2 with one line
when one is missing or still a ``CHANGE-ME`` placeholder of ``.env.example``."""

from __future__ import annotations

import os
import sys

from mlflow.exceptions import MlflowException
from pydantic import SecretStr, ValidationError

from vlgate.config import ConfigError
from vlgate.flows.settings import ServiceConfig
from vlgate.tracking.permissions import ADMIN, READONLY, SERVICE, Account, AuthError, provision_accounts, register_webhook

REQUIRED = ("MLFLOW_TRACKING_URI", "MLFLOW_ADMIN_PASSWORD", "VLGATE_MLFLOW_PASSWORD", "VLGATE_MLFLOW_READONLY_PASSWORD", "VLGATE_WEBHOOK_URL")


def main() -> int:
    env = os.environ
    try:
        config = ServiceConfig.load()
    except (ConfigError, ValueError) as error:
        return refuse(str(error).splitlines()[0])
    secret_env = config.webhook.secret_env
    for name in (*REQUIRED, secret_env):
        if not env.get(name):
            return refuse(f"{name} is not set (infra/.env)")
    for name in (*REQUIRED, secret_env):
        if env[name].startswith("CHANGE-ME"):
            return refuse(f"{name} is still the CHANGE-ME placeholder of .env.example: make a secret for it (infra/.env.example says how)")
    try:
        admin = Account(username=env.get("MLFLOW_ADMIN_USERNAME") or ADMIN.username, password=SecretStr(env["MLFLOW_ADMIN_PASSWORD"]))
        accounts = {
            "service": Account(username=SERVICE.username, password=SecretStr(env["VLGATE_MLFLOW_PASSWORD"])),
            "readonly": Account(username=READONLY.username, password=SecretStr(env["VLGATE_MLFLOW_READONLY_PASSWORD"])),
        }
    except ValidationError as error:  # the value is not shown: it is a password
        first = error.errors()[0]
        return refuse(f"a password is refused ({first['msg']}): MLflow needs at least 12 characters")
    uri = env["MLFLOW_TRACKING_URI"]
    try:
        provision_accounts(uri, admin, accounts)
        hook = register_webhook(uri, admin, env["VLGATE_WEBHOOK_URL"], env[secret_env])
    except (AuthError, MlflowException) as error:
        return refuse(str(error).splitlines()[0])
    print(f"mlflow-init: accounts {SERVICE.username} and {READONLY.username} with their grants on {uri}; webhook {hook} signed with {secret_env}")
    return 0


def refuse(line: str) -> int:
    print(f"mlflow-init: {line}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
