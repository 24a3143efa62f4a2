"""The typed values that cross the call tree: a version parsed once where it enters
(``vlgate/versions.py``, ``VersionRef``), a value changed only through its model's
validation (``vlgate/values.py``, ``replaced``), and a decision record built once from the
gate's verdict (``vlgate/decisions.py``, ``GateVerdict``)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from vlgate.decisions import Check, CheckKey, DecisionRecord, GateVerdict, Outcome, Rule, Verdict
from vlgate.flows.validation import ValidationResult
from vlgate.values import replaced
from vlgate.versions import VersionError, VersionRef


def test_a_version_is_parsed_once_into_its_canonical_form_and_named_as_messages_name_it():
    subject = VersionRef.of("shapes", 12)
    assert (subject.model, subject.version, str(subject), subject.uri) == ("shapes", "12", "shapes v12", "models:/shapes/12")
    assert VersionRef.of("shapes", "12") == subject and hash(VersionRef.of("shapes", "12")) == hash(subject)
    assert VersionRef.model_validate_json(subject.model_dump_json()) == subject  # crosses a task boundary as it is


@pytest.mark.parametrize("text", ["01", "1.0", "abc", "", "-1", True, None, "1" * 19])
def test_a_text_that_is_not_a_version_number_is_refused_in_one_line(text):
    with pytest.raises(VersionError) as refused:
        VersionRef.of("shapes", text)
    assert str(refused.value).startswith(f"version {text!r}: expected the registry's number") and "\n" not in str(refused.value)
    with pytest.raises(ValidationError):  # built any other way, it is checked the same
        VersionRef(model="shapes", version=text)  # type: ignore[arg-type]


def test_replaced_validates_the_new_value_and_keeps_the_fields_that_were_set():
    check = Check.of(CheckKey(Rule.FLOOR, "lcm-mc/acc"), Verdict.FAIL, "0.40 < 0.50", candidate=0.4, limit=0.5)
    waived = replaced(check, verdict=Verdict.WAIVED, detail="waived")
    assert (waived.verdict, waived.detail, waived.candidate, waived.limit, check.verdict) == (Verdict.WAIVED, "waived", 0.4, 0.5, Verdict.FAIL)
    with pytest.raises(ValidationError, match="verdict"):
        replaced(check, verdict="maybe")  # model_copy would have kept it
    with pytest.raises(ValidationError, match="verdit"):
        replaced(check, verdit=Verdict.PASS)  # a misspelt field is refused, not kept aside
    result = ValidationResult(model="m", version="3", error="boom")
    told = replaced(result, waited_for_another=True)
    assert told.model_fields_set == {"model", "version", "error", "waited_for_another"}
    assert json.loads(json.dumps(told.as_json())) == {"model": "m", "version": "3", "outcome": "could not judge", "error": "boom", "waited_for_another": True}


def test_the_gates_verdict_becomes_a_record_with_everything_it_says_and_a_record_reads_back_alone():
    check = Check.of(CheckKey(Rule.FLOOR, "lcm-mc/acc"), Verdict.PASS, "0.80 >= 0.50", candidate=0.8, limit=0.5)
    verdict = GateVerdict(outcome=Outcome.AWAITING_APPROVAL, reasons=["lcm-mc/acc floor: 0.80 >= 0.50"], checks=[check], policy={"required": ["lcm-mc"]})
    assert (verdict.promote, verdict.settled, verdict.label) == (False, True, "awaiting approval")
    record = DecisionRecord.model_validate(verdict.as_json() | {"sequence": 2, "champion_before": "1"})
    assert (record.outcome, record.checks, record.reasons, record.policy, record.sequence) == (verdict.outcome, [check], verdict.reasons, verdict.policy, 2)
