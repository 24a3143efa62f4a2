"""What a gate decision is once made: the record logged as a validation run's
``decision.json`` and read back by the report, ``vlgate validate --json`` and ``vlgate gate``.

The gate (``flows/gate.py``) makes decisions; the dashboards read them. Both import the
types from here, the layer below both, so a field renamed on one side is a type error on the
other instead of a report that silently shows nothing. A record is read back with
:meth:`DecisionRecord.read`, which refuses a file that does not match, naming the field.
"""

from __future__ import annotations

import json
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from vlgate.config import CONFIG_MODEL

#: The artifact a validation run's decision is logged as.
DECISION_FILE = "decision.json"

#: Records are values: frozen, and nothing unknown is kept silently.
RECORD_MODEL = ConfigDict(frozen=True, extra="forbid")


class Rule(StrEnum):
    """What a check judges: that an evaluator ran, its expectations, a floor or ceiling on a
    metric, a regression against the champion, a superiority over it."""

    RAN = "ran"
    EXPECTATIONS = "expectations"
    FLOOR = "floor"
    CEILING = "ceiling"
    REGRESSION = "regression"
    SUPERIORITY = "superiority"

    @property
    def phrase(self) -> str:
        """How a check's name says the rule (``lcm-mc/acc vs champion``)."""
        return "vs champion" if self is Rule.REGRESSION else self.value


class Verdict(StrEnum):
    """One check's verdict: pass; fail (the numbers say no); could not judge (something to
    judge was missing: an evaluator that did not run, a metric undefined, no shared samples;
    such a check fails closed too); inconclusive (a comparison whose interval spans its
    margin); waived (failed, let through by a waiver in the policy)."""

    PASS = "pass"
    FAIL = "fail"
    COULD_NOT_JUDGE = "could not judge"
    INCONCLUSIVE = "inconclusive"
    WAIVED = "waived"


class Outcome(StrEnum):
    """A decision's outcome: what ``vlgate validate``'s exit status says."""

    PROMOTED = "promoted"
    REJECTED = "rejected"
    COULD_NOT_JUDGE = "could not judge"
    INCONCLUSIVE = "inconclusive"


class Waiver(BaseModel):
    """A failing check let through, on record (a policy's ``waivers`` entry)."""

    model_config = CONFIG_MODEL

    check: str = Field(min_length=1, description="the check's name as the decision prints it, e.g. 'lcm-mc/acc vs champion'")
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    until: date = Field(description="the last day the waiver applies (UTC)")


class CheckRecord(BaseModel):
    """One check as decided: its key (rule, metric, category) and printed ``name``, its
    verdict with the words that explain it, and the numbers it was judged on."""

    model_config = RECORD_MODEL

    name: str
    rule: Rule
    metric: str
    category: str | None = None
    verdict: Verdict
    passed: bool
    detail: str
    candidate: float | None = None
    champion: float | None = None
    #: the floor or ceiling, -max_drop of a regression rule, min_gain of a superiority rule
    limit: float | None = None
    #: the bootstrap interval of the improvement (candidate better: positive)
    interval: tuple[float, float] | None = None
    #: the bound judged against the limit (the improvement's lower bound)
    bound: float | None = None
    #: a comparison's adjusted p-value of "shown below the limit"
    p_value: float | None = None
    #: a comparison's shared samples
    n_shared: int | None = None
    #: an inconclusive comparison's estimate of the shared samples that would decide
    samples_needed: int | None = None
    waiver: Waiver | None = None


class LookRecord(BaseModel):
    """The look of a group-sequential validation a decision was taken at: ``index``
    (0-based) of ``of`` looks, after ``fraction`` of each evaluator's items; ``settled``:
    the decision stands (a rule failed decisively, every rule held decisively where the
    policy promotes early, or the last look), else the next look follows."""

    model_config = RECORD_MODEL

    index: int
    of: int
    fraction: float
    settled: bool


class DecisionRecord(BaseModel):
    """One gate decision on one candidate, as logged in ``decision.json``."""

    model_config = RECORD_MODEL

    decision: Literal["promoted", "rejected"]
    promote: bool
    outcome: Outcome
    #: the failed (and waived) checks' ``name: detail`` when rejected (at an interim look not
    #: those it had not decided yet), every check's when promoted
    reasons: list[str] = Field(default_factory=list)
    checks: list[CheckRecord] = Field(default_factory=list)
    #: the policy judged with, as loaded
    policy: dict[str, Any] = Field(default_factory=dict)
    policy_path: str
    #: the champion judged against (None: the model had none)
    champion_before: str | None = None
    warnings: list[str] = Field(default_factory=list)
    #: per evaluator, the candidate's per-sample scores correlated with the champion's
    per_sample_correlations: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: the look it was taken at (a sequential policy); None: every item, judged once
    look: LookRecord | None = None

    @classmethod
    def read(cls, path: Path) -> DecisionRecord:
        """A logged ``decision.json``; a file that does not match is refused naming the field."""
        return cls.model_validate(json.loads(path.read_text()))

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class LookSummary(BaseModel):
    """One look of a sequential validation: where, what the gate said, and the checks it
    decided there (failed or passed; the others went on to the next look)."""

    model_config = RECORD_MODEL

    look: LookRecord
    outcome: Outcome
    items: dict[str, int]
    decided: list[str] = Field(default_factory=list)


class SequentialRecord(BaseModel):
    """What a sequential validation evaluated (``sequential.json`` on its run): each look,
    the items evaluated and in all per evaluator, and the share of item evaluations the
    early stop saved (0 when every look ran)."""

    model_config = RECORD_MODEL

    looks: list[LookSummary]
    items_evaluated: dict[str, int]
    items_total: dict[str, int]

    @property
    def stopped_at(self) -> LookRecord:
        return self.looks[-1].look

    @computed_field  # type: ignore[prop-decorator]
    @property
    def saved_fraction(self) -> float:
        total = sum(self.items_total.values())
        return 0.0 if total == 0 else 1 - sum(self.items_evaluated.values()) / total

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def read(cls, path: Path) -> SequentialRecord:
        """A logged ``sequential.json`` (its ``saved_fraction`` is derived, not read)."""
        data = json.loads(path.read_text())
        data.pop("saved_fraction", None)
        return cls.model_validate(data)


class RulePower(BaseModel):
    """What one rule of the policy can decide on the suite's items."""

    model_config = RECORD_MODEL

    check: str
    rule: Rule
    items: int | None
    spread: float | None
    spread_from: str
    level: float
    margin: float | None = None
    detectable: float | None = None
    items_needed: int | None = None
    warning: str | None = None


class PowerPlan(BaseModel):
    """``vlgate plan``'s answer (and ``power.json`` on a validation run): every rule's row,
    and the versions the spreads came from (``flows/power.py``)."""

    model_config = RECORD_MODEL

    model: str
    champion: str | None
    baseline: str | None
    alpha: float
    power: float
    rules: list[RulePower]

    @property
    def warnings(self) -> list[str]:
        return [rule.warning for rule in self.rules if rule.warning]
