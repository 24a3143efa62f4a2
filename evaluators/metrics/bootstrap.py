"""A set-level metric's bootstrap standard error (a floor's at the sequential gate's
interim looks, a metric's spread in ``vlgate plan``), and the gate's multiple-comparison
adjustments. Pure pandas/numpy/scipy. (The gate's comparisons with the champion are
score tests: ``score_test.py``.)

The rows are resampled with replacement (scipy.stats.bootstrap over the index) and the
metric is recomputed on each resample by the evaluator's own aggregate function — so ratio
metrics such as VLind's s_lp are bootstrapped as the ratio they are, not as a mean. Where
the evaluator also gives the metric of many resamples at once from their draw counts (its
metric module's ``resampled``), every resample is computed in one pass: the same draws
and the same values (a test holds them equal), a few hundred times faster than
aggregating each resample's frame.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats

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
