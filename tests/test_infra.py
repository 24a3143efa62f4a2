"""infra/ is configuration that must at least parse: the compose file against the Compose
Specification (after the interpolation `docker compose config` does, with .env.example as
.env), the Prefect deployments' entrypoints, and the containers' vlgate.yaml.

No Docker engine or Compose v2 CLI runs on this machine kind, so the compose file is
checked with compose-spec (a spec-compliant parser: unknown keys, bad port and device
syntax, wrong types are errors) instead of `docker compose config`."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import yaml

INFRA = Path(__file__).parent.parent / "infra"
ROOT = INFRA.parent

#: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}; $$ is a literal $
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'\"")
    return values


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation; a required variable that is unset or empty fails."""

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        value = env.get(name)
        if op in (":-", "-"):
            return value if value or (op == "-" and value is not None) else arg
        if op in (":?", "?") and not value:
            raise ValueError(f"required variable {name} is not set: {arg}")
        return value or ""

    return _VARIABLE.sub(substitute, text)


def test_interpolation_follows_compose_rules():
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("${SET}-${EMPTY:-d}-${EMPTY-d}-${UNSET:-d}-$${SET}", env) == "x-d--d-${SET}"
    with pytest.raises(ValueError, match="required variable EMPTY"):
        interpolate("${EMPTY:?set EMPTY}", env)


@pytest.mark.parametrize("profiles", [(), ("dask",)])
def test_compose_file_is_valid_compose_spec_with_the_example_env(profiles):
    from compose_spec import PyCompose

    env = read_env_file(INFRA / ".env.example")
    text = interpolate((INFRA / "compose.yaml").read_text(), env)
    document = yaml.safe_load(text)  # resolves the `<<: *anchor` merge keys as compose does
    compose = PyCompose.from_json(json.dumps(document))  # raises ValueError naming the bad key
    active = {name for name, service in document["services"].items() if not set(service.get("profiles", [])) or set(service["profiles"]) & set(profiles)}
    assert {"postgres", "mlflow", "prefect", "worker", "vlgate", "vllm"} <= active
    assert ("dask-scheduler" in active) == ("dask" in profiles)
    assert set(compose.service_names()) == set(document["services"])
    for name in active:  # every dependency of an active service is itself active
        depends = document["services"][name].get("depends_on", {})
        assert set(depends) <= active, (name, depends)
    # the MLflow server is the one the webhooks need: SQL store and loopback/http delivery allowed
    mlflow_env = document["services"]["mlflow"]["environment"]
    assert mlflow_env["MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS"] == "true" and "http" in mlflow_env["MLFLOW_WEBHOOK_ALLOWED_SCHEMES"]
    assert any(arg.startswith("--backend-store-uri=postgresql") for arg in document["services"]["mlflow"]["command"])


def test_every_required_compose_variable_is_in_the_example_env():
    required = {m.group("name") for m in _VARIABLE.finditer((INFRA / "compose.yaml").read_text()) if m.group("name") and m.group("op") in (None, ":?", "?")}
    assert required <= set(read_env_file(INFRA / ".env.example")), required - set(read_env_file(INFRA / ".env.example"))


def test_prefect_deployments_name_real_flows():
    from prefect import Flow

    document = yaml.safe_load((INFRA / "prefect.yaml").read_text())
    names = set()
    for deployment in document["deployments"]:
        path, _, attribute = deployment["entrypoint"].partition(":")
        assert (ROOT / path).is_file(), path
        module = "vlgate." + path.removesuffix(".py").replace("/", ".")
        assert isinstance(getattr(importlib.import_module(module), attribute), Flow), deployment["entrypoint"]
        names.add(deployment["name"])
    assert names == {"vlgate-validate", "vlgate-drift"}


def test_container_service_config_loads():
    from vlgate.flows.settings import ServiceConfig

    assert (INFRA / "vlgate.yaml").is_file()
    config = ServiceConfig.load(INFRA)  # the file the containers mount as $VLGATE_HOME/vlgate.yaml
    assert config.models, "infra/vlgate.yaml names no model"
    assert all(model.suite.is_absolute() and str(model.suite).startswith(str(INFRA)) for model in config.models.values())
