"""The CI recipe of docs/ci/: its script run for real (register, validate, keep the decision
and the report, exit as vlgate validate does) and the two CI files it is called from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "ci" / "vlgate-validate.sh"


def test_the_ci_files_call_the_script_and_keep_its_output_whatever_the_decision():
    github = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    steps = github["jobs"]["validate"]["steps"]
    assert any("docs/ci/vlgate-validate.sh" in step.get("run", "") for step in steps)
    kept = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact")]
    assert [step["if"] for step in kept] == ["always()"] and kept[0]["with"]["path"] == "vlgate-out/"
    gitlab = yaml.safe_load((ROOT / "docs" / "ci" / "gitlab-ci.yml").read_text())["validate"]
    assert any("docs/ci/vlgate-validate.sh" in line for line in gitlab["script"])
    assert gitlab["allow_failure"] == {"exit_codes": [5]} and gitlab["artifacts"]["when"] == "always"
    assert os.access(SCRIPT, os.X_OK)


@pytest.mark.world
@pytest.mark.service
@pytest.mark.slow
def test_the_script_registers_validates_and_exits_with_the_decision(tmp_path, tiny_world):
    world, _ = tiny_world
    home = tmp_path / "home"
    home.mkdir()
    suite = home / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "ci", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": 4, "protocol": "vlgate"}}}))
    (home / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/lcm": 0.0}, "resamples": 200}))
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"models": {"ci-vlm": {"suite": "suite.yaml", "policy": "gate.yaml"}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB")} | {
        "VLGATE_HOME": str(home), "VLGATE": str(Path(sys.executable).with_name("vlgate")), "PYTHON": sys.executable,
    }  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run([str(SCRIPT), "ci-vlm", str(world / "checkpoints" / "vlm-steps3"), str(out)], env=env, capture_output=True, text=True, timeout=600)
    decision = json.loads((out / "decision.json").read_text())
    from vlgate.cli.commands.base import exit_status

    assert (decision["model"], decision["version"]) == ("ci-vlm", "1") and done.returncode == exit_status(decision["outcome"]), done.stderr[-2000:]
    assert (out / "report.html").is_file() and f"ci-vlm v1: {decision['outcome']}" in done.stdout
    missing = subprocess.run([str(SCRIPT), "ci-vlm", str(tmp_path / "nowhere"), str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "not a checkpoint folder" in missing.stderr
