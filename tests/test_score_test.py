"""The gate's paired score test (evaluators/metrics/score_test.py): Tango's restricted
estimate by hand and by brute force, the statistic's level at the margin summed exactly
over the paired outcomes, the interval as the test inverted, and the jackknife
pseudo-values of means and ratios."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from vlgate.evaluators.metrics import score_test


def _changes(gained: int, lost: int, n: int) -> np.ndarray:
    return np.r_[np.ones(gained), -np.ones(lost), np.zeros(n - gained - lost)]


@pytest.mark.parametrize(("gained", "lost", "n", "null"), [(3, 5, 80, -0.05), (0, 0, 100, -0.02), (2, 0, 80, -0.05), (10, 3, 200, -0.02), (5, 5, 50, 0.0), (1, 0, 100, 0.0)])
def test_the_restricted_weights_on_paired_0_1_scores_are_tangos_estimate_and_the_likelihood_maximum(gained, lost, n, null):
    support, weights = score_test.restricted_weights(_changes(gained, lost, n), null, -1.0, 1.0)
    lost_share = dict(zip(support, weights)).get(-1.0, 0.0)
    assert lost_share == pytest.approx(score_test.tango_restricted_loss(gained, lost, n, null), abs=1e-9)
    assert float(np.sum(weights * support)) == pytest.approx(null, abs=1e-12)

    # the multinomial likelihood of (gained, unchanged, lost) maximised over the lost share q
    def minus_log_likelihood(q: float) -> float:
        cells = ((gained, q + null), (lost, q), (n - gained - lost, 1 - 2 * q - null))
        return -sum(k * np.log(p) for k, p in cells if k)

    brute = optimize.minimize_scalar(minus_log_likelihood, bounds=(max(0.0, -null) + 1e-12, (1 - null) / 2 - 1e-12), method="bounded", options={"xatol": 1e-12}).x
    assert lost_share == pytest.approx(brute, abs=1e-6)
    assert score_test.score_statistic(_changes(gained, lost, n), null, -1.0, 1.0) == pytest.approx(float(score_test.tango_score(gained, lost, n, null)), rel=1e-9)


def test_no_change_on_100_items_does_not_show_a_drop_below_two_points():
    # by hand: the null puts 2 % of the items at -1 (q̃ = 0.02), variance 2·0.02 - 0.02·1.02 = 0.0196
    assert score_test.tango_restricted_loss(0, 0, 100, -0.02) == pytest.approx(0.02)
    assert score_test.score_statistic(np.zeros(100), -0.02, -1.0, 1.0) == pytest.approx(0.02 * 10 / 0.14)
    assert stats.norm.sf(0.2 / 0.14) > 0.05  # not shown at α = 0.05
    # the bound: the largest drop still not rejected, where Z = z₀.₉₅
    bound = score_test.score_bound(np.zeros(100), 0.05, -1.0, 1.0)
    assert score_test.score_statistic(np.zeros(100), bound, -1.0, 1.0) == pytest.approx(stats.norm.isf(0.05), abs=1e-6)
    assert -0.03 < bound < -0.02


@pytest.mark.parametrize("accuracy", [0.6, 0.84])
@pytest.mark.parametrize("n", [80, 160, 320])
def test_candidates_at_the_margin_pass_at_most_alpha_summed_exactly_over_the_outcomes(accuracy, n):
    """A regression rule (max_drop 0.05, α 0.05) against a champion right on ``accuracy``
    of the items (0.84: the world's), a candidate gaining 10 % of its misses and losing
    what puts it exactly at the margin: the pass rate is the sum over every (gained, lost)
    of its trinomial probability, no simulation error: 0.038, 0.048, 0.046 on the world's
    champion (where the percentile bootstrap passes 0.12, 0.08, 0.08), 0.0501, 0.048,
    0.048 on the 60 % one (a large-sample test: its size may pass α by a hair)."""
    margin, alpha = 0.05, 0.05
    gained_share = 0.1 * (1 - accuracy)
    lost_share = gained_share + margin
    b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    possible = b + c <= n
    probability = np.where(possible, stats.multinomial.pmf(np.stack([b, c, n - b - c], axis=-1).clip(0), n, [gained_share, lost_share, 1 - gained_share - lost_share]), 0.0)
    assert probability.sum() == pytest.approx(1.0)
    passes = stats.norm.sf(score_test.tango_score(b, c, n, -margin)) <= alpha
    assert float(probability[passes & possible].sum()) <= alpha + 0.001
    # and it has power: no true change passes far more often
    unchanged = np.where(possible, stats.multinomial.pmf(np.stack([b, c, n - b - c], axis=-1).clip(0), n, [gained_share, gained_share, 1 - 2 * gained_share]), 0.0)
    assert float(unchanged[passes & possible].sum()) > 0.4


def test_the_interval_is_the_test_inverted_and_p_values_are_the_two_tails():
    rng = np.random.default_rng(4)
    changes = rng.choice([-1.0, 0.0, 1.0], size=300, p=[0.08, 0.86, 0.06])
    paired = score_test.PairedScore(300, 0.8, 0.82, float(changes.mean()), changes)
    low, high = paired.bounds(0.05)
    assert low < changes.mean() < high
    assert paired.p_above(low) == pytest.approx(0.05, abs=1e-6) and paired.p_below(high) == pytest.approx(0.05, abs=1e-6)
    assert paired.p_above(low - 0.01) < 0.05 < paired.p_above(low + 0.01)
    assert paired.p_below(-0.02) + paired.p_above(-0.02) == pytest.approx(1.0)
    assert paired.standard_error == pytest.approx(changes.std(ddof=1) / np.sqrt(300))
    # lower is better: the same change seen the other way round
    flipped = paired.improvement(lower_is_better=True)
    assert flipped.difference == -paired.difference and flipped.bounds(0.05) == pytest.approx((-high, -low))


def test_a_null_beyond_the_range_is_decided_without_a_test():
    assert score_test.score_statistic(np.zeros(10), -1.0, -1.0, 1.0) == np.inf  # no change can lose more than everything
    assert score_test.score_statistic(np.zeros(10), 1.0, -1.0, 1.0) == -np.inf


def test_pseudo_values_of_a_mean_are_the_paired_differences_and_pair_by_id():
    rng = np.random.default_rng(5)
    champion = pd.DataFrame({"id": [f"s{i}" for i in range(50)], "x": rng.random(50)})
    candidate = pd.DataFrame({"id": [f"s{i}" for i in range(49, -1, -1)] + ["extra"], "x": list(champion["x"][::-1] - 0.1 + rng.normal(0, 0.01, 50)) + [9.0]})
    mean = lambda frame: float(frame["x"].mean())
    paired = score_test.paired_score(candidate, champion, mean)
    shared = candidate["id"][:50]  # in the candidate's order
    by_id = candidate.set_index("id").loc[shared, "x"].to_numpy() - champion.set_index("id").loc[shared, "x"].to_numpy()
    assert paired.n_shared == 50 and paired.difference == pytest.approx(by_id.mean())
    assert paired.pseudo_values == pytest.approx(by_id)
    # the reweighting path (weights 1, the left-out row 0) gives the same values
    reweighted = lambda frame, weights: weights @ frame["x"].to_numpy() / weights.sum(axis=1)
    assert score_test.paired_score(candidate, champion, mean, reweighted).pseudo_values == pytest.approx(by_id)


def test_pseudo_values_of_a_ratio_give_the_delta_method_standard_error():
    rng = np.random.default_rng(6)
    n = 400
    frame = pd.DataFrame({"id": range(n), "hit": rng.random(n) < 0.3, "asked": rng.random(n) < 0.6})
    frame["hit"] &= frame["asked"]
    ratio = lambda f: float(f["hit"].sum() / f["asked"].sum())
    empty = frame.assign(hit=False, asked=True)  # a champion whose ratio is 0 everywhere: the change is the candidate's ratio
    paired = score_test.paired_score(frame, empty, ratio)
    r = ratio(frame)
    a, h = frame["asked"].to_numpy(float), frame["hit"].to_numpy(float)
    delta_method = np.sqrt(np.mean((h - r * a) ** 2) / n) / a.mean()
    assert paired.difference == pytest.approx(r) and paired.standard_error == pytest.approx(delta_method, rel=0.01)


def test_an_undefined_statistic_gives_nothing_to_test():
    frame = pd.DataFrame({"id": list("abc"), "x": [1.0, 2.0, 3.0]})
    assert not score_test.paired_score(frame, frame, lambda f: None).testable
    # a ratio undefined once one item is left out (its only denominator): fail closed
    one = pd.DataFrame({"id": list("abc"), "hit": [1, 0, 0], "asked": [1, 0, 0]})
    assert not score_test.paired_score(one, one, lambda f: f["hit"].sum() / f["asked"].sum() if f["asked"].sum() else None).testable


def test_on_0_1_scores_the_statistic_is_tangos_on_every_outcome():
    """The general statistic on a 0/1 score's changes (up to the jackknife's rounding) is
    Tango's on every (gained, lost) outcome of 60 items, those that gained or lost nothing
    included; a graded score's changes are weighed on what was observed."""
    n, null = 60, -0.05
    for gained in range(n + 1):
        for lost in range(n + 1 - gained):
            changes = _changes(gained, lost, n) * (1 + 1e-12)
            general = score_test.score_statistic(changes, null, -1.0, 1.0)
            assert general == pytest.approx(float(score_test.tango_score(gained, lost, n, null)), rel=1e-7, abs=1e-9), (gained, lost)
    # no gain, some 0.5 losses: the gain's end gets no mass, the null sits among the values
    graded = np.r_[np.full(10, -0.5), np.zeros(90)]
    support, weights = score_test.restricted_weights(graded, -0.02, -1.0, 1.0)
    assert list(support) == [-0.5, 0.0] and float(weights @ support) == pytest.approx(-0.02)
