"""The CLI surface: --help everywhere, the demo, example records scoring through the console script."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlgate import tag_keys
from vlgate.cli.main import main
from vlgate.evaluators import registry
from vlgate.versions import VersionRef


@pytest.mark.parametrize("command", [[], ["score"], ["correlate"], ["check"], ["demo"], ["examples"], ["status"], ["serve"], ["register"], ["validate"], ["release"], ["gate"], ["diff"], ["drift"], ["init"], ["stack"]])
def test_help_on_every_command(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    assert "usage: vlgate" in capsys.readouterr().out


def test_the_demo_keeps_to_the_world_size_its_home_validated_on(tmp_path, monkeypatch, capsys):
    """Versions validated on the medium world's items are not judged again, or judged
    against, on the small world's: the demo refuses the other size in one line, before
    anything starts."""
    from vlgate import tracking

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    (tmp_path / "world").mkdir()
    (tmp_path / "world" / "manifest.json").write_text(json.dumps({"size": "medium"}))
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    tracking.register_checkpoint(tracking.connect(tmp_path), "world-vlm", checkpoint, home=tmp_path)
    assert main(["demo", "--size", "small"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"vlgate demo: {tmp_path} holds the demo on the medium world; run the small one in another VLGATE_HOME (or `vlgate demo --size medium` here)"


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
    result = subprocess.run([str(Path(sys.executable).parent / "vlgate"), "score", "vlind", str(registry.get("vlind").example), "--by", "concept"], capture_output=True, text=True, check=True)
    metrics = json.loads(result.stdout)
    assert metrics["n"] == 18 and set(metrics["by_concept"]) == {"climate", "color", "habitat"}
    assert sum(group["n"] for group in metrics["by_concept"].values()) == 18


def test_validating_a_model_that_is_not_configured_is_one_line_and_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    """Once, such a version was claimed, failed, tagged rejected, and never revisited after
    the model was configured."""
    from vlgate import tracking
    from vlgate.registry_hooks.claims import ClaimStore

    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    client = tracking.connect(home)
    client.create_registered_model("unlisted")
    client.create_model_version("unlisted", source=str(tmp_path))
    capsys.readouterr()  # MLflow's own log lines from creating the store
    assert main(["validate", "unlisted", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'unlisted' has no suite and policy" in err[0]
    assert ClaimStore.for_home(home).get(VersionRef(model="unlisted", version="1")) is None
    assert tag_keys.DECISION not in client.get_model_version("unlisted", "1").tags


def test_release_frees_a_failed_claim_and_refuses_a_live_one_without_force(tmp_path, monkeypatch, capsys):
    from vlgate.registry_hooks.claims import ClaimStore

    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    claims = ClaimStore.for_home(home)
    assert main(["release", "m", "1"]) == 2 and "no claim" in capsys.readouterr().err
    claims.claim(VersionRef(model="m", version="1"), via="poller")
    claims.fail(VersionRef(model="m", version="1"), "MlflowException: registry away")
    assert main(["release", "m", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["released"]["state"] == "failed"
    assert claims.get(VersionRef(model="m", version="1")) is None and claims.claim(VersionRef(model="m", version="1"), via="poller")  # claimable again
    claims.begin(VersionRef(model="m", version="1"))
    assert main(["release", "m", "1"]) == 2 and "--force" in capsys.readouterr().err
    assert claims.get(VersionRef(model="m", version="1")) is not None
    assert main(["release", "m", "1", "--force"]) == 0
    assert claims.get(VersionRef(model="m", version="1")) is None


def test_status_shows_a_version_run_again_with_its_attempt_and_why():
    import io

    from rich.console import Console

    from vlgate.cli.service import status_table

    version = {"version": "3", "state": "running", "attempts": 2, "crashes": 1, "decision": None, "reasons": [], "detail": "attempt 2: the last flow run f1 crashed (exit -9)"}
    console = Console(file=io.StringIO(), width=200)
    console.print(status_table({"tracking_uri": "http://mlflow", "models": [{"name": "m", "champion": None, "versions": [version]}]}))
    shown = console.file.getvalue()
    assert "running (attempt 2)" in shown and "the last flow run f1 crashed (exit -9)" in shown


def test_validating_a_version_that_does_not_exist_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from vlgate import tracking
    from vlgate.registry_hooks.claims import ClaimStore

    home = tmp_path / "home"
    home.mkdir()
    (home / "suite.yaml").write_text("name: s\nevaluators: {}\n")
    (home / "gate.yaml").write_text("required: []\n")
    (home / "vlgate.yaml").write_text("models:\n  m: {suite: suite.yaml, policy: gate.yaml}\n")
    monkeypatch.setenv("VLGATE_HOME", str(home))
    tracking.connect(home).create_registered_model("m")
    capsys.readouterr()
    assert main(["validate", "m", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["vlgate validate: m v7: no such registered version"]
    assert ClaimStore.for_home(home).get(VersionRef(model="m", version="7")) is None


def closed_port() -> int:
    import socket

    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", [["status"], ["register", "m", "CHECKPOINT"], ["report", "m"]])
def test_operator_commands_on_an_unreachable_tracking_server_are_one_line_and_exit_2(command, tmp_path, monkeypatch, capsys):
    """MLflow's client would retry a refused connection for minutes, then raise a traceback."""
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    (tmp_path / "ckpt").mkdir()
    assert main([str(tmp_path / "ckpt") if part == "CHECKPOINT" else part for part in command]) == 2
    error = capsys.readouterr().err
    assert uri in error and "unreachable" in error and len(error.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "config, says",
    [("models: [\n", "not valid YAML: line 2, column 1"), ("models:\n  m: {suite: s.yaml}\n", "models.m.policy: Field required")],
)
def test_serve_with_a_broken_service_config_is_one_line_and_exit_2(config, says, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    (tmp_path / "vlgate.yaml").write_text(config)
    assert main(["serve", "--once", "--no-webhook", "--no-drift"]) == 2
    error = capsys.readouterr().err
    assert says in error and str(tmp_path / "vlgate.yaml") in error and len(error.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "policy, says",
    [
        ("required: [lcm-mc]\nfloors: {lcm-mc/accuracy: 0.5}\n", "floors.lcm-mc/accuracy: lcm-mc has no metric 'accuracy'"),
        ("required: [lcm-mc, decc]\n", "needs decc, which suite {home}/suite.yaml does not run (it runs lcm-mc)"),
        ("required: [lcm-mc]\nregressions: {lcm-nb/lcm: {max_drop: 0.1}}\n", "needs lcm-nb, which suite"),
        (
            "required: [lcm-mc]\nwaivers: [{check: lcm-mc/acc floor, by: a, reason: b, until: 2030-01-01}]\n",
            "waivers.0.check: the policy makes no check 'lcm-mc/acc floor'",
        ),
    ],
)
def test_a_policy_mistake_is_bad_input_before_anything_is_evaluated(policy, says, tmp_path, monkeypatch, capsys):
    """Issue 17: a typo in the policy, or a policy judging evaluators the suite does not
    run, used to surface as a rejection after every evaluator ran."""
    from vlgate import tracking
    from vlgate.registry_hooks.claims import ClaimStore

    home = tmp_path / "home"
    home.mkdir()
    (home / "suite.yaml").write_text("name: s\nevaluators: {lcm-mc: {data: mc}}\n")
    (home / "gate.yaml").write_text(policy)
    (home / "vlgate.yaml").write_text("models:\n  m: {suite: suite.yaml, policy: gate.yaml}\n")
    monkeypatch.setenv("VLGATE_HOME", str(home))
    tracking.connect(home).create_registered_model("m")
    capsys.readouterr()
    assert main(["validate", "m", "1"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"vlgate validate: gate policy {home / 'gate.yaml'}: ") and says.format(home=home) in line
    assert ClaimStore.for_home(home).get(VersionRef(model="m", version="1")) is None  # nothing claimed, nothing ran
    # the service refuses to start on it too, naming the model
    assert main(["serve", "--once", "--no-webhook", "--no-drift"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "model 'm': gate policy" in line and says.format(home=home) in line


def test_every_command_is_one_object_with_json_exactly_where_it_has_a_text_form():
    import argparse

    from vlgate.cli.commands import COMMANDS
    from vlgate.cli.main import build_parser

    names = [command.name for command in COMMANDS]
    (subcommands,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    assert list(subcommands.choices) == names and len(set(names)) == len(names)
    for command in COMMANDS:
        options = {option for action in subcommands.choices[command.name]._actions for option in action.option_strings}
        assert ("--json" in options) == (command.json_help is not None), command.name


def test_a_command_line_builds_the_arguments_of_the_command_it_names_alone():
    import argparse
    import subprocess
    import sys

    from vlgate.cli.main import build_parser, named_command

    assert named_command(["validate", "m", "1"]) == "validate" and named_command(["--version"]) is None and named_command([]) is None

    def arguments(parser: argparse.ArgumentParser, name: str) -> set[str]:
        (subcommands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        return {action.dest for action in subcommands.choices[name]._actions} - {"help"}

    named, full = build_parser("validate"), build_parser()
    assert arguments(named, "validate") == arguments(full, "validate") and "complete" in arguments(named, "validate")
    assert arguments(named, "score") == set() and "evaluator" in arguments(full, "score")  # the other commands keep name and help only
    line = ["validate", "m", "007", "--complete", "--json"]
    assert vars(named.parse_args(line)) == vars(full.parse_args(line))
    # naming a command that is not `score` never imports the evaluators to list score's choices
    probe = "import sys; from vlgate.cli.main import build_parser; build_parser('history'); print('vlgate.evaluators.registry' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_an_answer_is_printed_as_text_or_json_and_gives_its_status(capsys):
    from vlgate.cli.commands.base import Answer
    from vlgate.cli.main import render

    answer = Answer({"outcome": "rejected", "n": 2}, status=3, text=lambda: print("rejected (2 checks)"))
    assert render(answer, as_json=False) == 3 and capsys.readouterr().out == "rejected (2 checks)\n"
    assert render(answer, as_json=True) == 3 and json.loads(capsys.readouterr().out) == {"outcome": "rejected", "n": 2}
    assert render(Answer({"a": 1}), as_json=False) == 0 and json.loads(capsys.readouterr().out) == {"a": 1}  # no text form: JSON
    assert render(Answer(None, status=1), as_json=False) == 1 and capsys.readouterr().out == ""  # printed by the command itself


def test_each_outcome_has_its_exit_status():
    from vlgate.cli.commands.base import exit_status

    assert [exit_status(o) for o in ("promoted", "rejected", "could not judge", "inconclusive")] == [0, 3, 4, 5]


def test_init_writes_a_commented_configuration_that_loads_and_keeps_what_is_there(tmp_path, monkeypatch, capsys):
    import yaml

    from vlgate.evaluators.running.suite import Suite
    from vlgate.flows.settings import ServiceConfig, model_problem
    from vlgate.gate.policy import GatePolicy

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path))
    assert main(["init", "my-vlm"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {tmp_path / 'my-vlm' / 'suite.yaml'}" in printed and "vlgate register my-vlm" in printed
    assert model_problem(tmp_path, "my-vlm", ServiceConfig.load(tmp_path)) is None
    suite = Suite.from_file(tmp_path / "my-vlm" / "suite.yaml")
    assert list(suite.evaluators) == ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"] and suite.evaluators["lcm-mc"].data == tmp_path / "my-vlm" / "data" / "mc"
    assert suite.evaluators["genception"].encoder_kind == "clip"  # a CLIP id is read as CLIP, not as the default ViT
    policy = GatePolicy.from_file(tmp_path / "my-vlm" / "gate.yaml")
    assert policy.correction == "holm" and policy.regressions["lcm-mc/lcm"].max_drop == 0.02
    # group-sequential by default: four looks, rejecting early only
    assert policy.sequential is not None and (policy.sequential.looks, policy.sequential.promote_early) == ([0.25, 0.5, 0.75, 1.0], False)
    assert "# VL-LCM on multiple-choice VQA" in (tmp_path / "my-vlm" / "suite.yaml").read_text()  # the formats are explained where they are used

    # a second model joins the existing vlgate.yaml, whose comments and other settings stay
    config = tmp_path / "vlgate.yaml"
    config.write_text("# ours\nmodels:  # every model we gate\n  old: {suite: old/suite.yaml, policy: old/gate.yaml}\npoll_interval_s: 5\n")
    assert main(["init", "second", "--dir", str(tmp_path)]) == 0
    text = config.read_text()
    assert text.startswith("# ours\nmodels:  # every model we gate\n") and "poll_interval_s: 5" in text
    assert set(ServiceConfig.load(tmp_path).models) == {"old", "second"} and yaml.safe_load(text)["poll_interval_s"] == 5

    # nothing is overwritten without --force; a name that is no folder name is refused
    capsys.readouterr()
    assert main(["init", "second"]) == 2 and "exists: --force overwrites" in capsys.readouterr().err
    (tmp_path / "second" / "gate.yaml").write_text("floors: {}\n")
    assert main(["init", "second", "--force"]) == 0 and "correction: holm" in (tmp_path / "second" / "gate.yaml").read_text()
    assert main(["init", "../escape"]) == 2 and "a model name for vlgate init" in capsys.readouterr().err
    config.write_text("models: {old: {suite: old/suite.yaml, policy: old/gate.yaml}}\n")
    assert main(["init", "third"]) == 2 and "under models: by hand" in capsys.readouterr().err


def test_the_console_script_returns_mains_status_and_leaves_its_objects_to_the_exit():
    """The console script is console_main: main's exit status, and the objects the command
    made frozen, so the interpreter's last collection at exit skips them (1.4 s after a
    validation)."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="vlgate")
    assert script.value == "vlgate.cli.main:console_main"
    program = "import gc, sys\nfrom vlgate.cli.main import console_main\nsys.argv = ['vlgate', 'score', 'lcm-mc', '/nonexistent']\nprint(console_main(), gc.get_freeze_count() > 0)"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "True"]
    assert done.stderr.strip() == "vlgate score: /nonexistent: no such file"


def no_prefect_server(monkeypatch) -> list:
    """Records (and refuses) any start of the service's Prefect server."""
    from vlgate.cli import service

    started: list = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise AssertionError("the Prefect server was started")

    monkeypatch.setattr(service, "local_prefect_server", refuse)
    return started


@pytest.mark.parametrize(
    "drift, says",
    [
        ("{reference: suite.yaml, batch: suite.yaml, cron: every hour}", "vlgate.yaml: models.m.drift.cron: 'every hour' is not a cron schedule (Wrong number of fields"),
        ("{reference: missing.yaml, batch: suite.yaml}", "model 'm': drift reference suite: "),
    ],
)
def test_serve_refuses_a_drift_schedule_it_could_never_run_before_starting_anything(drift, says, tmp_path, monkeypatch, capsys):
    """A cron that is not one crashed the service about 18 s after it started; a missing
    drift suite let it start and fail every scheduled check."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "suite.yaml").write_text("name: s\nevaluators: {lcm-mc: {data: mc}}\n")
    (home / "gate.yaml").write_text("required: [lcm-mc]\n")
    (home / "vlgate.yaml").write_text(f"models:\n  m: {{suite: suite.yaml, policy: gate.yaml, drift: {drift}}}\n")
    monkeypatch.setenv("VLGATE_HOME", str(home))
    servers = no_prefect_server(monkeypatch)
    started = time.monotonic()
    assert main(["serve", "--no-webhook"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert says in line
    assert time.monotonic() - started < 30 and servers == []


def test_serve_refuses_an_unreachable_tracking_server_and_a_taken_webhook_port_before_starting_anything(tmp_path, monkeypatch, capsys):
    """MLflow away: the service started its Prefect server, then exited with a traceback. The
    webhook's port taken: it ran on with no receiver (whatever held the port answered)."""
    import socket

    servers = no_prefect_server(monkeypatch)
    home = tmp_path / "home"
    home.mkdir()
    (home / "suite.yaml").write_text("name: s\nevaluators: {lcm-mc: {data: mc}}\n")
    (home / "gate.yaml").write_text("required: [lcm-mc]\n")
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a listener holds the webhook's port
        port = taken.getsockname()[1]
        (home / "vlgate.yaml").write_text(f"models:\n  m: {{suite: suite.yaml, policy: gate.yaml}}\nwebhook: {{port: {port}}}\n")
        monkeypatch.setenv("VLGATE_HOME", str(home))
        monkeypatch.setenv("VLGATE_WEBHOOK_SECRET", "s3cret")
        uri = f"http://127.0.0.1:{closed_port()}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        assert main(["serve", "--no-drift"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert uri in line and "unreachable" in line
        monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the embedded store: reachable
        assert main(["serve", "--no-drift"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"vlgate serve: webhook 127.0.0.1:{port}: cannot listen there")
    assert servers == []


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "m", "01"], ["validate", "m", "abc"], ["gate", "m", "abc"], ["gate", "m", "1.5"], ["diff", "m", "abc", "1"],
        ["diff", "m", "1", "05"], ["release", "m", "01"], ["report", "m", "0"], ["validate", "m", "-1"],
    ],
)  # fmt: skip
def test_a_version_not_in_the_registry_s_form_is_one_line_exit_2_before_anything_starts_or_is_claimed(command, tmp_path, monkeypatch, capsys):
    """The registry numbers versions 1, 2, ...: "01" would be version 1 under another
    spelling, "abc" none. Refused where it enters, naming what it got, before the
    tracking server is asked, a Prefect server starts or a claim is made."""
    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing answers: a command that asked it would say so
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    bad = next(text for text in command[2:] if text not in ("1",))
    assert len(err) == 1 and err[0].startswith(f"vlgate {command[0]}: ") and repr(bad) in err[0] and "positive whole number" in err[0]
    assert not (home / "state.db").exists() and not home.exists() or not any(home.iterdir())
