"""Drift of a label-free score between a reference batch and a new batch (ARCHITECTURE.md, what the service promises: drift).

Pure numpy/scipy. The scheduled drift flow scores the champion on a new unlabelled batch
with the label-free metrics (per-sample VL-LCM consistency, DeCC reliability, GenCeption
similarity, ...) and hands each metric's per-sample values, together with the values of
the champion's reference batch, to :func:`detect_drift`.

Methods
-------
- Two-sample Kolmogorov–Smirnov test (``scipy.stats.ks_2samp``, two-sided,
  ``method="auto"``: exact distribution for small samples, asymptotic otherwise).
  The statistic is ``D = sup_x |F_ref(x) − F_cur(x)|`` over the two empirical CDFs
  (Kolmogorov 1933, Smirnov 1948; Hodges 1958 for the exact two-sample distribution).
- Mann–Whitney U test (``scipy.stats.mannwhitneyu``, two-sided, ``method="auto"``),
  reported alongside as a location-shift check (Mann & Whitney 1947); it does not enter
  the decision.
- Mean drop ``mean_reference − mean_current``. Scores are higher-is-better, so a positive
  drop means the model got worse on the new batch.

Decision rule (one-sided: only a *drop* is drift; an improvement never is)::

    drifted = (KS p < alpha  and  mean_drop > max_mean_drop)
              or mean_drop > 2 · max_mean_drop

The first clause needs both a statistically detectable change of distribution and a drop
that matters; the second catches a large drop on a batch too small for the test to reach
``alpha``.

Several scores tested at once (:func:`detect_drifts`, what the drift flow calls) have
their KS p-values adjusted across the scores tested (Holm 1979, step-down; ``p_adjusted``)
and the first clause uses the adjusted value, so checking more scores per batch does not
raise more false alarms: the chance that any score of a batch is flagged by the test
when none moved stays at most ``alpha``. The second clause has no test to correct.

Too little data (fewer than ``min_samples`` values left in either sample after NaN values
are dropped) gives ``drifted=False`` with means and statistics ``None`` and a reason that says
the check was not testable and why. This is deliberately fail-open, unlike the promotion
gate: a drift check must not raise an alarm on a handful of samples, but it must say that
it could not judge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from vlgate.evaluators.metrics.bootstrap import holm_adjusted


@dataclass
class DriftResult:
    """One metric's drift check. ``mean_drop = mean_reference − mean_current`` (positive =
    got worse); ``statistic``/``p_value`` are the two-sample KS test's, ``mannwhitney_p``
    the two-sided Mann–Whitney U p-value. Means and statistics are ``None`` when not
    testable."""

    metric: str
    n_reference: int
    n_current: int
    mean_reference: float | None
    mean_current: float | None
    mean_drop: float | None
    statistic: float | None
    p_value: float | None
    mannwhitney_p: float | None
    drifted: bool
    reason: str
    #: the KS p-value adjusted across the scores checked together (None: checked alone)
    p_adjusted: float | None = None

    def as_dict(self) -> dict[str, str | int | float | bool | None]:
        """Plain dict (JSON-serialisable: floats, ints, bools, str, None)."""
        return asdict(self)


def _clean(name: str, values: ArrayLike) -> tuple[np.ndarray, int]:
    """1-D float array without NaN (``None`` counts as NaN), and how many were dropped."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of scores, got shape {array.shape}")
    nan = np.isnan(array)
    kept = array[~nan]
    if np.isinf(kept).any():
        # A score of ±inf is a bug upstream, not a value to test or to drop silently.
        raise ValueError(f"{name}: infinite score values")
    return kept, int(nan.sum())


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def detect_drift(
    metric: str,
    reference: ArrayLike,
    current: ArrayLike,
    alpha: float = 0.01,
    max_mean_drop: float = 0.05,
    min_samples: int = 5,
    p_adjusted: float | None = None,
) -> DriftResult:
    """Has the higher-is-better score ``metric`` drifted down from ``reference`` to ``current``?

    ``p_adjusted``: this KS p-value adjusted for the other scores tested with it
    (``detect_drifts`` computes it); the decision then uses it.

    NaN values (and ``None``) are dropped from both samples; ``n_reference``/``n_current``
    count what remains. With fewer than ``min_samples`` values in either sample the check
    is not testable: ``drifted=False``, means and statistics ``None``, and the reason
    says so.
    Otherwise (see the module docstring for the methods)::

        drifted = (ks_2samp p < alpha and mean_drop > max_mean_drop)
                  or mean_drop > 2 * max_mean_drop

    where ``mean_drop = mean(reference) − mean(current)``. A rise of the mean is an
    improvement and never drift, however different the distributions are.

    Raises ValueError for a non-1-D input, infinite scores, ``alpha`` outside (0, 1),
    a negative ``max_mean_drop`` or ``min_samples < 1``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not max_mean_drop >= 0.0:
        raise ValueError(f"max_mean_drop must be >= 0, got {max_mean_drop}")
    if min_samples < 1:
        raise ValueError(f"min_samples must be >= 1, got {min_samples}")

    ref, ref_nan = _clean("reference", reference)
    cur, cur_nan = _clean("current", current)
    n_ref, n_cur = len(ref), len(cur)

    short = [
        f"{label} has {n} value{'s' if n != 1 else ''}" + (f" after dropping {dropped} NaN" if dropped else "")
        for label, n, dropped in (("reference", n_ref, ref_nan), ("current", n_cur, cur_nan))
        if n < min_samples
    ]
    if short:
        return DriftResult(
            metric=metric,
            n_reference=n_ref,
            n_current=n_cur,
            mean_reference=None,
            mean_current=None,
            mean_drop=None,
            statistic=None,
            p_value=None,
            mannwhitney_p=None,
            drifted=False,
            reason=f"not testable: {' and '.join(short)}, fewer than min_samples={min_samples}; no drift reported",
        )

    mean_ref, mean_cur = float(ref.mean()), float(cur.mean())
    drop = mean_ref - mean_cur
    ks = stats.ks_2samp(ref, cur, alternative="two-sided", method="auto")
    statistic, p_value = float(ks.statistic), float(ks.pvalue)
    # Mann–Whitney on two constant, identical samples has no variance: scipy gives NaN.
    mw_p = _finite_or_none(stats.mannwhitneyu(ref, cur, alternative="two-sided", method="auto").pvalue)

    differ = (p_value if p_adjusted is None else p_adjusted) < alpha
    large = drop > 2.0 * max_mean_drop
    drifted = (differ and drop > max_mean_drop) or large

    adjusted_text = f", Holm-adjusted p={_fmt(p_adjusted)}" if p_adjusted is not None else ""
    ks_text = f"KS D={_fmt(statistic)}, p={_fmt(p_value)}{adjusted_text} {'<' if differ else '>='} alpha={alpha:g}"
    means = f"mean {_fmt(mean_ref)} -> {_fmt(mean_cur)}"
    if large:
        reason = f"drifted: {means} fell by {_fmt(drop)} > 2*max_mean_drop={2 * max_mean_drop:g} ({ks_text})"
    elif drifted:
        reason = f"drifted: distributions differ ({ks_text}) and {means} fell by {_fmt(drop)} > max_mean_drop={max_mean_drop:g}"
    elif drop == 0.0:
        reason = f"no drift: {means} unchanged ({ks_text})"
    elif drop < 0.0:
        reason = f"no drift: {means} rose by {_fmt(-drop)}, an improvement (higher is better) ({ks_text})"
    elif differ:
        reason = f"no drift: distributions differ ({ks_text}) but {means} fell only {_fmt(drop)} <= max_mean_drop={max_mean_drop:g}"
    else:
        reason = f"no drift: {ks_text} and {means} fell {_fmt(drop)} <= 2*max_mean_drop={2 * max_mean_drop:g}"

    return DriftResult(
        metric=metric,
        n_reference=n_ref,
        n_current=n_cur,
        mean_reference=mean_ref,
        mean_current=mean_cur,
        mean_drop=drop,
        statistic=statistic,
        p_value=p_value,
        mannwhitney_p=mw_p,
        drifted=bool(drifted),
        reason=reason,
        p_adjusted=p_adjusted,
    )


def detect_drifts(
    scores: Mapping[str, tuple[ArrayLike, ArrayLike]],
    alpha: float = 0.01,
    max_mean_drop: float = 0.05,
    min_samples: int = 5,
) -> list[DriftResult]:
    """:func:`detect_drift` on every ``metric: (reference, current)`` pair of one batch,
    with the KS p-values Holm-adjusted across the testable ones (see the module
    docstring). One score alone is decided as :func:`detect_drift` decides it."""
    alone = {metric: detect_drift(metric, reference, current, alpha, max_mean_drop, min_samples) for metric, (reference, current) in scores.items()}
    tested = [metric for metric, result in alone.items() if result.p_value is not None]
    if len(tested) < 2:
        return list(alone.values())
    adjusted = dict(zip(tested, holm_adjusted([float(alone[metric].p_value or 0.0) for metric in tested])))
    return [
        detect_drift(metric, reference, current, alpha, max_mean_drop, min_samples, p_adjusted=adjusted[metric]) if metric in adjusted else alone[metric]
        for metric, (reference, current) in scores.items()
    ]
