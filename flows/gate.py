"""The promotion gate (SPEC §3): a YAML policy per registered model, judged on a
candidate's evaluator outputs and, where there is one, the current champion's.

A policy file::

    required: [lcm-mc, lcm-nb, vlind, genception, decc]
    floors:                       # higher is better: candidate value >= floor
      lcm-mc/lcm: 0.3
      lcm-mc/acc: 0.5
      decc/reliable_rate/multi: 0.2
    ceilings:                     # lower is better: candidate value <= ceiling
      genception/gc_fid@3: 50
    regressions:                  # against the champion, on the shared samples
      lcm-mc/lcm: {max_drop: 0.02}
      lcm-mc/acc: {max_drop: 0.02}
    confidence: 0.95              # one-sided, paired bootstrap
    resamples: 2000
    seed: 0

A regression rule passes when the paired bootstrap lower bound of (candidate − champion)
— (champion − candidate) for lower-is-better metrics — is at least ``-max_drop``: the
candidate is shown non-inferior within the margin, rather than compared by point
estimates. Which way a metric is better, and which metrics exist at all, comes from the
evaluator registry: a policy naming an unknown evaluator or metric, or a regression rule
on a metric without a direction (a count), is refused when the policy is loaded. The gate fails closed: a required evaluator that is missing, any
evaluator of the suite (required or not) that failed or failed its expectations, a metric
that is absent or undefined, or a comparison that cannot be made means no promotion, and
every reason is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from vlgate.config import load_yaml_model
from vlgate.evaluators import registry
from vlgate.evaluators.metrics.bootstrap import paired_bootstrap_difference
from vlgate.evaluators.output import EvaluatorOutput


class RegressionRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_drop: float = Field(ge=0, description="allowed drop against the champion, in the metric's own units")


class GatePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    required: list[str] = Field(default_factory=lambda: list(registry.names()))
    floors: dict[str, float] = Field(default_factory=dict)
    ceilings: dict[str, float] = Field(default_factory=dict)
    regressions: dict[str, RegressionRule] = Field(default_factory=dict)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    resamples: int = Field(default=2000, ge=100)
    seed: int = 0

    @classmethod
    def from_file(cls, path: str | Path) -> GatePolicy:
        return load_yaml_model(cls, path, "gate policy")

    def model_post_init(self, _context: Any) -> None:
        known = registry.names()
        for name in self.required:
            if name not in known:
                raise ValueError(f"gate policy: required evaluator {name!r} is not one of {', '.join(known)}")
        for name in [*self.floors, *self.ceilings, *self.regressions]:
            evaluator, metric = registry.split_metric(name)
            if evaluator not in known or not metric:
                raise ValueError(f"gate policy: {name!r} is not EVALUATOR/METRIC with EVALUATOR one of {', '.join(known)}")
            spec = registry.metric(name)
            if spec is None:
                listed = ", ".join(m.name for m in registry.get(evaluator).metrics)
                raise ValueError(f"gate policy: {name!r}: {evaluator} has no metric {metric!r} (it has {listed})")
            if name in self.regressions and spec.direction is None:
                raise ValueError(f"gate policy: {name!r} has no better direction (a count or a share), so it cannot regress")


PASS, FAIL, UNJUDGED = "pass", "fail", "could not judge"
PROMOTED, REJECTED, NOT_JUDGED = "promoted", "rejected", "could not judge"


@dataclass
class Check:
    """One rule of the policy on one candidate. ``verdict``: pass, fail (the numbers say
    no), or could not judge (something to judge was missing: an evaluator that did not
    run, a metric undefined, no shared samples; such a check fails closed too)."""

    name: str
    passed: bool
    detail: str
    rule: str = ""  # ran, expectations, floor, ceiling, regression
    metric: str | None = None  # EVALUATOR/METRIC, or the evaluator for ran/expectations
    candidate: float | None = None
    champion: float | None = None
    limit: float | None = None  # the floor or ceiling, or -max_drop of a regression rule
    interval: tuple[float, float] | None = None  # the bootstrap interval of candidate - champion
    bound: float | None = None  # the bound judged against the limit (improvement's lower bound)
    judged: bool = True

    @property
    def verdict(self) -> str:
        return PASS if self.passed else FAIL if self.judged else UNJUDGED

    def as_dict(self) -> dict[str, Any]:
        fields = {k: v for k, v in vars(self).items() if k != "judged"}
        return fields | {"interval": list(self.interval) if self.interval else None, "verdict": self.verdict}


@dataclass
class Decision:
    promote: bool
    checks: list[Check] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """promoted; rejected when a rule failed on the numbers; could not judge when the
        only failures are things missing (the version may be fine: rerun once fixed)."""
        if self.promote:
            return PROMOTED
        return REJECTED if any(c.verdict == FAIL for c in self.checks) else NOT_JUDGED

    @property
    def reasons(self) -> list[str]:
        """The failed checks when not promoted, every check when promoted."""
        failed = [c for c in self.checks if not c.passed]
        return [f"{c.name}: {c.detail}" for c in (failed if failed else self.checks)]

    def as_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "outcome": self.outcome, "reasons": self.reasons, "checks": [c.as_dict() for c in self.checks]}


def lower_is_better(qualified: str) -> bool:
    """``EVALUATOR/METRIC`` goes down when a model gets better (FID-type distances, Brier scores)."""
    spec = registry.metric(qualified)
    return spec is not None and spec.direction == "lower"


def _metric(output: EvaluatorOutput | None, metric: str) -> float | None:
    value = None if output is None or output.metrics is None else output.metrics.get(metric)
    return None if value is None else float(value)


def decide(policy: GatePolicy, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> Decision:
    """Judge a candidate; ``champion`` is None when the model has none yet."""
    checks: list[Check] = []
    # every evaluator the suite ran is judged, required or not: an output that crashed or
    # failed its expectations blocks promotion (SPEC: any failed expectation); ``required``
    # adds that the evaluator must be there at all
    judged = [*policy.required, *(name for name in candidate if name not in policy.required)]
    for evaluator in judged:
        result = candidate.get(evaluator)
        if result is None:
            checks.append(Check(f"{evaluator} ran", False, "no result (fail closed)", "ran", evaluator, judged=False))
        elif result.error:
            checks.append(Check(f"{evaluator} ran", False, f"failed: {result.error}", "ran", evaluator, judged=False))
        else:
            checks.append(Check(f"{evaluator} ran", True, f"{len(result.records)} records", "ran", evaluator))
            passed = result.expectations_passed
            checks.append(Check(f"{evaluator} expectations", passed, "passed" if passed else "failed expectations (see the validation report)", "expectations", evaluator))
    for name, bound in [*((n, ("floor", v)) for n, v in policy.floors.items()), *((n, ("ceiling", v)) for n, v in policy.ceilings.items())]:
        kind, limit = bound
        evaluator, metric = registry.split_metric(name)
        value = _metric(candidate.get(evaluator), metric)
        if value is None:
            checks.append(Check(f"{name} {kind}", False, "metric missing or undefined (fail closed)", kind, name, limit=limit, judged=False))
            continue
        passed = value >= limit if kind == "floor" else value <= limit
        detail = f"{value:.4f} {'>=' if kind == 'floor' else '<='} {limit} {'holds' if passed else 'fails'}"
        checks.append(Check(f"{name} {kind}", passed, detail, kind, name, candidate=value, limit=limit))
    for name, rule in policy.regressions.items():
        checks.append(_regression_check(policy, name, rule, candidate, champion))
    return Decision(promote=all(check.passed for check in checks), checks=checks)


def _regression_check(policy: GatePolicy, name: str, rule: RegressionRule, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> Check:
    label = f"{name} vs champion"
    limit = -rule.max_drop
    if champion is None:
        return Check(label, True, "no champion yet: nothing to regress from", "regression", name, limit=limit)
    evaluator, metric = registry.split_metric(name)
    mine, theirs = candidate.get(evaluator), champion.get(evaluator)
    if mine is None or mine.samples is None or theirs is None or theirs.samples is None:
        return Check(label, False, "per-sample records missing for the candidate or the champion (fail closed)", "regression", name, limit=limit, judged=False)
    aggregate = registry.get(evaluator).aggregate

    def statistic(frame: pd.DataFrame) -> float | None:
        return aggregate(frame.drop(columns="id")).get(metric)

    result = paired_bootstrap_difference(mine.samples, theirs.samples, statistic, policy.confidence, policy.resamples, policy.seed)
    if result.lower is None or result.upper is None or result.difference is None:
        return Check(
            label,
            False,
            f"cannot compare on {result.n_shared} shared samples (metric undefined or too few samples; fail closed)",
            "regression",
            name,
            candidate=result.candidate,
            champion=result.champion,
            limit=limit,
            judged=False,
        )
    sign = -1.0 if lower_is_better(name) else 1.0
    improvement, bound = sign * result.difference, (sign * result.lower if sign > 0 else sign * result.upper)
    passed = bound >= limit
    return Check(
        label,
        passed,
        f"{result.candidate:.4f} vs {result.champion:.4f} on {result.n_shared} shared samples: change {improvement:+.4f}, "
        f"{policy.confidence:.0%} lower bound {bound:+.4f} {'>=' if passed else '<'} -{rule.max_drop} allowed",
        "regression",
        name,
        candidate=result.candidate,
        champion=result.champion,
        limit=limit,
        interval=(result.lower, result.upper),
        bound=bound,
    )
