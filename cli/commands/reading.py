"""The commands that read what a validation recorded: compare two versions item by item,
regenerate reports, and plan what a model's policy can decide on its suite."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate import tag_keys
from vlgate.cli.commands.base import (
    Answer,
    Command,
    UserError,
    registered_version,
    service_context,
    version_number,
    version_ref,
)
from vlgate.text import shell_command

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from pydantic import JsonValue

    from vlgate.evaluators.item_diff import EvaluatorDiff
    from vlgate.evaluators.output import EvaluatorOutput


class Diff(Command):
    name = "diff"
    help = "the items a version lost and won against another, per evaluator, from their validation runs"
    description = (
        "Reads both versions' validation runs back from MLflow and compares each evaluator's item scores on the items both "
        "hold, joined on the record id as the gate pairs them: a 0/1 score's lost and won items (the discordant pairs of "
        "the gate's paired comparison), a continuous score's changes; then lists the items lost and won on the "
        "evaluator's first score with both versions' answers. A version without records of an evaluator is exit 2."
    )
    json_help = "one JSON object on stdout"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name", help="registered model name")
        parser.add_argument("version", help="the version looked at (the candidate)")
        parser.add_argument("other", help="the version it is compared with (the champion it was judged against, say)")
        parser.add_argument("--evaluator", help="one evaluator (default: every one both runs have)")
        parser.add_argument("--category", help="only the items of this breakdown category")
        parser.add_argument("--score", help="the item score whose items are listed (with --evaluator; default: its first, e.g. lcm-mc's correct)")
        parser.add_argument("--limit", type=int, default=10, help="items listed lost and won, per evaluator (default 10)")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.evaluators import registry
        from vlgate.evaluators.item_diff import NothingToCompareError, diff_outputs
        from vlgate.flows.recording import run_outputs

        subjects = version_ref(args.name, args.version), version_ref(args.name, args.other, "other version")
        args.version, args.other = (subject.version for subject in subjects)
        if args.limit < 0:
            raise UserError(f"--limit {args.limit}: expected 0 or more items")
        if args.evaluator is not None and args.evaluator not in registry.names():
            raise UserError(f"--evaluator {args.evaluator}: not one of {', '.join(registry.names())}")
        if args.score is not None and args.evaluator is None:
            raise UserError("--score names an item score of one evaluator: give --evaluator too")
        client = service_context().tracking
        outputs: dict[str, dict[str, EvaluatorOutput]] = {}
        suites: dict[str, str | None] = {}
        for subject in subjects:
            run_id = registered_version(client, subject).tags.get(tag_keys.VALIDATION_RUN)
            if not run_id:
                raise UserError(f"{subject} has no validation run yet ({shell_command('vlgate', 'validate', subject.model, subject.version)})")
            outputs[subject.version] = run_outputs(client, run_id)
            suites[subject.version] = client.get_run(run_id).data.params.get("suite")
        if None not in suites.values() and suites[args.version] != suites[args.other]:
            raise UserError(f"{args.name} v{args.version} was evaluated on the suite {suites[args.version]}, v{args.other} on {suites[args.other]}: their items are not comparable")
        evaluators = [args.evaluator] if args.evaluator else [name for name in registry.names() if name in outputs[args.version] or name in outputs[args.other]]
        diffs = []
        for evaluator in evaluators:
            mine, theirs = outputs[args.version].get(evaluator), outputs[args.other].get(evaluator)
            for version, output in ((args.version, mine), (args.other, theirs)):
                if output is None:
                    raise UserError(f"{args.name} v{version} has no {evaluator} records")
            assert mine is not None and theirs is not None
            if mine.protocol != theirs.protocol:
                raise UserError(f"{args.name} v{args.version} asked {evaluator} under protocol {mine.protocol}, v{args.other} under {theirs.protocol}: their items are not comparable")
            try:
                diffs.append(diff_outputs(mine, theirs, args.category, args.score, names=(f"{args.name} v{args.version}", f"{args.name} v{args.other}")))
            except NothingToCompareError as error:
                raise UserError(str(error)) from None
        data = {"model": args.name, "version": str(args.version), "against": str(args.other), "category": args.category, "evaluators": [diff.as_dict(args.limit) for diff in diffs]}

        def text() -> None:
            print(f"{args.name} v{args.version} against v{args.other}" + (f", category {args.category}" if args.category else ""))
            for diff in diffs:
                print_diff(diff, args.limit)

        return Answer(data, text=text)


def print_diff(diff: EvaluatorDiff, limit: int) -> None:
    """One evaluator: a line per item score, then the items lost and won on the first; a
    record field on one line (its newlines and other control characters escaped)."""
    from vlgate.evaluators.item_diff import field_text as unescaped_field_text
    from vlgate.text import visible

    def field_text(value: JsonValue) -> str:
        return visible(unescaped_field_text(value))

    summary = diff.summary()
    shared = max((entry["n_shared"] for entry in summary.values()), default=0)
    print(f"\n{diff.evaluator}: {shared} items both versions hold")
    for name, entry in summary.items():
        if entry["kind"] == "binary":
            print(f"  {name}: lost {entry['lost']}, won {entry['won']} (both right {entry['both_right']}, both wrong {entry['both_wrong']})")
        else:
            change = "—" if entry["mean_change"] is None else f"{entry['mean_change']:+.3f}"
            print(f"  {name}: mean change {change}; fell on {entry['lost']}, rose on {entry['won']}")
    for which in ("lost", "won"):
        items = diff.listed(which, limit)
        if not items:
            continue
        print(f"  {which} on {diff.listed_score} ({'largest drop' if which == 'lost' else 'largest gain'} first):")
        for item in items:
            category = f" [{item['category']}]" if item["category"] is not None else ""
            print(f"    {item['id']}{category}: {item['champion']:.3g} → {item['candidate']:.3g}")
            for field, values in item["fields"].items():
                if values["candidate"] == values["champion"]:
                    print(f"      {field}: {field_text(values['candidate'])}")
                else:
                    print(f"      {field}: {field_text(values['candidate'])}  (was {field_text(values['champion'])})")


class Report(Command):
    name = "report"
    help = "regenerate a version's HTML report (or every version's) and the model's leaderboard from MLflow"
    description = (
        "Read the registry and the validation runs, write self-contained HTML pages (plots embedded) to --out (default $VLGATE_HOME/reports/MODEL) and log each version's report and plots to its run under report/."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="registered model name")
        parser.add_argument("version", nargs="?", help="one version (default: every validated version)")
        parser.add_argument("--out", help="folder for the pages")
        parser.add_argument("--no-log", action="store_true", help="write the pages only; do not log them to MLflow")

    def run(self, args: argparse.Namespace) -> Answer:

        from vlgate.dashboards.report import write_reports
        from vlgate.flows.settings import report_image_roots

        if args.version is not None:
            args.version = version_number(args.version)
        context = service_context()
        client = context.tracking
        in_the_registry(client, args.model, args.version)
        out = Path(args.out) if args.out else context.home / "reports" / args.model
        versions = [args.version] if args.version is not None else None
        written = write_reports(client, args.model, versions, out, log_to_mlflow=not args.no_log, image_roots=report_image_roots(context.config, args.model))
        return Answer({"leaderboard": str(written.leaderboard), "reports": {v: str(p) for v, p in written.versions.items()}})


class Plan(Command):
    name = "plan"
    help = "what each rule of a model's policy can decide on its suite's items, before anything runs"
    description = (
        "For every rule of the model's gate policy: the items it is judged on, the per-item spread of its statistic (measured on the "
        "champion, paired with the version validated before it; assumed where there is none), the smallest change it detects with "
        "80 % power at the policy's level, and the items its margin needs; a warning names each rule the suite is too small for "
        "(gate/power.py). Exit status 0; 2 for bad input."
    )
    json_help = "the plan as one JSON object: every rule's row and the warnings"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")

    def run(self, args: argparse.Namespace) -> Answer:
        """The model's power plan from its configuration, its suite's items and its champion's records."""
        from vlgate.cli.power_plan import configured_power_plan
        from vlgate.flows.settings import CONFIG_FILE

        context = service_context()
        config = context.config.for_model(args.name)
        if config is None:
            raise UserError(f"registered model {args.name!r} is not configured in {context.home / CONFIG_FILE} (models.NAME: suite, policy)")
        try:
            plan = configured_power_plan(context.tracking, args.name, config)
        except ValueError as error:
            raise UserError(str(error)) from None
        summary = plan.model_dump(mode="json") | {"warnings": plan.warnings}

        def text() -> None:
            from vlgate.cli.power_plan import plan_table
            from vlgate.cli.terminal import terminal_console

            terminal_console().print(plan_table(plan))
            for warning in plan.warnings:
                print(f"warning: {warning}")

        return Answer(summary, text=text)


class History(Command):
    name = "history"
    help = "a model's decisions over time: every version's decision records and the champion alias's moves"
    description = (
        "Reads the registry and each version's validation run: every decision record (which judgement made it, its outcome, the "
        "champion before and after, whether it moved the alias, when and by whom), and the champion's timeline (which version held "
        "the alias from when to when, and the record that moved it). An alias moved outside vlgate has no record: the history says "
        "so. With VERSION, that version's records alone (the timeline is still every version's). Exit status 0; 2 for a model or version not in the registry."
    )
    json_help = "the history as one JSON object: versions with their records, the timeline, today's champion"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="registered model name")
        parser.add_argument("version", nargs="?", help="one version (default: every version)")

    def run(self, args: argparse.Namespace) -> Answer:

        from vlgate import tracking
        from vlgate.history import model_history

        version = version_number(args.version) if args.version is not None else None
        client = service_context().tracking
        in_the_registry(client, args.model, version)
        # every version's records, also for one version's: the move that explains today's champion may be another's
        history = model_history(args.model, tracking.version_histories(client, args.model), tracking.champion_version(client, args.model), only=version)

        def text() -> None:
            from vlgate.cli.history_tables import print_history

            print_history(history)

        return Answer(history.as_json(), text=text)


def in_the_registry(client: MlflowClient, model: str, version: str | None) -> None:
    """A model (and ``version`` of it) that the registry does not hold is bad input: one line, exit 2."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(model)
        if version is not None:
            client.get_model_version(model, version)
    except MlflowException as error:
        raise UserError(f"{model}{' v' + version if version else ''}: not in the registry ({error.error_code})") from None
