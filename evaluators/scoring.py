"""From records to the metrics of docs/metrics.md: one entry point for every evaluator.

``validate(evaluator, parsed)`` checks parsed records against the evaluator's schema
once; ``score(valid_records)`` returns the JSON object ``vlgate score`` prints: the
set-level metrics under their names in docs/metrics.md, plus a breakdown ``by_<field>`` when the
records carry the evaluator's grouping field (category or concept) or one is asked for.
What each evaluator's schema, per-sample quantities and aggregate are comes from its
definition (``evaluators/definition.py``), found by name in ``evaluators/registry.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from vlgate.evaluators import registry
from vlgate.evaluators.features import load_features
from vlgate.evaluators.metrics.common import Metrics, by_group
from vlgate.evaluators.records import ParsedLines, paused_gc
from vlgate.evaluators.schemas import ValidRecords, validate_against, validate_file

__all__ = ["load_features", "per_sample_frame", "score", "score_file", "validate"]


def validate(evaluator: str, parsed: ParsedLines, skip_invalid: bool = False, source: str = "records") -> ValidRecords:
    """Check parsed records against the evaluator's schema (``schemas.validate_against``).

    Without ``skip_invalid`` any problem raises :class:`InvalidRecordsError` listing
    every bad record; with it, the bad records are dropped and listed in ``errors``.
    """
    return validate_against(registry.get(evaluator).schema, evaluator, parsed, skip_invalid=skip_invalid, source=source)


def per_sample_frame(valid: ValidRecords) -> pd.DataFrame:
    """The evaluator's per-sample quantities, one row per valid record, with ``id`` first."""
    frame = registry.get(valid.evaluator).per_sample(valid.arrays)
    frame.insert(0, "id", valid.column("id"))
    return frame


def score(valid: ValidRecords, by: str | None = None, features: list[np.ndarray] | None = None, samples: pd.DataFrame | None = None) -> Metrics:
    """Set-level metrics of the records, with a per-group breakdown and, where the
    evaluator has them (GenCeption), the metrics of its extra ``features``. ``samples``
    is ``per_sample_frame(valid)`` when the caller has it already."""
    metrics: Metrics = _metrics(valid, by, features, samples) if len(valid) else {"n": 0}
    if valid.errors:
        metrics["n_skipped"] = len({error.line for error in valid.errors})
    return metrics


def _metrics(valid: ValidRecords, by: str | None, features: list[np.ndarray] | None, samples: pd.DataFrame | None) -> Metrics:
    definition = registry.get(valid.evaluator)
    samples = (samples if samples is not None else per_sample_frame(valid)).drop(columns="id")
    metrics: Metrics = {**definition.aggregate(samples)}
    feature_metrics = definition.feature_metrics
    if features is not None:
        if feature_metrics is None:
            with_features = [d.name for d in registry.definitions() if d.feature_metrics is not None]
            raise ValueError(f"--features applies to the {', '.join(with_features)} evaluator only")
        metrics.update(feature_metrics(samples, features))
    group_field = by or definition.group_field
    keys = pd.Series(valid.column(group_field), dtype=object) if group_field else None
    if keys is not None and (by or keys.notna().any()):
        breakdown = by_group(samples, keys, definition.aggregate)
        if features is not None:
            labels = keys.fillna("<none>").astype(str).to_numpy()
            for key, group in breakdown.items():
                rows = np.flatnonzero(labels == key)
                group.update(feature_metrics(samples.iloc[rows], [array[rows] for array in features]))  # type: ignore[misc]
        metrics[f"by_{group_field}"] = breakdown
    return metrics


def score_file(evaluator: str, path: str | Path, by: str | None = None, features_path: str | Path | None = None, skip_invalid: bool = False) -> tuple[Metrics, ValidRecords]:
    """Read, validate and score a JSONL file; raises InvalidRecordsError unless ``skip_invalid``."""
    with paused_gc():  # millions of short-lived containers and no cycles: see records.paused_gc
        valid = validate_file(registry.get(evaluator).schema, evaluator, path, skip_invalid=skip_invalid)
        features = load_features(features_path, len(valid), valid.column("id")) if features_path else None
        return score(valid, by=by, features=features), valid
