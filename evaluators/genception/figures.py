"""GenCeption's report section: s(t) per image and the image chains of the lowest and
highest GC (the paper's Fig. 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vlgate.evaluators.figures import Section, SectionFigure, SectionInputs, show_image
from vlgate.evaluators.schemas import as_list

CHAIN_EXAMPLES = 2  # lowest and highest GC each


@dataclass
class ImageChain:
    """One GenCeption chain: the seed image, X¹ … Xᵀ and each sᵗ (paths may be missing)."""

    id: str
    gc: float
    seed: Path | None
    images: list[Path | None]
    s: list[float]


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


def genception_chain_figure(chains: Sequence[ImageChain], title: str = "") -> Figure:
    """The image chains of the paper's Fig. 1: per row seed → X¹ … Xᵀ, each titled with sᵗ."""
    width = 1 + max((len(c.images) for c in chains), default=0)
    figure = Figure(figsize=(1.7 * width, 1.9 * max(1, len(chains)) + 0.4))
    grid = figure.subplots(max(1, len(chains)), width, squeeze=False)
    for row, chain in zip(grid, chains):
        show_image(row[0], chain.seed)
        row[0].set_title(f"{chain.id}\nseed (GC={chain.gc:.3f})", fontsize=7)
        for axes, path, similarity, t in zip(row[1:], chain.images, chain.s, range(1, width)):
            show_image(axes, path)
            axes.set_title(f"X{t}: s={similarity:.3f}", fontsize=7)
    figure.suptitle(title or "GenCeption chains: lowest and highest GC", fontsize=9)
    return figure


def genception_chains(inputs: SectionInputs, count: int = CHAIN_EXAMPLES) -> list[ImageChain]:
    """The chains of the ``count`` lowest and ``count`` highest GC, with their pictures' paths."""
    ordered = inputs.samples.sort_values("gc")
    chosen = pd.concat([ordered.head(count), ordered.tail(count)]).drop_duplicates("id")
    chains = []
    for row in chosen.itertuples():
        record = inputs.by_id[str(row.id)]
        images = record.get("images", [])
        chains.append(
            ImageChain(
                id=str(row.id),
                gc=float(row.gc),
                seed=inputs.artifact(record.get("seed")),
                images=[inputs.artifact(path) for path in (images if isinstance(images, list) else [])],
                s=[value for value in as_list(record["s"]) if isinstance(value, (int, float))],  # numbers: the record is valid
            )
        )
    return chains


def section(inputs: SectionInputs) -> Section:
    curves = SectionFigure("genception-curves", "s(t) per image and the mean (GenCeption)", lambda: genception_curves_figure(inputs.samples))
    chains = SectionFigure("genception-chains", "Image chains seed → X¹ … Xᵀ of the lowest and highest GC", lambda: genception_chain_figure(genception_chains(inputs)))
    return Section(figures=(curves, chains))
