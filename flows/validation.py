"""The validation flow (ARCHITECTURE.md, what the service promises): a registered version is evaluated, its outputs are
validated, logged to one MLflow run, correlated with the model's earlier versions, and
gated.

    validate_model_version(model, version):
        run the suite's evaluators on the version        (flows/evaluation.py: shard tasks with retries and cached results, merged)
        check every evaluator's records and metrics      (Great Expectations; records parsed once into an EvaluatorOutput)
        log everything to the version's validation run   (flows/recorder.py: the run and what the flow writes; flows/recording.py: each look's, retried while the server is away)
        correlate label-free with labelled metrics       (flows/correlations.py: across validated versions; P_LC vs champion)
        judge against the policy and the champion        (flows/judgement.py, gate/): the run's next decision record, `champion` moved if it passes
        publish the report                               (dashboards/: plots, HTML page, leaderboard; logged to the run)

A restarted flow resumes: the claim row keeps the MLflow run id (the same run is
continued), finished evaluators come back from Prefect's result cache, and an
interrupted evaluator recomputes only what its fingerprinted record store lacks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import deployment, flow_run
from prefect.tasks import exponential_backoff
from prefect.utilities.annotations import quote
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from vlgate import tracking
from vlgate.decisions import DecisionKind, DecisionRecord, LookSummary, Outcome, Rule, SequentialRecord, Verdict
from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.output import EvaluatorOutput, EvaluatorSummary
from vlgate.evaluators.running.items import remembering_items
from vlgate.evaluators.running.suite import count_items
from vlgate.flows import notifying, progress
from vlgate.flows.approval import await_sign_off
from vlgate.flows.champion_items import evaluate_champion_items
from vlgate.flows.context import ServiceContext
from vlgate.flows.correlations import Correlations, log_correlations_across_versions, version_table
from vlgate.flows.evaluation import check_evaluator, evaluation
from vlgate.flows.judgement import JudgementRequest, Superseded, ValidationError, baseline_champion, judge
from vlgate.flows.model_check import check_candidate, engine_problem
from vlgate.flows.plan import ValidationPlan
from vlgate.flows.recorder import ValidationRecorder
from vlgate.flows.recording import log_look, log_outputs, write_failure_tags
from vlgate.flows.settings import not_configured, suite_image_roots
from vlgate.registry_hooks.claims import Also, Claim, ClaimState
from vlgate.values import replaced
from vlgate.versions import VersionError, VersionRef

if TYPE_CHECKING:
    from prefect import Task
    from prefect.client.schemas.objects import TaskRun
    from prefect.states import State

log = logging.getLogger("vlgate.validation")


class ValidationResult(BaseModel):
    """What the validation flow returns and ``vlgate validate --json`` prints: the decision
    record it reports (``record``: its outcome is the exit status) beside the correlations
    across versions, the report's path and a sequential validation's looks. A flow that
    failed has ``error`` and no record (see :meth:`failed`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str
    run_id: str | None = None
    record: DecisionRecord | None = None
    correlations: Correlations = Field(default_factory=dict)
    report: str | None = None
    #: a sequential policy's looks, the items evaluated and the share saved
    sequential: SequentialRecord | None = None
    error: str | None = None
    #: another request was validating the version: this one waited and reports its decision
    waited_for_another: bool = False
    #: per evaluator, the records of the last look taken from the shared record cache (computed
    #: before, for another version, model or run with the same fingerprint), and in all
    records_from_cache: dict[str, int] = Field(default_factory=dict)
    records_total: dict[str, int] = Field(default_factory=dict)

    @property
    def outcome(self) -> Outcome:
        """The record's outcome; could not judge for a flow that failed."""
        return self.record.outcome if self.record is not None else Outcome.COULD_NOT_JUDGE

    @property
    def label(self) -> str:
        """promoted or rejected (fail closed), as the version's ``vlgate.decision`` tag says it."""
        return self.record.label if self.record is not None else "rejected"

    @classmethod
    def failed(cls, subject: VersionRef, error: BaseException | str) -> ValidationResult:
        """A flow that stopped: could not judge (the flow recorded it: claim failed, version tagged)."""
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return cls(model=subject.model, version=subject.version, error=message)

    @property
    def subject(self) -> VersionRef:
        """The version validated."""
        return VersionRef(model=self.model, version=self.version)

    def as_json(self) -> dict[str, JsonValue]:
        """Which version and run, the outcome, then the record's fields (as ``vlgate gate
        --json`` prints them) and the fields of this result that were set."""
        head: dict[str, JsonValue] = {"model": self.model, "version": self.version, "outcome": self.outcome.value}
        record = self.record.as_json() if self.record is not None else {}
        rest = self.model_dump(mode="json", include=self.model_fields_set - {"model", "version", "record"})
        return head | record | rest


def _not_superseded(task: Task[..., object], task_run: TaskRun, state: State[object]) -> bool:
    """Retry the gate on anything but a claim taken over (asking again changes nothing)."""
    try:
        state.result()
    except Superseded:
        return False
    except Exception:
        return True
    return True


@task(name="gate", retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2), retry_condition_fn=_not_superseded, cache_policy=NO_CACHE)
def judge_and_promote(plan: ValidationPlan, run_id: str, outputs: dict[str, EvaluatorOutput], attempt: int, kind: DecisionKind, against_current: bool = False) -> DecisionRecord:
    """One gate decision per model at a time (so no candidate is judged against a champion
    that another candidate is replacing); a settled decision is the run's next record,
    tags always written, alias moved on promotion; only while the claim is still at
    ``attempt`` (one decision per version and attempt). A retry of this task appends
    nothing twice: its record carries the task run's id."""
    from prefect.runtime import task_run

    context = ServiceContext.current()
    request = JudgementRequest(
        plan.subject, run_id, plan.policy, plan.policy_path, look=plan.look, kind=kind, against_current=against_current,
        request_id=str(task_run.id) if task_run.id else None,
    )  # fmt: skip
    return judge(context, request, outputs, record=True, holds=lambda: context.claims.holds(plan.subject, attempt))


# --- report ---------------------------------------------------------------------------


@task(name="report", retries=2, retry_delay_seconds=exponential_backoff(backoff_factor=2))
def publish_report(plan: ValidationPlan) -> str:
    """The version's HTML report and plots (logged to its run under ``report/``) and the
    model's leaderboard, also kept under ``$VLGATE_HOME/reports/MODEL/``; its pictures are
    shown from the plan's suite's data."""
    from vlgate.dashboards.report import write_reports

    context = ServiceContext.current()
    written = write_reports(context.tracking, plan.model, [plan.version], context.home / "reports" / plan.model, image_roots=suite_image_roots(plan.suite))
    return str(written.versions[plan.version])


# --- the flow -------------------------------------------------------------------------


@flow(name="vlgate-validate", log_prints=True)
def validate_model_version(model_name: str, version: str, complete: bool = False, rerun: bool = False, against_current: bool = False) -> ValidationResult:
    """Validate one registered version and gate it; the claim row must exist (the
    registry hooks create it) or is created here for a manual run. ``complete``: under a
    sequential policy, evaluate every item and judge at the last look (a version an
    early look decided, completed).

    While another flow run validates the version, this one waits and reports that one's
    decision. A version already decided is validated again only with ``rerun`` (an
    operator's ``vlgate validate``): re-evaluated (records already made are reused) and
    judged against the champion its validation was judged against, or today's with
    ``against_current``; its decision is the run's next record. Without ``rerun`` the
    recorded decision is reported as it stands."""
    try:
        subject = VersionRef.of(model_name, version)
    except VersionError as error:  # before any claim: a text that names no version is never claimed
        raise ValidationError(str(error)) from None
    context = ServiceContext.open()
    unjudgeable = not_configured(context.home, subject.model, context.config)
    if unjudgeable:  # before any claim: nothing is recorded or tagged for a model vlgate does not validate
        raise ValidationError(unjudgeable)
    claims = context.claims
    flow_run_id = str(flow_run.id) if flow_run.id else None
    while True:
        if claims.get(subject) is None:
            claims.claim(subject, via="manual")
        begun = claims.begin(subject, flow_run_id, rerun=rerun)
        if begun is not None:
            break
        settled = claims.wait(subject)  # another flow run validates it, or it stands decided
        if settled is not None and settled.state in (ClaimState.DONE, ClaimState.FAILED):
            reported = reported_decision(context, subject, settled)
            # this very flow run decided it and was suspended for a sign-off: resumed, it applies the answer
            return signed_off(context, reported) if flow_run_id is not None and settled.flow_run_id == flow_run_id else reported
    attempt = begun.attempt
    shown_as = progress.subject(subject)
    progress.stage(shown_as, progress.Stage.STARTED)
    try:
        with context.active(), claims.heartbeat(subject), remembering_items():  # the data sets read once for every look
            kind = DecisionKind.REVALIDATION if begun.rerun else DecisionKind.VALIDATION
            summary = _validate(context, subject, attempt, complete, kind, against_current)
    except Superseded:
        progress.stage(shown_as, progress.Stage.FAILED, detail="taken over by a later attempt")
        raise
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        progress.stage(shown_as, progress.Stage.FAILED, detail=message)
        if tracking.transient(error):  # a server away for a while: run it again later, no verdict
            delay = claims.defer(subject, message, context.config.retry_after_s, attempt=attempt)  # the configuration the flow started with
            get_run_logger().warning("%s: stopped by a transient fault, retried in %g s: %s", subject, delay, message)
            raise
        told = notifying.in_transaction(context.outbox, notifying.failure_notification(subject, message, attempt), context.config.notify_channels(subject.model))
        if claims.fail(subject, message, attempt=attempt, also=told):  # not when a later attempt holds the claim
            record_failure(context, subject, message)
        raise
    claims.finish(subject, summary.label, attempt=attempt, also=decision_told(context, summary))
    progress.stage(shown_as, progress.Stage.DONE, detail=summary.label)
    return signed_off(context, summary)


def signed_off(context: ServiceContext, result: ValidationResult) -> ValidationResult:
    """A decision awaiting approval, in a deployment's flow run: the flow suspends for the
    sign-off and reports the decision it ends on (flows/approval.py). Run outside a
    deployment (``vlgate validate``) it ends awaiting; ``vlgate approve`` signs off then."""
    if result.record is None or result.run_id is None or result.record.outcome is not Outcome.AWAITING_APPROVAL or deployment.id is None:
        return result
    return replaced(result, record=await_sign_off(context, result.subject, result.run_id))


def decision_told(context: ServiceContext, result: ValidationResult) -> Also | None:
    """The decision's notification, written with the claim's final state (none without a record)."""
    channels = context.config.notify_channels(result.model)
    if result.record is None or result.run_id is None or not channels:
        return None
    try:
        client = context.tracking
        page = notifying.run_url(client.tracking_uri, client.get_run(result.run_id).info.experiment_id, result.run_id)
    except Exception as error:  # the link is a convenience: the notification goes without it
        log.warning("no MLflow link for the notification of %s: %s", result.subject, error)
        page = None
    saved = result.sequential.saved_fraction if result.sequential is not None else None
    told = notifying.decision_notification(result.subject, result.run_id, result.record, saved, page, result.report)
    return notifying.in_transaction(context.outbox, told, channels)


def reported_decision(context: ServiceContext, subject: VersionRef, claim: Claim) -> ValidationResult:
    """The decision another flow run made (this one waited for it), as that one returned
    it: its latest record; a validation that failed, as failed."""
    if claim.state == ClaimState.FAILED or not claim.run_id:
        return ValidationResult(model=subject.model, version=subject.version, error=claim.detail or "validation failed", waited_for_another=True)
    record = tracking.latest_decision(context.tracking, claim.run_id)
    if record is None:
        return ValidationResult.failed(subject, f"the validation finished without a decision record ({claim.detail})")
    return ValidationResult(model=subject.model, version=subject.version, run_id=claim.run_id, record=record, waited_for_another=True)


def record_failure(context: ServiceContext, subject: VersionRef, message: str) -> None:
    """Fail closed, visibly: the version is tagged rejected with the error as its reason
    (best effort: the registry itself may be what failed)."""
    try:
        client = context.tracking
        claim = context.claims.get(subject)
        run_id = claim.run_id if claim else None
        write_failure_tags(client, subject, run_id, f"validation failed: {message} (fail closed)")
        if run_id:
            client.set_terminated(run_id, "FAILED")
    except Exception as error:  # the flow's own exception is the one to surface
        log.warning("could not record the failure of %s in MLflow: %s", subject, error)


def decided_checks(decision: DecisionRecord) -> list[str]:
    """The checks a look decided on the numbers (failed or passed), by name."""
    return [check.name for check in decision.checks if check.rule not in (Rule.RAN, Rule.EXPECTATIONS) and check.verdict in (Verdict.FAIL, Verdict.PASS, Verdict.WAIVED)]


def _validate(
    context: ServiceContext, subject: VersionRef, attempt: int, complete: bool = False, kind: DecisionKind = DecisionKind.VALIDATION, against_current: bool = False,
) -> ValidationResult:  # fmt: skip
    logger = get_run_logger()
    model_name, version = subject.model, subject.version
    home, service_config = context.home, context.config
    config = service_config.for_model(model_name)
    if config is None:  # checked by the caller on this same configuration
        raise ValidationError(not_configured(home, model_name, service_config))
    try:  # read once, checked now (a policy mistake is found before any evaluator ran), handed to every step
        plan = ValidationPlan.read(config, subject)
    except ValueError as error:
        raise ValidationError(str(error)) from None
    client = context.tracking
    registered = tracking.wait_for_version(client, subject, timeout_s=service_config.registry_wait_s)  # a webhook may announce it before the registry serves it
    recorder = ValidationRecorder.begin(client, context.claims, plan, registered)
    run_id, suite = recorder.run_id, plan.suite
    if backends.get(suite.backend).other_engine:  # another engine is checked first: if it is not exact, nothing it scored would count
        engine_check = check_candidate(plan.model_uri, suite, str(home / "model-cache"), str(home / "model-checks"))
        problem = engine_problem(engine_check) if engine_check is not None else None
        if problem:
            raise ValidationError(f"{subject}: {problem}")
    out = home / "validations" / model_name / version
    shown_as = progress.subject(subject)  # each step announced to a progress display
    looks: list[LookSummary] = []
    entries: dict[str, EvaluatorSummary] = {}
    looks_to_run = plan.looks_to_run(complete)
    may_promote_early = plan.policy.sequential is not None and plan.policy.sequential.promote_early
    logged: dict[str, EvaluatorOutput] | None = None
    # one task runner for every look: a local Dask cluster starts once a validation
    with evaluation(service_config.evaluation, str(home / "model-cache"), service_config.record_cache.settings()) as evaluate:
        for look in looks_to_run:  # one pass at every item, or a sequential policy's looks until one settles
            look_plan = plan.at_look(look)
            evaluated = evaluate(look_plan, str(out))
            entries = {name: summary.counted_since(entries.get(name)) for name, summary in evaluated.items()}  # records from the cache and computed over every look so far
            if not looks:
                recorder.model_check(home)
            progress.stage(shown_as, progress.Stage.EXPECTATIONS)
            outputs = {name: check_evaluator(name, summary, out / name) for name, summary in entries.items()}
            progress.stage(shown_as, progress.Stage.RECORDING)
            log_look(run_id, quote(outputs))  # type: ignore[call-overload]  # quoted: Prefect hands it over without walking its records and frames
            progress.stage(shown_as, progress.Stage.CORRELATIONS)
            across = log_correlations_across_versions(client, run_id, version_table(client, model_name, include_run=run_id))
            if suite.champion_items == "evaluate":  # the champion on the items it has no records of, before the gate's lock
                champion = baseline_champion(client, subject, run_id, tracking.champion_version(client, model_name), against_current, fix=False)
                if champion is not None:
                    evaluate_champion_items(client, look_plan, run_id, outputs, champion, out, evaluate)
            if look == looks_to_run[-1] or may_promote_early:
                # before a gate that may move the alias: a candidate judged against this version next reads these from its run
                log_outputs(run_id, quote(outputs))  # type: ignore[call-overload]  # quoted: as log_look's
                logged = outputs
            progress.stage(shown_as, progress.Stage.GATE)
            decision = judge_and_promote(look_plan, run_id, quote(outputs), attempt, kind, against_current)  # type: ignore[call-overload]  # as log_look's
            if decision.look is not None:
                looks.append(LookSummary(look=decision.look, outcome=decision.outcome, items={name: len(o.records) for name, o in outputs.items()}, decided=decided_checks(decision)))
                logger.info("%s: look %d of %d: %s", subject, decision.look.index + 1, decision.look.of, decision.outcome if decision.look.settled else "goes on")
            if decision.look is None or decision.look.settled:
                break
        if logged is not outputs:  # a look that settled before the last, on a rejection: its records and tables, once
            log_outputs(run_id, quote(outputs))  # type: ignore[call-overload]
    try:  # every item of the suite, read once for both records
        totals = count_items(suite, set(suite.evaluators))
    except (OSError, ValueError) as error:  # data that does not load failed its evaluator already, on record
        logger.warning("%s: the suite's items could not be counted: %s", subject, error)
        totals = {}
    sequential = recorder.looks(looks, totals) if looks else None
    recorder.power_plan(outputs, decision.champion_before, totals)
    recorder.finished()
    logger.info("%s: %s", subject, decision.label)
    progress.stage(shown_as, progress.Stage.DECIDED, detail=decision.label)
    progress.stage(shown_as, progress.Stage.REPORT)
    try:  # the decision stands without its report: a failure is recorded, not raised
        report = publish_report(plan)
    except Exception as error:
        logger.warning("report of %s failed: %s", subject, error)
        recorder.report_failed(error)
        report = None
    saved = sequential.saved_fraction if sequential is not None else None
    recorder.described(decision, saved, report_logged=report is not None)
    from_cache = {name: entry.from_cache for name, entry in entries.items() if entry.error is None}
    records = {name: entry.reused + entry.from_cache + entry.computed for name, entry in entries.items() if entry.error is None}
    result = {"model": model_name, "version": version, "run_id": run_id, "record": decision, "correlations": across, "report": report, "records_from_cache": from_cache, "records_total": records}
    # sequential is set only for a sequential policy: a fixed-sample result prints as before
    return ValidationResult.model_validate(result | ({"sequential": sequential} if sequential is not None else {}))
