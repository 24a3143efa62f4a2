"""The commands on registered models and their versions: register a checkpoint, validate a
version, judge it again, check the champion for drift, see the service's state, release a
claim, and run the service (``reading.py`` has those that only read what is recorded)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate.cli.commands.base import (
    EXIT_AWAITING_APPROVAL,
    EXIT_CODES,
    EXIT_INCONCLUSIVE,
    EXIT_NOT_JUDGED,
    EXIT_REJECTED,
    Answer,
    Command,
    UserError,
    exit_status,
    registered_version,
    service_context,
    version_number,
    version_ref,
)
from vlgate.text import visible

if TYPE_CHECKING:
    from pydantic import JsonValue

    from vlgate.flows.validation import ValidationResult


def print_decision(result: ValidationResult) -> None:
    """The verdict and each rule's, one line each; the reasons a rule failed first."""
    print(f"{result.model} v{result.version}: {result.outcome.value}")
    if result.error is not None or result.record is None:
        print(f"  validation failed: {result.error}")
        return
    from vlgate.decisions import Verdict

    for check in sorted(result.record.checks, key=lambda check: check.verdict is Verdict.PASS):
        print(f"  {check.verdict.value:<15} {check.name}: {check.detail}")
    for warning in result.record.warnings:
        print(f"  {'warning':<15} {warning}")
    sequential = result.sequential
    if sequential is not None:  # where a sequential policy stopped, and what it saved
        for look in sequential.looks:
            at = look.look
            items = ", ".join(f"{name} {n}" for name, n in look.items.items())
            print(f"  look {at.index + 1} of {at.of} ({at.fraction:.0%}): {look.outcome.value if at.settled else 'goes on'} ({items} items)")
        evaluated, total = sum(sequential.items_evaluated.values()), sum(sequential.items_total.values())
        print(f"  items evaluated: {evaluated} of {total}; {sequential.saved_fraction:.0%} saved")
    cached = result.records_from_cache
    if any(cached.values()):  # work done before, for another version or run, not paid again
        print("  records from the cache: " + ", ".join(f"{name} {n} of {result.records_total.get(name, n)}" for name, n in cached.items()))
    if result.report:
        print(f"report: {result.report}")


def decision_answer(result: ValidationResult, summary: Mapping[str, JsonValue]) -> Answer:
    """A decision as ``--json`` prints it (``summary``) and as a person reads it (``result``)."""
    return Answer(summary, status=exit_status(result.outcome), text=lambda: print_decision(result))


class Status(Command):
    name = "status"
    help = "registered models, each version's validation state, decision and reasons, and the champion"
    description = "Read the registry and vlgate's claims (all state under $VLGATE_HOME, or MLFLOW_TRACKING_URI / VLGATE_STATE_DB)."
    json_help = "one JSON object on stdout"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", nargs="?", help="only this registered model")
        parser.add_argument("version", nargs="?", help="only this version of it, with every decision record of its validation (the first first)")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.service import service_status, status_table

        if args.version is not None:
            args.version = version_number(args.version)
        status = service_status(service_context(), args.model, args.version)
        if args.model and not status["models"]:
            raise UserError(f"no registered model {args.model!r}")
        if args.version and not status["models"][0]["versions"]:
            raise UserError(f"{args.model} v{args.version}: no such registered version")

        def table() -> None:
            from vlgate.cli.terminal import terminal_console

            terminal_console().print(status_table(status))
            for version in status["models"][0]["versions"] if args.version else []:
                for record in version["decisions"]:  # the history, the first first
                    print(decision_record_line(record))
            for channel, counts in status["notifications"].items():
                print(visible(f"notifications to {channel}: {counts['delivered']} delivered, {counts['pending']} pending, {counts['failed']} failed"))
            for failed in status["failed_deliveries"][:5]:
                print(visible(f"  failed: {failed['event']} to {failed['channel']} after {failed['attempts']} attempts: {failed['last_error']}"))

        return Answer(status, text=table)


def decision_record_line(record: Mapping[str, JsonValue]) -> str:
    """One decision record in a line: its number, which judgement, when, the outcome, the
    champion judged against and who held the alias after it."""
    against = f"v{record['champion_before']}" if record.get("champion_before") else "no champion"
    after = f"v{record['champion_after']}" if record.get("champion_after") else "none"
    moved = ", moved here" if record.get("alias_moved") else ""
    judged_at = record.get("judged_at")
    when = f" {str(judged_at)[:19].replace('T', ' ')} UTC" if judged_at else ""
    return f"  record {record.get('sequence') or 1} ({record.get('kind') or 'validation'}{when}): {record['outcome']} against {against}; champion after: {after}{moved}"


class Release(Command):
    name = "release"
    help = "forget a version's claim so that the poller validates it again (after a failure, or a worker lost for good)"
    description = "A claim that failed (e.g. the registry was away for longer than the retries) stays failed until an operator releases it."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("version")
        parser.add_argument("--force", action="store_true", help="also a claim whose lease is still running (its worker may be alive)")

    def run(self, args: argparse.Namespace) -> Answer:
        from datetime import datetime, timezone

        from vlgate.flows.context import ServiceContext
        from vlgate.registry_hooks.claims import LIVE_STATES, ClaimStore

        subject = version_ref(args.name, args.version)
        claims = ClaimStore.for_home(ServiceContext.open().home)  # read and released: no lease of its own
        claim = claims.get(subject)
        if claim is None:
            raise UserError(f"{subject}: no claim (nothing to release)")
        alive = claim.state in LIVE_STATES and claim.lease_expires > datetime.now(timezone.utc)
        if alive and not args.force:
            raise UserError(f"{subject} is {claim.state} by {claim.owner} (lease until {claim.lease_expires:%Y-%m-%d %H:%M:%S} UTC): --force releases it anyway")
        claims.release(subject)
        return Answer({"model": subject.model, "version": subject.version, "released": claim.as_dict()})


class Register(Command):
    name = "register"
    help = "log a checkpoint folder to MLflow and register it as a new model version"
    description = "What a training job does at the end; the same weights registered twice give the existing version back."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name", help="registered model name")
        parser.add_argument("checkpoint", help="checkpoint folder (safetensors)")
        parser.add_argument("--description")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate import tracking

        problem = tracking.model_name_problem(args.name)
        if problem:
            raise UserError(f"model name {args.name!r}: {problem}; nothing was uploaded")
        folder = Path(args.checkpoint)
        if not folder.is_dir():
            raise UserError(f"{folder}: not a checkpoint folder")
        try:
            tracking.check_uploadable(folder)
        except tracking.CheckpointError as error:
            raise UserError(str(error)) from None
        version = tracking.register_checkpoint(service_context().tracking, args.name, folder, description=args.description or "")
        return Answer({"model": args.name, "version": str(version.version), "source": version.source})


class Validate(Command):
    name = "validate"
    help = "run the validation flow on one registered version now (what the hooks do)"
    description = (
        "Claims the version if nothing has, evaluates, checks, logs, correlates and gates it; prints the decision. A version "
        "another request is validating is waited for and that decision printed; a decided version is validated again (records "
        "already made reused) and judged against the champion its validation was judged against, as the run's next decision "
        "record (docs/service.md, 'Decisions are records'). "
        f"Exit status: {EXIT_CODES} (an evaluator, a metric or the champion's records missing, or the flow failed), "
        f"{EXIT_INCONCLUSIVE} inconclusive (a comparison with the champion too uncertain: more shared samples would decide), "
        f"{EXIT_AWAITING_APPROVAL} awaiting approval (the policy wants a person's sign-off: vlgate approve), "
        "2 bad input (the config, suite or policy; checked before anything runs)."
    )
    json_help = "the decision as one JSON object: outcome, reasons, every rule's structured check"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("version")
        parser.add_argument(
            "--complete", action="store_true",
            help="under a sequential policy: evaluate every item (those already evaluated are reused) and judge at the last look, e.g. a version an early look decided",
        )  # fmt: skip
        parser.add_argument(
            "--against-current", action="store_true",
            help="judge against today's champion instead of the champion the version's validation was first judged against (a re-run's default)",
        )  # fmt: skip

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.prefect_server import local_prefect_server
        from vlgate.flows.context import ServiceContext
        from vlgate.flows.notifying import deliver_now
        from vlgate.flows.settings import model_problem

        subject = version_ref(args.name, args.version)
        context = ServiceContext.open()
        home = context.home

        def refuse_unjudgeable() -> None:  # config, suite and policy checked before anything is claimed
            unjudgeable = model_problem(home, args.name, context.config)
            if unjudgeable:
                raise UserError(unjudgeable)
            importlib.import_module("vlgate.flows.validation")  # the flow's own imports, still while the server starts

        with local_prefect_server(home, while_starting=refuse_unjudgeable):  # checked while the server starts
            from mlflow.exceptions import MlflowException

            from vlgate import tracking
            from vlgate.flows.validation import ValidationResult, validate_model_version

            client = context.tracking
            try:
                registered_version(client, subject)
                if args.against_current and tracking.champion_version(client, subject.model) == subject.version:
                    raise UserError(f"{subject} is today's champion: --against-current would compare it with itself")
            except MlflowException:  # anything but a missing version (the registry away...) is the flow's to retry and record
                pass
            try:
                result = validate_model_version(subject.model, subject.version, complete=args.complete, rerun=True, against_current=args.against_current)
            except Exception as error:  # the flow recorded it (claim failed, version tagged); CI needs the verdict
                result = ValidationResult.failed(subject, error)
        deliver_now(home, context.config.all_channels())  # no service may run: its notifications go now
        return decision_answer(result, result.as_json())


class Gate(Command):
    name = "gate"
    help = "judge a version's existing validation run again (a changed policy, a new champion) without evaluating"
    description = (
        "Reads the version's validation run back from MLflow (records, metrics, expectation results, failed evaluators) and "
        "judges it with the model's policy (or --policy) against the champion its validation was judged against (or today's, "
        "--against-current). Nothing is written unless --apply: then the run's next decision record (earlier ones stay), the "
        "version's tags and, on promotion, the champion alias (only from the champion it was judged against), as the flow does. "
        f"Exit status as for validate: {EXIT_CODES}, {EXIT_INCONCLUSIVE} inconclusive, 2 bad input."
    )
    json_help = "the decision as one JSON object"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("version")
        parser.add_argument("--policy", metavar="POLICY.yaml", help="judge with this policy instead of the model's (vlgate.yaml)")
        parser.add_argument("--apply", action="store_true", help="record the decision (the run's next record) and move the alias on promotion")
        parser.add_argument("--against-current", action="store_true", help="judge against today's champion instead of the one the version's validation was judged against")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate import tag_keys, tracking
        from vlgate.flows.judgement import ValidationError, judge_again
        from vlgate.flows.settings import not_configured
        from vlgate.gate.policy import GatePolicy

        subject = version_ref(args.name, args.version)
        context = service_context()
        config = context.config.for_model(args.name)
        if config is None and args.policy is None:
            raise UserError(not_configured(context.home, args.name, context.config) or "")
        policy_path = Path(args.policy) if args.policy else config.policy  # type: ignore[union-attr]  # one of the two is set
        if names_undefined_evaluators(policy_path):  # an lmms-eval task's metrics: the tasks the version's run logged
            client = context.tracking
            run_id = registered_version(client, subject).tags.get(tag_keys.VALIDATION_RUN)
            if run_id:
                tracking.define_run_tasks(client, run_id)
        try:
            GatePolicy.from_file(policy_path)  # a policy mistake is bad input, before anything is read back
        except ValueError as error:
            raise UserError(str(error)) from None
        registered_version(context.tracking, subject)
        try:
            rejudged = judge_again(context, subject, str(policy_path), record=args.apply, against_current=args.against_current)
        except ValidationError as error:
            raise UserError(str(error)) from None
        if rejudged.recorded:
            from vlgate.flows.notifying import deliver_now

            deliver_now(context.home, context.config.all_channels())
        from vlgate.flows.validation import ValidationResult

        judged = ValidationResult(model=rejudged.model, version=rejudged.version, run_id=rejudged.run_id, record=rejudged.judged)
        return decision_answer(judged, rejudged.as_json())


def names_undefined_evaluators(policy_path: Path) -> bool:
    """Whether the policy file names an evaluator this process has not defined (``required``,
    or the ``EVALUATOR/METRIC`` keys of its rules): an lmms-eval task, defined by reading a
    suite. False for a file that does not parse: reading it says why."""
    from vlgate.config import parse_yaml
    from vlgate.evaluators import registry

    try:
        policy = parse_yaml(policy_path.read_text(encoding="utf-8"))
    except Exception:  # unreadable or not YAML: GatePolicy.from_file says so in its one line
        return False
    if not isinstance(policy, Mapping):
        return False
    named = {str(name) for name in policy.get("required") or [] if isinstance(name, str)}
    named |= {str(key).split("/")[0] for rules in policy.values() if isinstance(rules, Mapping) for key in rules if "/" in str(key)}
    return bool(named - set(registry.names()))


class Drift(Command):
    name = "drift"
    help = "run a drift check of the model's champion now and print it"
    description = (
        "Scores the champion on the model's reference and new batches (models.NAME.drift in vlgate.yaml; --batch another "
        "suite) and compares each label-free per-sample score: KS test, Holm-adjusted across the scores, and the mean drop "
        "(evaluators/metrics/drift.py). Logged as a drift run like the scheduled check. "
        f"Exit status: 0 no drift, {EXIT_REJECTED} drifted, {EXIT_NOT_JUDGED} could not check (no champion, no score "
        "testable, or the check failed), 2 bad input."
    )
    json_help = "the result as one JSON object: outcome, and every score's check"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--batch", metavar="SUITE.yaml", help="the drift suite of the batch to check (default: the model's drift.batch)")

    def run(self, args: argparse.Namespace) -> Answer:
        """One drift check of the model's champion now, as the schedule runs it."""
        from vlgate import tracking
        from vlgate.cli.prefect_server import local_prefect_server
        from vlgate.evaluators.running.suite import Suite
        from vlgate.flows.drift import DriftOutcome, DriftResult
        from vlgate.flows.notifying import deliver_now
        from vlgate.flows.settings import CONFIG_FILE

        context = service_context()
        home = context.home
        config = context.config.for_model(args.name)
        if config is None or config.drift is None:
            raise UserError(f"registered model {args.name!r} has no drift section in {home / CONFIG_FILE} (models.NAME.drift: reference, batch)")
        batch = Path(args.batch).resolve() if args.batch else None
        for suite in (config.drift.reference, batch or config.drift.batch):
            try:
                Suite.from_file(suite)  # a suite mistake is bad input, before a server starts
            except ValueError as error:
                raise UserError(str(error)) from None
        with local_prefect_server(home):  # the flow itself, as the schedule runs it (no champion yet: not checked)
            from vlgate.flows.drift import drift_check

            try:
                result = drift_check(args.name, str(batch) if batch else None)
            except Exception as error:  # the flow's own log has the traceback; CI needs the outcome
                champion = tracking.champion_version(context.tracking, args.name)
                result = DriftResult(model=args.name, version=champion, outcome=DriftOutcome.NOT_CHECKED, error=f"{type(error).__name__}: {error}", checks=[])
        deliver_now(home, context.config.all_channels())
        summary: dict[str, JsonValue] = result.as_json()

        def text() -> None:
            print(f"{result.model} v{result.version}: {result.outcome.value}" if result.version else f"{result.model}: {result.outcome.value}")
            if result.error is not None:
                print(f"  {result.error}")
            for check in sorted(result.checks, key=lambda check: not check["drifted"]):
                print(f"  {'drifted' if check['drifted'] else 'ok':<8} {check['metric']}: {check['reason']}")
            if result.run_id:
                print(f"drift run: {result.run_id}")

        status = EXIT_REJECTED if result.drifted else EXIT_NOT_JUDGED if result.outcome == DriftOutcome.NOT_CHECKED else 0
        return Answer(summary, status=status, text=text)


class Serve(Command):
    name = "serve"
    help = "the long-running service: webhook receiver, poller, scheduled drift checks"
    description = (
        "Poll the registry, receive MLflow webhooks on $VLGATE_HOME/vlgate.yaml's webhook host:port (secret: "
        "VLGATE_WEBHOOK_SECRET; registered with the tracking server when it is one), and serve the drift checks' "
        "cron deployments (starting a local Prefect server when PREFECT_API_URL is unset)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--no-webhook", action="store_true", help="poller only")
        parser.add_argument("--no-drift", action="store_true", help="no scheduled drift checks")
        parser.add_argument("--once", action="store_true", help="poll once, wait for the flows it started, exit")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.service import serve

        return Answer(None, status=serve(webhook=not args.no_webhook, once=args.once, drift=not args.no_drift))


class Notify(Command):
    name = "notify"
    help = "send a test notification to a model's channels now and say what each did"
    description = (
        "vlgate notify test NAME: a test notification for NAME's channels (its own notify: in vlgate.yaml, else the file's) put in the "
        "outbox and delivered at once, as the service delivers every other one. Exit status 0 when every channel took it, 1 when one "
        "did not (its error is printed; the outbox retries it), 2 for a model with no channels."
    )
    json_help = "each channel's delivery as one JSON object"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=["test"])
        parser.add_argument("name", help="registered model name (its channels)")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.flows.settings import CONFIG_FILE
        from vlgate.registry_hooks.notifications import probe_notification

        context = service_context()
        config = context.config
        channels = config.notify_channels(args.name)
        if not channels:
            raise UserError(f"{args.name}: no notification channels in {context.home / CONFIG_FILE} (notify: channels, or models.{args.name}.notify)")
        outbox = context.outbox
        probe = probe_notification(args.name)
        outbox.notify(probe, channels)
        outbox.deliver_due(config.all_channels(), keys=[probe.idempotency_key])  # the probe alone: a backlog is the deliverer's
        rows = {row.channel: row for row in outbox.rows(probe.idempotency_key)}
        result = {name: {"state": row.state.value, "attempts": row.attempts, "last_error": row.last_error} for name, row in rows.items()}
        delivered = all(row.state.value == "delivered" for row in rows.values())

        def text() -> None:
            for name, entry in result.items():
                error = f": {entry['last_error']}" if entry["last_error"] else ""
                print(visible(f"{name}: {entry['state']}{error}"))

        return Answer({"idempotency_key": probe.idempotency_key, "channels": result}, status=0 if delivered else 1, text=text)
