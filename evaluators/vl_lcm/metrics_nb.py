"""VL-LCM on NaturalBench-format units (docs/metrics.md#lcm-nb; VL-LCM paper §3.3, Eq. 7–11).

A unit has images V1, V2 and statements T1, T2. Arrays per unit (N units):
``p_yes[n, i, j]`` = P(yes | V_i, T_j); ``p_text[n, i, j]`` = P(choose T_j | V_i)
(MC tests (a), (b)); ``p_image[n, j, i]`` = P(choose V_i | T_j) (tests (c), (d));
``answer`` = 0 for c1 (V1–T1 and V2–T2 are the "yes" pairs), 1 for c2, −1 unknown.

Unanswered (as in :mod:`.lcm_mc`): a yes/no probability of exactly 0.5 or an MC test whose
two options tie has no answer. A unit with one is counted (``unanswered``,
``n_unanswered``); an unanswered yes/no test is wrong whatever the label (NaturalBench's
parser reads no "yes" or "no" in such an answer, and its scoring counts that as wrong), so
it fails its Q-, I- and G-Acc groups too, and an MC test whose yes/no pair has one is not
J-correct.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vlgate.evaluators.metrics.common import Weights, f1_of_accuracies, mean_or_none, undecided, weighted_mean

#: The four MC tests as (name, x, x', s, n): x is the option c1 makes correct, x'
#: the other one, s the sufficient and n the necessary yes/no test for c1. Each
#: probability is addressed as (array name, first index, second index).
MC_TESTS = (
    ("a", ("p_text", 0, 0), ("p_text", 0, 1), ("p_yes", 0, 0), ("p_yes", 0, 1)),
    ("b", ("p_text", 1, 1), ("p_text", 1, 0), ("p_yes", 1, 1), ("p_yes", 1, 0)),
    ("c", ("p_image", 0, 0), ("p_image", 0, 1), ("p_yes", 0, 0), ("p_yes", 1, 0)),
    ("d", ("p_image", 1, 1), ("p_image", 1, 0), ("p_yes", 1, 1), ("p_yes", 0, 1)),
)


def yes_no_probabilities(p_yes_sufficient: np.ndarray, p_yes_necessary: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 7: P_YN(a) = P_m(a | V, T) and P_YN(¬a) = 1 − P_m(a | V, ¬T) (or | ¬V, T)."""
    return p_yes_sufficient, 1.0 - p_yes_necessary


def mc_probabilities(x: np.ndarray, x_other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 8: P_MC(c1) = P(c1)·(1 − P(c2)) and P_MC(c2) = P(c2)·(1 − P(c1))."""
    return x * (1.0 - x_other), x_other * (1.0 - x)


def joint_yes_no_probabilities(s: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 9: P_JYN(c1) = s·(1 − n) and P_JYN(c2) = n·(1 − s), s and n as in Eq. 7."""
    p_yes_c1, p_no_c1 = yes_no_probabilities(s, n)
    p_yes_c2, p_no_c2 = yes_no_probabilities(n, s)
    return p_yes_c1 * p_no_c1, p_yes_c2 * p_no_c2


def choice_consistency(p_mc: np.ndarray, p_jyn: np.ndarray) -> np.ndarray:
    """Eq. 10, the term inside the max: [P_MC(c_l) · P_JYN(c_l)]^(1/4)."""
    return np.sqrt(np.sqrt(p_mc * p_jyn))


def test_consistency(lc_c1: np.ndarray, lc_c2: np.ndarray) -> np.ndarray:
    """Eq. 10: P_LC^(test) = max over l ∈ {1, 2} of [P_MC(c_l) · P_JYN(c_l)]^(1/4)."""
    return np.maximum(lc_c1, lc_c2)


def unit_consistency(test_lc: np.ndarray) -> np.ndarray:
    """Eq. 11: P_LC = ¼ (P_LC^(a) + P_LC^(b) + P_LC^(c) + P_LC^(d)); ``test_lc`` is (N, 4)."""
    return test_lc.mean(axis=1)


def per_sample(p_yes: np.ndarray, p_text: np.ndarray, p_image: np.ndarray, answer: np.ndarray) -> pd.DataFrame:
    """Per-unit quantities from which every set-level metric of docs/metrics.md#lcm-nb is a mean.

    Columns: ``p_lc`` and, where labelled, ``yn_correct`` (of 4), ``q_correct``
    (questions right on both images, of 2), ``i_correct`` (images right on both
    questions, of 2), ``g_correct`` (all four), ``j_correct`` (of the 4 MC tests),
    ``lc_gt``.
    """
    arrays = {
        "p_yes": np.asarray(p_yes, dtype=np.float64),
        "p_text": np.asarray(p_text, dtype=np.float64),
        "p_image": np.asarray(p_image, dtype=np.float64),
    }
    pick = lambda ref: arrays[ref[0]][:, ref[1], ref[2]]
    yes_no_unanswered = undecided(arrays["p_yes"])  # (N, image i, statement j)
    mc_unanswered = (arrays["p_text"][:, :, 0] == arrays["p_text"][:, :, 1]).any(axis=1) | (arrays["p_image"][:, :, 0] == arrays["p_image"][:, :, 1]).any(axis=1)
    pair_answered = lambda ref: ~yes_no_unanswered[:, ref[1], ref[2]]
    answer = np.asarray(answer)
    is_c2 = answer == 1
    lc_tests, lc_gt_tests, jyn_gt_tests, pairs_answered = [], [], [], []
    for _name, x, x_other, s, n in MC_TESTS:
        pairs_answered.append(pair_answered(s) & pair_answered(n))
        mc_c1, mc_c2 = mc_probabilities(pick(x), pick(x_other))
        jyn_c1, jyn_c2 = joint_yes_no_probabilities(pick(s), pick(n))
        lc_c1, lc_c2 = choice_consistency(mc_c1, jyn_c1), choice_consistency(mc_c2, jyn_c2)
        lc_tests.append(test_consistency(lc_c1, lc_c2))
        lc_gt_tests.append(np.where(is_c2, lc_c2, lc_c1))
        jyn_gt_tests.append(np.where(is_c2, jyn_c2, jyn_c1))
    frame = pd.DataFrame({"p_lc": unit_consistency(np.stack(lc_tests, axis=1))})
    frame["unanswered"] = yes_no_unanswered.any(axis=(1, 2)) | mc_unanswered

    labelled = answer >= 0
    # Under c1 the "yes" pairs are (V1,T1) and (V2,T2); under c2 the other two.
    expected_yes = np.array([[True, False], [False, True]])[None, :, :] ^ is_c2[:, None, None]
    right = ((arrays["p_yes"] > 0.5) == expected_yes) & ~yes_no_unanswered  # (N, image i, statement j)
    unknown = lambda values: np.where(labelled, values, np.nan)
    frame["yn_correct"] = unknown(right.sum(axis=(1, 2)))
    frame["q_correct"] = unknown(right.all(axis=1).sum(axis=1))  # statement right on both images
    frame["i_correct"] = unknown(right.all(axis=2).sum(axis=1))  # image right on both statements
    frame["g_correct"] = unknown(right.all(axis=(1, 2)))
    # Eq. 9's threshold is open in the paper; sqrt makes it the same test as Eq. 5 (docs/metrics.md#lcm-nb).
    frame["j_correct"] = unknown(((np.sqrt(np.stack(jyn_gt_tests, axis=1)) > 0.5) & np.stack(pairs_answered, axis=1)).sum(axis=1))
    frame["lc_gt"] = unknown(np.stack(lc_gt_tests, axis=1).mean(axis=1))
    return frame


def aggregate(samples: pd.DataFrame) -> dict[str, float | int | None]:
    """Set-level metrics of docs/metrics.md#lcm-nb from :func:`per_sample`; labelled ones only where labels exist."""
    metrics: dict[str, float | int | None] = {"n": int(len(samples)), "lcm": mean_or_none(samples["p_lc"]), "n_unanswered": int(samples["unanswered"].sum())}
    labelled = samples[samples["yn_correct"].notna()]
    if len(labelled):
        acc = float(labelled["yn_correct"].mean() / 4)
        j_acc = float(labelled["j_correct"].mean() / 4)
        metrics.update(
            n_labelled=int(len(labelled)),
            acc=acc,
            q_acc=float(labelled["q_correct"].mean() / 2),
            i_acc=float(labelled["i_correct"].mean() / 2),
            g_acc=float(labelled["g_correct"].mean()),
            j_acc=j_acc,
            f1=f1_of_accuracies(acc, j_acc),
            lcm_gt=float(labelled["lc_gt"].mean()),
        )
    return metrics


def resampled(samples: pd.DataFrame, counts: Weights) -> dict[str, np.ndarray]:
    """:func:`aggregate`'s rate metrics on B reweighted copies of ``samples`` at once
    (``counts``: B × n row weights, a bootstrap's draws, or :class:`LeaveOneOut`, the
    jackknife's n copies in O(n)), NaN where one is undefined."""
    labelled = samples["yn_correct"].notna().to_numpy()

    def labelled_mean(column: str) -> np.ndarray:
        return weighted_mean(samples[column], counts, labelled)

    acc, j_acc = labelled_mean("yn_correct") / 4, labelled_mean("j_correct") / 4
    return {
        "lcm": weighted_mean(samples["p_lc"], counts),
        "acc": acc,
        "q_acc": labelled_mean("q_correct") / 2,
        "i_acc": labelled_mean("i_correct") / 2,
        "g_acc": labelled_mean("g_correct"),
        "j_acc": j_acc,
        "f1": f1_of_accuracies(acc, j_acc),
        "lcm_gt": labelled_mean("lc_gt"),
    }
