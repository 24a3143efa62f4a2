"""VL-LCM on multiple-choice VQA (docs/metrics.md#lcm-mc; VL-LCM paper §3.2, Eq. 2–6).

Inputs are dense arrays: ``p_mc`` and ``p_yes`` of shape (N, K). Records with
fewer than K options are padded with zeros on the right, which leaves every
quantity below unchanged: a padded option has P_MC = 0 so its P_LC is 0, its
P_YN = 0 adds 1 − 0 = 1 to the necessity minimum (a no-op) and it never counts
as a "yes". ``answer`` is an int array with −1 where the label is unknown.

Unanswered (every protocol, as the benchmarks count an answer their parser cannot
read): an MC prompt whose highest probability two options share, or a yes/no probe at
exactly 0.5, has no answer — what the vLLM and HTTP backends return when none of the option
tokens is among the model's log-probabilities. Such a sample is counted (``unanswered``,
``n_unanswered``) and its answer is wrong: ``correct`` for a tied MC prompt, ``j_correct``
for any unanswered probe (the joint yes/no answer needs every probe answered), instead of
a tie silently becoming the first option or "no". P_LC and the response distribution stay
the paper's, on the probabilities as they are.
Eq. 2 (P_MC) and Eq. 3 (P_YN) are the record's ``p_mc`` and ``p_yes`` themselves:
the runners compute them from the model's next-token distribution.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vlgate.evaluators.metrics.common import Weights, f1_of_accuracies, mean_or_none, tied_at_top, undecided, weighted_mean


def sufficient_probability(p_yes: np.ndarray) -> np.ndarray:
    """Eq. 4 (first line): P_suf(a_k) = P_YN(a_k | V, T, A_k)."""
    return p_yes


def necessary_probability(p_yes: np.ndarray) -> np.ndarray:
    """Eq. 4 (second line): P_nec(¬a_k) = min over i ≠ k of [1 − P_YN(a_i | V, T, A_i)].

    Computed from the two smallest values of 1 − P_YN per row: every option
    but the row's arg-min takes the minimum, the arg-min takes the runner-up.
    """
    p_no = 1.0 - p_yes
    two_smallest = np.partition(p_no, 1, axis=1)[:, :2]
    argmin = np.argmin(p_no, axis=1)
    nec = np.repeat(two_smallest[:, :1], p_no.shape[1], axis=1)
    nec[np.arange(p_no.shape[0]), argmin] = two_smallest[:, 1]
    return nec


def joint_yes_no_probability(p_suf: np.ndarray, p_nec: np.ndarray) -> np.ndarray:
    """Eq. 5: P_JYN(a_k) = (P_suf(a_k) · P_nec(¬a_k))^(1/2)."""
    return np.sqrt(p_suf * p_nec)


def option_consistency(p_mc: np.ndarray, p_jyn: np.ndarray) -> np.ndarray:
    """Eq. 6, the term inside the max: (P_MC(a_k) · P_JYN(a_k))^(1/2) for every k."""
    return np.sqrt(p_mc * p_jyn)


def logical_consistency(option_lc: np.ndarray) -> np.ndarray:
    """Eq. 6: P_LC = max over k of (P_MC(a_k) · P_JYN(a_k))^(1/2)."""
    return option_lc.max(axis=1)


def per_sample(p_mc: np.ndarray, p_yes: np.ndarray, answer: np.ndarray) -> pd.DataFrame:
    """Per-sample quantities from which every set-level metric of docs/metrics.md#lcm-mc is a mean or a count.

    Columns: ``p_lc``, ``chosen`` (arg-max of P_LC), ``n_yes``, ``reliable``,
    ``unanswered`` and, where the label is known (``answer >= 0``), ``correct``,
    ``j_correct``, ``lc_gt``, ``reliable_correct`` (NaN where unknown).
    """
    p_mc = np.asarray(p_mc, dtype=np.float64)
    p_yes = np.asarray(p_yes, dtype=np.float64)
    rows = np.arange(p_mc.shape[0])
    p_jyn = joint_yes_no_probability(sufficient_probability(p_yes), necessary_probability(p_yes))
    option_lc = option_consistency(p_mc, p_jyn)
    chosen = np.argmax(option_lc, axis=1)  # np.argmax takes the lowest index on ties, as docs/metrics.md defines
    reliable = (p_mc[rows, chosen] > 0.5) & (p_jyn[rows, chosen] > 0.5)
    frame = pd.DataFrame(
        {
            "p_lc": logical_consistency(option_lc),
            "chosen": chosen,
            "n_yes": (p_yes > 0.5).sum(axis=1),
            "reliable": reliable,
        }
    )
    mc_unanswered, probe_unanswered = tied_at_top(p_mc), undecided(p_yes).any(axis=1)
    frame["unanswered"] = mc_unanswered | probe_unanswered
    answer = np.asarray(answer)
    labelled = answer >= 0
    safe_answer = np.where(labelled, answer, 0)
    frame["correct"] = np.where(labelled, (np.argmax(p_mc, axis=1) == safe_answer) & ~mc_unanswered, np.nan)
    frame["j_correct"] = np.where(labelled, (p_jyn[rows, safe_answer] > 0.5) & ~probe_unanswered, np.nan)
    frame["lc_gt"] = np.where(labelled, option_lc[rows, safe_answer], np.nan)
    frame["reliable_correct"] = np.where(labelled, reliable & (chosen == safe_answer), np.nan)
    return frame


def aggregate(samples: pd.DataFrame) -> dict[str, float | int | None]:
    """Set-level metrics of docs/metrics.md#lcm-mc from :func:`per_sample`; labelled ones only where labels exist."""
    n_yes = samples["n_yes"].to_numpy()
    metrics: dict[str, float | int | None] = {
        "n": int(len(samples)),
        "lcm": mean_or_none(samples["p_lc"]),
        "abstention": mean_or_none(n_yes == 0),
        "confidence": mean_or_none(n_yes == 1),
        "overconfidence": mean_or_none(n_yes >= 2),
        "n_reliable": int(samples["reliable"].sum()),
        "n_unanswered": int(samples["unanswered"].sum()),
    }
    labelled = samples["correct"].notna()
    if labelled.any():
        acc = float(samples.loc[labelled, "correct"].mean())
        j_acc = float(samples.loc[labelled, "j_correct"].mean())
        metrics.update(
            n_labelled=int(labelled.sum()),
            acc=acc,
            j_acc=j_acc,
            f1=f1_of_accuracies(acc, j_acc),
            lcm_gt=float(samples.loc[labelled, "lc_gt"].mean()),
            n_reliable_correct=int(samples.loc[labelled, "reliable_correct"].sum()),
        )
    return metrics


def resampled(samples: pd.DataFrame, counts: Weights) -> dict[str, np.ndarray]:
    """:func:`aggregate`'s rate metrics on B reweighted copies of ``samples`` at once
    (``counts``: B × n row weights, a bootstrap's draws, or :class:`LeaveOneOut`, the
    jackknife's n copies in O(n)), NaN where one is undefined; the gate's bootstrap and
    jackknife read these instead of aggregating each copy."""
    n_yes = samples["n_yes"].to_numpy()
    labelled = samples["correct"].notna().to_numpy()
    acc = weighted_mean(samples["correct"], counts, labelled)
    j_acc = weighted_mean(samples["j_correct"], counts, labelled)
    return {
        "lcm": weighted_mean(samples["p_lc"], counts),
        "abstention": weighted_mean(n_yes == 0, counts),
        "confidence": weighted_mean(n_yes == 1, counts),
        "overconfidence": weighted_mean(n_yes >= 2, counts),
        "acc": acc,
        "j_acc": j_acc,
        "f1": f1_of_accuracies(acc, j_acc),
        "lcm_gt": weighted_mean(samples["lc_gt"], counts, labelled),
    }
