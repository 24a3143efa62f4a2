"""The shipped world carries signal in all five evaluators: every evaluator's
headline metric orders the version family as it was built, and each faulty version is
rejected by the demo's gate for its own fault, by the evaluator built to catch it.

"Beyond noise" is the gate's own test: a superiority rule per headline metric, judged
by :func:`gate.decide` as a one-sided 95% paired bootstrap (2,000 resamples) over the
items both versions answered — the lower bound of the gain must be above 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vlgate.cli.demo import DEMO_POLICY, FAULT_EVALUATORS
from vlgate.cli.main import main
from vlgate.evaluators import registry
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.world.build import SHIPPED_WORLD, shipped_manifest
from vlgate.gate.gates import decide
from vlgate.gate.policy import GatePolicy

pytestmark = [pytest.mark.world, pytest.mark.slow]

EVALUATORS = tuple(registry.names())
#: The headline metric (registry: ``headline=True``) each evaluator's ordering is tested on.
#: VLind: ``acc_lp``, the image-decided statements over every item, since ``s_lp`` is
#: undefined for a version that passes none of the stages before it (the untrained one).
#: DeCC: ``er/multi`` (effective reliability: +1 reliable and right, −1 reliable and wrong),
#: since reliability alone is agreement, which a weak model can have: measured on the
#: shipped world, ``reliable_rate/multi`` went 0.021 → 0.875 → 0.917 and the last step is
#: within noise (interval [−0.04, +0.15]), while ``er/multi`` went 0.021 → 0.500 → 0.917.
HEADLINE = {
    "lcm-mc": "lcm-mc/lcm",
    "lcm-nb": "lcm-nb/lcm",
    "vlind": "vlind/acc_lp",
    "genception": "genception/gc@3",
    "decc": "decc/er/multi",
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict[str, EvaluatorOutput]]:
    """Every shipped VLM version evaluated with the shipped suite, keyed by its folder name."""
    out = tmp_path_factory.mktemp("signal")
    checkpoints = shipped_manifest()["checkpoints"]
    folders = [*checkpoints["vlm"].values(), *checkpoints["vlm_faults"].values()]
    results = {}
    for folder in folders:
        name = Path(folder).name
        assert main(["evaluate", "--model", str(SHIPPED_WORLD / folder), "--suite", str(SHIPPED_WORLD / "suite.yaml"), "--out", str(out / name), "--quiet"]) == 0
        results[name] = {evaluator: EvaluatorOutput.from_folder(evaluator, out / name / evaluator) for evaluator in EVALUATORS}
    return results


def family() -> list[str]:
    steps = sorted(int(n) for n in shipped_manifest()["checkpoints"]["vlm"])
    return [f"vlm-steps{n}" for n in steps]


def superiority(metrics: list[str]) -> GatePolicy:
    return GatePolicy(required=list(EVALUATORS), superiority={metric: {"min_gain": 0.0} for metric in metrics})


@pytest.mark.parametrize("pair", ["untrained → early", "early → trained"])
def test_every_evaluators_headline_metric_improves_with_training_beyond_noise(outputs, pair):
    untrained, early, trained = family()
    worse, better = (untrained, early) if pair == "untrained → early" else (early, trained)
    decision = decide(superiority(list(HEADLINE.values())), outputs[better], outputs[worse])
    failed = {check.name: check.detail for check in decision.checks if check.rule == "superiority" and not check.passed}
    assert not failed, failed
    assert {check.name for check in decision.checks if check.rule == "superiority"} == {f"{metric} superiority" for metric in HEADLINE.values()}


@pytest.mark.parametrize("fault", sorted(FAULT_EVALUATORS))
def test_each_faulty_version_is_rejected_by_the_evaluator_built_for_its_fault(outputs, fault):
    """The demo's policy, the trained version as champion: the faulty version fails checks
    of its own evaluator and of no other (on this small world a comparison it did not
    change may be undecided, never failed)."""
    policy = GatePolicy.model_validate(yaml.safe_load(DEMO_POLICY))
    trained = family()[-1]
    decision = decide(policy, outputs[f"vlm-{fault}"], outputs[trained])
    assert not decision.promote and decision.outcome == "rejected"
    failed_evaluators = {(check.metric or "").split("/")[0] for check in decision.checks if check.verdict in ("fail", "could not judge")}
    assert failed_evaluators == {FAULT_EVALUATORS[fault]}, [(c.name, c.detail) for c in decision.checks if not c.passed]


def test_the_trained_version_passes_the_demo_policy_and_the_early_one_does_not(outputs):
    policy = GatePolicy.model_validate(yaml.safe_load(DEMO_POLICY))
    untrained, early, trained = family()
    assert decide(policy, outputs[trained], None).promote
    assert not decide(policy, outputs[early], None).promote
