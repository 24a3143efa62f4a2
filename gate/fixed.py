"""The fixed-sample gate: a candidate judged once on every item against its policy and,
where there is one, the champion it is compared with (``policy.py`` says what each rule
means). Comparisons with the champion are paired score tests of the improvement over the
shared samples, judged together: pass on their own one-sided p-value, fail on their
p-value of being beyond the margin adjusted across all of them (``correction``),
inconclusive in between."""

from __future__ import annotations

from datetime import UTC, date, datetime

from vlgate.decisions import Check, GateVerdict, Verdict
from vlgate.evaluators.metrics.bootstrap import samples_to_decide
from vlgate.evaluators.metrics.score_test import PairedScore
from vlgate.gate import rendering
from vlgate.gate.checks import Comparison, Outputs, apply_waivers, bound_checks, comparisons, concluded, paired_comparison, ran_checks
from vlgate.gate.corrections import correction
from vlgate.gate.policy import GatePolicy


def decide_once(policy: GatePolicy, candidate: Outputs, champion: Outputs | None, today: date | None = None) -> GateVerdict:
    """Judge a candidate on every item, once; ``champion`` is None when the model has none
    yet; ``today`` (UTC by default) is the day waivers are checked against."""
    checks = [*ran_checks(policy, candidate), *bound_checks(policy, candidate)]
    checks += judge_comparisons(policy, comparisons(policy, candidate, champion), candidate, champion)
    return concluded(apply_waivers(checks, policy, today or datetime.now(UTC).date()), policy)


def judge_comparisons(policy: GatePolicy, made: list[Comparison], candidate: Outputs, champion: Outputs | None) -> list[Check]:
    """Every comparison's change tested against its limit by the paired score test, then
    judged together: pass on its own one-sided p-value (its lower bound clears the limit),
    fail on its p-value of being beyond the limit adjusted across all of them,
    inconclusive in between."""
    checks: dict[int, Check] = {}
    tested: list[tuple[int, Comparison, PairedScore, float]] = []
    for n, comparison in enumerate(made):
        compared = paired_comparison(comparison, candidate, champion)
        if isinstance(compared, Check):
            checks[n] = compared
            continue
        tested.append((n, comparison, compared, compared.p_below(comparison.limit)))
    corrected = correction(policy.correction)
    adjusted = corrected.adjusted([p for *_, p in tested])
    alpha = 1 - policy.confidence
    fail_level = corrected.fail_level(alpha, len(tested))  # what an inconclusive check's estimate uses
    for (n, comparison, result, _p), p_value in zip(tested, adjusted):
        checks[n] = comparison_check(policy, comparison, result, p_value, alpha, fail_level, len(tested))
    return [checks[n] for n in range(len(made))]


def comparison_check(policy: GatePolicy, comparison: Comparison, result: PairedScore, p_value: float, alpha: float, fail_level: float, family: int) -> Check:
    """One comparison judged: pass when its one-sided bound clears the margin, fail when
    shown beyond it at the corrected level, inconclusive otherwise (with the shared
    samples that would decide)."""
    assert result.difference is not None and result.candidate is not None and result.champion is not None
    improvement = result.difference
    low, high = result.bounds(alpha)
    limit = comparison.limit
    passed = result.p_above(limit) <= alpha
    shown_below = not passed and p_value <= alpha
    verdict = Verdict.PASS if passed else Verdict.FAIL if shown_below else Verdict.INCONCLUSIVE
    samples_needed = None
    if verdict is Verdict.INCONCLUSIVE:
        # towards a pass the uncorrected lower bound decides; towards a fail the bound at the corrected level
        half_width = improvement - low if improvement > limit else result.bound(fail_level, lower=False) - improvement
        samples_needed = samples_to_decide(result.n_shared, improvement - limit, half_width)
    check = Check.of(
        comparison.key, verdict, "", candidate=result.candidate, champion=result.champion, limit=limit, interval=(low, high), bound=low,
        p_value=p_value, n_shared=result.n_shared, samples_needed=samples_needed,
    )  # fmt: skip
    return check.described(rendering.comparison(check, improvement, policy.confidence, policy.correction, family))
