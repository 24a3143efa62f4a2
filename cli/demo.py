"""``vlgate demo``: the README's main job, the whole loop on the embedded default.

1. Put the synthetic world under ``$VLGATE_HOME/world`` (the models shipped with vlgate,
   so every machine validates the same weights, with the medium world's data sets drawn
   from its seed, or the small world's with ``--size small``; reused when there): data for
   every evaluator and a family of tiny VLMs of differing quality.
2. Register seven of them, as a training team would, as versions of ``world-vlm`` in the
   embedded MLflow registry (SQLite + artifact folder under ``$VLGATE_HOME/mlflow``):
   untrained, 3,000 steps, 10,000 steps, and the 10,000-step model fine-tuned with one
   fault each, built for one evaluator to catch (:data:`VERSIONS`).
3. The registry hook picks them up (the embedded store sends no webhooks, so it is the
   poller) and runs one validation flow per version: evaluators, Great Expectations,
   MLflow logging, correlations, the gate, after each quarter of every evaluator's items
   (the demo's policy is group-sequential: a failing version stops at the look that shows it).
4. Drift: the champion is scored on an unlabelled reference batch and on two new batches,
   one from the same distribution and one whose images are washed out (a camera or
   pipeline change); the scheduled flow's check runs on each and tags the shifted one.
5. Print each version's metrics, correlations and decision, which evaluator rejected each
   faulty version, the drift checks, and how to open MLflow's UI.

A second run finds everything registered, validated and checked and only prints the result.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import JsonValue
from rich import box
from rich.console import Console
from rich.table import Table

from vlgate import tracking
from vlgate.cli.displays import display
from vlgate.cli.terminal import terminal_console
from vlgate.cli.world_progress import WorldBuildProgress
from vlgate.flows import progress
from vlgate.flows.context import ServiceContext
from vlgate.flows.settings import CONFIG_FILE, report_image_roots
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from vlgate.cli.service import ServiceStatus

MODEL_NAME = "world-vlm"
#: (checkpoint folder in the world, what the version is, the evaluator built to catch its
#: fault or None), registered in this order: the family as it trains, then the trained
#: version fine-tuned with one fault each (evaluators/world/faults.py, FAULTS)
VERSIONS = (
    ("vlm-steps0", "untrained (random weights)", None),
    ("vlm-steps3000", "3,000 training steps", None),
    ("vlm-steps10000", "10,000 training steps", None),
    ("vlm-language-prior", "trained, then fine-tuned to judge statements about the image by common sense", "vlind"),
    ("vlm-answer-prior", "trained, then fine-tuned to answer an MC item's yes/no probes by an answer prior", "lcm-mc"),
    ("vlm-poor-description", "trained, then fine-tuned to describe every image as the same generic scene", "genception"),
    ("vlm-miscount", "trained, then fine-tuned to answer counting sub-questions wrong", "decc"),
)
#: fault (the checkpoint folder without "vlm-") → the evaluator built to catch it
FAULT_EVALUATORS = {folder.removeprefix("vlm-"): evaluator for folder, _, evaluator in VERSIONS if evaluator}

#: The demo's rules, judged once on every item (the fixed-sample gate)
DEMO_RULES = """\
# The demo's gate for world-vlm (gate/policy.py documents every field).
required: [lcm-mc, lcm-nb, vlind, genception, decc]
floors:                      # what a version must reach at all: the early versions do not
  lcm-mc/lcm: 0.75
  lcm-mc/acc: 0.6
  lcm-nb/lcm: 0.7
  vlind/s_lp: 0.75
  genception/gc@3: 0.5
  decc/reliable_rate/multi: 0.5
regressions:                 # non-inferiority against the champion: paired bootstrap, Holm
  lcm-mc/lcm: {max_drop: 0.1}
  lcm-nb/lcm: {max_drop: 0.1}
  vlind/s_lp: {max_drop: 0.1}
  genception/gc@3: {max_drop: 0.1}
  decc/reliable_rate/multi: {max_drop: 0.1}
confidence: 0.95
resamples: 1000             # scored in one pass: a rule's bootstrap takes milliseconds
seed: 0
"""
#: The demo's policy: its rules judged after each quarter of every evaluator's items
DEMO_POLICY = DEMO_RULES + """\
sequential:                  # judged after each quarter of every evaluator's items (docs/sequential.md)
  looks: [0.25, 0.5, 0.75, 1.0]
  promote_early: false
"""

DEMO_CONFIG = f"""\
# vlgate service configuration (flows/settings.py); written by `vlgate demo`.
models:
  {MODEL_NAME}:
    suite: world/suite.yaml
    policy: gate-{MODEL_NAME}.yaml
    drift:
      reference: batches/reference/suite.yaml
      batch: batches/incoming-clean/suite.yaml
      cron: "0 */6 * * *"
poll_interval_s: 10
workers: 1
"""

#: The unlabelled batches of the drift step: (folder under $VLGATE_HOME/batches, seed,
#: how far the images are washed out towards grey with noise; 0 = the world's own).
#: Measured on the small world's champion (64 items): at 0.95 GenCeption's similarity
#: falls 1.00 → 0.89 (KS p ≈ 3e-9) and NaturalBench-format LCM 0.50 → 0.28 (p ≈ 2e-4),
#: while the clean batch stays within noise on every score (world format 9; on format 8,
#: 0.7 moved no score beyond noise). 32 items were too few: DeCC's reliability (0 or 1
#: per item) moved by 0.1 between two clean batches.
DRIFT_BATCHES = (("reference", 1, 0.0), ("incoming-clean", 2, 0.0), ("incoming-shifted", 3, 0.95))
DRIFT_BATCH_ITEMS = 64

#: (evaluator, logged metric, column header) of the result table
SHOWN = (
    ("lcm-mc", "lcm", "MC\nLCM"),
    ("lcm-mc", "acc", "MC\nacc"),
    ("lcm-nb", "lcm", "NB\nLCM"),
    ("lcm-nb", "acc", "NB\nacc"),
    ("vlind", "s_lp", "VLind\nS_LP"),
    ("genception", "gc_at_3", "Gen\nGC@3"),
    ("decc", "reliable_rate/multi", "DeCC\nR multi"),
)


def write_demo_config(home: Path) -> None:
    if not (home / CONFIG_FILE).is_file():
        (home / CONFIG_FILE).write_text(DEMO_CONFIG)
    policy = home / f"gate-{MODEL_NAME}.yaml"
    if not policy.is_file():
        policy.write_text(DEMO_POLICY)


def run_demo(console: Console | None = None, size: str = "medium") -> int:
    # a log or a pipe gets 120 columns rather than rich's 80: the tables are wide; what
    # the flows report (failures, reasons) is shown with its control characters escaped
    console = console or terminal_console(width=None if sys.stdout.isatty() else 120)
    context = ServiceContext.open()
    refuse_another_size(context, size)  # before any server starts
    from vlgate.cli.prefect_server import local_prefect_server

    with local_prefect_server(context.home):
        return _run_demo(console, context, size)


def _run_demo(console: Console, context: ServiceContext, size: str) -> int:
    from vlgate.evaluators.world.build import build_world
    from vlgate.registry_hooks.claims import ClaimStore
    from vlgate.registry_hooks.dispatch import Dispatcher, poll_once

    console.rule("1. the synthetic world")
    # copied in seconds; trained (minutes) only where the shipped world is not the one asked for
    home = context.home
    with WorldBuildProgress(home / "world", write=lambda line: console.print(f"  {line}", markup=False, highlight=False)) as phases:
        manifest = build_world(home / "world", size, seed=0, on_phase=phases)
    if manifest.get("cached"):
        how = "reused"
    elif manifest.get("models") == "shipped":
        how = f"the versions shipped with vlgate, their data sets drawn at the {size} size"
    else:
        how = "copied from the world shipped with vlgate" if manifest.get("shipped") else "built"
    console.print(f"world under {home / 'world'} ({how})")
    write_demo_config(home)

    console.rule(f"2. register versions of {MODEL_NAME} in MLflow ({tracking.tracking_uri(home)})")
    client = context.tracking
    for folder, description, _ in VERSIONS:
        version = tracking.register_checkpoint(client, MODEL_NAME, home / "world" / "checkpoints" / folder, description=description, home=home)
        console.print(f"  v{version.version}: {folder} — {description}")

    console.rule("3. the registry hook (poller) starts one validation flow per new version")
    claims = ClaimStore.for_home(home)
    from vlgate.flows.validation import validate_model_version

    dispatcher = Dispatcher(claims, workers=1, start=validate_model_version, configured=lambda name: name == MODEL_NAME)
    # listening before the first flow starts: each version's stages and evaluators' items (flows/progress.py)
    with display(console) as shown:
        claimed = poll_once(client, dispatcher)
        resumed = dispatcher.recover()
        console.print(f"  claimed {len(claimed)} version(s): {', '.join('v' + v for _, v in claimed) or 'none new'}")
        shown.queue(progress.subject(VersionRef(model=model, version=version)) for model, version in claimed + resumed)
        dispatcher.wait()
    dispatcher.close()

    console.rule("4. drift: the champion on new unlabelled batches")
    checks = run_drift_checks(context, console)

    console.rule("5. result")
    from vlgate.dashboards.report import write_reports

    # the champion's page again, now with the drift checks, and the final leaderboard; every
    # other page stays as its validation flow wrote it (as the service leaves them;
    # `vlgate report` rebuilds them all)
    champion = tracking.champion_version(client, MODEL_NAME)
    with console.status("reports (plots, HTML, leaderboard)…"):
        reports = write_reports(client, MODEL_NAME, [champion] if champion else [], home / "reports" / MODEL_NAME, image_roots=report_image_roots(context.config, MODEL_NAME))
    from vlgate.cli.service import service_status

    status = service_status(context, MODEL_NAME)
    table, rejections = results_table(client, status)
    console.print(table)
    for line in rejections:
        console.print(f"  {line}", highlight=False, markup=False)  # a reason's [category] is no markup
    console.print(fault_table(status))
    console.print(correlation_table(client))
    if checks:
        console.print(drift_table(checks))
    if champion in reports.versions:
        console.print(f"\nreport of the champion v{champion}: {reports.versions[champion]}", highlight=False)
    console.print(f"leaderboard: {reports.leaderboard}", highlight=False)
    console.print(f"vlgate report {MODEL_NAME} [VERSION]      # rebuilds the pages from MLflow")
    console.print(f"\nvlgate status --json          # every version's decision and the champion (VLGATE_HOME={home})")
    console.print(f"mlflow ui --backend-store-uri {tracking.tracking_uri(home)} --port 5000   # then open http://127.0.0.1:5000")
    return 0


class DemoError(ValueError):
    """A home the demo cannot run in as asked (one line for the user)."""


def refuse_another_size(context: ServiceContext, size: str) -> None:
    """One world size a home: versions validated on one size's data are never judged
    against those of another (the demo's second run would reuse their decisions)."""
    home = context.home
    manifest = home / "world" / "manifest.json"
    if not manifest.is_file():
        return
    there = json.loads(manifest.read_text()).get("size")
    if there == size:
        return
    if tracking.model_versions(context.tracking, MODEL_NAME):
        raise DemoError(f"{home} holds the demo on the {there} world; run the {size} one in another VLGATE_HOME (or `vlgate demo --size {there}` here)")


def build_drift_batches(home: Path) -> dict[str, Path]:
    """The unlabelled batches' suites (built once; a batch folder with its suite is reused)."""
    from vlgate.evaluators.world.datasets import build_unlabelled_batch

    suites: dict[str, Path] = {}
    for name, seed, corruption in DRIFT_BATCHES:
        folder = home / "batches" / name
        suite, marker = folder / "suite.yaml", folder / "batch.json"
        wanted = {"seed": seed, "corruption": corruption, "items": DRIFT_BATCH_ITEMS}
        if not suite.is_file() or not marker.is_file() or json.loads(marker.read_text()) != wanted:
            shutil.rmtree(folder, ignore_errors=True)  # an earlier demo's batch with other settings
            build_unlabelled_batch(folder, home / "world" / "checkpoints", n=DRIFT_BATCH_ITEMS, seed=seed, corruption=corruption)
            marker.write_text(json.dumps(wanted))
        suites[name] = suite
    return suites


def run_drift_checks(context: ServiceContext, console: Console) -> list[dict[str, JsonValue]]:
    """The scheduled drift flow, run now on the clean and on the shifted batch. The
    champion's records on a batch are fingerprinted, so a second demo run reuses them."""
    from vlgate.flows.drift import drift_check

    client = context.tracking
    if tracking.champion_version(client, MODEL_NAME) is None:
        console.print("  no champion: nothing to check for drift")
        return []
    suites = build_drift_batches(context.home)
    checks: list[dict[str, JsonValue]] = []
    with display(console):  # the champion's items on the reference and on each batch
        for name in ("incoming-clean", "incoming-shifted"):
            checks.append(drift_check(MODEL_NAME, batch=str(suites[name])).as_json() | {"batch_name": name})
    return checks


def drift_table(checks: list[dict[str, JsonValue]]) -> Table:
    """``checks``: ``run_drift_checks``'s (each drift result's JSON with its batch's name)."""
    table = Table(title="drift checks of the champion (MLflow runs tagged vlgate.drift)", box=box.SIMPLE_HEAD)
    for column in ("batch", "metric", "reference mean", "batch mean", "KS p", "drift"):
        table.add_column(column, justify="left" if column in ("batch", "metric") else "right")
    for check in checks:
        results, batch_name = check["checks"], check["batch_name"]
        assert isinstance(results, list) and isinstance(batch_name, str)
        for result in results:
            assert isinstance(result, dict) and isinstance(result["metric"], str)
            table.add_row(
                batch_name,
                result["metric"],
                _fmt_plain(result["mean_reference"]),
                _fmt_plain(result["mean_current"]),
                _fmt_plain(result["p_value"]),
                "[bold red]DRIFT[/]" if result["drifted"] else "ok",
            )
    return table


def results_table(client: MlflowClient, status: ServiceStatus) -> tuple[Table, list[str]]:
    """Each version's headline metrics and decision (``status``: ``service_status``'s), and
    the reasons of every rejection."""
    table = Table(title=f"{MODEL_NAME}: every version's validation (★ champion)", box=box.SIMPLE_HEAD)
    table.add_column("version")
    table.add_column("decision")
    for _, _, header in SHOWN:
        table.add_column(header, justify="right")
    # a sequential policy's look that settled and the item evaluations that spared
    table.add_column("at\nlook", justify="right")
    table.add_column("items\nsaved", justify="right")
    rejections = []
    for model in status["models"]:
        for version in model["versions"]:
            metrics = client.get_run(version["validation_run_id"]).data.metrics if version["validation_run_id"] else {}
            cells = [f"{metrics[f'{e}/{m}']:.3f}" if f"{e}/{m}" in metrics else "—" for e, m, _ in SHOWN]
            look = metrics.get("sequential/stopped_at_look")
            saved = metrics.get("sequential/saved_fraction")
            cells += ["—" if look is None else str(int(look)), "—" if saved is None else f"{saved:.0%}"]
            star = " ★" if model["champion"] == version["version"] else ""
            table.add_row(f"v{version['version']}{star}", version["decision"] or version["state"], *cells)
            if version["decision"] == "rejected":
                rejections.append(f"v{version['version']} ({version['description']}) rejected: " + "; ".join(version["reasons"]))
    return table, rejections


def caught_by(reasons: list[str]) -> list[str]:
    """The evaluators whose checks a rejection names (a reason starts with
    ``EVALUATOR/METRIC`` or ``EVALUATOR ran|expectations``), in the order named."""
    from vlgate.evaluators import registry

    named = [reason.split(" ", 1)[0].split("/", 1)[0] for reason in reasons]
    return list(dict.fromkeys(name for name in named if name in registry.names()))


def fault_table(status: ServiceStatus) -> Table:
    """The story of the faulty versions: each was built for one evaluator to catch; which
    evaluators' checks rejected it (``status``: ``service_status``'s)."""
    built_for = {description: evaluator for _, description, evaluator in VERSIONS if evaluator}
    table = Table(title="the faulty versions, each built for one evaluator to catch", box=box.SIMPLE_HEAD)
    for column in ("version", "fault", "built for", "decision", "rejected by", ""):
        table.add_column(column)
    for model in status["models"]:
        for version in model["versions"]:
            evaluator = built_for.get(version["description"])
            if evaluator is None:
                continue
            caught = caught_by(version["reasons"]) if version["decision"] == "rejected" else []
            verdict = "[green]caught[/]" if caught == [evaluator] else "[red]not as built[/]"
            table.add_row(f"v{version['version']}", version["description"].removeprefix("trained, then "), evaluator, version["decision"] or version["state"], ", ".join(caught) or "—", verdict)
    return table


def correlation_table(client: MlflowClient) -> Table:
    from vlgate.flows.correlations import correlate_across_versions, version_table

    frame = version_table(client, MODEL_NAME)
    table = Table(title=f"label-free vs labelled metrics across the {len(frame)} validated versions", box=box.SIMPLE_HEAD)
    for column in ("pair", "n", "pearson", "spearman", "kendall"):
        table.add_column(column, justify="left" if column == "pair" else "right")
    for pair, values in correlate_across_versions(frame).items():
        table.add_row(pair.replace("~", " vs "), str(values.get("n")), *(_fmt(values.get(k)) for k in ("pearson", "spearman", "kendall")))
    return table


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"


def _fmt_plain(value: JsonValue) -> str:
    return "—" if value is None else f"{value:.3g}"
