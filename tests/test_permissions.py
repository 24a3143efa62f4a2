"""The pure parts of MLflow authentication (vlgate/tracking/permissions.py): the accounts and
their grants, the permission table copied from MLflow's, the auth config file as MLflow reads
it, what ``vlgate serve`` needs and the line naming what is missing. The servers' side is in
test_stack_auth.py."""

from __future__ import annotations

import pytest

from vlgate.tracking import permissions
from vlgate.tracking.permissions import ACCOUNTS, ADMIN, CAPABILITIES, READONLY, SERVICE, Account, Need, describe_gaps, missing, service_needs


def test_the_capability_table_is_mlflows():
    from mlflow.server.auth.permissions import ALL_PERMISSIONS

    theirs = {
        name: {capability for capability in ("read", "use", "update", "delete", "manage") if getattr(permission, f"can_{capability}")}
        for name, permission in ALL_PERMISSIONS.items()
    }
    assert theirs == {name: set(capabilities) for name, capabilities in CAPABILITIES.items()}
    assert permissions.DEFAULT_PERMISSION in ALL_PERMISSIONS


def test_each_account_has_the_least_it_needs():
    by_role = {role.role: role for role in ACCOUNTS}
    assert set(by_role) == {"admin", "service", "readonly"} and len({role.username for role in ACCOUNTS}) == 3
    assert ADMIN.admin and not SERVICE.admin and not READONLY.admin and ADMIN.grants == ()
    # the service account edits (tags, versions, the alias) but deletes and manages nothing; wildcards cover models registered later
    assert {(g.resource_type, g.pattern, g.permission) for g in SERVICE.grants} == {("registered_model", "*", "EDIT"), ("experiment", "*", "EDIT")}
    assert {(g.resource_type, g.pattern, g.permission) for g in READONLY.grants} == {("registered_model", "*", "READ"), ("experiment", "*", "READ")}
    for role in ACCOUNTS:
        for grant in role.grants:
            assert not {"delete", "manage"} & CAPABILITIES[grant.permission], (role.username, grant)
    # an account nobody granted anything sees nothing (MLflow's own default would be READ)
    assert CAPABILITIES[permissions.DEFAULT_PERMISSION] == frozenset()


def test_a_password_shows_only_in_the_credentials_file_json():
    account = Account(username="vlgate", password="a-secret-password-1")
    assert "a-secret-password-1" not in repr(account) and "a-secret-password-1" not in str(account)
    assert '"a-secret-password-1"' in account.model_dump_json()
    assert account.basic() == ("vlgate", "a-secret-password-1")
    with pytest.raises(ValueError) as refused:
        Account(username="vlgate", password="hunter2")  # MLflow refuses passwords under 12 characters
    assert "hunter2" not in str(refused.value)


def test_the_auth_config_file_reads_back_as_mlflow_reads_it(tmp_path, monkeypatch):
    from mlflow.server.auth.config import read_auth_config

    admin = Account(username="vlgate-admin", password="50%-of-a-password")
    path = tmp_path / "auth.ini"
    path.write_text(permissions.auth_config_text("postgresql+psycopg2://postgres@127.0.0.1:5432/vlgate_x_auth", admin))
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    config = read_auth_config()
    assert config.default_permission == "NO_PERMISSIONS"
    assert config.database_uri == "postgresql+psycopg2://postgres@127.0.0.1:5432/vlgate_x_auth"
    assert (config.admin_username, config.admin_password) == ("vlgate-admin", "50%-of-a-password")
    assert config.authorization_function == "mlflow.server.auth:authenticate_request_basic_auth"
    assert config.auth_cache_ttl_seconds == permissions.AUTH_CACHE_TTL_S > 0  # a checked password trusted a while: the check is a slow hash
    with pytest.raises(ValueError, match="line break"):
        permissions.auth_config_text("sqlite:///x.db\nadmin_username = someone", admin)


def test_serve_needs_read_and_edit_on_its_models_and_its_experiments():
    needs = service_needs(["b", "a"], any_model=True, experiments={"vlgate/a": "7", "vlgate/b": None})
    keys = [(n.resource_type, n.resource_id, n.capability) for n in needs]
    assert keys == [
        ("registered_model", "a", "read"),
        ("registered_model", "a", "update"),
        ("registered_model", "b", "read"),
        ("registered_model", "b", "update"),
        ("registered_model", "*", "read"),  # a default: entry: any registered model
        ("registered_model", "*", "update"),
        ("experiment", "*", "read"),
        ("experiment", "7", "update"),  # vlgate/b does not exist yet: the account creates it and manages it
    ]
    service = {key: "EDIT" for key in [(n.resource_type, n.resource_id) for n in needs]}
    assert missing(needs, service) == []
    readonly = {key: "READ" for key in service}
    gaps = missing(needs, readonly)
    assert [(need.resource_id, need.capability) for need, _ in gaps] == [("a", "update"), ("b", "update"), ("*", "update"), ("7", "update")]
    line = describe_gaps("vlgate-readonly", gaps)
    assert "\n" not in line and line.startswith("MLflow account 'vlgate-readonly' cannot set tags on registered model 'a''s versions and move its champion alias")
    assert "needs EDIT on registered model 'a' (it has READ)" in line and line.endswith("and 3 more")
    assert missing([Need(what="x", resource_type="experiment", resource="*", resource_id="*", capability="read")], {("experiment", "*"): "DENY"})


def test_nothing_to_check_without_a_tracking_server(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    assert permissions.current_user() is None and permissions.authenticated_user() is None
    assert permissions.check_service_account(["m"], any_model=False) is None
    assert permissions.can_manage_registered_model("m", "anyone")  # no authentication: every caller may do everything
