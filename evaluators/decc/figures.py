"""DeCC's report section: reliability against correctness, where the records are labelled."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vlgate.evaluators.figures import Section, SectionFigure, SectionInputs


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


def section(inputs: SectionInputs) -> Section:
    if not inputs.samples["correct"].notna().any():
        return Section()
    return Section(figures=(SectionFigure("decc-matrix", "DeCC multi-agent reliability against correctness", lambda: decc_matrix_figure(inputs.samples)),))
