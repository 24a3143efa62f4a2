"""The group-sequential gate (docs/sequential.md): a candidate judged at each look of the
policy's ``sequential`` design, on its records of that look
(``evaluators/metrics/sequential.py`` has the boundaries)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

import numpy as np
import pandas as pd
from scipy import stats

from vlgate.decisions import Check, CheckKey, GateVerdict, LookRecord, Rule, Verdict
from vlgate.evaluators.metrics import sequential
from vlgate.evaluators.metrics.bootstrap import bootstrap_standard_error, samples_to_decide
from vlgate.evaluators.metrics.score_test import PairedScore
from vlgate.gate import rendering
from vlgate.gate.checks import Outputs, apply_waivers, bound_checks, category_ids, comparisons, concluded, paired_comparison, ran_checks, resampled_statistic, set_statistic
from vlgate.gate.corrections import correction
from vlgate.gate.policy import GatePolicy, ResolvedMetric
from vlgate.values import replaced


@dataclass(frozen=True)
class LookTest:
    """One rule tested at a look: its check's key and limit, the estimate on the passing
    side of the limit (the candidate's value for a floor, minus it for a ceiling, the
    improvement over the champion for a comparison), its standard error and items."""

    key: CheckKey
    limit: float
    estimate: float
    standard_error: float
    items: int
    candidate: float | None
    champion: float | None
    #: a comparison's paired change, judged at every look by the paired score test (the
    #: fixed-sample gate's test) instead of Student t
    score: PairedScore | None = None

    @property
    def z(self) -> float:
        if self.score is not None:
            return self.score.z(self.limit)
        return float(sequential.standardised(self.estimate, self.limit, self.standard_error))

    def p_below(self) -> float:
        """p-value of "the true value is on the failing side of the limit": the paired score
        test where it is the test, else Student t on the studentised estimate."""
        if self.score is not None:
            return self.score.p_below(self.limit)
        return float(stats.t.cdf(self.z, df=max(self.items - 1, 1))) if not np.isnan(self.z) else 1.0

    def p_above(self) -> float:
        """p-value of "the true value is on the passing side": the paired score test where
        it is the test, else Student t."""
        if self.score is not None:
            return self.score.p_above(self.limit)
        return float(stats.t.sf(self.z, df=max(self.items - 1, 1))) if not np.isnan(self.z) else 1.0


def _bound_test(key: CheckKey, limit: float, items: int, value: float | None, error: float | None) -> LookTest | Check:
    """A floor or ceiling as a test at an interim look, from the candidate's value on its
    ``items`` and the value's bootstrap standard error (:func:`_measure`); a check when
    it cannot be made yet."""
    if value is None or error is None or not np.isfinite(value):
        return Check.of(key, Verdict.INCONCLUSIVE, rendering.UNDEFINED_AT_LOOK, candidate=value, limit=limit, n_shared=items)
    floor = key.rule is Rule.FLOOR
    return LookTest(key, limit if floor else -limit, float(value) if floor else -float(value), error, items, float(value), None)


def _measure(metric: ResolvedMetric, frame: pd.DataFrame, policy: GatePolicy) -> tuple[float | None, float | None]:
    """The candidate's value of a metric and its bootstrap standard error (ratio metrics as aggregated)."""
    statistic = set_statistic(metric)
    value = statistic(frame)
    return value, bootstrap_standard_error(frame, statistic, policy.resamples, policy.seed, resampled_statistic(metric, frame))


def _look_bound_tests(policy: GatePolicy, candidate: Outputs) -> list[LookTest | Check]:
    """Every floor and ceiling (per-category ones too) as a test at an interim look; the
    rules on one metric and items (a floor and a ceiling) share its measurement."""
    measurements: dict[tuple[str, str | None], tuple[float | None, float | None]] = {}

    def test(key: CheckKey, metric: ResolvedMetric, limit: float, frame: pd.DataFrame | None, category: str | None = None) -> LookTest | Check:
        if frame is None or len(frame) < 2:
            return Check.of(key, Verdict.INCONCLUSIVE, rendering.TOO_FEW_TO_TEST, limit=limit)
        if (metric.qualified, category) not in measurements:
            measurements[(metric.qualified, category)] = _measure(metric, frame, policy)
        return _bound_test(key, limit, len(frame), *measurements[(metric.qualified, category)])

    tests: list[LookTest | Check] = []
    for rule in policy.rules.bounds:
        output = candidate.get(rule.metric.evaluator)
        tests.append(test(rule.key, rule.metric, rule.limit, None if output is None else output.samples))
    for rules in policy.rules.categories:
        output = candidate.get(rules.metric.evaluator)
        frame = None if output is None else output.samples
        by_category = category_ids(output, rules.metric)
        for category in rules.only or sorted(by_category):
            ids = by_category.get(category, frozenset())
            subset = None if frame is None else frame[frame["id"].isin(ids)]
            for kind, limit in rules.bounds:
                tests.append(test(CheckKey(kind, rules.metric.qualified, category), rules.metric, limit, subset, category))
    return tests


def decide_at_look(policy: GatePolicy, candidate: Outputs, champion: Outputs | None, look: int, today: date | None = None) -> GateVerdict:
    """The gate at look ``look`` (0-based) of the policy's ``sequential`` design, on the
    candidate's records of that look (``evaluators/metrics/sequential.py``).

    Each rule is a test of its estimate against its limit: a comparison's improvement over
    the champion on the shared items by the fixed-sample gate's paired score test, and at
    interim looks a floor's or ceiling's value studentised by its bootstrap standard error
    (the metric as the evaluator aggregates it, ratios included). A rule **fails** when
    Holm's step-down over the rules tested (``correction``), each step's level spent over
    the looks, shows it on the wrong side of its limit; it **passes** when its p-value of being on the right side is
    within the look's nominal level of α, the whole α at a last look that alone may
    promote (``sequential.pass_level``; an intersection-union test: no correction). At
    the last look a floor or ceiling is judged on the estimate itself, as the
    fixed-sample gate judges it, and a comparison neither failed nor passed is
    inconclusive; at an interim look such a rule is not decided yet. The look **settles**
    the decision when a rule failed (or an evaluator did not run or failed its
    expectations: fail closed at once), when every rule passed and the policy promotes
    early, or at the last look."""
    design = policy.sequential
    assert design is not None
    fractions, alpha = design.looks, 1 - policy.confidence
    last = look == len(fractions) - 1
    checks = ran_checks(policy, candidate)
    tests: list[LookTest | Check] = []
    if last:
        checks += bound_checks(policy, candidate)
    else:
        tests.extend(_look_bound_tests(policy, candidate))
    for comparison in comparisons(policy, candidate, champion):
        compared = paired_comparison(comparison, candidate, champion)
        if isinstance(compared, Check):
            if not last and compared.verdict is Verdict.COULD_NOT_JUDGE and compared.n_shared is not None:  # an undefined metric on few items: wait
                compared = replaced(compared, verdict=Verdict.INCONCLUSIVE, detail=rendering.not_decided_yet(compared.detail))
            tests.append(compared)
            continue
        assert compared.difference is not None
        # the fixed-sample gate's paired score test at every look, against the spent levels
        tests.append(LookTest(comparison.key, comparison.limit, compared.difference, compared.standard_error, compared.n_shared, compared.candidate, compared.champion, compared))
    tested = [t for t in tests if isinstance(t, LookTest) and not np.isnan(t.z)]
    p_below = [t.p_below() for t in tested]
    failed = correction(policy.correction).failed_at_look(p_below, alpha, fractions, look, design.spending)
    pass_level = sequential.pass_level(fractions, alpha, look, design.promote_early, design.spending)
    failed_keys = {t.key for t, shown in zip(tested, failed, strict=True) if shown}
    where = LookRecord(index=look, of=len(fractions), fraction=fractions[look], settled=False)
    for test in tests:
        checks.append(test if isinstance(test, Check) else look_check(test, failed=test.key in failed_keys, pass_level=pass_level, last=last, where=rendering.look_place(where)))
    checks = apply_waivers(checks, policy, today or datetime.now(UTC).date())
    passed = all(check.passed for check in checks)
    stops = any(check.verdict is Verdict.FAIL for check in checks) or any(c.verdict is Verdict.COULD_NOT_JUDGE and c.rule in (Rule.RAN, Rule.EXPECTATIONS) for c in checks)
    settled = last or stops or (passed and design.promote_early)
    return concluded(checks, policy, LookRecord(index=look, of=len(fractions), fraction=fractions[look], settled=settled))


def look_check(test: LookTest, failed: bool, pass_level: float, last: bool, where: str) -> Check:
    """A rule's check at a look: failed (Holm over the looks), passed (within the look's
    nominal level), inconclusive at the last look, or not decided yet at an interim one."""
    bound = sequential.t_boundary(pass_level, test.items)
    if test.score is not None:  # judged by the score test: its interval
        low, high = test.score.bounds(pass_level)
    else:
        low, high = test.estimate - bound * test.standard_error, test.estimate + bound * test.standard_error
    comparison = test.key.rule in (Rule.REGRESSION, Rule.SUPERIORITY)
    flip = -1.0 if test.key.rule is Rule.CEILING else 1.0  # a ceiling's estimate is the value negated
    shown_limit = test.limit * flip
    samples_needed = None
    if failed:
        verdict = Verdict.FAIL
    elif test.p_above() <= pass_level:
        verdict = Verdict.PASS
    else:
        verdict = Verdict.INCONCLUSIVE
        if last:
            half_width = (test.estimate - low if test.estimate > test.limit else high - test.estimate) if test.score is not None else bound * test.standard_error
            samples_needed = samples_to_decide(test.items, test.estimate - test.limit, half_width)
    interval = (low, high) if comparison else (min(low * flip, high * flip), max(low * flip, high * flip))
    check = Check.of(
        test.key, verdict, "", candidate=test.candidate, champion=test.champion, limit=test.limit if comparison else shown_limit,
        interval=interval, bound=interval[0] if comparison or flip > 0 else interval[1], p_value=test.p_below(), n_shared=test.items, samples_needed=samples_needed,
    )  # fmt: skip
    return check.described(rendering.look_test(check, test.estimate, test.z, pass_level, where, last))
