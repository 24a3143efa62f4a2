"""GenCeption GC@T and GC_FID@T (docs/metrics.md#genception; GenCeption paper §2.2, Eq. 3–4).

``similarities`` is (N, T): s_t = cos(Enc(X^(t)), Enc(X^(0))), always against
the seed image. Features for FID are one (N, D) array per iteration t = 0..T.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import linalg

from vlgate.evaluators.metrics.common import Weights, json_number, weighted_mean


def iteration_weights(n_iterations: int) -> np.ndarray:
    """The weights of Eq. 3 and Eq. 4: t / Σ t for t = 1..T (later iterations count more)."""
    t = np.arange(1, n_iterations + 1, dtype=np.float64)
    return t / t.sum()


def cosine_similarity(seed_features: np.ndarray, generated_features: np.ndarray) -> np.ndarray:
    """§2.2: s^(t) = CosineSimilarity(z^(0), z^(t)), row by row."""
    dot = np.einsum("nd,nd->n", seed_features, generated_features)
    norms = np.linalg.norm(seed_features, axis=1) * np.linalg.norm(generated_features, axis=1)
    return dot / norms


def gc_at_t(similarities: np.ndarray) -> np.ndarray:
    """Eq. 3: GC@T = Σ_t (t · s^(t)) / Σ_t t, per image."""
    return similarities @ iteration_weights(similarities.shape[1])


def frechet_distance(features_a: np.ndarray, features_b: np.ndarray) -> float | None:
    """§2.2 (FID, Heusel et al. 2017): ‖μa − μb‖² + Tr(Σa + Σb − 2(Σa·Σb)^½).

    None with fewer than two samples (no covariance), and None where float64 cannot hold
    it (features so large that a covariance overflows) rather than NaN or inf. The matrix
    square root is scipy.linalg.sqrtm; a tiny imaginary part from numerical error is
    dropped, and a singular product gets the usual ε·I offset.
    """
    if len(features_a) < 2 or len(features_b) < 2:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is answered with None below
        mu_a, mu_b = features_a.mean(axis=0), features_b.mean(axis=0)
        sigma_a = np.atleast_2d(np.cov(features_a, rowvar=False))
        sigma_b = np.atleast_2d(np.cov(features_b, rowvar=False))
        product = sigma_a @ sigma_b
    if not (np.isfinite(mu_a).all() and np.isfinite(mu_b).all() and np.isfinite(product).all()):
        return None
    with warnings.catch_warnings():
        # fewer images than feature dimensions make Σa·Σb singular: expected, handled below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        covmean = linalg.sqrtm(product)
    if not np.isfinite(covmean).all():
        offset = np.eye(sigma_a.shape[0]) * 1e-6
        covmean = linalg.sqrtm((sigma_a + offset) @ (sigma_b + offset))
    covmean = np.real(covmean)
    diff = mu_a - mu_b
    distance = diff @ diff + np.trace(sigma_a) + np.trace(sigma_b) - 2.0 * np.trace(covmean)
    if not np.isfinite(distance):
        return None
    return float(max(distance, 0.0))  # rounding can leave a tiny negative for identical sets


def gc_fid_at_t(fids: list[float]) -> float:
    """Eq. 4: GC_FID@T = Σ_t (t · fid^(t)) / Σ_t t (lower is better)."""
    return float(np.dot(fids, iteration_weights(len(fids))))


def per_sample(similarities: np.ndarray, categories: np.ndarray | None = None, descriptions: np.ndarray | None = None) -> pd.DataFrame:
    """Per-image ``category`` (when given: the headline weighs categories, see
    :func:`aggregate`), ``gc`` (Eq. 3), the similarities ``s@1`` … ``s@T`` and, when
    given, the model's first ``description`` of the seed image (None where the record
    holds none; see :func:`distinct_descriptions`)."""
    similarities = np.asarray(similarities, dtype=np.float64)
    frame = pd.DataFrame(similarities, columns=[f"s@{t}" for t in range(1, similarities.shape[1] + 1)])
    frame.insert(0, "gc", gc_at_t(similarities))
    if categories is not None:
        frame.insert(0, "category", pd.Series(categories, dtype=object).to_numpy())
    if descriptions is not None:
        frame["description"] = pd.Series(descriptions, dtype=object).to_numpy()
    return frame


def distinct_descriptions(descriptions: pd.Series) -> float | None:
    """Distinct first descriptions / described images, texts compared case- and
    spacing-blind (not the paper's: a check that the chains test the image). A describer
    that says the same of every image scores 1/n, one that tells every image apart 1;
    None where no record holds a description."""
    described = descriptions.dropna()
    if not len(described):
        return None
    return described.map(lambda text: " ".join(str(text).lower().split())).nunique() / len(described)


def iterations(samples: pd.DataFrame) -> int:
    """T of a per-sample frame: its ``s@t`` columns."""
    return sum(1 for column in samples.columns if str(column).startswith("s@"))


def aggregate(samples: pd.DataFrame) -> dict[str, float | int | None]:
    """``gc@T``, the headline of the paper's tables and the released leaderboard: the
    unweighted mean over categories of each category's mean per-image GC@T (the
    leaderboard's "Mean" column: for ChatGPT-4V the 14 MME categories' 0.422 … 0.393
    average to 0.351), so a large category does not outweigh a small one; each category's
    value is what the released ``genception/evaluation.py`` ``gc_score`` gives for its
    folder. ``gc_image_mean@T`` is the plain mean over images (the same number for one
    category, or without categories), and ``s@t`` the mean similarity per iteration."""
    n_iterations = iterations(samples)
    image_mean = json_number(samples["gc"].mean())
    headline = json_number(samples["gc"].groupby(samples["category"].astype(str).to_numpy()).mean().mean()) if "category" in samples and len(samples) else image_mean
    metrics: dict[str, float | int | None] = {"n": int(len(samples)), f"gc@{n_iterations}": headline, f"gc_image_mean@{n_iterations}": image_mean}
    if "description" in samples and samples["description"].notna().any():
        metrics["distinct_descriptions"] = distinct_descriptions(samples["description"])
    for t in range(1, n_iterations + 1):
        metrics[f"s@{t}"] = json_number(samples[f"s@{t}"].mean())
    return metrics


def resampled(samples: pd.DataFrame, counts: Weights) -> dict[str, np.ndarray]:
    """:func:`aggregate`'s ``gc@T``, ``gc_image_mean@T`` and ``s@t`` on B reweighted copies
    of ``samples`` at once (``counts``: B × n row weights, a bootstrap's draws, or
    :class:`LeaveOneOut`, the jackknife's n copies: B × categories means, O(n) each).
    Like pandas' means, missing scores are skipped and a category no weighted image is
    left in drops out of the mean over categories."""
    n_iterations = iterations(samples)
    scores = samples["gc"].to_numpy(dtype=np.float64)
    scored = ~np.isnan(scores)
    image_mean = weighted_mean(scores, counts, scored)
    headline = image_mean
    if "category" in samples and len(samples):
        categories = samples["category"].astype(str).to_numpy()
        by_category = np.stack([weighted_mean(scores, counts, scored & (categories == c)) for c in np.unique(categories)], axis=1)
        with warnings.catch_warnings():  # a resample with no image at all: NaN, as pandas gives
            warnings.simplefilter("ignore", RuntimeWarning)
            headline = np.nanmean(by_category, axis=1)
    metrics = {f"gc@{n_iterations}": headline, f"gc_image_mean@{n_iterations}": image_mean}
    for t in range(1, n_iterations + 1):
        similarities = samples[f"s@{t}"].to_numpy(dtype=np.float64)
        metrics[f"s@{t}"] = weighted_mean(similarities, counts, ~np.isnan(similarities))
    return metrics


def fid_metrics(features: list[np.ndarray]) -> dict[str, float | None]:
    """``fid@t`` for t = 1..T against the seeds (features[0]) and ``gc_fid@T`` (Eq. 4)."""
    fids = [frechet_distance(features[0], generated) for generated in features[1:]]
    metrics: dict[str, float | None] = {f"fid@{t}": fid for t, fid in enumerate(fids, start=1)}
    defined = [f for f in fids if f is not None]
    metrics[f"gc_fid@{len(fids)}"] = gc_fid_at_t(defined) if len(defined) == len(fids) else None
    return metrics
