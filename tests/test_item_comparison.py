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
    columns = definition.item_score_columns
    assert columns and set(columns) <= set(frame.columns)
    assert all(pd.api.types.is_numeric_dtype(frame[name]) for name in columns)
    # each is behind metrics the evaluator declares, found from their concrete names (gc@{T}: gc@3)
    declared = {metric.name: metric for metric in definition.metrics}
    for score in definition.item_scores:
        assert score.metrics and set(score.metrics) <= set(declared)
        assert all(score.column in definition.item_scores_behind(declared[name].resolve({"T": 3})) for name in score.metrics)
    # an example set compared with itself: nothing lost, nothing won
    for comparison in compare_items(frame, frame, columns=list(columns)).values():
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


def test_a_score_where_lower_is_better_loses_the_items_whose_value_rose():
    """The direction of an item score decides lost and won: a 0/1 score whose 1 is the
    bad case (``unanswered``) loses the items that became 1, a distance those that grew."""
    mine = pd.DataFrame({"id": ["a", "b", "c", "d"], "unanswered": [1, 0, 1, 0], "distance": [0.5, 0.1, 0.9, 0.3]})
    theirs = pd.DataFrame({"id": ["a", "b", "c", "d"], "unanswered": [0, 1, 1, 0], "distance": [0.2, 0.4, 0.1, 0.3]})
    compared = compare_items(mine, theirs, directions={"unanswered": "lower", "distance": "lower"})
    assert compared["unanswered"].cells() == {"both_right": 1, "lost": 1, "won": 1, "both_wrong": 1}
    assert list(compared["unanswered"].lost["id"]) == ["a"] and list(compared["unanswered"].won["id"]) == ["b"]
    # the largest rise first: c (+0.8), then a (+0.3); b fell, d held
    assert list(compared["distance"].lost["id"]) == ["c", "a"] and list(compared["distance"].won["id"]) == ["b"]
    assert compared["distance"].by_category().loc[None, ["lost", "won"]].tolist() == [2, 1]
    # read higher-is-better, the same items swap
    assert list(compare_items(mine, theirs)["distance"].lost["id"]) == ["b"]


def lcm_mc_diff(correct_lost: int, correct_won: int):
    """lcm-mc on 10 hand-made items: ``correct`` loses and wins the given numbers of items,
    P_LC falls on items h (−0.6) and i (−0.3), ``reliable`` holds."""
    from vlgate.evaluators.item_diff import diff_outputs
    from vlgate.evaluators.output import EvaluatorOutput

    ids = list("abcdefghij")
    theirs_correct = [1.0] * correct_lost + [0.0] * correct_won + [1.0] * (10 - correct_lost - correct_won)
    mine_correct = [0.0] * correct_lost + [1.0] * correct_won + [1.0] * (10 - correct_lost - correct_won)
    theirs_p_lc, mine_p_lc = [0.5] * 7 + [0.6, 0.5, 0.5], [0.5] * 7 + [0.0, 0.2, 0.5]
    frame = lambda correct, p_lc: pd.DataFrame({"id": ids, "correct": correct, "p_lc": p_lc, "reliable": [1.0] * 10})
    output = lambda samples: EvaluatorOutput("lcm-mc", records=[{"id": i, "protocol": "vlgate-1", "question": f"q {i}"} for i in ids], samples=samples)
    return diff_outputs(output(frame(mine_correct, mine_p_lc)), output(frame(theirs_correct, theirs_p_lc)))


def test_the_scores_behind_failing_checks_are_listed_first():
    """The demo's v5 case: rejected by lcm-mc/lcm while ``correct`` lost as many items as it
    won. The items listed first are P_LC's (the score behind the failing check), then the
    first score that lost any; with nothing failing, that first score alone."""
    diff = lcm_mc_diff(correct_lost=2, correct_won=2)
    assert diff.summary()["correct"]["lost"] == 2 and diff.summary()["p_lc"]["lost"] == 2
    assert diff.scores_behind(["lcm"]) == ["p_lc"] and diff.scores_behind(["acc", "f1", "abstention"]) == ["correct"]
    assert diff.listed_scores(["lcm"]) == ["p_lc", "correct"]
    assert diff.listed_scores(["acc", "lcm"]) == ["correct", "p_lc"]
    assert diff.listed_scores() == ["correct"]
    assert [item["id"] for item in diff.listed("lost", score="p_lc")] == ["h", "i"]
    # nothing lost on correct: the failing check's score is the only one to list
    assert lcm_mc_diff(correct_lost=0, correct_won=0).listed_scores(["lcm"]) == ["p_lc"]
