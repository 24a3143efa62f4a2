"""The group-sequential gate (gate/sequential.py: decide_at_look): rules decided at interim
looks on the records of a look, what settles a decision, the last look as the fixed gate
judges floors, and the same statistic the simulated error rates were measured on."""

from __future__ import annotations

import json

import numpy as np
import pydantic
import pytest

from vlgate.decisions import Outcome, Verdict
from vlgate.evaluators.metrics import score_test, sequential
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, validate
from vlgate.gate.gates import decide
from vlgate.gate.policy import GatePolicy

LOOKS = [0.25, 0.5, 0.75, 1.0]


def output(right: np.ndarray, ids: list[str] | None = None) -> EvaluatorOutput:
    """lcm-mc records right or wrong on each item (accuracy 0/1 per item)."""
    ids = ids or [f"s{i}" for i in range(len(right))]
    records = [{"id": i, "p_mc": [0.9, 0.1] if ok else [0.1, 0.9], "p_yes": [0.9, 0.1] if ok else [0.1, 0.9], "answer": 0} for i, ok in zip(ids, right, strict=True)]
    return EvaluatorOutput.from_records("lcm-mc", records, score(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records))))


def policy(**rules) -> GatePolicy:
    sequential_design = {"looks": LOOKS, "promote_early": rules.pop("promote_early", False), "spending": rules.pop("spending", "obrien-fleming")}
    return GatePolicy(required=["lcm-mc"], resamples=2000, sequential=sequential_design, **rules)


def at_look(right: np.ndarray, look: int) -> dict[str, EvaluatorOutput]:
    """The candidate's records of a look: its first items (the order is the test's)."""
    size = sequential.items_at(LOOKS[look], len(right))
    return {"lcm-mc": output(right[:size])}


RNG = np.random.default_rng(5)
CHAMPION = RNG.random(400) < 0.7


def test_a_candidate_far_behind_the_champion_is_rejected_at_the_first_look():
    worse = CHAMPION & (RNG.random(400) < 0.6)  # loses about 40 % of the champion's right answers
    # and a floor it clears, though not by enough for a first look to show it
    decision = decide(policy(regressions={"lcm-mc/acc": {"max_drop": 0.02}}, floors={"lcm-mc/acc": 0.35}), at_look(worse, 0), {"lcm-mc": output(CHAMPION)}, look=0)
    (regression,) = [c for c in decision.checks if c.rule == "regression"]
    assert regression.verdict is Verdict.FAIL and regression.n_shared == 100 and (decision.look.index, decision.look.of, decision.look.fraction) == (0, 4, 0.25)
    assert decision.outcome is Outcome.REJECTED and decision.settled and decision.look.index == 0 and not decision.promote
    (floor,) = [c for c in decision.checks if c.rule == "floor"]
    assert floor.verdict is Verdict.INCONCLUSIVE and floor.samples_needed is None  # not decided yet: a later look may
    # what stopped it is the reason; the floor a later look would have decided is not
    assert decision.reasons == [f"{regression.name}: {regression.detail}"]


def test_an_undecided_look_goes_on_and_promotes_early_only_where_the_policy_says():
    differs = CHAMPION.copy()
    differs[RNG.random(400) < 0.1] ^= True  # a tenth of the answers changed either way
    rule = {"regressions": {"lcm-mc/acc": {"max_drop": 0.02}}}
    undecided = decide(policy(**rule), at_look(differs, 0), {"lcm-mc": output(CHAMPION)}, look=0)
    (regression,) = [c for c in undecided.checks if c.rule == "regression"]
    assert regression.verdict is Verdict.INCONCLUSIVE and regression.samples_needed is None and regression.n_shared == 100
    assert not undecided.settled and not undecided.promote
    # identical answers on the first 100 items: no item lost shows at once that the candidate
    # does not lose 0.2 of them (one that did would lose some of 100 almost surely: Z = 5)
    same = CHAMPION.copy()
    rule = {"regressions": {"lcm-mc/acc": {"max_drop": 0.2}}}
    early = decide(policy(**rule, promote_early=True), at_look(same, 0), {"lcm-mc": output(CHAMPION)}, look=0)
    assert early.settled and early.promote and early.outcome is Outcome.PROMOTED
    waits = decide(policy(**rule), at_look(same, 0), {"lcm-mc": output(CHAMPION)}, look=0)
    assert all(c.passed for c in waits.checks) and not waits.settled and not waits.promote  # without promote_early it goes on


def test_floors_are_tested_at_interim_looks_and_judged_on_the_estimate_at_the_last():
    poor = RNG.random(400) < 0.2
    decision = decide(policy(floors={"lcm-mc/acc": 0.6}), at_look(poor, 0), None, look=0)
    (floor,) = [c for c in decision.checks if c.rule == "floor"]
    assert floor.verdict is Verdict.FAIL and decision.settled and decision.outcome is Outcome.REJECTED
    near = np.zeros(400, dtype=bool)
    near[:196] = True  # accuracy 0.49 against a floor of 0.5: no interim look can show it
    for look in range(3):
        interim = decide(policy(floors={"lcm-mc/acc": 0.5}), {"lcm-mc": output(near[: sequential.items_at(LOOKS[look], 400)])}, None, look=look)
        assert not interim.settled, look
    last = decide(policy(floors={"lcm-mc/acc": 0.5}), {"lcm-mc": output(near)}, None, look=3)
    (floor,) = [c for c in last.checks if c.rule == "floor"]
    assert (floor.verdict, floor.candidate, floor.limit, floor.interval) == (Verdict.FAIL, 0.49, 0.5, None) and last.settled  # on the estimate, as the fixed gate


def test_a_failed_evaluator_settles_at_once_and_fails_closed():
    decision = decide(policy(floors={"lcm-mc/acc": 0.5}), {"lcm-mc": EvaluatorOutput.failed("lcm-mc", "CUDA out of memory")}, None, look=0)
    assert decision.settled and decision.outcome is Outcome.COULD_NOT_JUDGE


def test_the_gate_s_statistic_is_the_simulated_one():
    """A regression's p-value at each look is the simulation's (Tango's statistic on the
    look's items), and the last look is the fixed-sample gate's own test (its p-value, its
    pass), so the simulated error rates are the gate's."""
    candidate = CHAMPION.copy()
    flips = RNG.random(400)
    candidate[flips < 0.08] = ~candidate[flips < 0.08]
    differences = candidate.astype(float) - CHAMPION
    simulated = score_test.paired_score_p_values(differences, -0.05, sequential.look_sizes(400, LOOKS))[0][0]
    rule = {"regressions": {"lcm-mc/acc": {"max_drop": 0.05}}}
    for look in range(len(LOOKS) - 1):
        decision = decide(policy(**rule), at_look(candidate, look), {"lcm-mc": output(CHAMPION)}, look=look)
        (regression,) = [c for c in decision.checks if c.rule == "regression"]
        assert regression.p_value == pytest.approx(simulated[look], rel=1e-9), look
    for max_drop in (0.01, 0.1):  # one not passing on every item, one passing
        rule = {"regressions": {"lcm-mc/acc": {"max_drop": max_drop}}}
        last = decide(policy(**rule), at_look(candidate, 3), {"lcm-mc": output(CHAMPION)}, look=3)
        fixed = decide(GatePolicy(required=["lcm-mc"], resamples=2000, **rule), {"lcm-mc": output(candidate)}, {"lcm-mc": output(CHAMPION)})
        (at_last,), (once,) = ([c for c in d.checks if c.rule == "regression"] for d in (last, fixed))
        assert at_last.p_value == once.p_value and (at_last.verdict is Verdict.PASS) == (once.verdict is Verdict.PASS) == (max_drop == 0.1), max_drop


def test_pocock_spending_rejects_at_the_first_look_what_obrien_fleming_leaves_to_a_later_one():
    """The look's nominal level is the policy's spending's: at the first of four looks
    O'Brien–Fleming-type spending rejects at p ≤ 8.9e-5, Pocock-type at p ≤ 0.018; a
    regression shown at p in between stops only under Pocock. A spending the gate does not
    know is refused when the policy is read."""
    worse = CHAMPION.copy()
    lost = np.flatnonzero(CHAMPION[:100])[:8]  # 8 of the first 100 items lost, none gained: p 0.0076
    worse[lost] = False
    rule = {"regressions": {"lcm-mc/acc": {"max_drop": 0.02}}}
    (obf,), (pocock,) = ([c for c in decide(policy(**rule, spending=spending), at_look(worse, 0), {"lcm-mc": output(CHAMPION)}, look=0).checks if c.rule == "regression"] for spending in ("obrien-fleming", "pocock"))
    assert obf.p_value == pocock.p_value and sequential.nominal_levels(LOOKS, 0.05)[0] < obf.p_value <= sequential.nominal_levels(LOOKS, 0.05, "pocock")[0]
    assert obf.verdict is Verdict.INCONCLUSIVE and pocock.verdict is Verdict.FAIL
    with pytest.raises(ValueError, match="sequential.spending"):
        GatePolicy.model_validate({"required": ["lcm-mc"], "sequential": {"looks": LOOKS, "spending": "haybittle"}})


ACCEPTED_LOOKS = [
    [1.0],
    [0.001, 1.0],
    [0.05, 1.0],  # issue 43: O'Brien–Fleming's first boundary, 8.77, was lost to rounding
    [k / sequential.MAX_LOOKS for k in range(1, sequential.MAX_LOOKS + 1)],
    [0.5, 0.5 + sequential.MIN_LOOK_GAP, 1.0],
    [0.25, 0.5, 0.9999999999],  # the last is every item, to rounding
]
REFUSED_LOOKS = [
    [k / (sequential.MAX_LOOKS + 1) for k in range(1, sequential.MAX_LOOKS + 2)],
    [0.5, 0.5 + sequential.MIN_LOOK_GAP / 2, 1.0],
    [0.0, 1.0],
    [0.5, 0.25, 1.0],
    [0.25, 0.5],
    [],
]


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_the_policy_accepts_exactly_the_designs_the_boundaries_are_computed_for(spending):
    """Looks increasing within (0, 1] to every item, at most MAX_LOOKS of them, each at least
    MIN_LOOK_GAP after the one before (docs/sequential.md): every such design is accepted
    and the gate judges each of its looks; any other is refused when the policy is read."""
    for looks in ACCEPTED_LOOKS:
        read = GatePolicy.model_validate({"required": ["lcm-mc"], "sequential": {"looks": looks, "spending": spending}})
        assert read.sequential is not None and read.sequential.looks[-1] == 1.0 and len(read.sequential.looks) == len(looks)
        alpha = 1 - read.confidence
        levels = sequential.nominal_levels(read.sequential.looks, alpha, spending)
        assert ((levels >= 0) & (levels <= alpha * (1 + 1e-9))).all(), (looks, levels)  # P(Z_k ≥ c_k) ≤ P(any crossing) = α
    for looks in REFUSED_LOOKS:
        with pytest.raises(pydantic.ValidationError) as refused:
            GatePolicy.model_validate({"required": ["lcm-mc"], "sequential": {"looks": looks, "spending": spending}})
        assert [e["loc"] for e in refused.value.errors()] == [("sequential", "looks")], looks


def test_a_first_look_at_five_percent_of_the_items_is_judged():
    """Issue 43: ``looks: [0.05, 1.0]`` was read, and every validation then died in the
    boundary solver. Its first look now judges: a candidate that lost 8 of the champion's
    14 right answers on the first 20 items (p 0.0032) is rejected there where Pocock-type
    spending spends 0.0041; O'Brien–Fleming's 1.9e-18 goes on to the last look."""
    worse = CHAMPION.copy()
    worse[np.flatnonzero(CHAMPION[:20])[:8]] = False
    verdicts = {}
    for spending in ("obrien-fleming", "pocock"):
        design = {"looks": [0.05, 1.0], "spending": spending}
        rule = GatePolicy(required=["lcm-mc"], regressions={"lcm-mc/acc": {"max_drop": 0.02}}, sequential=design)
        first = decide(rule, {"lcm-mc": output(worse[:20])}, {"lcm-mc": output(CHAMPION)}, look=0)
        (regression,) = [c for c in first.checks if c.rule == "regression"]
        assert regression.n_shared == 20 and first.look.index == 0
        verdicts[spending] = (regression.verdict, first.outcome, first.settled)
        last = decide(rule, {"lcm-mc": output(worse)}, {"lcm-mc": output(CHAMPION)}, look=1)
        assert (last.settled, last.look.index) == (True, 1)  # 8 of 400 lost: a change of −0.02, on the margin
    assert verdicts["obrien-fleming"][0] is Verdict.INCONCLUSIVE and not verdicts["obrien-fleming"][2]
    assert verdicts["pocock"] == (Verdict.FAIL, Outcome.REJECTED, True)


def test_the_look_tag_counts_as_the_text_does_and_reads_the_index_runs_carried_before():
    from vlgate import tag_keys

    assert tag_keys.look_tag(0, 4) == "1 of 4" and tag_keys.look_index("1 of 4") == 0 and tag_keys.look_index("4 of 4") == 3
    assert tag_keys.look_index("2") == 2 and tag_keys.look_index(None) is None and tag_keys.look_index("") is None
