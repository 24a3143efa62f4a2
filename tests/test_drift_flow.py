"""The drift flow's outputs: the MLflow drift run and the Prefect event a drift emits."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from prefect.testing.fixtures import asserting_events_worker, mock_should_emit_events, reset_worker_events  # noqa: F401 (fixtures)

from vlgate import tag_keys, tracking
from vlgate.evaluators.metrics.drift import detect_drift
from vlgate.evaluators.running.suite import Suite
from vlgate.flows import drift
from vlgate.versions import VersionRef

pytestmark = pytest.mark.service

REFERENCE = np.linspace(0.4, 0.8, 40)


def test_a_drift_is_a_prefect_event_naming_model_version_run_and_metric(asserting_events_worker, mock_should_emit_events, reset_worker_events):  # noqa: F811
    drifted = detect_drift("lcm-nb/lcm", REFERENCE, REFERENCE - 0.3, alpha=0.05, max_mean_drop=0.05)
    assert drifted.drifted
    drift.emit_drift_event(VersionRef(model="world-vlm", version="3"), "run-abc", [drifted])
    asserting_events_worker.drain()
    [event] = asserting_events_worker._client.events
    assert event.event == "vlgate.drift.detected"
    assert event.resource.id == "vlgate.model.world-vlm" and event.resource.name == "world-vlm"
    assert event.payload == {"version": "3", "run_id": "run-abc", "metrics": ["lcm-nb/lcm"], "reasons": [drifted.reason]}


def test_every_drift_check_is_a_tagged_run_with_its_statistics(tmp_path, monkeypatch):
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    same = detect_drift("lcm-nb/lcm", REFERENCE, REFERENCE, alpha=0.05, max_mean_drop=0.05)
    shifted = detect_drift("decc/reliable_rate/multi", REFERENCE, REFERENCE - 0.3, alpha=0.05, max_mean_drop=0.05)
    evaluators = {"lcm-nb": {"metrics": {"lcm": 0.6, "n": 40}}}
    reference, batch = tmp_path / "reference", tmp_path / "batch-3"
    for folder in (reference, batch):
        folder.mkdir()
        (folder / "items.jsonl").write_text("{}\n")
    suites = [(context, Suite.model_validate({"name": context, "evaluators": {"lcm-nb": {"data": str(folder)}}})) for context, folder in (("drift reference", reference), ("drift batch", batch))]
    run_id = drift.log_drift_run(client, VersionRef(model="m", version="2"), drift.BatchChecked("/data/batch/suite.yaml", evaluators, [same, shifted], suites), tmp_path)
    run = client.get_run(run_id)
    # named by its batch and time, described, its data sets as inputs: two checks never look alike in MLflow's UI
    assert re.fullmatch(r"m v2 drift check: batch/suite\.yaml \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", run.info.run_name)
    assert run.data.tags["mlflow.note.content"].splitlines() == [
        "**drifted** on batch `/data/batch/suite.yaml`: decc/reliable_rate/multi.", "",
        f"- lcm-nb/lcm: {same.mean_reference:.4f} → {same.mean_current:.4f}", f"- decc/reliable_rate/multi: {shifted.mean_reference:.4f} → {shifted.mean_current:.4f} (drift)",
    ]  # fmt: skip
    inputs = {(i.dataset.name, next(t.value for t in i.tags if t.key == "mlflow.data.context")) for i in run.inputs.dataset_inputs}
    assert inputs == {("lcm-nb: reference", "drift reference"), ("lcm-nb: batch-3", "drift batch")}
    assert run.data.tags["vlgate.kind"] == "drift" and run.data.tags["vlgate.drift"] == "true"
    assert (run.data.tags["vlgate.version"], run.data.tags["vlgate.batch"]) == ("2", "/data/batch/suite.yaml")
    assert run.data.metrics["lcm-nb/lcm"] == 0.6
    assert run.data.metrics["drift/decc/reliable_rate/multi/mean_drop"] == pytest.approx(0.3)
    assert run.data.metrics["drift/lcm-nb/lcm/p_value"] == pytest.approx(1.0)
    with open(client.download_artifacts(run_id, "drift.json", str(tmp_path / "download"))) as handle:
        checks = json.load(handle)["checks"]
    assert [(c["metric"], c["drifted"]) for c in checks] == [("lcm-nb/lcm", False), ("decc/reliable_rate/multi", True)]
    assert json.loads(run.data.tags[tag_keys.DRIFT_CHECKS]) == [["lcm-nb/lcm", pytest.approx(0.6), False], ["decc/reliable_rate/multi", pytest.approx(0.3), True]]
    assert run.info.status == "FINISHED" and run.data.tags["vlgate.model"] == "m"


def test_the_drift_history_is_read_from_the_run_search_and_drift_json_only_where_a_run_lacks_the_brief(tmp_path, monkeypatch):
    """A report reads a model's every drift check; one download per run would be 8,760 a
    year of hourly checks (HTTP requests against an S3 store). Runs logged before the
    brief tag existed, or whose checks outgrow one tag, are read from drift.json."""
    from vlgate.dashboards import collect

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = tracking.connect(tmp_path)
    # an @ in the metric name is what the MLflow metric names cannot carry and the brief keeps
    checks = [[detect_drift("genception/gc@3", REFERENCE, REFERENCE - shift, alpha=0.05, max_mean_drop=0.05)] for shift in (0.0, 0.3, 0.1)]
    runs = [drift.log_drift_run(client, VersionRef(model="m", version="2"), drift.BatchChecked(f"batch-{n}", {}, results), tmp_path) for n, results in enumerate(checks)]
    client.delete_tag(runs[1], tag_keys.DRIFT_CHECKS)  # as a run logged before the tag
    downloads = []
    read_artifact = collect._download
    monkeypatch.setattr(collect, "_download", lambda client, run_id, *rest: downloads.append(run_id) or read_artifact(client, run_id, *rest))
    history = collect.drift_history(client, "m", tmp_path / "scratch")
    assert downloads == [runs[1]]
    assert list(history["run_id"]) == runs and list(history["batch"]) == ["batch-0", "batch-1", "batch-2"]
    assert list(history["metric"]) == ["genception/gc@3"] * 3 and list(history["drifted"]) == [False, True, False]
    np.testing.assert_allclose(history["value"], [0.6, 0.3, 0.5])
