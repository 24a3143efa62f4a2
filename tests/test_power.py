"""Power planning (gate/power.py): each rule's detectable change and the items its margin
needs, by hand on 0/1 scores of known spread, and the warnings that name the rule."""

from __future__ import annotations

import json
import math

import pytest

from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.gate.policy import GatePolicy
from vlgate.gate.power import MeasuredOn, plan_power

Z_80, Z_95 = 0.841621, 1.644854


def output(right: list[bool], categories: list[str] | None = None) -> EvaluatorOutput:
    """lcm-mc records, right or wrong on each item (accuracy 0/1 per item)."""
    records = [{"id": f"s{i}", "p_mc": [0.9, 0.1] if ok else [0.1, 0.9], "p_yes": [0.9, 0.1] if ok else [0.1, 0.9], "answer": 0} for i, ok in enumerate(right)]
    for record, category in zip(records, categories or [], strict=False):
        record["category"] = category
    return EvaluatorOutput.from_records("lcm-mc", records, score(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records))))


CHAMPION = [True] * 120 + [False] * 80  # accuracy 0.6 on 200 items: per-item spread √0.24
#: right on 5 items the champion misses, wrong on 5 it gets right: paired spread √(10/200)
BASELINE = [True] * 115 + [False] * 5 + [True] * 5 + [False] * 75


def row(plan, check):
    return next(r for r in plan.rules if r.check == check)


def test_a_plan_from_the_champion_alone_gives_the_power_equation_s_numbers_and_warns_naming_the_rule():
    policy = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5, "lcm-mc/lcm": 0.99}, regressions={"lcm-mc/acc": {"max_drop": 0.05}}, resamples=4000)
    plan = plan_power("m", policy, {"lcm-mc": 200}, MeasuredOn("3", {"lcm-mc": output(CHAMPION)}))
    spread = math.sqrt(0.24)
    floor = row(plan, "lcm-mc/acc floor")
    assert (floor.items, floor.margin) == (200, pytest.approx(0.1)) and floor.spread == pytest.approx(spread, rel=0.04)
    assert floor.detectable == pytest.approx(Z_80 * spread / math.sqrt(200), rel=0.04)  # judged on the estimate itself
    assert floor.items_needed == pytest.approx((Z_80 * spread / 0.1) ** 2, rel=0.1) and floor.warning is None  # 17 items
    regression = row(plan, "lcm-mc/acc vs champion")
    paired = math.sqrt(2) * spread  # no earlier version: two uncorrelated versions
    assert regression.spread == pytest.approx(paired, rel=0.04) and "uncorrelated" in regression.spread_from
    assert regression.detectable == pytest.approx((Z_95 + Z_80) * paired / math.sqrt(200), rel=0.04)
    assert regression.items_needed == pytest.approx(((Z_95 + Z_80) * paired / 0.05) ** 2, rel=0.08)  # about 1,190
    assert regression.warning.startswith("lcm-mc/acc vs champion (max_drop 0.05): 200 items") and f"about {regression.items_needed:,} items" in regression.warning
    assert row(plan, "lcm-mc/lcm floor").warning.startswith("lcm-mc/lcm floor 0.99: the champion itself is on the wrong side")
    assert len(plan.warnings) == 2


def test_the_paired_spread_comes_from_the_champion_and_the_version_before_it():
    policy = GatePolicy(required=["lcm-mc"], regressions={"lcm-mc/acc": {"max_drop": 0.05}}, resamples=4000)
    plan = plan_power("m", policy, {"lcm-mc": 200}, MeasuredOn("3", {"lcm-mc": output(CHAMPION)}), MeasuredOn("2", {"lcm-mc": output(BASELINE)}))
    regression = row(plan, "lcm-mc/acc vs champion")
    assert regression.spread == pytest.approx(math.sqrt(10 / 200), rel=0.05) and regression.spread_from == "champion v3 paired with v2"
    assert regression.items_needed == pytest.approx(((Z_95 + Z_80) * math.sqrt(0.05) / 0.05) ** 2, rel=0.1)  # about 124: the suite suffices
    assert regression.warning is None and plan.baseline == "2"


def test_without_a_champion_the_largest_spread_is_assumed_and_holm_s_level_sizes_failures():
    policy = GatePolicy(required=["lcm-mc"], regressions={"lcm-mc/acc": {"max_drop": 0.05}, "lcm-mc/lcm": {"max_drop": 0.0}}, superiority={"lcm-mc/acc": {"min_gain": 0.0}})
    plan = plan_power("m", policy, {"lcm-mc": 400})
    regression = row(plan, "lcm-mc/acc vs champion")
    assert regression.spread == pytest.approx(math.sqrt(2) * 0.5) and regression.spread_from.startswith("assumed")
    assert regression.level == pytest.approx(0.05 / 3)  # Holm's first step over the three comparisons
    assert regression.detectable == pytest.approx((2.128045 + Z_80) * math.sqrt(0.5) / 20, rel=1e-5)  # z at 0.05/3
    assert regression.items_needed == math.ceil(((Z_95 + Z_80) * math.sqrt(0.5) / 0.05) ** 2)  # 1,237: passing needs α only
    assert "max_drop 0): a candidate as good as the champion passes with probability 0.05 only" in row(plan, "lcm-mc/lcm vs champion").warning
    superiority = row(plan, "lcm-mc/acc superiority")
    assert superiority.items_needed is None and superiority.warning is None and superiority.level == pytest.approx(0.05)


def test_per_category_rules_are_sized_on_each_category_s_items():
    """150 animals (accuracy 0.6) and 50 vehicles: Holm's first step counts one comparison
    per category; each category's rows use its own items and spread."""
    categories = ["animals"] * 150 + ["vehicles"] * 50
    right = [True] * 90 + [False] * 60 + [True] * 25 + [False] * 25
    policy = GatePolicy(required=["lcm-mc"], categories={"lcm-mc/acc": {"floor": 0.4, "max_drop": 0.1}}, resamples=4000)
    plan = plan_power("m", policy, {"lcm-mc": 200}, MeasuredOn("3", {"lcm-mc": output(right, categories)}))
    animals, vehicles = row(plan, "lcm-mc/acc[animals] floor"), row(plan, "lcm-mc/acc[vehicles] floor")
    assert (animals.items, vehicles.items) == (150, 50) and animals.margin == pytest.approx(0.2) and vehicles.margin == pytest.approx(0.1)
    assert animals.spread == pytest.approx(math.sqrt(0.24), rel=0.05) and vehicles.spread == pytest.approx(0.5, rel=0.05)
    regression = row(plan, "lcm-mc/acc[vehicles] vs champion")
    assert regression.level == pytest.approx(0.05 / 2) and regression.items == 50
    assert regression.detectable == pytest.approx((1.959964 + Z_80) * math.sqrt(2) * 0.5 / math.sqrt(50), rel=0.05)


def test_a_suite_whose_data_set_has_no_items_plans_as_valid_json_with_no_detectable_change(tmp_path, monkeypatch, capsys):
    """Issue 43: on an empty data set nothing is detectable (the minimum detectable effect
    is +∞ at n = 0), which ``vlgate plan --json`` printed as a traceback, JSON having no
    infinity. The plan says null, and the rule's warning why."""
    import yaml

    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "mc").mkdir()
    (tmp_path / "mc" / "items.jsonl").write_text("")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({"name": "empty", "evaluators": {"lcm-mc": {"data": str(tmp_path / "mc")}}}))
    policy = {"required": ["lcm-mc"], "floors": {"lcm-mc/acc": 0.5}, "regressions": {"lcm-mc/acc": {"max_drop": 0.02}}, "superiority": {"lcm-mc/lcm": {}}}
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "vlgate.yaml").write_text(yaml.safe_dump({"models": {"m": {"suite": "suite.yaml", "policy": "gate.yaml"}}}))
    assert main(["plan", "m", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [(r["check"], r["items"], r["detectable"]) for r in plan["rules"]] == [
        ("lcm-mc/acc floor", 0, None),
        ("lcm-mc/acc vs champion", 0, None),
        ("lcm-mc/lcm superiority", 0, None),
    ]
    assert all(r["warning"] == f"{r['check']}: no items to judge it on" for r in plan["rules"]) and plan["warnings"] == [r["warning"] for r in plan["rules"]]
    assert main(["plan", "m"]) == 0  # the table shows the same rows
