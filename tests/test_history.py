"""``vlgate history``: a model's decision records over time and the champion alias's moves,
read from the records alone (vlgate/history.py), and the command on a real embedded MLflow."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from vlgate.decisions import DecisionKind, DecisionRecord, Judge, Outcome
from vlgate.history import VersionHistory, champion_timeline, model_history
from vlgate.values import replaced

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def logged(client, run_id: str, record: DecisionRecord, policy: Path) -> DecisionRecord:
    """``record`` as the run's next decision record, numbered and with its policy's digest, as the judgement logs one."""
    from vlgate import tracking

    numbered = replaced(record, sequence=tracking.next_decision_number(client, run_id), policy_digest=tracking.file_digest(policy))
    tracking.log_decision(client, run_id, numbered, policy)
    return numbered


def record(sequence: int, outcome: Outcome, at: datetime, moved: bool, before: str | None, after: str | None, kind: DecisionKind = DecisionKind.VALIDATION) -> DecisionRecord:
    return DecisionRecord(
        outcome=outcome, sequence=sequence, kind=kind, judged_at=at, alias_moved=moved, champion_before=before, champion_after=after,
        judged_by=Judge(process="host pid 1", user="ci"), policy_path="gate.yaml",
    )  # fmt: skip


def demo_like() -> list[VersionHistory]:
    """v1 promoted (first champion), v2 rejected, v3 promoted over v1, v1 validated again
    and rejected (the alias stays with v3), v4 not judged yet."""
    return [
        VersionHistory(version="1", run_id="r1", records=[
            record(1, Outcome.PROMOTED, T0, True, None, "1"),
            record(2, Outcome.REJECTED, T0 + timedelta(hours=3), False, None, "3", DecisionKind.REVALIDATION),
        ]),
        VersionHistory(version="2", run_id="r2", records=[record(1, Outcome.REJECTED, T0 + timedelta(hours=1), False, "1", "1")]),
        VersionHistory(version="3", run_id="r3", records=[record(1, Outcome.PROMOTED, T0 + timedelta(hours=2), True, "1", "3")]),
        VersionHistory(version="4", run_id=None, records=[]),
    ]  # fmt: skip


def test_the_timeline_is_the_recorded_moves_each_held_until_the_next():
    spells = champion_timeline(demo_like())
    assert [(s.version, s.since, s.until, s.record, s.kind, s.outcome) for s in spells] == [
        ("1", T0, T0 + timedelta(hours=2), 1, DecisionKind.VALIDATION, Outcome.PROMOTED),
        ("3", T0 + timedelta(hours=2), None, 1, DecisionKind.VALIDATION, Outcome.PROMOTED),
    ]
    assert champion_timeline([]) == [] and champion_timeline(demo_like()[1:2]) == []  # rejections move nothing


def test_an_alias_moved_outside_vlgate_is_said_not_invented():
    assert not model_history("m", demo_like(), "3").moved_outside
    moved = model_history("m", demo_like(), "2")  # someone set the alias to v2 by hand
    assert moved.moved_outside and [s.version for s in moved.timeline] == ["1", "3"]
    assert model_history("m", [], None).moved_outside is False and model_history("m", [], "1").moved_outside is True


def test_vlgate_history_lists_what_mlflow_holds(tmp_path, monkeypatch, capsys):
    """The command on a real embedded MLflow: records appended to two versions' runs, the
    alias moved by one of them; ``--json`` equals the records as MLflow holds them, and the
    text names the champion's spell."""
    from vlgate import tag_keys, tracking
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    client = tracking.connect(tmp_path)
    client.create_registered_model("m")
    experiment = tracking.experiment_id(client, tracking.validation_experiment("m"), tmp_path)
    policy = tmp_path / "gate.yaml"
    policy.write_text("required: []\n")
    written: dict[str, list[DecisionRecord]] = {}
    for version, records in (("1", [record(1, Outcome.PROMOTED, T0, True, None, "1")]), ("2", [record(1, Outcome.REJECTED, T0 + timedelta(hours=1), False, "1", "1")])):
        run = client.create_run(experiment)
        client.create_model_version("m", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id, tags={tag_keys.VALIDATION_RUN: run.info.run_id})
        written[version] = [logged(client, run.info.run_id, r, policy) for r in records]
    client.set_registered_model_alias("m", tracking.CHAMPION, "1")

    assert main(["history", "m", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(v["version"], [DecisionRecord.model_validate(r) for r in v["records"]]) for v in shown["versions"]] == list(written.items())
    assert [(s["version"], s["until"], s["record"]) for s in shown["timeline"]] == [("1", None, 1)] and shown["champion"] == "1" and not shown["moved_outside"]
    assert main(["history", "m", "2", "--json"]) == 0
    assert [v["version"] for v in json.loads(capsys.readouterr().out)["versions"]] == ["2"]
    monkeypatch.setenv("COLUMNS", "80")  # a pipe's width: too narrow for the tables, a line a record and no value cut
    assert main(["history", "m"]) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert "…" not in "".join(narrow) and narrow[0] == "m: decision records"
    assert narrow[1:3] == ["  v1 record 1: validation → promoted; champion none → 1, alias moved; 2026-11-01 09:00:00 UTC by ci",
                           "  v2 record 1: validation → rejected; champion 1 → 1; 2026-11-01 10:00:00 UTC by ci"]  # fmt: skip
    assert narrow[3:] == ["m: who held the champion alias", "  v1: since 2026-11-01 09:00:00 UTC, until holds it; moved by record 1 (validation: promoted)"]
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["history", "m"]) == 0
    wide = capsys.readouterr().out
    assert "holds it" in wide and all(header in wide for header in ("version", "judgement", "outcome", "champion before", "moved by"))
    assert main(["history", "nope"]) == 2 and "nope: not in the registry" in capsys.readouterr().err


def test_the_version_s_headline_tags_are_the_metrics_its_rules_judged_over_all_items():
    from vlgate.decisions import Check, Rule, Verdict
    from vlgate.flows.recording import headline_metrics

    checks = [
        Check(rule=Rule.RAN, metric="lcm-mc", verdict=Verdict.PASS, detail="ran"),
        Check(rule=Rule.FLOOR, metric="lcm-mc/acc", verdict=Verdict.PASS, detail="-", candidate=0.8125, limit=0.5),
        Check(rule=Rule.REGRESSION, metric="lcm-nb/lcm", verdict=Verdict.FAIL, detail="-", candidate=0.712345678, champion=0.8, limit=-0.05),
        Check(rule=Rule.FLOOR, metric="lcm-mc/acc", category="count", verdict=Verdict.PASS, detail="-", candidate=0.1),  # per category: in the record only
        Check(rule=Rule.CEILING, metric="decc/unreliable", verdict=Verdict.COULD_NOT_JUDGE, detail="-"),  # no value: no tag
        Check(rule=Rule.FLOOR, metric="genception/gc@3", verdict=Verdict.PASS, detail="-", candidate=0.25),  # '@' is no tag key character
    ]
    assert headline_metrics(checks) == {"vlgate.metric.lcm-mc/acc": "0.8125", "vlgate.metric.lcm-nb/lcm": "0.7123", "vlgate.metric.genception/gc_at_3": "0.25"}


def promoted_one_after_another() -> list[VersionHistory]:
    """v1 promoted (first champion); v2 promoted over v1 (as ``serve --once`` judges two
    versions one after the other); v3 awaited approval against v2, then was approved (the
    approval record moved the alias); v1 re-judged against v3 and rejected (nothing moved)."""
    return [
        VersionHistory(version="1", run_id="r1", records=[
            record(1, Outcome.PROMOTED, T0, True, None, "1"),
            record(2, Outcome.REJECTED, T0 + timedelta(hours=4), False, "3", "3", DecisionKind.REJUDGEMENT),
        ]),
        VersionHistory(version="2", run_id="r2", records=[record(1, Outcome.PROMOTED, T0 + timedelta(seconds=1), True, "1", "2")]),
        VersionHistory(version="3", run_id="r3", records=[
            record(1, Outcome.AWAITING_APPROVAL, T0 + timedelta(hours=1), False, "2", "2"),
            record(2, Outcome.PROMOTED, T0 + timedelta(hours=2), True, "2", "3", DecisionKind.APPROVAL),
        ]),
    ]  # fmt: skip


def test_one_version_s_history_reads_the_alias_s_moves_from_every_version():
    """``vlgate history m 1``: v1's records alone are listed, but today's champion (v3, moved
    there by v3's approval after v2's promotion) is explained by another version's record:
    no move outside vlgate, and the timeline is every version's."""
    versions = promoted_one_after_another()
    spells = [(s.version, s.since, s.until, s.record, s.kind) for s in champion_timeline(versions)]
    assert spells == [
        ("1", T0, T0 + timedelta(seconds=1), 1, DecisionKind.VALIDATION),
        ("2", T0 + timedelta(seconds=1), T0 + timedelta(hours=2), 1, DecisionKind.VALIDATION),
        ("3", T0 + timedelta(hours=2), None, 2, DecisionKind.APPROVAL),
    ]
    for only in ("1", "2", "3", None):
        history = model_history("m", versions, "3", only=only)
        assert history.moved_outside is False, only
        assert [s.version for s in history.timeline] == ["1", "2", "3"]
        assert [v.version for v in history.versions] == ([only] if only else ["1", "2", "3"])
    # someone set the alias back to v1 by hand: no record says so, whichever version is asked
    for only in ("1", "3", None):
        by_hand = model_history("m", versions, "1", only=only)
        assert by_hand.moved_outside is True and [s.version for s in by_hand.timeline] == ["1", "2", "3"]
    assert model_history("m", versions, None, only="2").moved_outside is True  # the alias deleted by hand


def test_vlgate_history_of_one_version_after_a_later_promotion_and_an_approval(tmp_path, monkeypatch, capsys):
    """On a real embedded MLflow: v1 promoted, v2 promoted over it, v3 awaiting approval and
    approved with ``vlgate approve`` (which moves the alias); ``vlgate history m 1`` finds no
    move outside vlgate. The alias then set to v1 by hand in MLflow is one, for every version."""
    from vlgate import tag_keys, tracking
    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB"):
        monkeypatch.delenv(name, raising=False)
    client = tracking.connect(tmp_path)
    client.create_registered_model("m")
    experiment = tracking.experiment_id(client, tracking.validation_experiment("m"), tmp_path)
    policy = tmp_path / "gate.yaml"
    policy.write_text("required: []\napproval: {approvers: [alice]}\n")
    awaiting = record(1, Outcome.AWAITING_APPROVAL, datetime.now(UTC), False, "2", "2").model_copy(update={"policy": {"required": [], "approval": {"approvers": ["alice"]}}})
    for version, records in (
        ("1", [record(1, Outcome.PROMOTED, T0, True, None, "1")]),
        ("2", [record(1, Outcome.PROMOTED, T0 + timedelta(seconds=1), True, "1", "2")]),
        ("3", [awaiting]),
    ):
        run = client.create_run(experiment)
        client.create_model_version("m", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id, tags={tag_keys.VALIDATION_RUN: run.info.run_id})
        for r in records:
            logged(client, run.info.run_id, r, policy)
        if records[0].alias_moved:
            client.set_registered_model_alias("m", tracking.CHAMPION, version)
    assert main(["approve", "m", "3", "--reason", "looks right", "--by", "alice", "--json"]) == 0
    approved = json.loads(capsys.readouterr().out)
    assert (approved["kind"], approved["alias_moved"], approved["champion_after"]) == ("approval", True, "3") and tracking.champion_version(client, "m") == "3"

    def shown(*args: str) -> dict:
        assert main(["history", "m", *args, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    for args in (["1"], ["2"], []):
        history = shown(*args)
        assert history["champion"] == "3" and history["moved_outside"] is False
        assert [(s["version"], s["kind"], s["until"] is None) for s in history["timeline"]] == [("1", "validation", False), ("2", "validation", False), ("3", "approval", True)]
        assert [v["version"] for v in history["versions"]] == (args or ["1", "2", "3"])
    assert main(["history", "m", "1"]) == 0 and "moved outside" not in capsys.readouterr().out

    client.set_registered_model_alias("m", tracking.CHAMPION, "1")  # by hand, outside vlgate
    for args in (["1"], ["3"], []):
        history = shown(*args)
        assert history["champion"] == "1" and history["moved_outside"] is True and [s["version"] for s in history["timeline"]] == ["1", "2", "3"]
    assert main(["history", "m", "1"]) == 0 and "the alias now names v1: moved outside vlgate" in capsys.readouterr().out
