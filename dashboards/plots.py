"""The papers' pictures, drawn from plain data frames (no MLflow, no model).

Every function returns a matplotlib ``Figure`` built without pyplot (no global state, safe
in Prefect's worker threads); :func:`png` turns one into PNG bytes for a report or an
MLflow artifact. Inputs are what the metric modules already produce: the per-version
metric table (one row per version, columns ``EVALUATOR/METRIC``), an evaluator's
per-sample frame (``evaluators.scoring.per_sample_frame``), or its records.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vlgate.evaluators.metrics.correlation import correlate_table, parse_ranked_cell

if TYPE_CHECKING:
    from PIL import Image

#: Paper Fig. 2's colours: LCM blue, abstention orange, confidence green, overconfidence brown.
RESPONSE_COLOURS = {"lcm": "tab:blue", "abstention": "tab:orange", "confidence": "tab:green", "overconfidence": "tab:brown"}


def png(figure: Figure, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def _values(column: pd.Series, ranks: bool) -> np.ndarray:
    return np.array([parse_ranked_cell(str(cell))[0] for cell in column], dtype=float) if ranks else column.to_numpy(dtype=float)


def coefficient_label(name: str, coefficients: dict) -> str:
    """``acc: r=.8265 ρ=.8909 τ=.7091 (n=11)`` — the paper's three coefficients, as its tables print them."""

    def fmt(value) -> str:
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


def response_distribution_figure(table: pd.DataFrame, prefix: str = "lcm-mc", title: str = "") -> Figure:
    """Paper Fig. 2: per version (sorted by increasing LCM) the LCM score beside the
    abstention / confidence / overconfidence rates of its joint yes/no answers."""
    columns = [f"{prefix}/{name}" for name in RESPONSE_COLOURS]
    rows = table[[c for c in columns if c in table.columns]].dropna().sort_values(f"{prefix}/lcm")
    figure = Figure(figsize=(max(4.8, 1.3 * len(rows) + 2), 3.8))
    axes = figure.add_subplot()
    positions = np.arange(len(rows))
    width = 0.8 / len(RESPONSE_COLOURS)
    for n, (name, colour) in enumerate(RESPONSE_COLOURS.items()):
        column = f"{prefix}/{name}"
        if column in rows:
            axes.bar(positions + (n - 1.5) * width, rows[column].to_numpy(float), width, label=name, color=colour)
    axes.set_xticks(positions, [f"v{v}" for v in rows.index])
    axes.set_ylim(0, 1)
    axes.set_ylabel("score / rate")
    axes.set_title(title or f"{prefix}: LCM and the response distribution (sorted by LCM)")
    axes.legend(fontsize=8, ncols=4, loc="upper left")
    return figure


#: VLind-Bench's pipeline: each stage counts only instances that passed the ones before (docs/metrics.md#vlind).
VLIND_STAGES = (("CK", ["ck"]), ("CK∧VP", ["ck", "vp"]), ("CK∧VP∧CB", ["ck", "vp", "cb"]), ("LP (all)", ["lp"]))


def vlind_funnel_figure(samples: pd.DataFrame, concepts: Sequence[str] | None = None, title: str = "") -> Figure:
    """VLind-Bench's pipeline per concept: how many instances survive CK, then VP, then CB,
    and the LP score they reach (``lp`` is already the mean over an instance's images)."""
    frame = samples.copy()
    frame["concept"] = list(concepts) if concepts is not None else "all"
    groups = list(frame.groupby("concept", sort=True))
    figure = Figure(figsize=(max(5.0, 1.4 * len(groups) + 2), 3.8))
    axes = figure.add_subplot()
    positions = np.arange(len(groups))
    width = 0.8 / len(VLIND_STAGES)
    for n, (stage, columns) in enumerate(VLIND_STAGES):
        counts = [float(group[columns].astype(float).prod(axis=1).sum()) for _, group in groups]
        axes.bar(positions + (n - 1.5) * width, counts, width, label=stage)
    axes.plot(positions, [len(group) for _, group in groups], "k_", markersize=22, label="instances")
    axes.set_xticks(positions, [name for name, _ in groups], rotation=20)
    axes.set_ylabel("instances passing")
    axes.set_title(title or "VLind-Bench pipeline per concept")
    axes.legend(fontsize=8)
    return figure


def genception_curves_figure(samples: pd.DataFrame, ids: Sequence[str] | None = None, title: str = "") -> Figure:
    """s(t) for every image (thin) and their mean (thick), t = 0 … T with s(0) = 1."""
    columns = sorted((c for c in samples.columns if c.startswith("s@")), key=lambda c: int(c[2:]))
    steps = np.arange(len(columns) + 1)
    values = np.hstack([np.ones((len(samples), 1)), samples[columns].to_numpy(float)])
    figure = Figure(figsize=(5.6, 3.8))
    axes = figure.add_subplot()
    for row in values:
        axes.plot(steps, row, color="tab:gray", alpha=0.35, linewidth=0.8)
    axes.plot(steps, values.mean(axis=0), color="tab:red", linewidth=2.5, marker="o", label=f"mean over {len(values)} images")
    axes.set_xticks(steps)
    axes.set_xlabel("iteration t")
    axes.set_ylabel("s(t) = cos(z⁽⁰⁾, z⁽ᵗ⁾)")
    axes.set_title(title or "GenCeption: similarity to the seed image per iteration")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return figure


@dataclass
class ImageChain:
    """One GenCeption chain: the seed image, X¹ … Xᵀ and each sᵗ (paths may be missing)."""

    id: str
    gc: float
    seed: Path | None
    images: list[Path | None]
    s: list[float]


def readable_image(path: Path | None) -> Image.Image | None:
    """The picture at ``path`` as an RGB PIL image, or None when there is none or it cannot
    be read as one (a record may name any file): a report leaves that picture out and draws
    the rest."""
    from PIL import Image as PilImage
    from PIL import UnidentifiedImageError

    if path is None or not Path(path).is_file():
        return None
    try:
        with PilImage.open(path) as opened:
            return opened.convert("RGB")
    except (UnidentifiedImageError, PilImage.DecompressionBombError, OSError, ValueError):
        return None


def _show(axes, path: Path | None) -> None:
    axes.set_xticks([])
    axes.set_yticks([])
    image = readable_image(path)
    if image is not None:
        axes.imshow(np.asarray(image))
    else:
        axes.text(0.5, 0.5, "not kept" if path is None or not Path(path).is_file() else "unreadable", ha="center", va="center", fontsize=8, color="gray")


def genception_chain_figure(chains: Sequence[ImageChain], title: str = "") -> Figure:
    """The image chains of the paper's Fig. 1: per row seed → X¹ … Xᵀ, each titled with sᵗ."""
    width = 1 + max((len(c.images) for c in chains), default=0)
    figure = Figure(figsize=(1.7 * width, 1.9 * max(1, len(chains)) + 0.4))
    grid = figure.subplots(max(1, len(chains)), width, squeeze=False)
    for row, chain in zip(grid, chains):
        _show(row[0], chain.seed)
        row[0].set_title(f"{chain.id}\nseed (GC={chain.gc:.3f})", fontsize=7)
        for axes, path, similarity, t in zip(row[1:], chain.images, chain.s, range(1, width)):
            _show(axes, path)
            axes.set_title(f"X{t}: s={similarity:.3f}", fontsize=7)
    figure.suptitle(title or "GenCeption chains: lowest and highest GC", fontsize=9)
    return figure


def decc_matrix(samples: pd.DataFrame, setting: str = "multi") -> pd.DataFrame:
    """Counts of (reliable per DeCC, correct per the label): rows R = 1 / 0, columns correct / wrong."""
    labelled = samples.dropna(subset=["correct", setting])
    reliable, correct = labelled[setting].astype(bool), labelled["correct"].astype(bool)
    return pd.DataFrame(
        [[int((reliable & correct).sum()), int((reliable & ~correct).sum())], [int((~reliable & correct).sum()), int((~reliable & ~correct).sum())]],
        index=["reliable", "unreliable"],
        columns=["correct", "wrong"],
    )


def decc_matrix_figure(samples: pd.DataFrame, setting: str = "multi", title: str = "") -> Figure:
    """DeCC's reliability against correctness: a good detector puts its mass on the diagonal."""
    counts = decc_matrix(samples, setting)
    figure = Figure(figsize=(3.8, 3.2))
    axes = figure.add_subplot()
    axes.imshow(counts.to_numpy(), cmap="Blues")
    for (i, j), value in np.ndenumerate(counts.to_numpy()):
        axes.text(j, i, str(value), ha="center", va="center", fontsize=12)
    axes.set_xticks([0, 1], list(counts.columns))
    axes.set_yticks([0, 1], list(counts.index))
    axes.set_title(title or f"DeCC ({setting}) reliability vs correctness", fontsize=9)
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
    figure.autofmt_xdate()
    return figure
