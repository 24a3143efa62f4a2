"""The HTML report of one validation run and the leaderboard across a model's versions.

Both pages are self-contained (every plot and thumbnail is a ``data:`` URI, no scripts,
no external CSS), so a reviewer reads them offline, from MLflow's artifact view or from
disk. They are built from MLflow alone (``dashboards.collect``), which is what lets
``vlgate report`` regenerate them long after the flow ran. The decision and its reasons
come first; every metric value carries ``data-metric``/``data-value`` attributes holding
the logged number, so tests (and scrapers) compare the page with MLflow exactly.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import jinja2
import pandas as pd
from pydantic import JsonValue

from vlgate import tag_keys, tracking
from vlgate.dashboards.collect import DRIFT_COLUMNS, ValidationReportData, artifact_path, drift_history, leaderboard, load_validation
from vlgate.dashboards.leaderboard_rows import EarlyMeasure, early_measures, leaderboard_groups, leaderboard_metrics, leaderboard_why
from vlgate.dashboards.pictures import Figure, ModelFigures, evaluator_figures, image_thumbnail, model_figures, thumbnail, version_correlation_figures
from vlgate.decisions import Check, Rule, Verdict
from vlgate.evaluators import registry
from vlgate.evaluators.definition import ItemLines
from vlgate.evaluators.item_diff import EvaluatorDiff, field_text
from vlgate.evaluators.output import RECORDS_FROM_CACHE, EvaluatorOutput
from vlgate.evaluators.records import Record
from vlgate.history import ModelHistory, model_history
from vlgate.power_plan import RulePower
from vlgate.text import shell_command
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

LOST_ITEMS = 5  # the items lost against the champion shown per listed item score
#: record fields that name an item's input pictures (GenCeption's ``images`` are its outputs)
IMAGE_FIELDS = ("image", "images", "seed")


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.PackageLoader("vlgate.dashboards", "templates"), autoescape=True, undefined=jinja2.StrictUndefined)
    environment.filters["num"] = format_number
    environment.filters["verdict_class"] = verdict_class
    environment.filters["shell"] = shell_command  # a command to paste: every word quoted
    environment.tests["count"] = is_count
    environment.tests["not_applied"] = not_applied
    return environment


def not_applied(rule: RulePower, data: ValidationReportData) -> bool:
    """Whether a rule of the power plan did not apply to this validation: a comparison with
    the champion where there was none (its warning is then no reason for concern)."""
    return rule.rule in (Rule.REGRESSION, Rule.SUPERIORITY) and data.judged_against is None


def verdict_class(check: Check) -> str:
    """A check's colour on the page: ``pass`` (passed or waived), ``fail`` (failed, or could
    not be judged: both fail closed) or ``undecided`` (inconclusive: more items would decide;
    neither a pass nor a failure)."""
    if check.passed:
        return "pass"
    return "undecided" if check.verdict == Verdict.INCONCLUSIVE else "fail"


def format_number(value: object, count: bool = False) -> str:
    """Four decimals for rates and scores, integers for counts, "–" for undefined."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) or (count and isinstance(value, float) and value.is_integer()):
        return str(int(value))
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def is_count(name: str) -> bool:
    last = name.rsplit("/", 1)[-1]
    return last == "n" or last.startswith("n_")


def against_champion(data: ValidationReportData, evaluator: str, image_roots: tuple[Path, ...] = ()) -> dict[str, object] | None:
    """One evaluator's part of "Against the champion": the gate's checks of the evaluator
    against the champion, each item score's lost and won counts (``vlgate diff``'s), and
    the first items lost, with their pictures and both versions' fields, score by score:
    first on the item scores behind the evaluator's failing (or inconclusive) checks
    (``lcm-mc/lcm`` failed: ``p_lc``), then on the first item score that lost any (an accuracy that held while
    P_LC fell shows the P_LC drops). Item scores behind a failing check lead the counts
    too. None when the version was not judged against a champion."""
    if data.judged_against is None:
        return None
    judged = data.gate.checks if data.gate is not None else []
    checks = [check for check in judged if check.rule in (Rule.REGRESSION, Rule.SUPERIORITY) and check.metric.startswith(f"{evaluator}/")]
    diff = data.item_diffs.get(evaluator)
    if diff is None:
        return {"champion": data.judged_against, "checks": checks, "scores": [], "lists": [], "listed": None, "missing": data.not_compared.get(evaluator, "not compared")}
    # the checks that held the version back on its numbers (a could-not-judge one has no items)
    failing = [check for check in judged if check.verdict in (Verdict.FAIL, Verdict.INCONCLUSIVE) and check.metric.startswith(f"{evaluator}/")]
    behind_checks = {score: [check for check in failing if score in diff.scores_behind([check.metric.removeprefix(f"{evaluator}/")])] for score in diff.scores}
    behind = {score: [check.name for check in checks] for score, checks in behind_checks.items()}
    listed_scores = diff.listed_scores(check.metric.removeprefix(f"{evaluator}/") for check in failing)
    first = [score for score in listed_scores if behind[score]]
    scores: list[dict[str, object]] = [
        # behind a failing check in red; behind undecided ones only, neutral
        {"score": name, "direction": diff.scores[name].direction, "behind": behind[name], "behind_class": "fail" if any(verdict_class(c) == "fail" for c in behind_checks[name]) else "undecided", **diff.summary()[name]}
        for name in [*first, *(name for name in diff.scores if name not in first)]
    ]
    rows = {row["score"]: row for row in scores}
    lists = [{**rows[score], "items": lost_items(data, diff, score, image_roots), "won_items": lost_items(data, diff, score, image_roots, which="won")} for score in listed_scores]
    return {"champion": data.judged_against, "checks": checks, "scores": scores, "lists": lists, "listed": lists[0], "missing": None}


def lost_items(data: ValidationReportData, diff: EvaluatorDiff, score: str, image_roots: tuple[Path, ...] = (), which: str = "lost") -> list[dict[str, object]]:
    """The first items the candidate lost (``which="won"``: won) on ``score``, largest
    change first, each with its pictures and both versions' fields as the page shows them."""
    evaluator = diff.evaluator
    output = data.evaluators[evaluator]
    definition = registry.get(evaluator)
    fields = definition.item_fields
    # an item's own picture is shown whether or not the evaluator lists it among its fields
    image_fields = [name for name in IMAGE_FIELDS if name in fields or name == "image"]
    binary = diff.scores[score].kind == "binary"
    items: list[dict[str, object]] = []
    for item in diff.listed(which, LOST_ITEMS, score):
        record = diff.candidate_records.get(str(item["id"]), {})
        paths: list[JsonValue] = []
        for name in image_fields:
            value = record.get(name)
            paths += value if isinstance(value, list) else [value]
        images = [thumbnail(artifact_path(output.folder, evaluator, path, image_roots)) for path in paths if isinstance(path, str)]
        if definition.item_images is not None and record:
            images += [image_thumbnail(image) for image in definition.item_images(record)]
        tabled = definition.item_lines.fields if definition.item_lines is not None else ()
        rows = [
            {"field": name, "candidate": field_text(values["candidate"], 240), "champion": field_text(values["champion"], 240)}
            for name, values in item["fields"].items()
            if name not in image_fields and name not in tabled
        ]
        shown = {key: format_number(item[key], count=binary) for key in ("candidate", "champion")}
        category = None if pd.isna(item["category"]) else str(item["category"])
        lines = item_lines(definition.item_lines, record, diff.champion_records.get(str(item["id"]), {})) if definition.item_lines is not None else None
        items.append({"id": item["id"], "category": category, **shown, "images": [image for image in images if image], "rows": rows, "lines": lines})
    return items


def item_lines(lines: ItemLines, candidate: Record, champion: Record) -> dict[str, object]:
    """Both versions' lines of one item side by side (``ItemLines``): each line's text and
    answer mark from the candidate's record (the champion's where the candidate's has
    none), and each column's number rounded for both."""
    mine, theirs = lines.read(candidate) if candidate else [], lines.read(champion) if champion else []
    rows = []
    for k in range(max(len(mine), len(theirs))):
        line = mine[k] if k < len(mine) else theirs[k]
        cells = [
            (format_number(mine[k].values[c] if k < len(mine) else None), format_number(theirs[k].values[c] if k < len(theirs) else None))
            for c in range(len(lines.columns))
        ]
        rows.append({"text": field_text(line.text, 240), "answer": line.answer, "cells": cells})
    return {"columns": list(lines.columns), "rows": rows}


def _numbers(metrics: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, float | None]]:
    """Every number in a metrics dict, nested keys joined by ``/``, undefined ones (None,
    NaN: e.g. VLind's s_lp when no instance reached LP) included so the page says so."""
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _numbers(value, name + "/")
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            yield name, value


def _metric_rows(metrics: Mapping[str, object], prefix: str) -> tuple[list[tuple[str, float | None]], list[dict[str, object]]]:
    """The set-level metrics as (name, value) rows, and the breakdowns (``by_category/red/acc``)
    as one table per breakdown: rows the groups, columns the metrics."""
    overall: list[tuple[str, float | None]] = []
    breakdowns: dict[str, dict[str, dict[str, tuple[str, float | None]]]] = {}
    for name, value in _numbers(metrics):
        parts = name.split("/")
        if parts[0].startswith("by_") and len(parts) >= 3:
            breakdowns.setdefault(parts[0], {}).setdefault(parts[1], {})["/".join(parts[2:])] = (name, value)
        else:
            overall.append((name, value))
    tables: list[dict[str, object]] = []
    for by, groups in breakdowns.items():
        columns = list(dict.fromkeys(metric for group in groups.values() for metric in group))
        tables.append({"by": by, "columns": columns, "rows": [{"group": group, "cells": [values.get(c) for c in columns]} for group, values in groups.items()]})
    return overall, tables


def _correlation_rows(correlations: Mapping[str, Mapping[str, object]]) -> list[dict[str, object]]:
    return [{"pair": pair.replace("~", " vs "), **values} for pair, values in correlations.items()]


@dataclass
class RenderedReport:
    html: str
    figures: list[Figure]


def _early_section(data: ValidationReportData, evaluator: str) -> EarlyMeasure | None:
    """Where a sequential validation stopped before the evaluator's last item: what its
    section's numbers were measured on (None: the whole suite)."""
    if data.sequential is None:
        return None
    n, total = data.sequential.items_evaluated.get(evaluator), data.sequential.items_total.get(evaluator)
    if n is None or total is None or n >= total:
        return None
    return {"n": n, "total": total, "look": data.sequential.stopped_at.index + 1}


def _records_from_cache(data: ValidationReportData, evaluator: str) -> int | None:
    """How many of the evaluator's records the run took from the shared record cache (its
    ``records_from_cache/EVALUATOR`` metric); None for a run that logged none."""
    value = data.metrics.get(f"{RECORDS_FROM_CACHE}/{evaluator}")
    return int(value) if value is not None else None


class DriftStatus(TypedDict):
    """A version's latest drift check: when, on which batch, which metrics it checked and
    which of them drifted."""

    time: datetime
    batch: str | None
    checked: list[str]
    drifted: list[str]


def latest_drift(drift: pd.DataFrame, version: str) -> DriftStatus | None:
    """The latest drift check of ``version`` (its rows of the latest drift run); None: never checked."""
    if "version" not in drift.columns:  # no drift check at all (a frame without its columns)
        return None
    rows = drift[drift["version"].astype(str) == version]
    if not len(rows):
        return None
    latest = rows[rows["run_id"] == rows.sort_values("time", kind="stable")["run_id"].iloc[-1]]
    batch = latest["batch"].iloc[0]
    return {
        "time": latest["time"].iloc[0].to_pydatetime(),
        "batch": None if pd.isna(batch) else str(batch),
        "checked": [str(m) for m in latest["metric"]],
        "drifted": [str(m) for m in latest.loc[latest["drifted"].astype(bool), "metric"]],
    }


def render_version_report(data: ValidationReportData, shared: ModelFigures, drift: pd.DataFrame, tracking_uri: str, correlations: list[Figure] | None = None) -> RenderedReport:
    """The report page of one validated version; ``correlations``: its correlation figures
    (``version_correlation_figures``; the model's current ones when not given)."""
    correlations = shared.correlations if correlations is None else correlations
    sections: list[dict[str, object]] = []
    all_figures: list[Figure] = []
    for name, output in data.evaluators.items():
        figures, examples = evaluator_figures(output, shared)
        overall, breakdowns = _metric_rows(output.metrics or {}, name)
        all_figures += figures
        sections.append(
            {
                "name": name,
                "protocol": output.protocol,
                "metrics": overall,
                "breakdowns": breakdowns,
                "expectations": data.expectations.get(name),
                "figures": figures,
                "examples": examples,
                "error": output.error,
                "against": against_champion(data, name, shared.image_roots),
                "from_cache": _records_from_cache(data, name),
                "early": _early_section(data, name),
            }
        )
    for name in sorted(set(data.expectations) - set(data.evaluators)):
        sections.append(
            {"name": name, "protocol": None, "metrics": [], "breakdowns": [], "expectations": data.expectations[name], "figures": [], "examples": [], "error": "no outputs were logged", "against": None}
            | {"from_cache": None, "early": None}
        )
    all_figures += correlations + ([shared.drift] if shared.drift else [])
    html = _environment().get_template("report.html.j2").render(
        data=data,
        sections=sections,
        correlations=_correlation_rows(data.correlations),
        per_sample=_correlation_rows(data.gate.per_sample_correlations if data.gate is not None else {}),
        correlation_figures=correlations,
        drift_figure=shared.drift,
        drift=drift.tail(20).to_dict("records"),
        drift_status=latest_drift(drift, data.version),
        checks=data.gate.checks if data.gate is not None else [],
        champion_before=data.gate.champion_before if data.gate is not None else None,
        tracking_uri=tracking_uri,
        mlflow_ui=mlflow_ui_command(tracking_uri),
        run_page=tracking.run_page_url(tracking_uri, data.experiment_id, data.run_id) if data.experiment_id and data.run_id else None,
        embedded=tracking.embedded(tracking_uri),
        generated=datetime.now(timezone.utc),
    )
    return RenderedReport(html, all_figures)


def render_leaderboard(
    model: str, board: pd.DataFrame, shared: ModelFigures, tracking_uri: str, report_links: dict[str, str] | None = None, history: ModelHistory | None = None,
    drift: pd.DataFrame | None = None,
) -> RenderedReport:  # fmt: skip
    """Every version of the model side by side: decision, champion, its latest drift check
    (``drift``: ``drift_history``'s), the key metrics; and the champion's timeline from the
    decision records (``history``)."""
    drift = drift if drift is not None else pd.DataFrame(columns=DRIFT_COLUMNS)
    headline = leaderboard_metrics([str(c) for c in board.columns])
    other = sorted(c for c in board.columns if "/" in c and c not in headline and not c.startswith(("correlation/", "drift/")))
    groups = leaderboard_groups(headline or other[:12])
    rows = [{"version": version, **row, "early": early_measures(row)} for version, row in board.iterrows()]
    latest = {v.version: v.records[-1] for v in (history.versions if history is not None else []) if v.records}
    why = {version: leaderboard_why(record) for version, record in latest.items()}
    drift_status = {version: status for version in board.index.astype(str) if (status := latest_drift(drift, version)) is not None}
    figures = [f for f in (*shared.correlations, *shared.across_versions.values(), shared.drift) if f is not None]
    html = _environment().get_template("leaderboard.html.j2").render(
        model=model,
        rows=rows,
        groups=groups,
        figures=figures,
        links=report_links or {},
        why=why,
        drift_status=drift_status,
        history=history,
        tracking_uri=tracking_uri,
        mlflow_ui=mlflow_ui_command(tracking_uri),
        generated=datetime.now(timezone.utc),
    )
    return RenderedReport(html, figures)


def mlflow_ui_command(tracking_uri: str) -> str:
    """How a reader opens MLflow's UI on this store, as a command to paste."""
    if tracking.embedded(tracking_uri):
        return shell_command("mlflow", "ui", "--backend-store-uri", tracking_uri)
    return shell_command("open", tracking_uri)


@dataclass
class WrittenReports:
    leaderboard: Path
    versions: dict[str, Path]


def report_file_name(version: str) -> str:
    return f"v{version}.html"


def write_reports(
    client: MlflowClient, model: str, versions: Iterable[str] | None, out: Path, log_to_mlflow: bool = True, image_roots: tuple[Path, ...] = ()
) -> WrittenReports:
    """The reports of ``versions`` (every validated version when ``None``) and the model's
    leaderboard, written under ``out``; with ``log_to_mlflow`` each version's report and
    plots go to its validation run (``report/``) and the leaderboard with it. Images are
    shown from the runs' artifacts and from ``image_roots`` only (the model's data folders)."""
    out.mkdir(parents=True, exist_ok=True)
    board = leaderboard(client, model)
    wanted = [str(v) for v in versions] if versions is not None else [v for v in board.index if board.loc[v, "run_id"]]
    written: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as scratch:
        drift = drift_history(client, model, Path(scratch) / "drift")
        shared = model_figures(board, drift, image_roots)
        runs: dict[str, dict[str, EvaluatorOutput]] = {}
        for version in wanted:
            data = load_validation(client, VersionRef(model=model, version=version), Path(scratch) / f"v{version}", runs)
            rendered = render_version_report(data, shared, drift, client.tracking_uri, version_correlation_figures(data, board))
            path = out / report_file_name(version)
            path.write_text(rendered.html, encoding="utf-8")
            written[version] = path
            if log_to_mlflow and data.run_id:
                log_report(client, data.run_id, path, rendered.figures)
        links = {v: report_file_name(v) for v in board.index if (out / report_file_name(v)).is_file()}
        history = model_history(model, tracking.version_histories(client, model), tracking.champion_version(client, model))
        board_page = render_leaderboard(model, board, shared, client.tracking_uri, links, history, drift)
        board_path = out / "leaderboard.html"
        board_path.write_text(board_page.html, encoding="utf-8")
        if log_to_mlflow:
            for version in written:
                run_id = board.loc[version, "run_id"]
                if run_id:
                    client.log_artifact(run_id, str(board_path), artifact_path="report")
    return WrittenReports(board_path, written)


def log_report(client: MlflowClient, run_id: str, page: Path, figures: list[Figure]) -> None:
    """The page as ``report/report.html`` and every plot as ``report/plots/NAME.png``."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "plots"
        folder.mkdir()
        for figure in figures:
            (folder / f"{figure.name}.png").write_bytes(figure.png)
        target = Path(scratch) / "report.html"
        target.write_bytes(page.read_bytes())
        client.log_artifact(run_id, str(target), artifact_path="report")
        if figures:
            client.log_artifacts(run_id, str(folder), artifact_path="report/plots")
    client.set_tag(run_id, tag_keys.REPORT, "report/report.html")

