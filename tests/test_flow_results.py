"""What the validation and drift flows return (and ``vlgate validate|drift --json`` print):
typed, refusing what no flow produces, and written as the JSON CI reads."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from vlgate.flows.drift import DriftOutcome, DriftResult
from vlgate.flows.gate import Outcome
from vlgate.flows.validation import ValidationResult


def test_a_validation_that_stopped_is_rejected_could_not_judge_with_its_error_and_nothing_else():
    result = ValidationResult.failed("shapes", 3, RuntimeError("registry away"))
    assert result.outcome is Outcome.COULD_NOT_JUDGE and result.decision == "rejected"
    assert result.as_json() == {"model": "shapes", "version": "3", "decision": "rejected", "outcome": "could not judge", "error": "RuntimeError: registry away"}
    assert json.loads(json.dumps(result.as_json())) == result.as_json()


def test_a_decided_validation_writes_every_field_it_was_given():
    check = {"name": "lcm-mc/acc floor", "verdict": "pass", "passed": True}
    result = ValidationResult(model="shapes", version="2", decision="promoted", outcome=Outcome.PROMOTED, run_id="r1", reasons=["ok"], checks=[check], report="/r/v2.html")
    assert result.as_json() == {"model": "shapes", "version": "2", "decision": "promoted", "outcome": "promoted", "run_id": "r1", "reasons": ["ok"], "checks": [check], "report": "/r/v2.html"}


def test_results_refuse_what_no_flow_produces():
    with pytest.raises(ValidationError, match="decision"):
        ValidationResult(model="m", version="1", decision="maybe", outcome=Outcome.PROMOTED)
    with pytest.raises(ValidationError, match="outcome"):
        ValidationResult(model="m", version="1", decision="rejected", outcome="fine")
    with pytest.raises(ValidationError, match="verdict"):
        ValidationResult(model="m", version="1", decision="rejected", outcome=Outcome.REJECTED, verdict="no")
    with pytest.raises(ValidationError, match="outcome"):
        DriftResult(model="m", version="1", outcome="fine")


def test_a_drift_result_without_a_champion_says_why_and_has_no_run():
    result = DriftResult(model="shapes", version=None, outcome=DriftOutcome.NOT_CHECKED, error="no champion yet: nothing to check for drift", checks=[])
    assert result.as_json() == {"model": "shapes", "version": None, "outcome": "could not check", "error": "no champion yet: nothing to check for drift", "checks": []}
    assert not result.drifted and result.run_id is None
