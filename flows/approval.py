"""A person's sign-off on a version awaiting approval (``vlgate approve``, ``vlgate reject``;
docs/service.md, "Human sign-off").

Each one is a record appended to the version's validation run, as any judgement is: who
(``judged_by.user``; ``verified`` only where the deployment authenticates them), when and why
(``note``). An approval moves the alias under the model's gate lock, and only from the
champion the version was judged against; when another version took the alias meanwhile,
the version is judged again against today's champion first, and the approval applies only
if that judgement passes too. An approval later than the policy's ``expires_after`` is
recorded as expired and moves nothing. The policy whose sign-off rules apply is the one the
awaiting decision was judged with (its record keeps it). A sign-off the person may not give
(not among the approvers) is recorded as refused and changes nothing else.

In the deployment the validation flow does not end at "awaiting approval": it suspends
(Prefect's ``suspend_flow_run(wait_for_input=SignOffInput)``, so the Prefect UI shows an
approve/reject form and the flow holds no worker slot while it waits) until a person answers
in that form or with ``vlgate approve|reject``. Prefect's ``pause_flow_run`` would keep the
flow's process, and its worker's slot, for days; a suspended run is started again from the
top when resumed, finds its decision made, and only applies the answer. Each answer is
applied once: its record carries the request id of the suspension it answered (flow run and
pause key), and a run started again skips answers already on record. ``vlgate
approve|reject`` applies the sign-off itself, as the person running it, under that request
id, then resumes the flow run, which finds it on record and ends: the identity and the
permission checked are the person's, never the service's.
"""

from __future__ import annotations

import getpass
import logging
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field

from vlgate import tag_keys, tracking
from vlgate.decisions import DecisionKind, DecisionRecord, Outcome
from vlgate.flows import notifying
from vlgate.flows.judgement import ValidationError, judge_again
from vlgate.flows.recording import judge_identity, write_decision_tags
from vlgate.gate.policy import ApprovalPolicy, GatePolicy
from vlgate.text import shell_command
from vlgate.values import replaced
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from vlgate.flows.context import ServiceContext

log = logging.getLogger("vlgate.approval")


class ApprovalRefused(ValidationError):
    """The person may not sign off: recorded as a refused sign-off, nothing else changes."""


class SignOffInput(RunInput):
    """A person's answer to a flow suspended for sign-off: the form the Prefect UI shows, and
    what ``vlgate approve|reject`` resumes the flow run with."""

    approve: bool = Field(description="approve (the champion alias moves to this version) or reject")
    reason: str = Field(min_length=1, description="why: kept in the decision record")
    by: str = Field(default="", description="who signs; recorded as unverified (vlgate approve|reject records the person's authenticated MLflow identity, where the deployment has one)")


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


class Signer(BaseModel):
    """Who signs off, and whether the deployment vouches for it: the MLflow user of the
    credentials where the tracking server authenticates (``verified``), else the declared
    ``--by`` or the operating-system user. ``refusal``: why this person may not sign."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    person: str
    verified: bool
    refusal: str | None = None


def signer(model: str, by: str | None, from_form: bool = False) -> Signer:
    """The signer of a sign-off on ``model``. With authentication on, the identity is the
    credentials' MLflow user, who must hold MANAGE on the registered model (``--by`` may only
    name that same user); an answer from Prefect's form, which cannot say who gave it, is
    refused then. Without authentication, ``by`` (or the operating-system user), unverified."""
    from vlgate.tracking.permissions import authenticated_user, can_manage_registered_model

    user = authenticated_user()
    if user is None:
        return Signer(person=by or default_person(), verified=False)
    if from_form:
        return Signer(person=by or "prefect-ui", verified=False, refusal="with authentication on, a sign-off comes from an authenticated MLflow user (vlgate approve|reject); Prefect's form cannot say who answered")
    if by and by != user:
        raise ValidationError(f"--by {by}: with authentication on, the signer is the MLflow user of the credentials ({user}); nothing recorded")
    if not can_manage_registered_model(model, user):
        return Signer(person=user, verified=True, refusal=f"{user} does not hold MANAGE on the registered model {model}")
    return Signer(person=user, verified=True)


def sign_off(context: ServiceContext, subject: VersionRef, answer: SignOffInput, now: datetime | None = None, request_id: str | None = None, from_form: bool = False) -> SignOff:
    """Approve or reject (``answer``) the version awaiting approval, as :func:`signer` says
    who signs (``answer.by``; ``from_form``: an answer given in Prefect's form). With
    ``request_id``, an answer already on record (a resumed flow run replaying it) is
    returned as recorded instead of applied twice."""
    client, model, version = context.tracking, subject.model, subject.version
    run_id = client.get_model_version(model, version).tags.get(tag_keys.VALIDATION_RUN)
    if not run_id:
        raise ValidationError(f"{subject} has no validation run yet ({shell_command('vlgate', 'validate', model, version)})")
    if request_id is not None:
        answered = [record for record in tracking.decision_history(client, run_id) if record.judged_by is not None and record.judged_by.request_id == request_id]
        if answered:
            return SignOff(model=model, version=version, run_id=run_id, record=answered[-1])
    who = signer(model, answer.by or None, from_form)
    rejudged = None
    awaiting = _awaiting(client, subject, run_id)
    approval = GatePolicy.model_validate(awaiting.policy).approval
    if who.refusal is None and approval is not None and approval.approvers and who.person not in approval.approvers:
        who = replaced(who, refusal=f"{who.person} is not among the policy's approvers ({', '.join(approval.approvers)})")
    if who.refusal is not None:
        try:
            # a refused form answer used up its suspension (the flow waits on the next); a
            # refused command leaves the suspension to the answer that may be given
            with context.locks.hold(f"gate:{model}"):
                _append(context.tracking, run_id, awaiting, _refused(who, answer.reason, request_id if from_form else None, now))
        except Exception as error:  # credentials that may write nothing cannot leave the refusal on record either
            if not _permission_denied(error):
                raise
            raise ApprovalRefused(f"{who.refusal}: nothing changed (MLflow lets these credentials write nothing to the validation run, so the refusal is not recorded)") from None
        raise ApprovalRefused(f"{who.refusal}: recorded as refused, nothing else changed")
    current = tracking.champion_version(client, model)
    if answer.approve and current not in (awaiting.champion_before, version) and not _expired(awaiting, approval, now):
        # judged against a champion that no longer holds the alias: against today's first
        configured = context.config.for_model(model)
        policy_path = str(configured.policy) if configured is not None else awaiting.policy_path
        if policy_path is None:
            raise ValidationError(f"{model} is not configured in vlgate.yaml: no policy to judge it again against v{current}")
        rejudged = judge_again(context, subject, policy_path, record=True, against_current=True).judged
        if rejudged.outcome is not Outcome.AWAITING_APPROVAL:
            return SignOff(model=model, version=version, run_id=run_id, record=rejudged)
    with context.locks.hold(f"gate:{model}"):
        awaiting = _awaiting(client, subject, run_id)  # under the lock: nobody judged it meanwhile
        current = tracking.champion_version(client, model)
        person, reason = who.person, answer.reason
        stated: dict[str, object] = {
            "judged_at": now or datetime.now(UTC), "judged_by": judge_identity(request_id, who.person, who.verified), "note": reason, "alias_moved": False, "champion_after": current,
        }  # fmt: skip
        if _expired(awaiting, approval, now):
            stated |= {"kind": DecisionKind.APPROVAL, "outcome": Outcome.APPROVAL_EXPIRED, "reasons": [f"approval by {person} came after {approval.expires_after if approval else '?'}: {reason}"]}
        elif not answer.approve:
            stated |= {"kind": DecisionKind.REJECTION, "outcome": Outcome.REJECTED, "reasons": [f"rejected by {person}: {reason}"]}
        elif current not in (awaiting.champion_before, version):  # moved again since the re-judgement: judge again
            raise ValidationError(f"v{current} took the alias meanwhile: run {shell_command('vlgate', 'approve', model, version)} again")
        else:
            moves = current != version
            if moves:
                client.set_registered_model_alias(model, tracking.CHAMPION, version)
            stated |= {"kind": DecisionKind.APPROVAL, "outcome": Outcome.PROMOTED, "reasons": [f"approved by {person}: {reason}"], "champion_after": version, "alias_moved": moves}
        record = _append(client, run_id, awaiting, stated)
        write_decision_tags(client, subject, run_id, record)
    channels = context.config.notify_channels(model)
    notifying.tell(context.home, notifying.decision_notification(subject, run_id, record, None, None, None), channels)
    notifying.deliver_now(context.home, context.config.all_channels())
    return SignOff(model=model, version=version, run_id=run_id, record=record, rejudged=rejudged)


def await_sign_off(context: ServiceContext, subject: VersionRef, run_id: str) -> DecisionRecord:
    """In a deployment's flow run: suspend until a person signs off, apply the answer, and
    again while the version still awaits (a refused sign-off); the decision it ends on.
    Suspended, the flow holds no worker slot; resumed, Prefect starts it again from the top
    and each earlier answer comes back from its suspension: already on record, it is
    skipped by its request id. The suspension times out when the policy's
    ``expires_after`` does."""
    from prefect import suspend_flow_run
    from prefect.runtime import flow_run

    awaiting = _awaiting(context.tracking, subject, run_id)
    approval = GatePolicy.model_validate(awaiting.policy).approval
    record, answered = awaiting, 0
    while record.outcome is Outcome.AWAITING_APPROVAL:
        answered += 1
        timeout = None
        if approval is not None and awaiting.judged_at is not None:
            timeout = max(1, int((awaiting.judged_at + approval.expires_after - datetime.now(UTC)).total_seconds()))
        answer = suspend_flow_run(wait_for_input=SignOffInput.with_initial_data(description=_form_text(subject, awaiting)), timeout=timeout, key=f"sign-off-{answered}")
        request_id = f"{flow_run.id}/sign-off-{answered}"
        try:
            record = sign_off(context, subject, SignOffInput(approve=answer.approve, reason=answer.reason, by=answer.by or "prefect-ui"), request_id=request_id, from_form=True).record
        except ApprovalRefused:  # on record; the version still awaits a sign-off it can take
            continue
    return record


def _form_text(subject: VersionRef, awaiting: DecisionRecord) -> str:
    """What the Prefect UI shows above the sign-off form (markdown)."""
    reasons = "\n".join(f"- {reason}" for reason in awaiting.reasons[:5])
    command = f"`vlgate approve|reject {shell_command(subject.model, subject.version)} --reason TEXT`"
    return f"**{subject}** passed every rule and awaits a sign-off (champion: {awaiting.champion_before or 'none'}).\n\n{reasons}\n\nApprove moves the champion alias; {command} answers this form too."


class SuspendedRun(BaseModel):
    """A deployment's flow run suspended for a version's sign-off: its id, and the key of
    the suspension (the answer's request id is both)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flow_run_id: str
    pause_key: str

    @property
    def request_id(self) -> str:
        return f"{self.flow_run_id}/{self.pause_key}"


def suspended_flow_run(context: ServiceContext, subject: VersionRef) -> SuspendedRun | None:
    """The deployment's flow run suspended for this version's sign-off, if one is."""
    from uuid import UUID

    from prefect import get_client
    from prefect.settings import PREFECT_API_URL

    claim = context.claims.get(subject)
    if claim is None or not claim.flow_run_id or not PREFECT_API_URL.value():
        return None  # no Prefect server: the flow ran in this machine's own process, not suspended
    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(UUID(claim.flow_run_id))
    except Exception:  # no Prefect server, or it never knew this run: a local flow decided it
        return None
    if run.state is None or not run.state.is_paused() or not run.state.state_details.pause_key:
        return None
    return SuspendedRun(flow_run_id=claim.flow_run_id, pause_key=run.state.state_details.pause_key)


def sign_off_suspended(context: ServiceContext, suspended: SuspendedRun, subject: VersionRef, answer: SignOffInput) -> SignOff:
    """The sign-off applied here, as the person running the command (their identity and
    credentials, not the service's), under the suspension's request id; then the suspended
    flow run resumed with the same answer, which finds it on record and ends. A refusal
    resumes nothing (the flow waits on); a suspension that timed out is left to Prefect
    (the record says expired)."""
    from uuid import UUID

    from prefect.exceptions import FlowPauseTimeout, NotPausedError
    from prefect.flow_runs import resume_flow_run

    signed = sign_off(context, subject, answer, request_id=suspended.request_id)
    if signed.record.outcome is not Outcome.AWAITING_APPROVAL:
        judged_by = signed.record.judged_by
        resumed = SignOffInput(approve=answer.approve, reason=answer.reason, by=judged_by.user if judged_by and judged_by.user else "")
        try:
            resume_flow_run(UUID(suspended.flow_run_id), run_input=resumed.model_dump(mode="json"))
        except (FlowPauseTimeout, NotPausedError) as error:  # the record stands either way
            log.info("flow run %s not resumed: %s", suspended.flow_run_id, error)
    return signed


def _permission_denied(error: BaseException) -> bool:
    """MLflow refused the credentials a write: its REST API says PERMISSION_DENIED, its
    artifact proxy answers 403."""
    from mlflow.exceptions import MlflowException
    from requests import HTTPError

    if isinstance(error, MlflowException):
        return error.error_code == "PERMISSION_DENIED"
    return isinstance(error, HTTPError) and error.response is not None and error.response.status_code == 403


def _refused(who: Signer, reason: str, request_id: str | None, now: datetime | None) -> dict[str, object]:
    """What a sign-off the person may not give states on record: the version still awaits
    approval (the record keeps the awaiting decision's outcome, champion and policy) and
    nothing moves."""
    return {
        "kind": DecisionKind.REFUSED_SIGN_OFF, "judged_at": now or datetime.now(UTC), "judged_by": judge_identity(request_id, who.person, who.verified), "note": reason,
        "alias_moved": False, "reasons": [f"sign-off refused: {who.refusal}"],
    }  # fmt: skip


def _awaiting(client: MlflowClient, subject: VersionRef, run_id: str) -> DecisionRecord:
    """The decision that left the version awaiting approval (refused sign-offs since then
    change nothing: its time, champion and policy are the ones that count)."""
    history = tracking.decision_history(client, run_id)
    latest = history[-1] if history else None
    if latest is None or latest.outcome is not Outcome.AWAITING_APPROVAL:
        shown = latest.outcome.value if latest is not None else "none yet"
        raise ValidationError(f"{subject} is not awaiting approval (its latest decision: {shown})")
    return next(record for record in reversed(history) if record.kind is not DecisionKind.REFUSED_SIGN_OFF)


def _expired(awaiting: DecisionRecord, approval: ApprovalPolicy | None, now: datetime | None) -> bool:
    if approval is None or awaiting.judged_at is None:
        return False
    return (now or datetime.now(UTC)) > awaiting.judged_at + approval.expires_after


def _append(client: MlflowClient, run_id: str, awaiting: DecisionRecord, stated: dict[str, object]) -> DecisionRecord:
    """The sign-off's record, built once from the awaiting decision it answers and what it
    ``stated``, appended as the run's next record with the policy it applies beside it (the
    awaiting decision's, as judged). Call under the model's gate lock."""
    with tempfile.TemporaryDirectory() as scratch:
        policy = Path(scratch) / "policy.yaml"
        policy.write_text(yaml.safe_dump(awaiting.policy, sort_keys=False))
        record = replaced(awaiting, **stated, sequence=tracking.next_decision_number(client, run_id), policy_digest=tracking.file_digest(policy))
        tracking.log_decision(client, run_id, record, policy)
        return record
