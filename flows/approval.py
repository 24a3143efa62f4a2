"""A person's sign-off on a version awaiting approval (``vlgate approve``, ``vlgate reject``;
docs/service.md, "Human sign-off").

Each one is a record appended to the version's validation run, as any judgement is: who
(``judged_by.user``; ``verified`` only where the deployment authenticates them), when and why
(``note``). An approval moves the alias under the model's gate lock, and only from the
champion the version was judged against; when another version took the alias meanwhile,
the version is judged again against today's champion first, and the approval applies only
if that judgement passes too. An approval later than the policy's ``expires_after`` is
recorded as expired and moves nothing. The policy whose sign-off rules apply is the one the
awaiting decision was judged with (its record keeps it).
"""

from __future__ import annotations

import getpass
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import BaseModel, ConfigDict

from vlgate import tag_keys, tracking
from vlgate.decisions import DecisionKind, DecisionRecord, Outcome
from vlgate.flows import notifying
from vlgate.flows.judgement import ValidationError, judge_again
from vlgate.flows.recording import judge_identity, write_decision_tags
from vlgate.flows.settings import ServiceConfig, prepare_environment
from vlgate.gate.policy import ApprovalPolicy, GatePolicy
from vlgate.registry_hooks.locks import NamedLocks
from vlgate.registry_hooks.state_db import StateDatabase

if TYPE_CHECKING:
    from mlflow import MlflowClient


class ApprovalRefused(ValidationError):
    """The person is not among the policy's approvers: nothing is recorded."""


class SignOff(BaseModel):
    """What ``vlgate approve|reject`` prints: the record it appended (and, where the alias had
    moved on, the re-judgement made first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str
    run_id: str
    record: DecisionRecord
    rejudged: DecisionRecord | None = None

    def as_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"model": self.model, "version": self.version, "run_id": self.run_id}
        return shown | self.record.as_json() | ({"rejudged": self.rejudged.as_json()} if self.rejudged is not None else {})


def default_person() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return "unknown"


def sign_off(model: str, version: str, approve: bool, reason: str, by: str | None = None, now: datetime | None = None) -> SignOff:
    """Approve (``approve``) or reject the version awaiting approval, as ``by`` (the
    operating-system user by default, recorded as unverified)."""
    home = prepare_environment()
    client = tracking.connect()
    run_id = client.get_model_version(model, version).tags.get(tag_keys.VALIDATION_RUN)
    if not run_id:
        raise ValidationError(f"{model} v{version} has no validation run yet (vlgate validate {model} {version})")
    person = by or default_person()
    rejudged = None
    awaiting = _awaiting(client, model, version, run_id)
    approval = GatePolicy.model_validate(awaiting.policy).approval
    if approval is not None and approval.approvers and person not in approval.approvers:
        raise ApprovalRefused(f"{person} is not among the policy's approvers ({', '.join(approval.approvers)}): nothing recorded")
    current = tracking.champion_version(client, model)
    if approve and current not in (awaiting.champion_before, version) and not _expired(awaiting, approval, now):
        # judged against a champion that no longer holds the alias: against today's first
        configured = ServiceConfig.load(home).for_model(model)
        policy_path = str(configured.policy) if configured is not None else awaiting.policy_path
        if policy_path is None:
            raise ValidationError(f"{model} is not configured in vlgate.yaml: no policy to judge it again against v{current}")
        rejudged = judge_again(model, version, policy_path, record=True, against_current=True).judged
        if rejudged.outcome is not Outcome.AWAITING_APPROVAL:
            return SignOff(model=model, version=version, run_id=run_id, record=rejudged)
    with NamedLocks(StateDatabase.for_home(home)).hold(f"gate:{model}"):
        awaiting = _awaiting(client, model, version, run_id)  # under the lock: nobody judged it meanwhile
        current = tracking.champion_version(client, model)
        identity = judge_identity().model_copy(update={"user": person, "verified": False})
        moment = now or datetime.now(UTC)
        update: dict[str, object] = {"judged_at": moment, "judged_by": identity, "note": reason, "sequence": None, "alias_moved": False, "champion_after": current}
        if _expired(awaiting, approval, now):
            update |= {"kind": DecisionKind.APPROVAL, "outcome": Outcome.APPROVAL_EXPIRED, "reasons": [f"approval by {person} came after {approval.expires_after if approval else '?'}: {reason}"]}
        elif not approve:
            update |= {"kind": DecisionKind.REJECTION, "outcome": Outcome.REJECTED, "reasons": [f"rejected by {person}: {reason}"]}
        elif current not in (awaiting.champion_before, version):  # moved again since the re-judgement: judge again
            raise ValidationError(f"v{current} took the alias meanwhile: run vlgate approve {model} {version} again")
        else:
            moves = current != version
            if moves:
                client.set_registered_model_alias(model, tracking.CHAMPION, version)
            update |= {"kind": DecisionKind.APPROVAL, "outcome": Outcome.PROMOTED, "reasons": [f"approved by {person}: {reason}"], "champion_after": version, "alias_moved": moves}
        record = _append(client, run_id, awaiting.model_copy(update=update))
        write_decision_tags(client, model, version, run_id, record.outcome, record.reasons, record=record.sequence)
    channels = ServiceConfig.load(home).notify_channels(model)
    notifying.tell(home, notifying.decision_notification(model, version, run_id, record, None, None, None), channels)
    notifying.deliver_now(home, ServiceConfig.load(home).all_channels())
    return SignOff(model=model, version=version, run_id=run_id, record=record, rejudged=rejudged)


def _awaiting(client: MlflowClient, model: str, version: str, run_id: str) -> DecisionRecord:
    latest = tracking.latest_decision(client, run_id)
    if latest is None or latest.outcome is not Outcome.AWAITING_APPROVAL:
        shown = latest.outcome.value if latest is not None else "none yet"
        raise ValidationError(f"{model} v{version} is not awaiting approval (its latest decision: {shown})")
    return latest


def _expired(awaiting: DecisionRecord, approval: ApprovalPolicy | None, now: datetime | None) -> bool:
    if approval is None or awaiting.judged_at is None:
        return False
    return (now or datetime.now(UTC)) > awaiting.judged_at + approval.expires_after


def _append(client: MlflowClient, run_id: str, record: DecisionRecord) -> DecisionRecord:
    """The record appended with the policy it applies beside it (the awaiting decision's, as judged)."""
    with tempfile.TemporaryDirectory() as scratch:
        policy = Path(scratch) / "policy.yaml"
        policy.write_text(yaml.safe_dump(record.policy, sort_keys=False))
        return tracking.append_decision(client, run_id, record, policy)
