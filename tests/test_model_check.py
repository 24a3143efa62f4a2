"""`vlgate check-model`: every fast path against the plain forward pass, on a test double
whose shared-prefix path drifts and on the shipped world's real checkpoint."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from vlgate.cli.commands.base import EXIT_NOT_EXACT
from vlgate.cli.main import main
from vlgate.evaluators.backends.base import BackendInfo, ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.transformers_backend import PrefixSharing, TransformersBackend
from vlgate.evaluators.running import model_check
from vlgate.evaluators.running.model_check import BATCHED_GENERATION, BATCHED_SCORING, OTHER_ENGINE, SHARED_PREFIX, ModelCheck, check_transformers, suite_requests
from vlgate.evaluators.running.suite import Suite

WORLD_VLM = Path(__file__).resolve().parents[1] / "evaluators" / "world" / "shipped" / "checkpoints" / "vlm-steps10000"


class DriftingBackend:
    """A backend double whose plain path is a fixed function of the prompt, and whose
    shared-prefix path passes the backend's first-group check and then drifts by ``drift``
    (what a cache bug that depends on the batch's shape looks like)."""

    def __init__(self, drift: float = 0.03, batch_size: int = 16):
        self.drift, self.batch_size = drift, batch_size
        self.info = BackendInfo(name="transformers", model="drifting-double", digest="sha256:" + "0" * 64)
        self.prefix_sharing = PrefixSharing()
        self.calls = 0

    def plain_copy(self, batch_size: int = 1) -> DriftingBackend:
        plain = DriftingBackend(self.drift, batch_size)
        plain.prefix_sharing = PrefixSharing(False, "the plain path")
        return plain

    def fresh_copy(self) -> DriftingBackend:
        return DriftingBackend(self.drift, self.batch_size)

    @staticmethod
    def _plain(request: ChoiceRequest) -> np.ndarray:
        weights = np.array([1 + zlib.crc32(f"{request.prompt}|{option}".encode()) % 97 for option in request.options], dtype=float)
        return weights / weights.sum()

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        sharing = self.prefix_sharing.verified is not False and any(r.shared_prefix for r in requests)
        if sharing:
            self.prefix_sharing.verified = True
        self.calls += 1
        results = []
        for n, request in enumerate(requests):
            probs = self._plain(request)
            if sharing and request.shared_prefix and n >= 5:  # past the first group, which the backend checks
                probs = np.roll(probs, 1) * self.drift + probs * (1 - self.drift)
            results.append(probs)
        return results

    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        return [f"text {zlib.crc32(r.prompt.encode()) % 1000}" for r in requests]

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def example_requests() -> model_check.CheckRequests:
    return suite_requests(Suite.from_file(model_check.EXAMPLES_SUITE), items=2)


def test_the_requests_are_the_runners_own_for_each_lcm_item(example_requests):
    # the shipped examples: 2 lcm-mc items of 4 options (1 MC + 4 probes each), 2 lcm-nb units (8 each)
    assert len(example_requests.choices) == 2 * 5 + 2 * 8
    assert sum(r.shared_prefix is not None for r in example_requests.choices) == 10
    assert len(example_requests.generations) == 2


def test_a_shared_path_that_drifts_after_its_first_group_is_named_and_untrusted(example_requests):
    result = check_transformers(DriftingBackend(drift=0.03), example_requests)
    by_path = {path.path: path for path in result.paths}
    shared = by_path[SHARED_PREFIX]
    assert shared.used and shared.exact is False and not shared.trusted
    assert shared.largest_difference == pytest.approx(max(abs(np.roll(p, 1) - p).max() * 0.03 for p in map(DriftingBackend._plain, example_requests.choices[5:10])))
    assert by_path[BATCHED_SCORING].trusted and by_path[BATCHED_SCORING].largest_difference == 0.0
    assert by_path[BATCHED_GENERATION].exact is True
    assert by_path[OTHER_ENGINE].used is False and by_path[OTHER_ENGINE].exact is None
    assert not result.trusted and [path.path for path in result.untrusted()] == [SHARED_PREFIX]
    assert ModelCheck.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_check_model_exits_non_zero_naming_the_path_that_is_not_exact(monkeypatch, capsys):
    monkeypatch.setattr(TransformersBackend, "load", classmethod(lambda cls, *args, **kwargs: DriftingBackend()))
    assert main(["check-model", "any-model", "--json"]) == EXIT_NOT_EXACT
    out, err = capsys.readouterr()
    assert json.loads(out)["trusted"] is False
    assert err.startswith("vlgate check-model: shared prefix is used on this model but differs from the plain forward pass by 0.0")


def test_check_model_on_a_missing_model_is_one_line_and_status_2(capsys, tmp_path):
    assert main(["check-model", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith(f"vlgate check-model: model '{tmp_path / 'nowhere'}': no such folder")


@pytest.mark.world
def test_check_model_on_the_shipped_world_vlm_trusts_every_path(capsys):
    assert main(["check-model", str(WORLD_VLM), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    by_path = {path["path"]: path for path in result["paths"]}
    assert result["trusted"] is True
    assert by_path[SHARED_PREFIX]["used"] is True and by_path[SHARED_PREFIX]["largest_difference"] < 1e-6
    assert by_path[BATCHED_SCORING]["used"] is True and by_path[BATCHED_SCORING]["largest_difference"] < 1e-6
    assert by_path[BATCHED_GENERATION]["exact"] is True


class OtherEngine(DriftingBackend):
    """Another engine's double: every probability moved by ``shift`` of the next option's."""

    def __init__(self, shift: float):
        super().__init__(drift=0.0)
        self.shift = shift
        self.info = BackendInfo(name="vllm", model="drifting-double", digest="sha256:" + "0" * 64)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        return [np.roll(self._plain(r), 1) * self.shift + self._plain(r) * (1 - self.shift) for r in requests]


def test_an_engine_that_is_not_exact_stops_the_validation_before_any_evaluator_runs(example_requests):
    """A vLLM suite is checked first; an engine off the plain path by more than the tolerance
    is the flow's one-line reason not to evaluate (an engine cannot be turned off by itself)."""
    from vlgate.flows.model_check import engine_problem

    exact = check_transformers(DriftingBackend(drift=0.0), example_requests, engine=OtherEngine(0.0))
    assert engine_problem(exact) is None
    off = check_transformers(DriftingBackend(drift=0.0), example_requests, engine=OtherEngine(0.02))
    engine = {path.path: path for path in off.paths}[OTHER_ENGINE]
    expected = max(float(np.abs(np.roll(DriftingBackend._plain(r), 1) - DriftingBackend._plain(r)).max()) * 0.02 for r in example_requests.choices)
    assert engine.largest_difference == pytest.approx(expected) and expected > 1e-3
    problem = engine_problem(off)
    assert problem == (
        f"the suite's engine does not score it as the transformers plain path does (largest difference {expected:.2g} over {len(example_requests.choices)} requests, "
        "tolerance 1e-05): its scores would not be this model's; score it with backend: transformers"
    )
    # the transformers-only check has no engine to stop
    assert engine_problem(check_transformers(DriftingBackend(drift=0.03), example_requests)) is None
