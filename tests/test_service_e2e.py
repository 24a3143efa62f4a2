"""The service on the embedded default: register → poller → validation flow (real
evaluators on the tiny world's checkpoints) → Great Expectations → MLflow → gate."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from vlgate import tag_keys, tracking
from vlgate.cli.main import main
from vlgate.decisions import DecisionKind
from vlgate.flows.context import ServiceContext
from vlgate.flows.plan import ValidationPlan
from vlgate.flows.validation import validate_model_version
from vlgate.registry_hooks.claims import ClaimStore
from vlgate.registry_hooks.dispatch import Dispatcher, poll_once
from vlgate.versions import VersionRef

pytestmark = [pytest.mark.world, pytest.mark.service, pytest.mark.slow]

LENIENT = {"required": ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"], "floors": {"lcm-mc/lcm": 0.0}, "regressions": {"lcm-mc/lcm": {"max_drop": 1.0}}, "resamples": 200}


def configure(home: Path, models: dict[str, tuple[Path, dict]]) -> None:
    """vlgate.yaml naming each model's suite and a policy written beside it."""
    entries = {}
    for name, (suite, policy) in models.items():
        (home / f"gate-{name}.yaml").write_text(yaml.safe_dump(policy))
        entries[name] = {"suite": str(suite), "policy": f"gate-{name}.yaml"}
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"models": entries}))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def validate_pending(home: Path, model: str) -> list[tuple[str, str]]:
    client = tracking.connect(home)
    dispatcher = Dispatcher(ClaimStore.for_home(home), start=validate_model_version, configured=lambda name: name == model)
    claimed = poll_once(client, dispatcher)
    dispatcher.wait()
    dispatcher.close()
    return claimed


def test_registered_versions_are_validated_logged_and_gated(home, default_world):
    # the shipped world's trained versions: their output is usable, so the lenient policy
    # promotes both (the tiny world's would fail the expectations on unusable output)
    world, _ = default_world
    suite = world / "suite.yaml"
    configure(home, {"tiny": (suite, LENIENT)})
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps3000", home=home)
    second = tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps10000", home=home)
    assert tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps10000", home=home).version == second.version  # idempotent

    assert validate_pending(home, "tiny") == [("tiny", "1"), ("tiny", "2")]
    assert validate_pending(home, "tiny") == []  # exactly once

    claims = ClaimStore.for_home(home)
    for version in ("1", "2"):
        claim = claims.get(VersionRef(model="tiny", version=version))
        assert (claim.state, claim.claimed_via, claim.attempts) == ("done", "poller", 1)
        mv = client.get_model_version("tiny", version)
        assert mv.tags[tag_keys.DECISION] == "promoted", mv.tags.get(tag_keys.REASONS)
        run = client.get_run(mv.tags[tag_keys.VALIDATION_RUN])
        assert run.info.status == "FINISHED" and run.data.tags["vlgate.version"] == version
        # metrics logged under EVALUATOR/METRIC equal what the evaluators wrote
        for evaluator in ("lcm-mc", "lcm-nb", "decc"):
            written = json.loads((home / "validations" / "tiny" / version / evaluator / "metrics.json").read_text())
            key = {"lcm-mc": "lcm", "lcm-nb": "lcm", "decc": "reliable_rate/multi"}[evaluator]
            assert run.data.metrics[f"{evaluator}/{key}"] == pytest.approx(written[key], abs=1e-12)
            assert run.data.tags[f"vlgate.expectations.{evaluator}"] == "passed"
        assert "genception/gc_at_3" in run.data.metrics
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"tables", "evaluators", "expectations", "decisions", "correlations.json", "config"} <= artifacts
        # the plan the flow read once: the suite and policy as loaded, with the content digest results are cached under
        plan = json.loads(Path(client.download_artifacts(run.info.run_id, "config/plan.json", str(home / f"plan-{version}"))).read_text())
        assert (plan["model"], plan["version"], plan["policy_path"]) == ("tiny", version, str(home / "gate-tiny.yaml"))
        assert list(plan["suite"]["evaluators"]) == ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"] and plan["policy"]["floors"] == LENIENT.get("floors", {})
        assert plan["suite_digest"] == ValidationPlan.model_validate({k: v for k, v in plan.items() if k != "suite_digest"}).suite_digest()
        # MLflow's UI: params are the compare view's axes, digests are tags, breakdowns are tables, the version links its run
        protocols = {f"protocol.{name}": "vlgate-1" for name in ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")}  # the world's suite
        expected_params = {"suite": None, "backend": "transformers", "evaluators": "lcm-mc,lcm-nb,vlind,genception,decc", "policy": "gate-tiny.yaml", "model_uri": f"models:/tiny/{version}"}
        assert run.data.params | {"suite": None} == expected_params | protocols
        assert len(run.data.tags["vlgate.fingerprints.lcm-mc"]) == 16 and run.data.tags["vlgate.policy_path"] == str(home / "gate-tiny.yaml")
        assert not [name for name in run.data.metrics if "/by_" in name]
        assert any(".by_" in a.path for a in client.list_artifacts(run.info.run_id, "tables"))
        assert f"{tracking.VALIDATION_LINK}[{run.info.run_id}](#/experiments/{run.info.experiment_id}/runs/{run.info.run_id})" in mv.description
        assert client.get_experiment(run.info.experiment_id).tags[tag_keys.EXPERIMENT_KIND] == "custom_model_development"
    assert tracking.champion_version(client, "tiny") == "2"
    decision = json.loads(Path(client.download_artifacts(client.get_model_version("tiny", "2").tags[tag_keys.VALIDATION_RUN], "decisions/0001.json", str(home / "dl"))).read_text())
    assert decision["champion_before"] == "1" and decision["outcome"] == "promoted" and "promote" not in decision
    per_sample = decision["per_sample_correlations"]["lcm-mc/p_lc~champion"]
    assert per_sample["n"] == 48 and -1 <= per_sample["spearman"] <= 1

    # a stricter policy: the third version passes floors on LCM but not on accuracy → rejected, champion kept
    configure(home, {"tiny": (suite, LENIENT | {"floors": {"lcm-mc/lcm": 0.0, "lcm-mc/acc": 0.99}})})
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-language-prior", home=home)
    validate_pending(home, "tiny")
    third = client.get_model_version("tiny", "3")
    assert third.tags[tag_keys.DECISION] == "rejected"
    assert third.tags[tag_keys.REASONS].startswith("lcm-mc/acc floor:") and "fails" in third.tags[tag_keys.REASONS]
    assert tracking.champion_version(client, "tiny") == "2"

    # three validated versions: correlations across versions are defined and logged
    correlations = json.loads(Path(client.download_artifacts(third.tags[tag_keys.VALIDATION_RUN], "correlations.json", str(home / "dl3"))).read_text())
    assert correlations["lcm-mc/lcm~lcm-mc/acc"]["n"] == 3

    # the flow published the version's report: logged, kept under $VLGATE_HOME, and the
    # GenCeption chains' images (seed from the data, X^t from the run's artifacts) resolve
    from vlgate.dashboards.collect import load_validation
    from vlgate.dashboards.pictures import section_inputs
    from vlgate.evaluators.genception.figures import genception_chains
    from vlgate.flows.settings import ServiceConfig, report_image_roots

    run_id = third.tags[tag_keys.VALIDATION_RUN]
    assert client.get_run(run_id).data.tags["vlgate.report"] == "report/report.html"
    assert {"report/report.html", "report/leaderboard.html", "report/plots"} <= {a.path for a in client.list_artifacts(run_id, "report")}
    page = (home / "reports" / "tiny" / "v3.html").read_text()
    assert 'class="decision rejected">REJECTED<' in page and 'id="figure-genception-chains"' in page

    # every run carries the fast-path stamp, checked once per digest: each version's file
    # under model-checks, and the report's line beside the decision
    assert client.get_run(run_id).data.tags[tag_keys.MODEL_CHECK] == "exact"
    assert 'id="model-check"' in page and "fast paths: exact</span>" in page
    stamped = json.loads(Path(client.download_artifacts(run_id, "model_check.json", str(home / "dl-check"))).read_text())
    assert stamped["trusted"] is True and stamped["digest"] == third.tags[tag_keys.CHECKPOINT_DIGEST]
    assert {path["path"] for path in stamped["paths"] if path["used"]} == {"batched scoring", "shared prefix", "batched generation"}
    assert len(list((home / "model-checks").glob("*.json"))) == 3
    data = load_validation(client, VersionRef(model="tiny", version="3"), home / "dl-report")
    # images from the model's configured data only (the report is given those folders)
    chains = genception_chains(section_inputs(data.evaluators["genception"], report_image_roots(ServiceConfig.load(home), "tiny")))
    assert chains and all(chain.seed.is_file() and all(path.is_file() for path in chain.images) for chain in chains)

    # vlgate status --json reports every decision and the champion
    result = subprocess.run([sys.executable, "-m", "vlgate.cli.main", "status", "tiny", "--json"], capture_output=True, text=True, env=os.environ | {"VLGATE_HOME": str(home)}, check=True)
    status = json.loads(result.stdout)["models"][0]
    assert status["champion"] == "2"
    assert [(v["version"], v["state"], v["decision"]) for v in status["versions"]] == [("1", "done", "promoted"), ("2", "done", "promoted"), ("3", "done", "rejected")]


def test_failed_expectation_blocks_promotion(home, tiny_world):
    """One MC image is unreadable: the evaluator skips the item, its records are one row
    short of the data set, Great Expectations fails, and the gate refuses (fail closed)."""
    world, _ = tiny_world
    data = home / "data"
    shutil.copytree(world / "data" / "mc", data / "mc")
    (data / "mc" / "images" / "mc-0000.png").write_bytes(b"not a png")
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "broken-mc", "evaluators": {"lcm-mc": {"data": str(data / "mc")}}}))
    configure(home, {"tiny": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200})})
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps3", home=home)
    validate_pending(home, "tiny")
    version = client.get_model_version("tiny", "1")
    assert version.tags[tag_keys.DECISION] == "rejected"
    assert version.tags[tag_keys.REASONS].startswith("lcm-mc expectations: failed expectations: records: row count is 47, expected 48")
    run = client.get_run(version.tags[tag_keys.VALIDATION_RUN])
    assert run.data.tags["vlgate.expectations.lcm-mc"] == "failed"
    assert run.data.metrics["lcm-mc/n"] == 47  # what was computed is kept and logged
    assert tracking.champion_version(client, "tiny") is None


def test_a_killed_flow_resumes_in_the_same_run_with_the_same_metrics(home, default_world):
    world, _ = default_world  # a trained version: usable output, promoted by the lenient policy
    suite = home / "suite.yaml"  # the world's two LCM evaluators: the kill falls between them
    suite.write_text(yaml.safe_dump({"name": "lcm", "batch_size": 8, "evaluators": {name: {"data": str(world / "data" / folder), "protocol": "vlgate"} for name, folder in (("lcm-mc", "mc"), ("lcm-nb", "nb"))}}))
    configure(home, {"tiny": (suite, LENIENT | {"required": ["lcm-mc", "lcm-nb"]})})
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps10000", home=home)
    env = os.environ | {"VLGATE_HOME": str(home)}
    command = [sys.executable, "-m", "vlgate.cli.main", "validate", "tiny", "1", "--json"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    partial = home / "validations" / "tiny" / "1" / "lcm-nb" / "shards" / "0-of-1.jsonl"
    deadline = time.monotonic() + 300
    while not (partial.is_file() and partial.stat().st_size > 0) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # mid-evaluation: lcm-mc done, lcm-nb in flight
    process.wait()
    claims = ClaimStore.for_home(home)
    assert claims.get(VersionRef(model="tiny", version="1")).state == "running"
    run_id = claims.get(VersionRef(model="tiny", version="1")).run_id
    assert run_id is not None

    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert summary["run_id"] == run_id and summary["outcome"] == "promoted"
    claim = claims.get(VersionRef(model="tiny", version="1"))  # taken over at once: the killed process was gone, its lease still ran
    assert (claim.state, claim.attempts, claim.crashes) == ("done", 2, 1)
    runs = client.search_runs([client.get_experiment_by_name("vlgate/tiny").experiment_id], "tags.`vlgate.kind` = 'validation'")
    assert [r.info.run_id for r in runs] == [run_id]

    # the same metrics as an uninterrupted evaluation of the same checkpoint
    from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite

    fresh = run_suite(str(world / "checkpoints" / "vlm-steps10000"), Suite.from_file(suite), home / "fresh", RunOptions(progress=False))
    logged = client.get_run(run_id).data.metrics
    for evaluator in ("lcm-mc", "lcm-nb"):
        for metric, value in fresh["evaluators"][evaluator]["metrics"].items():
            if isinstance(value, (int, float)) and value is not None:
                assert logged[tracking.mlflow_metric_name(f"{evaluator}/{metric}")] == pytest.approx(value, abs=1e-9), (evaluator, metric)


@pytest.fixture
def dask_cluster(home):
    """A Dask cluster as a deployment runs one: ``dask scheduler`` and two ``dask worker``
    processes started apart from the flow (one thread each, no nanny, so each worker is the
    process started here), sharing the flow's VLGATE_HOME and MLflow. Yields (address,
    worker pids)."""
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import time

    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or "dask"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    logs = home / "dask-logs"
    logs.mkdir()
    # the flow's MLflow, and a registry URI naming another one (a stale shell setting, or what
    # an earlier test left in this process's environment): a shard must still score the
    # flow's version, not whatever models:/NAME/N names there
    elsewhere = f"sqlite:///{home / 'elsewhere.db'}"
    env = os.environ | {"VLGATE_HOME": str(home), "MLFLOW_TRACKING_URI": tracking.tracking_uri(home), "MLFLOW_REGISTRY_URI": elsewhere, "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], env=env, stdout=open(logs / "scheduler.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)]
    for n in range(2):
        command = [dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"gpu-{n}"]
        processes.append(subprocess.Popen(command, env=env, stdout=open(logs / f"worker-{n}.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True))
    from distributed import Client

    deadline = time.monotonic() + 120
    with Client(address, timeout=60) as client:
        while len(client.scheduler_info()["workers"]) < 2:
            assert time.monotonic() < deadline, (logs / "worker-0.log").read_text()[-2000:]
            time.sleep(0.5)
    yield address, {process.pid for process in processes[1:]}
    for process in processes:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_separate_dask_cluster_runs_evaluator_shards_and_gets_the_in_process_metrics(home, tiny_world, dask_cluster):
    """evaluation: {runner: dask, address: ..., shards: 2}: each evaluator's items split into
    two tasks on a scheduler and two workers running as processes of their own, merged back
    into the same records and metrics as one in-process run."""
    world, _ = tiny_world
    address, worker_pids = dask_cluster
    suite = home / "suite.yaml"
    suite.write_text(
        yaml.safe_dump(
            {"name": "sharded", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 12, "protocol": "vlgate"}, "lcm-nb": {"data": str(world / "data" / "nb"), "limit": 6, "protocol": "vlgate"}}}
        )
    )
    (home / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc", "lcm-nb"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200}))
    config = {"models": {"tiny": {"suite": str(suite), "policy": "gate.yaml"}}, "evaluation": {"runner": "dask", "address": address, "shards": 2}}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "tiny", world / "checkpoints" / "vlm-steps3", home=home)
    assert validate_pending(home, "tiny") == [("tiny", "1")]

    out = home / "validations" / "tiny" / "1"
    summary = json.loads((out / "lcm-mc" / "metrics.json").read_text())
    assert summary["n"] == 12
    for shard in ("0-of-2", "1-of-2"):
        assert len((out / "lcm-mc" / "shards" / f"{shard}.jsonl").read_text().splitlines()) == 6
    run = client.get_run(client.get_model_version("tiny", "1").tags[tag_keys.VALIDATION_RUN])
    workers = json.loads(Path(client.download_artifacts(run.info.run_id, "evaluators/lcm-mc/run.json", str(home / "dl"))).read_text())["entry"]["shard_workers"]
    assert len(workers) == 2 and {int(worker.rsplit(":", 1)[1]) for worker in workers} <= worker_pids  # computed in the cluster's worker processes

    from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite

    fresh = run_suite(str(world / "checkpoints" / "vlm-steps3"), Suite.from_file(suite), home / "in-process", RunOptions(progress=False))
    for evaluator in ("lcm-mc", "lcm-nb"):
        ids = [json.loads(line)["id"] for line in (out / evaluator / "records.jsonl").read_text().splitlines()]
        assert ids == [json.loads(line)["id"] for line in (home / "in-process" / evaluator / "records.jsonl").read_text().splitlines()]  # item order restored
        for metric, value in fresh["evaluators"][evaluator]["metrics"].items():
            if isinstance(value, (int, float)):
                assert run.data.metrics[tracking.mlflow_metric_name(f"{evaluator}/{metric}")] == pytest.approx(value, abs=1e-6), (evaluator, metric)


def test_an_evaluator_past_its_time_limit_fails_closed_and_is_not_retried_forever(home, tiny_world):
    """``evaluation.task_timeout_s``: a shard that runs longer (a hung model, a looping
    template) is stopped between batches, once, not retried; the evaluator is an error, the
    version could not be judged, and the claim is final (a time limit is not a transient
    fault). The records written before the stop are kept."""
    world, _ = tiny_world
    suite = home / "suite.yaml"
    # one item per batch: loading the model alone takes longer than the limit, so the
    # check before the first batch stops it with all four items left
    evaluators = {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}
    suite.write_text(yaml.safe_dump({"name": "smoke", "batch_size": 1, "evaluators": evaluators}))
    configure(home, {"slow": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200})})
    config = yaml.safe_load((home / "vlgate.yaml").read_text()) | {"evaluation": {"task_timeout_s": 0.001}}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "slow", world / "checkpoints" / "vlm-steps3", home=home)
    assert validate_pending(home, "slow") == [("slow", "1")]
    claim = ClaimStore.for_home(home).get(VersionRef(model="slow", version="1"))
    assert claim.state == "done" and claim.attempts == 1
    tags = client.get_model_version("slow", "1").tags
    assert tags[tag_keys.DECISION] == "rejected" and tags[tag_keys.OUTCOME] == "could not judge"
    assert "lcm-mc" in tags[tag_keys.REASONS] and "ShardTimedOut" in tags[tag_keys.REASONS]
    assert "with 4 of 4 items left" in tags[tag_keys.REASONS]


def test_gate_judges_an_existing_run_again_without_evaluating_and_records_only_when_asked(home, tiny_world, capsys):
    """``vlgate gate``: a version's run judged again against the champion its validation
    was judged against (or today's, asked for), nothing written without ``--apply``; with
    it, the run's next decision record beside the first, never replacing it; a promotion
    that would take the alias from a champion the version was never compared with fails
    closed; a version without a run is bad input (exit 2)."""
    world, _ = tiny_world
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    lenient = {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "regressions": {"lcm-mc/lcm": {"max_drop": 1.0}}, "resamples": 200}
    configure(home, {"g": (suite, lenient)})
    client = tracking.connect(home)
    for steps in ("0", "3"):
        tracking.register_checkpoint(client, "g", world / "checkpoints" / f"vlm-steps{steps}", home=home)
    assert validate_pending(home, "g") == [("g", "1"), ("g", "2")]
    assert tracking.champion_version(client, "g") == "2"
    evaluated = sorted(p.name for p in (home / "validations" / "g" / "1" / "lcm-mc").iterdir())
    run_id = client.get_model_version("g", "1").tags[tag_keys.VALIDATION_RUN]
    (first,) = tracking.decision_history(client, run_id)
    assert (first.sequence, first.kind, first.champion_before, first.champion_after, first.alias_moved) == (1, DecisionKind.VALIDATION, None, "1", True)
    capsys.readouterr()

    # against its validation's champion (none): the same checks, read back from the run; but v2 holds the alias
    # now, and v1 was never compared with it: a promotion would replace it unseen, so it fails closed
    assert main(["gate", "g", "1", "--json"]) == 4
    again = json.loads(capsys.readouterr().out)
    assert again["outcome"] == "could not judge" and again["recorded"] is False and again["champion_before"] is None and again["sequence"] is None
    assert [c["verdict"] for c in again["checks"] if c["rule"] != "alias"] == [c.verdict for c in first.checks]
    (alias,) = [c for c in again["checks"] if c["rule"] == "alias"]
    assert alias["verdict"] == "could not judge" and alias["name"] == "champion alias unchanged"

    assert main(["gate", "g", "1", "--against-current", "--json"]) == 0  # today's champion, v2, asked for: the comparison is made
    current = json.loads(capsys.readouterr().out)
    (regression,) = [c for c in current["checks"] if c["rule"] == "regression"]
    assert current["champion_before"] == "2" and regression["champion"] is not None and regression["verdict"] == "pass"
    assert [c for c in current["checks"] if c["rule"] == "alias"] == []  # judged against the alias's holder: it may move

    strict = home / "strict.yaml"
    strict.write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/acc": 0.999}, "resamples": 200}))
    assert main(["gate", "g", "1", "--policy", str(strict)]) == 3
    printed = capsys.readouterr().out
    assert printed.startswith("g v1: rejected") and "lcm-mc/acc" in printed
    assert client.get_model_version("g", "1").tags[tag_keys.DECISION] == "promoted"  # nothing written without --apply
    assert len(tracking.decision_history(client, run_id)) == 1

    assert main(["gate", "g", "1", "--policy", str(strict), "--apply", "--json"]) == 3
    applied_answer = json.loads(capsys.readouterr().out)
    assert applied_answer["recorded"] is True and applied_answer["sequence"] == 2
    tags = client.get_model_version("g", "1").tags
    assert tags[tag_keys.DECISION] == "rejected" and "lcm-mc/acc" in tags[tag_keys.REASONS] and tags[tag_keys.DECISION_RECORD] == "decisions/0002.json"
    assert tracking.champion_version(client, "g") == "2"
    assert sorted(p.name for p in (home / "validations" / "g" / "1" / "lcm-mc").iterdir()) == evaluated  # nothing evaluated again
    # the first record stands as it was; the second has the policy judged with, as loaded and as its file
    kept, applied = tracking.decision_history(client, run_id)
    assert kept == first
    assert (applied.sequence, applied.kind, applied.outcome, applied.champion_after, applied.alias_moved) == (2, DecisionKind.REJUDGEMENT, "rejected", "2", False)
    assert applied.policy["floors"] == {"lcm-mc/acc": 0.999} and applied.policy_path == str(strict)
    assert applied.policy_digest == hashlib.sha256(strict.read_bytes()).hexdigest()
    assert {"decisions/0001.json", "decisions/0001.policy.yaml", "decisions/0002.json", "decisions/0002.policy.yaml"} <= {a.path for a in client.list_artifacts(run_id, "decisions")}

    # recorded, the refusal to move the alias is the run's third record; the alias stays
    assert main(["gate", "g", "1", "--apply", "--json"]) == 4
    refused = json.loads(capsys.readouterr().out)
    assert refused["sequence"] == 3 and [c["verdict"] for c in refused["checks"] if c["rule"] == "alias"] == ["could not judge"]
    assert tracking.champion_version(client, "g") == "2"

    # a waiver lets the failing floor through, on record: who, why, until when
    waiver = {"check": "lcm-mc/acc floor", "by": "alice@example.com", "reason": "relabelling", "until": "2099-12-31"}
    waived = home / "waived.yaml"
    waived.write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/acc": 0.999}, "waivers": [waiver], "resamples": 200}))
    assert main(["gate", "g", "2", "--policy", str(waived)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("g v2: promoted") and "  waived          lcm-mc/acc floor: " in printed and "WAIVED by alice@example.com until 2099-12-31: relabelling" in printed

    # the champion is judged against the champion it replaced, never against itself
    assert main(["gate", "g", "2", "--apply", "--json"]) == 0
    champion = json.loads(capsys.readouterr().out)
    assert champion["champion_before"] == "1" and champion["champion_after"] == "2" and champion["alias_moved"] is False and champion["sequence"] == 2
    assert main(["gate", "g", "2", "--against-current"]) == 2 and "today's champion" in capsys.readouterr().err
    tracking.register_checkpoint(client, "g", world / "checkpoints" / "vlm-language-prior", home=home)
    assert main(["gate", "g", "3"]) == 2 and "no validation run yet" in capsys.readouterr().err
    assert main(["gate", "g", "9"]) == 2 and "no such registered version" in capsys.readouterr().err


def test_a_decided_version_validated_again_adds_a_record_against_the_same_champion_and_a_concurrent_request_waits(home, tiny_world, capsys, monkeypatch):
    """Re-validating the champion judges it against the champion it replaced, never
    itself, as the run's next record (the first stays as it was); two requests for one
    validation at once evaluate once: the second waits and reports the first's decision;
    ``vlgate status MODEL VERSION --json`` lists every record."""
    import threading

    world, _ = tiny_world
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    configure(home, {"r": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "regressions": {"lcm-mc/lcm": {"max_drop": 1.0}}, "resamples": 200})})
    client = tracking.connect(home)
    for steps in ("0", "3"):
        tracking.register_checkpoint(client, "r", world / "checkpoints" / f"vlm-steps{steps}", home=home)
    assert validate_pending(home, "r") == [("r", "1"), ("r", "2")] and tracking.champion_version(client, "r") == "2"
    run_id = client.get_model_version("r", "2").tags[tag_keys.VALIDATION_RUN]
    (first,) = tracking.decision_history(client, run_id)
    assert (first.champion_before, first.kind, first.alias_moved) == ("1", DecisionKind.VALIDATION, True)

    again = validate_model_version("r", "2", rerun=True)  # what `vlgate validate r 2` runs
    assert again.record is not None and (again.record.kind, again.record.sequence, again.record.champion_before, again.record.champion_after, again.outcome) == (DecisionKind.REVALIDATION, 2, "1", "2", "promoted")
    assert again.run_id == run_id and not again.waited_for_another
    kept, second = tracking.decision_history(client, run_id)
    assert kept == first and second.alias_moved is False
    (regression,) = [c for c in second.checks if c.rule == "regression"]
    assert regression.champion is not None and regression.n_shared == 4  # compared with v1's records, not with nothing
    assert client.get_model_version("r", "2").tags[tag_keys.DECISION_RECORD] == "decisions/0002.json"
    assert ClaimStore.for_home(home).get(VersionRef(model="r", version="2")).attempts == 2
    assert validate_model_version("r", "2").record.sequence == 2  # a flow run the service sends reports the decision as it stands

    # a gate task retried after it recorded: the same request appends nothing twice
    from vlgate.flows.judgement import JudgementRequest, judge
    from vlgate.flows.recording import run_outputs
    from vlgate.gate.policy import GatePolicy

    policy = home / "gate-r.yaml"
    request = JudgementRequest(VersionRef(model="r", version="2"), run_id, GatePolicy.from_file(policy), policy, kind=DecisionKind.REVALIDATION, request_id="task-run-1")
    retried = [judge(ServiceContext.open(), request, run_outputs(client, run_id), record=True) for _ in range(2)]
    assert [r.sequence for r in retried] == [3, 3] and retried[0] == retried[1] and len(tracking.decision_history(client, run_id)) == 3

    tracking.register_checkpoint(client, "r", world / "checkpoints" / "vlm-language-prior", home=home)
    results: list = []
    claims = ClaimStore.for_home(home)

    def request() -> None:
        results.append(validate_model_version("r", "3", rerun=True))

    waiting = threading.Event()
    plain_wait = ClaimStore.wait

    def seen_waiting(store: ClaimStore, subject: VersionRef, poll_s: float = 1.0):
        waiting.set()
        return plain_wait(store, subject, poll_s)

    monkeypatch.setattr(ClaimStore, "wait", seen_waiting)
    first_request = threading.Thread(target=request)
    second_request = threading.Thread(target=request)
    # the gate's lock held here keeps the first request running until the second waits for it, however slow the machine
    with ServiceContext.open().locks.hold("gate:r"):
        first_request.start()
        deadline = time.monotonic() + 120
        while (claims.get(VersionRef(model="r", version="3")) is None or claims.get(VersionRef(model="r", version="3")).state != "running") and time.monotonic() < deadline:
            time.sleep(0.05)
        second_request.start()
        assert waiting.wait(timeout=120)
    first_request.join(timeout=300)
    second_request.join(timeout=300)
    assert sorted(result.waited_for_another for result in results) == [False, True]
    assert {(r.record.sequence, r.outcome, r.record.champion_before, r.run_id) for r in results} == {(1, results[0].outcome, "2", results[0].run_id)}
    assert len(tracking.decision_history(client, results[0].run_id)) == 1 and claims.get(VersionRef(model="r", version="3")).attempts == 1

    capsys.readouterr()
    assert main(["status", "r", "2", "--json"]) == 0
    (version,) = json.loads(capsys.readouterr().out)["models"][0]["versions"]
    assert [(d["sequence"], d["kind"], d["champion_before"]) for d in version["decisions"]] == [(1, "validation", "1"), (2, "re-validation", "1"), (3, "re-validation", "1")]
    assert version["decision_record"] == "decisions/0003.json"
    assert main(["status", "r", "2"]) == 0
    assert "record 2 (re-validation" in capsys.readouterr().out


def test_a_champion_validated_before_the_suite_grew_is_evaluated_on_the_new_items_only_and_every_judgement_compares_on_all(home, tiny_world):
    """With ``champion_items: evaluate`` (the default) a candidate's comparison is made on
    every item it ran: the champion, validated on four items, is evaluated on the two the
    suite gained, those records are logged on the candidate's run (the champion's run is
    left as it was) and a judgement of the run again reads them; with ``shared`` the
    comparison is made on the items both have."""
    from vlgate.evaluators.records import read_jsonl
    from vlgate.flows.judgement import JudgementRequest, judge
    from vlgate.flows.recording import run_outputs
    from vlgate.gate.policy import GatePolicy

    world, _ = tiny_world
    suite = home / "suite.yaml"

    def grown_to(limit: int, champion_items: str = "evaluate") -> None:
        suite.write_text(yaml.safe_dump({"name": "grown", "champion_items": champion_items, "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": limit, "protocol": "vlgate"}}}))

    def compared_on(run_id: str) -> list[int | None]:
        return [c.n_shared for c in tracking.latest_decision(client, run_id).checks if c.rule == "regression"]

    grown_to(4)
    configure(home, {"g": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "regressions": {"lcm-mc/lcm": {"max_drop": 1.0}}, "resamples": 200})})
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "g", world / "checkpoints" / "vlm-steps3", home=home)
    assert validate_pending(home, "g") == [("g", "1")] and tracking.champion_version(client, "g") == "1"
    run_1 = client.get_model_version("g", "1").tags[tag_keys.VALIDATION_RUN]

    grown_to(6)
    tracking.register_checkpoint(client, "g", world / "checkpoints" / "vlm-steps0", home=home)
    assert validate_pending(home, "g") == [("g", "2")]
    run_2 = client.get_model_version("g", "2").tags[tag_keys.VALIDATION_RUN]
    assert compared_on(run_2) == [6]
    candidate = run_outputs(client, run_2)["lcm-mc"].records
    [logged] = [a.path for a in client.list_artifacts(run_2, "champion-items/v1/lcm-mc")]
    added = read_jsonl(Path(client.download_artifacts(run_2, logged, str(home / "download")))).records
    assert [r["id"] for r in added] == [r["id"] for r in candidate[4:]]  # exactly the two new items
    assert {r["protocol"] for r in added} == {r["protocol"] for r in candidate} and not {r["fingerprint"] for r in added} & {r["fingerprint"] for r in candidate}  # the champion's weights, asked as the candidate was
    assert client.get_run(run_2).data.metrics["champion_items/lcm-mc"] == 2
    assert len(run_outputs(client, run_1)["lcm-mc"].records) == 4  # the champion's own run as it was
    policy = home / "gate-g.yaml"
    again = judge(ServiceContext.open(), JudgementRequest(VersionRef(model="g", version="2"), run_2, GatePolicy.from_file(policy), policy), run_outputs(client, run_2), record=False)  # what `vlgate gate g 2` judges
    assert [c.n_shared for c in again.checks if c.rule == "regression"] == [6]

    grown_to(8, "shared")
    champion = tracking.champion_version(client, "g")
    tracking.register_checkpoint(client, "g", world / "checkpoints" / "vlm-language-prior", home=home)
    assert validate_pending(home, "g") == [("g", "3")]
    run_3 = client.get_model_version("g", "3").tags[tag_keys.VALIDATION_RUN]
    assert compared_on(run_3) == [6] and tracking.latest_decision(client, run_3).champion_before == champion
    assert not list(client.list_artifacts(run_3, "champion-items"))


def test_a_sequential_policy_stops_at_the_first_look_that_decides_and_a_stopped_version_can_be_completed(home, tiny_world, capsys):
    """Looks at a quarter of the 48 items each: a floor the tiny world's models are far
    below (lcm-mc/lcm 0.5; they score about 0.39 with little spread) rejects v1 at the first
    look, 12 items evaluated and 75 % saved, on record in MLflow; ``--complete`` evaluates
    the rest, reusing the 12, and judges at the last look; a version every look leaves
    undecided goes through all four."""
    world, _ = tiny_world
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "batch_size": 12, "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "protocol": "vlgate"}}}))
    looks = {"looks": [0.25, 0.5, 0.75, 1.0]}
    configure(home, {"s": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.5}, "resamples": 200, "sequential": looks})})
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "s", world / "checkpoints" / "vlm-steps3", home=home)
    capsys.readouterr()
    assert main(["validate", "s", "1", "--json"]) == 3
    result = json.loads(capsys.readouterr().out)
    (floor,) = [c for c in result["checks"] if c["rule"] == "floor"]
    assert floor["verdict"] == "fail" and floor["n_shared"] == 12 and (result["look"]["index"], result["look"]["of"], result["look"]["fraction"]) == (0, 4, 0.25)
    sequential = result["sequential"]
    assert [look["look"]["index"] for look in sequential["looks"]] == [0] and sequential["looks"][0]["decided"] == ["lcm-mc/lcm floor"]
    assert (sequential["items_evaluated"], sequential["items_total"], sequential["saved_fraction"]) == ({"lcm-mc": 12}, {"lcm-mc": 48}, 0.75)
    run = client.get_run(result["run_id"])
    assert run.data.metrics["sequential/saved_fraction"] == 0.75 and run.data.metrics["sequential/items_evaluated/lcm-mc"] == 12 and run.data.tags["vlgate.look"] == "1 of 4"
    # the run takes the version's logged model as its input: MLflow's run page lists "s v1" under its registered models
    [model_input] = run.inputs.model_inputs
    assert model_input.model_id == tracking.version_logged_model(client.get_model_version("s", "1"))
    assert json.loads(client.get_logged_model(model_input.model_id).tags["mlflow.modelVersions"]) == [{"name": "s", "version": "1"}]
    brief = "look 1 of 4 (25% of the items): rejected; 75% of item evaluations saved"
    assert run.data.tags["vlgate.sequential"] == brief and client.get_model_version("s", "1").tags["vlgate.sequential"] == brief
    page = Path(result["report"]).read_text()
    assert "Decided at look 1 of 4 (25% of the items): 12 of 48 items evaluated, 75% saved." in page and "<td>lcm-mc/lcm floor</td>" in page
    # numbers of an early look say so wherever they are shown: the section, the leaderboard, the version's headline tags
    assert '<p class="early" data-items="lcm-mc">Measured at look 1 of 4, on 12 of 48 items (the validation stopped there)' in page
    board = (Path(result["report"]).parent / "leaderboard.html").read_text()
    cells = re.findall(r'<td class="num early" data-metric="(lcm-mc/[^"]+)" data-value="[^"]*" data-items="12/48"[^>]*>[^<]*<sup>n=12</sup></td>', board)
    assert "lcm-mc/lcm" in cells and 'id="early-legend"' in board
    assert client.get_model_version("s", "1").tags["vlgate.metric.lcm-mc/lcm"] == f"{floor['candidate']:.4g} (look 1 of 4)"
    assert main(["validate", "s", "1"]) == 3 and "items evaluated: 12 of 48; 75% saved" in capsys.readouterr().out
    assert main(["status", "s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["versions"][0]["sequential"] == brief

    assert main(["validate", "s", "1", "--complete", "--json"]) == 3
    completed = json.loads(capsys.readouterr().out)
    assert completed["run_id"] == result["run_id"] and completed["sequential"]["saved_fraction"] == 0.0
    (floor,) = [c for c in completed["checks"] if c["rule"] == "floor"]
    assert floor["verdict"] == "fail" and floor["candidate"] < floor["limit"] == 0.5 and floor["n_shared"] is None and floor["interval"] is None  # the estimate itself, at the last look
    entry = json.loads(Path(client.download_artifacts(result["run_id"], "evaluators/lcm-mc/run.json", str(home / "dl"))).read_text())["entry"]
    assert (entry["reused"], entry["computed"], entry["n_items"]) == (12, 36, 48)  # the first look's records kept
    assert main(["gate", "s", "1", "--json"]) == 3 and json.loads(capsys.readouterr().out)["look"]["index"] == 3  # judged again at its last look

    (home / "gate-s.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200, "sequential": looks}))
    tracking.register_checkpoint(client, "s", world / "checkpoints" / "vlm-language-prior", home=home)
    assert main(["validate", "s", "2", "--json"]) == 0
    promoted = json.loads(capsys.readouterr().out)
    every = promoted["sequential"]
    assert [look["look"]["index"] for look in every["looks"]] == [0, 1, 2, 3] and [look["items"]["lcm-mc"] for look in every["looks"]] == [12, 24, 36, 48]
    assert every["saved_fraction"] == 0.0 and every["looks"][-1]["outcome"] == "promoted"
    # each look's metrics at the step of its items: MLflow charts the sequential path, and the latest value is the last look's
    path = client.get_metric_history(promoted["run_id"], "lcm-mc/lcm")
    assert [m.step for m in sorted(path, key=lambda m: m.step)] == [12, 24, 36, 48]
    assert client.get_run(promoted["run_id"]).data.metrics["lcm-mc/lcm"] == max(path, key=lambda m: m.step).value


def test_plan_sizes_each_rule_before_anything_runs_and_from_the_champion_once_there_is_one(home, tiny_world, capsys, caplog):
    """``vlgate plan``: before any version, spreads are assumed and the 16 items are too few
    for a 0.02 margin (a warning naming the rule); once v2 is champion after v1, the
    regression's spread is measured on v2 paired with v1 and the floor's margin is the
    champion's distance from it."""
    world, _ = tiny_world
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 16, "protocol": "vlgate"}}}))
    policy = {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.3}, "regressions": {"lcm-mc/acc": {"max_drop": 0.02}}, "resamples": 200}
    configure(home, {"p": (suite, policy)})
    capsys.readouterr()
    assert main(["plan", "p", "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    regression = next(r for r in before["rules"] if r["check"] == "lcm-mc/acc vs champion")
    assert before["champion"] is None and regression["items"] == 16 and regression["spread_from"].startswith("assumed")
    assert regression["items_needed"] > 16 and before["warnings"] == [regression["warning"]] and regression["warning"].startswith("lcm-mc/acc vs champion (max_drop 0.02): 16 items")
    assert main(["plan", "p"]) == 0
    printed = capsys.readouterr().out
    assert "p: what each rule can decide" in printed and "warning: lcm-mc/acc vs champion (max_drop 0.02)" in printed
    # vlgate serve logs the same warning as it starts, before anything is served
    import logging

    from vlgate.cli.service import warn_underpowered_rules

    with caplog.at_level(logging.WARNING, logger="vlgate.serve"):
        warn_underpowered_rules(ServiceContext.open(home))
    assert [r.getMessage() for r in caplog.records if r.name == "vlgate.serve"] == [f"model 'p': {regression['warning']} (vlgate plan p)"]

    (home / "gate-p.yaml").write_text(yaml.safe_dump(policy | {"regressions": {"lcm-mc/acc": {"max_drop": 1.0}}}))  # both promoted
    client = tracking.connect(home)
    for steps in ("0", "3"):
        tracking.register_checkpoint(client, "p", world / "checkpoints" / f"vlm-steps{steps}", home=home)
    assert validate_pending(home, "p") == [("p", "1"), ("p", "2")] and tracking.champion_version(client, "p") == "2"
    (home / "gate-p.yaml").write_text(yaml.safe_dump(policy))
    capsys.readouterr()
    assert main(["plan", "p", "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    regression = next(r for r in after["rules"] if r["check"] == "lcm-mc/acc vs champion")
    floor = next(r for r in after["rules"] if r["check"] == "lcm-mc/lcm floor")
    assert (after["champion"], after["baseline"], regression["spread_from"]) == ("2", "1", "champion v2 paired with v1")
    champion_lcm = client.get_run(client.get_model_version("p", "2").tags[tag_keys.VALIDATION_RUN]).data.metrics["lcm-mc/lcm"]
    assert floor["margin"] == pytest.approx(champion_lcm - 0.3) and floor["spread_from"] == "champion v2"
    assert main(["plan", "nope"]) == 2 and "'nope' is not configured" in capsys.readouterr().err
    # each validation run carries the table, measured on the champion it was judged against paired with it
    run_of = lambda v: client.get_model_version("p", v).tags[tag_keys.VALIDATION_RUN]
    logged = json.loads(Path(client.download_artifacts(run_of("2"), "power.json", str(home / "dl-power"))).read_text())
    assert (logged["champion"], logged["baseline"]) == ("1", "2") and [r["check"] for r in logged["rules"]] == ["lcm-mc/lcm floor", "lcm-mc/acc vs champion"]
    first = json.loads(Path(client.download_artifacts(run_of("1"), "power.json", str(home / "dl-power-1"))).read_text())
    assert first["champion"] is None and first["rules"][1]["spread_from"].startswith("assumed")
    page = (home / "reports" / "p" / "v2.html").read_text()
    assert "what each rule can decide on this suite" in page and "spreads of champion v1 paired with v2" in page


def test_vlgate_drift_checks_the_champion_now_and_exits_as_ci_expects(home, tiny_world, capsys):
    """Issue 17, item 6: an ad-hoc drift check is one command; its scores are tested with
    a Holm correction; exit 0 no drift, 3 drifted, 4 could not check, 2 bad input."""
    from vlgate.evaluators.world.datasets import build_unlabelled_batch

    world, _ = tiny_world
    reference = build_unlabelled_batch(home / "batches" / "reference", world / "checkpoints", n=24, seed=1)
    clean = build_unlabelled_batch(home / "batches" / "clean", world / "checkpoints", n=24, seed=2)
    shifted = build_unlabelled_batch(home / "batches" / "shifted", world / "checkpoints", n=24, seed=3, corruption=0.95)
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    configure(home, {"d": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200}), "plain": (suite, {"required": ["lcm-mc"]})})
    config = yaml.safe_load((home / "vlgate.yaml").read_text())
    # the tiny world's barely trained champion moves little: GenCeption's GC falls by about 0.05 on the corrupted batch
    config["models"]["d"]["drift"] = {"reference": str(reference), "batch": str(clean), "max_mean_drop": 0.02}
    # and the team hears of drift: a signed webhook to a real receiver, for the drift events only
    from test_notifications import Receiver

    from vlgate.registry_hooks.senders import verify_notification

    receiver = Receiver().start()
    os.environ["VLGATE_TEST_DRIFT_SECRET"] = "drift-s3cret"
    config["notify"] = {"channels": [{"kind": "webhook", "name": "ci", "url": receiver.url, "secret_env": "VLGATE_TEST_DRIFT_SECRET", "events": ["drift-found", "drift-not-checked"], "allow_private_addresses": True}]}
    (home / "vlgate.yaml").write_text(yaml.safe_dump(config))
    client = tracking.connect(home)
    tracking.register_checkpoint(client, "d", world / "checkpoints" / "vlm-steps3", home=home)
    capsys.readouterr()

    assert main(["drift", "plain"]) == 2 and "has no drift section" in capsys.readouterr().err
    assert main(["drift", "d", "--batch", str(home / "nope.yaml")]) == 2 and "no such file" in capsys.readouterr().err
    assert main(["drift", "d"]) == 4 and "no champion yet" in capsys.readouterr().out

    assert validate_pending(home, "d") == [("d", "1")] and tracking.champion_version(client, "d") == "1"
    capsys.readouterr()
    status = main(["drift", "d", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert (status, result["outcome"]) in ((0, "no drift"), (3, "drifted")) and result["version"] == "1"
    # the registry's drift score of each label-free evaluator of the drift suite, tested together: Holm-adjusted
    assert [check["metric"] for check in result["checks"]] == ["lcm-nb/lcm", "genception/gc", "decc/reliable_rate/multi"]
    assert all(check["p_adjusted"] >= check["p_value"] for check in result["checks"])
    run = client.get_run(result["run_id"])
    assert run.data.tags["vlgate.kind"] == "drift" and run.data.tags["vlgate.batch"] == str(clean)

    told_before = len(receiver.requests)
    status = main(["drift", "d", "--batch", str(shifted)])
    printed = capsys.readouterr().out
    assert status == 3 and printed.startswith("d v1: drifted") and "\n  drifted  " in printed, printed
    # each drift found was told once, signed, the shifted batch's last; the validation's decision was not (not subscribed)
    told = [verify_notification("drift-s3cret", headers, body) for _, headers, body in receiver.requests]
    receiver.stop()
    del os.environ["VLGATE_TEST_DRIFT_SECRET"]
    assert len(told) == told_before + 1 == (2 if result["outcome"] == "drifted" else 1), [n.event for n in told]
    assert {(n.event, n.model, n.version) for n in told} == {("drift-found", "d", "1")} and len({n.idempotency_key for n in told}) == len(told)
    scores = ("lcm-nb/lcm", "genception/gc", "decc/reliable_rate/multi")
    assert told[-1].outcome == "drifted" and told[-1].reasons and all(reason.startswith(scores) for reason in told[-1].reasons), told[-1].reasons


def test_diff_lists_the_items_a_version_lost_and_won_against_another_from_their_runs(home, default_world, capsys):
    """``vlgate diff``: the answer-prior fine-tune against the trained version on every MC
    item of the world, read back from the two validation runs: the lost and won items of
    ``correct`` are the ones the two versions' raw records say (argmax of p_mc against the
    answer), listed with both versions' probabilities; a version or an evaluator without
    records is bad input (exit 2)."""
    import numpy as np

    world, manifest = default_world
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "mc", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "protocol": "vlgate"}}}))
    configure(home, {"d": (suite, {"required": ["lcm-mc"], "regressions": {"lcm-mc/lcm": {"max_drop": 0.05}}, "resamples": 200})})
    client = tracking.connect(home)
    for folder in (manifest["checkpoints"]["vlm"]["10000"], manifest["checkpoints"]["vlm_faults"]["answer-prior"]):
        tracking.register_checkpoint(client, "d", world / folder, home=home)
    assert validate_pending(home, "d") == [("d", "1"), ("d", "2")]

    def right(version: str) -> dict[str, bool]:
        records = [json.loads(line) for line in (home / "validations" / "d" / version / "lcm-mc" / "records.jsonl").read_text().splitlines()]
        return {r["id"]: int(np.argmax(r["p_mc"])) == r["answer"] and sorted(r["p_mc"])[-1] > sorted(r["p_mc"])[-2] for r in records}

    candidate, champion = right("2"), right("1")
    lost = sorted(i for i in champion if champion[i] and not candidate[i])
    won = sorted(i for i in champion if candidate[i] and not champion[i])
    capsys.readouterr()
    assert main(["diff", "d", "2", "1", "--limit", "100", "--json"]) == 0
    (diff,) = json.loads(capsys.readouterr().out)["evaluators"]
    assert diff["evaluator"] == "lcm-mc" and diff["listed_score"] == "correct"
    cells = diff["scores"]["correct"]
    assert (cells["lost"], cells["won"], cells["n_shared"]) == (len(lost), len(won), len(candidate)) and lost
    assert cells["both_right"] == sum(candidate[i] and champion[i] for i in candidate)
    assert sorted(item["id"] for item in diff["lost"]) == lost and sorted(item["id"] for item in diff["won"]) == won
    first = diff["lost"][0]
    assert first["champion"] == 1.0 and first["candidate"] == 0.0 and first["fields"]["question"]["candidate"] == first["fields"]["question"]["champion"]
    assert first["fields"]["p_mc"]["candidate"] != first["fields"]["p_mc"]["champion"]
    # the answer prior breaks the probes' agreement with the choice far more than the choices
    assert diff["scores"]["reliable"]["lost"] > 3 * len(lost)

    assert main(["diff", "d", "2", "1", "--evaluator", "lcm-mc", "--score", "reliable", "--limit", "2"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("d v2 against v1") and "lost on reliable" in printed and f"correct: lost {len(lost)}, won {len(won)}" in printed
    # the flow logged the same comparison with v2's run, as an MLflow table, beside its champion's version and run
    run_id = client.get_model_version("d", "2").tags[tag_keys.VALIDATION_RUN]
    run = client.get_run(run_id)
    tags = run.data.tags
    assert tags[tag_keys.ITEM_DIFF_CHAMPION] == "1" and tags[tag_keys.ITEM_DIFF_CHAMPION_RUN] == client.get_model_version("d", "1").tags[tag_keys.VALIDATION_RUN]
    table = client.load_table(run.info.experiment_id, "item_diff/lcm-mc-vs-v1.json", run_ids=[run_id])  # what mlflow.load_table reads
    correct = table[table["score"] == "correct"]
    assert len(correct) == len(candidate) and sorted(correct[correct["change"] < 0]["id"]) == lost
    assert set(table["score"]) == {"correct", "p_lc", "reliable"}
    assert main(["gate", "d", "2", "--apply"]) == 3  # judged and recorded again: the table is not appended to
    assert len(client.load_table(run.info.experiment_id, "item_diff/lcm-mc-vs-v1.json", run_ids=[run_id])) == len(table)
    capsys.readouterr()

    assert main(["diff", "d", "2", "1", "--evaluator", "decc"]) == 2
    assert main(["diff", "d", "2", "3"]) == 2
    assert main(["diff", "d", "2", "1", "--category", "no-such-category"]) == 2


def test_every_decision_is_told_once_through_the_outbox(home, tiny_world, monkeypatch, capsys):
    """Validations through the service's own path put each decision's notification in the
    outbox with the claim's final state; the deliverer sends it signed to a real receiver on
    127.0.0.1 and through an Apprise json:// URL. A receiver that is down gets nothing lost:
    once back, each message arrives once. ``vlgate status`` counts the deliveries and
    ``vlgate notify test`` reaches every channel."""
    from test_notifications import Receiver

    from vlgate.flows.notifying import deliver_now
    from vlgate.flows.settings import ServiceConfig
    from vlgate.registry_hooks.notifications import Notification
    from vlgate.registry_hooks.senders import verify_notification

    world, _ = tiny_world
    receiver = Receiver().start()
    monkeypatch.setenv("VLGATE_TEST_NOTIFY_SECRET", "s3cret-for-the-test")
    monkeypatch.setenv("VLGATE_TEST_CHAT_URL", f"json://127.0.0.1:{receiver.port}/chat")
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "smoke", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    configure(home, {"n": (suite, {"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200})})
    written = yaml.safe_load((home / "vlgate.yaml").read_text())
    written["notify"] = {"channels": [
        {"kind": "webhook", "name": "ci", "url": receiver.url, "secret_env": "VLGATE_TEST_NOTIFY_SECRET", "allow_private_addresses": True},
        {"kind": "apprise", "name": "chat", "url_env": "VLGATE_TEST_CHAT_URL", "events": ["decision-promoted", "decision-rejected"], "allow_private_addresses": True},
    ]}  # fmt: skip
    (home / "vlgate.yaml").write_text(yaml.safe_dump(written))
    channels = ServiceConfig.load(home).all_channels()
    client = tracking.connect(home)
    receiver.stop()  # the receiver is down when the decisions are made
    tracking.register_checkpoint(client, "n", world / "checkpoints" / "vlm-steps0", home=home)
    tracking.register_checkpoint(client, "n", world / "checkpoints" / "vlm-steps3", home=home)
    assert validate_pending(home, "n") == [("n", "1"), ("n", "2")]
    report = deliver_now(home, channels)
    # one send a channel: a channel that failed is held back for the rest of the pass, its other row left for the next
    assert report is not None and (report.delivered, report.retried, sorted(report.held_back)) == (0, 2, ["chat", "ci"]) and receiver.requests == []
    assert main(["status", "n", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notifications"] == {"ci": {"pending": 2, "failed": 0, "delivered": 0}, "chat": {"pending": 2, "failed": 0, "delivered": 0}}

    receiver = Receiver(receiver.port).start()  # back up (a later deliverer: the backoff's wait is over)
    from datetime import UTC, datetime, timedelta

    from vlgate.flows.notifying import outbox_at

    outbox_at(home).deliver_due(channels, now=datetime.now(UTC) + timedelta(hours=2))
    outbox_at(home).deliver_due(channels, now=datetime.now(UTC) + timedelta(hours=4))  # nothing twice
    signed = [(path, headers, body) for path, headers, body in receiver.requests if path == "/hooks/vlgate"]
    told = [verify_notification("s3cret-for-the-test", headers, body) for _, headers, body in signed]
    records = {v: tracking.latest_decision(client, client.get_model_version("n", v).tags[tag_keys.VALIDATION_RUN]) for v in ("1", "2")}
    # and MLflow's run page says it too: the data set as an input with its digest, the decision as the description
    from vlgate.flows.recording import RUN_NOTE, data_digest

    run = client.get_run(client.get_model_version("n", "2").tags[tag_keys.VALIDATION_RUN])
    assert [(i.dataset.name, i.dataset.digest) for i in run.inputs.dataset_inputs] == [("lcm-mc: mc", data_digest(str(world / "data" / "mc")))]
    assert run.data.tags[RUN_NOTE].startswith(f"**{records['2'].outcome.value}** (record 1, validation) against v1")
    assert sorted((n.version, n.outcome, n.champion_after) for n in told) == sorted((v, r.outcome.value, r.champion_after) for v, r in records.items())
    assert len({n.idempotency_key for n in told}) == 2 and all(n.event == f"decision-{n.outcome}" for n in told)
    chat = [json.loads(body) for path, _, body in receiver.requests if path == "/chat"]
    assert len(chat) == len([r for r in records.values() if r.outcome.value in ("promoted", "rejected")]) and all("vlgate: n v" in c["title"] for c in chat)
    assert main(["status", "n", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notifications"]["ci"] == {"pending": 0, "failed": 0, "delivered": 2}

    assert main(["notify", "test", "n", "--json"]) == 0
    probe = json.loads(capsys.readouterr().out)
    assert {name: entry["state"] for name, entry in probe["channels"].items()} == {"ci": "delivered", "chat": "delivered"}
    (test_body,) = [body for _, headers, body in receiver.requests if headers.get("X-Vlgate-Delivery") == probe["idempotency_key"]]
    assert Notification.from_json(test_body).event == "test"
    receiver.stop()
