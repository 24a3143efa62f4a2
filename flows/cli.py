"""The ``vlgate`` command line.

Errors a user can fix (bad records, a missing column, a missing file) print one
line each on stderr and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlgate import tag_keys
from vlgate.config import ConfigError

EXIT_BAD_INPUT = 2
#: `vlgate validate` and `vlgate gate`: 0 promoted; the version was judged and rejected;
#: it could not be judged (an evaluator, a metric or the champion's records missing, or
#: the flow failed); inconclusive (a comparison with the champion too uncertain to decide:
#: more shared samples would)
EXIT_REJECTED = 3
EXIT_NOT_JUDGED = 4
EXIT_INCONCLUSIVE = 5
_EXIT_CODES = f"0 promoted, {EXIT_REJECTED} rejected (a rule failed on the numbers), {EXIT_NOT_JUDGED} could not judge"


def _exit_status(outcome: str) -> int:
    from vlgate.flows.gate import Outcome

    codes: dict[str, int] = {Outcome.PROMOTED: 0, Outcome.COULD_NOT_JUDGE: EXIT_NOT_JUDGED, Outcome.INCONCLUSIVE: EXIT_INCONCLUSIVE}
    return codes.get(outcome, EXIT_REJECTED)


class UserError(Exception):
    """A problem with what the user gave us; printed as one line, exit status 2."""


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, allow_nan=False) + "\n")


def cmd_score(args: argparse.Namespace) -> int:
    from vlgate.evaluators.records import InvalidRecordsError
    from vlgate.evaluators.scoring import score_file

    if not Path(args.file).is_file():
        raise UserError(f"{args.file}: no such file")
    try:
        metrics, valid = score_file(args.evaluator, args.file, by=args.by, features_path=args.features, skip_invalid=args.skip_invalid)
    except InvalidRecordsError as exc:
        for error in exc.errors:
            print(f"{args.file}: {error}", file=sys.stderr)
        print(f"{args.file}: {len({e.line for e in exc.errors})} invalid record(s); nothing scored (use --skip-invalid to score the rest)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    if valid.errors:
        for error in valid.errors:
            print(f"{args.file}: skipped {error}", file=sys.stderr)
        metrics["skipped"] = [error.as_dict() for error in valid.errors]
    _print_json(metrics)
    return 0


def _read_csv_strictly(path: Path) -> tuple[list[list[str]], list[str]]:
    """(rows, header) of a CSV with a header line; anything pandas would guess about — no
    such file, a folder, not UTF-8 (a UTF-16 export), no header, a row with more or fewer
    fields than the header, an unterminated quote — is a UserError naming the file and line."""
    import csv

    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a CSV file") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text (byte {error.start}); save the table as UTF-8 CSV") from None
    reader = csv.reader(text.splitlines(), skipinitialspace=True, strict=True)
    try:
        lines = [(reader.line_num, row) for row in reader if row]
    except csv.Error as error:
        raise UserError(f"{path}: line {reader.line_num}: {error}") from None
    if not lines:
        raise UserError(f"{path}: empty; expected a header line and one row per model")
    (_, header), rows = lines[0], lines[1:]
    for line, row in rows:
        if len(row) != len(header):
            raise UserError(f"{path}: line {line}: {len(row)} fields, the header has {len(header)}")
    return [row for _, row in rows], header


def cmd_correlate(args: argparse.Namespace) -> int:
    import pandas as pd

    from vlgate.evaluators.metrics.correlation import correlate_table

    rows, header = _read_csv_strictly(Path(args.table))
    frame = pd.DataFrame(rows, columns=header)
    ys = [y.strip() for y in args.y.split(",") if y.strip()]
    if not ys:
        raise UserError("--y names no column")
    try:
        result = correlate_table(frame, args.x, ys, ranks=args.ranks)
    except (KeyError, ValueError) as exc:
        raise UserError(f"{args.table}: {exc.args[0]}") from None
    _print_json(result)
    return 0


def cmd_make_world(args: argparse.Namespace) -> int:
    import contextlib
    import time

    from vlgate.evaluators.world.build import build_world
    from vlgate.flows.progress import WorldBuildProgress, duration
    from vlgate.home import vlgate_home

    out = Path(args.out) if args.out else vlgate_home() / "world"
    started = time.monotonic()
    phases = None if args.quiet else WorldBuildProgress(out)  # a line on stderr per phase and per checkpoint saved; stdout stays JSON
    with phases or contextlib.nullcontext():
        manifest = build_world(out, size=args.size, seed=args.seed, force=args.force, from_code=args.from_code, architecture=args.architecture, on_phase=phases)
    if not args.quiet:
        how = "reused" if manifest.get("cached") else "copied from the world shipped with vlgate" if manifest.get("shipped") else "trained"
        print(f"make-world: {out} {how} in {duration(time.monotonic() - started)}", file=sys.stderr)
    _print_json({"world": str(out)} | manifest)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from vlgate.evaluators.backends.base import BackendError
    from vlgate.evaluators.runners.suite import Suite, run_suite
    from vlgate.home import vlgate_home

    try:
        suite = Suite.from_file(args.suite)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        summary = run_suite(args.model, suite, Path(args.out), progress=not args.quiet, cache_dir=vlgate_home() / "model-cache")
    except BackendError as exc:
        raise UserError(str(exc)) from None
    failed = {name: entry["error"] for name, entry in summary["evaluators"].items() if "error" in entry}
    for name, entry in summary["evaluators"].items():
        for error in entry.get("item_errors", []):
            print(f"{name}: skipped {error}", file=sys.stderr)
    for name, message in failed.items():
        print(f"vlgate evaluate: {name} failed: {message} (records computed so far are kept; rerun to resume)", file=sys.stderr)
    _print_json({name: entry.get("metrics", {"error": entry.get("error")}) for name, entry in summary["evaluators"].items()})
    return 1 if failed else 0


#: `vlgate check-model`: a fast path vlgate would use on this model is not exact
EXIT_NOT_EXACT = 1


def cmd_check_model(args: argparse.Namespace) -> int:
    from vlgate.evaluators.backends import kinds as backends
    from vlgate.evaluators.backends.base import BackendError
    from vlgate.evaluators.runners.model_check import EXAMPLES_SUITE, check_model
    from vlgate.evaluators.runners.suite import Suite
    from vlgate.home import vlgate_home

    try:
        suite = Suite.from_file(args.suite or EXAMPLES_SUITE)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    backend = args.backend or suite.backend
    if not backends.get(backend).local:
        local = " or ".join(name for name in backends.names() if backends.get(name).local)
        raise UserError(f"suite {suite.name}: its model is served over HTTP (backend: {backend}); check-model runs the checkpoint itself (--backend {local})")
    try:
        result = check_model(args.model, suite, items=args.items, backend=backend, device=args.device, cache_dir=vlgate_home() / "model-cache")
    except (BackendError, ValueError) as exc:
        raise UserError(str(exc)) from None
    if args.json:
        _print_json(result.to_dict())
    else:
        from rich.console import Console

        from vlgate.flows.model_check import check_table

        Console().print(check_table(result))
    for path in result.untrusted():
        print(f"vlgate check-model: {path.path} is used on this model but differs from the plain forward pass by {path.largest_difference:.3g} (tolerance {path.tolerance:g})", file=sys.stderr)
    return 0 if result.trusted else EXIT_NOT_EXACT


def cmd_vllm_layout(args: argparse.Namespace) -> int:
    from vlgate.evaluators.backends.base import BackendError
    from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model
    from vlgate.evaluators.backends.weight_layout import vllm_layout
    from vlgate.home import vlgate_home

    cache = Path(args.cache) if args.cache else vlgate_home() / "model-cache"
    try:
        path = resolve_model(args.model, cache)
        check_checkpoint(path, LoadPolicy())
        print(vllm_layout(path, model_digest(path), cache))
    except BackendError as exc:
        raise UserError(str(exc)) from None
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from vlgate.flows.demo import run_demo

    return run_demo()


def cmd_examples(args: argparse.Namespace) -> int:
    from vlgate.flows.examples import run_examples

    return run_examples()


def _require_tracking(home: Path) -> None:
    """An operator command on an MLflow server that does not answer: one line, at once."""
    from vlgate import tracking

    try:
        tracking.require_reachable(tracking.tracking_uri(home))
    except tracking.TrackingUnreachable as error:
        raise UserError(str(error)) from None


def cmd_status(args: argparse.Namespace) -> int:
    from vlgate.flows.service import service_status, status_table
    from vlgate.flows.settings import prepare_environment

    home = prepare_environment()
    _require_tracking(home)
    status = service_status(home, args.model)
    if args.model and not status["models"]:
        raise UserError(f"no registered model {args.model!r}")
    if args.json:
        _print_json(status)
    else:
        from rich.console import Console

        Console().print(status_table(status))
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    from vlgate import tracking
    from vlgate.flows.settings import prepare_environment

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
    home = prepare_environment()
    _require_tracking(home)
    version = tracking.register_checkpoint(tracking.connect(home), args.name, folder, description=args.description or "")
    _print_json({"model": args.name, "version": str(version.version), "source": version.source})
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from vlgate.flows.settings import prepare_environment
    from vlgate.registry_hooks.claims import LIVE_STATES, ClaimStore

    claims = ClaimStore.for_home(prepare_environment())
    claim = claims.get(args.name, str(args.version))
    if claim is None:
        raise UserError(f"{args.name} v{args.version}: no claim (nothing to release)")
    alive = claim.state in LIVE_STATES and claim.lease_expires > datetime.now(timezone.utc)
    if alive and not args.force:
        raise UserError(f"{args.name} v{args.version} is {claim.state} by {claim.owner} (lease until {claim.lease_expires:%Y-%m-%d %H:%M:%S} UTC): --force releases it anyway")
    claims.release(args.name, str(args.version))
    _print_json({"model": args.name, "version": str(args.version), "released": claim.as_dict()})
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from vlgate.flows.prefect_server import local_prefect_server
    from vlgate.flows.settings import model_problem, prepare_environment

    home = prepare_environment()
    unjudgeable = model_problem(home, args.name)
    if unjudgeable:  # config, suite and policy checked before a Prefect server starts or anything is claimed
        raise UserError(unjudgeable)
    with local_prefect_server(home):
        from mlflow.exceptions import MlflowException

        from vlgate import tracking
        from vlgate.flows.validation import ValidationResult, validate_model_version

        try:
            tracking.connect(home).get_model_version(args.name, str(args.version))
        except MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                raise UserError(f"{args.name} v{args.version}: no such registered version") from None
            # anything else (the registry away...) is the flow's to retry and record
        try:
            result = validate_model_version(args.name, str(args.version))
        except Exception as error:  # the flow recorded it (claim failed, version tagged); CI needs the verdict
            result = ValidationResult.failed(args.name, str(args.version), error)
    summary = result.as_json()
    if args.json:
        _print_json(summary)
    else:
        _print_decision(summary)
    return _exit_status(result.outcome)


def cmd_gate(args: argparse.Namespace) -> int:
    from vlgate.flows.gate import GatePolicy
    from vlgate.flows.settings import ServiceConfig, not_configured, prepare_environment

    home = prepare_environment()
    _require_tracking(home)
    config = ServiceConfig.load(home).for_model(args.name)
    if config is None and args.policy is None:
        raise UserError(not_configured(home, args.name))
    policy_path = Path(args.policy) if args.policy else config.policy  # type: ignore[union-attr]  # one of the two is set
    try:
        GatePolicy.from_file(policy_path)  # a policy mistake is bad input, before anything is read back
    except ValueError as error:
        raise UserError(str(error)) from None
    from mlflow.exceptions import MlflowException

    from vlgate import tracking
    from vlgate.flows.validation import ValidationError, judge_again

    try:
        tracking.connect(home).get_model_version(args.name, str(args.version))
        summary = judge_again(args.name, str(args.version), str(policy_path), record=args.apply)
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise UserError(f"{args.name} v{args.version}: no such registered version") from None
        raise
    except ValidationError as error:
        raise UserError(str(error)) from None
    if args.json:
        _print_json(summary)
    else:
        _print_decision(summary)
    return _exit_status(summary["outcome"])


def cmd_diff(args: argparse.Namespace) -> int:
    from vlgate.evaluators import registry
    from vlgate.evaluators.item_diff import NothingToCompareError, diff_outputs
    from vlgate.flows.settings import prepare_environment

    if args.limit < 0:
        raise UserError(f"--limit {args.limit}: expected 0 or more items")
    if args.evaluator is not None and args.evaluator not in registry.names():
        raise UserError(f"--evaluator {args.evaluator}: not one of {', '.join(registry.names())}")
    if args.score is not None and args.evaluator is None:
        raise UserError("--score names an item score of one evaluator: give --evaluator too")
    home = prepare_environment()
    _require_tracking(home)
    from mlflow.exceptions import MlflowException

    from vlgate import tracking
    from vlgate.flows.recording import run_outputs

    client = tracking.connect(home)
    outputs: dict[str, dict[str, Any]] = {}
    suites: dict[str, str | None] = {}
    for version in (args.version, args.other):
        try:
            run_id = client.get_model_version(args.name, str(version)).tags.get(tag_keys.VALIDATION_RUN)
        except MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                raise UserError(f"{args.name} v{version}: no such registered version") from None
            raise
        if not run_id:
            raise UserError(f"{args.name} v{version} has no validation run yet (vlgate validate {args.name} {version})")
        outputs[version] = run_outputs(client, run_id)
        suites[version] = client.get_run(run_id).data.params.get("suite")
    if None not in suites.values() and suites[args.version] != suites[args.other]:
        raise UserError(
            f"{args.name} v{args.version} was evaluated on the suite {suites[args.version]}, v{args.other} on {suites[args.other]}: their items are not comparable"
        )
    evaluators = [args.evaluator] if args.evaluator else [name for name in registry.names() if name in outputs[args.version] or name in outputs[args.other]]
    diffs = []
    for evaluator in evaluators:
        mine, theirs = outputs[args.version].get(evaluator), outputs[args.other].get(evaluator)
        for version, output in ((args.version, mine), (args.other, theirs)):
            if output is None:
                raise UserError(f"{args.name} v{version} has no {evaluator} records")
        assert mine is not None and theirs is not None
        if mine.protocol != theirs.protocol:
            raise UserError(
                f"{args.name} v{args.version} asked {evaluator} under protocol {mine.protocol}, v{args.other} under {theirs.protocol}: their items are not comparable"
            )
        try:
            diffs.append(diff_outputs(mine, theirs, args.category, args.score, names=(f"{args.name} v{args.version}", f"{args.name} v{args.other}")))
        except NothingToCompareError as error:
            raise UserError(str(error)) from None
    if args.json:
        _print_json({"model": args.name, "version": str(args.version), "against": str(args.other), "category": args.category, "evaluators": [diff.as_dict(args.limit) for diff in diffs]})
        return 0
    print(f"{args.name} v{args.version} against v{args.other}" + (f", category {args.category}" if args.category else ""))
    for diff in diffs:
        _print_diff(diff, args.limit)
    return 0


def _print_diff(diff: Any, limit: int) -> None:
    """One evaluator: a line per item score, then the items lost and won on the first."""
    from vlgate.evaluators.item_diff import field_text

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


def _print_decision(summary: dict[str, Any]) -> None:
    """The verdict and each rule's, one line each; the reasons a rule failed first."""
    print(f"{summary['model']} v{summary['version']}: {summary['outcome']}")
    if "error" in summary:
        print(f"  validation failed: {summary['error']}")
        return
    checks = sorted(summary.get("checks", []), key=lambda check: check["verdict"] == "pass")
    for check in checks:
        print(f"  {check['verdict']:<15} {check['name']}: {check['detail']}")
    for warning in summary.get("warnings", []):
        print(f"  {'warning':<15} {warning}")
    if summary.get("report"):
        print(f"report: {summary['report']}")


def cmd_init(args: argparse.Namespace) -> int:
    """A commented suite, policy and vlgate.yaml entry for one model, checked as validate checks them."""
    from vlgate.flows.scaffold import ScaffoldError, write_starting_config
    from vlgate.flows.settings import model_problem
    from vlgate.home import vlgate_home

    home = Path(args.dir) if args.dir else vlgate_home()
    try:
        written = write_starting_config(home, args.name, force=args.force)
    except ScaffoldError as error:
        raise UserError(str(error)) from None
    problem = model_problem(home, args.name)
    if problem:  # the templates load and agree with each other; this would be vlgate's own bug
        raise RuntimeError(f"vlgate init wrote a configuration it cannot load: {problem}")
    for path in written:
        print(f"wrote {path}")
    print(f"next: put your data where {home / args.name / 'suite.yaml'} says (or edit it), register a checkpoint with "
          f"`vlgate register {args.name} CHECKPOINT_DIR`, and run `vlgate validate {args.name} 1` (or `vlgate serve`)")
    return 0


def cmd_drift(args: argparse.Namespace) -> int:
    """One drift check of the model's champion now, as the schedule runs it."""
    from vlgate import tracking
    from vlgate.evaluators.runners.suite import Suite
    from vlgate.flows.drift import DriftOutcome, DriftResult
    from vlgate.flows.prefect_server import local_prefect_server
    from vlgate.flows.settings import CONFIG_FILE, ServiceConfig, prepare_environment

    home = prepare_environment()
    _require_tracking(home)
    config = ServiceConfig.load(home).for_model(args.name)
    if config is None or config.drift is None:
        raise UserError(f"registered model {args.name!r} has no drift section in {home / CONFIG_FILE} (models.NAME.drift: reference, batch)")
    batch = Path(args.batch).resolve() if args.batch else None
    for suite in (config.drift.reference, batch or config.drift.batch):
        try:
            Suite.from_file(suite)  # a suite mistake is bad input, before a server starts
        except ValueError as error:
            raise UserError(str(error)) from None
    champion = tracking.champion_version(tracking.connect(home), args.name)
    if champion is None:
        result = DriftResult(model=args.name, version=None, outcome=DriftOutcome.NOT_CHECKED, error="no champion yet: nothing to check for drift", checks=[])
    else:
        with local_prefect_server(home):
            from vlgate.flows.drift import drift_check

            try:
                result = drift_check(args.name, str(batch) if batch else None)
            except Exception as error:  # the flow's own log has the traceback; CI needs the outcome
                result = DriftResult(model=args.name, version=champion, outcome=DriftOutcome.NOT_CHECKED, error=f"{type(error).__name__}: {error}", checks=[])
    summary = result.as_json()
    if args.json:
        _print_json(summary)
    else:
        print(f"{summary['model']} v{summary['version']}: {summary['outcome']}" if summary["version"] else f"{summary['model']}: {summary['outcome']}")
        if "error" in summary:
            print(f"  {summary['error']}")
        for check in sorted(summary["checks"], key=lambda check: not check["drifted"]):
            print(f"  {'drifted' if check['drifted'] else 'ok':<8} {check['metric']}: {check['reason']}")
        if summary.get("run_id"):
            print(f"drift run: {summary['run_id']}")
    return EXIT_REJECTED if result.drifted else EXIT_NOT_JUDGED if result.outcome == DriftOutcome.NOT_CHECKED else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from vlgate.flows.service import serve

    return serve(webhook=not args.no_webhook, once=args.once, drift=not args.no_drift)


def cmd_report(args: argparse.Namespace) -> int:
    from vlgate import tracking
    from vlgate.flows.settings import prepare_environment

    home = prepare_environment()
    _require_tracking(home)
    client = tracking.connect(home)
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(args.model)
        if args.version is not None:
            client.get_model_version(args.model, str(args.version))
    except MlflowException as error:
        raise UserError(f"{args.model}{' v' + str(args.version) if args.version else ''}: not in the registry ({error.error_code})") from None
    from vlgate.dashboards.report import write_reports

    out = Path(args.out) if args.out else home / "reports" / args.model
    from vlgate.flows.settings import report_image_roots

    versions = [str(args.version)] if args.version is not None else None
    written = write_reports(client, args.model, versions, out, log_to_mlflow=not args.no_log, image_roots=report_image_roots(home, args.model))
    _print_json({"leaderboard": str(written.leaderboard), "reports": {v: str(p) for v, p in written.versions.items()}})
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vlgate import __version__
    from vlgate.evaluators import registry
    from vlgate.evaluators.backends import kinds as backends

    parser = argparse.ArgumentParser(
        prog="vlgate",
        description="Continuous validation of vision-language models: score records, correlate metrics, run the gate.",
    )
    parser.add_argument("--version", action="version", version=f"vlgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    score = commands.add_parser(
        "score",
        help="metrics from per-sample records (docs/metrics.md), one JSON object on stdout",
        description="Validate a JSONL file of per-sample records against the evaluator's schema and print its metrics as JSON.",
    )
    score.add_argument("evaluator", choices=registry.names(), help="which record contract and metrics")
    score.add_argument("file", help="JSON Lines file, one record per line")
    score.add_argument("--features", metavar="F.npz", help="genception only: features t0..tT (N x D each) for fid@t and gc_fid@T")
    score.add_argument("--by", metavar="FIELD", help="break the metrics down by this record field (default: category/concept when present)")
    score.add_argument("--skip-invalid", action="store_true", help="score the valid records and report the invalid ones instead of failing")
    score.set_defaults(handler=cmd_score)

    correlate = commands.add_parser(
        "correlate",
        help="Pearson/Spearman/Kendall between table columns across models (docs/metrics.md#correlations)",
        description="Correlate column X with each column of Y in a CSV with one row per model; prints {y: {pearson, spearman, kendall, n}}.",
    )
    correlate.add_argument("table", metavar="TABLE.csv")
    correlate.add_argument("--x", required=True, metavar="COL", help="the label-free metric, e.g. lcm")
    correlate.add_argument("--y", required=True, metavar="COL[,COL...]", help="the metrics to correlate with, e.g. acc,j_acc,f1")
    correlate.add_argument("--ranks", action="store_true", help="cells are value/rank: values order the models, printed ranks break ties")
    correlate.set_defaults(handler=cmd_correlate)

    make_world = commands.add_parser(
        "make-world",
        help="build the synthetic world: data sets for every evaluator and tiny trained checkpoints",
        description=(
            "Put the offline synthetic world under --out: reused when already there, copied from the world that ships with "
            "vlgate (the small one, seed 0: the same weights on every machine), or trained from code (--from-code, other sizes or seeds)."
        ),
    )
    make_world.add_argument("--size", choices=("small", "medium"), default="small", help="data set sizes (small is CI-sized)")
    make_world.add_argument("--out", help="target folder (default: $VLGATE_HOME/world)")
    make_world.add_argument("--seed", type=int, default=0, help="fixes every image, item and initial weight")
    make_world.add_argument("--force", action="store_true", help="rebuild even if a matching world exists")
    make_world.add_argument("--from-code", action="store_true", help="train every checkpoint here instead of copying the world that ships with vlgate (minutes)")
    make_world.add_argument("--quiet", action="store_true", help="no progress lines on stderr (each phase of a training, with its time)")
    make_world.add_argument(
        "--architecture", choices=("llava", "idefics3"), default="llava",
        help="the VLM family's architecture (idefics3 is always trained here; both run on transformers and on vLLM)",
    )
    make_world.set_defaults(handler=cmd_make_world)

    evaluate = commands.add_parser(
        "evaluate",
        help="run a suite's evaluators on a model; write per-sample records and metrics",
        description=(
            "Run every evaluator of SUITE.yaml on model M (a local folder, an HF id, or an MLflow URI such as models:/NAME/1) "
            "and write DIR/EVALUATOR/{records.jsonl,metrics.json,errors.jsonl} and DIR/summary.json. Records are written as "
            "they complete and keyed by fingerprint, so an interrupted run resumes where it stopped."
        ),
    )
    evaluate.add_argument("--model", required=True, metavar="M")
    evaluate.add_argument("--suite", required=True, metavar="SUITE.yaml")
    evaluate.add_argument("--out", required=True, metavar="DIR")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    evaluate.set_defaults(handler=cmd_evaluate)

    check_model = commands.add_parser(
        "check-model",
        help="compare every fast path vlgate would use on a model with the plain forward pass",
        description=(
            "Run a few of the suite's lcm-mc and lcm-nb items (default: the shipped examples) through each fast path vlgate "
            "would use on model M (batched scoring, shared prefixes, batched generation, vLLM's engine when the suite runs on it) and through "
            "the plain path (each request alone, the whole prompt), in float32; print per path the largest difference and "
            f"whether vlgate uses it. Exit status: 0 every path used is exact, {EXIT_NOT_EXACT} one is not, 2 bad input."
        ),
    )
    check_model.add_argument("model", metavar="M", help="a checkpoint folder, an MLflow URI (models:/NAME/1) or a Hugging Face id")
    check_model.add_argument("--suite", metavar="SUITE.yaml", help="whose lcm-mc/lcm-nb items and batch size to use (default: the shipped examples)")
    check_model.add_argument("--items", type=int, default=4, metavar="N", help="items per evaluator (default 4)")
    local_backends = [name for name in backends.names() if backends.get(name).local]
    check_model.add_argument("--backend", choices=local_backends, help="the engine to check (default: the suite's); another engine than transformers (vllm) is also compared with the transformers plain path")
    check_model.add_argument("--device", help="torch device for the check (default: CUDA when present)")
    check_model.add_argument("--json", action="store_true", help="the result as one JSON object")
    check_model.set_defaults(handler=cmd_check_model)

    layout = commands.add_parser(
        "vllm-layout",
        help="print the folder to give `vllm serve` for a checkpoint (its weight names as vLLM reads them)",
        description=(
            "transformers 5 saves CLIP and SigLIP vision towers (LLaVA, LLaVA-NeXT, LLaVA-OneVision, PaliGemma, Gemma3, Aya Vision) "
            "without the 'vision_model' level vLLM reads. Print the checkpoint's folder when vLLM reads it as it is, otherwise make "
            "(once, in the model cache, keyed by the checkpoint's digest) a copy with the released names and print that: the same "
            "tensors byte for byte. vlgate's own vLLM backend does this by itself."
        ),
    )
    layout.add_argument("model", metavar="M", help="a checkpoint folder, an MLflow URI (models:/NAME/1) or a Hugging Face id")
    layout.add_argument("--cache", metavar="DIR", help="where the copy goes (default: $VLGATE_HOME/model-cache)")
    layout.set_defaults(handler=cmd_vllm_layout)

    demo = commands.add_parser(
        "demo",
        help="the README's main job: the whole register → validate → gate → drift loop on the embedded default",
        description=(
            "Build the synthetic world, register its VLM versions in the embedded MLflow registry ($VLGATE_HOME), let the "
            "poller start one validation flow per version (evaluators, Great Expectations, correlations, gate), run the drift "
            "check on a clean and a shifted unlabelled batch, and print every version's metrics and decision. A second run "
            "reuses everything and only prints the result."
        ),
    )
    demo.set_defaults(handler=cmd_demo)

    examples = commands.add_parser(
        "examples",
        help="score the shipped example records and reproduce the VL-LCM paper's Table 1 correlations (no models, seconds)",
        description="Score the shipped example records of every evaluator and reproduce the VL-LCM paper's Table 1 correlations.",
    )
    examples.set_defaults(handler=cmd_examples)

    status = commands.add_parser(
        "status",
        help="registered models, each version's validation state, decision and reasons, and the champion",
        description="Read the registry and vlgate's claims (all state under $VLGATE_HOME, or MLFLOW_TRACKING_URI / VLGATE_STATE_DB).",
    )
    status.add_argument("model", nargs="?", help="only this registered model")
    status.add_argument("--json", action="store_true", help="one JSON object on stdout")
    status.set_defaults(handler=cmd_status)

    release = commands.add_parser(
        "release",
        help="forget a version's claim so that the poller validates it again (after a failure, or a worker lost for good)",
        description="A claim that failed (e.g. the registry was away for longer than the retries) stays failed until an operator releases it.",
    )
    release.add_argument("name")
    release.add_argument("version", type=int)
    release.add_argument("--force", action="store_true", help="also a claim whose lease is still running (its worker may be alive)")
    release.set_defaults(handler=cmd_release)

    register = commands.add_parser(
        "register",
        help="log a checkpoint folder to MLflow and register it as a new model version",
        description="What a training job does at the end; the same weights registered twice give the existing version back.",
    )
    register.add_argument("name", help="registered model name")
    register.add_argument("checkpoint", help="checkpoint folder (safetensors)")
    register.add_argument("--description")
    register.set_defaults(handler=cmd_register)

    validate = commands.add_parser(
        "validate",
        help="run the validation flow on one registered version now (what the hooks do)",
        description=(
            "Claims the version if nothing has, evaluates, checks, logs, correlates and gates it; prints the decision. "
            f"Exit status: {_EXIT_CODES} (an evaluator, a metric or the champion's records missing, or the flow failed), "
            f"{EXIT_INCONCLUSIVE} inconclusive (a comparison with the champion too uncertain: more shared samples would decide), "
            "2 bad input (the config, suite or policy; checked before anything runs)."
        ),
    )
    validate.add_argument("name")
    validate.add_argument("version")
    validate.add_argument("--json", action="store_true", help="the decision as one JSON object: outcome, reasons, every rule's structured check")
    validate.set_defaults(handler=cmd_validate)

    gate = commands.add_parser(
        "gate",
        help="judge a version's existing validation run again (a changed policy, a new champion) without evaluating",
        description=(
            "Reads the version's validation run back from MLflow (records, metrics, expectation results, failed evaluators) and "
            "judges it against the current champion with the model's policy (or --policy). Nothing is written unless --apply: "
            "then decision.json, the version's tags and, on promotion, the champion alias, as the flow does. "
            f"Exit status as for validate: {_EXIT_CODES}, {EXIT_INCONCLUSIVE} inconclusive, 2 bad input."
        ),
    )
    gate.add_argument("name")
    gate.add_argument("version")
    gate.add_argument("--policy", metavar="POLICY.yaml", help="judge with this policy instead of the model's (vlgate.yaml)")
    gate.add_argument("--apply", action="store_true", help="record the decision and move the alias on promotion")
    gate.add_argument("--json", action="store_true", help="the decision as one JSON object")
    gate.set_defaults(handler=cmd_gate)

    diff = commands.add_parser(
        "diff",
        help="the items a version lost and won against another, per evaluator, from their validation runs",
        description=(
            "Reads both versions' validation runs back from MLflow and compares each evaluator's item scores on the items both "
            "hold, joined on the record id as the gate pairs them: a 0/1 score's lost and won items (the discordant pairs of "
            "the gate's paired comparison), a continuous score's changes; then lists the items lost and won on the "
            "evaluator's first score with both versions' answers. A version without records of an evaluator is exit 2."
        ),
    )
    diff.add_argument("name", help="registered model name")
    diff.add_argument("version", help="the version looked at (the candidate)")
    diff.add_argument("other", help="the version it is compared with (the champion it was judged against, say)")
    diff.add_argument("--evaluator", help="one evaluator (default: every one both runs have)")
    diff.add_argument("--category", help="only the items of this breakdown category")
    diff.add_argument("--score", help="the item score whose items are listed (with --evaluator; default: its first, e.g. lcm-mc's correct)")
    diff.add_argument("--limit", type=int, default=10, help="items listed lost and won, per evaluator (default 10)")
    diff.add_argument("--json", action="store_true", help="one JSON object on stdout")
    diff.set_defaults(handler=cmd_diff)

    report = commands.add_parser(
        "report",
        help="regenerate a version's HTML report (or every version's) and the model's leaderboard from MLflow",
        description=(
            "Read the registry and the validation runs, write self-contained HTML pages (plots embedded) to --out "
            "(default $VLGATE_HOME/reports/MODEL) and log each version's report and plots to its run under report/."
        ),
    )
    report.add_argument("model", help="registered model name")
    report.add_argument("version", nargs="?", help="one version (default: every validated version)")
    report.add_argument("--out", help="folder for the pages")
    report.add_argument("--no-log", action="store_true", help="write the pages only; do not log them to MLflow")
    report.set_defaults(handler=cmd_report)

    init = commands.add_parser(
        "init",
        help="write a commented suite, gate policy and vlgate.yaml entry for one registered model",
        description=(
            "Writes NAME/suite.yaml (every evaluator, its data format in a comment), NAME/gate.yaml (floors and "
            "non-inferiority on logical consistency and accuracy) and adds NAME to vlgate.yaml, under $VLGATE_HOME "
            "or --dir. Existing suite and policy files are kept unless --force."
        ),
    )
    init.add_argument("name")
    init.add_argument("--dir", metavar="DIR", help="where (default: $VLGATE_HOME)")
    init.add_argument("--force", action="store_true", help="overwrite the model's suite and policy")
    init.set_defaults(handler=cmd_init)

    drift = commands.add_parser(
        "drift",
        help="run a drift check of the model's champion now and print it",
        description=(
            "Scores the champion on the model's reference and new batches (models.NAME.drift in vlgate.yaml; --batch another "
            "suite) and compares each label-free per-sample score: KS test, Holm-adjusted across the scores, and the mean drop "
            "(evaluators/metrics/drift.py). Logged as a drift run like the scheduled check. "
            f"Exit status: 0 no drift, {EXIT_REJECTED} drifted, {EXIT_NOT_JUDGED} could not check (no champion, no score "
            "testable, or the check failed), 2 bad input."
        ),
    )
    drift.add_argument("name")
    drift.add_argument("--batch", metavar="SUITE.yaml", help="the drift suite of the batch to check (default: the model's drift.batch)")
    drift.add_argument("--json", action="store_true", help="the result as one JSON object: outcome, and every score's check")
    drift.set_defaults(handler=cmd_drift)

    serve = commands.add_parser(
        "serve",
        help="the long-running service: webhook receiver, poller, scheduled drift checks",
        description=(
            "Poll the registry, receive MLflow webhooks on $VLGATE_HOME/vlgate.yaml's webhook host:port (secret: "
            "VLGATE_WEBHOOK_SECRET; registered with the tracking server when it is one), and serve the drift checks' "
            "cron deployments (starting a local Prefect server when PREFECT_API_URL is unset)."
        ),
    )
    serve.add_argument("--no-webhook", action="store_true", help="poller only")
    serve.add_argument("--no-drift", action="store_true", help="no scheduled drift checks")
    serve.add_argument("--once", action="store_true", help="poll once, wait for the flows it started, exit")
    serve.set_defaults(handler=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (UserError, ConfigError) as exc:  # a config file read by any command is the user's input too
        print(f"vlgate {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def console_main() -> int:
    """The ``vlgate`` console script: :func:`main`, then everything the command built is
    left to the operating system. The interpreter's last garbage collection at exit walks
    every object MLflow, Prefect and Great Expectations made, 1.4 s after `vlgate validate`
    here; frozen objects are skipped. Exit handlers still run (Prefect's log and event
    workers drain in them), and vlgate closes its files and connections itself."""
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console_main())
