"""A validation's plan: the model's suite and policy read once, checked against each other,
handed to every step, and the key of each evaluator's cached results taken from the
suite's content rather than its file's bytes."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import yaml

from vlgate.decisions import CheckKey, Rule
from vlgate.flows.plan import ValidationPlan
from vlgate.flows.settings import ModelConfig, read_model_config
from vlgate.versions import VersionRef

EXAMPLES = Path(__file__).resolve().parents[1] / "evaluators" / "examples" / "data"
POLICY = {"required": ["lcm-mc", "vlind"], "floors": {"lcm-mc/acc": 0.5}, "waivers": [{"check": "lcm-mc/acc floor", "by": "qa", "reason": "known", "until": "2099-01-01"}]}


def _config(tmp_path: Path, suite_text: str, policy: dict = POLICY) -> ModelConfig:
    suite, gate = tmp_path / "suite.yaml", tmp_path / "gate.yaml"
    suite.write_text(suite_text)
    gate.write_text(yaml.safe_dump(policy))
    return ModelConfig(suite=suite, policy=gate)


def _suite_text(comment: str = "", **changes) -> str:
    """The shipped example suite, its paths made absolute, with ``changes`` per evaluator (or
    at the top level)."""
    suite = yaml.safe_load((EXAMPLES / "suite.yaml").read_text())
    for name, entry in suite["evaluators"].items():
        entry["data"] = str(EXAMPLES / entry["data"])
        for field in ("encoder", "llm"):
            if field in entry:
                entry[field] = str((EXAMPLES / entry[field]).resolve())
        entry.update(changes.pop(name, {}))
    suite.update(changes)
    return comment + yaml.safe_dump(suite)


def test_the_plan_holds_the_suite_and_policy_as_read_and_survives_a_process_boundary(tmp_path):
    plan = ValidationPlan.read(_config(tmp_path, _suite_text()), VersionRef(model="shapes", version="3"))
    assert (plan.model, plan.version, plan.model_uri) == ("shapes", "3", "models:/shapes/3")
    assert list(plan.suite.evaluators) == ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"] and plan.suite.batch_size == 2
    (tmp_path / "gate.yaml").write_text(yaml.safe_dump({"floors": {"lcm-mc/acc": 0.9}}))  # edited while the flow runs
    assert plan.policy.floors == {"lcm-mc/acc": 0.5}  # what was checked is what is judged with
    # pickled (a Dask worker) or logged and read back: the same plan, its waiver still resolved to its check
    for copy in (pickle.loads(pickle.dumps(plan)), ValidationPlan.model_validate_json(plan.model_dump_json())):
        assert copy.suite_digest() == plan.suite_digest()
        assert copy.policy.waiver(CheckKey(Rule.FLOOR, "lcm-mc/acc")).by == "qa"


def test_a_policy_judging_an_evaluator_the_suite_does_not_run_is_refused_when_the_plan_is_read(tmp_path):
    suite = yaml.safe_load(_suite_text())
    del suite["evaluators"]["vlind"]
    config = _config(tmp_path, yaml.safe_dump(suite))
    with pytest.raises(ValueError, match=r"^gate policy .*gate.yaml: needs vlind, which suite .*suite.yaml does not run"):
        ValidationPlan.read(config, VersionRef(model="shapes", version="1"))
    with pytest.raises(ValueError, match="suite .*: evaluators.lcm-mc.batch"):
        read_model_config(_config(tmp_path, _suite_text(**{"lcm-mc": {"batch": 3}})))


def test_an_evaluators_cache_key_follows_its_content_not_the_files_bytes(tmp_path):
    def digests(text: str) -> dict[str, str]:
        plan = ValidationPlan.read(_config(tmp_path, text), VersionRef(model="shapes", version="1"))
        return {name: plan.evaluator_digest(name) for name in plan.suite.evaluators} | {"suite": plan.suite_digest()}

    plain = digests(_suite_text())
    assert digests(_suite_text(comment="# reviewed by qa\n")) == plain  # a comment changes no result
    assert digests(_suite_text(name="renamed")) | {"suite": None} == plain | {"suite": None}  # nor does the suite's name
    other_entry = digests(_suite_text(**{"lcm-nb": {"pair_seed": 7}}))
    assert other_entry["lcm-nb"] != plain["lcm-nb"] and all(other_entry[n] == plain[n] for n in ("lcm-mc", "vlind", "genception", "decc"))
    shared = digests(_suite_text(batch_size=4))  # a suite-wide setting: every evaluator's results
    assert all(shared[n] != plain[n] for n in ("lcm-mc", "lcm-nb", "vlind", "genception", "decc"))


def test_a_shards_cache_key_follows_the_versions_identity_and_its_data_read_once_per_validation(monkeypatch, tmp_path):
    from prefect.task_runners import ThreadPoolTaskRunner

    from vlgate.evaluators.backends import loading
    from vlgate.evaluators.running.suite import EvaluatorShard
    from vlgate.flows.evaluation import Evaluation, data_state, evaluator_cache_key

    data = tmp_path / "data"
    shutil.copytree(EXAMPLES, data)
    suite = yaml.safe_load(_suite_text())
    suite["evaluators"]["lcm-mc"]["data"] = str(data / "mc")
    plan = ValidationPlan.read(_config(tmp_path, yaml.safe_dump(suite)), VersionRef(model="shapes", version="3"))
    identities = iter(['["shapes", "3", "s3://a", "r1", 1]', '["shapes", "3", "s3://b", "r2", 2]'])
    asked: list[str] = []
    monkeypatch.setattr(loading, "mlflow_identity", lambda uri: (asked.append(uri), (uri, next(identities)))[1])
    evaluation = Evaluation(ThreadPoolTaskRunner(), str(tmp_path / "cache"))
    inputs = evaluation._inputs(plan, "lcm-mc")
    assert evaluation._inputs(plan, "lcm-mc") == inputs and evaluation._inputs(plan.at_look(1), "lcm-mc") == inputs  # read once per validation
    assert asked == ["models:/shapes/3"] and inputs.data_state == data_state(data / "mc")

    def key(**changes) -> str:
        parameters = {"plan": plan, "shard": EvaluatorShard(evaluator="lcm-mc"), "inputs": inputs, "out": "out"} | changes
        return evaluator_cache_key(None, parameters)  # type: ignore[arg-type]

    plain = key()
    assert key() == plain and key(shard=EvaluatorShard(evaluator="lcm-mc", index=1)) != plain and key(out="elsewhere") != plain
    assert key(shard=EvaluatorShard(evaluator="lcm-mc", n_shards=2)) != plain and key(shard=EvaluatorShard(evaluator="lcm-nb")) != plain
    assert Evaluation(ThreadPoolTaskRunner(), "c")._inputs(plan, "lcm-mc").version_identity != inputs.version_identity  # the number registered again: other weights
    assert key(inputs=inputs.model_copy(update={"version_identity": "other"})) != plain
    (data / "mc" / "extra.txt").write_text("a file more")
    assert data_state(data / "mc") != inputs.data_state  # a new validation reads the data's new state
