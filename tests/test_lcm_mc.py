"""VL-LCM on MC-VQA (docs/metrics.md#lcm-mc, paper Eq. 2–6) against hand-computed values."""

import json
from math import sqrt

import numpy as np
import pytest

from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.evaluators.vl_lcm import metrics_mc as lcm_mc

# Sample 1: p_mc=[.7,.2,.1], p_yes=[.8,.3,.1], answer 0.
#   1−p_yes = [.2,.7,.9] → P_nec = [min(.7,.9), min(.2,.9), min(.2,.7)] = [.7,.2,.2]
#   P_JYN = sqrt([.8·.7, .3·.2, .1·.2]) = sqrt([.56,.06,.02])
#   option LC = sqrt(p_mc·P_JYN); P_LC = sqrt(.7·sqrt(.56))
P_JYN_1 = [sqrt(0.56), sqrt(0.06), sqrt(0.02)]
P_LC_1 = sqrt(0.7 * sqrt(0.56))
# Sample 2: p_mc=[.4,.6], p_yes=[.9,.6], answer 0.
#   P_nec = [1−.6, 1−.9] = [.4,.1]; P_JYN = [sqrt(.36)=.6, sqrt(.06)]
#   option LC = [sqrt(.4·.6), sqrt(.6·sqrt(.06))] → P_LC = sqrt(.24) at k̂=0
P_LC_2 = sqrt(0.24)


def test_necessary_probability_is_min_over_other_options():
    nec = lcm_mc.necessary_probability(np.array([[0.8, 0.3, 0.1], [0.9, 0.6, 0.0]]))
    np.testing.assert_allclose(nec, [[0.7, 0.2, 0.2], [0.4, 0.1, 0.1]])


def test_necessary_probability_with_tied_minimum():
    # two options share the smallest 1−p_yes: each one's minimum over the others is that same value
    nec = lcm_mc.necessary_probability(np.array([[0.9, 0.9, 0.2]]))
    np.testing.assert_allclose(nec, [[0.1, 0.1, 0.1]])


def test_joint_and_option_consistency_hand_values():
    p_yes = np.array([[0.8, 0.3, 0.1]])
    p_jyn = lcm_mc.joint_yes_no_probability(lcm_mc.sufficient_probability(p_yes), lcm_mc.necessary_probability(p_yes))
    np.testing.assert_allclose(p_jyn, [P_JYN_1])
    option_lc = lcm_mc.option_consistency(np.array([[0.7, 0.2, 0.1]]), p_jyn)
    np.testing.assert_allclose(option_lc, [[sqrt(0.7 * P_JYN_1[0]), sqrt(0.2 * P_JYN_1[1]), sqrt(0.1 * P_JYN_1[2])]])
    np.testing.assert_allclose(lcm_mc.logical_consistency(option_lc), [P_LC_1])


def _score(records, **kwargs):
    return score(validate("lcm-mc", parse_jsonl(__import__("json").dumps(r) for r in records)), **kwargs)


TWO_SAMPLES = [
    {"id": "s1", "p_mc": [0.7, 0.2, 0.1], "p_yes": [0.8, 0.3, 0.1], "answer": 0},
    {"id": "s2", "p_mc": [0.4, 0.6], "p_yes": [0.9, 0.6], "answer": 0},
]


def test_set_metrics_hand_computed():
    metrics = _score(TWO_SAMPLES)
    assert metrics["n"] == 2
    assert metrics["lcm"] == pytest.approx((P_LC_1 + P_LC_2) / 2)
    assert metrics["acc"] == pytest.approx(0.5)  # s2 picks option 1 on the MC test
    assert metrics["j_acc"] == pytest.approx(1.0)  # P_JYN(answer) = .748 and .6
    assert metrics["f1"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert metrics["lcm_gt"] == pytest.approx((P_LC_1 + P_LC_2) / 2)  # both k̂ equal the answer
    # s1 has one yes (confidence), s2 two (overconfidence)
    assert (metrics["abstention"], metrics["confidence"], metrics["overconfidence"]) == (0.0, 0.5, 0.5)
    # s1: p_mc[k̂]=.7 and P_JYN(k̂)=.748 → reliable; s2: p_mc[k̂]=.4 → not
    assert metrics["n_reliable"] == 1 and metrics["n_reliable_correct"] == 1


def test_labelled_metrics_omitted_without_labels():
    unlabelled = [{**r, "answer": None} for r in TWO_SAMPLES]
    metrics = _score(unlabelled)
    assert metrics["lcm"] == pytest.approx((P_LC_1 + P_LC_2) / 2)
    for key in ("acc", "j_acc", "f1", "lcm_gt", "n_reliable_correct", "n_labelled"):
        assert key not in metrics
    assert metrics["n_reliable"] == 1


def test_certain_and_right_everywhere_scores_one():
    records = [
        {"id": i, "p_mc": [1.0 if k == i % 4 else 0.0 for k in range(4)], "p_yes": [1.0 if k == i % 4 else 0.0 for k in range(4)], "answer": i % 4}
        for i in range(8)
    ]
    metrics = _score(records)
    for key in ("lcm", "acc", "j_acc", "f1", "lcm_gt", "confidence"):
        assert metrics[key] == pytest.approx(1.0), key
    assert metrics["n_reliable"] == metrics["n_reliable_correct"] == 8


def test_all_yes_model_is_inconsistent():
    # says yes to every option: each option's necessity is 0, so P_LC = 0 whatever the MC test says
    records = [{"id": i, "p_mc": [0.97, 0.01, 0.01, 0.01], "p_yes": [1.0] * 4, "answer": 0} for i in range(3)]
    metrics = _score(records)
    assert metrics["lcm"] == 0.0 and metrics["acc"] == 1.0 and metrics["j_acc"] == 0.0 and metrics["f1"] == 0.0
    assert metrics["overconfidence"] == 1.0


def test_invariants_on_random_records():
    rng = np.random.default_rng(0)
    p_mc = rng.dirichlet(np.ones(5), size=2000)
    p_yes = rng.uniform(size=(2000, 5))
    answer = rng.integers(0, 5, size=2000)
    samples = lcm_mc.per_sample(p_mc, p_yes, answer)
    assert ((samples["p_lc"] >= 0) & (samples["p_lc"] <= 1)).all()
    assert (samples["lc_gt"] <= samples["p_lc"] + 1e-12).all()  # LCM* ≤ LCM per sample
    # per-sample P_LC ≤ sqrt(max p_mc): the MC factor bounds it
    assert (samples["p_lc"] <= np.sqrt(p_mc.max(axis=1)) + 1e-12).all()


def test_padding_mixed_k_matches_separate_scoring():
    mixed = _score(TWO_SAMPLES)
    separate = [_score([record]) for record in TWO_SAMPLES]
    assert mixed["lcm"] == pytest.approx(np.mean([m["lcm"] for m in separate]))
    assert mixed["acc"] == pytest.approx(np.mean([m["acc"] for m in separate]))


def test_ties_take_lowest_index_for_p_lc_but_a_tied_answer_is_unanswered():
    # both options have equal P_LC; k̂ must be option 0 (docs/metrics.md: the lowest index on a tie)
    records = [{"id": "t", "p_mc": [0.6, 0.6], "p_yes": [0.9, 0.9], "answer": 0}]
    samples = lcm_mc.per_sample(np.array([[0.6, 0.6]]), np.array([[0.9, 0.9]]), np.array([0]))
    assert samples["chosen"].tolist() == [0]
    # but the MC prompt itself has no answer: wrong, not option 0 by luck of the index
    metrics = _score(records)
    assert metrics["acc"] == 0.0 and metrics["n_unanswered"] == 1


def test_unanswered_questions_are_wrong_and_counted():
    # what the vLLM/HTTP backends return when no option token is among the logprobs: uniform
    lost_mc = {"id": "a", "p_mc": [0.25, 0.25, 0.25, 0.25], "p_yes": [0.9, 0.1, 0.1, 0.1], "answer": 0}
    # the answer's own probe lost (0.5): P_JYN(0) = sqrt(0.5 · 0.9) = 0.67 > 0.5 would be J-correct
    lost_probe = {"id": "b", "p_mc": [0.7, 0.1, 0.1, 0.1], "p_yes": [0.5, 0.1, 0.1, 0.1], "answer": 0}
    # a necessary probe lost: P_JYN(0) = sqrt(0.9 · 0.5) = 0.67 > 0.5 would be J-correct
    lost_other = {"id": "c", "p_mc": [0.7, 0.1, 0.1, 0.1], "p_yes": [0.9, 0.5, 0.1, 0.1], "answer": 0}
    answered = {"id": "d", "p_mc": [0.7, 0.1, 0.1, 0.1], "p_yes": [0.9, 0.1, 0.1, 0.1], "answer": 0}
    assert np.sqrt(0.5 * 0.9) > 0.5
    metrics = _score([lost_mc, lost_probe, lost_other, answered])
    assert metrics["n_unanswered"] == 3
    assert metrics["acc"] == pytest.approx(3 / 4)  # a: tied (argmax would say option 0, right)
    assert metrics["j_acc"] == pytest.approx(2 / 4)  # a and d: every probe answered and P_JYN(0) > 0.5
    samples = lcm_mc.per_sample(np.array([r["p_mc"] for r in (lost_mc, answered)]), np.array([r["p_yes"] for r in (lost_mc, answered)]), np.array([0, 0]))
    assert samples["unanswered"].tolist() == [True, False] and samples["correct"].tolist() == [0.0, 1.0]
    # P_LC is the paper's, on the probabilities as they are
    assert samples["p_lc"][0] == pytest.approx(np.sqrt(0.25 * np.sqrt(0.9 * 0.9)))


def test_per_category_breakdown():
    records = [{**r, "category": c} for r, c in zip(TWO_SAMPLES, ["a", "b"])]
    metrics = _score(records)
    assert metrics["by_category"]["a"]["lcm"] == pytest.approx(P_LC_1)
    assert metrics["by_category"]["b"]["lcm"] == pytest.approx(P_LC_2)
    assert metrics["by_category"]["b"]["acc"] == 0.0


@pytest.mark.parametrize("field, value, says", [("answer", 10**400, "unknown label 1000"), ("p_mc", [10**400, 0, 0, 0], "entry 0 1000"), ("p_yes", [0.5, -(10**400), 0.5, 0.5], "entry 1 -1000")])
def test_integers_too_large_for_a_float_are_out_of_range_not_a_crash(tmp_path, capsys, field, value, says):
    """JSON allows integers of any size; one in a probability or label field is one bad
    record with its value cut short, exit 2, never an OverflowError."""
    from vlgate.cli.main import main

    records = [{"id": i, "p_mc": [0.25] * 4, "p_yes": [0.5] * 4, "answer": 0} for i in range(3)]
    records[1][field] = value
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["score", "lcm-mc", str(path)]) == 2
    error = capsys.readouterr().err
    assert f"line 2 (id 1), field '{field}'" in error and says in error and "chars)" in error and len(error) < 400
