"""From validated records to the metrics of SPEC §2: one entry point for every evaluator.

``score(evaluator, valid_records)`` returns the JSON object ``vlgate score``
prints: the set-level metrics under their SPEC key names, plus a breakdown
``by_<field>`` when the records carry the evaluator's grouping field (category
or concept) or one is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from vlgate.evaluators.metrics import decc, genception, lcm_mc, lcm_nb, vlind
from vlgate.evaluators.metrics.common import by_group
from vlgate.evaluators.records import read_jsonl
from vlgate.evaluators.schemas import SCHEMAS, ValidRecords, validate

EVALUATORS = tuple(SCHEMAS)


def per_sample_frame(valid: ValidRecords) -> pd.DataFrame:
    """The evaluator's per-sample quantities, one row per valid record, with ``id`` first."""
    a = valid.arrays
    builders: dict[str, Callable[[], pd.DataFrame]] = {
        "lcm-mc": lambda: lcm_mc.per_sample(a["p_mc"], a["p_yes"], a["answer"]),
        "lcm-nb": lambda: lcm_nb.per_sample(a["p_yes"], a["p_text"], a["p_image"], a["answer"]),
        "vlind": lambda: vlind.per_sample(a["ck"], a["vp"], a["cb"], a["lp"], a["lp_instance"]),
        "genception": lambda: genception.per_sample(a["s"]),
        "decc": lambda: decc.per_sample(a["direct"], a["v1"], a["l1"], a["v2"], a["l2"], a["answer"]),
    }
    frame = builders[valid.evaluator]()
    frame.insert(0, "id", valid.column("id"))
    return frame


AGGREGATES: dict[str, Callable[[pd.DataFrame], dict]] = {
    "lcm-mc": lcm_mc.aggregate,
    "lcm-nb": lcm_nb.aggregate,
    "vlind": vlind.aggregate,
    "genception": genception.aggregate,
    "decc": decc.aggregate,
}


def load_features(path: str | Path, n_records: int, ids: list[Any] | None = None) -> list[np.ndarray]:
    """GenCeption features from an .npz with arrays ``t0`` … ``tT`` (each N×D), optionally ``ids``.

    With ``ids`` in the file, rows are aligned to the records by id; without, the
    rows must be in record order.
    """
    with np.load(path, allow_pickle=False) as data:
        names = sorted((k for k in data.files if k.startswith("t") and k[1:].isdigit()), key=lambda k: int(k[1:]))
        if not names or names[0] != "t0":
            raise ValueError(f"{path}: expected arrays t0, t1, ... tT (found {', '.join(data.files) or 'none'})")
        if [int(k[1:]) for k in names] != list(range(len(names))):
            raise ValueError(f"{path}: iterations must be t0..tT without gaps (found {', '.join(names)})")
        features = [np.asarray(data[k], dtype=np.float64) for k in names]
        file_ids = [str(i) for i in data["ids"]] if "ids" in data.files else None
    for name, array in zip(names, features):
        if array.ndim != 2:
            raise ValueError(f"{path}: array {name} must be N x D, got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError(f"{path}: array {name} holds NaN or infinite values")
    if file_ids is not None and ids is not None:
        position = {i: row for row, i in enumerate(file_ids)}
        missing = [i for i in map(str, ids) if i not in position]
        if missing:
            raise ValueError(f"{path}: no features for record id(s) {', '.join(missing[:5])}")
        order = np.array([position[str(i)] for i in ids])
        features = [array[order] for array in features]
    elif any(len(array) != n_records for array in features):
        raise ValueError(f"{path}: arrays have {[len(a) for a in features]} rows but there are {n_records} records (add an 'ids' array to align)")
    return features


def score(valid: ValidRecords, by: str | None = None, features: list[np.ndarray] | None = None) -> dict[str, Any]:
    """Set-level metrics of the records, with a per-group breakdown and, for GenCeption, FID."""
    metrics: dict[str, Any] = _metrics(valid, by, features) if valid.records else {"n": 0}
    if valid.errors:
        metrics["n_skipped"] = len({error.line for error in valid.errors})
    return metrics


def _metrics(valid: ValidRecords, by: str | None, features: list[np.ndarray] | None) -> dict[str, Any]:
    samples = per_sample_frame(valid).drop(columns="id")
    aggregate = AGGREGATES[valid.evaluator]
    metrics: dict[str, Any] = aggregate(samples)
    if features is not None:
        if valid.evaluator != "genception":
            raise ValueError("--features applies to the genception evaluator only")
        n_iterations = samples.shape[1] - 1  # gc, s@1..s@T
        if len(features) != n_iterations + 1:
            raise ValueError(f"features hold {len(features) - 1} iterations but the records have T={n_iterations}")
        metrics.update(genception.fid_metrics(features))
    group_field = by or SCHEMAS[valid.evaluator].default_group_field
    keys = pd.Series(valid.column(group_field), dtype=object) if group_field else None
    if keys is not None and (by or keys.notna().any()):
        breakdown = by_group(samples, keys, aggregate)
        if features is not None:
            labels = keys.fillna("<none>").astype(str).to_numpy()
            for key, group in breakdown.items():
                rows = np.flatnonzero(labels == key)
                group.update(genception.fid_metrics([array[rows] for array in features]))
        metrics[f"by_{group_field}"] = breakdown
    return metrics


def score_file(evaluator: str, path: str | Path, by: str | None = None, features_path: str | Path | None = None, skip_invalid: bool = False) -> tuple[dict[str, Any], ValidRecords]:
    """Read, validate and score a JSONL file; raises InvalidRecordsError unless ``skip_invalid``."""
    valid = validate(evaluator, read_jsonl(path), skip_invalid=skip_invalid, source=str(path))
    features = load_features(features_path, len(valid.records), valid.column("id")) if features_path else None
    return score(valid, by=by, features=features), valid
