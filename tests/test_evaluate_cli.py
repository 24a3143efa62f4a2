"""`vlgate evaluate` on the synthetic world: records + metrics per evaluator, and a run
killed with SIGKILL resumes without recomputing what it had written."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlgate.cli.main import main

pytestmark = pytest.mark.world


def _suite(tmp_path, world, body: str):
    path = tmp_path / "suite.yaml"
    path.write_text(body.replace("WORLD", str(world)))
    return path


def test_evaluate_writes_records_metrics_and_summary(tiny_world, tmp_path, capsys):
    world, manifest = tiny_world
    suite = _suite(
        tmp_path,
        world,
        "name: smoke\nbatch_size: 4\nevaluators:\n"
        "  lcm-mc: {data: WORLD/data/mc, limit: 5}\n"
        "  lcm-nb: {data: WORLD/data/yesno, pair_seed: 3, limit: 2}\n"
        "  vlind: {data: WORLD/data/vlind, limit: 2}\n",
    )
    out = tmp_path / "out"
    model = str(world / manifest["checkpoints"]["vlm"]["3"])
    assert main(["evaluate", "--model", model, "--suite", str(suite), "--out", str(out), "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["lcm-mc"]["n"] == 5 and printed["lcm-nb"]["n"] == 2 and printed["vlind"]["n"] == 2
    for name in ("lcm-mc", "lcm-nb", "vlind"):
        metrics = json.loads((out / name / "metrics.json").read_text())
        assert metrics == printed[name]
        records = [json.loads(line) for line in (out / name / "records.jsonl").read_text().splitlines()]
        assert len(records) == metrics["n"] and all(r["fingerprint"].startswith("fp:") for r in records)
    pairing = json.loads((out / "lcm-nb" / "pairing.json").read_text())
    assert pairing["seed"] == 3 and len(pairing["pairs"]) == 24  # 48 image-question pairs, two per unit
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"]["digest"].startswith("sha256:") and summary["evaluators"]["lcm-mc"]["computed"] == 5
    # a second run finds every record by fingerprint and recomputes nothing
    assert main(["evaluate", "--model", model, "--suite", str(suite), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    again = json.loads((out / "summary.json").read_text())
    assert {name: entry["computed"] for name, entry in again["evaluators"].items()} == {"lcm-mc": 0, "lcm-nb": 0, "vlind": 0}


def test_bad_suite_is_a_clear_user_error(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: broken\nevaluators:\n  lcm-mc: {limit: 0}\n")
    assert main(["evaluate", "--model", "x", "--suite", str(suite), "--out", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err
    assert "evaluators.lcm-mc.data: Field required" in error and "evaluators.lcm-mc.limit" in error


@pytest.mark.timeout(300)
def test_sigkill_mid_run_resumes_where_it_stopped(tiny_world, tmp_path):
    world, manifest = tiny_world
    suite = _suite(tmp_path, world, "name: kill\nbatch_size: 2\nevaluators:\n  lcm-mc: {data: WORLD/data/mc}\n")
    out = tmp_path / "out"
    records = out / "lcm-mc" / "records.jsonl"
    command = [sys.executable, "-m", "vlgate.cli.main", "evaluate", "--model", str(world / manifest["checkpoints"]["vlm"]["3"]), "--suite", str(suite), "--out", str(out), "--quiet"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and (not records.is_file() or len(records.read_bytes().splitlines()) < 6):
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    written = sum(1 for line in records.read_bytes().splitlines(keepends=True) if line.endswith(b"\n"))
    assert 6 <= written < 48
    assert subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    summary = json.loads((out / "summary.json").read_text())["evaluators"]["lcm-mc"]
    # everything written before the kill is reused; only the rest (the batch in flight included) is computed
    assert (summary["reused"], summary["computed"]) == (written, 48 - written)
    assert len(records.read_text().splitlines()) == 48


def test_evaluate_runs_genception_and_decc_with_the_worlds_helper_models(tiny_world, tmp_path, capsys):
    world, manifest = tiny_world
    suite = _suite(
        tmp_path,
        world,
        "name: helpers\nbatch_size: 4\nevaluators:\n"
        "  genception: {data: WORLD/data/genception, iterations: 2, generator: scene-renderer, encoder: WORLD/checkpoints/vit-encoder, limit: 3, protocol: vlgate}\n"
        "  decc: {data: WORLD/data/decc, llm: WORLD/checkpoints/llm-agent, limit: 4}\n",
    )
    out = tmp_path / "out"
    assert main(["evaluate", "--model", str(world / manifest["checkpoints"]["vlm"]["3"]), "--suite", str(suite), "--out", str(out), "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["genception"]["n"] == 3 and "gc@2" in printed["genception"] and "gc_fid@2" in printed["genception"]
    assert printed["decc"]["n"] == 4 and 0.0 <= printed["decc"]["reliable_rate/multi"] <= 1.0
    records = [json.loads(line) for line in (out / "genception" / "records.jsonl").read_text().splitlines()]
    assert all(len(r["s"]) == len(r["descriptions"]) == len(r["images"]) == 2 for r in records)


@pytest.mark.parametrize("make_suite, says", [(lambda p: p.mkdir(), "is a folder"), (lambda p: p.write_bytes("name: x\n".encode("utf-16")), "not UTF-8")])
def test_a_suite_that_is_a_folder_or_not_utf8_is_one_line_and_exit_2(tmp_path, capsys, make_suite, says):
    suite = tmp_path / "suite.yaml"
    make_suite(suite)
    assert main(["evaluate", "--model", "x", "--suite", str(suite), "--out", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err
    assert says in error and str(suite) in error and len(error.strip().splitlines()) == 1


def test_the_shipped_example_data_of_every_format_runs_as_the_readme_says(tmp_path, capsys):
    """evaluators/examples/data: two items of each data format, with a suite that runs on the
    shipped world's checkpoints as it is (the README's quickstart points at it)."""
    from vlgate.evaluators.loaders.dataset import load_dataset

    examples = Path(__file__).parent.parent / "evaluators" / "examples" / "data"
    for evaluator, folder, count in (("lcm-mc", "mc", 2), ("lcm-nb", "nb", 2), ("vlind", "vlind", 2), ("decc", "decc", 2), ("genception", "genception", 4)):
        loaded = load_dataset(evaluator, examples / folder)
        assert (len(loaded.items), loaded.errors) == (count, []), evaluator
    model = Path(__file__).parent.parent / "evaluators" / "world" / "shipped" / "checkpoints" / "vlm-steps10000"
    assert main(["evaluate", "--model", str(model), "--suite", str(examples / "suite.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [printed[e]["n"] for e in ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")] == [2, 2, 2, 4, 2]
    assert 0.0 <= printed["lcm-mc"]["lcm"] <= 1.0 and "gc@2" in printed["genception"]
