"""What a gate decision is once made: the records logged on a validation run under
``decisions/`` and read back by the report, ``vlgate validate --json``, ``vlgate status``
and ``vlgate gate``.

A decision, once recorded, is never rewritten. Every judgement of a version that is
recorded (its validation, a re-validation, ``vlgate gate --apply``) adds the next record,
``decisions/0001.json``, ``decisions/0002.json``, ...; the version's tags show the latest
(docs/service.md, "Decisions are records").

The gate (``flows/gate.py``) makes decisions; the dashboards read them. Both import the
types from here, the layer below both, so a field renamed on one side is a type error on the
other instead of a report that silently shows nothing. A record is read back with
:meth:`DecisionRecord.read`, which refuses a file that does not match, naming the field.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from vlgate.config import CONFIG_MODEL

#: The folder of a validation run's decision records, one file each, numbered from 1.
DECISIONS_FOLDER = "decisions"
#: How a run logged before records were numbered kept its one decision (read as record 1).
SINGLE_DECISION_FILE = "decision.json"


def decision_file(sequence: int) -> str:
    """The artifact path of a run's ``sequence``-th decision record."""
    return f"{DECISIONS_FOLDER}/{sequence:04d}.json"


def decision_policy_file(sequence: int) -> str:
    """The artifact path of the policy file the ``sequence``-th record was judged with."""
    return f"{DECISIONS_FOLDER}/{sequence:04d}.policy.yaml"


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
    #: the champion a validation was judged against still holds the alias when it would
    #: move (another version was promoted meanwhile: the comparison is with the wrong one)
    ALIAS = "alias"

    @property
    def phrase(self) -> str:
        """How a check's name says the rule (``lcm-mc/acc vs champion``)."""
        return {Rule.REGRESSION: "vs champion", Rule.ALIAS: "alias unchanged"}.get(self, self.value)


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


class DecisionKind(StrEnum):
    """Which judgement made a record: a version's first validation, a validation run again
    (``vlgate validate`` on a decided version), or ``vlgate gate --apply`` (its validation
    run judged again without evaluating)."""

    VALIDATION = "validation"
    REVALIDATION = "re-validation"
    REJUDGEMENT = "gate --apply"


class Baseline(StrEnum):
    """Which champion a judgement compares with: the one the version's validation fixed
    when it was first judged (every re-run by default), or today's, asked for explicitly."""

    VALIDATION = "validation's champion"
    CURRENT = "today's champion"


class Judge(BaseModel):
    """Who made a record: the process (host and pid), the Prefect flow run when one ran
    it, and the operating-system user (an authenticated identity where the deployment has one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    process: str
    flow_run_id: str | None = None
    user: str | None = None
    #: the request that made it (the gate's task run): a retried request appends nothing twice
    request_id: str | None = None


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
    """One gate decision on one candidate, as logged in ``decisions/NNNN.json``. The fields
    from ``sequence`` on say which record it is and how it came to be; a judgement that was
    not recorded (``vlgate gate`` without ``--apply``, an interim look) has no ``sequence``."""

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
    #: its number among the run's records (1 the first); None: not recorded
    sequence: int | None = Field(default=None, ge=1)
    kind: DecisionKind | None = None
    #: which champion ``champion_before`` is: the validation's (fixed at its first judgement) or today's
    baseline: Baseline = Baseline.VALIDATION
    judged_at: datetime | None = None
    judged_by: Judge | None = None
    #: the policy file's SHA-256 (the file itself is logged beside the record)
    policy_digest: str | None = None
    #: who held the champion alias once the record was made, and whether this record moved it
    champion_after: str | None = None
    alias_moved: bool = False

    @classmethod
    def read(cls, path: Path) -> DecisionRecord:
        """A logged record; a file that does not match is refused naming the field."""
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
