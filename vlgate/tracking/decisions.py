"""A validation run's decision records in MLflow: appended, never rewritten.

Each recorded judgement of a version is the run's next ``decisions/NNNN.json`` with the
policy file it was judged with beside it (``NNNN.policy.yaml``); nothing already logged
under ``decisions/`` is written again. Numbering is safe because records are appended
only under the model's gate lock (one judgement per model at a time). The version's and
the run's tags name the latest record (``vlgate.decision_record``) and show its decision;
the records themselves are the history.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate import tag_keys
from vlgate.decisions import DECISIONS_FOLDER, SINGLE_DECISION_FILE, DecisionRecord, decision_file, decision_policy_file
from vlgate.history import VersionHistory
from vlgate.tracking.paging import model_versions

if TYPE_CHECKING:
    from mlflow import MlflowClient


def numbered_records(client: MlflowClient, run_id: str) -> list[int]:
    """The numbers of the run's ``decisions/NNNN.json``, in order."""
    names = (Path(entry.path).name for entry in client.list_artifacts(run_id, DECISIONS_FOLDER))
    return sorted(int(name[:-5]) for name in names if name.endswith(".json") and name[:-5].isdigit())


def single_record(client: MlflowClient, run_id: str) -> bool:
    """Whether the run kept its one decision as ``decision.json`` (logged before records were numbered)."""
    return any(entry.path == SINGLE_DECISION_FILE for entry in client.list_artifacts(run_id))


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def next_decision_number(client: MlflowClient, run_id: str) -> int:
    """The number the run's next decision record takes. Ask under the model's gate lock,
    which makes it this judgement's alone."""
    numbers = numbered_records(client, run_id) or ([1] if single_record(client, run_id) else [])
    return (numbers[-1] if numbers else 0) + 1


def log_decision(client: MlflowClient, run_id: str, record: DecisionRecord, policy_path: Path) -> None:
    """``record``, built with its number (:func:`next_decision_number`) and the digest of
    ``policy_path``, logged as the run's ``decisions/NNNN.json`` with that policy file
    beside it; nothing already logged is written again."""
    if record.sequence is None:
        raise ValueError("a decision record is logged with its number (next_decision_number)")
    with tempfile.TemporaryDirectory() as scratch:
        policy_copy = Path(scratch) / Path(decision_policy_file(record.sequence)).name
        policy_copy.write_bytes(policy_path.read_bytes())
        client.log_artifact(run_id, str(policy_copy), artifact_path=DECISIONS_FOLDER)
    client.log_dict(run_id, record.as_json(), decision_file(record.sequence))


def _read_records(client: MlflowClient, run_id: str, last_only: bool) -> list[DecisionRecord]:
    """The run's decision records in order (``last_only``: the latest alone, one download);
    a run that kept one ``decision.json`` gives it as record 1."""
    numbers = numbered_records(client, run_id)
    with tempfile.TemporaryDirectory() as scratch:
        if not numbers:
            if not single_record(client, run_id):
                return []
            path = Path(client.download_artifacts(run_id, SINGLE_DECISION_FILE, scratch))
            return [DecisionRecord.read(path, sequence=1)]
        wanted = numbers[-1:] if last_only else numbers
        return [DecisionRecord.read(Path(client.download_artifacts(run_id, decision_file(n), scratch))) for n in wanted]


def decision_history(client: MlflowClient, run_id: str) -> list[DecisionRecord]:
    """Every decision record of the run, the first first."""
    return _read_records(client, run_id, last_only=False)


def latest_decision(client: MlflowClient, run_id: str) -> DecisionRecord | None:
    """The run's latest decision record; None when it has none."""
    latest = _read_records(client, run_id, last_only=True)
    return latest[0] if latest else None


def baseline_of(client: MlflowClient, run_id: str) -> tuple[bool, str | None]:
    """The champion the run's validation was first judged against, as its run recorded it:
    ``(True, version)``, ``(True, None)`` (it had none), or ``(False, None)`` (not judged yet)."""
    value = client.get_run(run_id).data.tags.get(tag_keys.BASELINE_CHAMPION)
    if value is None:
        return False, None
    return True, None if value == tag_keys.NO_CHAMPION else value


def version_histories(client: MlflowClient, model_name: str) -> list[VersionHistory]:
    """Every registered version of the model with its validation run's decision records,
    oldest version first: all of them, since the champion's timeline is read from every
    version's records (``vlgate.history.model_history``; its ``only`` narrows what is listed)."""
    histories = []
    for registered in model_versions(client, model_name):
        run_id = registered.tags.get(tag_keys.VALIDATION_RUN)
        records = decision_history(client, run_id) if run_id else []
        histories.append(VersionHistory(version=str(registered.version), run_id=run_id, records=records))
    return histories
