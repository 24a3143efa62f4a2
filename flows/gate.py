"""The promotion gate (ARCHITECTURE.md, what the service promises): a YAML policy per registered model, judged on a
candidate's evaluator outputs and, where there is one, the current champion's.

A policy file::

    required: [lcm-mc, lcm-nb, vlind, genception, decc]
    floors:                       # higher is better: candidate value >= floor
      lcm-mc/lcm: 0.3
      lcm-mc/acc: 0.5
      decc/reliable_rate/multi: 0.2
    ceilings:                     # lower is better: candidate value <= ceiling
      genception/gc_fid@3: 50
    regressions:                  # non-inferiority against the champion, on the shared samples
      lcm-mc/lcm: {max_drop: 0.02}
      lcm-mc/acc: {max_drop: 0.02}
    superiority:                  # the candidate must be shown better than the champion
      lcm-nb/lcm: {min_gain: 0.0}
    categories:                   # per category of the evaluator's group field (category, concept)
      lcm-mc/acc: {floor: 0.4, max_drop: 0.05, only: [animals, vehicles], min_samples: 20}
    correction: holm              # across the comparisons' "worse" findings: holm, bonferroni or none
    waivers:                      # a failing check let through, on record
      - check: "decc/reliable_rate/multi vs champion"
        by: alice@example.com
        reason: DeCC's data is being relabelled (JIRA-123)
        until: 2026-12-31
    confidence: 0.95              # one-sided, of every test
    resamples: 2000               # the bootstrap's: a floor's standard error at an interim look, vlgate plan's spreads
    seed: 0
    sequential:                   # judge after each look at a fraction of the items; stop when decided
      looks: [0.25, 0.5, 0.75, 1.0]
      promote_early: false
      spending: obrien-fleming    # or pocock: clear failures stop sooner, for a little power

Comparisons with the champion (regressions, superiority, per-category ``max_drop``) are
paired score tests of the improvement — candidate − champion, champion − candidate for
lower-is-better metrics — over the samples both were judged on, its variance the null's
(Tango's test for 0/1 scores, the same statistic on the jackknife pseudo-values of any
other metric: ``evaluators/metrics/score_test.py`` says why not a bootstrap), and have
three verdicts:

* **pass** when the one-sided ``confidence`` lower bound of the improvement (the score
  test inverted) clears the margin: above ``-max_drop`` (non-inferior) or ``min_gain``
  (superior). All rules must pass, so no correction is needed on this side (an
  intersection-union test is level α as it stands);
* **fail** when the improvement is shown below the margin: its score-test p-value, adjusted
  across every comparison of the policy (``correction``, Holm by default), is at most
  1 − ``confidence``. So more rules do not mean more false rejections of a good candidate;
* **inconclusive** otherwise: the interval spans the margin. The check says about how many
  shared samples would decide (the interval narrowing as 1/√n). It blocks promotion.

Which way a metric is better, and which metrics exist at all, comes from the evaluator
registry: a policy naming an unknown evaluator or metric, a comparison on a metric without
a direction (a count), a per-category rule on an evaluator without categories, or a waiver
of a check the policy never makes is refused when the policy is loaded; ``check_suite``
refuses one that names evaluators the model's suite does not run. The gate fails closed: a
required evaluator that is missing, any evaluator of the suite (required or not) that
failed or failed its expectations, a metric that is absent or undefined, or a comparison
that cannot be made means no promotion, and every reason is kept. A waiver turns one named
failing check into a pass until its date, and the decision shows who waived it and why.

With a ``sequential`` section the candidate is judged after each look at a fraction of
its items (:func:`decide_at_look`; docs/sequential.md): a decisive failure rejects at that
look, a look where every rule holds decisively promotes where the policy allows it, and
otherwise the next look follows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator
from scipy import stats

from vlgate.config import CONFIG_MODEL, load_yaml_model
from vlgate.decisions import CheckRecord, DecisionRecord, LookRecord, Outcome, Rule, Verdict, Waiver
from vlgate.evaluators import registry
from vlgate.evaluators.metrics import sequential
from vlgate.evaluators.metrics.bootstrap import ResampledStatistic, bonferroni_adjusted, bootstrap_standard_error, holm_adjusted, samples_to_decide
from vlgate.evaluators.metrics.score_test import PairedScore, paired_score
from vlgate.evaluators.metrics.sequential import Spending
from vlgate.evaluators.output import EvaluatorOutput


class RegressionRule(BaseModel):
    model_config = CONFIG_MODEL

    max_drop: float = Field(ge=0, description="allowed drop against the champion, in the metric's own units")


class SuperiorityRule(BaseModel):
    model_config = CONFIG_MODEL

    min_gain: float = Field(default=0.0, ge=0, description="the improvement's lower bound must be above this, in the metric's own units")


class CategoryRule(BaseModel):
    """Rules judged on each category of the evaluator's group field separately."""

    model_config = CONFIG_MODEL

    floor: float | None = None
    ceiling: float | None = None
    max_drop: float | None = Field(default=None, ge=0)
    only: list[str] | None = Field(default=None, min_length=1, description="these categories; unset: every category the candidate has")
    min_samples: int = Field(default=1, ge=1, description="a category with fewer records is skipped, and the check says so")

    @model_validator(mode="after")
    def _some_rule(self) -> CategoryRule:
        if self.floor is None and self.ceiling is None and self.max_drop is None:
            raise ValueError("a category rule needs floor, ceiling or max_drop")
        return self


Correction = Literal["holm", "bonferroni", "none"]


class SequentialPolicy(BaseModel):
    """Group-sequential evaluation: each evaluator's items in a seeded order stratified by
    its breakdown field, judged after each look (a fraction of them) with boundaries that
    spend the policy's α over the looks (``evaluators/metrics/sequential.py``). A look
    stops the validation when a rule fails decisively (rejected), or, with
    ``promote_early``, when every rule holds decisively (promoted)."""

    model_config = CONFIG_MODEL

    looks: list[float] = Field(
        default_factory=lambda: [0.25, 0.5, 0.75, 1.0],
        max_length=sequential.MAX_LOOKS,
        description=(
            f"the fractions of each evaluator's items after which the gate looks: increasing within (0, 1], each at least "
            f"{sequential.MIN_LOOK_GAP:g} after the one before, the last 1; at most {sequential.MAX_LOOKS} looks"
        ),
    )
    promote_early: bool = Field(default=False, description="promote at an interim look where every rule holds decisively")
    spending: Spending = Field(
        default="obrien-fleming",
        description="how α is spent over the looks: obrien-fleming (almost nothing early: the last look keeps the fixed test's power) or pocock (evenly: clear failures stop sooner, for some power at the last look)",
    )
    order_seed: int = Field(default=0, ge=0, description="the seed of the items' order (numpy's generators take none below 0)")

    @field_validator("looks")
    @classmethod
    def looks_end_at_every_item(cls, value: list[float]) -> list[float]:
        from vlgate.evaluators.metrics.sequential import validated_fractions

        return [float(t) for t in validated_fractions(value)]


#: The category of a per-category check made when the candidate has no categories at all.
EVERY_CATEGORY = "*"
_CHECK_NAME = re.compile(r"(?P<metric>[^\s\[]+)(?:\[(?P<category>[^\]]+)\])? (?P<phrase>ran|expectations|floor|ceiling|vs champion|superiority)")


@dataclass(frozen=True)
class CheckKey:
    """What identifies a check: its rule, its metric (``EVALUATOR/METRIC``, or the evaluator
    for ``ran`` and ``expectations``) and, for a per-category rule, the category. Its
    ``name`` is how the decision prints it and how a waiver names it."""

    rule: Rule
    metric: str
    category: str | None = None

    @property
    def name(self) -> str:
        scope = f"[{self.category}]" if self.category is not None else ""
        return f"{self.metric}{scope} {self.rule.phrase}"

    @classmethod
    def parse(cls, name: str) -> CheckKey | None:
        """The key a printed name stands for; None for a name no check could have."""
        match = _CHECK_NAME.fullmatch(name)
        if match is None:
            return None
        rule = next(rule for rule in Rule if rule.phrase == match["phrase"])
        return cls(rule, match["metric"], match["category"])


class GatePolicy(BaseModel):
    model_config = CONFIG_MODEL

    required: list[str] = Field(default_factory=lambda: list(registry.names()))
    floors: dict[str, float] = Field(default_factory=dict)
    ceilings: dict[str, float] = Field(default_factory=dict)
    regressions: dict[str, RegressionRule] = Field(default_factory=dict)
    superiority: dict[str, SuperiorityRule] = Field(default_factory=dict)
    categories: dict[str, CategoryRule] = Field(default_factory=dict)
    correction: Correction = "holm"
    waivers: list[Waiver] = Field(default_factory=list)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    resamples: int = Field(default=2000, ge=100)
    seed: int = Field(default=0, ge=0, description="the bootstraps' seed (numpy's generators take none below 0)")
    sequential: SequentialPolicy | None = None
    #: each waiver by the key of the check it names, resolved when the policy is read
    _waived: dict[CheckKey, Waiver] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_file(cls, path: str | Path) -> GatePolicy:
        return load_yaml_model(cls, path, "gate policy")

    def model_post_init(self, _context: Any) -> None:
        known = registry.names()
        for name in self.required:
            if name not in known:
                raise ValueError(f"required: evaluator {name!r} is not one of {', '.join(known)}")
        compared = [*self.regressions, *self.superiority, *(name for name, rule in self.categories.items() if rule.max_drop is not None)]
        for section, names in (("floors", self.floors), ("ceilings", self.ceilings), ("regressions", self.regressions), ("superiority", self.superiority), ("categories", self.categories)):
            for name in names:
                evaluator, metric = registry.split_metric(name)
                if evaluator not in known or not metric:
                    raise ValueError(f"{section}.{name}: not EVALUATOR/METRIC with EVALUATOR one of {', '.join(known)}")
                spec = registry.metric(name)
                if spec is None:
                    listed = ", ".join(m.name for m in registry.get(evaluator).metrics)
                    raise ValueError(f"{section}.{name}: {evaluator} has no metric {metric!r} (it has {listed})")
                if name in compared and spec.direction is None:
                    raise ValueError(f"{section}.{name} has no better direction (a count or a share), so it cannot be compared with the champion")
                if section == "categories" and registry.get(evaluator).group_field is None:
                    with_groups = ", ".join(d.name for d in registry.definitions() if d.group_field)
                    raise ValueError(f"categories.{name}: {evaluator}'s records have no categories (evaluators with them: {with_groups})")
        first_waiver: dict[CheckKey, int] = {}
        for n, waiver in enumerate(self.waivers):
            key = CheckKey.parse(waiver.check)
            if key is None or not self.makes_check(key):
                raise ValueError(f"waivers.{n}.check: the policy makes no check {waiver.check!r} (names as the decision prints them, e.g. {self.example_checks()})")
            if first_waiver.setdefault(key, n) != n:  # which one applied would depend on their order
                raise ValueError(f"waivers.{n}.check: {waiver.check!r} is waived already by waivers.{first_waiver[key]}; one check takes one waiver")
            self._waived[key] = waiver

    def evaluators(self) -> set[str]:
        """Every evaluator the policy needs results of."""
        named = [*self.floors, *self.ceilings, *self.regressions, *self.superiority, *self.categories]
        return {*self.required, *(registry.split_metric(name)[0] for name in named)}

    def check_suite(self, suite_evaluators: Iterable[str], suite: str = "the suite") -> None:
        """Refuse a policy that judges evaluators the model's suite does not run: it could
        never promote anything, and would only say so after the whole evaluation."""
        runs = set(suite_evaluators)
        missing = sorted(self.evaluators() - runs)
        if missing:
            raise ValueError(f"needs {', '.join(missing)}, which {suite} does not run (it runs {', '.join(sorted(runs)) or 'nothing'})")

    def makes_check(self, key: CheckKey) -> bool:
        """Whether one of the policy's rules produces this check (waivers must name one)."""
        if key.category is None:
            return key in self._static_checks()
        rule = self.categories.get(key.metric)
        if rule is None:
            return False
        made = {Rule.FLOOR: rule.floor is not None, Rule.CEILING: rule.ceiling is not None, Rule.REGRESSION: rule.max_drop is not None}.get(key.rule, False)
        return made and (rule.only is None or key.category in rule.only)

    def waiver(self, key: CheckKey) -> Waiver | None:
        """The waiver naming this check, if any."""
        return self._waived.get(key)

    def _static_checks(self) -> list[CheckKey]:
        evaluators = sorted(self.evaluators() | set(registry.names()))
        return [
            *(CheckKey(rule, e) for e in evaluators for rule in (Rule.RAN, Rule.EXPECTATIONS)),
            *(CheckKey(Rule.FLOOR, m) for m in self.floors),
            *(CheckKey(Rule.CEILING, m) for m in self.ceilings),
            *(CheckKey(Rule.REGRESSION, m) for m in self.regressions),
            *(CheckKey(Rule.SUPERIORITY, m) for m in self.superiority),
        ]

    def example_checks(self) -> str:
        return ", ".join(repr(key.name) for key in self._static_checks()[-3:])


@dataclass
class Check:
    """One rule of the policy on one candidate. ``verdict``: pass, fail (the numbers say
    no), inconclusive (a comparison whose interval spans its margin), could not judge
    (something to judge was missing: an evaluator that did not run, a metric undefined,
    no shared samples; such a check fails closed too), or waived (failed, let through by
    a waiver in the policy). ``detail`` says why in words; the numbers are fields."""

    key: CheckKey
    verdict: Verdict
    detail: str
    candidate: float | None = None
    champion: float | None = None
    limit: float | None = None  # the floor or ceiling, -max_drop of a regression rule, min_gain of a superiority rule
    interval: tuple[float, float] | None = None  # the improvement's two-sided interval (candidate better: positive)
    bound: float | None = None  # the bound judged against the limit (improvement's lower bound)
    p_value: float | None = None  # a comparison's adjusted p-value of "shown below the limit"
    n_shared: int | None = None  # a comparison's shared samples
    samples_needed: int | None = None  # an inconclusive comparison's estimate of the shared samples that would decide
    waiver: Waiver | None = None

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def rule(self) -> Rule:
        return self.key.rule

    @property
    def metric(self) -> str:
        return self.key.metric

    @property
    def category(self) -> str | None:
        return self.key.category

    @property
    def passed(self) -> bool:
        return self.verdict in (Verdict.PASS, Verdict.WAIVED)

    def record(self) -> CheckRecord:
        numbers = {k: v for k, v in vars(self).items() if k not in ("key", "verdict", "detail", "waiver")}
        return CheckRecord(name=self.name, rule=self.rule, metric=self.metric, category=self.category, verdict=self.verdict, passed=self.passed, detail=self.detail, waiver=self.waiver, **numbers)


def _verdict(passed: bool, judged: bool = True) -> Verdict:
    """A check's verdict from whether it held and whether there was anything to judge."""
    return Verdict.PASS if passed else Verdict.FAIL if judged else Verdict.COULD_NOT_JUDGE


@dataclass
class Decision:
    promote: bool
    checks: list[Check] = field(default_factory=list)
    #: the policy judged with, as loaded (logged with every decision)
    policy: dict[str, Any] = field(default_factory=dict)
    #: the look of a sequential policy it was taken at; None: judged once on every item
    look: LookRecord | None = None

    @property
    def settled(self) -> bool:
        """Whether this decision stands: always for a fixed-sample one; at a look, when it
        stopped the validation (:class:`LookRecord`)."""
        return self.look is None or self.look.settled

    @property
    def outcome(self) -> Outcome:
        """promoted; rejected when a rule failed on the numbers; could not judge when
        something to judge was missing (the version may be fine: rerun once fixed);
        inconclusive when the only failures are comparisons too uncertain to decide
        (more shared samples would)."""
        if self.promote:
            return Outcome.PROMOTED
        verdicts = {c.verdict for c in self.checks}
        if Verdict.FAIL in verdicts:
            return Outcome.REJECTED
        return Outcome.COULD_NOT_JUDGE if Verdict.COULD_NOT_JUDGE in verdicts else Outcome.INCONCLUSIVE

    @property
    def reasons(self) -> list[str]:
        """The failed checks (and any waived ones) when not promoted, every check when
        promoted. At an interim look a comparison not decided yet is no reason: the
        validation stopped on the others (it stays among the checks)."""
        interim = self.look is not None and self.look.index + 1 < self.look.of
        shown = [c for c in self.checks if (not c.passed and not (interim and c.verdict is Verdict.INCONCLUSIVE)) or c.waiver is not None]
        return [f"{c.name}: {c.detail}" for c in (shown if not self.promote else self.checks)]

    def record(self, policy_path: Path, champion_before: str | None, warnings: list[str], per_sample_correlations: dict[str, dict[str, Any]]) -> DecisionRecord:
        """The decision as logged, with what it was judged against."""
        return DecisionRecord(
            decision="promoted" if self.promote else "rejected",
            promote=self.promote,
            outcome=self.outcome,
            reasons=self.reasons,
            checks=[check.record() for check in self.checks],
            policy=self.policy,
            policy_path=str(policy_path),
            champion_before=champion_before,
            warnings=warnings,
            per_sample_correlations=per_sample_correlations,
            look=self.look,
        )


def lower_is_better(qualified: str) -> bool:
    """``EVALUATOR/METRIC`` goes down when a model gets better (FID-type distances, Brier scores)."""
    spec = registry.metric(qualified)
    return spec is not None and spec.direction == "lower"


def _metric(output: EvaluatorOutput | None, metric: str) -> float | None:
    value = None if output is None or output.metrics is None else output.metrics.get(metric)
    return None if value is None else float(value)


def decide(
    policy: GatePolicy,
    candidate: dict[str, EvaluatorOutput],
    champion: dict[str, EvaluatorOutput] | None,
    today: date | None = None,
    look: int | None = None,
) -> Decision:
    """Judge a candidate; ``champion`` is None when the model has none yet; ``today``
    (UTC by default) is the day waivers are checked against; ``look``: the look of the
    policy's ``sequential`` design the candidate's records are of (judged by
    :func:`decide_at_look`), None for the fixed-sample gate on every item."""
    if look is not None and policy.sequential is not None:
        return decide_at_look(policy, candidate, champion, look, today)
    checks = _ran_checks(policy, candidate)
    for name, kind, limit in [*((n, Rule.FLOOR, v) for n, v in policy.floors.items()), *((n, Rule.CEILING, v) for n, v in policy.ceilings.items())]:
        evaluator, metric = registry.split_metric(name)
        checks.append(_bound_check(CheckKey(kind, name), limit, _metric(candidate.get(evaluator), metric)))
    for name, rule in policy.categories.items():
        checks.extend(_category_bound_checks(name, rule, candidate))
    checks.extend(_judge_comparisons(policy, _comparisons(policy, candidate, champion), candidate, champion))
    _apply_waivers(checks, policy, today or datetime.now(UTC).date())
    return Decision(promote=all(check.passed for check in checks), checks=checks, policy=policy.model_dump(mode="json"))


def _ran_checks(policy: GatePolicy, candidate: dict[str, EvaluatorOutput]) -> list[Check]:
    """Every evaluator the suite ran is judged, required or not: an output that crashed or
    failed its expectations blocks promotion (fail closed: any failed expectation);
    ``required`` adds that the evaluator must be there at all."""
    checks = []
    for evaluator in [*policy.required, *(name for name in candidate if name not in policy.required)]:
        result = candidate.get(evaluator)
        if result is None:
            checks.append(Check(CheckKey(Rule.RAN, evaluator), Verdict.COULD_NOT_JUDGE, "no result (fail closed)"))
        elif result.error:
            checks.append(Check(CheckKey(Rule.RAN, evaluator), Verdict.COULD_NOT_JUDGE, f"failed: {result.error}"))
        else:
            checks.append(Check(CheckKey(Rule.RAN, evaluator), Verdict.PASS, f"{len(result.records)} records"))
            passed = result.expectations_passed
            checks.append(Check(CheckKey(Rule.EXPECTATIONS, evaluator), _verdict(passed), "passed" if passed else _expectation_failures(result)))
    return checks


def _comparisons(policy: GatePolicy, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> list[_Comparison]:
    """Every comparison with the champion the policy makes, before it is judged."""
    comparisons = [_Comparison(CheckKey(Rule.REGRESSION, name), -rule.max_drop) for name, rule in policy.regressions.items()]
    comparisons += [_Comparison(CheckKey(Rule.SUPERIORITY, name), rule.min_gain) for name, rule in policy.superiority.items()]
    for name, rule in policy.categories.items():
        if rule.max_drop is not None:
            comparisons += _category_comparisons(name, rule, candidate, champion)
    return comparisons


def _expectation_failures(output: EvaluatorOutput, shown: int = 2) -> str:
    """The first failed expectations in a line (the validation report has them all)."""
    failures = [line.removeprefix(f"{output.evaluator} ") for line in (output.expectations or {}).get("failures", [])]
    if not failures:
        return "failed expectations (see the validation report)"
    more = f"; {len(failures) - shown} more in the validation report" if len(failures) > shown else ""
    return "failed expectations: " + "; ".join(failures[:shown]) + more


def _bound_check(key: CheckKey, limit: float, value: float | None) -> Check:
    if value is None:
        return Check(key, Verdict.COULD_NOT_JUDGE, "metric missing or undefined (fail closed)", limit=limit)
    floor = key.rule is Rule.FLOOR
    passed = value >= limit if floor else value <= limit
    detail = f"{value:.4f} {'>=' if floor else '<='} {limit} {'holds' if passed else 'fails'}"
    return Check(key, _verdict(passed), detail, candidate=value, limit=limit)


def _categories(output: EvaluatorOutput | None, evaluator: str) -> dict[str, dict[str, Any]] | None:
    """The candidate's per-category metrics (scoring's ``by_<group field>``), None if absent."""
    group_field = registry.get(evaluator).group_field
    breakdown = None if output is None or output.metrics is None else output.metrics.get(f"by_{group_field}")
    return breakdown if isinstance(breakdown, dict) else None


def _category_bound_checks(name: str, rule: CategoryRule, candidate: dict[str, EvaluatorOutput]) -> list[Check]:
    evaluator, metric = registry.split_metric(name)
    bounds = [(kind, limit) for kind, limit in ((Rule.FLOOR, rule.floor), (Rule.CEILING, rule.ceiling)) if limit is not None]
    if not bounds:
        return []
    breakdown = _categories(candidate.get(evaluator), evaluator)
    if breakdown is None:
        return [Check(CheckKey(kind, name, EVERY_CATEGORY), Verdict.COULD_NOT_JUDGE, "no per-category metrics (fail closed)", limit=limit) for kind, limit in bounds]
    checks = []
    for category in rule.only or sorted(breakdown):
        values = breakdown.get(category)
        for kind, limit in bounds:
            key = CheckKey(kind, name, category)
            if values is not None and int(values.get("n", 0)) < rule.min_samples:
                checks.append(Check(key, Verdict.PASS, f"skipped: {int(values.get('n', 0))} records < min_samples {rule.min_samples}", limit=limit))
                continue
            value = None if values is None or values.get(metric) is None else float(values[metric])
            checks.append(_bound_check(key, limit, value))
    return checks


@dataclass
class _Comparison:
    """One comparison with the champion before it is judged: its check's key (a regression
    or superiority rule, its metric and category) and margin."""

    key: CheckKey
    limit: float
    ids: set[Any] | None = None  # the category's sample ids; None: every sample
    skipped: str | None = None

    def check(self, verdict: Verdict, detail: str, **numbers: Any) -> Check:
        """A check of this comparison made without a test (nothing to compare, skipped, fail closed)."""
        return Check(self.key, verdict, detail, limit=self.limit, **numbers)


def set_statistic(evaluator: str, metric: str) -> Callable[[pd.DataFrame], float | None]:
    """The set-level metric of a per-sample frame (with ``id``), by the evaluator's own aggregate."""
    aggregate = registry.get(evaluator).aggregate

    def statistic(frame: pd.DataFrame) -> float | None:
        return aggregate(frame.drop(columns="id")).get(metric)

    return statistic


def resampled_statistic(evaluator: str, metric: str, frame: pd.DataFrame) -> ResampledStatistic | None:
    """The metric of many resamples of a per-sample frame (with ``id``) at once, where the
    evaluator's definition computes it so (``EvaluatorDefinition.resampled``); None otherwise."""
    resampled = registry.get(evaluator).resampled
    if resampled is None or metric not in resampled(frame.drop(columns="id"), np.zeros((0, len(frame)))):
        return None

    def statistic(frame: pd.DataFrame, counts: np.ndarray) -> np.ndarray:
        return resampled(frame.drop(columns="id"), counts)[metric]

    return statistic


def category_ids(output: EvaluatorOutput | None, evaluator: str) -> dict[str, set[Any]]:
    """Each category's record ids (by the evaluator's group field); uncategorised records
    belong to no category's rule."""
    group_field = registry.get(evaluator).group_field or ""
    by_category: dict[str, set[Any]] = {}
    for record in output.records if output is not None else []:
        if record.get(group_field) is not None:
            by_category.setdefault(str(record[group_field]), set()).add(record.get("id"))
    return by_category


def _category_comparisons(name: str, rule: CategoryRule, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> list[_Comparison]:
    evaluator, _ = registry.split_metric(name)
    by_category = category_ids(candidate.get(evaluator), evaluator)
    limit = -float(rule.max_drop or 0.0)
    if champion is not None and not by_category:
        return [_Comparison(CheckKey(Rule.REGRESSION, name, EVERY_CATEGORY), limit, skipped="no per-category records (fail closed)")]
    comparisons = []
    for category in rule.only or sorted(by_category):
        ids = by_category.get(category, set())
        skipped = f"skipped: {len(ids)} records < min_samples {rule.min_samples}" if len(ids) < rule.min_samples else None
        comparisons.append(_Comparison(CheckKey(Rule.REGRESSION, name, category), limit, ids, skipped))
    return comparisons


def _paired_comparison(comparison: _Comparison, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> Check | PairedScore:
    """A comparison's paired change on the shared samples, better positive, with its
    jackknife pseudo-values (``evaluators/metrics/score_test.py``), or the check that says
    why it cannot be made (skipped, no champion, records missing, other protocols, an
    undefined metric)."""
    if comparison.skipped is not None:
        skipped = comparison.skipped.startswith("skipped")
        return comparison.check(Verdict.PASS if skipped else Verdict.COULD_NOT_JUDGE, comparison.skipped)
    if champion is None:
        return comparison.check(Verdict.PASS, "no champion yet: nothing to compare with")
    evaluator, metric = registry.split_metric(comparison.key.metric)
    mine, theirs = candidate.get(evaluator), champion.get(evaluator)
    if mine is None or mine.samples is None or theirs is None or theirs.samples is None:
        return comparison.check(Verdict.COULD_NOT_JUDGE, "per-sample records missing for the candidate or the champion (fail closed)")
    if mine.protocol != theirs.protocol:
        named = lambda protocol: f"protocol {protocol}" if protocol else "no protocol"
        detail = (
            f"not comparable: the candidate's {evaluator} records were measured under {named(mine.protocol)}, the champion's under {named(theirs.protocol)} "
            "(fail closed; validate the champion again under the suite's protocol, or set the suite's protocol to the champion's)"
        )
        return comparison.check(Verdict.COULD_NOT_JUDGE, detail)
    mine_samples, their_samples = mine.samples, theirs.samples
    if comparison.ids is not None:
        mine_samples, their_samples = mine_samples[mine_samples["id"].isin(comparison.ids)], their_samples[their_samples["id"].isin(comparison.ids)]
    definition = registry.get(evaluator).metric(metric)
    metric_range = (definition.low, definition.high) if definition is not None else (None, None)
    result = paired_score(mine_samples, their_samples, set_statistic(evaluator, metric), resampled_statistic(evaluator, metric, mine_samples), metric_range)
    if not result.testable:
        detail = f"cannot compare on {result.n_shared} shared samples (metric undefined or too few samples; fail closed)"
        return comparison.check(Verdict.COULD_NOT_JUDGE, detail, candidate=result.candidate, champion=result.champion, n_shared=result.n_shared)
    return result.improvement(lower_is_better(comparison.key.metric))


def _judge_comparisons(policy: GatePolicy, comparisons: list[_Comparison], candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None) -> list[Check]:
    """Every comparison's change tested against its limit by the paired score test, then
    judged together: pass on its own one-sided p-value (its lower bound clears the limit),
    fail on its p-value of being beyond the limit adjusted across all of them,
    inconclusive in between."""
    checks: dict[int, Check] = {}
    tested: list[tuple[int, _Comparison, PairedScore, float]] = []
    for n, comparison in enumerate(comparisons):
        compared = _paired_comparison(comparison, candidate, champion)
        if isinstance(compared, Check):
            checks[n] = compared
            continue
        tested.append((n, comparison, compared, compared.p_below(comparison.limit)))
    raw = [p for *_, p in tested]
    adjusted = holm_adjusted(raw) if policy.correction == "holm" else bonferroni_adjusted(raw) if policy.correction == "bonferroni" else raw
    alpha = 1 - policy.confidence
    # the level a "worse" finding is held to after the correction (Bonferroni's, which
    # Holm's step-down never asks more than): what an inconclusive check's estimate uses
    fail_level = alpha / len(tested) if policy.correction != "none" and tested else alpha
    for (n, comparison, result, _p), p_value in zip(tested, adjusted):
        checks[n] = _comparison_check(policy, comparison, result, p_value, alpha, fail_level, len(tested))
    return [checks[n] for n in range(len(comparisons))]


def _comparison_check(policy: GatePolicy, comparison: _Comparison, result: PairedScore, p_value: float, alpha: float, fail_level: float, family: int) -> Check:
    assert result.difference is not None
    improvement = result.difference
    low, high = result.bounds(alpha)
    limit = comparison.limit
    superiority = comparison.key.rule is Rule.SUPERIORITY
    passed = result.p_above(limit) <= alpha
    shown_below = not passed and p_value <= alpha
    inconclusive = not passed and not shown_below
    corrected = f"{policy.correction}-adjusted p {p_value:.3g} over {family} comparisons" if policy.correction != "none" and family > 1 else f"p {p_value:.3g}"
    head = f"{result.candidate:.4f} vs {result.champion:.4f} on {result.n_shared} shared samples: change {improvement:+.4f}"
    samples_needed = None
    if passed:
        detail = f"{head}, {policy.confidence:.0%} lower bound {low:+.4f} {'> ' if superiority else '>= '}{limit:+g} {'required' if superiority else 'allowed'}"
    elif shown_below:
        side = "not shown above" if superiority else "shown below"
        detail = f"{head} ({side} {limit:+g}: {corrected}), {policy.confidence:.0%} lower bound {low:+.4f} {'<=' if superiority else '<'} {limit:+g} {'required' if superiority else 'allowed'}"
    else:
        # towards a pass the uncorrected lower bound decides; towards a fail the bound at the corrected level
        half_width = improvement - low if improvement > limit else result.bound(fail_level, lower=False) - improvement
        samples_needed = samples_to_decide(result.n_shared, improvement - limit, half_width)
        decide_with = f"about {samples_needed} shared samples would decide" if samples_needed else "the estimate sits on the margin: no number of samples decides"
        detail = f"{head}, interval [{low:+.4f}, {high:+.4f}] spans {limit:+g} ({corrected}): inconclusive, {decide_with}"
    return Check(
        comparison.key,
        Verdict.PASS if passed else Verdict.INCONCLUSIVE if inconclusive else Verdict.FAIL,
        detail,
        candidate=result.candidate,
        champion=result.champion,
        limit=limit,
        interval=(low, high),
        bound=low,
        p_value=p_value,
        n_shared=result.n_shared,
        samples_needed=samples_needed,
    )


# --- the group-sequential gate ---------------------------------------------------------------


@dataclass
class _LookTest:
    """One rule tested at a look: its check's key and limit, the estimate on the passing
    side of the limit (the candidate's value for a floor, minus it for a ceiling, the
    improvement over the champion for a comparison), its standard error and items."""

    key: CheckKey
    limit: float
    estimate: float
    standard_error: float
    items: int
    candidate: float | None
    champion: float | None
    #: a comparison's paired change, judged at every look by the paired score test (the
    #: fixed-sample gate's test) instead of Student t
    score: PairedScore | None = None

    @property
    def z(self) -> float:
        if self.score is not None:
            return self.score.z(self.limit)
        return float(sequential.standardised(self.estimate, self.limit, self.standard_error))

    def p_below(self) -> float:
        """p-value of "the true value is on the failing side of the limit": the paired score
        test where it is the test, else Student t on the studentised estimate."""
        if self.score is not None:
            return self.score.p_below(self.limit)
        return float(stats.t.cdf(self.z, df=max(self.items - 1, 1))) if not np.isnan(self.z) else 1.0

    def p_above(self) -> float:
        """p-value of "the true value is on the passing side": the paired score test where
        it is the test, else Student t."""
        if self.score is not None:
            return self.score.p_above(self.limit)
        return float(stats.t.sf(self.z, df=max(self.items - 1, 1))) if not np.isnan(self.z) else 1.0


def _bound_test(key: CheckKey, limit: float, frame: pd.DataFrame | None, policy: GatePolicy) -> _LookTest | Check:
    """A floor or ceiling as a test at an interim look: the candidate's value and its
    bootstrap standard error (ratio metrics as aggregated); a check when it cannot be made yet."""
    evaluator, metric = registry.split_metric(key.metric)
    if frame is None or len(frame) < 2:
        return Check(key, Verdict.INCONCLUSIVE, "not decided at this look: too few records to test", limit=limit)
    statistic = set_statistic(evaluator, metric)
    value = statistic(frame)
    error = bootstrap_standard_error(frame, statistic, policy.resamples, policy.seed, resampled_statistic(evaluator, metric, frame))
    if value is None or error is None or not np.isfinite(value):
        return Check(key, Verdict.INCONCLUSIVE, "not decided at this look: the metric or its spread is undefined on these records", candidate=value, limit=limit, n_shared=len(frame))
    floor = key.rule is Rule.FLOOR
    return _LookTest(key, limit if floor else -limit, float(value) if floor else -float(value), error, len(frame), float(value), None)


def _look_bound_tests(policy: GatePolicy, candidate: dict[str, EvaluatorOutput]) -> list[_LookTest | Check]:
    """Every floor and ceiling (per-category ones too) as a test at an interim look."""
    tests: list[_LookTest | Check] = []
    for name, kind, limit in [*((n, Rule.FLOOR, v) for n, v in policy.floors.items()), *((n, Rule.CEILING, v) for n, v in policy.ceilings.items())]:
        output = candidate.get(registry.split_metric(name)[0])
        tests.append(_bound_test(CheckKey(kind, name), limit, None if output is None else output.samples, policy))
    for name, rule in policy.categories.items():
        evaluator = registry.split_metric(name)[0]
        output = candidate.get(evaluator)
        frame = None if output is None else output.samples
        by_category = category_ids(output, evaluator)
        for category in rule.only or sorted(by_category):
            ids = by_category.get(category, set())
            subset = None if frame is None else frame[frame["id"].isin(ids)]
            for kind, bound in ((Rule.FLOOR, rule.floor), (Rule.CEILING, rule.ceiling)):
                if bound is not None:
                    tests.append(_bound_test(CheckKey(kind, name, category), bound, subset, policy))
    return tests


def decide_at_look(policy: GatePolicy, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None, look: int, today: date | None = None) -> Decision:
    """The gate at look ``look`` (0-based) of the policy's ``sequential`` design, on the
    candidate's records of that look (``evaluators/metrics/sequential.py``).

    Each rule is a test of its estimate against its limit: a comparison's improvement over
    the champion on the shared items by the fixed-sample gate's paired score test, and at
    interim looks a floor's or ceiling's value studentised by its bootstrap standard error
    (the metric as the evaluator aggregates it, ratios included). A rule **fails** when
    Holm's step-down over the rules tested (``correction``), each step's level spent over
    the looks, shows it on the wrong side of its limit; it **passes** when its p-value of being on the right side is
    within the look's nominal level of α, the whole α at a last look that alone may
    promote (``sequential.pass_level``; an intersection-union test: no correction). At
    the last look a floor or ceiling is judged on the estimate itself, as the
    fixed-sample gate judges it, and a comparison neither failed nor passed is
    inconclusive; at an interim look such a rule is not decided yet. The look **settles**
    the decision when a rule failed (or an evaluator did not run or failed its
    expectations: fail closed at once), when every rule passed and the policy promotes
    early, or at the last look."""
    design = policy.sequential
    assert design is not None
    fractions, alpha = design.looks, 1 - policy.confidence
    last = look == len(fractions) - 1
    checks = _ran_checks(policy, candidate)
    tests: list[_LookTest | Check] = []
    if last:
        for name, kind, limit in [*((n, Rule.FLOOR, v) for n, v in policy.floors.items()), *((n, Rule.CEILING, v) for n, v in policy.ceilings.items())]:
            evaluator, metric = registry.split_metric(name)
            checks.append(_bound_check(CheckKey(kind, name), limit, _metric(candidate.get(evaluator), metric)))
        for name, rule in policy.categories.items():
            checks.extend(_category_bound_checks(name, rule, candidate))
    else:
        tests.extend(_look_bound_tests(policy, candidate))
    for comparison in _comparisons(policy, candidate, champion):
        compared = _paired_comparison(comparison, candidate, champion)
        if isinstance(compared, Check):
            if not last and compared.verdict is Verdict.COULD_NOT_JUDGE and compared.n_shared is not None:  # an undefined metric on few items: wait
                compared.verdict, compared.detail = Verdict.INCONCLUSIVE, f"not decided at this look: {compared.detail}"
            tests.append(compared)
            continue
        assert compared.difference is not None
        # the fixed-sample gate's paired score test at every look, against the spent levels
        tests.append(_LookTest(comparison.key, comparison.limit, compared.difference, compared.standard_error, compared.n_shared, compared.candidate, compared.champion, compared))
    tested = [t for t in tests if isinstance(t, _LookTest) and not np.isnan(t.z)]
    p_below = [t.p_below() for t in tested]
    if policy.correction == "holm":
        failed = sequential.sequential_holm(p_below, alpha, fractions, look, design.spending)
    else:
        level = alpha / len(tested) if policy.correction == "bonferroni" and tested else alpha
        failed = np.asarray(p_below) <= sequential.nominal_levels(fractions, level, design.spending)[look]
    pass_level = sequential.pass_level(fractions, alpha, look, design.promote_early, design.spending)
    failed_keys = {t.key for t, shown in zip(tested, failed, strict=True) if shown}
    where = f"look {look + 1} of {len(fractions)}, {fractions[look]:.0%} of the items"
    for test in tests:
        if isinstance(test, Check):
            checks.append(test)
            continue
        checks.append(_look_check(test, failed=test.key in failed_keys, pass_level=pass_level, last=last, where=where))
    _apply_waivers(checks, policy, today or datetime.now(UTC).date())
    passed = all(check.passed for check in checks)
    stops = any(check.verdict is Verdict.FAIL for check in checks) or any(c.verdict is Verdict.COULD_NOT_JUDGE and c.rule in (Rule.RAN, Rule.EXPECTATIONS) for c in checks)
    settled = last or stops or (passed and design.promote_early)
    record = LookRecord(index=look, of=len(fractions), fraction=fractions[look], settled=settled)
    return Decision(promote=passed and settled, checks=checks, policy=policy.model_dump(mode="json"), look=record)


def _look_check(test: _LookTest, failed: bool, pass_level: float, last: bool, where: str) -> Check:
    """A rule's check at a look: failed (Holm over the looks), passed (within the look's
    nominal level), inconclusive at the last look, or not decided yet at an interim one."""
    bound = sequential.t_boundary(pass_level, test.items)
    if test.score is not None:  # judged by the score test: its interval
        low, high = test.score.bounds(pass_level)
    else:
        low, high = test.estimate - bound * test.standard_error, test.estimate + bound * test.standard_error
    comparison = test.key.rule in (Rule.REGRESSION, Rule.SUPERIORITY)
    flip = -1.0 if test.key.rule is Rule.CEILING else 1.0  # a ceiling's estimate is the value negated
    shown = (test.estimate * flip, test.limit * flip)
    head = f"{test.candidate:.4f} vs {test.champion:.4f} on {test.items} shared samples: change {test.estimate:+.4f}" if comparison else f"{shown[0]:.4f} on {test.items} records"
    z = f"z {test.z:+.2f}"
    samples_needed = None
    if failed:
        verdict, detail = Verdict.FAIL, f"{head} ({z}, p {test.p_below():.3g}): shown beyond {shown[1]:+g} at {where}"
    elif test.p_above() <= pass_level:
        verdict, detail = Verdict.PASS, f"{head} ({z}): shown within {shown[1]:+g} at {where} (level {pass_level:.3g})"
    elif last:
        half_width = (test.estimate - low if test.estimate > test.limit else high - test.estimate) if test.score is not None else bound * test.standard_error
        samples_needed = samples_to_decide(test.items, test.estimate - test.limit, half_width)
        decide_with = f"about {samples_needed} items would decide" if samples_needed else "the estimate sits on the margin: no number of items decides"
        verdict, detail = Verdict.INCONCLUSIVE, f"{head} ({z}): neither side of {shown[1]:+g} shown at {where}: inconclusive, {decide_with}"
    else:
        verdict, detail = Verdict.INCONCLUSIVE, f"{head} ({z}): not decided at {where}"
    interval = (low, high) if comparison else (min(low * flip, high * flip), max(low * flip, high * flip))
    return Check(
        test.key, verdict, detail, candidate=test.candidate, champion=test.champion, limit=test.limit if comparison else shown[1],
        interval=interval, bound=interval[0] if comparison or flip > 0 else interval[1], p_value=test.p_below(), n_shared=test.items, samples_needed=samples_needed,
    )  # fmt: skip


def _apply_waivers(checks: list[Check], policy: GatePolicy, today: date) -> None:
    """A failing check named by a waiver whose day has not passed is let through, on record."""
    for check in checks:
        waiver = policy.waiver(check.key)
        if waiver is None or check.passed:
            continue
        if waiver.until < today:
            check.detail += f" (waiver by {waiver.by} expired on {waiver.until.isoformat()})"
            continue
        check.waiver, check.verdict = waiver, Verdict.WAIVED
        check.detail += f"; WAIVED by {waiver.by} until {waiver.until.isoformat()}: {waiver.reason}"
