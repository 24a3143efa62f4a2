"""The promotion gate: floors, ceilings, paired-bootstrap non-inferiority, fail-closed."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from vlgate.decisions import CheckKey, Rule
from vlgate.evaluators.metrics import score_test
from vlgate.evaluators.metrics.bootstrap import bootstrap_standard_error
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.gate.gates import decide
from vlgate.gate.policy import GatePolicy
from vlgate.versions import VersionRef


def _mc_records(p_right: list[float], ids=None) -> list[dict]:
    """Two-option lcm-mc records whose right option (0) gets p in the MC and yes/no tests."""
    ids = ids or [f"s{i}" for i in range(len(p_right))]
    return [{"id": i, "p_mc": [p, 1 - p], "p_yes": [p, 1 - p], "answer": 0} for i, p in zip(ids, p_right)]


def _result(records: list[dict]) -> EvaluatorOutput:
    return EvaluatorOutput.from_records("lcm-mc", records, score(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records))))


POLICY = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5}, regressions={"lcm-mc/lcm": {"max_drop": 0.02}}, resamples=500)


def test_first_candidate_is_promoted_on_floors_alone():
    decision = decide(POLICY, {"lcm-mc": _result(_mc_records([0.9] * 10))}, champion=None)
    assert decision.promote
    [regression] = [c for c in decision.checks if c.rule == "regression"]
    assert regression.verdict == "pass" and regression.champion is None and regression.p_value is None  # nothing to compare with


def test_a_clearly_worse_candidate_is_refused_by_the_regression_rule():
    champion = {"lcm-mc": _result(_mc_records([0.9] * 40))}
    candidate = {"lcm-mc": _result(_mc_records([0.8] * 40))}  # still accurate, but LCM drops 0.1 everywhere
    decision = decide(POLICY, candidate, champion)
    assert not decision.promote
    [failed] = [c for c in decision.checks if not c.passed]
    assert (failed.name, failed.verdict, failed.limit) == ("lcm-mc/lcm vs champion", "fail", -0.02) and len(decision.reasons) == 1
    assert failed.candidate - failed.champion == pytest.approx(-0.1) and failed.bound < -0.02
    # on 30 items the same drop is not shown: every observed change is -0.1, and a change of
    # -0.02 on average (7 % of items gaining 1, the rest losing 0.1) would look so 10 % of the time
    fewer = decide(POLICY, {"lcm-mc": _result(_mc_records([0.8] * 30))}, {"lcm-mc": _result(_mc_records([0.9] * 30))})
    assert fewer.outcome == "inconclusive" and [c.samples_needed for c in fewer.checks if not c.passed] == [39]


def test_an_equal_candidate_passes_non_inferiority_on_enough_items_and_a_noisy_better_one_too():
    """No change on n items shows a drop below 0.02 once a model losing 0.02 would rarely
    change nothing: the score test's Z is 0.02·√n/0.14 (2 % of items at -1 under the null),
    past z₀.₉₅ = 1.645 from n = 133."""
    rng = np.random.default_rng(3)
    champion_p = rng.uniform(0.6, 0.95, 140)
    champion = {"lcm-mc": _result(_mc_records(list(champion_p)))}
    assert decide(POLICY, {"lcm-mc": _result(_mc_records(list(champion_p)))}, champion).promote
    few = {"lcm-mc": _result(_mc_records(list(champion_p[:120])))}
    [check] = [c for c in decide(POLICY, few, few).checks if c.rule == "regression"]
    assert check.verdict == "inconclusive" and check.p_value == pytest.approx(stats.norm.cdf(0.02 * np.sqrt(120) / 0.14))
    better = np.clip(champion_p[:60] + rng.normal(0.05, 0.02, 60), 0, 1)
    assert decide(POLICY, {"lcm-mc": _result(_mc_records(list(better)))}, {"lcm-mc": _result(_mc_records(list(champion_p[:60])))}).promote


def test_fail_closed_on_missing_evaluator_error_expectations_and_undefined_metrics():
    policy = GatePolicy(required=["lcm-mc", "decc"], floors={"lcm-mc/acc": 0.5, "decc/acc": 0.1}, resamples=100)
    good = _result(_mc_records([0.9] * 5))
    decision = decide(policy, {"lcm-mc": good}, None)
    assert not decision.promote
    assert [(c.name, c.verdict, c.candidate) for c in decision.checks if not c.passed] == [("decc ran", "could not judge", None), ("decc/acc floor", "could not judge", None)]
    failed = decide(policy, {"lcm-mc": good, "decc": EvaluatorOutput.failed("decc", "CUDA out of memory")}, None)
    assert "decc ran: failed: CUDA out of memory" in failed.reasons
    bad_data = dataclasses.replace(good, expectations_passed=False)
    assert not decide(GatePolicy(required=["lcm-mc"], resamples=100), {"lcm-mc": bad_data}, None).promote
    # the reason names the failed expectations, the first two of them
    failures = [f"lcm-mc metric 'n_unanswered' = {k} is above 0: unusable output" for k in (1, 2, 3)]
    named = dataclasses.replace(bad_data, expectations={"success": False, "failures": failures})
    (reason,) = decide(GatePolicy(required=["lcm-mc"], resamples=100), {"lcm-mc": named}, None).reasons
    assert reason == (
        "lcm-mc expectations: failed expectations: metric 'n_unanswered' = 1 is above 0: unusable output; "
        "metric 'n_unanswered' = 2 is above 0: unusable output; 1 more in the validation report"
    )


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
    """Fail closed (ARCHITECTURE.md): any failed expectation or missing result means no promotion: ``required``
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
    from vlgate.decisions import Outcome, Verdict

    champion = {"lcm-mc": _result(_mc_records([0.9] * 40))}
    worse = decide(POLICY, {"lcm-mc": _result(_mc_records([0.8] * 40))}, champion)
    assert worse.outcome == Outcome.REJECTED
    by_rule = {check.rule: check for check in worse.checks}
    regression = by_rule["regression"].model_dump(mode="json")
    assert regression["verdict"] == "fail" and regression["metric"] == "lcm-mc/lcm" and regression["limit"] == -0.02
    # every record's LCM drops by exactly 0.1: candidate 0.8 vs champion 0.9; the score test's
    # interval ends where the null of a change μ (mass (μ + 0.1)/1.1 at +1 or (-0.1 - μ)/0.9 at -1,
    # the rest at -0.1) gives Z = ∓1.645
    assert regression["candidate"] == pytest.approx(0.8) and regression["champion"] == pytest.approx(0.9)
    low, high = regression["interval"]
    assert regression["bound"] == low and low < -0.1 < high < -0.02
    for mu, end in ((low, -1.0), (high, 1.0)):
        p = (mu + 0.1) / (end + 0.1)
        variance = p * (end - mu) ** 2 + (1 - p) * (-0.1 - mu) ** 2
        assert abs((-0.1 - mu) / np.sqrt(variance / 40)) == pytest.approx(stats.norm.isf(0.05), abs=1e-6)
    floor = by_rule["floor"].model_dump(mode="json")
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
        "category": None,
        "p_value": None,
        "n_shared": None,
        "samples_needed": None,
        "waiver": None,
        "verdict": "pass",
    }
    assert worse.as_json()["outcome"] == "rejected"

    assert decide(POLICY, {"lcm-mc": _result(_mc_records([0.9] * 30))}, None).outcome == Outcome.PROMOTED
    policy = GatePolicy(required=["lcm-mc", "decc"], floors={"lcm-mc/acc": 0.5}, resamples=100)
    missing = decide(policy, {"lcm-mc": _result(_mc_records([0.9] * 5))}, None)
    assert missing.outcome == Outcome.COULD_NOT_JUDGE  # nothing failed on the numbers: decc did not run
    assert [c.verdict for c in missing.checks if not c.passed] == [Verdict.COULD_NOT_JUDGE]
    below = decide(policy, {"lcm-mc": _result(_mc_records([0.2] * 5))}, None)
    assert below.outcome == Outcome.REJECTED  # a failed floor decides, whatever else is missing


# --- comparisons: three verdicts, the multiple-comparison correction, superiority ----------


def test_adjusted_p_values_and_the_sample_estimate_by_hand():
    from vlgate.evaluators.metrics.bootstrap import bonferroni_adjusted, holm_adjusted, samples_to_decide

    # sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1 = 0.04, 0.09, 0.08, 0.2; running maximum 0.04, 0.09, 0.09, 0.2
    assert holm_adjusted([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm_adjusted([0.5, 0.4]) == pytest.approx([0.8, 0.8]) and holm_adjusted([]) == []  # 0.4·2, then max(0.5·1, 0.8)
    assert bonferroni_adjusted([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.16, 0.12, 0.8])
    # half-width 0.04 against a gap of 0.03 on 100 samples: 100 * (4/3)^2 = 177.8
    assert samples_to_decide(100, 0.03, 0.04) == 178 and samples_to_decide(100, -0.03, 0.04) == 178
    assert samples_to_decide(100, 0.0, 0.04) is None and samples_to_decide(100, 0.05, 0.01) == 101


def _mc_output(p_right, categories, prefix="s") -> EvaluatorOutput:
    records = [{"id": f"{prefix}{i}", "p_mc": [p, 1 - p], "p_yes": [p, 1 - p], "answer": 0, "category": c} for i, (p, c) in enumerate(zip(p_right, categories))]
    return _result(records)


def _drifted_pair(shift: float, n: int = 40, copies: int = 1, categories=("a", "b", "c")):
    """A champion and a candidate whose per-sample p of the right option is lower by
    ``shift`` on average with noise, the same pattern in each category; ``copies`` repeats
    every sample (the same data, more of it)."""
    rng = np.random.default_rng(7)
    base = rng.uniform(0.6, 0.95, n)
    noise = rng.normal(0, 0.08, n)
    candidate = np.clip(base - shift + noise - noise.mean(), 0.5, 1)
    labels = [c for c in categories for _ in range(n * copies)]
    return (
        {"lcm-mc": _mc_output(list(np.tile(candidate, copies)) * len(categories), labels)},
        {"lcm-mc": _mc_output(list(np.tile(base, copies)) * len(categories), labels)},
    )


def test_holm_keeps_borderline_regressions_from_adding_up_to_a_rejection():
    """Three per-category regression rules, each with p ≈ 0.026 of being worse than the
    margin: alone each would reject; corrected over three comparisons none is shown."""
    from vlgate.decisions import Outcome

    candidate, champion = _drifted_pair(0.034)

    def compared(correction):
        policy = GatePolicy(required=["lcm-mc"], categories={"lcm-mc/lcm": {"max_drop": 0.01}}, correction=correction, resamples=400)
        decision = decide(policy, candidate, champion)
        return decision, [c for c in decision.checks if c.rule == "regression"]

    uncorrected, raw = compared("none")
    assert uncorrected.outcome == Outcome.REJECTED and [c.verdict for c in raw] == ["fail"] * 3
    assert [c.name for c in raw] == [f"lcm-mc/lcm[{c}] vs champion" for c in "abc"] and [c.category for c in raw] == list("abc")
    p = raw[0].p_value
    assert 0.05 / 3 < p <= 0.05 and {c.p_value for c in raw} == {p}
    holm, corrected = compared("holm")
    assert holm.outcome == Outcome.INCONCLUSIVE and [c.verdict for c in corrected] == ["inconclusive"] * 3
    assert [c.p_value for c in corrected] == pytest.approx([min(1.0, 3 * p)] * 3)  # equal p's: Holm is Bonferroni here
    assert compared("bonferroni")[0].outcome == Outcome.INCONCLUSIVE
    # a clear regression is still found after the correction
    clear, _ = _drifted_pair(0.05)
    assert decide(GatePolicy(required=["lcm-mc"], categories={"lcm-mc/lcm": {"max_drop": 0.01}}, resamples=400), clear, champion).outcome == Outcome.REJECTED


def test_an_inconclusive_comparison_says_how_many_samples_would_decide_and_that_many_do():
    from vlgate.decisions import Outcome

    policy = GatePolicy(required=["lcm-mc"], regressions={"lcm-mc/lcm": {"max_drop": 0.01}}, resamples=2000)
    candidate, champion = _drifted_pair(0.02, categories=("a",))
    decision = decide(policy, candidate, champion)
    [check] = [c for c in decision.checks if c.rule == "regression"]
    assert decision.outcome == Outcome.INCONCLUSIVE and not decision.promote
    assert check.verdict == "inconclusive" and check.interval[0] < -0.01 < check.interval[1]
    needed = check.samples_needed
    assert needed > 40
    # the same data, as many samples as estimated: the interval no longer spans the margin
    copies = -(-needed // 40)
    more_candidate, more_champion = _drifted_pair(0.02, copies=copies, categories=("a",))
    [decided] = [c for c in decide(policy, more_candidate, more_champion).checks if c.rule == "regression"]
    assert decided.verdict == "fail" and decided.n_shared == 40 * copies


def test_superiority_requires_the_candidate_shown_better():
    from vlgate.decisions import Outcome

    policy = GatePolicy(required=["lcm-mc"], superiority={"lcm-mc/lcm": {"min_gain": 0.0}}, resamples=500)
    champion = {"lcm-mc": _result(_mc_records([0.8] * 30))}
    same = decide(policy, {"lcm-mc": _result(_mc_records([0.8] * 30))}, champion)  # no change: neither shown better nor worse
    [check] = [c for c in same.checks if c.rule == "superiority"]
    assert same.outcome == Outcome.INCONCLUSIVE and check.name == "lcm-mc/lcm superiority" and not same.promote
    assert check.samples_needed is None and check.candidate == check.champion  # on the margin: no number of samples decides
    worse = decide(policy, {"lcm-mc": _result(_mc_records([0.7] * 30))}, champion)
    [check] = [c for c in worse.checks if c.rule == "superiority"]
    assert worse.outcome == Outcome.REJECTED and check.verdict == "fail" and check.bound <= check.limit == 0.0
    better = decide(policy, {"lcm-mc": _result(_mc_records([0.9] * 30))}, champion)
    assert better.outcome == Outcome.PROMOTED and better.checks[-1].bound > 0
    assert decide(policy, {"lcm-mc": _result(_mc_records([0.9] * 30))}, None).promote  # a first version has nothing to beat
    # a margin larger than the gain: shown not to clear it
    strict = GatePolicy(required=["lcm-mc"], superiority={"lcm-mc/lcm": {"min_gain": 0.5}}, resamples=500)
    assert decide(strict, {"lcm-mc": _result(_mc_records([0.9] * 30))}, champion).outcome == Outcome.REJECTED


def test_per_category_floors_with_only_and_min_samples():
    # category a: the right option likely (accuracy 1), b: the wrong one (accuracy 0), 3 of them
    output = _mc_output([0.9] * 6 + [0.3] * 3, ["a"] * 6 + ["b"] * 3)
    candidate = {"lcm-mc": output}
    every = decide(GatePolicy(required=["lcm-mc"], categories={"lcm-mc/acc": {"floor": 0.5}}), candidate, None)
    assert [(c.name, c.verdict, c.candidate) for c in every.checks if c.category] == [("lcm-mc/acc[a] floor", "pass", 1.0), ("lcm-mc/acc[b] floor", "fail", 0.0)]
    assert not every.promote and [c.name for c in every.checks if not c.passed] == ["lcm-mc/acc[b] floor"] and len(every.reasons) == 1
    assert decide(GatePolicy(required=["lcm-mc"], categories={"lcm-mc/acc": {"floor": 0.5, "only": ["a"]}}), candidate, None).promote
    skipping = decide(GatePolicy(required=["lcm-mc"], categories={"lcm-mc/acc": {"floor": 0.5, "min_samples": 4}}), candidate, None)
    assert skipping.promote and (skipping.checks[-1].name, skipping.checks[-1].verdict, skipping.checks[-1].candidate) == ("lcm-mc/acc[b] floor", "pass", None)
    missing = decide(GatePolicy(required=["lcm-mc"], categories={"lcm-mc/acc": {"floor": 0.5, "only": ["z"]}}), candidate, None)
    assert missing.outcome == "could not judge" and missing.checks[-1].name == "lcm-mc/acc[z] floor"
    # no categories in the records at all: fail closed
    bare = decide(GatePolicy(required=["lcm-mc"], categories={"lcm-mc/acc": {"floor": 0.5}}), {"lcm-mc": _result(_mc_records([0.9] * 4))}, None)
    assert bare.outcome == "could not judge"


def test_a_waiver_lets_one_named_check_through_until_its_day_and_is_recorded():
    from datetime import date

    waiver = {"check": "lcm-mc/acc floor", "by": "alice@example.com", "reason": "relabelling (JIRA-123)", "until": "2026-12-31"}
    policy = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.95, "lcm-mc/lcm": 0.0}, waivers=[waiver])
    candidate = {"lcm-mc": _result(_mc_records([0.9] * 3 + [0.3]))}  # accuracy 0.75
    decision = decide(policy, candidate, None, today=date(2026, 12, 31))
    assert decision.promote and decision.outcome == "promoted"
    waived = decision.checks[2]
    assert waived.verdict == "waived" and waived.model_dump(mode="json")["waiver"] == waiver
    assert (waived.candidate, waived.limit) == (0.75, 0.95) and decision.reasons[2] == f"{waived.name}: {waived.detail}"
    assert decision.policy["waivers"] == [waiver]  # the policy judged with goes with the decision
    expired = decide(policy, candidate, None, today=date(2027, 1, 1))
    [lapsed] = [c for c in expired.checks if not c.passed]
    assert expired.outcome == "rejected" and (lapsed.name, lapsed.verdict, lapsed.waiver) == ("lcm-mc/acc floor", "fail", None)
    # waived and otherwise rejected: the waiver is shown beside the reasons that stand
    worse = decide(policy.model_copy(update={"floors": {"lcm-mc/acc": 0.95, "lcm-mc/lcm": 0.99}}), candidate, None, today=date(2026, 12, 1))
    assert worse.outcome == "rejected" and [r.split(":")[0] for r in worse.reasons] == ["lcm-mc/acc floor", "lcm-mc/lcm floor"]


@pytest.mark.parametrize(
    "policy, says",
    [
        ({"superiority": {"lcm-mc/n_reliable": {}}}, "superiority.lcm-mc/n_reliable has no better direction"),
        ({"categories": {"lcm-mc/acc": {"only": ["a"]}}}, "a category rule needs floor, ceiling or max_drop"),
        ({"categories": {"lcm-mc/accuracy": {"floor": 0.1}}}, "categories.lcm-mc/accuracy: lcm-mc has no metric 'accuracy'"),
        ({"correction": "fdr"}, "correction: Input should be 'holm', 'bonferroni' or 'none'"),
        ({"waivers": [{"check": "lcm-mc/acc vs champion", "by": "a", "reason": "b", "until": "2030-01-01"}]}, "waivers.0.check: the policy makes no check"),
        ({"waivers": [{"check": "lcm-mc ran", "by": "", "reason": "b", "until": "2030-01-01"}]}, "waivers.0.by: String should have at least 1 character"),
        ({"waivers": [{"check": "lcm-mc ran", "by": "a", "reason": "b", "until": "soon"}]}, "waivers.0.until: Input should be a valid date"),
    ],
)
def test_policy_mistakes_are_refused_when_loaded(policy, says, tmp_path):
    import yaml

    from vlgate.config import ConfigError

    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(policy))
    with pytest.raises(ConfigError) as refused:
        GatePolicy.from_file(path)
    assert str(refused.value).startswith(f"gate policy {path}: ") and says in str(refused.value)


def test_waivers_may_name_every_check_the_policy_makes():
    policy = GatePolicy(
        required=["lcm-mc"],
        floors={"lcm-mc/acc": 0.5},
        regressions={"lcm-mc/lcm": {"max_drop": 0.01}},
        superiority={"lcm-mc/acc": {}},
        categories={"lcm-mc/lcm": {"max_drop": 0.05, "floor": 0.2, "only": ["animals"]}},
    )
    for name in ["lcm-mc ran", "decc expectations", "lcm-mc/acc floor", "lcm-mc/lcm vs champion", "lcm-mc/acc superiority", "lcm-mc/lcm[animals] vs champion", "lcm-mc/lcm[animals] floor"]:
        key = CheckKey.parse(name)
        assert key is not None and key.name == name and policy.makes_check(key), name
    for name in ["lcm-mc/acc ceiling", "lcm-mc/lcm[vehicles] floor", "lcm-mc/lcm[animals] ceiling", "lcm-mc/acc[animals] floor"]:
        assert not policy.makes_check(CheckKey.parse(name)), name
    assert CheckKey.parse("lcm-mc/lcm[animals] vs champion") == CheckKey(Rule.REGRESSION, "lcm-mc/lcm", "animals")
    assert CheckKey.parse("decc/reliable_rate/multi superiority") == CheckKey(Rule.SUPERIORITY, "decc/reliable_rate/multi")
    assert CheckKey.parse("lcm-mc/acc is fine") is None
    with pytest.raises(ValueError, match="needs decc, which the suite does not run"):
        policy.model_copy(update={"required": ["lcm-mc", "decc"]}).check_suite(["lcm-mc"])
    policy.check_suite(["lcm-mc", "decc"])


def test_draw_counts_count_each_rows_draws():
    from vlgate.evaluators.metrics.bootstrap import draw_counts

    counts = draw_counts(np.array([[0, 0, 2], [1, 2, 1]]), 3)
    assert counts.tolist() == [[2, 0, 1], [0, 2, 1]]


def test_the_one_pass_reweighting_computes_what_frame_by_frame_aggregation_does():
    """``resampled`` (the statistic of many reweighted copies at once) gives the same
    bootstrap standard error as the statistic on each resample's frame, and the same
    jackknife pseudo-values of a paired change as each leave-one-out frame."""
    rng = np.random.default_rng(3)
    candidate = pd.DataFrame({"id": [f"s{i}" for i in range(30)], "x": rng.random(30), "m": rng.random(30) < 0.6})
    champion = candidate.assign(x=rng.random(30))

    def share_of_x_in_m(frame):  # a ratio metric, undefined without an m row
        return frame.loc[frame["m"], "x"].sum() / frame["m"].sum() if frame["m"].any() else None

    def resampled(frame, counts):
        x, m = frame["x"].to_numpy(), frame["m"].to_numpy(dtype=float)
        return (counts @ (x * m)) / (counts @ m)

    slow = bootstrap_standard_error(candidate, share_of_x_in_m, resamples=400)
    fast = bootstrap_standard_error(candidate, share_of_x_in_m, resamples=400, resampled=resampled)
    assert fast == pytest.approx(slow, abs=1e-12) and fast > 0
    slow_paired = score_test.paired_score(candidate, champion, share_of_x_in_m)
    fast_paired = score_test.paired_score(candidate, champion, share_of_x_in_m, resampled)
    assert fast_paired.pseudo_values == pytest.approx(slow_paired.pseudo_values, abs=1e-12)
    assert fast_paired.difference == slow_paired.difference


def test_a_large_sample_is_reweighted_in_batches_with_the_same_values(monkeypatch):
    """Past ``RESAMPLED_CELLS`` (``JACKKNIFE_CELLS``) the resamples (leave-one-outs) are
    scored in batches, with the same values as in one pass."""
    from vlgate.evaluators.metrics import bootstrap

    rng = np.random.default_rng(5)
    candidate = pd.DataFrame({"id": range(40), "x": rng.random(40)})
    champion = candidate.assign(x=rng.random(40))
    calls = []

    def resampled(frame, counts):
        calls.append(len(counts))
        return counts @ frame["x"].to_numpy() / counts.sum(axis=1)

    whole = bootstrap_standard_error(candidate, lambda f: f["x"].mean(), resamples=50, resampled=resampled)
    monkeypatch.setattr(bootstrap, "RESAMPLED_CELLS", 40 * 7)  # 7 resamples per batch of 40 samples
    calls.clear()
    assert bootstrap_standard_error(candidate, lambda f: f["x"].mean(), resamples=50, resampled=resampled) == pytest.approx(whole, abs=1e-12)
    assert calls[:2] == [7, 7] and sum(calls) == 50
    monkeypatch.setattr(score_test, "JACKKNIFE_CELLS", 40 * 16)  # 16 leave-one-outs per batch
    calls.clear()
    batched = score_test.paired_score(candidate, champion, lambda f: f["x"].mean(), resampled)
    assert calls == [16, 16, 8] * 2 and batched.pseudo_values == pytest.approx(candidate["x"] - champion["x"], abs=1e-12)


def test_every_check_a_decision_makes_is_named_as_its_key_and_waivable_by_that_name():
    """Each check's printed name parses back to its own key, and a policy can waive exactly
    the checks it makes (every rule kind, per-category ones included)."""
    records = [r | {"category": "animals" if n % 2 else "vehicles"} for n, r in enumerate(_mc_records([0.9, 0.8, 0.7, 0.6] * 5))]
    policy = GatePolicy(
        required=["lcm-mc"],
        floors={"lcm-mc/acc": 0.5},
        ceilings={"lcm-mc/abstention": 0.9},
        regressions={"lcm-mc/lcm": {"max_drop": 0.02}},
        superiority={"lcm-mc/acc": {}},
        categories={"lcm-mc/lcm": {"floor": 0.1, "max_drop": 0.05}},
        resamples=200,
    )
    decision = decide(policy, {"lcm-mc": _result(records)}, {"lcm-mc": _result(records)})
    rules = {check.rule for check in decision.checks}
    # every rule but the alias's, which the recording step adds and no waiver can name
    assert rules == set(Rule) - {Rule.ALIAS} and any(check.category for check in decision.checks)
    for check in decision.checks:
        assert CheckKey.parse(check.name) == check.key and policy.makes_check(check.key), check.name
    assert CheckKey(Rule.ALIAS, "champion").name == "champion alias unchanged" and CheckKey.parse("champion alias unchanged") is None


@pytest.mark.parametrize(
    ("policy", "field", "error"),
    [
        ({"seed": -1}, ("seed",), "greater_than_equal"),
        ({"sequential": {"order_seed": -1}}, ("sequential", "order_seed"), "greater_than_equal"),
        ({"resamples": -2000}, ("resamples",), "greater_than_equal"),
        ({"confidence": 1.0}, ("confidence",), "less_than"),
        ({"confidence": 0.5}, ("confidence",), "greater_than"),
        ({"regressions": {"lcm-mc/acc": {"max_drop": -0.02}}}, ("regressions", "lcm-mc/acc", "max_drop"), "greater_than_equal"),
        ({"superiority": {"lcm-mc/acc": {"min_gain": -0.01}}}, ("superiority", "lcm-mc/acc", "min_gain"), "greater_than_equal"),
        ({"categories": {"lcm-mc/acc": {"floor": 0.4, "min_samples": 0}}}, ("categories", "lcm-mc/acc", "min_samples"), "greater_than_equal"),
        ({"floors": {"lcm-mc/acc": float("nan")}}, ("floors", "lcm-mc/acc"), "finite_number"),
    ],
)
def test_a_number_the_gate_cannot_use_is_refused_when_the_policy_is_read(policy, field, error, tmp_path):
    """Issue 43: a seed of −1 was read, and every validation then failed in numpy's
    generator ("expected non-negative integer", exit 4). Every number of a policy is held
    to what the code using it takes, and the file's error line names the key."""
    import pydantic
    import yaml

    from vlgate.config import ConfigError

    with pytest.raises(pydantic.ValidationError) as refused:
        GatePolicy.model_validate({"required": ["lcm-mc"], **policy})
    assert [(e["loc"], e["type"]) for e in refused.value.errors()] == [(field, error)]
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"required": ["lcm-mc"], **policy}))
    with pytest.raises(ConfigError) as read:
        GatePolicy.from_file(path)
    assert str(read.value).startswith(f"gate policy {path}: {'.'.join(field)}: ")


def test_vlgate_gate_refuses_a_negative_seed_in_one_line_with_exit_2(tmp_path, monkeypatch, capsys):
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "gate.yaml"
    path.write_text("required: [lcm-mc]\nsequential: {order_seed: -1}\n")
    assert main(["gate", "m", "1", "--policy", str(path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"vlgate gate: gate policy {path}: sequential.order_seed: ")


def test_the_words_of_a_check_are_made_from_its_numbers():
    """gate/rendering.py alone writes prose: each sentence from the fields the gate decided on."""
    from vlgate.decisions import Check, CheckKey, Rule, Verdict, Waiver
    from vlgate.gate import rendering

    assert rendering.bound(0.75, 0.95, floor=True, passed=False) == "0.7500 >= 0.95 fails"
    assert rendering.too_few_records(3, 4) == "skipped: 3 records < min_samples 4"
    regression, superiority = CheckKey(Rule.REGRESSION, "lcm-mc/acc"), CheckKey(Rule.SUPERIORITY, "lcm-mc/acc")
    below = Check.of(regression, Verdict.FAIL, "", candidate=0.8, champion=0.9, n_shared=40, interval=(-0.13, -0.07), limit=-0.02, p_value=0.001)
    shown_below = rendering.comparison(below, -0.1, 0.95, "holm", 3)
    assert shown_below == "0.8000 vs 0.9000 on 40 shared samples: change -0.1000 (shown below -0.02: holm-adjusted p 0.001 over 3 comparisons), 95% lower bound -0.1300 < -0.02 allowed"
    assert below.described(shown_below).detail == shown_below and below.described(shown_below).verdict is Verdict.FAIL
    spanning = Check.of(superiority, Verdict.INCONCLUSIVE, "", candidate=0.8, champion=0.8, n_shared=30, interval=(-0.05, 0.05), limit=0.0, p_value=0.5)
    undecided = rendering.comparison(spanning, 0.0, 0.95, "holm", 1)
    assert undecided.endswith("spans +0 (p 0.5): inconclusive, the estimate sits on the margin: no number of samples decides")
    assert rendering.comparison(spanning.model_copy(update={"samples_needed": 120}), 0.0, 0.95, "holm", 1).endswith("inconclusive, about 120 shared samples would decide")
    ceiling = Check.of(CheckKey(Rule.CEILING, "vlind/one_answer_share"), Verdict.FAIL, "", limit=0.9, n_shared=50, p_value=0.004)
    at_look = rendering.look_test(ceiling, -0.95, 2.5, 0.01, "look 2 of 4, 50% of the items", last=False)
    assert at_look == "0.9500 on 50 records (z +2.50, p 0.004): shown beyond +0.9 at look 2 of 4, 50% of the items"  # the ceiling's value, not its negation
    within = Check.of(regression, Verdict.PASS, "", candidate=0.9, champion=0.88, n_shared=60, limit=-0.02, p_value=0.9)
    assert rendering.look_test(within, 0.02, -1.2, 0.0123, "look 1 of 2, 50% of the items", last=False) == (
        "0.9000 vs 0.8800 on 60 shared samples: change +0.0200 (z -1.20): shown within -0.02 at look 1 of 2, 50% of the items (level 0.0123)"
    )
    waiver = Waiver(check="lcm-mc/acc floor", by="alice@example.com", reason="relabelling (JIRA-123)", until="2026-12-31")
    assert rendering.waived("0.7500 >= 0.95 fails", waiver) == "0.7500 >= 0.95 fails; WAIVED by alice@example.com until 2026-12-31: relabelling (JIRA-123)"
    assert rendering.waiver_expired("x", waiver) == "x (waiver by alice@example.com expired on 2026-12-31)"


def test_each_correction_adjusts_and_splits_alpha_as_its_name_says():
    from vlgate.gate.corrections import correction

    p_values = [0.01, 0.04, 0.03]
    holm, bonferroni, none = correction("holm"), correction("bonferroni"), correction("none")
    # Holm: sorted 0.01·3, 0.03·2, 0.04·1, then the running maximum, back in the given order
    assert holm.adjusted(p_values) == pytest.approx([0.03, 0.06, 0.06])
    assert bonferroni.adjusted(p_values) == pytest.approx([0.03, 0.12, 0.09]) and none.adjusted(p_values) == p_values
    assert holm.fail_level(0.05, 3) == bonferroni.fail_level(0.05, 3) == pytest.approx(0.05 / 3) and none.fail_level(0.05, 3) == 0.05
    assert holm.fail_level(0.05, 0) == 0.05  # nothing tested: nothing to split
    # at a one-look design's last look, Holm's step-down at the look is Holm's procedure itself
    assert list(holm.failed_at_look(p_values, 0.05, [1.0], 0, "obrien-fleming")) == [True, False, False]
    assert list(bonferroni.failed_at_look(p_values, 0.05, [1.0], 0, "obrien-fleming")) == [True, False, False]
    assert list(none.failed_at_look(p_values, 0.05, [1.0], 0, "obrien-fleming")) == [True, True, True]


def test_the_policy_and_the_look_choose_the_gate():
    from vlgate.gate.gates import FixedSampleGate, SequentialGate, gate_for

    fixed = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5})
    designed = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5}, sequential={"looks": [0.5, 1.0]})
    assert gate_for(fixed) == gate_for(fixed, look=1) == FixedSampleGate(fixed)  # no design: a look is every item
    assert gate_for(designed) == FixedSampleGate(designed) and gate_for(designed, look=1) == SequentialGate(designed, 1)


def test_validate_prints_the_decision_from_the_typed_result(capsys):
    """``vlgate validate``'s text: the verdict, each rule's (the failed first), the looks of a
    sequential validation, the records from the cache and the report, read off the result."""
    from vlgate.cli.commands.registered import print_decision
    from vlgate.decisions import DecisionRecord, LookRecord, LookSummary, Outcome, SequentialRecord
    from vlgate.flows.validation import ValidationResult

    champion = {"lcm-mc": _result(_mc_records([0.9] * 40))}
    record = DecisionRecord.model_validate(decide(POLICY, {"lcm-mc": _result(_mc_records([0.8] * 40))}, champion).as_json())
    looks = [
        LookSummary(look=LookRecord(index=0, of=2, fraction=0.5, settled=False), outcome=Outcome.PROMOTED, items={"lcm-mc": 20}),
        LookSummary(look=LookRecord(index=1, of=2, fraction=1.0, settled=True), outcome=Outcome.REJECTED, items={"lcm-mc": 40}),
    ]
    sequential = SequentialRecord(looks=looks, items_evaluated={"lcm-mc": 40}, items_total={"lcm-mc": 40})
    result = ValidationResult(model="m", version="2", record=record, sequential=sequential, records_from_cache={"lcm-mc": 30}, records_total={"lcm-mc": 40}, report="r.html")
    print_decision(result)
    lines = capsys.readouterr().out.splitlines()
    failed = [c for c in record.checks if c.verdict == "fail"]
    assert lines[0] == "m v2: rejected" and failed
    assert lines[1 : 1 + len(failed)] == [f"  {'fail':<15} {c.name}: {c.detail}" for c in failed]  # the failed rules first
    assert lines[-5:] == [
        "  look 1 of 2 (50%): goes on (lcm-mc 20 items)",
        "  look 2 of 2 (100%): rejected (lcm-mc 40 items)",
        "  items evaluated: 40 of 40; 0% saved",
        "  records from the cache: lcm-mc 30 of 40",
        "report: r.html",
    ]
    print_decision(ValidationResult.failed(VersionRef(model="m", version="3"), "RuntimeError: the registry was away"))
    assert capsys.readouterr().out.splitlines() == ["m v3: could not judge", "  validation failed: RuntimeError: the registry was away"]
