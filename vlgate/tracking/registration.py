"""Registered versions: registering a checkpoint folder (refusing one whose links leave
it), waiting for a version the registry does not answer for yet, and the ``champion``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate import tag_keys
from vlgate.tracking.naming import validation_experiment
from vlgate.tracking.paging import model_versions
from vlgate.tracking.runs import create_run_once, experiment_id
from vlgate.versions import VersionRef, model_name_problem

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

CHAMPION = "champion"


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be registered as it is (bad input: exit 2)."""


def links_leaving(folder: Path) -> list[tuple[Path, Path]]:
    """Every symbolic link under ``folder`` (as ``os.walk`` meets them, which is how MLflow
    uploads a folder) whose target lies outside it, or does not exist: (link, target)."""
    root = Path(folder).resolve()
    leaving = []
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent) / name
            if path.is_symlink():
                target = path.resolve()
                if not target.exists() or not target.is_relative_to(root):
                    leaving.append((path, target))
    return leaving


def check_uploadable(folder: Path) -> None:
    """CheckpointError unless every file MLflow would upload from ``folder`` lies inside it."""
    leaving = links_leaving(folder)
    if leaving:
        link, target = leaving[0]
        more = f" (and {len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise CheckpointError(
            f"{folder}: {link.relative_to(folder)} links to {target}, outside the checkpoint{more}; nothing was uploaded. "
            "Register a copy with its links resolved (cp -rL), or download with --local-dir"
        )


#: what a model registered through vlgate says of itself in MLflow's registry
REGISTERED_MODEL_DESCRIPTION = (
    "Validated by vlgate: every version is evaluated on the model's suite and judged by its gate policy "
    "(logical consistency as well as accuracy); the `champion` alias moves only when the gate promotes a version. "
    f"Each version's validation run, with its decision records and report, is named by its tag `{tag_keys.VALIDATION_RUN}`."
)


def register_checkpoint(client: MlflowClient, model_name: str, folder: Path, description: str = "", tags: dict[str, str] | None = None, home: Path | None = None) -> ModelVersion:
    """Log a checkpoint folder as an MLflow logged model (made by a registration run, kept
    in the model's validation experiment) and register it as a new version of
    ``model_name`` (a tracking server refuses a version whose source is a bare local path,
    so the checkpoint is uploaded first). Idempotent per checkpoint content: the same
    weights registered twice give the existing version back.

    A folder with a link out of it is refused before anything is uploaded: MLflow copies a
    linked file's content, so ``secrets -> ~/.ssh/id_ed25519`` would land in the artifact
    store for everyone who can read the model. Links inside the folder are fine."""
    from mlflow.exceptions import MlflowException

    from vlgate.evaluators.backends.loading import model_digest

    problem = model_name_problem(model_name)
    if problem:
        raise CheckpointError(f"model name {model_name!r}: {problem}; nothing was uploaded")
    check_uploadable(folder)
    digest = model_digest(folder)
    try:
        client.create_registered_model(model_name, description=REGISTERED_MODEL_DESCRIPTION)
    except MlflowException:
        pass  # exists (its description is its owner's)
    for version in model_versions(client, model_name):
        if version.tags.get(tag_keys.CHECKPOINT_DIGEST) == digest:
            return version
    experiment = experiment_id(client, f"{model_name} (registrations)", home)
    run_id = create_run_once(client, experiment, Path(folder).name, {tag_keys.KIND: tag_keys.RunKind.REGISTRATION, tag_keys.CHECKPOINT_DIGEST: digest})
    # the logged model lives where the versions' validation runs do: MLflow's run page finds a
    # run's input models in the run's own experiment only. A user who may not write there
    # (a tracking server's auth: vlgate/NAME made by the service) keeps it with the
    # registration run: the version registers, and its run page lists no registered model
    name, model_tags = logged_model_name(Path(folder).name), {tag_keys.CHECKPOINT_DIGEST: digest}
    try:
        model = client.create_logged_model(experiment_id(client, validation_experiment(model_name), home), name=name, source_run_id=run_id, tags=model_tags)
    except MlflowException as error:
        if error.error_code != "PERMISSION_DENIED":
            raise
        model = client.create_logged_model(experiment, name=name, source_run_id=run_id, tags=model_tags)
    client.log_model_artifacts(model.model_id, str(folder))
    client.finalize_logged_model(model.model_id, "READY")
    client.set_terminated(run_id)
    version = client.create_model_version(
        model_name, f"models:/{model.model_id}", run_id=run_id, description=description, tags={tag_keys.CHECKPOINT_DIGEST: digest, **(tags or {})}, model_id=model.model_id,
    )  # fmt: skip
    name_registered_version(client, model.model_id, model_name, str(version.version))
    return version


def logged_model_name(folder_name: str) -> str:
    """A checkpoint folder's name as a logged model's, which MLflow refuses with any of
    ``/ : . % " '`` in it (``llava-1.5`` → ``llava-1-5``)."""
    return re.sub(r"[/:.%\"']", "-", folder_name) or "checkpoint"


def name_registered_version(client: MlflowClient, model_id: str, model_name: str, version: str) -> None:
    """The logged model's ``mlflow.modelVersions`` tag names ``model_name`` v``version``, as
    MLflow's own ``register_model`` and tracking server write it (a store reached without the
    server writes nothing): MLflow's run page lists a run's registered models from its
    logged models' tags."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    named = json.loads(client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS) or "[]")
    entry = {"name": model_name, "version": version}
    if entry not in named:
        client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps([*named, entry])})


def version_logged_model(version: ModelVersion) -> str | None:
    """The id of the logged model a version was registered from (MLflow 3), where it names
    one: its ``model_id``, or a ``models:/m-...`` source a store without the server keeps."""
    if getattr(version, "model_id", None):
        return str(version.model_id)
    source = version.source or ""
    if source.startswith("models:/m-") and "/" not in source[len("models:/") :]:
        return source[len("models:/") :]
    return None


def wait_for_version(client: MlflowClient, subject: VersionRef, timeout_s: float = 120.0, first_wait_s: float = 1.0) -> ModelVersion:
    """The registered version, waited for: a webhook can arrive before the registry
    answers for the version it announces, and a tracking server can be away for a
    moment. Retries with doubling waits until ``timeout_s``, then raises the last error
    (the caller records it; a transient fault never becomes a verdict before that)."""
    import time

    from mlflow.exceptions import MlflowException

    deadline, wait = time.monotonic() + timeout_s, first_wait_s
    while True:
        try:
            return client.get_model_version(subject.model, subject.version)
        except MlflowException:
            if time.monotonic() + wait > deadline:
                raise
        time.sleep(wait)
        wait *= 2


def champion_version(client: MlflowClient, model_name: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(model_name, CHAMPION).version)  # an int from some stores
    except MlflowException:
        return None
