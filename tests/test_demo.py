"""`vlgate demo`, the README's main job, as a user runs it: the console script on a fresh
VLGATE_HOME, then again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.world, pytest.mark.service, pytest.mark.slow]


def vlgate(home: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "PREFECT_API_URL")}
    command = [str(Path(sys.executable).parent / "vlgate"), *args]
    return subprocess.run(command, env=env | {"VLGATE_HOME": str(home)}, capture_output=True, text=True, timeout=timeout)


def load_table(client, monkeypatch, experiment: str, artifact: str, run_id: str):
    """``client.load_table``, which finds the run through mlflow's global tracking URI, not
    the client's: pointed at the client's store for the call (a test before this one may
    have set the global to another), as MLflow's own tests do it."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", client.tracking_uri)  # the global is exported to it: put back after the test
    with _use_tracking_uri(client.tracking_uri):
        return client.load_table(experiment, artifact_file=artifact, run_ids=[run_id])


@pytest.mark.timeout(1800)
def test_demo_registers_validates_gates_and_checks_drift_then_reuses_everything(tmp_path, monkeypatch):
    home = tmp_path / "home"
    first = vlgate(home, "demo")
    assert first.returncode == 0, first.stderr[-3000:]
    flat = " ".join(first.stdout.split())  # rich wraps long lines at the width of a pipe
    assert "world under" in flat and "(the versions shipped with vlgate, their data sets drawn at the medium size)" in flat
    assert "claimed 7 version(s): v1, v2, v3, v4, v5, v6, v7" in first.stdout

    status = json.loads(vlgate(home, "status", "--json").stdout)
    [model] = status["models"]
    assert model["name"] == "world-vlm" and model["champion"] == "3"
    versions = {v["version"]: v for v in model["versions"]}
    assert {v: (versions[v]["state"], versions[v]["decision"]) for v in versions} == {v: ("done", "promoted" if v == "3" else "rejected") for v in map(str, range(1, 8))}
    # the sequential policy: every failing version stopped at an early look (a quarter of
    # each evaluator's items; v7's DeCC regression, about 30 of 50 reliable items lost and
    # hardly any gained, at the second: the score test's variance at the null allows gains
    # it did not see), the champion judged on every item
    stopped = "look 1 of 4 (25% of the items): rejected; 75% of item evaluations saved"
    second = "look 2 of 4 (50% of the items): rejected; 50% of item evaluations saved"
    assert {v: versions[v]["sequential"] for v in versions} == {v: stopped for v in "12456"} | {"7": second, "3": "look 4 of 4 (100% of the items): promoted; 0% of item evaluations saved"}
    assert re.search(r"v1 +rejected( +[-0-9.—]+){7} +1 +75%", first.stdout) and re.search(r"v3 ★ +promoted( +[-0-9.—]+){7} +4 +0%", first.stdout)
    # untrained and early: below the floors, shown so on a quarter of the items
    assert any(r.startswith("lcm-mc/acc floor: 0.1600 on 100 records") and r.endswith("shown beyond +0.6 at look 1 of 4, 25% of the items") for r in versions["1"]["reasons"])
    assert [r.split(":")[0] for r in versions["2"]["reasons"]] == ["lcm-nb/lcm floor"]
    # unusable output fails the expectations, the reason saying why: the untrained model
    # writes no VLind answer the parser can read and one description for every image, and
    # so does the poor describer (v6); the trained ones pass
    unusable = {v: [r for r in versions[v]["reasons"] if "unusable output" in r] for v in versions}
    assert any(r.startswith("vlind expectations: failed expectations: metric 'n_unanswered' = 30 is above 6: unusable output") for r in unusable["1"])
    assert any(r.startswith("genception expectations: failed expectations: metric 'distinct_descriptions' = 0.04348 is below 0.25") for r in unusable["1"])
    assert unusable["6"] == [
        "genception expectations: failed expectations: metric 'distinct_descriptions' = 0.04348 is below 0.25: unusable output, "
        "fewer than 25% of the images got a description of their own"
    ]
    assert all(not unusable[v] for v in ("2", "3", "4", "5", "7"))

    from mlflow import MlflowClient

    from vlgate.cli.demo import VERSIONS, caught_by

    store = f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=store, registry_uri=store)  # not the process's registry: a test before may have set it
    experiment = client.get_experiment_by_name("vlgate/world-vlm").experiment_id
    # each faulty version is rejected by the evaluator built to catch its fault, and only by it,
    # and the demo prints that story
    for number, (_, description, evaluator) in enumerate(VERSIONS, start=1):
        if evaluator is not None:
            assert versions[str(number)]["description"] == description
            assert caught_by(versions[str(number)]["reasons"]) == [evaluator], versions[str(number)]["reasons"]
    assert first.stdout.count("caught") >= 4 and "not as built" not in first.stdout
    v3, v5 = (client.get_run(versions[v]["validation_run_id"]).data.metrics for v in ("3", "5"))
    # the answer-prior version: its probes stopped agreeing with its choices
    assert any(re.fullmatch(r"lcm-mc/lcm vs champion: .* on 100 shared samples: .* shown beyond -0\.1 at look 1 of 4, 25% of the items", r) for r in versions["5"]["reasons"])
    assert v5["lcm-mc/lcm"] < v3["lcm-mc/lcm"] - 0.1
    # vlgate history lists every version's records as MLflow holds them, and v3's spell as champion
    from vlgate import tracking
    from vlgate.decisions import DecisionRecord

    history = vlgate(home, "history", "world-vlm", "--json", timeout=300)
    assert history.returncode == 0, history.stderr[-2000:]
    shown = json.loads(history.stdout)
    held = {v: tracking.decision_history(client, versions[v]["validation_run_id"]) for v in versions}
    assert {v["version"]: [DecisionRecord.model_validate(r) for r in v["records"]] for v in shown["versions"]} == held
    assert [(spell["version"], spell["until"]) for spell in shown["timeline"]] == [("3", None)] and shown["champion"] == "3"
    # the registry's version page carries the decision's headline numbers beside it
    v3_tags = client.get_model_version("world-vlm", "3").tags
    assert v3_tags["vlgate.metric.lcm-nb/lcm"] == f"{v3['lcm-nb/lcm']:.4g}" and v3_tags["vlgate.decision"] == "promoted"
    drift_runs = client.search_runs([experiment], "tags.`vlgate.kind` = 'drift'")
    by_batch = {Path(run.data.tags["vlgate.batch"]).parent.name: run.data.tags["vlgate.drift"] for run in drift_runs}
    assert by_batch == {"incoming-clean": "false", "incoming-shifted": "true"}

    # the output ends by pointing at the champion's report and the leaderboard
    report, leaderboard = home / "reports" / "world-vlm" / "v3.html", home / "reports" / "world-vlm" / "leaderboard.html"
    assert f"report of the champion v3: {report}" in first.stdout and f"leaderboard: {leaderboard}" in first.stdout
    page = report.read_text()
    assert 'class="decision promoted">PROMOTED<' in page and 'id="figure-drift-history"' in page
    assert f'data-metric="lcm-nb/lcm" data-value="{v3["lcm-nb/lcm"]}"' in page
    assert {a.path for a in client.list_artifacts(versions["4"]["validation_run_id"], "report")} >= {"report/report.html", "report/plots"}
    # every version judged against the champion shows what it lost, item by item, for the
    # evaluator that rejected it: the count vlgate diff gives and the run's MLflow table holds
    for number in ("4", "5", "6", "7"):
        [evaluator] = caught_by(versions[number]["reasons"])
        page = (home / "reports" / "world-vlm" / f"v{number}.html").read_text()
        assert "<h2>Against the champion v3</h2>" in page and f'id="against-champion-{evaluator}"' in page
        shown = {score: int(n) for score, n in re.findall(rf'data-lost="{evaluator}/([^"]+)">(\d+)<', page)}
        diffed = vlgate(home, "diff", "world-vlm", number, "3", "--evaluator", evaluator, "--json", timeout=300)
        assert diffed.returncode == 0, diffed.stderr[-2000:]
        [diff] = json.loads(diffed.stdout)["evaluators"]
        assert shown == {score: entry["lost"] for score, entry in diff["scores"].items()} and max(shown.values()) > 0, (number, shown)
        table = load_table(client, monkeypatch, experiment, f"item_diff/{evaluator}-vs-v3.json", versions[number]["validation_run_id"])
        assert {score: int((rows["change"] < 0).sum()) for score, rows in table.groupby("score")} == shown

    second = vlgate(home, "demo", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "claimed 0 version(s): none new" in second.stdout
    validation_runs = client.search_runs([experiment], "tags.`vlgate.kind` = 'validation'")
    assert sorted(run.data.tags["vlgate.version"] for run in validation_runs) == ["1", "2", "3", "4", "5", "6", "7"]  # none validated twice
