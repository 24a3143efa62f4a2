"""VLind-Bench pipeline scores (docs/metrics.md#vlind; VLind-Bench paper §3–4, Eq. 1–5).

Answers are coded as int8: 1 = "True", 0 = "False", −1 = unparseable (null).
Every test is a pair (answer to the statement that should be True, answer to
the one that should be False). ``ck``, ``vp``, ``cb`` are (N, 2); the LP test
has one pair per accepted counterfactual image, given flat as ``lp`` (M, 2)
with ``lp_instance`` (M,) naming the instance each pair belongs to.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from vlgate.evaluators.metrics.common import Weights, ratio_or_none, weighted_ratio

TRUE, FALSE, UNPARSED = 1, 0, -1

_DROPPED_PUNCTUATION = re.compile(r"[,.]")


def parse_true_false(generated: str) -> bool | None:
    """The benchmark's answer parser (docs/metrics.md#vlind): lower-case, newlines to spaces,
    drop "," and ".", split on spaces; the first word that is exactly "true" or
    "false" decides; otherwise None."""
    words = _DROPPED_PUNCTUATION.sub("", generated.lower().replace("\n", " ")).split(" ")
    for word in words:
        if word == "true":
            return True
        if word == "false":
            return False
    return None


def test_passed(pairs: np.ndarray) -> np.ndarray:
    """Eq. 1–4, the indicator common to all four tests: the first statement
    judged "True" and the second "False" (an unparseable answer fails)."""
    return (pairs[:, 0] == TRUE) & (pairs[:, 1] == FALSE)


def commonsense_knowledge(ck: np.ndarray) -> np.ndarray:
    """Eq. 1: P_CK = 1(LVLM(I_fact, s_fact) = True ∧ LVLM(I_fact, s_cf) = False)."""
    return test_passed(ck)


def visual_perception(vp: np.ndarray) -> np.ndarray:
    """Eq. 2: P_VP = 1(LVLM(I_cf, s_exist) = True ∧ LVLM(I_cf, s_nil) = False)."""
    return test_passed(vp)


def commonsense_bias(cb: np.ndarray, p_ck: np.ndarray) -> np.ndarray:
    """Eq. 3: P_CB = 1(LVLM(I_cf, T_cf, s_cf) = True ∧ LVLM(I_cf, T_cf, s_fact) = False) ∧ P_CK."""
    return test_passed(cb) & p_ck


def language_prior(lp: np.ndarray, lp_instance: np.ndarray, n_instances: int, gate: np.ndarray) -> np.ndarray:
    """Eq. 4, averaged over an instance's images: mean_i [LP_i passed] ∧ ``gate``.

    With ``gate`` = P_CK ∧ P_VP ∧ P_CB this is the pipeline indicator of Eq. 4
    (fractional where only some images pass); with an all-True gate it is the
    raw LP accuracy of the benchmark's table.
    """
    passed_per_image = test_passed(lp).astype(np.float64)
    passed = np.bincount(lp_instance, weights=passed_per_image, minlength=n_instances)
    images = np.bincount(lp_instance, minlength=n_instances)
    return np.divide(passed, images, out=np.zeros(n_instances), where=images > 0) * gate


def pipeline_score(indicators: np.ndarray, eligible: np.ndarray | int) -> float | None:
    """Eq. 5: S_T = (1 / M_T) Σ_i P_T^i, with M_T the number of instances that
    reached test T (None where no instance did, overall or in one concept of
    ``by_concept``: there is nothing to average; the benchmark's
    ``eval/score_pipeline.py`` reports 0 there, which reads as a model failing
    every instance)."""
    denominator = float(np.sum(eligible))
    return ratio_or_none(np.sum(indicators), denominator)


def per_sample(ck: np.ndarray, vp: np.ndarray, cb: np.ndarray, lp: np.ndarray, lp_instance: np.ndarray) -> pd.DataFrame:
    """Per-instance indicators: ``ck``, ``vp``, ``cb_raw`` (CB test alone),
    ``cb`` (Eq. 3), ``lp_raw`` and ``lp`` (mean over images, raw and Eq. 4), and
    ``unanswered``: one of the instance's answers could not be parsed (such a test
    fails, as in the benchmark's scoring; this counts them); ``n_true`` and ``n_parsed``:
    of the instance's parsed answers, how many were "true" (:func:`one_answer_share`)."""
    n = len(ck)
    p_ck = commonsense_knowledge(ck)
    p_vp = visual_perception(vp)
    cb_raw = test_passed(cb)
    p_cb = commonsense_bias(cb, p_ck)
    n_true = answers_per_instance(ck, vp, cb, lp, lp_instance, TRUE)
    return pd.DataFrame(
        {
            "ck": p_ck,
            "vp": p_vp,
            "cb_raw": cb_raw,
            "cb": p_cb,
            "lp_raw": language_prior(lp, lp_instance, n, np.ones(n, dtype=bool)),
            "lp": language_prior(lp, lp_instance, n, p_cb & p_vp),
            "unanswered": unanswered(ck, vp, cb, lp, lp_instance),
            "n_true": n_true,
            "n_parsed": n_true + answers_per_instance(ck, vp, cb, lp, lp_instance, FALSE),
        }
    )


def answers_per_instance(ck: np.ndarray, vp: np.ndarray, cb: np.ndarray, lp: np.ndarray, lp_instance: np.ndarray, code: int) -> np.ndarray:
    """How many of each instance's answers, over the four tests, are ``code``."""
    lp_counts = np.bincount(lp_instance, weights=(lp == code).sum(axis=1), minlength=len(ck)).astype(np.int64)
    return (ck == code).sum(axis=1) + (vp == code).sum(axis=1) + (cb == code).sum(axis=1) + lp_counts


def one_answer_share(n_true: np.ndarray, n_parsed: np.ndarray) -> float | None:
    """The share of the commoner answer among all parsed answers, max(T, P − T) / P (not
    the paper's: a check that the answers are usable). Every test pairs a true statement
    with a false one, so a model that reads them answers "true" about half the time; one
    that answers "true" (or "false") to everything scores 1. None without a parsed answer."""
    parsed, true = float(np.sum(n_parsed)), float(np.sum(n_true))
    return ratio_or_none(max(true, parsed - true), parsed)


def unanswered(ck: np.ndarray, vp: np.ndarray, cb: np.ndarray, lp: np.ndarray, lp_instance: np.ndarray) -> np.ndarray:
    """Instances with at least one unparseable answer in any of the four tests."""
    lp_unparsed = np.bincount(lp_instance, weights=(lp == UNPARSED).any(axis=1), minlength=len(ck)) > 0
    return (ck == UNPARSED).any(axis=1) | (vp == UNPARSED).any(axis=1) | (cb == UNPARSED).any(axis=1) | lp_unparsed


def aggregate(samples: pd.DataFrame) -> dict[str, float | int | None]:
    """Pipeline scores and raw accuracies as the benchmark's scoring computes them (docs/metrics.md#vlind)."""
    n = len(samples)
    return {
        "n": int(n),
        "s_ck": pipeline_score(samples["ck"], n),
        "s_vp": pipeline_score(samples["vp"], n),
        "s_cb": pipeline_score(samples["cb"], samples["ck"]),
        "s_lp": pipeline_score(samples["lp"], samples["cb"] & samples["vp"]),
        "acc_cb": pipeline_score(samples["cb_raw"], n),
        "acc_lp": pipeline_score(samples["lp_raw"], n),
        "n_unanswered": int(samples["unanswered"].sum()),
        "one_answer_share": one_answer_share(samples["n_true"], samples["n_parsed"]),
    }


def resampled(samples: pd.DataFrame, counts: Weights) -> dict[str, np.ndarray]:
    """:func:`aggregate`'s pipeline scores (Eq. 5) on B reweighted copies of ``samples`` at
    once (``counts``: B × n row weights, a bootstrap's draws, or :class:`LeaveOneOut`,
    the jackknife's n copies in O(n)), NaN where no instance reached a test."""
    every = np.ones(len(samples))
    return {
        "s_ck": weighted_ratio(samples["ck"], every, counts),
        "s_vp": weighted_ratio(samples["vp"], every, counts),
        "s_cb": weighted_ratio(samples["cb"], samples["ck"], counts),
        "s_lp": weighted_ratio(samples["lp"], samples["cb"] & samples["vp"], counts),
        "acc_cb": weighted_ratio(samples["cb_raw"], every, counts),
        "acc_lp": weighted_ratio(samples["lp_raw"], every, counts),
    }
