"""The pictures across evaluators, drawn from plain data frames (no MLflow, no model): rank
correlations across versions and the drift history. An evaluator's own pictures live in
its package's ``figures.py``.

Every function returns a matplotlib ``Figure`` built without pyplot (no global state, safe
in Prefect's worker threads); :func:`png` turns one into PNG bytes for a report or an
MLflow artifact. Inputs are what the metric modules already produce: the per-version
metric table (one row per version, columns ``EVALUATOR/METRIC``) and the drift checks' history.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import timezone

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vlgate.evaluators.metrics.correlation import correlate_table, parse_ranked_cell


def png(figure: Figure, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def _values(column: pd.Series, ranks: bool) -> np.ndarray:
    return np.array([parse_ranked_cell(str(cell))[0] for cell in column], dtype=float) if ranks else column.to_numpy(dtype=float)


def coefficient_label(name: str, coefficients: Mapping[str, float | int | None]) -> str:
    """``acc: r=.8265 ρ=.8909 τ=.7091 (n=11)`` — the paper's three coefficients, as its tables print them."""

    def fmt(value: float | None) -> str:
        return "–" if value is None else f"{value:.4f}".replace("0.", ".", 1) if abs(value) < 1 else f"{value:.4f}"

    return f"{name}: r={fmt(coefficients.get('pearson'))} ρ={fmt(coefficients.get('spearman'))} τ={fmt(coefficients.get('kendall'))} (n={coefficients.get('n')})"


def correlation_figure(table: pd.DataFrame, x: str, ys: Sequence[str], labels: Sequence[str] | None = None, ranks: bool = False, title: str = "") -> Figure:
    """A label-free metric against labelled ones across versions (paper Tables 1–3 as a
    picture): one scatter per ``y`` with Pearson/Spearman/Kendall in its legend entry.
    ``ranks=True`` reads the paper's ``value/rank`` cells, so its printed coefficients come out."""
    ys = [y for y in ys if y in table.columns]
    coefficients = correlate_table(table, x, list(ys), ranks=ranks)
    figure = Figure(figsize=(6.4, 4.4))
    axes = figure.add_subplot()
    x_values = _values(table[x], ranks)
    for y, marker in zip(ys, "osD^v<>"):
        y_values = _values(table[y], ranks)
        axes.scatter(x_values, y_values, marker=marker, label=coefficient_label(y, coefficients[y]))
    if labels is not None:
        for label, xv, yv in zip(labels, x_values, _values(table[ys[0]], ranks) if ys else x_values):
            axes.annotate(str(label), (xv, yv), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axes.set_xlabel(x)
    axes.set_ylabel(", ".join(ys))
    axes.set_title(title or f"{x} vs {', '.join(ys)}")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    return figure


def drift_history_figure(history: pd.DataFrame, title: str = "") -> Figure:
    """Label-free metrics of the scheduled drift checks over time; drifted checks marked ✕.
    ``history``: columns ``time`` (datetime), ``metric``, ``value``, ``drifted`` (bool)."""
    figure = Figure(figsize=(6.4, 3.6))
    axes = figure.add_subplot()
    for metric, rows in history.sort_values("time").groupby("metric", sort=True):
        line = axes.plot(rows["time"], rows["value"], marker="o", label=metric)[0]
        marked = rows[rows["drifted"].astype(bool)]
        axes.scatter(marked["time"], marked["value"], marker="X", s=90, color=line.get_color(), edgecolors="black", zorder=3)
    if history["drifted"].astype(bool).any():
        axes.scatter([], [], marker="X", s=90, color="white", edgecolors="black", label="drift detected")
    axes.set_ylabel("batch mean")
    axes.set_title(title or "Drift checks: label-free metrics over time")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    # the tick labels say the time as the report's table does (UTC, hours and minutes at
    # least): matplotlib's own choice for checks minutes apart is minutes and microseconds
    times = pd.to_datetime(history["time"], utc=True)
    within_a_day = len(times) and times.max() - times.min() < pd.Timedelta(days=1)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S" if within_a_day else "%Y-%m-%d %H:%M", tz=timezone.utc))
    axes.set_xlabel(f"time (UTC, {times.min():%Y-%m-%d})" if within_a_day else "time (UTC)")
    figure.autofmt_xdate()
    return figure
