"""A configuration file says exactly what it is read as, or it is refused when it is read:
keys written twice, numbers that are not finite and waivers that contradict each other
are errors naming the file, not a gate weaker than the file reads."""

from __future__ import annotations

import pytest
import yaml

from vlgate.cli.main import main
from vlgate.config import ConfigError, parse_yaml
from vlgate.flows.settings import ServiceConfig
from vlgate.gate.policy import GatePolicy


def test_a_policy_with_two_floors_blocks_is_refused_naming_the_key_and_both_lines(tmp_path):
    path = tmp_path / "gate.yaml"
    path.write_text("required: [lcm-mc]\nfloors:\n  lcm-mc/acc: 0.9\nregressions: {}\nfloors:\n  lcm-mc/lcm: 0.5\n")
    with pytest.raises(ConfigError) as refused:
        GatePolicy.from_file(path)
    assert str(refused.value) == f"gate policy {path}: not valid YAML: line 5, column 1: duplicate key 'floors' (first at line 2)"


def test_a_suite_with_two_evaluators_blocks_stops_the_command_with_status_2(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: twice\nevaluators:\n  lcm-mc: {data: mc}\nevaluators:\n  lcm-nb: {data: nb}\n")
    assert main(["check-model", str(tmp_path / "unused"), "--suite", str(suite)]) == 2
    assert "duplicate key 'evaluators' (first at line 2)" in capsys.readouterr().err


def test_a_service_config_naming_two_models_blocks_is_refused(tmp_path, monkeypatch):
    (tmp_path / "vlgate.yaml").write_text("models:\n  a: {suite: s.yaml, policy: p.yaml}\nmodels:\n  b: {suite: s.yaml, policy: p.yaml}\n")
    with pytest.raises(ConfigError, match=r"line 3, column 1: duplicate key 'models' \(first at line 1\)"):
        ServiceConfig.load(tmp_path)


def test_the_same_key_in_different_mappings_and_merge_keys_still_load():
    assert parse_yaml("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}
    assert parse_yaml("base: &base {x: 1, y: 2}\nuse:\n  <<: *base\n  x: 3\n")["use"] == {"x": 3, "y": 2}
    with pytest.raises(yaml.YAMLError, match="duplicate key 'x'"):
        parse_yaml("nested:\n  deeper:\n    x: 1\n    x: 2\n")


@pytest.mark.parametrize(
    "text",
    [
        "floors: {lcm-mc/acc: .nan}",
        "ceilings: {lcm-mc/acc: .nan}",
        "floors: {lcm-mc/acc: -.inf}",
        "categories: {lcm-mc/acc: {floor: .nan}}",
        "regressions: {lcm-mc/acc: {max_drop: .inf}}",
        "superiority: {lcm-mc/acc: {min_gain: .nan}}",
    ],
)
def test_a_threshold_that_is_not_a_finite_number_is_refused_when_read(tmp_path, text):
    path = tmp_path / "gate.yaml"
    path.write_text("required: [lcm-mc]\n" + text + "\n")
    with pytest.raises(ConfigError, match="finite number"):
        GatePolicy.from_file(path)


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_a_webhook_age_limit_that_is_not_finite_is_refused_when_read(tmp_path, value):
    (tmp_path / "vlgate.yaml").write_text(f"webhook: {{max_age_s: {value}}}\n")
    with pytest.raises(ConfigError, match=r"webhook\.max_age_s: Input should be a finite number"):
        ServiceConfig.load(tmp_path)


def test_two_waivers_for_one_check_are_refused_whatever_their_order(tmp_path):
    waiver = "{check: lcm-mc/acc floor, by: %s, reason: relabelling, until: %s}"
    for first, second in [(("alice", "2026-01-01"), ("bob", "2099-01-01")), (("bob", "2099-01-01"), ("alice", "2026-01-01"))]:
        path = tmp_path / "gate.yaml"
        path.write_text(f"required: [lcm-mc]\nfloors: {{lcm-mc/acc: 0.9}}\nwaivers:\n  - {waiver % first}\n  - {waiver % second}\n")
        with pytest.raises(ConfigError, match=r"waivers\.1\.check: 'lcm-mc/acc floor' is waived already by waivers\.0"):
            GatePolicy.from_file(path)
