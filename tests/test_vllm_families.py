"""The family matrix on vLLM's CPU build: each family's tiny checkpoint, as transformers saves
it, scored by vlgate's vLLM backend must give the model card's numbers (one plain
transformers forward of ``processor.apply_chat_template(tokenize=True)``) within
:data:`TOLERANCE`, one and two images, lcm-mc and lcm-nb as the runners send them, and
greedy text equal to ``model.generate``. A family vLLM cannot run here is declared in its
:class:`OnVllm` with the reason, and the test shows that reason, so the vLLM column of docs/model-families.md
(rendered from those declarations by ``tests/test_model_families.py``) goes stale loudly.

These run in ``.venv-vllm`` (``make test``); elsewhere they skip, unless
``VLGATE_REQUIRE_VLLM=1`` (CI) makes that a failure. One engine per family, shared by its
tests (the module-scoped fixture holds one at a time): an engine starts in 25-50 s here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from model_families import all_families
from model_families.common import Family, model_card_generate, model_card_option_probs, tiny_images
from vllm_required import require_vllm, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

vllm_is_installed = require_vllm()

import torch  # noqa: E402

from vlgate.evaluators.backends.base import BackendError, ChoiceRequest, GenerateRequest  # noqa: E402
from vlgate.evaluators.backends.loading import model_digest  # noqa: E402
from vlgate.evaluators.backends.vllm_offline import VllmBackend  # noqa: E402
from vlgate.evaluators.backends.weight_layout import vllm_layout  # noqa: E402
from vlgate.evaluators.loaders.items import McItem, NbUnit  # noqa: E402
from vlgate.evaluators.running.model_check import TOLERANCE  # noqa: E402
from vlgate.evaluators.vl_lcm.runner import lcm_mc_requests, lcm_nb_requests  # noqa: E402

FAMILIES = {family.name: family for family in all_families()}
RUNS = sorted(name for name, family in FAMILIES.items() if family.vllm.outcome in ("exact", "differs"))
DOES_NOT_RUN = sorted(name for name, family in FAMILIES.items() if family.vllm.outcome in ("refused", "fails"))
#: The engine settings of the world's vLLM suite (float32 for exact comparisons, a tenth of
#: the machine's memory for the KV cache, two images a prompt for NaturalBench).
ENGINE: dict[str, Any] = {"dtype": "float32", "gpu_memory_utilization": 0.1, "limit_mm_per_prompt": {"image": 2}}
#: Families also checked through ``vllm serve`` and the OpenAI-compatible backend: the two
#: teams serve most, one of them needing its weight names mapped.
SERVED = ("qwen2.5-vl", "llava-onevision")


def mc_item(n: int) -> McItem:
    return McItem(id=f"mc-{n}", image=Path("unused.png"), question=f"What colour is shape {n} in the middle?", options=("red", "green", "blue", "yellow"), answer=n % 4)


def nb_unit(n: int, question_type: str = "yes_no") -> NbUnit:
    options = ("A", "B") if question_type == "multiple_choice" else None
    return NbUnit(id=f"nb-{n}", images=(Path("a.png"), Path("b.png")), texts=(f"Is there a red circle {n}?", "Is the square blue?"), question_type=question_type, options=options)


def one_image_requests() -> list[ChoiceRequest]:
    images = tiny_images(2)
    return lcm_mc_requests(mc_item(0), images[0]) + lcm_mc_requests(mc_item(1), images[1])


def two_image_requests() -> list[ChoiceRequest]:
    images = tiny_images(4)
    return lcm_nb_requests(nb_unit(0), (images[0], images[1])) + lcm_nb_requests(nb_unit(1, "multiple_choice"), (images[2], images[3]))


def generate_requests() -> list[GenerateRequest]:
    images = tiny_images(2)
    return [GenerateRequest((images[0],), "Describe the image.", max_new_tokens=6), GenerateRequest((images[1],), "How many shapes are there?", max_new_tokens=6)]


class Loaded:
    """A family's checkpoint, its model-card reference (transformers, float32) and its vLLM engine."""

    def __init__(self, family: Family, path: Path, engine: VllmBackend):
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.family, self.path, self.engine = family, path, engine
        self.model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
        self.processor = AutoProcessor.from_pretrained(path)

    def model_card(self, requests: list[ChoiceRequest]) -> list[np.ndarray]:
        return [model_card_option_probs(self.model, self.processor, r.prompt, r.images, r.options) for r in requests]


def build(family: Family, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return family.build(tmp_path_factory.mktemp(family.name))


@pytest.fixture(scope="module", params=RUNS)
def loaded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    family = FAMILIES[request.param]
    path = build(family, tmp_path_factory)
    engine = VllmBackend.load(path, cache_dir=tmp_path_factory.mktemp("model-cache"), **{**ENGINE, **family.vllm.engine})
    try:
        yield Loaded(family, path, engine)
    finally:
        engine.close()


def largest_difference(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    assert len(got) == len(expected) > 0
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and float(g.sum()) == pytest.approx(1.0)
    return max(float(np.abs(g - e).max()) for g, e in zip(got, expected, strict=True))


def test_one_image_requests_score_as_the_model_card_forward(loaded: Loaded):
    requests = one_image_requests()
    difference = largest_difference(loaded.engine.choice_probs(requests), loaded.model_card(requests))
    if loaded.family.vllm.outcome == "exact":
        assert difference <= TOLERANCE, f"{loaded.family.name}: {difference:.2g}"
    else:
        assert difference > 1e-3, f"{loaded.family.name} is declared to differ on vLLM, but agrees to {difference:.2g}: update its OnVllm"


def test_two_image_requests_score_as_the_model_card_forward(loaded: Loaded):
    if loaded.family.max_images < 2:
        pytest.skip(f"{loaded.family.name} takes one image a request")
    requests = two_image_requests()
    difference = largest_difference(loaded.engine.choice_probs(requests), loaded.model_card(requests))
    if loaded.family.vllm.outcome == "exact" and loaded.family.vllm.two_images == "exact":
        assert difference <= TOLERANCE, f"{loaded.family.name}: {difference:.2g}"
    else:
        assert difference > 1e-3, f"{loaded.family.name} is declared to differ on two images, but agrees to {difference:.2g}: update its OnVllm"


def test_greedy_generation_equals_model_generate(loaded: Loaded):
    requests = generate_requests()
    expected = [model_card_generate(loaded.model, loaded.processor, r.prompt, r.images, r.max_new_tokens) for r in requests]
    assert loaded.engine.generate(requests) == expected


def test_the_engine_serves_the_checkpoint_in_the_layout_it_reads(loaded: Loaded):
    """transformers 5 saves CLIP and SigLIP towers without their ``vision_model`` level: the
    engine loaded a renamed copy of exactly those families, and the records keep the digest of
    the checkpoint as saved."""
    from vlgate.evaluators.backends.weight_layout import planned_renames

    served = Path(loaded.engine.info.extra["served"])
    renamed = planned_renames(loaded.path)
    assert (served != loaded.path) == bool(renamed)
    assert loaded.engine.info.digest == model_digest(loaded.path)
    vision = json.loads((loaded.path / "config.json").read_text())["vision_config"]["model_type"]
    assert bool(renamed) == (vision in ("clip_vision_model", "siglip_vision_model")), vision


# -- what the declared differences are ------------------------------------------------------------


def test_aya_vision_on_vllm_is_transformers_with_the_cohere_logit_scale(tmp_path_factory):
    """The declared reason, shown: vLLM's probabilities are the model card's logits times the
    text config's ``logit_scale`` (which transformers' AyaVision head leaves out), to 1e-5."""
    family = FAMILIES["aya-vision"]
    assert family.vllm.outcome == "differs" and "logit_scale" in family.vllm.reason
    path = build(family, tmp_path_factory)
    engine = VllmBackend.load(path, cache_dir=tmp_path_factory.mktemp("model-cache"), **ENGINE)
    try:
        from model_families.common import model_card_inputs
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from vlgate.evaluators.backends.options import option_token_ids

        model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
        processor = AutoProcessor.from_pretrained(path)
        scale = model.config.text_config.logit_scale
        assert scale != 1
        requests = one_image_requests()
        expected = []
        for request in requests:
            with torch.no_grad():
                logits = model(**model_card_inputs(processor, request.prompt, request.images)).logits[0, -1].float()
            probabilities = torch.softmax(logits * scale, dim=-1)
            masses = np.array([float(probabilities[ids].sum()) for ids in option_token_ids(processor.tokenizer, request.options)])
            expected.append(masses / masses.sum())
        assert largest_difference(engine.choice_probs(requests), expected) <= TOLERANCE
    finally:
        engine.close()


def test_llava_onevision_gives_a_multi_image_sample_one_view_per_image_in_transformers(tmp_path_factory):
    """The declared two-image reason, shown on the processor: one image alone is tiled (anyres,
    several views), each image of a two-image sample gets one base view; vLLM tiles both."""
    from transformers import AutoProcessor

    family = FAMILIES["llava-onevision"]
    assert family.vllm.two_images == "differs" and "anyres" in family.vllm.reason
    processor = AutoProcessor.from_pretrained(build(family, tmp_path_factory))
    images = tiny_images(2, size=80)
    alone = processor.image_processor(images=[[images[0]]], return_tensors="pt")
    together = processor.image_processor(images=[images], return_tensors="pt")
    assert alone["pixel_values"].shape[1] > 1  # base view plus tiles
    assert together["pixel_values"].shape[1] == 1  # one view each


@pytest.mark.parametrize("family_name", DOES_NOT_RUN)
def test_a_family_vllm_cannot_run_here_says_why(family_name, tmp_path_factory, capfd):
    """Each family declared ``refused`` or ``fails`` does so, for the declared reason: a
    refusal is one line naming the model before anything is scored; a failure of vLLM itself
    shows the reason in the engine's own log."""
    family = FAMILIES[family_name]
    path = build(family, tmp_path_factory)
    engine = None
    with pytest.raises(BackendError) as raised:
        engine = VllmBackend.load(path, cache_dir=tmp_path_factory.mktemp("model-cache"), **{**ENGINE, **family.vllm.engine})
        try:
            engine.choice_probs(one_image_requests()[:1])
        finally:
            engine.close()
    message = str(raised.value)
    assert "\n" not in message and message.startswith(("model ", "vLLM (")) and str(path) in message
    if family.vllm.outcome == "refused":
        assert engine is None, "refused before any request"
        assert re.search(family.vllm.evidence, message), message
    else:
        logged = capfd.readouterr()  # vLLM's engine processes log to both
        assert re.search(family.vllm.evidence, message + logged.out + logged.err), message


# -- vllm serve and the OpenAI-compatible backend ---------------------------------------------------


@pytest.fixture(scope="module", params=SERVED)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Family, Path]]:
    """``vllm serve`` of the family's checkpoint in the layout vLLM reads (the folder ``vlgate
    vllm-layout`` prints), and the OpenAI-compatible backend talking to it."""
    from vlgate.evaluators.backends.openai_http import OpenAIHttpBackend

    family = FAMILIES[request.param]
    path = build(family, tmp_path_factory)
    folder = vllm_layout(path, model_digest(path), tmp_path_factory.mktemp("model-cache"))
    arguments = [
        "--model", str(folder), "--served-model-name", family.name, "--dtype", "float32", "--gpu-memory-utilization", "0.1",
        # the whole vocabulary's logprobs: a random model's options are rarely in its top 20
        "--limit-mm-per-prompt", json.dumps({"image": 2}), "--max-logprobs", "-1",
    ]
    with vllm_server(arguments, tmp_path_factory.mktemp("vllm-serve") / "serve.log") as base_url:
        from transformers import AutoTokenizer

        vocabulary = len(AutoTokenizer.from_pretrained(path))
        backend = OpenAIHttpBackend(base_url, family.name, top_logprobs=vocabulary)
        try:
            yield backend, family, path
        finally:
            backend.close()


def test_vllm_serve_scores_as_the_model_card_forward(served):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    backend, family, path = served
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(path)
    requests = one_image_requests() + (two_image_requests() if family.vllm.two_images == "exact" else [])
    expected = [model_card_option_probs(model, processor, r.prompt, r.images, r.options) for r in requests]
    assert largest_difference(backend.choice_probs(requests), expected) <= TOLERANCE
    generations = generate_requests()
    assert backend.generate(generations) == [model_card_generate(model, processor, r.prompt, r.images, r.max_new_tokens) for r in generations]
