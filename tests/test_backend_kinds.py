"""The backends a suite (and DeCC's agents) may name: one registry, no branch on a name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.backends.base import BackendInfo, VisionLanguageBackend
from vlgate.evaluators.running.suite import Suite, make_runner

EXAMPLES = Path(__file__).resolve().parents[1] / "evaluators" / "examples" / "data"


class Stub(VisionLanguageBackend):
    """A test double standing for a loaded model: it records what it was loaded as."""

    def __init__(self, model: str, options: backends.BackendOptions):
        self.model, self.options, self.closed = model, options, False
        self.info = BackendInfo(name="stub", model=model, digest=f"sha256:{model}")

    def choice_probs(self, requests):
        raise AssertionError("not used")

    def generate(self, requests):
        raise AssertionError("not used")

    def close(self):
        self.closed = True


@pytest.fixture
def stub_backend():
    loaded: list[Stub] = []

    def load(model: str, options: backends.BackendOptions) -> Stub:
        loaded.append(Stub(model, options))
        return loaded[-1]

    backends.register(backends.BackendKind("stub", load))
    try:
        yield loaded
    finally:
        backends.unregister("stub")


def _suite(tmp_path: Path, backend: str = "transformers", **decc) -> Suite:
    text = {
        "name": "kinds",
        "batch_size": 3,
        "backend": backend,
        "vllm": {"dtype": "float32"},
        "evaluators": {"decc": {"data": str(EXAMPLES / "decc"), "llm": "agents/llm", "decomposer": "agents/decomposer", **decc}},
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(text))
    return Suite.from_file(tmp_path / "suite.yaml")


def test_the_built_in_backends_and_what_vlgate_may_do_with_each():
    assert backends.names()[:3] == ("transformers", "vllm", "openai")
    assert [(k.local, k.other_engine) for k in map(backends.get, ("transformers", "vllm", "openai"))] == [(True, False), (True, True), (False, False)]
    assert backends.transformers_batch_size(3) == 16 and backends.transformers_batch_size(8) == 32


def test_a_suite_naming_an_unknown_backend_is_refused_when_read_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"suite .*suite.yaml: backend: .*unknown backend 'tgi'; expected one of transformers, vllm, openai"):
        _suite(tmp_path, backend="tgi")
    with pytest.raises(ValueError, match=r"evaluators.decc.llm_backend: .*unknown backend 'tgi'"):
        _suite(tmp_path, llm_backend="tgi")


def test_the_candidate_and_decc_agents_are_loaded_through_the_backend_each_names(tmp_path, stub_backend):
    from vlgate.evaluators.running.suite import load_vlm

    suite = _suite(tmp_path, backend="stub", llm_backend="stub")
    candidate = load_vlm("models:/shapes/2", suite, tmp_path / "cache")
    assert candidate.options == backends.BackendOptions(policy=suite.policy, cache_dir=tmp_path / "cache", batch_size=3, engine={"dtype": "float32"})
    runner = make_runner("decc", suite.evaluators["decc"], candidate, tmp_path / "out", suite, cache_dir=tmp_path / "cache")
    llm, decomposer = stub_backend[1:]
    # the agents as the suite names them, under its load policy and engine settings, at the backend's own batch size
    assert (llm.model, decomposer.model) == ("agents/llm", "agents/decomposer")
    assert llm.options == backends.BackendOptions(policy=suite.policy, cache_dir=tmp_path / "cache", batch_size=None, engine={"dtype": "float32"})
    assert runner.owned == [llm, decomposer]
    runner.close()
    assert llm.closed and decomposer.closed and not candidate.closed


def test_genceptions_helpers_are_chosen_from_the_same_registry(tmp_path):
    from vlgate.evaluators.genception.settings import GenceptionSettings

    assert backends.image_generator("scene-renderer").name == "scene-renderer" and not backends.image_generator("scene-renderer").needs_model
    assert backends.image_generator("models/sd-1.5").name == "diffusers"
    assert backends.IMAGE_ENCODERS.names() == ("vit", "clip") and backends.IMAGE_GENERATORS.names()[0] == "diffusers"
    with pytest.raises(ValueError, match="unknown image encoder 'dino'; expected one of vit, clip"):
        GenceptionSettings(data=tmp_path, encoder="x", encoder_kind="dino")

    loaded: list[tuple[str, str, backends.BackendOptions]] = []
    encoder = backends.HelperKind("vit", lambda model, options: loaded.append(("encoder", model, options)) or Stub(model, options))
    generator = backends.HelperKind("diffusers", lambda model, options: loaded.append(("generator", model, options)) or Stub(model, options))
    with backends.IMAGE_ENCODERS.swapped(encoder), backends.IMAGE_GENERATORS.swapped(generator):
        suite_file = tmp_path / "suite.yaml"
        suite_file.write_text(yaml.safe_dump({"name": "g", "evaluators": {"genception": {"data": str(tmp_path), "encoder": "enc", "generator": "sd"}}}))
        suite = Suite.from_file(suite_file)
        runner = make_runner("genception", suite.evaluators["genception"], Stub("candidate", backends.BackendOptions()), tmp_path / "out", suite, cache_dir=tmp_path / "cache")
        options = backends.BackendOptions(policy=suite.policy, cache_dir=tmp_path / "cache")
        assert loaded == [("encoder", "enc", options), ("generator", "sd", options)]
        assert [helper.model for helper in runner.owned] == ["enc", "sd"]
        runner.close()
    assert backends.IMAGE_ENCODERS.get("vit") is not encoder and backends.IMAGE_GENERATORS.get("diffusers") is not generator  # put back
