"""Small helpers shared by the metric modules (pure numpy/pandas)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import overload

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

#: one set-level metric's value: a count, a rate or a score; None (JSON null) where it is undefined
MetricValue = float | int | None
#: metric name → value, as an evaluator's ``aggregate`` returns them
MetricValues = dict[str, MetricValue]
#: an evaluator's metrics as scoring returns them (``metrics.json``, a summary's ``metrics``):
#: metric name → value, and each breakdown ``by_<field>`` as group → that group's metrics
Metrics = dict[str, MetricValue | dict[str, MetricValues]]


@overload
def f1_of_accuracies(acc: float, j_acc: float) -> float: ...
@overload
def f1_of_accuracies(acc: np.ndarray, j_acc: np.ndarray) -> np.ndarray: ...
def f1_of_accuracies(acc: float | np.ndarray, j_acc: float | np.ndarray) -> float | np.ndarray:
    """VL-LCM paper §4 ("Metrics"): F1 = 2·Acc·J-Acc / (Acc + J-Acc), 0 when both are 0.

    The paper gives no equation number; it is the harmonic mean of MC accuracy
    and joint yes/no accuracy, which reproduces Table 1's F1 column. Elementwise on
    arrays (a bootstrap's resamples); NaN where either is NaN.
    """
    acc_, j_acc_ = np.asarray(acc, dtype=np.float64), np.asarray(j_acc, dtype=np.float64)
    total = acc_ + j_acc_
    f1 = np.divide(2.0 * acc_ * j_acc_, total, out=np.zeros(total.shape), where=total != 0)
    return f1 if f1.ndim else float(f1)


def tied_at_top(probabilities: np.ndarray) -> np.ndarray:
    """Rows of an (N, K) array whose highest probability two or more options share: the
    model gave no answer. A benchmark's parser finds no option in such an answer, and a
    backend that saw none of the option tokens returns the uniform vector."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    return (probabilities == probabilities.max(axis=1, keepdims=True)).sum(axis=1) > 1


def undecided(p_yes: np.ndarray) -> np.ndarray:
    """Yes/no probabilities of exactly 0.5: neither answer (the two-option case of :func:`tied_at_top`)."""
    return np.asarray(p_yes, dtype=np.float64) == 0.5


def mean_or_none(values: ArrayLike) -> float | None:
    """Mean of a non-empty array as a float; None (JSON null) when there is nothing to average."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()) if array.size else None


def ratio_or_none(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None where the denominator is 0 (a score over no eligible items)."""
    return None if denominator == 0 else float(numerator) / float(denominator)


def by_group(
    samples: pd.DataFrame,
    keys: pd.Series,
    aggregate: Callable[[pd.DataFrame], MetricValues],
) -> dict[str, MetricValues]:
    """Apply a set-level ``aggregate`` to each group of ``samples`` sharing a key (sorted by key)."""
    result: dict[str, MetricValues] = {}
    keys = keys.fillna("<none>").astype(str)
    for key, index in sorted(samples.groupby(keys.to_numpy(), sort=False).indices.items()):
        result[key] = aggregate(samples.iloc[index])
    return result


@dataclass(frozen=True)
class LeaveOneOut:
    """The jackknife's row weights over ``n`` samples, the n × n matrix of ones with a zero
    diagonal (copy i leaves sample i out), without its n² cells: :func:`weighted_ratio`
    answers it in O(n), each sum over the other rows being the total less row i's term.
    Wherever :func:`weighted_ratio` takes B × n weights it takes this too, so a ratio
    metric built on it (an evaluator's ``resampled``) gives the n leave-one-out values
    in one pass."""

    n: int

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Σ_{j ≠ i} values_j for each i: the weighted sums of the n copies."""
        if values.shape[0] != self.n:
            raise ValueError(f"leave-one-out weights over {self.n} samples applied to {values.shape[0]} values")
        return np.sum(values, axis=0) - values


#: row weights of B reweighted copies of n samples: a B × n array (a bootstrap's draw
#: counts) or the jackknife's :class:`LeaveOneOut` (B = n)
Weights = np.ndarray | LeaveOneOut


def weighted_ratio(numerator: ArrayLike, denominator: ArrayLike, counts: Weights) -> np.ndarray:
    """Σ w·numerator / Σ w·denominator for each row of ``counts`` (B × n row weights, e.g. a
    bootstrap resample's draw counts, or :class:`LeaveOneOut`), NaN where the denominator
    sums to 0: a ratio metric such as :func:`ratio_or_none`'s on B reweighted copies of the
    samples at once."""
    terms, bases = np.asarray(numerator, dtype=np.float64), np.asarray(denominator, dtype=np.float64)
    if isinstance(counts, LeaveOneOut):
        numerator_sums, denominator_sums = counts.sums(terms), counts.sums(bases)
    else:
        numerator_sums, denominator_sums = counts @ terms, counts @ bases
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator_sums != 0, numerator_sums / np.where(denominator_sums != 0, denominator_sums, 1.0), np.nan)


def weighted_mean(values: ArrayLike, counts: Weights, rows: ArrayLike | None = None) -> np.ndarray:
    """The mean of ``values`` over ``rows`` (a mask; None: all) for each row of ``counts``
    (B × n row weights, or :class:`LeaveOneOut`), NaN where no weighted row is left:
    :func:`mean_or_none` of B reweighted copies at once. Values outside ``rows`` may be NaN."""
    values = np.asarray(values, dtype=np.float64)
    keep = np.ones(values.shape, dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    return weighted_ratio(np.where(keep, values, 0.0), keep, counts)


def json_number(value: float | None) -> float | None:
    """A metric value that JSON can hold: NaN and infinities become None."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
