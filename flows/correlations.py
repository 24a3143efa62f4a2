"""The correlation step of the validation flow (docs/metrics.md#correlations): each label-free metric against
the labelled metrics the evaluator registry pairs it with, across the model's validated
versions (as the papers' tables do across models), and the candidate's per-sample P_LC
against the champion's on their shared samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from vlgate import tracking
from vlgate.evaluators import registry
from vlgate.evaluators.definition import Metric
from vlgate.evaluators.metrics.correlation import correlations, paired_sample_correlations
from vlgate.evaluators.output import EvaluatorOutput

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: the run's MLflow tables of its coefficients (:func:`correlation_table`): across the
#: model's versions, and its per-sample scores against the champion's
CORRELATIONS_ACROSS_VERSIONS = "tables/correlations_across_versions.json"
CORRELATIONS_WITH_CHAMPION = "tables/correlations_with_champion.json"

#: each pair's (``X~Y``) or per-sample score's coefficients: pearson, spearman, kendall and n (None where undefined)
Correlations = dict[str, dict[str, float | int | None]]


def version_table(client: MlflowClient, model_name: str, include_run: str | None = None) -> pd.DataFrame:
    """One row per validated version of the model (its latest validation run), columns
    the logged metrics with their names as docs/metrics.md writes them (``genception/gc@3``)."""
    rows = {version: {tracking.logged_metric_name(k): v for k, v in run.data.metrics.items()} for version, run in tracking.validation_runs(client, model_name, include_run).items()}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "version"
    return frame


def correlate_across_versions(table: pd.DataFrame) -> Correlations:
    """Pearson/Spearman/Kendall of each label-free metric against its labelled metrics
    over the versions that have both; ``n`` says how many. Templated metrics (``gc@{T}``)
    are matched against the table's columns, so a 5-iteration GenCeption correlates ``gc@5``."""
    result: Correlations = {}
    for x, y in registry.correlated_pairs([str(column) for column in table.columns]):
        if y not in table:
            continue
        both = table[[x, y]].dropna()
        result[f"{x}~{y}"] = correlations(both[x].to_numpy(float), both[y].to_numpy(float)) if len(both) >= 3 else {"n": len(both)}
    return result


#: versions in a row whose identical headline value is worth a warning
IDENTICAL_RUN = 3


@dataclass(frozen=True)
class IdenticalRun:
    """A headline metric with exactly one value in each of the ``versions`` (the last ones
    up to the version judged). ``saturated``: that value is the metric's best possible one
    (the bound of its range on its better side, e.g. VLind's ``s_ck`` = 1): the versions are
    all as good as it can tell, not unseen by it. ``started``: the version judged is the
    first whose last versions agree (the one before them had another value, or none)."""

    metric: str
    value: float
    versions: tuple[str, ...]
    saturated: bool
    started: bool


def best_value(spec: Metric) -> float | None:
    """A metric's best possible value: its ``high`` where higher is better, its ``low``
    where lower is; None without a direction or a bound on that side."""
    return spec.high if spec.direction == "higher" else spec.low if spec.direction == "lower" else None


def identical_runs(table: pd.DataFrame, version: str, last: int = IDENTICAL_RUN) -> list[IdenticalRun]:
    """The headline metrics whose value is exactly the same in each of the ``last``
    validated versions up to ``version`` (by version number), in the table's order."""
    if version not in table.index.astype(str):
        return []
    number = tracking.version_number
    upto = sorted((str(v) for v in table.index if number(v) <= number(version)), key=number)
    recent, before = upto[-last:], upto[-last - 1 : -last] if len(upto) > last else []
    if len(recent) < last:
        return []
    frame = table.set_axis(table.index.astype(str))
    runs = []
    for column in frame.columns:
        spec = registry.metric(str(column))
        values = frame.loc[recent, column]
        if spec is None or not spec.headline or not values.notna().all() or values.nunique() != 1:
            continue
        value = float(values.iloc[0])
        best = best_value(spec)
        earlier = [frame.at[v, column] for v in before]
        runs.append(
            IdenticalRun(
                metric=str(column),
                value=value,
                versions=tuple(recent),
                saturated=best is not None and math.isclose(value, best, rel_tol=0.0, abs_tol=1e-12),
                started=not any(e == value for e in earlier),
            )
        )
    return runs


def identical_across_versions(table: pd.DataFrame, version: str, last: int = IDENTICAL_RUN) -> list[str]:
    """Warnings for the headline metrics whose value is exactly the same in each of the
    ``last`` validated versions up to ``version`` (:func:`identical_runs`): different models
    rarely score alike to the last digit, so the evaluator may not be seeing the model (a
    constant prompt, a broken parser). A value at the metric's best possible bound is
    saturation instead (the versions are as good as the metric can tell): said once, on the
    version whose last ``last`` versions first all reach it, and not again while it holds.
    A warning, not a verdict: it blocks nothing."""
    warnings = []
    for run in identical_runs(table, version, last):
        shown = ", ".join(f"v{v}" for v in run.versions)
        if not run.saturated:
            warnings.append(f"{run.metric} is {run.value:.6g} in each of {shown}: identical across the last {last} versions (does the evaluator see the model?)")
        elif run.started:
            warnings.append(f"{run.metric} is at its best possible value {run.value:.6g} in each of {shown}: saturated, it no longer tells these versions apart")
    return warnings


def correlated_columns(table: pd.DataFrame) -> pd.DataFrame:
    """The table's columns that some correlated pair uses: what ``correlate_across_versions``
    read, kept with its result so the report draws its figures from the same rows."""
    used = list(dict.fromkeys(name for pair in registry.correlated_pairs([str(c) for c in table.columns]) for name in pair if name in table.columns))
    return table[used]


def log_correlations_across_versions(client: MlflowClient, run_id: str, table: pd.DataFrame) -> Correlations:
    """The correlations across versions, computed once from ``table`` and logged with the
    rows they were computed from: ``correlations.json``, ``correlation_versions.json``
    ({version: {metric: value}}) and the table ``tables/CORRELATIONS_ACROSS_VERSIONS``."""
    across = correlate_across_versions(table)
    client.log_dict(run_id, across, "correlations.json")
    used = correlated_columns(table)
    client.log_dict(run_id, {str(v): {k: (None if pd.isna(x) else float(x)) for k, x in row.items()} for v, row in used.iterrows()}, "correlation_versions.json")
    tracking.log_tables(client, run_id, {CORRELATIONS_ACROSS_VERSIONS: correlation_table(across)})
    return across


def correlate_with_champion(candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> Correlations:
    """The candidate's per-sample scores (VL-LCM's P_LC: the definition's
    ``champion_correlated``) against the champion's on their shared samples; not where
    the two were measured under different protocols (their scores answer other prompts)."""
    result: Correlations = {}
    for evaluator, mine in candidate.items():
        column = registry.get(evaluator).champion_correlated
        theirs = (champion or {}).get(evaluator)
        if column is None or mine.samples is None or theirs is None or theirs.samples is None or mine.protocol != theirs.protocol:
            continue
        result[f"{evaluator}/{column}~champion"] = paired_sample_correlations(mine.samples, theirs.samples, column)
    return result


def correlation_table(found: Correlations) -> pd.DataFrame:
    """The coefficients as a table, a row per pair (``x``, ``y``: the metrics, or a per-sample
    score and ``champion``) with its pearson, spearman, kendall and n (empty where undefined).
    Logged as an MLflow table rather than as run metrics: they measure the model's history,
    not this run's model, and as metrics they would head MLflow's chart view (a section per
    pair, sorted before the evaluators' own) above the numbers the gate judged."""
    coefficients = ("pearson", "spearman", "kendall", "n")
    rows = []
    for pair, values in found.items():
        x, _, y = pair.partition("~")
        rows.append({"x": x, "y": y, **{key: values.get(key) for key in coefficients}})
    return pd.DataFrame(rows, columns=["x", "y", *coefficients])
