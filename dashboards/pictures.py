"""The report's pictures: thumbnails of a record's images, and the plots of each evaluator's
section and across a model's versions, each drawn to a PNG held as a ``data:`` URI. A plot
that cannot be drawn from what was logged is left out, never an error: the report of a
failed or partial run must still render.
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from pydantic import JsonValue

from vlgate import tracking
from vlgate.dashboards import plots
from vlgate.dashboards.collect import ValidationReportData, artifact_path
from vlgate.dashboards.leaderboard_rows import early_measures
from vlgate.evaluators import registry
from vlgate.evaluators.figures import SectionInputs, readable_image
from vlgate.evaluators.metrics.correlation import correlate_table
from vlgate.evaluators.output import EvaluatorOutput

if TYPE_CHECKING:
    import matplotlib.figure
    import PIL.Image


def data_uri(png_bytes: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes).decode()


def thumbnail(path: Path | None, size: int = 160) -> str | None:
    """A PNG ``data:`` URI of the picture at ``path``; None when it is missing or unreadable."""
    image = readable_image(path)
    return None if image is None else image_thumbnail(image, size)


def image_thumbnail(image: PIL.Image.Image, size: int = 160) -> str:
    """A PNG ``data:`` URI of ``image`` at most ``size`` pixels a side (``image`` left as it is)."""
    image = image.copy()
    image.thumbnail((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return data_uri(buffer.getvalue())


@dataclass
class Figure:
    """One rendered plot: its name (also its PNG's file name), caption and bytes."""

    name: str
    caption: str
    png: bytes
    #: numbers the plot shows, for the page's data attributes (a correlation figure's
    #: coefficients per y, as its legend prints them)
    data: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return data_uri(self.png)


def drawn_figure(name: str, caption: str, build: Callable[[], matplotlib.figure.Figure], data: dict[str, dict[str, object]] | None = None) -> Figure | None:
    """A plot that cannot be drawn from what was logged is left out, not an error: the
    report of a failed or partial run must still render."""
    try:
        figure = build()
    except (KeyError, ValueError, IndexError):
        return None
    return Figure(name, caption, plots.png(figure), data or {})


def section_inputs(output: EvaluatorOutput, image_roots: tuple[Path, ...] = ()) -> SectionInputs:
    """What an evaluator's section is drawn from; its pictures are found among the run's
    artifacts and the model's data folders only (``collect.artifact_path``)."""
    assert output.samples is not None
    return SectionInputs(
        evaluator=output.evaluator,
        samples=output.samples,
        records=output.records,
        # a record's picture is a path (a string); nothing else names a file
        artifact=lambda reference: artifact_path(output.folder, output.evaluator, reference if isinstance(reference, str) else None, image_roots),
        thumbnail=thumbnail,
    )


def evaluator_figures(output: EvaluatorOutput, shared: ModelFigures) -> tuple[list[Figure], list[dict[str, JsonValue]]]:
    """The plots of one evaluator's section and its examples: the figure its definition draws
    across versions, then what its package's ``section`` draws from this version's records."""
    if output.evaluator not in registry.names():
        return [], []
    definition = registry.get(output.evaluator)
    figures: list[Figure | None] = [shared.across_versions.get(output.evaluator)]
    examples: list[dict[str, JsonValue]] = []
    if definition.report_section is not None and output.samples is not None:
        section = definition.report_section(section_inputs(output, shared.image_roots))
        figures += [drawn_figure(figure.name, figure.caption, figure.draw) for figure in section.figures]
        examples += section.examples
    return [f for f in figures if f is not None], examples


def early_versions(board: pd.DataFrame) -> set[str]:
    """The versions whose leaderboard metrics were measured at an early look (:func:`early_measures`)."""
    return {str(version) for version, row in board.iterrows() if early_measures(row)}


def correlation_figures(versions: pd.DataFrame, early: Collection[str] = ()) -> list[Figure]:
    """One figure per label-free metric against the labelled metrics its definition pairs it
    with: the same pairs, and for each pair the same rows (the versions that have both),
    as the correlation table computed from ``versions``, so its legend's coefficients are
    the table's. A version of ``early`` (measured at an early look, on fewer items than the
    others) is labelled ``vN*`` and named in the caption: the points do not compare like
    with like, and the figure says so."""
    paired: dict[str, list[str]] = {}
    for x, y in registry.correlated_pairs([str(c) for c in versions.columns]):
        if y in versions.columns:
            paired.setdefault(x, []).append(y)
    figures = []
    for x, present in paired.items():
        rows = versions.loc[versions[x].notna(), [x, *present]]
        if int(rows[present].notna().sum().max()) < 3:  # coefficients need three versions
            continue
        name = f"correlation-{x.replace('/', '-')}"
        shown: dict[str, dict[str, object]] = {y: {"versions": [str(v) for v in rows.index[rows[y].notna()]], **values} for y, values in correlate_table(rows, x, present).items()}
        marked = [str(v) for v in rows.index if str(v) in early]
        labels = [f"v{v}*" if str(v) in early else f"v{v}" for v in rows.index]
        draw = lambda rows=rows, x=x, present=present, labels=labels: plots.correlation_figure(rows, x, present, labels=labels)
        caption = f"{x} against {', '.join(present)} across versions"
        if marked:
            caption += f"; * {', '.join(f'v{v}' for v in marked)} measured at an early look, on fewer items than the others"
        figures.append(drawn_figure(name, caption, draw, {y: {**values, "early": marked} for y, values in shown.items()}))
    return [f for f in figures if f is not None]


def version_correlation_figures(data: ValidationReportData, board: pd.DataFrame) -> list[Figure]:
    """A version page's correlation figures, from the rows its correlation table was
    computed from when it was validated (``correlation_versions.json``); for a run older
    than that file, the versions up to this one."""
    if data.correlation_versions is not None:
        return correlation_figures(data.correlation_versions, early_versions(board))
    earlier = [v for v in board.index if tracking.version_number(v) <= tracking.version_number(data.version)]
    return correlation_figures(board.loc[earlier, [c for c in board.columns if "/" in str(c)]], early_versions(board))


@dataclass
class ModelFigures:
    """The plots across a model's versions: the same on every version's page and on the
    leaderboard, so drawn once per ``write_reports``."""

    correlations: list[Figure]
    #: evaluator → the figure its definition draws across versions (lcm-mc's response distribution)
    across_versions: dict[str, Figure | None]
    drift: Figure | None
    #: the folders besides a run's artifacts that its records' images may be shown from
    #: (the model's suite's data; ``collect.artifact_path``)
    image_roots: tuple[Path, ...] = ()


def model_figures(board: pd.DataFrame, drift: pd.DataFrame, image_roots: tuple[Path, ...] = ()) -> ModelFigures:
    across_versions = {
        d.name: drawn_figure(f"{d.name}-{d.versions_figure.name}", d.versions_figure.caption, functools.partial(d.versions_figure.draw, board, d.name))
        for d in registry.definitions()
        if d.versions_figure is not None
    }
    return ModelFigures(
        correlations=correlation_figures(board, early_versions(board)),
        across_versions=across_versions,
        drift=drawn_figure("drift-history", "Label-free metrics of the drift checks over time (✕ = drift)", lambda: plots.drift_history_figure(drift)) if len(drift) else None,
        image_roots=image_roots,
    )
