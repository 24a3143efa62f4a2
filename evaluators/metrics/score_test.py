"""The gate's paired comparison test: a score test of the candidate's change against the
champion, with the change's variance estimated under the null. Pure pandas/numpy/scipy.

**Why not the percentile bootstrap.** A regression rule is a non-inferiority test: H0 the
true change is at or below −max_drop, H1 above it. On per-item 0/1 scores the paired
differences take the values −1, 0 and 1 and, between two versions of one model, few items
change: the difference's distribution is a few discordant items in many ties. There the
percentile bootstrap passes too many candidates sitting exactly at the margin (its
interval treats the observed items as the population and falls on the 1/n lattice), and so
does a t test. The score test holds the level there (the rates at the margin, summed
exactly over the paired outcomes in ``tests/test_score_test.py`` and simulated by
``benchmarks/bench_sequential.py``, are in docs/sequential.md, "The fixed-sample test"), because it estimates the
variance of the change *as the null says it would be*: a candidate that changed no answer on 100
items has not shown it loses less than 2 % of them (a model that loses 2 % would change
none 13 % of the time), and the score test says so where the bootstrap, with no spread
to resample, calls it certain.

**The test.** For 0/1 scores it is Tango's (1998, "Equivalence test and confidence
interval for the difference in proportions for the paired-sample design", Statistics in
Medicine 17: 891–908) score test of the difference of paired proportions: with b items
gained, c lost of n and the null difference Δ₀,

    Z = (b − c − nΔ₀) / √(n·(2·q̃ + Δ₀(1 − Δ₀))),

q̃ the restricted maximum-likelihood estimate of the share of items lost under the null
(:func:`tango_restricted_loss`). For any other metric (means of graded scores, ratios
such as VLind-Bench's, F1) the same statistic is computed on the change's jackknife
pseudo-values (:func:`jackknife_pseudo_values`: for a mean they are the per-item
differences themselves, for a smooth function of means its linearisation), with the
null's variance taken from the empirical-likelihood weights of the pseudo-values
constrained to the null mean (Owen 1988, "Empirical likelihood ratio confidence intervals
for a single functional", Biometrika 75: 237–249: the dual of the constrained
maximisation), on the observed values and, where the null lies at or beyond
them, the end of the change's range on that side (:func:`restricted_weights`). On the
values −1, 0, 1 of a 0/1 score's change the support is those three cells, observed or
not, and the weights are Tango's restricted estimate (a test holds them equal on every
outcome): one test, not two.

Why the range's end only beyond the observed values: a continuous score's change spreads
both ways between two versions of a model, and a test that always allowed mass at the
range's ends would pay for outliers no version shows; a change observed all on one side
of the null (no change at all, among them) cannot carry the null without them. The cost
is on tiny suites: no change on n items shows a drop smaller than δ (on a [0, 1] score)
only from n ≈ 2.7/δ items on, as a model losing δ of its items changes none of n with
probability (1 − δ)ⁿ.

The interval the gate shows is the score test inverted (the changes it does not reject at
the one-sided level), so a rule passes exactly when its lower bound clears the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import optimize, stats

from vlgate.evaluators.metrics.common import LeaveOneOut, Weights

#: jackknife weights (leave-one-out rows × samples) held at once by a reweighting that
#: takes arrays only (a :class:`Reweighting` takes :class:`LeaveOneOut`): 16 MB
JACKKNIFE_CELLS = 2_000_000


def tango_restricted_loss(gained: np.ndarray | int, lost: np.ndarray | int, n: int, null_difference: float) -> np.ndarray:
    """Tango (1998)'s restricted maximum-likelihood estimate of the share of items lost
    (the cell the null difference Δ₀ = p_gained − p_lost pins to p_gained = q + Δ₀):
    q̃ = (√(W² + 8n·c·Δ₀(1 − Δ₀)) − W) / (4n), W = −b − c + (2n − b + c)·Δ₀. The closed
    form of :func:`restricted_weights` on the values −1, 0, 1; elementwise over arrays."""
    b, c, d0 = np.asarray(gained, dtype=float), np.asarray(lost, dtype=float), null_difference
    w = -b - c + (2 * n - b + c) * d0
    return (np.sqrt(w * w + 8 * n * c * d0 * (1 - d0)) - w) / (4 * n)


def tango_score(gained: np.ndarray | int, lost: np.ndarray | int, n: int, null_difference: float) -> np.ndarray:
    """Tango (1998)'s score statistic of paired 0/1 scores against the null difference
    Δ₀: Z = (b − c − nΔ₀) / √(n·(2q̃ + Δ₀(1 − Δ₀))) (q̃ from :func:`tango_restricted_loss`);
    elementwise over arrays of b and c. 0 where b − c = nΔ₀ with no spread."""
    b, c, d0 = np.asarray(gained, dtype=float), np.asarray(lost, dtype=float), null_difference
    q = tango_restricted_loss(b, c, n, d0)
    spread = np.sqrt(np.maximum(n * (2 * q + d0 * (1 - d0)), 0.0))
    excess = b - c - n * d0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(spread > 0, excess / spread, np.where(excess == 0, 0.0, np.sign(excess) * np.inf))


def _ratio(numerator: float, denominator: float) -> float:
    if denominator > 0:
        return float(numerator / denominator)
    return 0.0 if numerator == 0 else float(np.sign(numerator) * np.inf)


def restricted_weights(values: np.ndarray, null_mean: float, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """The distribution of largest likelihood whose mean is ``null_mean``, on the observed
    ``values`` and, where the null mean lies at or beyond them, the end of the change's
    range ``low``/``high`` on that side (no observed value can carry the null then); where
    every value is ``low``, 0 or ``high`` (a 0/1 score's change), on those three cells:
    (support, probabilities). The observed values weigh count/(n·(1 + λ(v − μ₀))), λ the
    root of Σ (v − μ₀)/(1 + λ(v − μ₀)) = 0 (Owen 1988); an unobserved end gets mass
    when the root would make its weight negative, λ then sitting where that weight
    vanishes (the Karush–Kuhn–Tucker condition of an unobserved cell: how Tango's estimate
    gives the lost cell mass when no item was lost). On 0/1 scores, whose changes are −1, 0
    and 1, this is Tango's restricted estimate. ``low`` < μ₀ < ``high``."""
    values = np.asarray(values, dtype=float)
    lattice = _on_lattice(values, low, high)
    support, counts = np.unique(values if lattice is None else lattice, return_counts=True)
    counts = counts.astype(float)
    # a 0/1 score's change can take only −1, 0 and 1: all three are cells, observed or not
    ends = [end for end, beyond in ((low, null_mean <= support[0]), (high, null_mean >= support[-1])) if (beyond or lattice is not None) and end not in support]
    support = np.concatenate([support, ends])
    counts = np.concatenate([counts, np.zeros(len(ends))])
    order = np.argsort(support)
    support, counts = support[order], counts[order]
    n = counts.sum()
    y = support - null_mean
    observed = counts > 0
    # λ keeps every weight non-negative: 1 + λ·y ≥ 0 on the whole support (its ends included);
    # an observed end's weight grows without bound there, so the root lies strictly inside
    lowest, highest = -1.0 / y[-1], -1.0 / y[0]
    inside = 1e-9 * (highest - lowest)
    left = lowest + inside if observed[-1] else lowest
    right = highest - inside if observed[0] else highest

    def slope(lam: float) -> float:
        return float(np.sum(counts[observed] * y[observed] / (1 + lam * y[observed])))

    if np.all(y[observed] == 0):
        lam = 0.0
    elif slope(right) >= 0:
        lam = right  # the null mean lies below what the observed values can give: the low end takes mass
    elif slope(left) <= 0:
        lam = left
    else:
        lam = float(optimize.brentq(slope, left, right, xtol=1e-15, rtol=1e-13, maxiter=200))
    with np.errstate(divide="ignore", invalid="ignore"):
        weights = np.where(observed, counts / (n * (1 + lam * y)), 0.0)
    rest = 1.0 - weights.sum()
    if rest > 1e-12:  # the end where 1 + λy vanishes takes what the observed values leave
        end = 0 if lam == right else len(support) - 1
        weights[end] += rest
    return support, weights / weights.sum()


def _on_lattice(values: np.ndarray, low: float, high: float) -> np.ndarray | None:
    """The values snapped to the range's ends and 0 where every one of them is one of those
    (a 0/1 score's changes, up to the jackknife's rounding); None otherwise."""
    lattice = np.array([low, 0.0, high])
    snapped = lattice[np.argmin(np.abs(values[:, None] - lattice[None, :]), axis=1)]
    return snapped if np.allclose(values, snapped, rtol=0.0, atol=1e-9) else None


def score_statistic(values: np.ndarray, null_mean: float, low: float, high: float) -> float:
    """The score statistic of the mean of ``values`` against ``null_mean``, its variance
    the null's: Z = (v̄ − μ₀) / √(Σ p̃(v − μ₀)² / n), p̃ from :func:`restricted_weights`.
    +∞ (−∞) when the null mean lies at or beyond the range's low (high) end: no change can
    be that bad (good)."""
    values = np.asarray(values, dtype=float)
    if null_mean <= low:
        return float("inf")
    if null_mean >= high:
        return float("-inf")
    support, weights = restricted_weights(values, null_mean, low, high)
    variance = float(np.sum(weights * (support - null_mean) ** 2))
    return _ratio(float(values.mean()) - null_mean, np.sqrt(variance / values.size))


def change_range(values: np.ndarray, metric_low: float | None, metric_high: float | None) -> tuple[float, float]:
    """The range a change of a metric valued in [low, high] can take, ±(high − low),
    widened to the observed values (a ratio's pseudo-values can leave it); the observed
    values' own range where the metric is unbounded."""
    values = np.asarray(values, dtype=float)
    lo, hi = float(values.min()), float(values.max())
    if metric_low is None or metric_high is None:
        return lo, hi
    width = float(metric_high - metric_low)
    return min(lo, -width), max(hi, width)


@dataclass(frozen=True)
class PairedScore:
    """candidate − champion on the shared samples, with its jackknife pseudo-values (one
    per shared sample, empty where none could be computed) and the range of a change."""

    n_shared: int
    candidate: float | None
    champion: float | None
    difference: float | None
    pseudo_values: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    low: float = -1.0
    high: float = 1.0

    @property
    def testable(self) -> bool:
        return self.difference is not None and self.pseudo_values.size >= 2

    def improvement(self, lower_is_better: bool) -> PairedScore:
        """The change with better positive: negated (values and range) where lower is better."""
        if not lower_is_better:
            return self
        difference = None if self.difference is None else -self.difference
        return replace(self, difference=difference, pseudo_values=-self.pseudo_values, low=-self.high, high=-self.low)

    def z(self, limit: float) -> float:
        """The score statistic of the change against ``limit``."""
        return score_statistic(self.pseudo_values, limit, self.low, self.high)

    def p_below(self, limit: float) -> float:
        """p-value of H1: the true change is below ``limit`` (a regression shown)."""
        return float(stats.norm.cdf(self.z(limit)))

    def p_above(self, limit: float) -> float:
        """p-value of H1: the true change is above ``limit`` (non-inferiority shown)."""
        return float(stats.norm.sf(self.z(limit)))

    def bound(self, level: float, lower: bool = True) -> float:
        """The score test inverted at one-sided ``level``: its lower (upper) confidence bound."""
        return score_bound(self.pseudo_values, level, self.low, self.high, lower=lower)

    def bounds(self, level: float) -> tuple[float, float]:
        """Both bounds at ``level``: the changes the test rejects neither way."""
        return self.bound(level, lower=True), self.bound(level, lower=False)

    @property
    def standard_error(self) -> float:
        """The jackknife standard error of the change, s(pseudo-values)/√n."""
        return float(np.std(self.pseudo_values, ddof=1) / np.sqrt(self.pseudo_values.size)) if self.pseudo_values.size > 1 else 0.0


def score_bound(values: np.ndarray, level: float, low: float, high: float, lower: bool = True) -> float:
    """The one-sided confidence bound of the mean of ``values`` at ``level`` by inverting
    :func:`score_statistic`: the null mean where Z equals z₁₋level (lower) or −z₁₋level
    (upper); the range's end where no null mean inside it is rejected."""
    values = np.asarray(values, dtype=float)
    target = stats.norm.isf(level) if lower else -stats.norm.isf(level)
    mean = float(values.mean())
    inner, outer = (low, mean) if lower else (mean, high)
    span = 1e-12 * max(1.0, high - low)

    def excess(null_mean: float) -> float:
        return score_statistic(values, null_mean, low, high) - target

    a, b = inner + span, outer - span
    if lower:
        if a >= b or excess(a) <= 0:
            return low
        if excess(b) >= 0:
            return mean
    else:
        if a >= b or excess(b) >= 0:
            return high
        if excess(a) <= 0:
            return mean
    return float(optimize.brentq(excess, a, b, xtol=1e-10))


def jackknife_pseudo_values(full: float, leave_one_out: np.ndarray) -> np.ndarray:
    """Tukey's jackknife pseudo-values n·θ̂ − (n − 1)·θ̂₍₋ᵢ₎ (Efron & Tibshirani 1993,
    ch. 11): the per-item values whose mean and spread are the statistic's jackknife
    estimate and standard error; for a mean, the items themselves."""
    leave_one_out = np.asarray(leave_one_out, dtype=float)
    n = leave_one_out.size
    return n * full - (n - 1) * leave_one_out


@dataclass(frozen=True)
class Reweighting:
    """A statistic of reweighted copies of a frame that takes any :data:`Weights`, B × n
    weights or :class:`LeaveOneOut` (an evaluator's ``resampled`` metric, built on
    ``weighted_mean``): the jackknife hands it :class:`LeaveOneOut`, n copies in O(n),
    where a plain reweighting function, which takes arrays only, gets the n × n weights in
    batches. Called with draw counts it is the bootstrap's ``ResampledStatistic``."""

    statistic: Callable[[pd.DataFrame, Weights], np.ndarray]

    def __call__(self, frame: pd.DataFrame, counts: Weights) -> np.ndarray:
        return self.statistic(frame, counts)


def leave_one_out(frame: pd.DataFrame, statistic: Callable[[pd.DataFrame], float | None], resampled: Callable[[pd.DataFrame, np.ndarray], np.ndarray] | None) -> np.ndarray:
    """The statistic of the frame without each of its rows in turn (NaN where undefined):
    by the evaluator's reweighting in one pass where it has one (:class:`LeaveOneOut`
    weights where it takes them, O(n); else weights 1 with the left-out row 0, the n × n
    matrix in batches), else by aggregating each leave-one-out frame."""
    n = len(frame)
    if isinstance(resampled, Reweighting):
        return np.asarray(resampled(frame, LeaveOneOut(n)), dtype=float)
    if resampled is not None:
        batch = max(1, JACKKNIFE_CELLS // n)
        parts = []
        for start in range(0, n, batch):
            rows = np.arange(start, min(n, start + batch))
            weights = np.ones((rows.size, n))
            weights[np.arange(rows.size), rows] = 0.0
            parts.append(np.asarray(resampled(frame, weights), dtype=float))
        return np.concatenate(parts)
    values = []
    for row in range(n):
        value = statistic(frame.drop(index=frame.index[row]))
        values.append(np.nan if value is None else float(value))
    return np.asarray(values)


def shared_samples(candidate: pd.DataFrame, champion: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of the ids both frames hold, in the candidate's order: row i of each is one item."""
    shared = candidate[["id"]].merge(champion[["id"]], on="id")["id"]
    return candidate.set_index("id").loc[shared].reset_index(), champion.set_index("id").loc[shared].reset_index()


def paired_score(
    candidate: pd.DataFrame,
    champion: pd.DataFrame,
    statistic: Callable[[pd.DataFrame], float | None],
    resampled: Callable[[pd.DataFrame, np.ndarray], np.ndarray] | None = None,
    metric_range: tuple[float | None, float | None] = (0.0, 1.0),
) -> PairedScore:
    """``statistic(candidate) − statistic(champion)`` over the ids both frames hold, with the
    change's jackknife pseudo-values (both frames left one shared id out at a time: paired).
    A statistic undefined on the full data, or on a leave-one-out frame, gives no
    pseudo-values: the gate then cannot judge and fails closed."""
    a, b = shared_samples(candidate, champion)
    if not len(a):
        return PairedScore(0, None, None, None)
    return paired_change(len(a), statistic(a), statistic(b), lambda: (leave_one_out(a, statistic, resampled), leave_one_out(b, statistic, resampled)), metric_range)


def paired_change(
    n: int,
    candidate: float | None,
    champion: float | None,
    leave_one_out_values: Callable[[], tuple[np.ndarray, np.ndarray]],
    metric_range: tuple[float | None, float | None] = (0.0, 1.0),
) -> PairedScore:
    """:func:`paired_score` from a statistic's values on the two versions' ``n`` ≥ 1 shared
    items and, asked only where the change is defined on two items or more, its values
    without each item in turn (candidate's, champion's): what a caller that computes
    those once for many rules (``gate/checks.py``) builds the score from."""
    value_a, value_b = _finite_or_none(candidate), _finite_or_none(champion)
    if value_a is None or value_b is None:
        return PairedScore(n, value_a, value_b, None)
    difference = value_a - value_b
    if n == 1:
        return PairedScore(n, value_a, value_b, difference)
    dropped_a, dropped_b = leave_one_out_values()
    dropped = dropped_a - dropped_b
    if not np.all(np.isfinite(dropped)):
        return PairedScore(n, value_a, value_b, difference)
    pseudo = jackknife_pseudo_values(difference, dropped)
    low, high = change_range(pseudo, *metric_range)
    return PairedScore(n, value_a, value_b, difference, pseudo, low, high)


def _finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


def paired_score_p_values(differences: np.ndarray, limit: float, sizes: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row of per-item paired differences of 0/1 scores (decisions × items, values −1,
    0 and 1, in evaluation order) tested against ``limit`` on its first ``sizes`` items (a
    look each; all of them by default) as the gate tests such a comparison, by Tango's
    statistic: (p of failing, p of passing), each decisions × looks."""
    rows = np.atleast_2d(np.asarray(differences, dtype=float))
    if not np.all(np.isin(rows, (-1.0, 0.0, 1.0))):
        raise ValueError("paired_score_p_values tests differences of 0/1 scores: -1, 0 or 1 per item")
    gained, lost = np.cumsum(rows == 1, axis=1), np.cumsum(rows == -1, axis=1)
    z = np.stack([tango_score(gained[:, n - 1], lost[:, n - 1], int(n), limit) for n in (sizes if sizes is not None else [rows.shape[1]])], axis=1)
    return stats.norm.cdf(z), stats.norm.sf(z)
