"""DeCC reliability (docs/metrics.md#decc, paper §3) against hand-computed values."""

import json

import numpy as np
import pandas as pd
import pytest

from vlgate.evaluators.decc import metrics as decc
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate

RECORDS = [
    # agents agree with A0 in round 1 → R_multi = Cons(v1) = 1
    {"id": 1, "direct": "(A)", "v1": "a", "l1": "A.", "answer": "A"},
    # disagree; round 2: both inconsistent (VLM changed) → agree → R = Cons(v2) = 0
    {"id": 2, "direct": "B", "v1": "B", "l1": "C", "v2": "C", "l2": "C", "answer": "C"},
    # disagree; round 2: neither changed → R = Cons(l1) = 0
    {"id": 3, "direct": "B", "v1": "B", "l1": "C", "v2": "B", "l2": "D", "answer": "B"},
    # disagree; round 2: both changed → R = Cons(v2) = 1
    {"id": 4, "direct": "B", "v1": "C", "l1": "B", "v2": "B", "l2": "A", "answer": "B"},
]


def _score(records):
    return score(validate("decc", parse_jsonl(json.dumps(r) for r in records)))


def test_normalisation():
    assert decc.normalise_answer(" (A). ") == "a"
    assert decc.normalise_answer("Two_Dogs!") == "twodogs"
    assert decc.normalise_answer("3.5") == "35"


def test_multi_agent_rule_cases():
    r = decc.multi_agent_reliability(
        np.array([1.0, 1.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0, 1.0]), np.array([np.nan, 0.0, 1.0, 1.0]), np.array([np.nan, 0.0, 0.0, 0.0])
    )
    np.testing.assert_array_equal(r, [1.0, 0.0, 0.0, 1.0])


def test_reliability_brier_and_effective_reliability_by_hand():
    m = _score(RECORDS)
    assert m["n"] == 4 and m["n_round2"] == 3
    assert m["reliable_rate/vlm"] == pytest.approx(3 / 4)  # Cons(v1) = 1,1,1,0
    assert m["reliable_rate/llm"] == pytest.approx(2 / 4)  # Cons(l1) = 1,0,0,1
    assert m["reliable_rate/multi"] == pytest.approx(2 / 4)  # 1,0,0,1
    assert m["reliable_rate/vlm2"] == pytest.approx(2 / 3)  # over records 2-4: 0,1,1
    assert m["reliable_rate/llm2"] == pytest.approx(0.0)
    assert m["acc"] == pytest.approx(3 / 4)  # direct right on 1, 3, 4
    # multi R = 1,0,0,1 vs Acc = 1,0,1,1 → Brier (0+0+1+0)/4; ER (1+0+0+1)/4
    assert m["brier/multi"] == pytest.approx(0.25)
    assert m["er/multi"] == pytest.approx(0.5)
    # vlm R = 1,1,1,0 vs Acc 1,0,1,1 → Brier 2/4; ER (1 −1 +1 +0)/4
    assert m["brier/vlm"] == pytest.approx(0.5)
    assert m["er/vlm"] == pytest.approx(0.25)
    # vlm2 over 2-4: R 0,1,1 vs Acc 0,1,1
    assert m["brier/vlm2"] == pytest.approx(0.0)
    assert m["er/vlm2"] == pytest.approx(2 / 3)


def test_label_free_output_and_no_second_round():
    records = [{k: v for k, v in r.items() if k not in ("answer", "v2", "l2")} for r in RECORDS[:1]]
    m = _score(records + [{"id": 9, "direct": "x", "v1": "y", "l1": "z"}])
    assert set(m) == {"n", "n_round2", "reliable_rate/vlm", "reliable_rate/llm", "reliable_rate/multi"}
    assert m["reliable_rate/multi"] == pytest.approx(0.5)


def test_consistency_handles_missing_second_round():
    cons = decc.consistency(pd.Series(["a", "b"]), pd.Series(["A", None], dtype=object))
    assert cons.iloc[0] == 1.0 and np.isnan(cons.iloc[1])
