"""What an evaluator's section of a report holds, drawn from plain data (no MLflow, no
HTML): each evaluator's package says what its section shows (``figures.py`` beside its
metrics), and ``dashboards/report.py`` lays every section out the same way.

Figures are matplotlib ``Figure``s built without pyplot (no global state, safe in Prefect's
worker threads). A figure is drawn only when the report asks for it (``SectionFigure.draw``),
and one that cannot be drawn from what was logged is left out, so the report of a failed or
partial run still renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pydantic import JsonValue

from vlgate.evaluators.records import Record

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from PIL import Image


@dataclass(frozen=True)
class SectionInputs:
    """What an evaluator's section is drawn from: the per-sample frame of its valid records
    (with ``id``), its records, and how the page finds a picture a record names (``artifact``:
    a local path or None; ``thumbnail``: a ``data:`` URI or None)."""

    evaluator: str
    samples: pd.DataFrame
    records: list[Record]
    artifact: Callable[[JsonValue], Path | None]
    thumbnail: Callable[[Path | None], str | None]

    @cached_property
    def by_id(self) -> dict[str, Record]:
        return {str(record["id"]): record for record in self.records}

    def record_field(self, name: str) -> list[JsonValue]:
        """A record field in the per-sample frame's row order (the frame holds the valid records)."""
        return [self.by_id.get(str(i), {}).get(name) for i in self.samples["id"]]


@dataclass(frozen=True)
class SectionFigure:
    """One figure of a section: its file name, caption and how it is drawn."""

    name: str
    caption: str
    draw: Callable[[], Figure]


@dataclass(frozen=True)
class VersionsFigure:
    """A figure drawn once per model from the table across its versions (one row per version,
    columns ``EVALUATOR/METRIC``), shown in the evaluator's section and on the leaderboard;
    ``draw(table, evaluator)``. Its file is ``EVALUATOR-NAME``."""

    name: str
    caption: str
    draw: Callable[[pd.DataFrame, str], Figure]


@dataclass(frozen=True)
class Section:
    """An evaluator's part of a version's report: figures, then examples (the rows of the
    report's examples table: ``id``, ``p_lc``, ``prompt``, ``lines``, ``images``)."""

    figures: tuple[SectionFigure, ...] = ()
    examples: tuple[dict[str, JsonValue], ...] = ()


#: the smallest (width, height) a report draws a picture from: larger ones are decoded at a
#: reduced scale (``images.read_image``'s ``fit``), none below this
REPORT_IMAGE_FIT = (1024, 1024)


def readable_image(path: Path | None) -> Image.Image | None:
    """The picture at ``path`` as an RGB PIL image, or None when there is none or it cannot
    be read as one (a record may name any file), or declares more pixels than the budget
    (``images.ImageTooLarge``): a report leaves that picture out and draws the rest. A
    picture larger than :data:`REPORT_IMAGE_FIT` is read at a reduced scale."""
    from PIL import UnidentifiedImageError

    from vlgate.evaluators.images import read_image

    if path is None or not Path(path).is_file():
        return None
    try:
        return read_image(path, fit=REPORT_IMAGE_FIT)
    except (UnidentifiedImageError, OSError, ValueError):  # ImageTooLarge is a ValueError
        return None


def show_image(axes: Axes, path: Path | None) -> None:
    """``path``'s picture on ``axes`` without ticks, or a grey note saying why there is none."""
    axes.set_xticks([])
    axes.set_yticks([])
    image = readable_image(path)
    if image is not None:
        axes.imshow(np.asarray(image))
    else:
        axes.text(0.5, 0.5, "not kept" if path is None or not Path(path).is_file() else "unreadable", ha="center", va="center", fontsize=8, color="gray")
