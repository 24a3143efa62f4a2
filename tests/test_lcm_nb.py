"""VL-LCM on NaturalBench-format units (docs/metrics.md#lcm-nb, paper Eq. 7–11) against hand-computed values."""

import json

import numpy as np
import pytest

from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.evaluators.vl_lcm import metrics_nb as lcm_nb

UNIT = {
    "p_yes": [[0.9, 0.2], [0.3, 0.8]],
    "p_text": [[0.7, 0.3], [0.4, 0.6]],
    "p_image": [[0.8, 0.2], [0.1, 0.9]],
}
# Per test, c1 then c2: P_MC = x(1−x'), x'(1−x); P_JYN = s(1−n), n(1−s)
#  (a) x=.7 x'=.3 s=.9 n=.2: MC .49/.09, JYN .72/.02
#  (b) x=.6 x'=.4 s=.8 n=.3: MC .36/.16, JYN .56/.06
#  (c) x=.8 x'=.2 s=.9 n=.3: MC .64/.04, JYN .63/.03
#  (d) x=.9 x'=.1 s=.8 n=.2: MC .81/.01, JYN .64/.04
LC_C1 = [(0.49 * 0.72) ** 0.25, (0.36 * 0.56) ** 0.25, (0.64 * 0.63) ** 0.25, (0.81 * 0.64) ** 0.25]
LC_C2 = [(0.09 * 0.02) ** 0.25, (0.16 * 0.06) ** 0.25, (0.04 * 0.03) ** 0.25, (0.01 * 0.04) ** 0.25]
JYN_C2 = [0.02, 0.06, 0.03, 0.04]


def _score(records):
    return score(validate("lcm-nb", parse_jsonl(json.dumps(r) for r in records)))


def test_equations_on_test_a():
    mc_c1, mc_c2 = lcm_nb.mc_probabilities(np.array([0.7]), np.array([0.3]))
    jyn_c1, jyn_c2 = lcm_nb.joint_yes_no_probabilities(np.array([0.9]), np.array([0.2]))
    np.testing.assert_allclose([mc_c1[0], mc_c2[0], jyn_c1[0], jyn_c2[0]], [0.49, 0.09, 0.72, 0.02])
    lc = lcm_nb.test_consistency(lcm_nb.choice_consistency(mc_c1, jyn_c1), lcm_nb.choice_consistency(mc_c2, jyn_c2))
    np.testing.assert_allclose(lc, [LC_C1[0]])


def test_unit_lcm_and_labelled_metrics_hand_computed():
    partial = {**UNIT, "p_yes": [[0.9, 0.6], [0.3, 0.8]]}  # (V1,T2) wrongly "yes" under c1
    metrics = _score([
        {"id": "u1", **UNIT, "answer": "c1"},
        {"id": "u2", **UNIT, "answer": "c2"},
        {"id": "u3", **partial, "answer": "c1"},
    ])
    assert metrics["n"] == 3
    # u3 changes y12 to .6: test (a) JYN(c1) = .9·.4 = .36, test (d) JYN(c1) = .8·.4 = .32; c1 still wins both
    partial_lcm = np.mean([(0.49 * 0.36) ** 0.25, LC_C1[1], LC_C1[2], (0.81 * 0.32) ** 0.25])
    assert metrics["lcm"] == pytest.approx((2 * np.mean(LC_C1) + partial_lcm) / 3)
    # u1 all four YN right, u2 all four wrong, u3 three of four
    assert metrics["acc"] == pytest.approx((1 + 0 + 0.75) / 3)
    # u3: T1 right on both images (1 question), V2 right on both statements (1 image)
    assert metrics["q_acc"] == pytest.approx((2 + 0 + 1) / 6)
    assert metrics["i_acc"] == pytest.approx((2 + 0 + 1) / 6)
    assert metrics["g_acc"] == pytest.approx(1 / 3)


def test_lcm_gt_and_j_acc_follow_the_label():
    metrics = _score([{"id": "u1", **UNIT, "answer": "c1"}, {"id": "u2", **UNIT, "answer": "c2"}])
    assert metrics["lcm"] == pytest.approx(np.mean(LC_C1))  # unit LCM ignores the label
    assert metrics["lcm_gt"] == pytest.approx((np.mean(LC_C1) + np.mean(LC_C2)) / 2)
    # sqrt(P_JYN(c1)) > .5 on all four tests; sqrt(P_JYN(c2)) < .5 on all
    assert metrics["j_acc"] == pytest.approx(0.5)
    assert all(np.sqrt(JYN_C2) < 0.5)
    assert metrics["f1"] == pytest.approx(2 * 0.5 * 0.5 / 1.0)


def test_perfect_unit_scores_one_and_lcm_gt_le_lcm():
    perfect = {"p_yes": [[1, 0], [0, 1]], "p_text": [[1, 0], [0, 1]], "p_image": [[1, 0], [0, 1]]}
    metrics = _score([{"id": 1, **perfect, "answer": "c1"}])
    for key in ("lcm", "acc", "q_acc", "i_acc", "g_acc", "j_acc", "f1", "lcm_gt"):
        assert metrics[key] == pytest.approx(1.0), key
    rng = np.random.default_rng(1)
    samples = lcm_nb.per_sample(rng.uniform(size=(500, 2, 2)), rng.uniform(size=(500, 2, 2)), rng.uniform(size=(500, 2, 2)), rng.integers(0, 2, 500))
    assert ((samples["p_lc"] >= 0) & (samples["p_lc"] <= 1)).all()
    assert (samples["lc_gt"] <= samples["p_lc"] + 1e-12).all()


def test_an_undecided_yes_no_answer_is_wrong_whatever_the_label():
    # y12 = 0.5: under c1 the expected answer is "no", and "p > 0.5 means yes" read it as a right "no"
    undecided = {**UNIT, "p_yes": [[0.9, 0.5], [0.3, 0.8]]}
    metrics = _score([{"id": "u1", **undecided, "answer": "c1"}])
    assert metrics["n_unanswered"] == 1
    assert metrics["acc"] == pytest.approx(3 / 4)
    assert metrics["q_acc"] == pytest.approx(1 / 2)  # T2 is not right on both images
    assert metrics["i_acc"] == pytest.approx(1 / 2)  # V1 is not right on both questions
    assert metrics["g_acc"] == 0.0
    # tests (a) (s=y11, n=y12) and (d) (s=y22, n=y12) lean on the undecided y12: not J-correct,
    # although (a)'s sqrt(0.9 · 0.5) = 0.67 > 0.5; (b) and (c) are as before
    assert metrics["j_acc"] == pytest.approx(2 / 4)
    # a tie between the two options of an MC test is unanswered too (P_LC unchanged)
    tied = {**UNIT, "p_text": [[0.5, 0.5], [0.4, 0.6]]}
    assert _score([{"id": "u2", **tied, "answer": "c1"}])["n_unanswered"] == 1
    assert _score([{"id": "u3", **UNIT, "answer": "c1"}])["n_unanswered"] == 0


def test_unlabelled_units_have_only_lcm():
    metrics = _score([{"id": "u", **UNIT, "answer": None}, {"id": "v", **UNIT}])
    assert set(metrics) == {"n", "lcm", "n_unanswered"}
    assert metrics["lcm"] == pytest.approx(np.mean(LC_C1))
