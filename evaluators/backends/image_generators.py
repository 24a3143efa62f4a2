"""Text-to-image backends: GenCeption's Gen.

- :class:`DiffusersGenerator` — any diffusers text-to-image pipeline folder
  (``DiffusionPipeline.from_pretrained``), seeded per prompt.

Other generators register themselves as a kind (``kinds.py``): the synthetic world's scene
renderer (``evaluators/scenes/generator.py``) is one, and this module knows nothing of it.

Generators take the finished text-to-image prompt; the runner builds it (GenCeption's
"Generate an image that fully and precisely reflects this description: <Q_t>").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from vlgate.evaluators.backends.base import MODEL_LOAD_LOCK, BackendError, BackendInfo, ImageGenerator, default_device
from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: Libraries whose classes a pipeline's model_index.json may name; besides these, diffusers'
#: own pipeline modules (see :func:`is_diffusers_pipeline_module`); anything else is code
#: shipped with the checkpoint or a module diffusers was never meant to import.
PIPELINE_LIBRARIES = ("diffusers", "transformers", None)


def is_diffusers_pipeline_module(library: object) -> bool:
    """Whether ``library`` names a module inside ``diffusers.pipelines``, which is how
    diffusers itself resolves such a name (Stable Diffusion 1.x/2.x name their safety checker
    ``["stable_diffusion", "StableDiffusionSafetyChecker"]``): diffusers' code, not the checkpoint's."""
    if not isinstance(library, str) or not library.isidentifier():
        return False
    from diffusers import pipelines

    module = getattr(pipelines, library, None)
    return getattr(module, "__name__", "").startswith("diffusers.pipelines.")


def check_pipeline_index(path: Path, policy: LoadPolicy = LoadPolicy()) -> None:
    """Refuse a diffusers pipeline that would import code shipped with it: a component from
    a library other than diffusers/transformers (or one of diffusers' own pipeline
    modules), or a custom pipeline class (a ``.py`` file in the folder). :func:`check_checkpoint` covers the components' own configs."""
    index_path = path / "model_index.json"
    if not index_path.is_file():
        raise BackendError(f"checkpoint {path}: no model_index.json; not a diffusers pipeline folder")
    if policy.trust_remote_code:
        return
    try:
        index = json.loads(index_path.read_text())
    except ValueError as error:
        raise BackendError(f"checkpoint {path}: model_index.json is not valid JSON ({error})") from error
    foreign = sorted(
        name for name, value in index.items() if isinstance(value, list) and value and value[0] not in PIPELINE_LIBRARIES and not is_diffusers_pipeline_module(value[0])
    )
    code = sorted(str(p.relative_to(path)) for p in path.rglob("*.py"))
    if foreign or code:
        raise BackendError(
            f"checkpoint {path}: the pipeline loads code shipped with it (components {foreign}, files {code}); "
            "vlgate does not run a checkpoint's code unless the load policy sets trust_remote_code: true"
        )


def truncate_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
    """The prompt cut to what the text encoder reads (``model_max_length`` tokens with the
    special ones), so that the cut is ours and recorded rather than a pipeline warning."""
    limit = tokenizer.model_max_length - tokenizer.num_special_tokens_to_add()
    ids = tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"]  # long prompts are expected here: they are cut below
    if len(ids) <= limit:
        return prompt
    return str(tokenizer.decode(ids[:limit], skip_special_tokens=True))


#: The ``__call__`` argument each of a pipeline's tokenizers reads its prompt from: SDXL, SD3
#: and Flux take one prompt per text encoder, each defaulting to ``prompt``.
PROMPT_ARGUMENTS = {"tokenizer": "prompt", "tokenizer_2": "prompt_2", "tokenizer_3": "prompt_3"}


def prompts_per_encoder(pipeline: Any, prompts: Sequence[str]) -> dict[str, list[str]]:
    """Each text encoder's prompts, cut to what that encoder reads. One cut for all would be
    CLIP's 77 tokens, and SD3's and Flux's T5, which reads hundreds and conditions the image
    most, would lose the rest of a long description."""
    import inspect

    accepted = inspect.signature(pipeline.__call__).parameters
    arguments: dict[str, list[str]] = {}
    for attribute, argument in PROMPT_ARGUMENTS.items():
        if argument == "prompt" or argument in accepted:
            tokenizer = getattr(pipeline, attribute, None)
            arguments[argument] = [truncate_prompt(tokenizer, p) for p in prompts] if tokenizer is not None else list(prompts)
    return arguments


@dataclass(frozen=True)
class DiffusionSettings:
    """How the pipeline draws: sampler steps, classifier-free guidance (≤ 1 turns it off,
    which halves the UNet calls), the image size (None: the pipeline's own) and the prompts
    drawn a call. The knobs a caller tunes for speed or quality, apart from which pipeline
    is loaded and where."""

    num_inference_steps: int = 25  # half the pipelines' own default (50): GenCeption needs a recognisable drawing, not a polished one
    guidance_scale: float = 1.0  # off (≤ 1): one UNet call a step instead of two
    height: int | None = None
    width: int | None = None
    batch_size: int = 8  # bounds the activations one call holds, whatever the items


class DiffusersGenerator(ImageGenerator):
    """A loaded diffusers pipeline. Use :meth:`load`."""

    def __init__(
        self, pipeline: Any, info: BackendInfo, num_inference_steps: int, guidance_scale: float, height: int | None, width: int | None, batch_size: int
    ):
        self.pipeline, self.info = pipeline, info
        self.num_inference_steps, self.guidance_scale = num_inference_steps, guidance_scale
        self.height, self.width, self.batch_size = height, width, batch_size

    @classmethod
    def load(
        cls,
        reference: str | Path,
        policy: LoadPolicy = LoadPolicy(),
        device: str | None = None,
        settings: DiffusionSettings = DiffusionSettings(),
        cache_dir: Path | None = None,
    ) -> DiffusersGenerator:
        """The pipeline at ``reference`` (a folder, an MLflow URI or a Hub id), drawing as
        ``settings`` say (:class:`DiffusionSettings`)."""
        import torch
        from diffusers import DiffusionPipeline

        path = resolve_model(reference, cache_dir, policy)
        check_checkpoint(path, policy)
        check_pipeline_index(path, policy)
        device = device or default_device()
        if device.startswith("cuda"):
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            dtype = torch.float32  # half precision on CPU is slow or unsupported
        try:
            with MODEL_LOAD_LOCK:
                pipeline = DiffusionPipeline.from_pretrained(path, dtype=dtype, use_safetensors=not policy.allow_pickle, trust_remote_code=policy.trust_remote_code).to(device)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise BackendError(f"model {reference}: diffusers could not load it from {path}: {error}") from error
        pipeline.set_progress_bar_config(disable=True)
        info = BackendInfo(
            name="diffusers",
            model=str(reference),
            digest=model_digest(path),
            device=device,
            extra={
                "pipeline": type(pipeline).__name__,
                "dtype": str(dtype).removeprefix("torch."),
                "num_inference_steps": str(settings.num_inference_steps),
                "guidance_scale": str(settings.guidance_scale),
                "path": str(path),
            },
        )
        return cls(pipeline, info, settings.num_inference_steps, settings.guidance_scale, settings.height, settings.width, settings.batch_size)

    def generate_images(self, prompts: Sequence[str], seed: int = 0) -> list[Image.Image]:
        """One image per prompt. Each prompt gets its own generator seeded with ``seed`` (on
        the CPU, so the starting noise is the same on every device): an image depends on its
        prompt and the seed, not on the batch it ran in."""
        import torch

        images: list[Image.Image] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            with torch.no_grad():
                result = self.pipeline(
                    **prompts_per_encoder(self.pipeline, chunk),
                    num_inference_steps=self.num_inference_steps,
                    guidance_scale=self.guidance_scale,
                    height=self.height,
                    width=self.width,
                    generator=[torch.Generator("cpu").manual_seed(seed) for _ in chunk],
                    output_type="pil",
                )
            images += [image.convert("RGB") for image in result.images]
        return images

    def close(self) -> None:
        import torch

        self.pipeline = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
