"""Human sign-off (gate/policy.py ``approval:``, flows/approval.py, ``vlgate approve|reject``):
a candidate that passes every rule awaits a person; approval moves the alias only from the
champion it was judged against (judged again against today's first), late is expired, and
every sign-off is a record."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml

from vlgate.decisions import DecisionKind, Outcome, outcome_label
from vlgate.flows.context import ServiceContext
from vlgate.gate.policy import GatePolicy


def test_the_approval_section_is_read_with_its_duration_and_refused_when_it_makes_no_sense():
    policy = GatePolicy(required=[], approval={"approvers": ["alice"], "expires_after": "12h"})
    assert policy.needs_approval and policy.approval is not None and policy.approval.expires_after == timedelta(hours=12)
    assert GatePolicy(required=[], approval={}).approval.expires_after == timedelta(days=7)
    assert not GatePolicy(required=[], approval={"required": False}).needs_approval and not GatePolicy(required=[]).needs_approval
    for wrong in ("0s", "soon", "-3d"):
        with pytest.raises(ValueError, match="expires_after"):
            GatePolicy(required=[], approval={"expires_after": wrong})


def test_a_candidate_that_passes_every_rule_awaits_approval_and_one_that_fails_is_rejected():
    from test_gate import _mc_records, _result

    from vlgate.cli.commands.base import EXIT_AWAITING_APPROVAL, exit_status
    from vlgate.gate.gates import decide

    policy = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5}, approval={"approvers": ["alice"]}, resamples=100)
    good, poor = {"lcm-mc": _result(_mc_records([0.9] * 10))}, {"lcm-mc": _result(_mc_records([0.3] * 10))}
    waiting = decide(policy, good, None)
    assert (waiting.outcome, waiting.promote, waiting.label) == (Outcome.AWAITING_APPROVAL, False, "awaiting approval")
    assert exit_status(waiting.outcome) == EXIT_AWAITING_APPROVAL and all(c.passed for c in waiting.checks)
    assert decide(policy, poor, None).outcome is Outcome.REJECTED
    assert outcome_label(Outcome.APPROVAL_EXPIRED) == "rejected" and outcome_label(Outcome.PROMOTED) == "promoted"


def approval_home(tmp_path, monkeypatch, world, model: str, approval: dict) -> None:
    """VLGATE_HOME at ``tmp_path`` with ``model`` configured: the tiny world's lcm-mc suite and a
    lenient policy that wants ``approval``."""
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB"):
        monkeypatch.delenv(name, raising=False)
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "s", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200, "approval": approval}))
    (tmp_path / "vlgate.yaml").write_text(yaml.safe_dump({"models": {model: {"suite": "suite.yaml", "policy": "gate.yaml"}}}))


@pytest.mark.world
@pytest.mark.service
@pytest.mark.slow
def test_approve_reject_expire_and_judge_again_when_the_alias_moved(tmp_path, monkeypatch, tiny_world, capsys):
    from test_service_e2e import validate_pending

    from vlgate import tag_keys, tracking
    from vlgate.cli.main import main

    world, _ = tiny_world
    approval_home(tmp_path, monkeypatch, world, "a", {"approvers": ["alice", "bob"], "expires_after": "7d"})
    client = tracking.connect(tmp_path)
    for checkpoint in ("vlm-steps0", "vlm-steps3", "vlm-language-prior"):
        tracking.register_checkpoint(client, "a", world / "checkpoints" / checkpoint, home=tmp_path)
    assert validate_pending(tmp_path, "a") == [("a", "1"), ("a", "2"), ("a", "3")]

    def record(version: str):
        return tracking.latest_decision(client, client.get_model_version("a", version).tags[tag_keys.VALIDATION_RUN])

    assert {v: record(v).outcome for v in "123"} == dict.fromkeys("123", Outcome.AWAITING_APPROVAL)
    assert tracking.champion_version(client, "a") is None and client.get_model_version("a", "1").tags[tag_keys.DECISION] == "awaiting approval"

    assert main(["approve", "a", "1", "--reason", "looks right", "--by", "mallory"]) == 2  # not an approver: refused, on record
    assert "not among the policy's approvers" in capsys.readouterr().err
    refused = record("1")
    assert (refused.kind, refused.outcome, refused.judged_by.user, refused.alias_moved, refused.sequence) == (DecisionKind.REFUSED_SIGN_OFF, Outcome.AWAITING_APPROVAL, "mallory", False, 2)
    assert tracking.champion_version(client, "a") is None and client.get_model_version("a", "1").tags[tag_keys.DECISION] == "awaiting approval"
    assert main(["approve", "a", "1", "--reason", "looks right", "--by", "alice", "--json"]) == 0
    approved = json.loads(capsys.readouterr().out)
    assert (approved["kind"], approved["outcome"], approved["note"], approved["judged_by"]["user"], approved["judged_by"]["verified"]) == ("approval", "promoted", "looks right", "alice", False)
    assert approved["alias_moved"] and tracking.champion_version(client, "a") == "1" and approved["sequence"] == 3
    assert approved["champion_before"] is None  # the awaiting decision's champion, not the refusal's

    # v2 and v3 were judged against no champion; v1 took the alias since: v3 is judged again against v1 first
    assert main(["approve", "a", "3", "--reason", "ok", "--by", "bob", "--json"]) in (0, 3, 4, 5)
    third = json.loads(capsys.readouterr().out)
    history = tracking.decision_history(client, client.get_model_version("a", "3").tags[tag_keys.VALIDATION_RUN])
    assert [r.kind for r in history][:2] == [DecisionKind.VALIDATION, DecisionKind.REJUDGEMENT] and history[1].champion_before == "1"
    if history[1].outcome is Outcome.AWAITING_APPROVAL:  # the re-judgement passed: the approval applied to it
        assert third["outcome"] == "promoted" and history[-1].kind is DecisionKind.APPROVAL and tracking.champion_version(client, "a") == "3"
    else:  # it did not: its outcome stands and nothing moved
        assert third["outcome"] == history[1].outcome.value and len(history) == 2 and tracking.champion_version(client, "a") == "1"

    champion = tracking.champion_version(client, "a")
    assert main(["reject", "a", "2", "--reason", "not this one", "--by", "bob", "--json"]) == 3
    rejected = json.loads(capsys.readouterr().out)
    assert (rejected["kind"], rejected["outcome"], rejected["alias_moved"]) == ("rejection", "rejected", False) and tracking.champion_version(client, "a") == champion
    assert main(["approve", "a", "2", "--reason", "changed my mind", "--by", "bob"]) == 2  # no longer awaiting
    assert "not awaiting approval (its latest decision: rejected)" in capsys.readouterr().err


@pytest.mark.world
@pytest.mark.service
@pytest.mark.slow
def test_an_approval_after_the_policy_s_time_is_recorded_as_expired_and_moves_nothing(tmp_path, monkeypatch, tiny_world, capsys):
    from datetime import UTC, datetime

    from test_service_e2e import validate_pending

    from vlgate import tag_keys, tracking
    from vlgate.flows.approval import SignOffInput, sign_off
    from vlgate.versions import VersionRef

    world, _ = tiny_world
    approval_home(tmp_path, monkeypatch, world, "e", {"expires_after": "1h"})
    client = tracking.connect(tmp_path)
    tracking.register_checkpoint(client, "e", world / "checkpoints" / "vlm-steps3", home=tmp_path)
    assert validate_pending(tmp_path, "e") == [("e", "1")]
    answer, subject = SignOffInput(approve=True, reason="back from leave", by="carol"), VersionRef(model="e", version="1")
    late = sign_off(ServiceContext.open(), subject, answer, now=datetime.now(UTC) + timedelta(hours=2), request_id="flow-run/sign-off-1")
    assert (late.record.kind, late.record.outcome, late.record.alias_moved) == (DecisionKind.APPROVAL, Outcome.APPROVAL_EXPIRED, False)
    # the same answer again (a resumed flow run replaying its suspension's input): applied once
    again = sign_off(ServiceContext.open(), subject, answer, request_id="flow-run/sign-off-1")
    assert again.record == late.record and len(tracking.decision_history(client, late.run_id)) == 2
    assert tracking.champion_version(client, "e") is None and client.get_model_version("e", "1").tags[tag_keys.OUTCOME] == "approval expired"
