"""Models described by their digest and loaded on first use (evaluators/backends/deferred.py):
the digest is the loaded model's, the outputs are an eager load's, a checkpoint the load
policy refuses is refused when named, and files changed between naming and loading fail
the load rather than give records under the wrong digest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.backends.base import BackendError, ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.deferred import DeferredBackend, DeferredEncoder
from vlgate.evaluators.backends.loading import model_digest
from vlgate.evaluators.backends.transformers_backend import TransformersBackend

REPO = Path(__file__).parents[1]
CHECKPOINTS = REPO / "evaluators" / "world" / "shipped" / "checkpoints"
VLM = CHECKPOINTS / "vlm-steps10000"


def test_a_named_checkpoint_has_the_loaded_digest_and_is_loaded_only_when_used_giving_an_eager_load_s_outputs():
    from PIL import Image

    named = backends.load("transformers", str(VLM), backends.BackendOptions())
    assert isinstance(named, DeferredBackend) and not named.loaded
    assert (named.info.name, named.info.digest, named.info.device) == ("transformers", model_digest(VLM), "not loaded")
    eager = TransformersBackend.load(VLM)
    image = Image.new("RGB", (32, 32), (200, 30, 30))
    try:
        choices = [ChoiceRequest((image,), "What colour is the square?", ("red", "blue"))]
        asked = [GenerateRequest((image,), "Describe the picture.", 6)]
        assert np.array_equal(named.choice_probs(choices)[0], eager.choice_probs(choices)[0]) and named.generate(asked) == eager.generate(asked)
        assert named.loaded and named.info == eager.info  # the loaded model's own info from now on
        assert named.plain_copy().batch_size == 1  # anything else the model has
    finally:
        named.close()
        eager.close()
    with pytest.raises(BackendError, match="closed"):
        named.generate(asked)


def test_a_helper_encoder_is_named_the_same_way():
    encoder = backends.IMAGE_ENCODERS["clip"].open(str(CHECKPOINTS / "clip"), backends.BackendOptions())
    assert isinstance(encoder, DeferredEncoder) and not encoder.loaded and encoder.info.digest == model_digest(CHECKPOINTS / "clip")
    encoder.close()  # never loaded: nothing to release


def test_a_checkpoint_the_load_policy_refuses_is_refused_when_named(tmp_path):
    checkpoint = tmp_path / "remote-code"
    shutil.copytree(VLM, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModel": "modeling_x.X"}}))
    with pytest.raises(BackendError, match="needs remote code"):
        backends.load("transformers", str(checkpoint), backends.BackendOptions())


def test_files_changed_between_naming_and_loading_fail_the_load_naming_both_digests_and_it_is_not_tried_again(tmp_path):
    checkpoint = tmp_path / "changing"
    shutil.copytree(VLM, checkpoint)
    named = backends.load("transformers", str(checkpoint), backends.BackendOptions())
    before = named.info.digest
    (checkpoint / "generation_config.json").write_text(json.dumps(json.loads((checkpoint / "generation_config.json").read_text()) | {"max_length": 77}))
    with pytest.raises(BackendError, match=f"its files changed between describing and loading it \\(digest {before}, then sha256:") as raised:
        named.generate([GenerateRequest((), "hello", 2)])
    assert named.load_error is raised.value and not named.loaded
    with pytest.raises(BackendError) as again:
        named.generate([GenerateRequest((), "hello", 2)])
    assert again.value is raised.value
