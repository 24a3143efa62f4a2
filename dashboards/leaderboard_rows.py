"""What the leaderboard shows of each version beside its numbers: its headline metric columns
grouped per evaluator, the evaluators measured at an early look, and why its latest
decision went as it did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypedDict

from vlgate.decisions import DecisionRecord, Verdict
from vlgate.evaluators import registry


def leaderboard_metrics(columns: list[str]) -> list[str]:
    """The leaderboard's metric columns: every evaluator's headline metrics that were
    logged, in registry order."""
    shown = []
    for definition in registry.definitions():
        prefix = f"{definition.name}/"
        shown += [prefix + name for name in definition.headline(c.removeprefix(prefix) for c in columns if c.startswith(prefix))]
    return shown


class LeaderboardGroup(TypedDict):
    """One evaluator's columns of the leaderboard: its name, title and metrics (full and short names)."""

    evaluator: str
    title: str
    metrics: list[dict[str, str]]


def leaderboard_groups(metrics: list[str]) -> list[LeaderboardGroup]:
    """The leaderboard's metric columns grouped per evaluator, in registry order: each
    group a small table of its own, so the groups wrap to the page's width and every
    evaluator's headline stays in view."""
    groups: dict[str, list[dict[str, str]]] = {}
    for metric in metrics:
        evaluator, short = registry.split_metric(metric)
        groups.setdefault(evaluator, []).append({"name": metric, "short": short})
    titles = {d.name: d.title for d in registry.definitions()}
    return [{"evaluator": name, "title": titles.get(name, name), "metrics": columns} for name, columns in groups.items()]


class EarlyMeasure(TypedDict):
    """An evaluator's metrics of a version measured at a look before the last: on ``n`` of
    the suite's ``total`` items, at look ``look`` (1-based)."""

    n: int
    total: int
    look: int | None


def early_measures(row: Mapping[str, object]) -> dict[str, EarlyMeasure]:
    """Each evaluator whose metrics in a leaderboard row were measured on fewer items than
    the suite holds (a sequential validation stopped early: its run's
    ``sequential/items_evaluated/E`` below ``sequential/items_total/E``)."""
    early: dict[str, EarlyMeasure] = {}
    look = row.get("sequential/stopped_at_look")
    for key, value in row.items():
        if not str(key).startswith("sequential/items_evaluated/") or not isinstance(value, int | float) or math.isnan(value):
            continue
        evaluator = str(key).removeprefix("sequential/items_evaluated/")
        total = row.get(f"sequential/items_total/{evaluator}")
        if isinstance(total, int | float) and not math.isnan(total) and value < total:
            early[evaluator] = {"n": int(value), "total": int(total), "look": int(look) if isinstance(look, int | float) and not math.isnan(look) else None}
    return early


class Why(TypedDict):
    """The leaderboard's "why" for one version: what its latest decision rests on, and the
    lines of its summary left out of the cell (all of them are in the cell's title)."""

    text: str
    more: int
    title: str


def leaderboard_why(record: DecisionRecord) -> Why:
    """A promotion, or a decision whose checks all passed (awaiting a sign-off), says what
    held: every line of its summary; any other its first check that did not pass, with how
    many more there are; a record without checks (a person's sign-off) its reasons."""
    summary = record.summary
    # the summary's first lines are the checks that did not pass (and the waived), one each
    not_passed = summary[: sum(1 for check in record.checks if check.verdict is not Verdict.PASS)]
    if record.promote or not not_passed:
        return {"text": "; ".join(summary), "more": 0, "title": "\n".join(summary)}
    return {"text": not_passed[0], "more": len(not_passed) - 1, "title": "\n".join(summary)}
