"""Power planning (``vlgate plan MODEL``): before any GPU time is spent, what each rule of a
model's policy can decide on the items of its suite.

For every rule the plan gives the items it is judged on, the per-item spread of its
statistic, the smallest change it detects with 80 % power, and the items its margin
needs (``evaluators/metrics/sequential.py`` has the equations):

* a **regression** (``max_drop`` δ) compares the candidate with the champion on the
  shared items. Its spread is that of the paired difference, measured between the
  champion and the version validated before it (the closest thing to a candidate there
  is); with no such version, √2 times the champion's own spread (two uncorrelated
  versions: an overestimate for versions that share most answers, so a safe one); with
  no champion, the largest spread a [0, 1] per-item score can have, 0.5 per version.
  *Detectable* is how far beyond the margin a true drop must be to be shown failing
  with 80 % power at the level Holm's first step holds a failure to (α/m over the m
  comparisons); *items needed* is what a candidate as good as the champion needs to
  pass with 80 % power (its distance from the margin is δ). A suite smaller than that,
  or a margin of 0, gets a warning naming the rule;
* a **superiority** rule (``min_gain``): the true gain beyond ``min_gain`` that is shown
  with 80 % power; it has no margin of its own to size the suite by;
* a **floor** or **ceiling** is judged on the candidate's estimate itself, without a
  test: *detectable* is how far beyond the limit a candidate must be to land on the
  wrong side of it with 80 % probability, and *items needed* what a candidate as good as
  the champion needs to land on the right side with 80 % probability. Warned when the
  suite is smaller, or when the champion itself is on the wrong side;
* per-category rules, the same for each category the champion's records have.

The spreads are bootstrap standard errors of the metric as the evaluator aggregates it
(ratio metrics included), times √n.

A rule with no items to judge it on (an empty data set, a category the champion has no
records in) detects nothing: its *detectable* is None (null in JSON, where the equation's
+∞ has no spelling) and its warning says so. Every number of a row is finite or None:
a spread or value that cannot be measured is None, "unknown".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from vlgate.decisions import CheckKey, Rule
from vlgate.evaluators.metrics.bootstrap import bootstrap_standard_error
from vlgate.evaluators.metrics.sequential import DEFAULT_POWER, items_needed, minimum_detectable_effect
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.gate.checks import PairedScores, category_ids, resampled_statistic, set_statistic
from vlgate.gate.corrections import correction
from vlgate.gate.policy import GatePolicy, ResolvedMetric
from vlgate.power_plan import PowerPlan, RulePower

#: a per-item score in [0, 1] spreads at most this much (a coin toss's 0/1): the spread
#: assumed for a version when there is no champion to measure one on
LARGEST_UNIT_SPREAD = 0.5
#: the level of a rule judged on the estimate itself (floors, ceilings): z = 0
ESTIMATE_ITSELF = 0.5


def _finite(value: float | None) -> float | None:
    """``value``, or None where it is not a finite number (a metric undefined on the records)."""
    return None if value is None or not math.isfinite(value) else float(value)


def bounded_unit(metric: ResolvedMetric) -> bool:
    return metric.value_range == (0.0, 1.0)


class _Spreads:
    """Per-item spreads of metrics, measured on the champion (and paired with the
    baseline version), or assumed where there is nothing to measure; each measured once
    per metric and items, the paired ones sharing the gate's :class:`PairedScores`."""

    def __init__(self, policy: GatePolicy, champion: dict[str, EvaluatorOutput] | None, baseline: dict[str, EvaluatorOutput] | None, champion_version: str | None, baseline_version: str | None, resamples: int):
        self.policy, self.champion, self.baseline = policy, champion, baseline
        self.champion_version, self.baseline_version = champion_version, baseline_version
        self.resamples = resamples
        self.scores = PairedScores()
        self._singles: dict[tuple[str, frozenset[object] | None], tuple[float | None, float | None, str]] = {}

    def _frame(self, outputs: dict[str, EvaluatorOutput] | None, metric: ResolvedMetric, ids: frozenset[object] | None) -> pd.DataFrame | None:
        output = None if outputs is None else outputs.get(metric.evaluator)
        frame = None if output is None else output.samples
        if frame is not None and ids is not None:
            frame = frame[frame["id"].isin(ids)]
        return frame

    def single(self, metric: ResolvedMetric, ids: frozenset[object] | None = None) -> tuple[float | None, float | None, str]:
        """(the champion's value, the per-item spread, where it came from)."""
        if (metric.qualified, ids) not in self._singles:
            self._singles[(metric.qualified, ids)] = self._measure_single(metric, ids)
        return self._singles[(metric.qualified, ids)]

    def _measure_single(self, metric: ResolvedMetric, ids: frozenset[object] | None) -> tuple[float | None, float | None, str]:
        frame = self._frame(self.champion, metric, ids)
        if frame is None or len(frame) < 2:
            if bounded_unit(metric):
                return None, LARGEST_UNIT_SPREAD, "assumed: no champion records"
            return None, None, "unknown: no champion records"
        statistic = set_statistic(metric)
        error = bootstrap_standard_error(frame, statistic, self.resamples, self.policy.seed, resampled_statistic(metric, frame))
        value = statistic(frame)
        spread = None if error is None else error * math.sqrt(len(frame))
        return _finite(value), _finite(spread), f"champion v{self.champion_version}"

    def paired(self, metric: ResolvedMetric, ids: frozenset[object] | None = None) -> tuple[float | None, str]:
        """(the per-item spread of candidate − champion, where it came from)."""
        mine, theirs = self._frame(self.champion, metric, None), self._frame(self.baseline, metric, None)
        if mine is not None and theirs is not None:
            # the spread of the change's jackknife pseudo-values: what the gate's score test sees
            result = self.scores.score(metric, mine, theirs, ids)
            spread = _finite(float(result.pseudo_values.std(ddof=1))) if result.testable else None
            if spread is not None:
                return spread, f"champion v{self.champion_version} paired with v{self.baseline_version}"
        _, spread, source = self.single(metric, ids)
        if spread is None:
            return None, source
        return math.sqrt(2) * spread, f"{source}, versions taken as uncorrelated" if source.startswith("champion") else f"{source}, two versions"


def _count(items: int | None, ids: frozenset[object] | None) -> int | None:
    return len(ids) if ids is not None else items


def _no_items(key: CheckKey) -> str:
    return f"{key.name}: no items to judge it on"


def _bound_row(key: CheckKey, metric: ResolvedMetric, limit: float, items: int | None, spreads: _Spreads, ids: frozenset[object] | None, power: float) -> RulePower:
    value, spread, source = spreads.single(metric, ids)
    n = _count(items, ids)
    floor = key.rule is Rule.FLOOR
    margin = None if value is None else (value - limit if floor else limit - value)
    detectable = None if spread is None or not n else minimum_detectable_effect(spread, n, ESTIMATE_ITSELF, power)
    needed = None if spread is None or margin is None or margin <= 0 else items_needed(spread, margin, ESTIMATE_ITSELF, power)
    warning = None
    if n == 0:
        warning = _no_items(key)
    elif margin is not None and margin <= 0:
        warning = f"{key.name} {limit:g}: the champion itself is on the wrong side ({value:.4f}); most candidates like it will fail"
    elif needed is not None and n is not None and n < needed:
        warning = f"{key.name} {limit:g}: the champion is {margin:.4f} from it; on {n} items a candidate as good lands on the right side with {power:.0%} probability only from about {needed:,} items"
    return RulePower(check=key.name, rule=key.rule, items=n, spread=spread, spread_from=source, level=ESTIMATE_ITSELF, margin=margin, detectable=detectable, items_needed=needed, warning=warning)


@dataclass(frozen=True)
class _Levels:
    """The levels a plan tests at: α, a comparison's failing level after the correction, and the power sought."""

    alpha: float
    fail_level: float
    power: float


def _comparison_row(key: CheckKey, metric: ResolvedMetric, limit: float, items: int | None, spreads: _Spreads, ids: frozenset[object] | None, levels: _Levels) -> RulePower:
    alpha, fail_level, power = levels.alpha, levels.fail_level, levels.power
    spread, source = spreads.paired(metric, ids)
    n = _count(items, ids)
    superiority = key.rule is Rule.SUPERIORITY
    level = alpha if superiority else fail_level
    detectable = None if spread is None or not n else minimum_detectable_effect(spread, n, level, power)
    margin = None if superiority else -limit
    needed = None if superiority or spread is None or margin is None else items_needed(spread, margin, alpha, power)
    warning = None
    if n == 0:
        warning = _no_items(key)
    elif not superiority and margin == 0:
        warning = f"{key.name} (max_drop 0): a candidate as good as the champion passes with probability {alpha:g} only, on any number of items"
    elif needed is not None and n is not None and n < needed:
        shown = f"{detectable:.4f}" if detectable is not None else "?"
        warning = (
            f"{key.name} (max_drop {margin:g}): {n} items show a drop {shown} beyond the margin with {power:.0%} power; "
            f"a candidate as good as the champion passes with {power:.0%} power only from about {needed:,} items"
        )
    return RulePower(check=key.name, rule=key.rule, items=n, spread=spread, spread_from=source, level=level, margin=margin, detectable=detectable, items_needed=needed, warning=warning)


def _category_ids(champion: dict[str, EvaluatorOutput] | None, metric: ResolvedMetric, only: Iterable[str] | None) -> dict[str, frozenset[object]]:
    """Each category's record ids in the champion's records (the categories a rule names, or all)."""
    found = category_ids(None if champion is None else champion.get(metric.evaluator), metric)
    return {category: found.get(category, frozenset()) for category in (only or sorted(found))}


@dataclass(frozen=True)
class MeasuredOn:
    """A version's outputs a plan's spreads are measured on, and which version it is."""

    version: str | None
    outputs: dict[str, EvaluatorOutput]


def plan_power(
    model: str, policy: GatePolicy, items: dict[str, int], champion: MeasuredOn | None = None, baseline: MeasuredOn | None = None, power: float = DEFAULT_POWER,
    resamples: int | None = None,
) -> PowerPlan:  # fmt: skip
    """Every rule's row (module docstring). ``items``: the items the suite runs, by
    evaluator; ``champion``/``baseline``: the outputs the spreads are measured on (the
    baseline: the version paired with the champion); ``resamples``: the bootstraps'
    (the policy's by default)."""
    alpha = 1 - policy.confidence
    champion_outputs, champion_version = (champion.outputs, champion.version) if champion is not None else (None, None)
    baseline_outputs, baseline_version = (baseline.outputs, baseline.version) if baseline is not None else (None, None)
    spreads = _Spreads(policy, champion_outputs, baseline_outputs, champion_version, baseline_version, resamples or policy.resamples)
    rules = policy.rules
    categories = [(category_rules, _category_ids(champion_outputs, category_rules.metric, category_rules.only)) for category_rules in rules.categories]
    comparisons = len(rules.comparisons) + sum(len(ids) for category_rules, ids in categories if category_rules.limit is not None)
    levels = _Levels(alpha, correction(policy.correction).fail_level(alpha, comparisons), power)
    rows = [_bound_row(rule.key, rule.metric, rule.limit, items.get(rule.metric.evaluator), spreads, None, power) for rule in rules.bounds]
    rows += [_comparison_row(rule.key, rule.metric, rule.limit, items.get(rule.metric.evaluator), spreads, None, levels) for rule in rules.comparisons]
    for category_rules, by_category in categories:
        metric = category_rules.metric
        for category, ids in by_category.items():
            for kind, bound in category_rules.bounds:
                rows.append(_bound_row(CheckKey(kind, metric.qualified, category), metric, bound, None, spreads, ids, power))
            if category_rules.limit is not None:
                rows.append(_comparison_row(CheckKey(Rule.REGRESSION, metric.qualified, category), metric, category_rules.limit, None, spreads, ids, levels))
    return PowerPlan(model=model, champion=champion_version, baseline=baseline_version, alpha=alpha, power=power, rules=rows)
