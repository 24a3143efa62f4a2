"""Paired bootstrap of a set-level metric's difference between two models (the gate's
non-inferiority test). Pure pandas/numpy/scipy.

Both models' per-sample frames are joined on ``id`` (only shared samples count: the same
units, the same images), the shared ids are resampled with replacement (scipy.stats.
bootstrap over the index, so both frames are resampled with the same draw: paired), and
the metric is recomputed on each resample by the evaluator's own aggregate function — so
ratio metrics such as VLind's s_lp are bootstrapped as the ratio they are, not as a mean.
Where the evaluator also gives the metric of many resamples at once from their draw
counts (its metric module's ``resampled``), every resample is computed in one pass: the
same draws and the same values (a test holds them equal), a few hundred times faster
than aggregating each resample's frame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats


@dataclass(frozen=True)
class PairedDifference:
    """candidate − champion on the shared samples, with a two-sided percentile interval
    whose lower end is the one-sided bound at ``confidence``."""

    n_shared: int
    candidate: float | None
    champion: float | None
    difference: float | None
    lower: float | None
    upper: float | None
    confidence: float
    #: the resampled differences (empty when no interval could be drawn): tail
    #: probabilities and intervals at other levels (a multiple-comparison correction's)
    #: are read off it without resampling again
    distribution: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)


#: (per-sample frame with ``n`` rows, B × n draw counts) → the statistic of each of the B
#: resamples, NaN where undefined; must equal ``statistic`` of each resample's frame
ResampledStatistic = Callable[[pd.DataFrame, np.ndarray], np.ndarray]


#: draw counts (resamples × samples) held at once by the one-pass bootstrap: 16 MB
RESAMPLED_CELLS = 2_000_000


def draw_counts(indices: np.ndarray, n: int) -> np.ndarray:
    """(…, n) arrays of drawn row indices → how often each of the ``n`` rows was drawn, (…, n)."""
    indices = np.asarray(indices, dtype=np.int64)
    flat = indices.reshape(-1, indices.shape[-1])
    offsets = (np.arange(flat.shape[0]) * n)[:, None]
    counts = np.bincount((flat + offsets).ravel(), minlength=flat.shape[0] * n).reshape(flat.shape[0], n)
    return counts.reshape(*indices.shape[:-1], n).astype(np.float64)


def _value(statistic: Callable[[pd.DataFrame], float | None], frame: pd.DataFrame) -> float:
    value = statistic(frame)
    return float("nan") if value is None else float(value)


def paired_bootstrap_difference(
    candidate: pd.DataFrame,
    champion: pd.DataFrame,
    statistic: Callable[[pd.DataFrame], float | None],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    resampled: ResampledStatistic | None = None,
) -> PairedDifference:
    """Bootstrap ``statistic(candidate) − statistic(champion)`` over the ids both frames hold;
    ``resampled``: the same statistic of all resamples at once, from their draw counts.

    ``confidence`` is one-sided: the interval is the two-sided ``2·confidence − 1``
    percentile interval, so ``lower`` is exceeded by the true difference with probability
    ``confidence``. A statistic that is undefined (None/NaN) on the full data or on the
    resamples gives None bounds: the gate then cannot judge and fails closed."""
    shared = candidate[["id"]].merge(champion[["id"]], on="id")["id"]
    a = candidate.set_index("id").loc[shared].reset_index()
    b = champion.set_index("id").loc[shared].reset_index()
    n = len(shared)
    if n == 0:
        return PairedDifference(0, None, None, None, None, None, confidence)
    value_a, value_b = _value(statistic, a), _value(statistic, b)
    if not (np.isfinite(value_a) and np.isfinite(value_b)):
        return PairedDifference(n, _finite(value_a), _finite(value_b), None, None, None, confidence)
    difference = value_a - value_b
    if n == 1:
        return PairedDifference(n, value_a, value_b, difference, None, None, confidence)

    def resampled_difference(indices: np.ndarray) -> float:
        rows = np.asarray(indices, dtype=int)
        return _value(statistic, a.iloc[rows]) - _value(statistic, b.iloc[rows])

    def resampled_differences(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        assert resampled is not None and axis == -1
        counts = draw_counts(indices, n)
        flat = counts.reshape(-1, n)
        return (resampled(a, flat) - resampled(b, flat)).reshape(counts.shape[:-1])

    result = stats.bootstrap(
        (np.arange(n),),
        resampled_difference if resampled is None else resampled_differences,
        vectorized=resampled is not None,
        n_resamples=resamples,
        batch=max(1, RESAMPLED_CELLS // n),  # both paths draw alike; the counts stay small
        confidence_level=2 * confidence - 1,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (np.isfinite(low) and np.isfinite(high)):
        return PairedDifference(n, value_a, value_b, difference, None, None, confidence)
    return PairedDifference(n, value_a, value_b, difference, low, high, confidence, np.asarray(result.bootstrap_distribution, dtype=float))


def bootstrap_p_value(distribution: np.ndarray, threshold: float, strict: bool = True) -> float:
    """One-sided bootstrap p-value of H1: difference < ``threshold`` (``strict``) or
    ≤ ``threshold``: the share of resampled differences on the null's side, ≥ or > the
    threshold (the percentile test of Efron & Tibshirani 1993, ch. 16: the percentile interval
    at one-sided level 1 − α lies wholly below the threshold when this is at most α). No
    resamples (no interval could be drawn): 1, nothing shown."""
    if distribution.size == 0:
        return 1.0
    null_side = distribution >= threshold if strict else distribution > threshold
    return float(np.mean(null_side))


def passing_p_value(distribution: np.ndarray, threshold: float, strict: bool = True) -> float:
    """One-sided bootstrap p-value of H1: difference ≥ ``threshold`` (``strict``, the
    complement of :func:`bootstrap_p_value`'s) or > ``threshold``: the share of resampled
    differences below it (at or below it). At most α when the percentile interval's
    one-sided lower bound at level 1 − α clears the threshold. No resamples: 1."""
    if distribution.size == 0:
        return 1.0
    failing_side = distribution < threshold if strict else distribution <= threshold
    return float(np.mean(failing_side))


def holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979, the sequentially rejective test, read as adjusted values):
    sorted ascending, p_(i) · (m − i + 1), made monotone by a running maximum, capped at
    1. Rejecting where the adjusted value is ≤ α keeps the chance of any false rejection
    among the m tests at most α, whatever their dependence."""
    p = np.asarray(p_values, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return [float(v) for v in adjusted]


def bonferroni_adjusted(p_values: list[float]) -> list[float]:
    """Bonferroni's adjusted p-values: m · p, capped at 1 (Holm is never less powerful)."""
    return [min(1.0, float(p) * len(p_values)) for p in p_values]


def samples_to_decide(n: int, gap: float, half_width: float) -> int | None:
    """About how many shared samples would put a one-sided bound on the estimate's side of
    a threshold ``gap`` away from it, with the same estimate and spread: the bound's
    distance from the estimate (``half_width``) shrinks as 1/√n (a normal approximation),
    so n' = ⌈n · (half_width / |gap|)²⌉. None when the estimate sits on the threshold: no
    number of samples decides then."""
    if gap == 0:
        return None
    return max(n + 1, int(np.ceil(n * (half_width / abs(gap)) ** 2)))


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def bootstrap_standard_error(
    frame: pd.DataFrame,
    statistic: Callable[[pd.DataFrame], float | None],
    resamples: int = 2000,
    seed: int = 0,
    resampled: ResampledStatistic | None = None,
) -> float | None:
    """The bootstrap standard error of a set-level metric over a per-sample frame (with
    ``id``): the spread of the metric over resamples of its rows (Efron & Tibshirani 1993,
    ch. 6), for ratio metrics too; None when the metric is undefined or there are fewer
    than two rows."""
    n = len(frame)
    if n < 2 or not np.isfinite(_value(statistic, frame)):
        return None

    def one(indices: np.ndarray) -> float:
        return _value(statistic, frame.iloc[np.asarray(indices, dtype=int)])

    def many(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        assert resampled is not None and axis == -1
        counts = draw_counts(indices, n)
        return resampled(frame, counts.reshape(-1, n)).reshape(counts.shape[:-1])

    result = stats.bootstrap(
        (np.arange(n),), one if resampled is None else many, vectorized=resampled is not None, n_resamples=resamples,
        batch=max(1, RESAMPLED_CELLS // n), method="percentile", random_state=np.random.default_rng(seed),
    )  # fmt: skip
    error = float(result.standard_error)
    return error if np.isfinite(error) else None
