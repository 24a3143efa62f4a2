"""What a gate decision is once made: the records logged on a validation run under
``decisions/`` and read back by the report, ``vlgate validate --json``, ``vlgate status``
and ``vlgate gate``.

A decision, once recorded, is never rewritten. Every judgement of a version that is
recorded (its validation, a re-validation, ``vlgate gate --apply``) adds the next record,
``decisions/0001.json``, ``decisions/0002.json``, ...; the version's tags show the latest
(docs/service.md, "Decisions are records").

The gate (``gate/``) makes decisions; the dashboards read them. Both import the
types from here, the layer below both, so a field renamed on one side is a type error on the
other instead of a report that silently shows nothing. A record is read back with
:meth:`DecisionRecord.read`, which refuses a file that does not match, naming the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, computed_field, model_validator

from vlgate.config import CONFIG_MODEL
from vlgate.values import replaced

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
    #: every rule passed and the policy wants a person's sign-off: the alias waits for ``vlgate approve``
    AWAITING_APPROVAL = "awaiting approval"
    #: an approval that came after the policy's ``expires_after``: nothing moved
    APPROVAL_EXPIRED = "approval expired"


def outcome_label(outcome: Outcome) -> str:
    """How the ``vlgate.decision`` tag says an outcome: promoted, awaiting approval, or rejected
    (fail closed: anything but those two)."""
    return outcome.value if outcome in (Outcome.PROMOTED, Outcome.AWAITING_APPROVAL) else "rejected"


class DecisionKind(StrEnum):
    """Which judgement made a record: a version's first validation, a validation run again
    (``vlgate validate`` on a decided version), or ``vlgate gate --apply`` (its validation
    run judged again without evaluating)."""

    VALIDATION = "validation"
    REVALIDATION = "re-validation"
    REJUDGEMENT = "gate --apply"
    #: a person's sign-off on a version awaiting approval (``vlgate approve``), or one too late
    APPROVAL = "approval"
    #: a person's refusal of a version awaiting approval (``vlgate reject``)
    REJECTION = "rejection"
    #: a sign-off refused because the person may not give it (not among the policy's
    #: approvers, or without MANAGE on the registered model): the version still awaits
    REFUSED_SIGN_OFF = "refused sign-off"


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
    #: ``user`` is an authenticated identity; False: the operating-system user or a declared ``--by``
    verified: bool = False


class Waiver(BaseModel):
    """A failing check let through, on record (a policy's ``waivers`` entry)."""

    model_config = CONFIG_MODEL

    check: str = Field(min_length=1, description="the check's name as the decision prints it, e.g. 'lcm-mc/acc vs champion'")
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    until: date = Field(description="the last day the waiver applies (UTC)")


#: How a printed check name reads: ``METRIC[CATEGORY] PHRASE`` (the category only for a per-category rule).
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


class Check(BaseModel):
    """One rule of the policy on one candidate, as decided and as recorded: its key (rule,
    metric, category; printed as ``name``), its verdict with the words that explain it
    (``detail``, written by ``gate/rendering.py``), and the numbers it was judged on. The
    gate, the flow's result, the decision records, the CLI and the report all hold this one
    type; ``name`` and ``passed`` are derived, written to JSON for readers and checked
    against the fields when a record is read back."""

    model_config = RECORD_MODEL

    rule: Rule
    metric: str
    category: str | None = None
    verdict: Verdict
    detail: str
    candidate: float | None = None
    champion: float | None = None
    #: the floor or ceiling, -max_drop of a regression rule, min_gain of a superiority rule
    limit: float | None = None
    #: the two-sided interval of the estimate judged (a comparison's improvement, candidate better: positive)
    interval: tuple[float, float] | None = None
    #: the bound judged against the limit (a comparison's lower bound of the improvement)
    bound: float | None = None
    #: a comparison's adjusted p-value of "shown below the limit"
    p_value: float | None = None
    #: a comparison's shared samples (at a look, the items a floor or ceiling was tested on)
    n_shared: int | None = None
    #: an inconclusive comparison's estimate of the shared samples that would decide
    samples_needed: int | None = None
    waiver: Waiver | None = None

    @model_validator(mode="before")
    @classmethod
    def _derived_fields_agree(cls, data: object) -> object:
        """A record read back carries ``name`` and ``passed``: they must say what the fields say."""
        if not isinstance(data, dict) or ("name" not in data and "passed" not in data):
            return data
        fields = {k: v for k, v in data.items() if k not in ("name", "passed")}
        check = cls.model_validate(fields)
        if "name" in data and data["name"] != check.name:
            raise ValueError(f"name {data['name']!r} is not the check its fields make ({check.name!r})")
        if "passed" in data and data["passed"] != check.passed:
            raise ValueError(f"passed {data['passed']!r} disagrees with verdict {check.verdict.value!r}")
        return fields

    @classmethod
    def of(cls, key: CheckKey, verdict: Verdict, detail: str, **numbers: object) -> Check:
        return cls.model_validate({"rule": key.rule, "metric": key.metric, "category": key.category, "verdict": verdict, "detail": detail, **numbers})

    def described(self, detail: str) -> Check:
        """This check with the words that explain it, which ``gate/rendering.py`` writes from
        the check's own fields."""
        return replaced(self, detail=detail)

    @property
    def key(self) -> CheckKey:
        return CheckKey(self.rule, self.metric, self.category)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def name(self) -> str:
        return self.key.name

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return self.verdict in (Verdict.PASS, Verdict.WAIVED)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summarize_checks(checks: list[Check]) -> list[str]:
    """A decision's checks in a few lines, for a reader at a glance: each check that did not
    pass on its own line (``name: verdict, detail``; the ones that fail closed first), each
    waived one with its waiver, then one line per rule whose checks passed, counted
    (``6 floors held``). What the full list says is kept in the record's ``reasons``."""
    blocking = [c for c in checks if c.verdict in (Verdict.FAIL, Verdict.COULD_NOT_JUDGE)]
    undecided = [c for c in checks if c.verdict == Verdict.INCONCLUSIVE]
    lines = [f"{c.name}: {c.verdict.value}, {c.detail}" for c in (*blocking, *undecided)]
    lines += [f"{c.name}: waived by {c.waiver.by} until {c.waiver.until.isoformat()} ({c.waiver.reason})" for c in checks if c.verdict == Verdict.WAIVED and c.waiver is not None]
    passed = [c for c in checks if c.verdict == Verdict.PASS]

    def of(rule: Rule) -> list[Check]:
        return [c for c in passed if c.rule == rule]

    if ran := of(Rule.RAN):
        lines.append(f"{_count(len(ran), 'evaluator', 'evaluators')} ran")
    if expected := of(Rule.EXPECTATIONS):
        lines.append(f"expectations passed on {_count(len(expected), 'evaluator', 'evaluators')}")
    if floors := of(Rule.FLOOR):
        lines.append(f"{_count(len(floors), 'floor', 'floors')} held")
    if ceilings := of(Rule.CEILING):
        lines.append(f"{_count(len(ceilings), 'ceiling', 'ceilings')} held")
    comparisons = of(Rule.REGRESSION) + of(Rule.SUPERIORITY)
    # a comparison passes without numbers only where there was nothing to compare with
    compared = [c for c in comparisons if c.champion is not None or c.interval is not None]
    if compared:
        lines.append(f"{_count(len(compared), 'comparison', 'comparisons')} with the champion passed")
    if len(compared) < len(comparisons):
        lines.append(f"{_count(len(comparisons) - len(compared), 'comparison', 'comparisons')} with the champion not made: no champion yet")
    if of(Rule.ALIAS):
        lines.append("the champion judged against still held the alias")
    return lines


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


class GateVerdict(BaseModel):
    """What the gate says of one candidate's outputs under a policy (``gate/``): the outcome
    its checks add up to, the reasons, the checks, the policy as loaded and the look it was
    said at. The judgement (``flows/judgement.py``) builds the :class:`DecisionRecord` from
    it once, with what it knows besides (the champion, who judged, its number)."""

    model_config = RECORD_MODEL

    outcome: Outcome
    reasons: list[str]
    checks: list[Check]
    policy: dict[str, Any]
    look: LookRecord | None = None

    @property
    def promote(self) -> bool:
        return self.outcome is Outcome.PROMOTED

    @property
    def settled(self) -> bool:
        """Whether it stands: always without looks; at a look, when it stopped the validation."""
        return self.look is None or self.look.settled

    @property
    def label(self) -> str:
        return outcome_label(self.outcome)

    def as_json(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json")


class DecisionRecord(BaseModel):
    """One gate decision on one candidate, as logged in ``decisions/NNNN.json``. The fields
    from ``sequence`` on say which record it is and how it came to be; a judgement that was
    not recorded (``vlgate gate`` without ``--apply``, an interim look) has no ``sequence``."""

    model_config = RECORD_MODEL

    #: the one statement of what was decided; ``promote`` and ``label`` are read from it
    outcome: Outcome
    #: the failed (and waived) checks' ``name: detail`` when rejected (at an interim look not
    #: those it had not decided yet), every check's when promoted
    reasons: list[str] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    #: the policy judged with, as loaded
    policy: dict[str, Any] = Field(default_factory=dict)
    #: the policy file judged with (None: a policy that was not read from a file)
    policy_path: str | None = None
    #: the champion judged against (None: the model had none)
    champion_before: str | None = None
    warnings: list[str] = Field(default_factory=list)
    #: per evaluator, the candidate's per-sample scores correlated with the champion's
    per_sample_correlations: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
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
    #: why a person approved or rejected it (``vlgate approve|reject --reason``)
    note: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _outcome_alone(cls, data: object) -> object:
        """Records written before ``outcome`` was the one statement also carried
        ``decision`` and ``promote``: read, they must agree with it, and are dropped."""
        if not isinstance(data, dict) or ("decision" not in data and "promote" not in data):
            return data
        promoted = data.get("outcome") == Outcome.PROMOTED.value
        if "promote" in data and data["promote"] is not promoted:
            raise ValueError(f"promote {data['promote']!r} disagrees with outcome {data.get('outcome')!r}")
        if "decision" in data and data["decision"] != ("promoted" if promoted else "rejected"):
            raise ValueError(f"decision {data['decision']!r} disagrees with outcome {data.get('outcome')!r}")
        return {k: v for k, v in data.items() if k not in ("decision", "promote")}

    @property
    def promote(self) -> bool:
        return self.outcome is Outcome.PROMOTED

    @property
    def label(self) -> str:
        """The ``vlgate.decision`` tag: promoted, awaiting approval, or rejected (fail closed:
        anything else)."""
        return outcome_label(self.outcome)

    @property
    def settled(self) -> bool:
        """Whether this decision stands: always for a fixed-sample one; at a look, when it
        stopped the validation (:class:`LookRecord`)."""
        return self.look is None or self.look.settled

    @property
    def summary(self) -> list[str]:
        """Its checks at a glance (:func:`summarize_checks`); its reasons where it holds no
        checks (a person's sign-off: the reasons say who and why)."""
        return summarize_checks(self.checks) if self.checks else list(self.reasons)

    @classmethod
    def read(cls, path: Path, sequence: int | None = None) -> DecisionRecord:
        """A logged record; a file that does not match is refused naming the field.
        ``sequence``: its number, for a file logged before records carried one."""
        data = json.loads(path.read_text())
        return cls.model_validate(data if sequence is None or not isinstance(data, dict) else data | {"sequence": sequence})

    def as_json(self) -> dict[str, JsonValue]:
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

    def as_json(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json")

    @classmethod
    def read(cls, path: Path) -> SequentialRecord:
        """A logged ``sequential.json`` (its ``saved_fraction`` is derived, not read)."""
        data = json.loads(path.read_text())
        data.pop("saved_fraction", None)
        return cls.model_validate(data)
