"""VLind-Bench's report section: the pipeline per concept."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vlgate.evaluators.figures import Section, SectionFigure, SectionInputs

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


def section(inputs: SectionInputs) -> Section:
    concepts = lambda: [str(concept) if concept else "all" for concept in inputs.record_field("concept")]  # a valid record's concept is a string
    funnel = SectionFigure("vlind-funnel", "VLind-Bench pipeline per concept: instances passing each stage", lambda: vlind_funnel_figure(inputs.samples, concepts()))
    return Section(figures=(funnel,))
