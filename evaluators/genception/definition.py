"""GenCeption's GC@T and GC_FID@T (docs/metrics.md#genception). The runner and the report's
figures are imported when they are used."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from vlgate.evaluators.definition import Column, DriftScore, EvaluatorDefinition, ItemScore, Metric, imported_when_called, name_pattern
from vlgate.evaluators.genception import metrics
from vlgate.evaluators.genception.protocols import GENCEPTION
from vlgate.evaluators.genception.schema import GenceptionSchema
from vlgate.evaluators.genception.settings import GenceptionSettings
from vlgate.evaluators.metrics.common import MetricValues

EXAMPLES = Path(__file__).parent / "examples"

#: The share of distinct descriptions of distinct images below which a describer says the
#: same thing of every image (the chains are then no test of the image)
DISTINCT_DESCRIPTIONS_FLOOR = 0.25

_SIMILARITY, _GC_AT = name_pattern("s@{t}"), name_pattern("gc@{T}")


def template_values(frame: pd.DataFrame, found: Mapping[str, object]) -> dict[str, int]:
    """T from the per-sample frame's ``s@t`` columns; without them from a ``gc@T`` metric;
    else the default of 3."""
    iterations = sum(1 for column in frame.columns if _SIMILARITY.fullmatch(str(column)))
    if not iterations:
        at = sorted(int(m.group("T")) for m in (_GC_AT.fullmatch(k) for k in found if isinstance(k, str)) if m)
        iterations = at[-1] if at else 3
    return {"T": iterations}


def feature_metrics(samples: pd.DataFrame, features: list[np.ndarray]) -> MetricValues:
    """``fid@t`` and ``gc_fid@T`` of the features X⁰…Xᵀ, which must match the records' T."""
    n_iterations = metrics.iterations(samples)
    if len(features) != n_iterations + 1:
        raise ValueError(f"features hold {len(features) - 1} iterations but the records have T={n_iterations}")
    return metrics.fid_metrics(features)


GENCEPTION_DEFINITION = EvaluatorDefinition(
    name="genception",
    title="GenCeption",
    schema=GenceptionSchema(),
    per_sample=lambda a: metrics.per_sample(a["s"], a["category"], a["description"]),
    aggregate=metrics.aggregate,
    resampled=metrics.resampled,
    metrics=(
        Metric("gc@{T}", -1.0, 1.0, required=True, headline=True, correlate_with=("lcm-mc/acc",)),
        Metric("gc_image_mean@{T}", -1.0, 1.0, required=True),
        Metric("gc_fid@{T}", 0.0, None, direction="lower", headline=True),
        Metric("s@{t}", -1.0, 1.0),
        Metric("fid@{t}", 0.0, None, direction="lower"),
        Metric(
            "distinct_descriptions",
            direction=None,
            usable_low=DISTINCT_DESCRIPTIONS_FLOOR,
            unusable=f"fewer than {DISTINCT_DESCRIPTIONS_FLOOR:.0%} of the images got a description of their own",
        ),
    ),
    columns=(
        Column("category", text=True),
        Column("gc", -1.0, 1.0),
        Column("s@{t}", -1.0, 1.0),
        Column("description", nullable=True, free_text=True),
    ),
    settings=GenceptionSettings,
    build_runner=imported_when_called("vlgate.evaluators.genception.runner", "build_genception_runner"),
    protocols=GENCEPTION,
    group_field="category",
    drift_score=DriftScore("gc", "gc"),
    template_values=template_values,
    features=imported_when_called("vlgate.evaluators.genception.runner", "features_for_scoring"),
    feature_metrics=feature_metrics,
    item_scores=(ItemScore("gc", metrics=("gc@{T}", "gc_image_mean@{T}")),),
    item_fields=("seed", "descriptions", "s"),
    report_section=imported_when_called("vlgate.evaluators.genception.figures", "section"),
    example=EXAMPLES / "genception.jsonl",
    example_features=EXAMPLES / "genception-features.npz",
)

DEFINITIONS = (GENCEPTION_DEFINITION,)
