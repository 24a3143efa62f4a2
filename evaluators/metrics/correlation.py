"""Rank correlations between metrics across models or samples (docs/metrics.md#correlations).

Pearson, Spearman and Kendall come from scipy.stats. Table cells of the form
``value/rank`` (as the VL-LCM paper prints them) are read by
:func:`parse_ranked_cell`; :func:`tie_broken_order` turns them into the strict
order the paper's coefficients are computed on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    import pandas as pd


def parse_ranked_cell(cell: str) -> tuple[float, int | None]:
    """``"71.98/6"`` → (71.98, 6); ``".4579"`` → (0.4579, None)."""
    text = str(cell).strip()
    value, _, rank = text.partition("/")
    return float(value), (int(rank) if rank.strip() else None)


def tie_broken_order(values: np.ndarray, printed_ranks: np.ndarray) -> np.ndarray:
    """Positions 1..n ordering models by value (higher value = higher position);
    among equal values, the better (smaller) printed rank gets the higher position."""
    values = np.asarray(values, dtype=np.float64)
    printed_ranks = np.asarray(printed_ranks, dtype=np.float64)
    ascending = np.lexsort((-printed_ranks, values))  # last key is primary
    positions = np.empty(len(values), dtype=np.float64)
    positions[ascending] = np.arange(1, len(values) + 1)
    return positions


def correlations(x: np.ndarray, y: np.ndarray, x_order: np.ndarray | None = None, y_order: np.ndarray | None = None) -> dict[str, float | int | None]:
    """Pearson r on the values; Spearman ρ and Kendall τ on the orders when given
    (tie-broken ranks), else on the values (scipy's average ranks for ties).

    Pairs where either value is missing are dropped; fewer than 3 pairs or a
    constant column gives None for the coefficients.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y)
    n = int(keep.sum())
    result: dict[str, float | int | None] = {"pearson": None, "spearman": None, "kendall": None, "n": n}
    if n < 3 or np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        return result
    x_rank = x[keep] if x_order is None else np.asarray(x_order, dtype=np.float64)[keep]
    y_rank = y[keep] if y_order is None else np.asarray(y_order, dtype=np.float64)[keep]
    result["pearson"] = float(stats.pearsonr(x[keep], y[keep]).statistic)
    result["spearman"] = float(stats.spearmanr(x_rank, y_rank).statistic)
    result["kendall"] = float(stats.kendalltau(x_rank, y_rank).statistic)
    return result


def _column(frame: pd.DataFrame, name: str, ranks: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Values (and, with ``ranks``, the tie-broken order) of one table column."""
    if name not in frame.columns:
        raise KeyError(f"no column {name!r} in the table (columns: {', '.join(map(str, frame.columns))})")
    values, printed = [], []
    for row, cell in enumerate(frame[name].tolist()):
        text = "" if cell is None else str(cell).strip()
        if text == "" or text.lower() == "nan":
            values.append(np.nan)
            printed.append(np.inf)
            continue
        if "/" in text and not ranks:
            raise ValueError(f"row {row + 1}, column {name!r}: cell {text!r} has a rank; pass --ranks to read value/rank cells")
        try:
            value, rank = parse_ranked_cell(text)
        except ValueError:
            raise ValueError(f"row {row + 1}, column {name!r}: cell {text!r} is not a number{' or value/rank' if ranks else ''}") from None
        values.append(value)
        printed.append(np.inf if rank is None else rank)
    values_array = np.array(values, dtype=np.float64)
    if not ranks:
        return values_array, None
    order = np.full(len(values_array), np.nan)
    present = np.isfinite(values_array)
    order[present] = tie_broken_order(values_array[present], np.array(printed)[present])
    return values_array, order


def correlate_table(frame: pd.DataFrame, x: str, ys: list[str], ranks: bool = False) -> dict[str, dict[str, float | int | None]]:
    """docs/metrics.md#correlations: ``{y: {pearson, spearman, kendall, n}}`` between column ``x`` and each of ``ys``,
    one row per model; cells are read as strings so ``value/rank`` survives."""
    x_values, x_order = _column(frame, x, ranks)
    result = {}
    for y in ys:
        y_values, y_order = _column(frame, y, ranks)
        if ranks:
            # orders are recomputed on the rows both columns have, so positions stay 1..n
            keep = np.isfinite(x_values) & np.isfinite(y_values)
            result[y] = correlations(x_values[keep], y_values[keep], _reorder(x_order, keep), _reorder(y_order, keep))
        else:
            result[y] = correlations(x_values, y_values)
    return result


def _reorder(order: np.ndarray | None, keep: np.ndarray) -> np.ndarray:
    """Re-rank a tie-broken order on a subset of rows (keeps relative order, positions 1..m)."""
    assert order is not None, "ranks were asked for, so every column has its order"
    return stats.rankdata(order[keep])


def paired_sample_correlations(candidate: pd.DataFrame, champion: pd.DataFrame, column: str = "p_lc", key: str = "id") -> dict[str, float | int | None]:
    """docs/metrics.md#correlations: correlations of a per-sample score (P_LC by default) between two model
    versions, on the samples both were scored on (inner join on ``key``)."""
    joined = candidate[[key, column]].merge(champion[[key, column]], on=key, suffixes=("_candidate", "_champion"))
    return correlations(joined[f"{column}_candidate"].to_numpy(), joined[f"{column}_champion"].to_numpy())
