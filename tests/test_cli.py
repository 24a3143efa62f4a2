"""The CLI surface: --help everywhere, the demo, example records scoring through the console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlgate.flows.cli import main

EXAMPLES = Path(__file__).parent.parent / "evaluators" / "examples"


@pytest.mark.parametrize("command", [[], ["score"], ["correlate"], ["demo"], ["examples"], ["status"], ["serve"], ["register"], ["validate"]])
def test_help_on_every_command(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    assert "usage: vlgate" in capsys.readouterr().out


def test_unknown_evaluator_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["score", "nope", "x.jsonl"])
    assert exited.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_examples_prints_table1_coefficients(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    for evaluator in ("lcm-mc", "lcm-nb", "vlind", "genception", "decc"):
        assert evaluator in out
    for coefficient in ("0.8265", "0.8909", "0.7091", "0.9671", "0.9182", "0.8182"):
        assert coefficient in out


def test_console_script_scores_an_example(tmp_path):
    # the installed entry point, as a user runs it
    result = subprocess.run([str(Path(sys.executable).parent / "vlgate"), "score", "vlind", str(EXAMPLES / "vlind.jsonl"), "--by", "concept"], capture_output=True, text=True, check=True)
    metrics = json.loads(result.stdout)
    assert metrics["n"] == 18 and set(metrics["by_concept"]) == {"climate", "color", "habitat"}
    assert sum(group["n"] for group in metrics["by_concept"].values()) == 18
