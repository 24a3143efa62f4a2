"""Whether vlgate's fast paths give the plain forward pass's numbers on one model.

vlgate scores a model faster than one request at a time: requests are batched
(left-padded), VL-LCM's probes share one cached prefix, and a suite may run on vLLM. Each
is an optimisation that is only allowed where it is exact on *this* checkpoint. This
module runs a few of the suite's own requests both ways, the fast path and the **plain
path** (each request alone, the whole prompt, one forward pass or ``model.generate``),
and says per path how far apart they are and whether vlgate uses the path on this model.
``vlgate check-model`` prints it; the validation flow records it once per model digest.

Tolerances: probabilities within :data:`TOLERANCE` of the plain path in float32 (fp32
noise between two orders of the same sums is 1e-7 to 1e-6); generated texts identical.
The check runs the model in float32 whatever it is served in, so that a structural fault
(a wrong mask, a missing position, a second BOS) is not lost in half precision's noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

import numpy as np
from pydantic import JsonValue

from vlgate.evaluators import images, registry
from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest, VisionLanguageBackend
from vlgate.evaluators.genception import prompts as genception_prompts
from vlgate.evaluators.lmms.tasks import LmmsEvalSettings
from vlgate.evaluators.loaders.dataset import load_dataset
from vlgate.evaluators.loaders.items import open_image
from vlgate.evaluators.vl_lcm.runner import lcm_mc_images, lcm_mc_requests, lcm_nb_requests

if TYPE_CHECKING:
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend
    from vlgate.evaluators.running.suite import Suite

Request = TypeVar("Request")
Answer = TypeVar("Answer")

#: The largest difference from the plain path's probabilities that counts as exact (fp32).
TOLERANCE = 1e-5
SHARED_PREFIX = "shared prefix"
BATCHED_SCORING = "batched scoring"
BATCHED_GENERATION = "batched generation"
OTHER_ENGINE = "vLLM engine"
#: Where the check's items come from when no suite is given: the shipped examples.
EXAMPLES_SUITE = Path(__file__).resolve().parents[1] / "examples" / "data" / "suite.yaml"


class PathCheckJson(TypedDict):
    """A :class:`PathCheck` as JSON."""

    path: str
    used: bool
    exact: bool | None
    largest_difference: float | None
    tolerance: float
    compared: int
    detail: str


class ModelCheckJson(TypedDict):
    """A :class:`ModelCheck` as JSON (``model_check.json``, ``vlgate check-model --json``)."""

    model: str
    digest: str
    backend: str
    trusted: bool
    paths: list[PathCheckJson]


@dataclass(frozen=True)
class PathCheck:
    """One fast path against the plain path: ``used`` says whether vlgate takes it on this
    model; ``exact`` is None when it could not be compared (``detail`` says why)."""

    path: str
    used: bool
    exact: bool | None
    largest_difference: float | None
    tolerance: float
    compared: int
    detail: str = ""

    @property
    def trusted(self) -> bool:
        """A path vlgate uses must be exact; one it does not use cannot move a number."""
        return not self.used or self.exact is True

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "path": self.path,
            "used": self.used,
            "exact": self.exact,
            "largest_difference": self.largest_difference,
            "tolerance": self.tolerance,
            "compared": self.compared,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class ModelCheck:
    """Every path checked on one model (identified by its weights' digest)."""

    model: str
    digest: str
    backend: str
    paths: tuple[PathCheck, ...]

    @property
    def trusted(self) -> bool:
        return all(path.trusted for path in self.paths)

    def untrusted(self) -> list[PathCheck]:
        return [path for path in self.paths if not path.trusted]

    def to_dict(self) -> dict[str, JsonValue]:
        """As JSON, in the shape of :class:`ModelCheckJson` (what ``from_dict`` reads)."""
        return {"model": self.model, "digest": self.digest, "backend": self.backend, "trusted": self.trusted, "paths": [path.to_dict() for path in self.paths]}

    @classmethod
    def from_dict(cls, data: ModelCheckJson) -> ModelCheck:
        return cls(data["model"], data["digest"], data["backend"], tuple(PathCheck(**path) for path in data["paths"]))


@dataclass(frozen=True)
class CheckRequests:
    """What the check sends: choice requests as the runners build them, and generations."""

    choices: tuple[ChoiceRequest, ...]
    generations: tuple[GenerateRequest, ...]


def suite_requests(suite: Suite, items: int = 4, generate_tokens: int = 8) -> CheckRequests:
    """Up to ``items`` items of the suite's lcm-mc and lcm-nb data, as their runners ask
    them under the suite's protocols, one description request per lcm-mc image, and the
    first ``items`` docs of each lmms-eval task as its runner asks them (at most
    ``generate_tokens`` new tokens)."""
    choices: list[ChoiceRequest] = []
    generations: list[GenerateRequest] = []
    if "lcm-mc" in suite.evaluators:
        spec = suite.evaluators["lcm-mc"]
        asked = registry.get("lcm-mc").protocol(spec.protocol).prompts
        for item in load_dataset("lcm-mc", spec.data).items[:items]:
            images = lcm_mc_images(item, asked)
            choices += lcm_mc_requests(item, images, asked)
            generations.append(GenerateRequest(images, genception_prompts.GENCEPTION_DESCRIBE, generate_tokens))
    if "lcm-nb" in suite.evaluators:
        spec = suite.evaluators["lcm-nb"]
        asked = registry.get("lcm-nb").protocol(spec.protocol).prompts
        for unit in load_dataset("lcm-nb", spec.data).items[:items]:
            pair = (open_image(unit.images[0], unit.id, "images[0]"), open_image(unit.images[1], unit.id, "images[1]"))
            choices += lcm_nb_requests(unit, pair, asked)
    for spec in suite.evaluators.values():
        if isinstance(spec, LmmsEvalSettings):  # an lmms-eval task's first docs, as its runner asks them, the answers cut short
            from vlgate.evaluators.lmms.runner import load_docs, request_of
            from vlgate.evaluators.lmms.tasks import load_task

            loaded = load_task(spec)
            for doc in load_docs(spec, first=items)[0]:
                asked = request_of(loaded, doc)
                generations.append(GenerateRequest(asked.images, asked.prompt, min(asked.max_new_tokens, generate_tokens), asked.turn))
    if not choices and not generations:
        raise ValueError(f"suite {suite.name}: no lcm-mc, lcm-nb or lmms-eval data to check the model on")
    return CheckRequests(tuple(choices), tuple(generations))


def largest_difference(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> float:
    return max((float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(got, expected, strict=True)), default=0.0)


def one_at_a_time(score: Callable[[list[Request]], Sequence[Answer]], requests: Sequence[Request]) -> list[Answer]:
    return [score([request])[0] for request in requests]


def check_transformers(backend: TransformersBackend, requests: CheckRequests, engine: VisionLanguageBackend | None = None) -> ModelCheck:
    """Every fast path of a loaded :class:`TransformersBackend` (and of ``engine``, another
    backend of the same model, when given) against its plain path."""
    plain = backend.plain_copy()
    batched = backend.plain_copy(batch_size=backend.batch_size)
    if not requests.choices:  # a suite of lmms-eval tasks only generates
        return ModelCheck(backend.info.model, backend.info.digest, backend.info.name, tuple(_generation_paths(backend, plain, batched, requests, engine)))
    reference = one_at_a_time(plain.choice_probs, requests.choices)
    paths = []

    difference = largest_difference(batched.choice_probs(list(requests.choices)), reference)
    paths.append(PathCheck(BATCHED_SCORING, backend.batch_size > 1, difference <= TOLERANCE, difference, TOLERANCE, len(reference), f"batches of up to {backend.batch_size}, left-padded"))

    sharing = backend.fresh_copy()
    difference = largest_difference(sharing.choice_probs(list(requests.choices)), reference)
    state = sharing.prefix_sharing
    if state.verified is True:
        detail = f"checked against whole prompts on its first groups (largest difference {state.largest_difference:.2g}); used"
    elif state.verified is False:
        detail = f"not used: {state.reason}"
    else:
        detail = "no request group shares a prefix; not used"
    paths.append(PathCheck(SHARED_PREFIX, state.verified is True, difference <= TOLERANCE, difference, TOLERANCE, len(reference), detail))

    if requests.generations:
        alone = one_at_a_time(plain.generate, requests.generations)
        together = batched.generate(list(requests.generations))
        differing = sum(a != b for a, b in zip(alone, together, strict=True))
        paths.append(
            PathCheck(BATCHED_GENERATION, backend.batch_size > 1, differing == 0, float(differing), 0.0, len(alone), f"{differing} of {len(alone)} greedy texts differ from one-at-a-time generation")
        )

    if engine is not None:
        difference = largest_difference(engine.choice_probs(list(requests.choices)), reference)
        paths.append(PathCheck(OTHER_ENGINE, True, difference <= TOLERANCE, difference, TOLERANCE, len(reference), f"{engine.info.name} against the transformers plain path"))
    else:
        paths.append(PathCheck(OTHER_ENGINE, False, None, None, TOLERANCE, 0, "the suite scores on transformers"))
    return ModelCheck(backend.info.model, backend.info.digest, backend.info.name, tuple(paths))


def _generation_paths(backend: TransformersBackend, plain: TransformersBackend, batched: TransformersBackend, requests: CheckRequests, engine: VisionLanguageBackend | None) -> list[PathCheck]:
    """The paths of a suite that only generates: batched generation, and the other engine's
    greedy texts, each against one-at-a-time generation on the plain path."""
    alone = one_at_a_time(plain.generate, requests.generations)
    paths = [PathCheck(path, False, None, None, TOLERANCE, 0, "the suite asks no choice question") for path in (BATCHED_SCORING, SHARED_PREFIX)]
    together = batched.generate(list(requests.generations))
    differing = sum(a != b for a, b in zip(alone, together, strict=True))
    paths.append(PathCheck(BATCHED_GENERATION, backend.batch_size > 1, differing == 0, float(differing), 0.0, len(alone), f"{differing} of {len(alone)} greedy texts differ from one-at-a-time generation"))
    if engine is None:
        return [*paths, PathCheck(OTHER_ENGINE, False, None, None, 0.0, 0, "the suite generates on transformers")]
    differing = sum(a != b for a, b in zip(engine.generate(list(requests.generations)), alone, strict=True))
    return [*paths, PathCheck(OTHER_ENGINE, True, differing == 0, float(differing), 0.0, len(alone), f"{differing} of {len(alone)} greedy texts of {engine.info.name} differ from the transformers plain path")]


def check_model(reference: str, suite: Suite, items: int = 4, backend: str = "transformers", device: str | None = None, cache_dir: Path | None = None) -> ModelCheck:
    """Load ``reference`` as the suite would (its load policy and batch size) but in
    float32, and check every fast path on ``items`` of the suite's lcm-mc and lcm-nb items;
    ``backend="vllm"`` also loads the model in vLLM (float32, the suite's engine settings)
    and compares it with the transformers plain path."""
    import torch

    from vlgate.evaluators.backends import kinds as backends
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend
    from vlgate.evaluators.running.suite import transformers_batch_size

    with images.pixel_budget(getattr(suite, "max_image_pixels", images.DEFAULT_MAX_PIXELS)):
        requests = suite_requests(suite, items)
    loaded = TransformersBackend.load(reference, suite.policy, device=device, batch_size=transformers_batch_size(suite), cache_dir=cache_dir, dtype=torch.float32)
    engine: VisionLanguageBackend | None = None
    try:
        kind = backends.get(backend)
        if kind.other_engine:  # loaded as the suite loads it, in float32 like the reference
            engine = kind.load(reference, backends.BackendOptions(policy=suite.policy, cache_dir=cache_dir, batch_size=suite.batch_size, engine={**suite.vllm, "dtype": "float32"}))
        return check_transformers(loaded, requests, engine)
    finally:
        loaded.close()
        if engine is not None:
            engine.close()
