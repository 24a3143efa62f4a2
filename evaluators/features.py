"""A features file: extra per-record inputs to scoring that the records themselves do not
hold (GenCeption's image features X⁰ … Xᵀ, from which FID is computed), as an ``.npz`` of
N×D arrays ``t0`` … ``tT`` and optionally ``ids``. ``vlgate score --features`` reads one,
and an evaluator whose definition has ``features`` writes one beside its records."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: Feature magnitudes above this overflow float64 in FID: its covariance product grows as |x|⁴.
FEATURE_LIMIT = 1e75


def load_features(path: str | Path, n_records: int, ids: Sequence[object] | np.ndarray | None = None) -> list[np.ndarray]:
    """Per-iteration features from an .npz with arrays ``t0`` … ``tT`` (each N×D), optionally ``ids``.

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
        if array.size and np.abs(array).max() > FEATURE_LIMIT:
            raise ValueError(f"{path}: array {name} holds values up to {np.abs(array).max():.3g}; FID needs |x| <= {FEATURE_LIMIT:g} (its covariances would overflow)")
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
