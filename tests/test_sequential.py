"""Power planning and group-sequential boundaries (evaluators/metrics/sequential.py):
hand-computed cases, the published boundaries, and error rates by simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from vlgate.evaluators.metrics import score_test, sequential

LOOKS = (0.25, 0.5, 0.75, 1.0)


def test_the_minimum_detectable_effect_and_items_needed_are_the_power_equation_by_hand():
    # σ = 0.5, n = 100, α = 0.05 one-sided, 80 % power: (1.644854 + 0.841621)·0.5/10
    assert sequential.minimum_detectable_effect(0.5, 100, 0.05) == pytest.approx((1.644854 + 0.841621) * 0.05, abs=1e-6)
    assert sequential.minimum_detectable_effect(0.5, 100, 0.05) == pytest.approx(0.124324, abs=1e-6)
    # a margin of 0.02 needs ⌈(2.486475·0.5/0.02)²⌉ = ⌈3863.9⌉ items; at that n the MDE is the margin
    assert sequential.items_needed(0.5, 0.02, 0.05) == 3865
    assert sequential.minimum_detectable_effect(0.5, 3865, 0.05) <= 0.02 < sequential.minimum_detectable_effect(0.5, 3864, 0.05)
    assert sequential.items_needed(0.5, 0.0, 0.05) is None and sequential.minimum_detectable_effect(0.5, 0, 0.05) == float("inf")


def test_the_spending_function_spends_alpha_by_the_last_look_and_little_early():
    assert sequential.obrien_fleming_spending(1.0, 0.05) == pytest.approx(0.05, abs=1e-12)
    assert sequential.obrien_fleming_spending(0.0, 0.05) == 0.0
    # α(0.25) = 2 − 2Φ(1.959964/0.5) = 2 − 2Φ(3.919928)
    assert sequential.obrien_fleming_spending(0.25, 0.05) == pytest.approx(2 * stats.norm.sf(3.919928), rel=1e-5)
    # Pocock type: α·ln(1 + (e − 1)t); at t = 0.25, 0.05·ln(1.429570) = 0.017868, a third of α at a quarter
    assert sequential.pocock_spending(1.0, 0.05) == pytest.approx(0.05, abs=1e-12) and sequential.pocock_spending(0.0, 0.05) == 0.0
    assert sequential.pocock_spending(0.25, 0.05) == pytest.approx(0.017868, abs=1e-6)


def test_the_boundaries_are_those_published_for_four_equally_spaced_looks():
    """gsDesign's sfLDOF (one-sided α = 0.025, four equally spaced looks): 4.3326, 2.9631,
    2.3590, 2.0141 (Jennison & Turnbull 2000, Table 7.6 lists the same design)."""
    assert sequential.spending_boundaries(LOOKS, 0.025) == pytest.approx([4.3326, 2.9631, 2.3590, 2.0141], abs=2e-4)
    # one look is the fixed-sample test
    assert sequential.spending_boundaries([1.0], 0.05) == pytest.approx([stats.norm.isf(0.05)], abs=1e-9)


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_the_boundaries_spend_exactly_the_level_under_the_null(spending):
    """Simulated canonical Z's (Brownian motion at the looks): the chance of ever crossing
    is α, and the chance of crossing by look k is α(t_k)."""
    rng = np.random.default_rng(1)
    increments = rng.standard_normal((400_000, len(LOOKS))) * np.sqrt(np.diff([0.0, *LOOKS]))
    z = np.cumsum(increments, axis=1) / np.sqrt(LOOKS)
    crossed = np.maximum.accumulate(z >= sequential.spending_boundaries(LOOKS, 0.05, spending), axis=1)
    spent = [sequential.SPENDING_FUNCTIONS[spending](t, 0.05) for t in LOOKS]
    assert crossed.mean(axis=0) == pytest.approx(spent, abs=3 * np.sqrt(0.05 / 400_000) + 1e-4)


def test_a_rule_passes_at_the_whole_alpha_at_a_last_look_that_alone_promotes():
    levels = sequential.nominal_levels(LOOKS, 0.05)
    assert sequential.pass_level(LOOKS, 0.05, 3, promote_early=False) == 0.05
    assert sequential.pass_level(LOOKS, 0.05, 3, promote_early=True) == pytest.approx(levels[3]) and levels[3] < 0.05
    assert sequential.pass_level(LOOKS, 0.05, 1, promote_early=True) == sequential.pass_level(LOOKS, 0.05, 1, promote_early=False) == pytest.approx(levels[1])


def test_looks_must_increase_and_end_at_all_the_items():
    for bad in ([0.5, 0.25, 1.0], [0.25, 0.5], [0.0, 1.0], []):
        with pytest.raises(ValueError, match="looks must increase"):
            sequential.spending_boundaries(bad, 0.05)
    assert list(sequential.look_sizes(10, LOOKS)) == [3, 5, 8, 10]


def test_holm_over_the_looks_is_holm_at_one_look_and_stricter_early():
    p = [0.01, 0.04, 0.03, 0.5]
    # Holm at α = 0.05: 0.01 ≤ 0.05/4, then 0.03 > 0.05/3 stops; below, 0.001, 0.015 ≤ 0.05/3, 0.024 ≤ 0.05/2
    assert list(sequential.sequential_holm(p, 0.05, [1.0], look=0)) == [True, False, False, False]
    assert list(sequential.sequential_holm([0.001, 0.015, 0.024, 0.9], 0.05, [1.0], look=0)) == [True, True, True, False]
    # at the first of four looks the smallest must clear the spending at α/4 there
    first = sequential.nominal_levels(LOOKS, 0.05 / 4)[0]
    assert list(sequential.sequential_holm([first * 0.99, 0.5], 0.05 / 2, LOOKS, look=0)) == [True, False]
    assert not sequential.sequential_holm([first * 1.01, 0.5], 0.05 / 2, LOOKS, look=0).any()


def test_a_stratified_order_keeps_every_prefix_a_fair_sample_and_is_seeded():
    strata = ["animals"] * 60 + ["vehicles"] * 30 + ["food"] * 10
    ids = list(range(100))
    order = sequential.stratified_order(ids, strata, seed=7)
    assert sorted(order) == ids and order == sequential.stratified_order(ids, strata, seed=7) != sequential.stratified_order(ids, strata, seed=8)
    stratum_of = dict(zip(ids, strata, strict=True))
    for length in range(1, 101):
        for name, total in (("animals", 60), ("vehicles", 30), ("food", 10)):
            held = sum(stratum_of[i] == name for i in order[:length])
            assert abs(held - length * total / 100) < 1 + 1e-9, (length, name, held)


def simulated_differences(true_change: float, decisions: int, items: int, rng: np.random.Generator, accuracy: float = 0.6) -> np.ndarray:
    """Per-item paired improvements (candidate − champion) of a correct/incorrect metric:
    a champion right on ``accuracy`` of the items, a candidate that gains 10 % of the
    champion's misses and loses what makes the mean change ``true_change``."""
    champion = rng.random((decisions, items)) < accuracy
    gain = 0.1
    loss = (gain * (1 - accuracy) - true_change) / accuracy
    draw = rng.random((decisions, items))
    candidate = np.where(champion, draw >= loss, draw < gain)
    return candidate.astype(float) - champion


#: simulated decisions per case, and three Monte-Carlo standard errors of a rate near α = 0.05
DECISIONS = 10_000
TOLERANCE = 3 * np.sqrt(0.05 * 0.95 / DECISIONS)


def simulated_rates(promote_early: bool, accuracy: float, items: int, spending: sequential.Spending = "obrien-fleming") -> dict[str, dict[str, float]]:
    """Each case's (no true change, a drop at the margin, twice the margin) pass and fail
    rates and mean items per decision of a regression rule (max_drop 0.05, α = 0.05,
    looks at a quarter each, every look judged by the paired score test as the gate judges
    it), with the fixed-sample gate's rates on the same candidates."""
    rng = np.random.default_rng(2026)
    margin, alpha = -0.05, 0.05
    sizes = sequential.look_sizes(items, LOOKS)
    rates = {}
    for case, change in (("none", 0.0), ("margin", margin), ("twice", 2 * margin)):
        differences = simulated_differences(change, DECISIONS, items, rng, accuracy)
        z = sequential.paired_z_at_looks(differences, margin, LOOKS)
        tested = score_test.paired_score_p_values(differences, margin, sizes)
        verdict, stopped = sequential.sequential_decisions(z, sizes, LOOKS, alpha, promote_early, p_values=tested, spending=spending)
        fixed, _ = sequential.sequential_decisions(z[:, -1:], [items], [1.0], alpha, promote_early, p_values=tuple(p[:, -1:] for p in tested))
        rates[case] = {"pass": np.mean(verdict == "pass"), "fail": np.mean(verdict == "fail"), "items": sizes[stopped].mean()}
        rates[case] |= {"fixed pass": np.mean(fixed == "pass"), "fixed fail": np.mean(fixed == "fail")}
    return rates


@pytest.mark.parametrize(("promote_early", "accuracy"), [(True, 0.6), (False, 0.6), (False, 0.84)])
def test_the_sequential_rule_keeps_its_error_rates_and_stops_failures_early(promote_early, accuracy):
    """10,000 decisions per case of a regression rule (max_drop 0.05, α = 0.05) on 400
    items, looks at a quarter each, the last judged by the paired score test as the gate
    judges it: false rejections (no true change) and false promotions (a true drop at the
    margin) at most α plus three Monte-Carlo standard errors, and no more than the
    fixed-sample gate's on the same candidates; a drop of twice the margin stops early.
    The 84 %-accurate champion is the world's: few items change between its versions, the
    case where a percentile bootstrap passed 0.08 of the candidates at the margin."""
    alpha, items = 0.05, 400
    rates = simulated_rates(promote_early, accuracy, items)
    assert rates["none"]["fail"] <= alpha + TOLERANCE and rates["none"]["fail"] <= rates["none"]["fixed fail"] + TOLERANCE
    assert rates["margin"]["pass"] <= alpha + TOLERANCE and rates["margin"]["pass"] <= rates["margin"]["fixed pass"] + TOLERANCE
    assert rates["twice"]["fail"] >= rates["twice"]["fixed fail"] - 0.02  # the looks cost about a point of power
    assert rates["twice"]["items"] <= 0.85 * items  # stopped early on average
    if not promote_early:
        assert rates["none"]["items"] == items  # nothing promotes before the last look
        # promoting at the last look alone, by the fixed gate's own test: exactly the fixed
        # gate's passes but those an early look rejected
        assert rates["margin"]["pass"] <= rates["margin"]["fixed pass"] and rates["none"]["pass"] >= rates["none"]["fixed pass"] - 0.01
    else:
        assert rates["none"]["items"] <= 0.75 * items  # 30 % saved on the 60 % champion, 41 % on the world's


def test_pocock_spending_saves_forty_percent_on_failures_by_twice_the_margin_on_a_large_suite():
    """Pocock-type spending (``sequential.spending: pocock``) on 800 items, four times what
    the margin needs for 80 % power against the 60 % champion: the same error rates, and
    candidates failing by twice the margin stop after fewer than 60 % of the items on
    average (47 % saved; O'Brien–Fleming saves 33 % there), for about three points of
    power to reject them at all."""
    alpha, items = 0.05, 800
    rates = simulated_rates(False, 0.6, items, "pocock")
    assert rates["none"]["fail"] <= alpha + TOLERANCE and rates["margin"]["pass"] <= alpha + TOLERANCE
    assert rates["margin"]["pass"] <= rates["margin"]["fixed pass"]
    assert rates["twice"]["items"] <= 0.6 * items
    assert rates["twice"]["fail"] >= rates["twice"]["fixed fail"] - 0.04


#: the designs the boundary solver is held to: a first look anywhere in (0, 1) with a
#: second at every item, and 2 to MAX_LOOKS equal looks, at every spending and level
FIRST_LOOKS = (0.001, 0.005, 0.01, 0.03, 0.05, 0.06, 0.1, 0.25, 0.5, 0.75, 0.9)
ALPHAS = (0.01, 0.05, 0.1, 0.2)
SPENDINGS = ("obrien-fleming", "pocock")


def spent_under_the_null(fractions, bounds) -> float:
    """P(Z_k ≥ c_k at some look) for two looks, by one-dimensional quadrature of the
    bivariate normal (Corr ρ = √(t₁/t₂)) independent of the solver's grid:
    Φ̄(c₁) + ∫_{−∞}^{c₁} φ(z) Φ̄((c₂ − ρz)/√(1 − ρ²)) dz (the mass below −12 sd is 1e-33)."""
    (first, second), rho = bounds, np.sqrt(fractions[0] / fractions[1])

    def crossing_later(z: float) -> float:
        return float(stats.norm.pdf(z) * stats.norm.sf((second - rho * z) / np.sqrt(1 - rho**2)))

    later, _ = integrate.quad(crossing_later, -12.0, min(first, 12.0), points=[0.0, second * rho], epsabs=1e-13, limit=200)
    return float(stats.norm.sf(first) + later)


@pytest.mark.parametrize("spending", SPENDINGS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_boundaries_exist_for_any_first_look_and_spend_exactly_alpha(spending, alpha):
    """A first look as early as 0.1 % of the items (O'Brien–Fleming spends about nothing
    there: the boundary is +∞ once α(t) underflows) still gives a boundary at every look,
    the first spending α(t₁) exactly and both together α."""
    spent_by = sequential.SPENDING_FUNCTIONS[spending]
    for first in FIRST_LOOKS:
        bounds = sequential.spending_boundaries([first, 1.0], alpha, spending)
        assert not np.isnan(bounds).any() and np.isfinite(bounds[1]) and bounds[0] > 0, (first, bounds)
        assert stats.norm.sf(bounds[0]) == pytest.approx(spent_by(first, alpha), rel=1e-9, abs=1e-300)
        assert spent_under_the_null((first, 1.0), bounds) == pytest.approx(alpha, abs=1e-7), (first, bounds)


@pytest.mark.parametrize("count", range(2, sequential.MAX_LOOKS + 1))
def test_boundaries_exist_for_every_number_of_equal_looks_the_policy_allows(count):
    """2 to MAX_LOOKS equally spaced looks at every spending and level: finite boundaries,
    or +∞ where a look spends less than a double holds; O'Brien–Fleming's fall look by
    look; and simulated Z's under the null cross them by look k with probability α(t_k)
    (up to Monte-Carlo error)."""
    paths, fractions = 100_000, np.arange(1, count + 1) / count
    z = np.cumsum(np.random.default_rng(count).standard_normal((paths, count)), axis=1) / np.sqrt(np.arange(1, count + 1))
    for spending in SPENDINGS:
        for alpha in ALPHAS:
            bounds = sequential.spending_boundaries(fractions, alpha, spending)
            assert not np.isnan(bounds).any() and (bounds > 0).all() and np.isfinite(bounds[-1]), (spending, alpha, bounds)
            if spending == "obrien-fleming":
                assert (np.diff(bounds) <= 0).all(), (alpha, bounds)
            crossed = np.maximum.accumulate(z >= bounds, axis=1).mean(axis=0)
            spent = [sequential.SPENDING_FUNCTIONS[spending](t, alpha) for t in fractions]
            assert crossed == pytest.approx(spent, abs=5 * np.sqrt(alpha / paths)), (spending, alpha, bounds)


def test_boundaries_of_looks_close_together_spend_alpha_by_an_independent_integration():
    """Looks early and close together against scipy's multivariate normal distribution
    function (Genz's algorithm) on the canonical correlations √(t_i/t_j)."""
    for fractions in ([0.01, 0.02, 0.5, 0.501, 1.0], [0.002, 0.2, 0.6, 0.61, 1.0]):
        t = np.asarray(fractions)
        correlation = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
        for spending in SPENDINGS:
            bounds = sequential.spending_boundaries(fractions, 0.05, spending)
            never_crossed = stats.multivariate_normal.cdf(np.minimum(bounds, 40.0), mean=np.zeros(t.size), cov=correlation, abseps=1e-6, releps=0, rng=np.random.default_rng(0))
            assert 1 - never_crossed == pytest.approx(0.05, abs=1e-5), (fractions, spending, bounds)


def test_the_obrien_fleming_spending_keeps_its_tail_where_one_minus_the_cdf_rounds_to_zero():
    # α(0.05) at α = 0.05: 2Φ̄(1.959964/√0.05) = 2Φ̄(8.765) ≈ 1.87e-18, where 2 − 2Φ(8.765) is 0 in doubles
    assert sequential.obrien_fleming_spending(0.05, 0.05) == pytest.approx(2 * stats.norm.sf(stats.norm.isf(0.025) / np.sqrt(0.05)), rel=1e-12)
    assert 0 < sequential.obrien_fleming_spending(0.05, 0.05) < 1e-17


def test_items_needed_is_none_where_no_count_of_items_is_a_number():
    # ((1.644854 + 0.841621)·0.5/1e-200)² overflows a double: no suite detects a margin of 1e-200
    assert sequential.items_needed(0.5, 1e-200, 0.05) is None and sequential.items_needed(0.5, 1e-100, 0.05) == pytest.approx(1.5456e200, rel=1e-4)
