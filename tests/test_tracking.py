"""Which MLflow store ``tracking.connect`` picks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlgate import tag_keys, tracking
from vlgate.versions import VersionRef

pytestmark = pytest.mark.service


def test_a_second_home_gets_its_own_store_though_mlflow_exported_the_first(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first, second = tmp_path / "a", tmp_path / "b"
    assert tracking.connect(first).tracking_uri == f"sqlite:///{first.resolve()}/mlflow/mlflow.db"
    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI for subprocesses ...
    import os

    assert os.environ["MLFLOW_TRACKING_URI"].startswith(f"sqlite:///{first.resolve()}")
    # ... which must not send another home's client to the first home's store
    assert tracking.connect(second).tracking_uri == f"sqlite:///{second.resolve()}/mlflow/mlflow.db"


def test_an_older_exported_uri_put_back_by_a_restore_does_not_redirect_a_later_home(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first = tracking.connect(tmp_path / "a").tracking_uri
    saved = os.environ["MLFLOW_TRACKING_URI"]  # code that saves the variable around its own connection ...
    tracking.connect(tmp_path / "b")
    os.environ["MLFLOW_TRACKING_URI"] = saved  # ... and puts the older value back afterwards
    assert saved == first
    assert tracking.connect(tmp_path / "c").tracking_uri == f"sqlite:///{(tmp_path / 'c').resolve()}/mlflow/mlflow.db"


def test_the_users_tracking_uri_wins_over_the_home(tmp_path, monkeypatch):
    tracking.connect(tmp_path / "a")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert tracking.tracking_uri(tmp_path / "b") == "http://127.0.0.1:5999"


def _registered_version(tmp_path, monkeypatch):
    from vlgate.registry_hooks.claims import ClaimStore

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    client.create_registered_model("m")
    run = client.create_run(tracking.experiment_id(client, "m (registrations)", tmp_path))
    version = client.create_model_version("m", f"{run.info.artifact_uri}/checkpoint", run_id=run.info.run_id).version
    claims = ClaimStore.for_home(tmp_path)
    assert claims.claim(VersionRef(model="m", version=version), via="manual")
    return client, claims, version


class RetriedCreate:
    """The MLflow client as seen when the tracking server commits a run, dies before
    answering, and the client's retry of the POST makes a second run."""

    def __init__(self, client):
        self.client, self.creates = client, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def create_run(self, *args, **kwargs):
        self.creates += 1
        self.client.create_run(*args, **kwargs)  # committed, answer lost
        return self.client.create_run(*args, **kwargs)


def test_create_run_once_deletes_the_twin_a_retried_post_made(tmp_path, monkeypatch):
    from mlflow.entities import ViewType

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    experiment = tracking.experiment_id(client, "drift checks", tmp_path)
    retried = RetriedCreate(client)
    first = tracking.create_run_once(retried, experiment, "check 1", {"vlgate.kind": "drift"})
    second = tracking.create_run_once(retried, experiment, "check 2", {"vlgate.kind": "drift"})
    assert retried.creates == 2
    active = {r.info.run_id: r.info.run_name for r in client.search_runs([experiment])}
    assert active == {first: "check 1", second: "check 2"}  # one per call; fresh tokens keep two checks apart
    assert len(client.search_runs([experiment], run_view_type=ViewType.DELETED_ONLY)) == 2


def test_a_retried_create_leaves_one_validation_run(tmp_path, monkeypatch):
    from vlgate.flows import recording

    client, claims, version = _registered_version(tmp_path, monkeypatch)
    run_id = recording.ensure_validation_run(RetriedCreate(client), claims, VersionRef(model="m", version=version))
    experiment = client.get_experiment_by_name(tracking.validation_experiment("m")).experiment_id
    active = client.search_runs([experiment])
    assert [r.info.run_id for r in active] == [run_id]
    assert claims.get(VersionRef(model="m", version=version)).run_id == run_id
    assert client.get_model_version("m", version).tags[tag_keys.VALIDATION_RUN] == run_id
    from mlflow.entities import ViewType

    deleted = client.search_runs([experiment], run_view_type=ViewType.DELETED_ONLY)
    assert len(deleted) == 1 and deleted[0].info.start_time >= client.get_run(run_id).info.start_time


def test_a_run_made_before_a_crash_is_reused_not_doubled(tmp_path, monkeypatch):
    from vlgate.flows import recording

    client, claims, version = _registered_version(tmp_path, monkeypatch)
    first = recording.ensure_validation_run(client, claims, VersionRef(model="m", version=version))
    claims.record_run(VersionRef(model="m", version=version), "")  # the flow died before recording the run in the claim
    assert claims.get(VersionRef(model="m", version=version)).run_id == ""
    counting = RetriedCreate(client)
    assert recording.ensure_validation_run(counting, claims, VersionRef(model="m", version=version)) == first
    assert counting.creates == 0


def _checkpoint(folder, marker: str):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(f'{{"marker": "{marker}"}}')
    return folder


def test_a_deleted_and_registered_again_version_is_not_served_from_the_old_download(tmp_path, monkeypatch):
    """The model cache was keyed by ``models:/NAME/VERSION``: after the model was deleted
    and registered again, its new v1 was evaluated with the old v1's weights."""
    import json

    from vlgate.evaluators.backends.loading import resolve_model

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    home, cache = tmp_path / "home", tmp_path / "cache"
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "m", _checkpoint(tmp_path / "old", "old"), home=home)
    assert json.loads((resolve_model("models:/m/1", cache) / "config.json").read_text())["marker"] == "old"
    client.delete_registered_model("m")
    tracking.register_checkpoint(client, "m", _checkpoint(tmp_path / "new", "new"), home=home)
    assert json.loads((resolve_model("models:/m/1", cache) / "config.json").read_text())["marker"] == "new"


def test_an_alias_is_resolved_to_its_version_each_time(tmp_path, monkeypatch):
    import json

    from vlgate.evaluators.backends.loading import resolve_model

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    home, cache = tmp_path / "home", tmp_path / "cache"
    client = tracking.connect(home)
    for marker in ("first", "second"):
        tracking.register_checkpoint(client, "m", _checkpoint(tmp_path / marker, marker), home=home)
    client.set_registered_model_alias("m", tracking.CHAMPION, "1")
    assert json.loads((resolve_model("models:/m@champion", cache) / "config.json").read_text())["marker"] == "first"
    # a model registered through vlgate says what moves its alias; one its owner described keeps the owner's words
    from vlgate.tracking.registration import REGISTERED_MODEL_DESCRIPTION

    assert client.get_registered_model("m").description == REGISTERED_MODEL_DESCRIPTION and "`champion` alias moves only" in REGISTERED_MODEL_DESCRIPTION
    client.create_registered_model("own", description="the team's words")
    tracking.register_checkpoint(client, "own", _checkpoint(tmp_path / "own", "own"), home=home)
    assert client.get_registered_model("own").description == "the team's words"
    client.set_registered_model_alias("m", tracking.CHAMPION, "2")
    assert json.loads((resolve_model("models:/m@champion", cache) / "config.json").read_text())["marker"] == "second"


def test_a_version_announced_before_the_registry_serves_it_is_waited_for():
    from mlflow.exceptions import MlflowException

    class LateRegistry:
        def __init__(self, misses: int):
            self.misses, self.calls = misses, 0

        def get_model_version(self, name, version):
            self.calls += 1
            if self.calls <= self.misses:
                raise MlflowException(f"Model Version (name={name}, version={version}) not found", error_code="RESOURCE_DOES_NOT_EXIST")
            return (name, version)

    late = LateRegistry(misses=3)
    assert tracking.wait_for_version(late, VersionRef(model="m", version="1"), timeout_s=5, first_wait_s=0.01) == ("m", "1")
    assert late.calls == 4
    never = LateRegistry(misses=10**6)
    with pytest.raises(MlflowException):
        tracking.wait_for_version(never, VersionRef(model="m", version="1"), timeout_s=0.2, first_wait_s=0.01)
    assert 4 <= never.calls <= 6  # waits 0.01, 0.02, 0.04, 0.08 within 0.2 s: doubling, then it gives up


def test_a_server_that_does_not_answer_is_transient_and_a_refusal_is_not(monkeypatch):
    """What the flow defers (retries later) and what it records as a failure: MLflow's
    client wraps a refused connection in an MlflowException whose context holds it."""
    import socket

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}", registry_uri=f"http://127.0.0.1:{port}")
    with pytest.raises(MlflowException) as unreachable:
        client.get_model_version("m", "1")
    assert tracking.transient(unreachable.value)
    assert not tracking.transient(MlflowException("Registered Model with name=m not found", error_code="RESOURCE_DOES_NOT_EXIST"))
    assert not tracking.transient(ValueError("suite: no such file"))
    try:
        try:
            raise ConnectionResetError("connection reset by peer")
        except ConnectionResetError as cause:
            raise RuntimeError("task failed") from cause
    except RuntimeError as wrapped:
        assert tracking.transient(wrapped)
    from prefect.task_engine import TaskRunTimeoutError

    assert not tracking.transient(TaskRunTimeoutError("Task run exceeded timeout of 1.0 second(s)"))  # the task's own limit: final


def test_register_refuses_a_checkpoint_with_a_link_out_of_its_folder_and_uploads_nothing(tmp_path, monkeypatch, capsys):
    """``vlgate register`` uploaded what links pointed at: a checkpoint with ``notes.txt ->
    ~/.ssh/id_ed25519`` put the key into the artifact store. A link inside the folder is fine."""
    from vlgate.cli.main import main

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    checkpoint = _checkpoint(tmp_path / "ckpt", "linked")
    (checkpoint / "notes.txt").symlink_to(secret)
    assert main(["register", "m", str(checkpoint)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "notes.txt" in error[0] and str(secret) in error[0]
    client = tracking.connect(home)
    assert tracking.model_versions(client, "m") == []
    assert [run for experiment in client.search_experiments() for run in client.search_runs([experiment.experiment_id])] == []

    (checkpoint / "notes.txt").unlink()
    (checkpoint / "alias.json").symlink_to(checkpoint / "config.json")  # inside: uploaded as its content
    assert main(["register", "m", str(checkpoint)]) == 0
    [version] = tracking.model_versions(client, "m")
    import mlflow

    downloaded = Path(mlflow.artifacts.download_artifacts(artifact_uri="models:/m/1", dst_path=str(tmp_path / "down")))
    assert sorted(p.name for p in downloaded.iterdir()) == ["alias.json", "config.json"]
    assert (downloaded / "alias.json").read_text() == (checkpoint / "config.json").read_text()


def test_a_checkpoint_folder_named_with_dots_registers_as_a_logged_model_named_without_them(tmp_path, monkeypatch):
    """MLflow refuses ``. / : % " '`` in a logged model's name; a folder such as
    ``llava-1.5`` registers all the same, its logged model named ``llava-1-5``."""
    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    client = tracking.connect(home)
    version = tracking.register_checkpoint(client, "m", _checkpoint(tmp_path / "llava-1.5", "dots"), home=home)
    assert client.get_logged_model(tracking.version_logged_model(version)).name == "llava-1-5"


def test_a_user_who_may_not_write_to_the_validations_experiment_still_registers(tmp_path, monkeypatch):
    """Behind a tracking server's auth, ``vlgate/NAME`` may be the service's, where a team's
    account only reads: the logged model then stays with the registration run (the double
    below answers as MLflow's server does, PERMISSION_DENIED) and the version registers,
    loadable as ever."""
    import mlflow
    from mlflow.exceptions import RestException

    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    client = tracking.connect(home)
    validations = tracking.experiment_id(client, tracking.validation_experiment("m"), home)
    create = client.create_logged_model

    def refused_in_validations(experiment_id, **kwargs):
        if experiment_id == validations:
            raise RestException({"error_code": "PERMISSION_DENIED", "message": "Permission denied"})
        return create(experiment_id, **kwargs)

    monkeypatch.setattr(client, "create_logged_model", refused_in_validations)
    version = tracking.register_checkpoint(client, "m", _checkpoint(tmp_path / "ckpt", "mine"), home=home)
    logged = client.get_logged_model(tracking.version_logged_model(version))
    assert logged.experiment_id == client.get_experiment_by_name("m (registrations)").experiment_id != validations
    downloaded = Path(mlflow.artifacts.download_artifacts(artifact_uri="models:/m/1", dst_path=str(tmp_path / "down")))
    assert json.loads((downloaded / "config.json").read_text()) == {"marker": "mine"}


@pytest.mark.parametrize("name", ["team/model", "team:model", "  ", ".."])
def test_register_refuses_a_name_the_registry_would_refuse_and_uploads_nothing(name, tmp_path, monkeypatch, capsys):
    """``vlgate register team/model ./ck`` uploaded the checkpoint and then failed with a
    traceback when MLflow refused the name: now one line, exit 2, no run, no version."""
    from vlgate.cli.main import main

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    checkpoint = _checkpoint(tmp_path / "ckpt", "named")
    assert main(["register", name, str(checkpoint)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"vlgate register: model name {name!r}:") and error[0].endswith("nothing was uploaded")
    client = tracking.connect(home)
    assert [run for experiment in client.search_experiments() for run in client.search_runs([experiment.experiment_id])] == []
    assert client.search_registered_models() == []
    with pytest.raises(tracking.CheckpointError, match="nothing was uploaded"):  # the library path refuses it too
        tracking.register_checkpoint(client, name, checkpoint, home=home)
    assert [run for experiment in client.search_experiments() for run in client.search_runs([experiment.experiment_id])] == []


def test_every_page_of_runs_is_read(tmp_path):
    """``search_all_runs`` follows MLflow's page tokens: 5 drift runs read 2 per page are
    all found, newest first, and the validation ones are not among them; one page of 2
    would have kept the newest two."""
    client = tracking.connect(tmp_path)
    experiment = tracking.experiment_id(client, tracking.validation_experiment("m"), tmp_path)
    made = []
    for n in range(6):
        kind = "validation" if n == 2 else "drift"
        run = client.create_run(experiment, tags={"vlgate.kind": kind}, start_time=1_000 + n)
        made.append((run.info.run_id, kind))
    drift = "tags.`vlgate.kind` = 'drift'"
    found = [run.info.run_id for run in tracking.search_all_runs(client, [experiment], drift, page_size=2)]
    assert found == [run_id for run_id, kind in reversed(made) if kind == "drift"]
    assert len(client.search_runs([experiment], drift, max_results=2)) == 2


class ConcurrentDatasetInsert:
    """The MLflow client as seen by the validation of one version while another version of
    the same model logs the same data set: the other's insert lands between this store's
    look-up and its insert, and the store refuses this one with the database's message."""

    def __init__(self, client, other_run_id: str, refusal: str):
        self.client, self.other_run_id, self.refusal, self.calls = client, other_run_id, refusal, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def log_inputs(self, run_id, datasets=None, **kwargs):
        from mlflow.exceptions import MlflowException

        self.calls += 1
        if self.calls == 1:
            self.client.log_inputs(self.other_run_id, datasets=datasets)
            raise MlflowException(self.refusal)
        return self.client.log_inputs(run_id, datasets=datasets, **kwargs)


POSTGRES_REFUSAL = 'RestException: BAD_REQUEST: (psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint "dataset_pk"'


def test_a_data_set_logged_by_two_versions_at_once_is_logged_on_both_runs_once(tmp_path, monkeypatch):
    from vlgate.evaluators.running.suite import Suite
    from vlgate.flows import recording

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    experiment = tracking.experiment_id(client, tracking.validation_experiment("m"), tmp_path)
    this, other = (client.create_run(experiment).info.run_id for _ in range(2))
    (tmp_path / "mc").mkdir()
    (tmp_path / "mc" / "records.jsonl").write_text("{}\n")
    suite = Suite.model_validate({"name": "s", "evaluators": {"lcm-mc": {"data": str(tmp_path / "mc")}}})
    racing = ConcurrentDatasetInsert(client, other, POSTGRES_REFUSAL)
    recording.log_suite_datasets(racing, this, suite)
    assert racing.calls == 2
    logged = {run: [(d.dataset.name, d.dataset.digest) for d in client.get_run(run).inputs.dataset_inputs] for run in (this, other)}
    assert logged[this] == logged[other] == [("lcm-mc: mc", recording.data_digest(str(tmp_path / "mc")))]


def test_a_data_set_refused_for_another_reason_is_not_logged_again(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException

    from vlgate.evaluators.running.suite import Suite
    from vlgate.flows import recording

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    experiment = tracking.experiment_id(client, tracking.validation_experiment("m"), tmp_path)
    this, other = (client.create_run(experiment).info.run_id for _ in range(2))
    suite = Suite.model_validate({"name": "s", "evaluators": {"lcm-mc": {"data": str(tmp_path)}}})
    racing = ConcurrentDatasetInsert(client, other, "RESOURCE_DOES_NOT_EXIST: Run not found")
    with pytest.raises(MlflowException, match="Run not found"):
        recording.log_suite_datasets(racing, this, suite)
    assert racing.calls == 1 and not client.get_run(this).inputs.dataset_inputs


def test_a_table_logged_again_replaces_the_first_and_is_the_file_mlflows_own_log_table_writes(tmp_path, monkeypatch):
    import pandas as pd
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    experiment = tracking.experiment_id(client, "tables", tmp_path)
    ours, theirs = (client.create_run(experiment).info.run_id for _ in range(2))
    frame = pd.DataFrame({"id": ["a", "b", "c"], "p_lc": [0.25, None, 1.0], "category": ["x", "y", "x"]})
    breakdown = pd.DataFrame({"category": ["x", "y"], "acc": [0.5, 1.0]})

    tracking.log_tables(client, ours, {"tables/e.json": frame.iloc[:2], "tables/e.by_category.json": breakdown})
    tracking.log_tables(client, ours, {"tables/e.json": frame})  # a later look: replaces, never appends
    client.log_table(theirs, data=frame, artifact_file="tables/e.json")
    client.log_table(theirs, data=breakdown, artifact_file="tables/e.by_category.json")

    def stored(run_id: str, path: str) -> bytes:
        return Path(client.download_artifacts(run_id, path, str(tmp_path / run_id))).read_bytes()

    assert stored(ours, "tables/e.json") == stored(theirs, "tables/e.json")
    assert stored(ours, "tables/e.by_category.json") == stored(theirs, "tables/e.by_category.json")
    loaded = client.load_table(experiment, "tables/e.json", run_ids=[ours])
    assert list(loaded["id"]) == ["a", "b", "c"]  # three rows, not two and three
    tags = {run_id: client.get_run(run_id).data.tags[MLFLOW_LOGGED_ARTIFACTS] for run_id in (ours, theirs)}
    assert sorted(json.loads(tags[ours]), key=str) == sorted(json.loads(tags[theirs]), key=str)
