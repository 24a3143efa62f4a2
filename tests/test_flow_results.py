"""What the validation and drift flows return (and ``vlgate validate|drift --json`` print):
typed, refusing what no flow produces, and written as the JSON CI reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from vlgate.decisions import Baseline, Check, CheckKey, DecisionKind, DecisionRecord, Judge, Outcome, Rule, Verdict, decision_file
from vlgate.flows.drift import DriftOutcome, DriftResult
from vlgate.flows.validation import ValidationResult
from vlgate.versions import VersionRef


def test_a_validation_that_stopped_could_not_judge_with_its_error_and_nothing_else():
    result = ValidationResult.failed(VersionRef(model="shapes", version=3), RuntimeError("registry away"))
    assert result.outcome is Outcome.COULD_NOT_JUDGE and result.label == "rejected" and result.record is None
    assert result.as_json() == {"model": "shapes", "version": "3", "outcome": "could not judge", "error": "RuntimeError: registry away"}
    assert json.loads(json.dumps(result.as_json())) == result.as_json()


def test_a_decided_validation_writes_its_record_beside_what_it_was_given():
    check = Check.of(CheckKey(Rule.FLOOR, "lcm-mc/acc"), Verdict.PASS, "0.8 >= 0.5", candidate=0.8, limit=0.5)
    record = DecisionRecord(outcome=Outcome.PROMOTED, reasons=["ok"], checks=[check], policy_path="/p/gate.yaml")
    result = ValidationResult(model="shapes", version="2", run_id="r1", record=record, report="/r/v2.html")
    written = {
        "name": "lcm-mc/acc floor", "rule": "floor", "metric": "lcm-mc/acc", "category": None, "verdict": "pass", "passed": True, "detail": "0.8 >= 0.5",
        "candidate": 0.8, "champion": None, "limit": 0.5, "interval": None, "bound": None, "p_value": None, "n_shared": None, "samples_needed": None, "waiver": None,
    }  # fmt: skip
    shown = result.as_json()
    assert {k: shown[k] for k in ("model", "version", "run_id", "outcome", "reasons", "checks", "report", "policy_path")} == {
        "model": "shapes", "version": "2", "run_id": "r1", "outcome": "promoted", "reasons": ["ok"], "checks": [written], "report": "/r/v2.html", "policy_path": "/p/gate.yaml",
    }  # fmt: skip
    assert "decision" not in shown and "promote" not in shown  # the outcome is the one statement of it
    assert result.label == "promoted" and record.promote


def _record() -> DecisionRecord:
    check = Check.of(
        CheckKey(Rule.REGRESSION, "lcm-mc/lcm"), Verdict.INCONCLUSIVE, "spans the margin", candidate=0.61, champion=0.62, limit=-0.02,
        interval=(-0.05, 0.03), bound=-0.05, p_value=0.2, n_shared=40, samples_needed=160,
    )  # fmt: skip
    return DecisionRecord(
        outcome=Outcome.INCONCLUSIVE, reasons=["lcm-mc/lcm vs champion: spans the margin"], checks=[check],
        policy={"confidence": 0.95}, policy_path="/p/gate.yaml", champion_before="1", per_sample_correlations={"lcm-mc": {"spearman": 0.5}},
        sequence=2, kind=DecisionKind.REVALIDATION, baseline=Baseline.VALIDATION, judged_at=datetime(2026, 11, 27, 12, 30, tzinfo=UTC),
        judged_by=Judge(process="host pid 7", flow_run_id="fr-1", user="ops", request_id="tr-1"), policy_digest="ab" * 32, champion_after="1",
    )  # fmt: skip


def test_a_decision_record_reads_back_as_written_and_a_changed_file_is_refused_naming_the_field(tmp_path):
    record = _record()
    assert decision_file(record.sequence or 0) == "decisions/0002.json"
    path = tmp_path / "0002.json"
    path.write_text(json.dumps(record.as_json()))
    assert DecisionRecord.read(path) == record
    assert DecisionRecord.read(path).checks[0].interval == (-0.05, 0.03)  # a JSON list comes back as the interval's pair
    assert record.as_json()["checks"][0]["name"] == "lcm-mc/lcm vs champion" and record.as_json()["checks"][0]["passed"] is False
    changed = record.as_json()
    changed["checks"][0]["verdict"] = "maybe"
    path.write_text(json.dumps(changed))
    with pytest.raises(ValidationError, match=r"checks\.0\.verdict"):
        DecisionRecord.read(path)
    changed = record.as_json() | {"sequence": 0}  # records are numbered from 1
    path.write_text(json.dumps(changed))
    with pytest.raises(ValidationError, match="sequence"):
        DecisionRecord.read(path)


def test_a_check_read_back_must_say_what_its_fields_say(tmp_path):
    record = _record().as_json()
    for field, wrong in (("passed", True), ("name", "lcm-mc/acc vs champion")):
        changed = json.loads(json.dumps(record))
        changed["checks"][0][field] = wrong
        path = tmp_path / "changed.json"
        path.write_text(json.dumps(changed))
        with pytest.raises(ValidationError, match=field):
            DecisionRecord.read(path)


def test_a_record_written_with_decision_and_promote_reads_as_its_outcome_and_a_disagreeing_one_is_refused(tmp_path):
    earlier = _record().as_json() | {"decision": "rejected", "promote": False}
    path = tmp_path / "0001.json"
    path.write_text(json.dumps(earlier))
    assert DecisionRecord.read(path) == _record()
    for disagreeing in ({"promote": True}, {"decision": "promoted"}):
        path.write_text(json.dumps(earlier | disagreeing))
        with pytest.raises(ValidationError, match=next(iter(disagreeing))):
            DecisionRecord.read(path)


def test_results_refuse_what_no_flow_produces():
    with pytest.raises(ValidationError, match="record"):
        ValidationResult(model="m", version="1", record={"outcome": "fine"})
    with pytest.raises(ValidationError, match="decision"):
        ValidationResult(model="m", version="1", decision="rejected")
    with pytest.raises(ValidationError, match="outcome"):
        DriftResult(model="m", version="1", outcome="fine")


def test_a_drift_result_without_a_champion_says_why_and_has_no_run():
    result = DriftResult(model="shapes", version=None, outcome=DriftOutcome.NOT_CHECKED, error="no champion yet: nothing to check for drift", checks=[])
    assert result.as_json() == {"model": "shapes", "version": None, "outcome": "could not check", "error": "no champion yet: nothing to check for drift", "checks": []}
    assert not result.drifted and result.run_id is None
