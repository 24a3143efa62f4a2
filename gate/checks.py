"""What the fixed-sample and the sequential gate judge alike: that each evaluator ran and
met its expectations, the bounds on the candidate's values, each comparison with the
champion made on the shared items (the paired score test, ``evaluators/metrics/score_test.py``),
waivers, and the decision the checks add up to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property

import numpy as np
import pandas as pd

from vlgate.decisions import Check, CheckKey, GateVerdict, LookRecord, Outcome, Rule, Verdict
from vlgate.evaluators.definition import EvaluatorDefinition
from vlgate.evaluators.metrics.common import LeaveOneOut, MetricValues, Weights
from vlgate.evaluators.metrics.score_test import PairedScore, Reweighting, paired_change, shared_samples
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.gate import rendering
from vlgate.gate.policy import EVERY_CATEGORY, CategoryRules, GatePolicy, ResolvedMetric
from vlgate.values import replaced

#: the outputs of one version, by evaluator
Outputs = dict[str, EvaluatorOutput]


def verdict_of(passed: bool, judged: bool = True) -> Verdict:
    """A check's verdict from whether it held and whether there was anything to judge."""
    return Verdict.PASS if passed else Verdict.FAIL if judged else Verdict.COULD_NOT_JUDGE


def ran_checks(policy: GatePolicy, candidate: Outputs) -> list[Check]:
    """Every evaluator the suite ran is judged, required or not: an output that crashed or
    failed its expectations blocks promotion (fail closed: any failed expectation);
    ``required`` adds that the evaluator must be there at all."""
    checks = []
    for evaluator in [*policy.required, *(name for name in candidate if name not in policy.required)]:
        result = candidate.get(evaluator)
        ran = CheckKey(Rule.RAN, evaluator)
        if result is None:
            checks.append(Check.of(ran, Verdict.COULD_NOT_JUDGE, rendering.NO_RESULT))
        elif result.error:
            checks.append(Check.of(ran, Verdict.COULD_NOT_JUDGE, rendering.evaluator_failed(result.error)))
        else:
            checks.append(Check.of(ran, Verdict.PASS, rendering.evaluator_ran(len(result.records))))
            passed = result.expectations_passed
            listed = (result.expectations or {}).get("failures")
            failures = [str(line) for line in listed] if isinstance(listed, list) else []
            detail = rendering.EXPECTATIONS_PASSED if passed else rendering.expectation_failures(evaluator, failures)
            checks.append(Check.of(CheckKey(Rule.EXPECTATIONS, evaluator), verdict_of(passed), detail))
    return checks


def metric_value(output: EvaluatorOutput | None, metric: ResolvedMetric) -> float | None:
    value = None if output is None or output.metrics is None else output.metrics.get(metric.name)
    return None if value is None or isinstance(value, dict) else float(value)


def bound_check(key: CheckKey, limit: float, value: float | None) -> Check:
    """A floor or ceiling judged on the candidate's estimate itself."""
    if value is None:
        return Check.of(key, Verdict.COULD_NOT_JUDGE, rendering.METRIC_MISSING, limit=limit)
    floor = key.rule is Rule.FLOOR
    passed = value >= limit if floor else value <= limit
    return Check.of(key, verdict_of(passed), rendering.bound(value, limit, floor, passed), candidate=value, limit=limit)


def _category_metrics(output: EvaluatorOutput | None, metric: ResolvedMetric) -> dict[str, MetricValues] | None:
    """The candidate's per-category metrics (scoring's ``by_<group field>``), None if absent."""
    breakdown = None if output is None or output.metrics is None else output.metrics.get(f"by_{metric.group_field}")
    return breakdown if isinstance(breakdown, dict) else None


def category_bound_checks(rules: CategoryRules, candidate: Outputs) -> list[Check]:
    """Each category's floors and ceilings on the candidate's per-category metrics."""
    if not rules.bounds:
        return []
    metric = rules.metric
    breakdown = _category_metrics(candidate.get(metric.evaluator), metric)
    if breakdown is None:
        return [Check.of(CheckKey(kind, metric.qualified, EVERY_CATEGORY), Verdict.COULD_NOT_JUDGE, rendering.NO_CATEGORY_METRICS, limit=limit) for kind, limit in rules.bounds]
    checks = []
    for category in rules.only or sorted(breakdown):
        values = breakdown.get(category)
        for kind, limit in rules.bounds:
            key = CheckKey(kind, metric.qualified, category)
            records = int(values.get("n") or 0) if values is not None else None
            if records is not None and records < rules.min_samples:
                checks.append(Check.of(key, Verdict.PASS, rendering.too_few_records(records, rules.min_samples), limit=limit))
                continue
            value = None if values is None else values.get(metric.name)
            checks.append(bound_check(key, limit, None if value is None else float(value)))
    return checks


def bound_checks(policy: GatePolicy, candidate: Outputs) -> list[Check]:
    """Every floor and ceiling judged on the candidate's estimates, per-category ones too."""
    checks = [bound_check(rule.key, rule.limit, metric_value(candidate.get(rule.metric.evaluator), rule.metric)) for rule in policy.rules.bounds]
    for rules in policy.rules.categories:
        checks.extend(category_bound_checks(rules, candidate))
    return checks


class _PairedItems:
    """Two versions' records of one evaluator on the items both hold (of ``ids``; None:
    all), row by row, with what every metric's paired score is built from, each computed
    the first time a metric asks: ``aggregate`` of each version, and the leave-one-out
    values of each, by ``resampled`` on :class:`LeaveOneOut` weights (every metric it
    covers in one O(n) pass) or, for the metrics it does not cover, by ``aggregate``
    without each row in turn."""

    def __init__(self, definition: EvaluatorDefinition, candidate: pd.DataFrame, champion: pd.DataFrame, ids: frozenset[object] | None):
        if ids is not None:
            candidate, champion = candidate[candidate["id"].isin(ids)], champion[champion["id"].isin(ids)]
        mine, theirs = shared_samples(candidate, champion)
        self.definition, self.n = definition, len(mine)
        self.versions = (mine.drop(columns="id"), theirs.drop(columns="id"))

    @cached_property
    def values(self) -> tuple[MetricValues, MetricValues]:
        mine, theirs = self.versions
        return self.definition.aggregate(mine), self.definition.aggregate(theirs)

    @cached_property
    def reweighted(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        resampled = self.definition.resampled
        if resampled is None:
            return {}, {}
        mine, theirs = self.versions
        return resampled(mine, LeaveOneOut(self.n)), resampled(theirs, LeaveOneOut(self.n))

    @cached_property
    def dropped(self) -> tuple[list[MetricValues], list[MetricValues]]:
        mine, theirs = self.versions
        return self._without_each_row(mine), self._without_each_row(theirs)

    def _without_each_row(self, frame: pd.DataFrame) -> list[MetricValues]:
        return [self.definition.aggregate(frame.drop(index=frame.index[row])) for row in range(self.n)]

    def leave_one_out(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The metric without each item in turn, each version's (NaN where undefined)."""
        mine, theirs = self.reweighted
        if name in mine:
            return np.asarray(mine[name], dtype=float), np.asarray(theirs[name], dtype=float)
        return _metric_values(self.dropped[0], name), _metric_values(self.dropped[1], name)

    def score(self, metric: ResolvedMetric) -> PairedScore:
        """``score_test.paired_score`` of the metric's statistic on these items."""
        if not self.n:
            return PairedScore(0, None, None, None)
        mine, theirs = (_metric_value(values, metric.name) for values in self.values)
        return paired_change(self.n, mine, theirs, lambda: self.leave_one_out(metric.name), metric.value_range)


def _metric_value(values: MetricValues, name: str) -> float | None:
    value = values.get(name)
    return None if value is None else float(value)


def _metric_values(aggregated: list[MetricValues], name: str) -> np.ndarray:
    return np.asarray([np.nan if (value := _metric_value(values, name)) is None else value for values in aggregated])


class PairedScores:
    """The paired scores of one judgement (a decision, a look, a power plan), each made
    once: the rules on one metric and items share its score, and the metrics of one
    evaluator on the same items share one pairing of the two versions' records, their
    aggregates and one leave-one-out pass of each (:class:`_PairedItems`). The numbers
    are those of ``score_test.paired_score`` with the metric's statistic and
    :func:`resampled_statistic`. Keyed by the frames' identity: a judgement's records do
    not change while it is made (the frames are held here, so no identity is reused)."""

    def __init__(self) -> None:
        self._items: dict[tuple[int, int, frozenset[object] | None], tuple[pd.DataFrame, pd.DataFrame, _PairedItems]] = {}
        self._scores: dict[tuple[int, int, frozenset[object] | None, str], PairedScore] = {}

    def score(self, metric: ResolvedMetric, candidate: pd.DataFrame, champion: pd.DataFrame, ids: frozenset[object] | None = None) -> PairedScore:
        """``metric``'s change from ``champion`` to ``candidate`` (per-sample frames with
        ``id``) on the items both hold of ``ids`` (None: all), with its pseudo-values."""
        key = (id(candidate), id(champion), ids)
        if key not in self._items:
            self._items[key] = (candidate, champion, _PairedItems(metric.definition, candidate, champion, ids))
        if (*key, metric.name) not in self._scores:
            self._scores[(*key, metric.name)] = self._items[key][2].score(metric)
        return self._scores[(*key, metric.name)]


@dataclass(frozen=True)
class Comparison:
    """One comparison with the champion before it is judged: its check's key (a regression
    or superiority rule, its metric and category), metric and margin; ``ids`` the
    category's sample ids (None: every sample); ``too_few`` the category's records when
    fewer than the rule's ``min_samples`` (skipped); ``no_categories``: the candidate has
    none to compare by (fail closed); ``scores``: the paired scores of the judgement it is
    made in, shared by every comparison :func:`comparisons` makes at once."""

    key: CheckKey
    metric: ResolvedMetric
    limit: float
    ids: frozenset[object] | None = None
    too_few: tuple[int, int] | None = None
    no_categories: bool = False
    scores: PairedScores = field(default_factory=PairedScores, compare=False, repr=False)

    def check(self, verdict: Verdict, detail: str, **numbers: object) -> Check:
        """A check of this comparison made without a test (nothing to compare, skipped, fail closed)."""
        return Check.of(self.key, verdict, detail, limit=self.limit, **numbers)


def set_statistic(metric: ResolvedMetric) -> Callable[[pd.DataFrame], float | None]:
    """The set-level metric of a per-sample frame (with ``id``), by the evaluator's own aggregate."""
    aggregate = metric.definition.aggregate

    def statistic(frame: pd.DataFrame) -> float | None:
        value = aggregate(frame.drop(columns="id")).get(metric.name)
        return None if value is None else float(value)

    return statistic


def resampled_statistic(metric: ResolvedMetric, frame: pd.DataFrame) -> Reweighting | None:
    """The metric of many resamples (or leave-one-out copies) of a per-sample frame (with
    ``id``) at once, where the evaluator's definition computes it so
    (``EvaluatorDefinition.resampled``); None otherwise."""
    resampled = metric.definition.resampled
    if resampled is None or metric.name not in resampled(frame.drop(columns="id"), np.zeros((0, len(frame)))):
        return None

    def statistic(frame: pd.DataFrame, counts: Weights) -> np.ndarray:
        return resampled(frame.drop(columns="id"), counts)[metric.name]

    return Reweighting(statistic)


def category_ids(output: EvaluatorOutput | None, metric: ResolvedMetric) -> dict[str, frozenset[object]]:
    """Each category's record ids (by the evaluator's group field); uncategorised records
    belong to no category's rule."""
    group_field = metric.group_field or ""
    by_category: dict[str, set[object]] = {}
    for record in output.records if output is not None else []:
        if record.get(group_field) is not None:
            by_category.setdefault(str(record[group_field]), set()).add(record.get("id"))
    return {category: frozenset(ids) for category, ids in by_category.items()}


def comparisons(policy: GatePolicy, candidate: Outputs, champion: Outputs | None) -> list[Comparison]:
    """Every comparison with the champion the policy makes, before it is judged; they share
    one :class:`PairedScores`."""
    scores = PairedScores()
    made = [Comparison(rule.key, rule.metric, rule.limit, scores=scores) for rule in policy.rules.comparisons]
    for rules in policy.rules.categories:
        if rules.limit is not None:
            made += _category_comparisons(rules, rules.limit, candidate, champion, scores)
    return made


def _category_comparisons(rules: CategoryRules, limit: float, candidate: Outputs, champion: Outputs | None, scores: PairedScores) -> list[Comparison]:
    metric = rules.metric
    by_category = category_ids(candidate.get(metric.evaluator), metric)
    if champion is not None and not by_category:
        return [Comparison(CheckKey(Rule.REGRESSION, metric.qualified, EVERY_CATEGORY), metric, limit, no_categories=True, scores=scores)]
    made = []
    for category in rules.only or sorted(by_category):
        ids = by_category.get(category, frozenset())
        too_few = (len(ids), rules.min_samples) if len(ids) < rules.min_samples else None
        made.append(Comparison(CheckKey(Rule.REGRESSION, metric.qualified, category), metric, limit, ids, too_few, scores=scores))
    return made


def paired_comparison(comparison: Comparison, candidate: Outputs, champion: Outputs | None) -> Check | PairedScore:
    """A comparison's paired change on the shared samples, better positive, with its
    jackknife pseudo-values (``evaluators/metrics/score_test.py``), or the check that says
    why it cannot be made (skipped, no champion, records missing, other protocols, an
    undefined metric)."""
    if comparison.too_few is not None:
        return comparison.check(Verdict.PASS, rendering.too_few_records(*comparison.too_few))
    if comparison.no_categories:
        return comparison.check(Verdict.COULD_NOT_JUDGE, rendering.NO_CATEGORY_RECORDS)
    if champion is None:
        return comparison.check(Verdict.PASS, rendering.NO_CHAMPION)
    metric = comparison.metric
    mine, theirs = candidate.get(metric.evaluator), champion.get(metric.evaluator)
    if mine is None or mine.samples is None or theirs is None or theirs.samples is None:
        return comparison.check(Verdict.COULD_NOT_JUDGE, rendering.RECORDS_MISSING)
    if mine.protocol != theirs.protocol:
        return comparison.check(Verdict.COULD_NOT_JUDGE, rendering.protocols_differ(metric.evaluator, _protocol(mine.protocol), _protocol(theirs.protocol)))
    result = comparison.scores.score(metric, mine.samples, theirs.samples, comparison.ids)
    if not result.testable:
        return comparison.check(Verdict.COULD_NOT_JUDGE, rendering.cannot_compare(result.n_shared), candidate=result.candidate, champion=result.champion, n_shared=result.n_shared)
    return result.improvement(metric.lower_is_better)


def _protocol(value: object) -> str | None:
    """A records' protocol as it is named (records carry it as JSON)."""
    return None if value is None else str(value)


def apply_waivers(checks: Sequence[Check], policy: GatePolicy, today: date) -> list[Check]:
    """A failing check named by a waiver whose day has not passed is let through, on record."""
    judged = []
    for check in checks:
        waiver = policy.waiver(check.key)
        if waiver is not None and not check.passed:
            if waiver.until < today:
                check = replaced(check, detail=rendering.waiver_expired(check.detail, waiver))
            else:
                check = replaced(check, waiver=waiver, verdict=Verdict.WAIVED, detail=rendering.waived(check.detail, waiver))
        judged.append(check)
    return judged


def outcome_of(checks: Sequence[Check], settled: bool) -> Outcome:
    """promoted when every check passed and the decision stands; rejected when a rule
    failed on the numbers; could not judge when something to judge was missing (the
    version may be fine: rerun once fixed); inconclusive when the only failures are
    comparisons too uncertain to decide (more shared samples would)."""
    if settled and all(check.passed for check in checks):
        return Outcome.PROMOTED
    verdicts = {check.verdict for check in checks}
    if Verdict.FAIL in verdicts:
        return Outcome.REJECTED
    return Outcome.COULD_NOT_JUDGE if Verdict.COULD_NOT_JUDGE in verdicts else Outcome.INCONCLUSIVE


def concluded(checks: Sequence[Check], policy: GatePolicy, look: LookRecord | None = None) -> GateVerdict:
    """What ``checks`` add up to under ``policy`` (kept as loaded), at the look of a
    sequential validation it was said at. A promotion under a policy that wants a person's
    sign-off waits for it (awaiting approval); its reasons are a promotion's."""
    outcome = outcome_of(checks, look is None or look.settled)
    reasons = rendering.reasons(checks, look, outcome is Outcome.PROMOTED)
    if outcome is Outcome.PROMOTED and policy.needs_approval:
        outcome = Outcome.AWAITING_APPROVAL
    return GateVerdict(outcome=outcome, reasons=reasons, checks=list(checks), policy=policy.model_dump(mode="json"), look=look)


def with_check(verdict: GateVerdict, check: Check, policy: GatePolicy) -> GateVerdict:
    """``verdict`` with one more check (one the judgement adds, such as the alias's), concluded again."""
    return concluded([*verdict.checks, check], policy, verdict.look)
