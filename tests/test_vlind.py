"""VLind-Bench pipeline scores (docs/metrics.md#vlind, paper Eq. 1–5) against hand-computed values."""

import json

import numpy as np
import pytest

from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.evaluators.vlind import metrics as vlind

T, F, N = True, False, None
INSTANCES = [
    # A: passes CK, VP, CB; LP on one of two images → 1/2
    {"id": "A", "concept": "color", "ck": [T, F], "vp": [T, F], "cb": [T, F], "lp": [[T, F], [T, T]]},
    # B: fails CK, so its CB pass does not count in the pipeline; raw LP 1
    {"id": "B", "concept": "color", "ck": [T, T], "vp": [T, F], "cb": [T, F], "lp": [[T, F]]},
    # C: passes CK, fails VP, CB unparseable; raw LP 1
    {"id": "C", "concept": "weight", "ck": [T, F], "vp": [F, F], "cb": [N, F], "lp": [[T, F]]},
    # D: passes CK, VP, CB; LP on two of three images → 2/3
    {"id": "D", "concept": "weight", "ck": [T, F], "vp": [T, F], "cb": [T, F], "lp": [[T, F], [T, F], [F, F]]},
]


def _score(records):
    return score(validate("vlind", parse_jsonl(json.dumps(r) for r in records)))


def test_pipeline_scores_hand_computed():
    metrics = _score(INSTANCES)
    assert metrics["n"] == 4
    assert metrics["s_ck"] == pytest.approx(3 / 4)
    assert metrics["s_vp"] == pytest.approx(3 / 4)
    assert metrics["s_cb"] == pytest.approx(2 / 3)  # CK∧CB: A, D over ΣCK = 3
    assert metrics["s_lp"] == pytest.approx((1 / 2 + 2 / 3) / 2)  # over CK∧VP∧CB: A, D
    assert metrics["acc_cb"] == pytest.approx(3 / 4)  # raw CB: A, B, D
    assert metrics["acc_lp"] == pytest.approx((1 / 2 + 1 + 1 + 2 / 3) / 4)


def test_per_concept_breakdown():
    by_concept = _score(INSTANCES)["by_concept"]
    assert by_concept["color"]["s_cb"] == pytest.approx(1.0)  # only A passed CK, and its CB
    assert by_concept["color"]["s_lp"] == pytest.approx(0.5)
    assert by_concept["weight"]["s_vp"] == pytest.approx(0.5)
    assert by_concept["weight"]["s_lp"] == pytest.approx(2 / 3)


def test_score_over_no_eligible_instance_is_null():
    metrics = _score([{"id": 1, "concept": "x", "ck": [F, F], "vp": [T, F], "cb": [T, F], "lp": [[T, F]]}])
    assert metrics["s_ck"] == 0.0 and metrics["s_cb"] is None and metrics["s_lp"] is None


def test_pipeline_equations_directly():
    ck = np.array([[1, 0], [1, 1], [-1, 0]], dtype=np.int8)
    np.testing.assert_array_equal(vlind.commonsense_knowledge(ck), [True, False, False])
    lp = np.array([[1, 0], [0, 0], [1, 0]], dtype=np.int8)
    gate = np.array([True, False])
    np.testing.assert_allclose(vlind.language_prior(lp, np.array([0, 0, 1]), 2, gate), [0.5, 0.0])
    assert vlind.pipeline_score(np.array([1.0, 0.5]), np.array([True, True, False])) == pytest.approx(0.75)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("True", True),
        ("False.", False),
        ("true, because the sky is green", True),
        ("The statement is FALSE.\nIt is not true.", False),
        ("Answer:\ntrue", True),
        ("untrue", None),
        ("True/False", None),
        ("", None),
        ("I cannot tell", None),
    ],
)
def test_answer_parser_matches_the_benchmark(text, expected):
    assert vlind.parse_true_false(text) is expected


def test_unparseable_answers_fail_their_test_and_are_counted():
    # C's CB answer is unparseable (the benchmark's parser finds no true/false): its CB fails, and C counts
    metrics = _score(INSTANCES)
    assert metrics["n_unanswered"] == 1
    one_lost_lp = {"id": "E", "concept": "color", "ck": [T, F], "vp": [T, F], "cb": [T, F], "lp": [[T, F], [T, N]]}
    metrics = _score([*INSTANCES, one_lost_lp])
    assert metrics["n_unanswered"] == 2
    assert metrics["acc_lp"] == pytest.approx((0.5 + 1 + 1 + 2 / 3 + 0.5) / 5)  # E's second image fails
