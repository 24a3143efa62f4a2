"""The gate's policy (ARCHITECTURE.md, what the service promises): a YAML file per registered
model, read once and compiled into resolved rules (:class:`CompiledRules`) that the fixed-sample
gate (``fixed.py``), the sequential gate (``sequential.py``) and the power plan (``power.py``) judge by.

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
its items (``sequential.py``; docs/sequential.md): a decisive failure rejects at that
look, a look where every rule holds decisively promotes where the policy allows it, and
otherwise the next look follows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from vlgate.config import CONFIG_MODEL, load_yaml_model
from vlgate.decisions import CheckKey, Rule, Waiver
from vlgate.evaluators import registry
from vlgate.evaluators.definition import EvaluatorDefinition, Metric
from vlgate.evaluators.metrics import sequential
from vlgate.evaluators.metrics.sequential import Spending


@dataclass(frozen=True)
class ResolvedMetric:
    """A policy's ``EVALUATOR/METRIC`` resolved against the evaluator registry once, when
    the policy is read: nothing judging by it looks a name up again."""

    qualified: str
    definition: EvaluatorDefinition
    spec: Metric

    def __reduce__(self) -> tuple[Callable[[str], ResolvedMetric], tuple[str]]:
        """Pickled by name and resolved again where it is read (a definition holds functions)."""
        return resolve_metric, (self.qualified,)

    @property
    def evaluator(self) -> str:
        return self.definition.name

    @property
    def name(self) -> str:
        """The metric as its evaluator's metrics name it (``gc@5``: a spec may be a template such as ``gc@T``)."""
        return registry.split_metric(self.qualified)[1]

    @property
    def lower_is_better(self) -> bool:
        """It goes down when a model gets better (FID-type distances, Brier scores)."""
        return self.spec.direction == "lower"

    @property
    def group_field(self) -> str | None:
        return self.definition.group_field

    @property
    def value_range(self) -> tuple[float | None, float | None]:
        return self.spec.low, self.spec.high


@dataclass(frozen=True)
class BoundRule:
    """A floor or ceiling on the candidate's value of a metric (``key.rule``), on every item."""

    key: CheckKey
    metric: ResolvedMetric
    limit: float

    @property
    def floor(self) -> bool:
        return self.key.rule is Rule.FLOOR


@dataclass(frozen=True)
class ComparisonRule:
    """A comparison with the champion on the shared items: a regression (``limit`` is
    -max_drop) or a superiority rule (``limit`` is min_gain)."""

    key: CheckKey
    metric: ResolvedMetric
    limit: float


@dataclass(frozen=True)
class CategoryRules:
    """The rules on each category of a metric's evaluator's group field: floors and
    ceilings (``bounds``), a regression with margin ``limit`` (None: no ``max_drop``), on
    the categories ``only`` names (None: every category the candidate has), a category
    with fewer than ``min_samples`` records skipped."""

    metric: ResolvedMetric
    bounds: tuple[tuple[Rule, float], ...]
    limit: float | None
    only: tuple[str, ...] | None
    min_samples: int


@dataclass(frozen=True)
class CompiledRules:
    """The policy as the gate judges it, in the order its checks are listed: floors, then
    ceilings, then per-category bounds; regressions, then superiority rules, then
    per-category regressions."""

    bounds: tuple[BoundRule, ...]
    comparisons: tuple[ComparisonRule, ...]
    categories: tuple[CategoryRules, ...]


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


class ApprovalPolicy(BaseModel):
    """A person's sign-off before the alias moves: a candidate that passes every rule ends
    awaiting approval (``vlgate approve`` or ``vlgate reject``)."""

    model_config = CONFIG_MODEL

    required: bool = True
    approvers: list[str] = Field(default_factory=list, description="who may approve or reject; empty: anyone who can run vlgate approve")
    expires_after: timedelta = Field(default=timedelta(days=7), description="an approval later than this after the decision is recorded as expired: 7d, 12h, 30m or seconds")

    @field_validator("expires_after", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        """``7d``, ``12h``, ``30m``, ``45s`` (or what pydantic reads as a duration: seconds, ISO 8601)."""
        if isinstance(value, str) and (match := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms])\s*", value)):
            return timedelta(seconds=float(match[1]) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[match[2]])
        return value

    @field_validator("expires_after")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be a positive duration, e.g. 7d")
        return value


#: The category of a per-category check made when the candidate has no categories at all.
EVERY_CATEGORY = "*"


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
    approval: ApprovalPolicy | None = None
    #: each waiver by the key of the check it names, resolved when the policy is read
    _waived: dict[CheckKey, Waiver] = PrivateAttr(default_factory=dict)
    #: the rules resolved against the evaluator registry, when the policy is read
    _rules: CompiledRules = PrivateAttr()

    @classmethod
    def from_file(cls, path: str | Path) -> GatePolicy:
        return load_yaml_model(cls, path, "gate policy")

    def model_post_init(self, _context: object) -> None:
        known = registry.names()
        for name in self.required:
            if name not in known:
                raise ValueError(f"required: evaluator {name!r} is not one of {', '.join(known)}")
        bounds = [BoundRule(CheckKey(Rule.FLOOR, name), _resolved("floors", name, compared=False), limit) for name, limit in self.floors.items()]
        bounds += [BoundRule(CheckKey(Rule.CEILING, name), _resolved("ceilings", name, compared=False), limit) for name, limit in self.ceilings.items()]
        comparisons = [ComparisonRule(CheckKey(Rule.REGRESSION, name), _resolved("regressions", name, compared=True), -rule.max_drop) for name, rule in self.regressions.items()]
        comparisons += [ComparisonRule(CheckKey(Rule.SUPERIORITY, name), _resolved("superiority", name, compared=True), rule.min_gain) for name, rule in self.superiority.items()]
        categories = [
            CategoryRules(
                _resolved("categories", name, compared=rule.max_drop is not None),
                tuple((kind, limit) for kind, limit in ((Rule.FLOOR, rule.floor), (Rule.CEILING, rule.ceiling)) if limit is not None),
                None if rule.max_drop is None else -rule.max_drop,
                None if rule.only is None else tuple(rule.only),
                rule.min_samples,
            )
            for name, rule in self.categories.items()
        ]
        self._rules = CompiledRules(tuple(bounds), tuple(comparisons), tuple(categories))
        first_waiver: dict[CheckKey, int] = {}
        for n, waiver in enumerate(self.waivers):
            key = CheckKey.parse(waiver.check)
            if key is None or not self.makes_check(key):
                raise ValueError(f"waivers.{n}.check: the policy makes no check {waiver.check!r} (names as the decision prints them, e.g. {self.example_checks()})")
            if first_waiver.setdefault(key, n) != n:  # which one applied would depend on their order
                raise ValueError(f"waivers.{n}.check: {waiver.check!r} is waived already by waivers.{first_waiver[key]}; one check takes one waiver")
            self._waived[key] = waiver

    def model_copy(self, *, update: Mapping[str, object] | None = None, deep: bool = False) -> Self:
        """A changed copy is another policy: validated and compiled again, as when read."""
        if not update:
            return super().model_copy(deep=deep)
        return self.model_validate(self.model_dump() | dict(update))

    @property
    def needs_approval(self) -> bool:
        return self.approval is not None and self.approval.required

    @property
    def rules(self) -> CompiledRules:
        """The rules as the gate judges them, resolved when the policy was read."""
        return self._rules

    def evaluators(self) -> set[str]:
        """Every evaluator the policy needs results of."""
        rules = self._rules
        named = [*(r.metric for r in rules.bounds), *(r.metric for r in rules.comparisons), *(r.metric for r in rules.categories)]
        return {*self.required, *(metric.evaluator for metric in named)}

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


def _resolved(section: str, name: str, compared: bool) -> ResolvedMetric:
    """``name`` of policy section ``section`` resolved, or the one line that says why not."""
    known = registry.names()
    evaluator, metric = registry.split_metric(name)
    if evaluator not in known or not metric:
        raise ValueError(f"{section}.{name}: not EVALUATOR/METRIC with EVALUATOR one of {', '.join(known)}")
    definition = registry.get(evaluator)
    spec = definition.metric(metric)
    if spec is None:
        listed = ", ".join(m.name for m in definition.metrics)
        raise ValueError(f"{section}.{name}: {evaluator} has no metric {metric!r} (it has {listed})")
    if spec.ungateable:
        raise ValueError(f"{section}.{name}: {spec.ungateable}")
    if compared and spec.direction is None:
        raise ValueError(f"{section}.{name} has no better direction (a count or a share), so it cannot be compared with the champion")
    if section == "categories" and definition.group_field is None:
        with_groups = ", ".join(d.name for d in registry.definitions() if d.group_field)
        raise ValueError(f"categories.{name}: {evaluator}'s records have no categories (evaluators with them: {with_groups})")
    return ResolvedMetric(name, definition, spec)


def resolve_metric(qualified: str) -> ResolvedMetric:
    """A registered ``EVALUATOR/METRIC`` resolved (KeyError for one that is not)."""
    evaluator, name = registry.split_metric(qualified)
    definition = registry.get(evaluator)
    spec = definition.metric(name)
    if spec is None:
        raise KeyError(qualified)
    return ResolvedMetric(qualified, definition, spec)
