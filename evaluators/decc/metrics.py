"""DeCC reliability (docs/metrics.md#decc; DeCC paper §3 "Consistency Comparison" and §4 metrics).

Inputs are the answers as strings: the direct answer A0, the VLM agent's and
the LLM agent's reasoned answers after the first decomposition (v1, l1) and,
where the second round ran, after it (v2, l2; None elsewhere).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from vlgate.evaluators.metrics.common import Weights, mean_or_none, weighted_mean

SETTINGS = ("vlm", "llm", "multi", "vlm2", "llm2")
_NOT_LETTER_OR_DIGIT = re.compile(r"[\W_]+")


def normalise_answer(answer: str) -> str:
    """docs/metrics.md#decc: lower-cased, everything but letters and digits removed."""
    return _NOT_LETTER_OR_DIGIT.sub("", answer.lower())


def consistency(direct: pd.Series, reasoned: pd.Series) -> pd.Series:
    """§3 (single agent): Cons = 1 if the reasoned answer equals the direct answer A0, else 0.

    Float series; NaN where the reasoned answer is missing (round not run).
    """
    same = direct.map(normalise_answer) == reasoned.map(normalise_answer, na_action="ignore")
    return same.astype(np.float64).where(reasoned.notna())


def multi_agent_reliability(cons_v1: np.ndarray, cons_l1: np.ndarray, cons_v2: np.ndarray, cons_l2: np.ndarray) -> np.ndarray:
    """§3 (multi-agent, Algorithm 1): R = Cons_V if Cons_V = Cons_L; otherwise, from
    the second round, Cons_V' if Cons_V' = Cons_L'; Cons_L if neither agent changed;
    Cons_V' if both changed. NaN where the agents disagree and no second round ran.
    """
    agree = cons_v1 == cons_l1
    agree_second = cons_v2 == cons_l2
    neither_changed = (cons_v2 == cons_v1) & (cons_l2 == cons_l1)
    second_round = np.where(agree_second, cons_v2, np.where(neither_changed, cons_l1, cons_v2))
    return np.where(agree, cons_v1, second_round)


def brier_terms(reliability: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """§4: each sample's term of the Brier score, (R_i − Acc_i)²."""
    return (reliability - correct) ** 2


def brier_score(reliability: np.ndarray, correct: np.ndarray) -> float | None:
    """§4: BS = (1/N) Σ_i (R_i − Acc_i)² (lower is better)."""
    return mean_or_none(brier_terms(reliability, correct))


def reliability_payoffs(reliability: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """§4 (Whitehead et al. 2022, cost 1): each sample's payoff, 1 if R and correct, −1 if R and wrong, 0 if not R."""
    return np.where(reliability == 1, np.where(correct == 1, 1.0, -1.0), 0.0)


def effective_reliability(reliability: np.ndarray, correct: np.ndarray) -> float | None:
    """§4 (Whitehead et al. 2022, cost 1): the mean payoff (:func:`reliability_payoffs`)."""
    return mean_or_none(reliability_payoffs(reliability, correct))


def per_sample(direct: pd.Series, v1: pd.Series, l1: pd.Series, v2: pd.Series, l2: pd.Series, answer: pd.Series) -> pd.DataFrame:
    """Per-sample reliability R for every setting (NaN where a setting's round did
    not run) and ``correct`` = [A0 == answer] (NaN where unlabelled)."""
    cons_v1, cons_l1 = consistency(direct, v1).to_numpy(), consistency(direct, l1).to_numpy()
    cons_v2, cons_l2 = consistency(direct, v2).to_numpy(), consistency(direct, l2).to_numpy()
    correct = consistency(direct, answer)
    return pd.DataFrame(
        {
            "vlm": cons_v1,
            "llm": cons_l1,
            "multi": multi_agent_reliability(cons_v1, cons_l1, cons_v2, cons_l2),
            "vlm2": cons_v2,
            "llm2": cons_l2,
            "correct": correct.to_numpy(),
        }
    )


def aggregate(samples: pd.DataFrame) -> dict[str, float | int | None]:
    """``reliable_rate/SETTING``; with labels ``acc``, ``brier/SETTING``, ``er/SETTING``.

    The second-round settings (vlm2, llm2) are averaged over the samples where
    that round ran (``n_round2`` of them) and omitted where it never ran.
    """
    settings = [s for s in SETTINGS if samples[s].notna().any()]
    metrics: dict[str, float | int | None] = {"n": int(len(samples)), "n_round2": int(samples["vlm2"].notna().sum())}
    for setting in settings:
        metrics[f"reliable_rate/{setting}"] = mean_or_none(samples[setting].dropna())
    labelled = samples[samples["correct"].notna()]
    if len(labelled):
        metrics["n_labelled"] = int(len(labelled))
        metrics["acc"] = float(labelled["correct"].mean())
        for setting in settings:
            ran = labelled[labelled[setting].notna()]
            metrics[f"brier/{setting}"] = brier_score(ran[setting].to_numpy(), ran["correct"].to_numpy())
            metrics[f"er/{setting}"] = effective_reliability(ran[setting].to_numpy(), ran["correct"].to_numpy())
    return metrics


def resampled(samples: pd.DataFrame, counts: Weights) -> dict[str, np.ndarray]:
    """:func:`aggregate`'s rates, Brier scores and effective reliabilities on B reweighted
    copies of ``samples`` at once (``counts``: B × n row weights, a bootstrap's draws, or
    :class:`LeaveOneOut`, the jackknife's n copies in O(n)), NaN where a setting has no
    weighted sample left."""
    correct = samples["correct"].to_numpy(dtype=np.float64)
    labelled = ~np.isnan(correct)
    metrics: dict[str, np.ndarray] = {"acc": weighted_mean(correct, counts, labelled)}
    for setting in SETTINGS:
        reliability = samples[setting].to_numpy(dtype=np.float64)
        ran = ~np.isnan(reliability)
        metrics[f"reliable_rate/{setting}"] = weighted_mean(reliability, counts, ran)
        metrics[f"brier/{setting}"] = weighted_mean(brier_terms(reliability, correct), counts, ran & labelled)
        metrics[f"er/{setting}"] = weighted_mean(reliability_payoffs(reliability, correct), counts, ran & labelled)
    return metrics
