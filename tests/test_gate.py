"""The promotion gate: floors, ceilings, paired-bootstrap non-inferiority, fail-closed."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from vlgate.evaluators.metrics.bootstrap import paired_bootstrap_difference
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.flows.gate import GatePolicy, decide


def _mc_records(p_right: list[float], ids=None) -> list[dict]:
    """Two-option lcm-mc records whose right option (0) gets p in the MC and yes/no tests."""
    ids = ids or [f"s{i}" for i in range(len(p_right))]
    return [{"id": i, "p_mc": [p, 1 - p], "p_yes": [p, 1 - p], "answer": 0} for i, p in zip(ids, p_right)]


def _result(records: list[dict]) -> EvaluatorOutput:
    return EvaluatorOutput.from_records("lcm-mc", records, score(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records))))


def test_paired_bootstrap_of_identical_models_is_exactly_zero():
    frame = pd.DataFrame({"id": list("abcdef"), "x": [0.1, 0.9, 0.4, 0.7, 0.3, 0.5]})
    result = paired_bootstrap_difference(frame, frame, lambda f: f["x"].mean(), resamples=500)
    assert (result.n_shared, result.difference, result.lower, result.upper) == (6, 0.0, 0.0, 0.0)


def test_paired_bootstrap_sees_a_constant_shift_exactly_and_pairs_by_id():
    rng = np.random.default_rng(1)
    base = rng.random(200)
    champion = pd.DataFrame({"id": [f"s{i}" for i in range(200)], "x": base})
    # the candidate is 0.1 lower on every sample, listed in another order, with extra ids
    candidate = pd.DataFrame({"id": [f"s{i}" for i in range(199, -1, -1)] + ["new"], "x": list(base[::-1] - 0.1) + [5.0]})
    result = paired_bootstrap_difference(candidate, champion, lambda f: f["x"].mean(), resamples=500)
    assert result.n_shared == 200
    assert result.difference == pytest.approx(-0.1) and result.lower == pytest.approx(-0.1) and result.upper == pytest.approx(-0.1)


def test_paired_bootstrap_interval_matches_the_normal_approximation_for_a_mean():
    rng = np.random.default_rng(2)
    champion = pd.DataFrame({"id": range(400), "x": rng.random(400)})
    candidate = champion.assign(x=champion["x"] + rng.normal(0.05, 0.2, 400))
    result = paired_bootstrap_difference(candidate, champion, lambda f: f["x"].mean(), confidence=0.95, resamples=4000)
    d = (candidate["x"] - champion["x"]).to_numpy()
    half = 1.645 * d.std(ddof=1) / np.sqrt(len(d))  # one-sided 95%
    assert result.lower == pytest.approx(d.mean() - half, abs=0.004)
    assert result.upper == pytest.approx(d.mean() + half, abs=0.004)


def test_undefined_statistic_gives_no_bounds():
    frame = pd.DataFrame({"id": list("abc"), "x": [1.0, 2.0, 3.0]})
    result = paired_bootstrap_difference(frame, frame, lambda f: None)
    assert result.lower is None and result.difference is None


POLICY = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5}, regressions={"lcm-mc/lcm": {"max_drop": 0.02}}, resamples=500)


def test_first_candidate_is_promoted_on_floors_alone():
    decision = decide(POLICY, {"lcm-mc": _result(_mc_records([0.9] * 10))}, champion=None)
    assert decision.promote
    assert any("no champion yet" in reason for reason in decision.reasons)


def test_a_clearly_worse_candidate_is_refused_by_the_regression_rule():
    champion = {"lcm-mc": _result(_mc_records([0.9] * 30))}
    candidate = {"lcm-mc": _result(_mc_records([0.8] * 30))}  # still accurate, but LCM drops 0.1 everywhere
    decision = decide(POLICY, candidate, champion)
    assert not decision.promote
    (reason,) = decision.reasons
    assert reason.startswith("lcm-mc/lcm vs champion") and "-0.1000" in reason and "< -0.02 allowed" in reason


def test_an_equal_candidate_passes_non_inferiority_and_a_noisy_better_one_too():
    rng = np.random.default_rng(3)
    champion_p = rng.uniform(0.6, 0.95, 60)
    champion = {"lcm-mc": _result(_mc_records(list(champion_p)))}
    assert decide(POLICY, {"lcm-mc": _result(_mc_records(list(champion_p)))}, champion).promote
    better = np.clip(champion_p + rng.normal(0.05, 0.02, 60), 0, 1)
    assert decide(POLICY, {"lcm-mc": _result(_mc_records(list(better)))}, champion).promote


def test_fail_closed_on_missing_evaluator_error_expectations_and_undefined_metrics():
    policy = GatePolicy(required=["lcm-mc", "decc"], floors={"lcm-mc/acc": 0.5, "decc/acc": 0.1}, resamples=100)
    good = _result(_mc_records([0.9] * 5))
    decision = decide(policy, {"lcm-mc": good}, None)
    assert not decision.promote
    assert "decc ran: no result (fail closed)" in decision.reasons and "decc/acc floor: metric missing or undefined (fail closed)" in decision.reasons
    failed = decide(policy, {"lcm-mc": good, "decc": EvaluatorOutput.failed("decc", "CUDA out of memory")}, None)
    assert "decc ran: failed: CUDA out of memory" in failed.reasons
    bad_data = dataclasses.replace(good, expectations_passed=False)
    assert not decide(GatePolicy(required=["lcm-mc"], resamples=100), {"lcm-mc": bad_data}, None).promote


def test_floor_and_ceiling_directions():
    policy = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.95}, ceilings={"lcm-mc/lcm": 0.5}, resamples=100)
    decision = decide(policy, {"lcm-mc": _result(_mc_records([0.9] * 4))}, None)
    failed = {reason.split(":")[0] for reason in decision.reasons}
    assert failed == {"lcm-mc/lcm ceiling"}  # acc is 1.0 >= 0.95; lcm 0.9 > 0.5


def test_policy_file_errors_name_the_field(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text("floors:\n  lcm-mc/acc: high\n")
    with pytest.raises(ValueError, match=r"floors.lcm-mc/acc"):
        GatePolicy.from_file(path)
    path.write_text("floors:\n  accuracy: 0.5\n")
    with pytest.raises(ValueError, match="EVALUATOR/METRIC"):
        GatePolicy.from_file(path)


def test_an_evaluator_the_policy_does_not_require_still_blocks_promotion_when_it_fails():
    """SPEC §3: any failed expectation or missing result means no promotion: ``required``
    says which evaluators must be there, not which failures count."""
    policy = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/lcm": 0.0})
    good = _result(_mc_records([0.9, 0.8, 0.7, 0.6]))
    assert decide(policy, {"lcm-mc": good}, None).promote
    crashed = decide(policy, {"lcm-mc": good, "vlind": EvaluatorOutput.failed("vlind", "RuntimeError: out of memory")}, None)
    assert not crashed.promote
    assert [c.name for c in crashed.checks if not c.passed] == ["vlind ran"]
    unchecked = dataclasses.replace(_result(_mc_records([0.9, 0.8])), evaluator="vlind", expectations_passed=False)
    refused = decide(policy, {"lcm-mc": good, "vlind": unchecked}, None)
    assert not refused.promote
    assert [c.name for c in refused.checks if not c.passed] == ["vlind expectations"]
    passing = dataclasses.replace(unchecked, expectations_passed=True)
    assert decide(policy, {"lcm-mc": good, "vlind": passing}, None).promote  # judged, and fine


def test_structured_checks_and_the_outcome_ci_acts_on():
    from vlgate.flows.gate import NOT_JUDGED, PROMOTED, REJECTED

    champion = {"lcm-mc": _result(_mc_records([0.9] * 30))}
    worse = decide(POLICY, {"lcm-mc": _result(_mc_records([0.8] * 30))}, champion)
    assert worse.outcome == REJECTED
    by_rule = {check.rule: check for check in worse.checks}
    regression = by_rule["regression"].as_dict()
    assert regression["verdict"] == "fail" and regression["metric"] == "lcm-mc/lcm" and regression["limit"] == -0.02
    # every record's LCM drops by exactly 0.1: candidate 0.8 vs champion 0.9, a degenerate interval at -0.1
    assert regression["candidate"] == pytest.approx(0.8) and regression["champion"] == pytest.approx(0.9)
    assert regression["interval"] == pytest.approx([-0.1, -0.1]) and regression["bound"] == pytest.approx(-0.1)
    floor = by_rule["floor"].as_dict()
    assert floor | {"detail": None} == {
        "name": "lcm-mc/acc floor",
        "passed": True,
        "detail": None,
        "rule": "floor",
        "metric": "lcm-mc/acc",
        "candidate": 1.0,
        "champion": None,
        "limit": 0.5,
        "interval": None,
        "bound": None,
        "verdict": "pass",
    }
    assert json.loads(json.dumps(worse.as_dict()))["outcome"] == "rejected"

    assert decide(POLICY, {"lcm-mc": _result(_mc_records([0.9] * 30))}, None).outcome == PROMOTED
    policy = GatePolicy(required=["lcm-mc", "decc"], floors={"lcm-mc/acc": 0.5}, resamples=100)
    missing = decide(policy, {"lcm-mc": _result(_mc_records([0.9] * 5))}, None)
    assert missing.outcome == NOT_JUDGED  # nothing failed on the numbers: decc did not run
    assert [c.verdict for c in missing.checks if not c.passed] == [NOT_JUDGED]
    below = decide(policy, {"lcm-mc": _result(_mc_records([0.2] * 5))}, None)
    assert below.outcome == REJECTED  # a failed floor decides, whatever else is missing
