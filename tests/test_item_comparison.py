"""Two versions item by item (evaluators/metrics/item_comparison.py), on hand-made per-sample
frames: the shared items, the four cells of a 0/1 column, the order of a continuous one,
per category, and missing values left out of their column only."""

import numpy as np
import pandas as pd
import pytest

from vlgate.evaluators.metrics.item_comparison import compare_items, shared_items
from vlgate.evaluators.metrics.score_test import paired_score

CANDIDATE = pd.DataFrame(
    {
        "id": ["a", "b", "c", "d", "e", "new"],
        "correct": [True, False, True, False, True, True],
        "p_lc": [0.9, 0.2, 0.6, 0.5, np.nan, 0.7],
        "description": ["x", "y", "z", "w", "v", "u"],
    }
)
CHAMPION = pd.DataFrame(
    {
        "id": ["e", "d", "c", "b", "a", "gone"],
        "correct": [True, True, False, True, True, False],
        "p_lc": [0.8, 0.5, 0.7, 0.9, 0.4, 0.1],
        "description": ["v", "w", "z", "y", "x", "t"],
    }
)
CATEGORIES = pd.Series({"a": "art", "b": "art", "c": "bio", "d": "bio", "e": None, "new": "art", "gone": "bio"})


def test_a_binary_column_gives_the_paired_table_of_the_items_both_versions_hold():
    compared = compare_items(CANDIDATE, CHAMPION, CATEGORIES)
    assert set(compared) == {"correct", "p_lc"}  # numeric columns on both sides; text left out
    correct = compared["correct"]
    assert correct.kind == "binary" and correct.n_shared == 5  # "new" and "gone" are on one side only
    # a: 1/1, b: 0/1 lost, c: 1/0 won, d: 0/1 lost, e: 1/1
    assert correct.cells() == {"both_right": 2, "lost": 2, "won": 1, "both_wrong": 0}
    assert list(correct.lost["id"]) == ["b", "d"] and list(correct.won["id"]) == ["c"]
    # lost − won over the shared items is the change of the mean the gate's paired comparison sees
    change = paired_score(CANDIDATE, CHAMPION, lambda frame: frame["correct"].mean())
    assert change.difference == pytest.approx((1 - 2) / 5) and sorted(change.pseudo_values) == pytest.approx([-1, -1, 0, 0, 1])


def test_a_continuous_column_orders_the_items_by_change_and_leaves_out_missing_values():
    p_lc = compare_items(CANDIDATE, CHAMPION)["p_lc"]
    assert p_lc.kind == "continuous" and p_lc.n_shared == 4  # e has no candidate value
    assert list(p_lc.items["id"]) == ["b", "c", "d", "a"]  # -0.7, -0.1, 0.0, +0.5
    assert p_lc.items["change"].round(6).tolist() == [-0.7, -0.1, 0.0, 0.5]
    assert list(p_lc.lost["id"]) == ["b", "c"] and list(p_lc.won["id"]) == ["a"]
    with pytest.raises(ValueError, match="not a 0/1 column"):
        p_lc.cells()
    assert list(compare_items(CANDIDATE, CHAMPION, columns=["p_lc"])) == ["p_lc"]
    with pytest.raises(ValueError, match="description"):
        compare_items(CANDIDATE, CHAMPION, columns=["description"])


def test_each_column_breaks_down_by_category():
    table = compare_items(CANDIDATE, CHAMPION, CATEGORIES)["correct"].by_category()
    assert list(table.index) == ["art", "bio", None]
    assert table.loc["art"].to_dict() == {"n_shared": 2, "lost": 1, "won": 0, "mean_change": -0.5}
    assert table.loc["bio"].to_dict() == {"n_shared": 2, "lost": 1, "won": 1, "mean_change": 0.0}
    assert table.loc[None, "n_shared"] == 1


def test_the_join_is_the_gate_s_pairing_in_the_candidate_s_order():
    shared = shared_items(CANDIDATE, CHAMPION)
    assert list(shared["id"]) == ["a", "b", "c", "d", "e"]
    assert shared.loc[shared["id"] == "b", ["correct_candidate", "correct_champion"]].values.tolist() == [[False, True]]
    nothing = compare_items(CANDIDATE, CHAMPION.assign(id=CHAMPION["id"] + "-other"))
    assert nothing["correct"].n_shared == 0 and nothing["correct"].cells() == {"both_right": 0, "lost": 0, "won": 0, "both_wrong": 0}


@pytest.mark.parametrize("evaluator", ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"])
def test_every_evaluator_declares_item_scores_its_records_have(evaluator):
    """The item scores ``vlgate diff`` compares are numeric per-sample columns of the
    evaluator's shipped example records (which hold the required fields alone; the fields
    shown beside an item are those of the runners' records, and a missing one is not shown)."""

    from vlgate.evaluators import registry
    from vlgate.evaluators.records import read_jsonl
    from vlgate.evaluators.scoring import per_sample_frame, validate

    definition = registry.get(evaluator)
    path = definition.example
    frame = per_sample_frame(validate(evaluator, read_jsonl(path)))
    assert definition.item_scores and set(definition.item_scores) <= set(frame.columns)
    assert all(pd.api.types.is_numeric_dtype(frame[name]) for name in definition.item_scores)
    # an example set compared with itself: nothing lost, nothing won
    for comparison in compare_items(frame, frame, columns=list(definition.item_scores)).values():
        assert len(comparison.lost) == len(comparison.won) == 0 and comparison.n_shared > 0


def test_a_champion_comparison_covers_the_evaluators_asked_alike_and_says_why_not_the_others():
    """``compare_outputs``, what the report's "Against the champion" shows: each evaluator of
    the candidate is compared when the champion ran it under the same protocol; otherwise it
    is named with the reason. The items listed first are those of the first score that lost any."""
    from vlgate.evaluators.item_diff import compare_outputs
    from vlgate.evaluators.output import EvaluatorOutput

    def output(evaluator: str, frame: pd.DataFrame, protocol: str = "vlgate-1", error: str | None = None) -> EvaluatorOutput:
        records = [{"id": row.id, "protocol": protocol} for row in frame.itertuples()]
        return EvaluatorOutput(evaluator, records=records, samples=None if error else frame, error=error)

    mc_mine = pd.DataFrame({"id": ["a", "b", "c"], "correct": [1.0, 1.0, 0.0], "p_lc": [0.9, 0.4, 0.2], "reliable": [1.0, 1.0, 0.0]})
    mc_theirs = pd.DataFrame({"id": ["a", "b", "c"], "correct": [1.0, 1.0, 0.0], "p_lc": [0.8, 0.7, 0.3], "reliable": [1.0, 1.0, 1.0]})
    gc = pd.DataFrame({"id": ["g"], "gc": [0.5]})
    candidate = {
        "lcm-mc": output("lcm-mc", mc_mine),
        "genception": output("genception", gc, protocol="vlgate-2"),
        "decc": output("decc", gc, error="the agent failed"),
        "vlind": output("vlind", gc),
    }
    champion = {"lcm-mc": output("lcm-mc", mc_theirs), "genception": output("genception", gc), "decc": output("decc", gc)}
    diffs, skipped = compare_outputs(candidate, champion)
    assert list(diffs) == ["lcm-mc"]
    assert skipped == {
        "genception": "not comparable: asked under protocol vlgate-2, the champion under vlgate-1",
        "decc": "candidate has no decc records (the agent failed)",
        "vlind": "the champion has no vlind output",
    }
    mc = diffs["lcm-mc"]
    assert mc.summary()["correct"]["lost"] == 0 and mc.summary()["p_lc"]["lost"] == 2 and mc.summary()["reliable"]["lost"] == 1
    # correct lost nothing, so p_lc's drops are the ones to show: b (-0.3) before c (-0.1)
    assert mc.first_score_lost() == "p_lc" and [item["id"] for item in mc.listed("lost", score="p_lc")] == ["b", "c"]
