"""Judging a version: the gate on its outputs against the champion it is compared with,
under the model's gate lock, and a settled decision recorded as its validation run's next
decision record (never rewriting one), the tags showing it, the alias moved only from the
champion it was judged against (docs/service.md, "Decisions are records"). The validation
flow judges each look through :func:`judge`; ``vlgate gate`` judges a recorded run again
through :func:`judge_again`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, JsonValue

from vlgate import tag_keys, tracking
from vlgate.decisions import Baseline, Check, CheckKey, DecisionKind, DecisionRecord, Rule, Verdict
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.flows import notifying
from vlgate.flows.champion_items import champion_outputs
from vlgate.flows.correlations import CORRELATIONS_WITH_CHAMPION, correlate_with_champion, correlation_table, identical_across_versions, version_table
from vlgate.flows.recording import RUN_NOTE, judge_identity, log_item_diffs, run_note, run_outputs, write_decision_tags
from vlgate.gate import rendering
from vlgate.gate.checks import with_check
from vlgate.gate.gates import decide
from vlgate.gate.policy import GatePolicy
from vlgate.text import shell_command
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from vlgate.flows.context import ServiceContext


class ValidationError(RuntimeError):
    """The flow cannot judge this version at all (no config, no such version)."""


class Superseded(RuntimeError):
    """A later attempt took this validation's claim over (this one's process was taken for
    lost): this flow stops without deciding, and the later one decides."""


def baseline_champion(client: MlflowClient, subject: VersionRef, run_id: str, current: str | None, against_current: bool, fix: bool) -> str | None:
    """The champion a judgement of ``version`` compares with (None: none). By default the
    one its validation was first judged against, fixed then on the run
    (``vlgate.baseline_champion``, with ``fix``) so that every look, re-run and ``gate
    --apply`` compares with the same version; never the version itself. With
    ``against_current``, today's champion (``current``), which must be another version."""
    if against_current:
        if current == subject.version:
            raise ValidationError(f"{subject} is today's champion: against today's champion it would be compared with itself (without --against-current it is judged against its validation's champion)")
        return current
    fixed, baseline = tracking.baseline_of(client, run_id)
    if fixed:
        return baseline
    baseline = current if current != subject.version else None
    if fix:
        client.set_tag(run_id, tag_keys.BASELINE_CHAMPION, baseline or tag_keys.NO_CHAMPION)
    return baseline


def alias_moved_meanwhile(subject: VersionRef, baseline: str | None, current: str | None) -> Check | None:
    """A promotion would replace a champion the version was never compared with: another
    version took the alias after this validation fixed its baseline. That check fails
    closed (could not judge) instead of moving the alias."""
    if current is None or current in (baseline, subject.version):
        return None
    return Check.of(CheckKey(Rule.ALIAS, "champion"), Verdict.COULD_NOT_JUDGE, rendering.alias_moved(subject, baseline, current))


@dataclass(frozen=True)
class JudgementRequest:
    """One judgement asked of the gate: which version and validation run, under which policy
    (and the file it was read from, for the record), at which look of a sequential policy
    (None: every item), as which kind of decision, against which champion (its
    validation's, or today's with ``against_current``: :func:`baseline_champion`), and the
    request's id (a retried request gets the record it made back)."""

    subject: VersionRef
    run_id: str
    policy: GatePolicy
    policy_path: Path
    look: int | None = None
    kind: DecisionKind = DecisionKind.REJUDGEMENT
    against_current: bool = False
    request_id: str | None = None


def judge(context: ServiceContext, request: JudgementRequest, outputs: dict[str, EvaluatorOutput], record: bool, holds: Callable[[], bool] | None = None) -> DecisionRecord:
    """The gate on ``outputs`` (of the request's look of a sequential policy) against the
    version's baseline champion (:func:`baseline_champion`), under the model's gate lock.
    With ``record``, a settled decision is appended as the run's next decision record
    (never replacing one), the tags show it, and on promotion the alias moves, only from
    the champion it was judged against. ``holds``: asked under the lock; a flow whose claim
    was taken over decides nothing. A retried request whose record is already the latest
    gets that record back (its tags written again), nothing appended."""
    subject, run_id, policy, policy_path = request.subject, request.run_id, request.policy, request.policy_path
    model_name, version = subject.model, subject.version
    look, kind, against_current, request_id = request.look, request.kind, request.against_current, request.request_id
    client = context.tracking
    with context.locks.hold(f"gate:{model_name}"):
        if holds is not None and not holds():
            raise Superseded(f"{subject}: a later attempt holds the claim; it decides")
        latest = tracking.latest_decision(client, run_id) if record and request_id else None
        if latest is not None and latest.judged_by is not None and latest.judged_by.request_id == request_id:
            write_decision_tags(client, subject, run_id, latest)  # what the retried one may not have written
            return latest
        current = tracking.champion_version(client, model_name)  # under the lock: nobody moves it meanwhile
        champion_version = baseline_champion(client, subject, run_id, current, against_current, fix=record)
        champion = champion_outputs(client, VersionRef(model=model_name, version=champion_version), run_id) if champion_version else None
        verdict = decide(policy, outputs, champion, look=look)
        moved = alias_moved_meanwhile(subject, champion_version, current) if verdict.promote else None
        if moved is not None:
            verdict = with_check(verdict, moved, policy)
        per_sample = correlate_with_champion(outputs, champion)
        warnings = identical_across_versions(version_table(client, model_name, include_run=run_id), version)
        recorded = record and verdict.settled
        alias_moves = recorded and verdict.promote and current != version
        judged = DecisionRecord(
            outcome=verdict.outcome, reasons=verdict.reasons, checks=verdict.checks, policy=verdict.policy, look=verdict.look, policy_path=str(policy_path),
            champion_before=champion_version, warnings=warnings, per_sample_correlations=per_sample, kind=kind,
            baseline=Baseline.CURRENT if against_current else Baseline.VALIDATION, judged_by=judge_identity(request_id),
            sequence=tracking.next_decision_number(client, run_id) if recorded else None, policy_digest=tracking.file_digest(policy_path) if recorded else None,
            judged_at=datetime.now(UTC) if recorded else None, champion_after=(version if verdict.promote else current) if recorded else None, alias_moved=alias_moves,
        )  # fmt: skip
        if recorded:
            if per_sample:
                tracking.log_tables(client, run_id, {CORRELATIONS_WITH_CHAMPION: correlation_table(per_sample)})
            log_item_diffs(client, model_name, run_id, outputs, champion, champion_version)
            if alias_moves:
                client.set_registered_model_alias(model_name, tracking.CHAMPION, version)
            tracking.log_decision(client, run_id, judged, policy_path)
            write_decision_tags(client, subject, run_id, judged)
            if kind is DecisionKind.REJUDGEMENT:  # a validation writes its description and tells the team with its claim's end
                client.set_tag(run_id, RUN_NOTE, run_note(judged, None, report_logged=False))
                told = notifying.decision_notification(subject, run_id, judged, None, None, None)
                notifying.tell(context.home, told, context.config.notify_channels(model_name))
    return judged


class Rejudgement(BaseModel):
    """What ``vlgate gate`` prints: a version's existing run judged again, and whether the
    new decision was recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str
    run_id: str
    recorded: bool
    judged: DecisionRecord

    def as_json(self) -> dict[str, JsonValue]:
        """The decision's fields beside which version and run it is of (as ``validate --json``)."""
        head: dict[str, JsonValue] = {"model": self.model, "version": self.version, "run_id": self.run_id, "recorded": self.recorded}
        return head | self.judged.as_json()


def judge_again(context: ServiceContext, subject: VersionRef, policy_path: str, record: bool = False, against_current: bool = False) -> Rejudgement:
    """``vlgate gate``: the version's existing validation run judged again (a changed
    policy) without evaluating anything, against its validation's champion, or today's
    with ``against_current``; with ``record``, appended as the run's next decision record."""
    client = context.tracking
    run_id = client.get_model_version(subject.model, subject.version).tags.get(tag_keys.VALIDATION_RUN)
    if not run_id:
        raise ValidationError(f"{subject} has no validation run yet ({shell_command('vlgate', 'validate', subject.model, subject.version)})")
    look = tag_keys.look_index(client.get_run(run_id).data.tags.get(tag_keys.LOOK))  # a sequential validation: judged at the look it stopped at
    request = JudgementRequest(subject, run_id, GatePolicy.from_file(policy_path), Path(policy_path), look=look, against_current=against_current)
    judged = judge(context, request, run_outputs(client, run_id), record)
    recorded = judged.sequence is not None  # an interim look that does not settle records nothing
    return Rejudgement(model=subject.model, version=subject.version, run_id=run_id, recorded=recorded, judged=judged)
