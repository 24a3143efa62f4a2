"""The champion on the candidate's items it has no records of (flows/champion_items.py):
which items are missing, the champion's outputs with them added (never replacing one of
its own), the plan that evaluates exactly those, and the suite setting, refused when read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_gate import POLICY, _mc_records, _result
from test_plan import _config, _suite_text

from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.running.items import ItemIds, load_items
from vlgate.evaluators.running.suite import Suite
from vlgate.flows.champion_items import missing_items, with_champion_items
from vlgate.flows.plan import ValidationPlan
from vlgate.gate.gates import decide
from vlgate.versions import VersionRef

EXAMPLES = Path(__file__).resolve().parents[1] / "evaluators" / "examples" / "data"


def test_the_missing_items_are_the_candidate_s_the_champion_has_no_record_of_in_the_candidate_s_order():
    candidate = {"lcm-mc": _result(_mc_records([0.9] * 5, ids=["d", "a", "e", "b", "c"])), "vlind": EvaluatorOutput.failed("vlind", "boom")}
    champion = {"lcm-mc": _result(_mc_records([0.8] * 3, ids=["a", "b", "c"])), "vlind": _result(_mc_records([0.5], ids=["x"]))}
    assert missing_items(candidate, champion) == ItemIds(ids={"lcm-mc": ("d", "e")})  # a failed evaluator asks nothing
    assert missing_items(candidate, {"lcm-mc": EvaluatorOutput.failed("lcm-mc", "gone")}).ids == {}  # nor one the champion failed
    assert missing_items({"lcm-mc": candidate["lcm-mc"]}, {"lcm-mc": _result(_mc_records([0.8] * 5, ids=list("abcde")))}).ids == {}


def test_the_champion_s_outputs_get_the_added_items_and_keep_their_own_records_and_metrics():
    own = _result(_mc_records([0.8, 0.7], ids=["a", "b"]))
    added = _mc_records([0.1, 0.6], ids=["b", "c"])  # b is the champion's already: its own record stays
    merged = with_champion_items({"lcm-mc": own, "vlind": EvaluatorOutput.failed("vlind", "boom")}, {"lcm-mc": added, "vlind": added})
    assert [(r["id"], r["p_mc"][0]) for r in merged["lcm-mc"].records] == [("a", 0.8), ("b", 0.7), ("c", 0.6)]
    assert list(merged["lcm-mc"].samples["id"]) == ["a", "b", "c"] and merged["lcm-mc"].metrics == own.metrics
    assert merged["vlind"].error == "boom"  # nothing added to an output that failed


def test_a_comparison_with_the_added_items_is_made_on_every_item_the_candidate_ran():
    candidate = _result(_mc_records([0.9] * 40, ids=[f"s{i}" for i in range(40)]))
    champion = _result(_mc_records([0.9] * 30, ids=[f"s{i}" for i in range(30)]))
    shared = decide(POLICY, {"lcm-mc": candidate}, {"lcm-mc": champion})
    completed = decide(POLICY, {"lcm-mc": candidate}, with_champion_items({"lcm-mc": champion}, {"lcm-mc": _mc_records([0.9] * 10, ids=[f"s{i}" for i in range(30, 40)])}))
    assert [c.n_shared for c in shared.checks if c.rule == "regression"] == [30]
    assert [c.n_shared for c in completed.checks if c.rule == "regression"] == [40]


def test_a_plan_for_the_champion_runs_exactly_the_missing_items_of_the_evaluators_lacking_some(tmp_path):
    import shutil

    data = tmp_path / "mc"
    shutil.copytree(EXAMPLES / "mc", data)
    (first,) = [json.loads(line) for line in (data / "items.jsonl").read_text().splitlines()][:1]
    (data / "items.jsonl").write_text("".join(json.dumps(first | {"id": f"q{n}"}) + "\n" for n in range(5)))
    plan = ValidationPlan.read(_config(tmp_path, _suite_text(**{"lcm-mc": {"data": str(data)}})), VersionRef(model="m", version="7"))
    champion = plan.at_look(0).for_champion("3", ItemIds(ids={"lcm-mc": ("q3", "q1")}))
    assert (champion.version, champion.model_uri, list(champion.suite.evaluators), champion.look) == ("3", "models:/m/3", ["lcm-mc"], None)
    assert champion.evaluator_digest("lcm-mc") == plan.evaluator_digest("lcm-mc")  # the same suite and protocol as the candidate's
    items, _ = load_items("lcm-mc", champion.suite.evaluators["lcm-mc"], tmp_path / "out", champion.items)
    assert [item.id for item in items] == ["q1", "q3"]  # exactly those, in the data set's order


def test_the_setting_defaults_to_evaluate_is_refused_when_read_and_changes_no_evaluator_s_cache_key(tmp_path):
    evaluate = ValidationPlan.read(_config(tmp_path, _suite_text()), VersionRef(model="m", version="1"))
    assert evaluate.suite.champion_items == "evaluate"
    shared = ValidationPlan.read(_config(tmp_path, _suite_text(champion_items="shared")), VersionRef(model="m", version="1"))
    assert shared.suite.champion_items == "shared" and shared.evaluator_digest("lcm-mc") == evaluate.evaluator_digest("lcm-mc")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(yaml.safe_load(_suite_text()) | {"champion_items": "sometimes"}))
    with pytest.raises(ValueError, match="champion_items"):
        Suite.from_file(tmp_path / "bad.yaml")
    assert json.loads(json.dumps(evaluate.as_logged()))["suite"]["champion_items"] == "evaluate"  # on record with the run
