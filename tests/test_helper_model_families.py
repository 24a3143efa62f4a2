"""vlgate's helper models load the way a team's would: GenCeption's generator (any diffusers
text-to-image pipeline folder), GenCeption's encoder (ViT, CLIP, SigLIP) and DeCC's LLM
agent (any causal LM family), each as a tiny random-weight checkpoint built offline from the
libraries' own config classes and saved the way a team saves one (``save_pretrained``,
safetensors), loaded through vlgate's own loaders, and judged against the library's own path:

- a generator's images equal what the pipeline itself gives when called with the same
  settings and per-prompt generator seeds (:meth:`DiffusersGenerator.generate_images`);
- an encoder's features equal a direct forward of the same model to 1e-5;
- an LLM's option probabilities equal one plain forward of the ids the model card's path
  gives (``tokenizer.apply_chat_template(messages, add_generation_prompt=True,
  tokenize=True)``, which never adds special tokens of its own) to 1e-5, and its
  ``generate`` equals greedy ``model.generate`` of those ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from model_families.common import tiny_images, tiny_tokenizer
from PIL import Image

from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.encoders import ClipImageEncoder, VitClsEncoder
from vlgate.evaluators.backends.image_generators import DiffusersGenerator, DiffusionSettings
from vlgate.evaluators.backends.options import option_token_ids
from vlgate.evaluators.backends.transformers_backend import TransformersBackend

pytestmark = pytest.mark.world

TOLERANCE = 1e-5
IMAGE_SIZE = 32
STEPS = 2

# -- tokenizers of the diffusers text encoders ---------------------------------------------

#: BPE merges of the tiny CLIP tokenizer (CLIP marks a word's end with ``</w>``).
CLIP_MERGES = [("t", "h"), ("th", "e</w>"), ("a", "n"), ("i", "n"), ("o", "n</w>"), ("e", "r</w>"), ("r", "e"), ("c", "i")]
#: The tiny CLIP vocabulary's size: 256 byte characters, alone and ending a word, the merges, then BOS and EOS.
CLIP_VOCAB_SIZE = 2 * 256 + len(CLIP_MERGES) + 2
#: Words of the tiny T5 (SentencePiece unigram) vocabulary besides its single characters.
T5_WORDS = "a the red green blue circle square triangle image an of on left right is there generate description".split()


def clip_tokenizer(folder: Path) -> Any:
    """A CLIP tokenizer loaded the released way, from a ``vocab.json`` and ``merges.txt``
    written here: every byte character, alone and ending a word, then the merges and
    CLIP's two special tokens; ``model_max_length`` 77 as released."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = alphabet + [c + "</w>" for c in alphabet] + ["".join(m) for m in CLIP_MERGES] + ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({token: index for index, token in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in CLIP_MERGES) + "\n")
    tokenizer = CLIPTokenizer.from_pretrained(folder, model_max_length=77)
    assert len(tokenizer) == CLIP_VOCAB_SIZE
    return tokenizer


def t5_tokenizer() -> Any:
    """A T5 tokenizer (unigram, ``▁`` for spaces) with T5's pad/EOS/unk ids 0/1/2 and the
    ``model_max_length`` of Flux's and SD3's released one (512)."""
    from transformers import T5Tokenizer

    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;'\"-"
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)] + [(c, -3.0) for c in letters] + [("▁" + w, -1.0) for w in T5_WORDS]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)


def clip_text_config(**overrides: Any) -> Any:
    from transformers import CLIPTextConfig

    settings: dict[str, Any] = dict(
        bos_token_id=CLIP_VOCAB_SIZE - 2,
        eos_token_id=CLIP_VOCAB_SIZE - 1,
        pad_token_id=CLIP_VOCAB_SIZE - 1,
        hidden_size=32,
        intermediate_size=37,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=CLIP_VOCAB_SIZE,
    )
    return CLIPTextConfig(**(settings | overrides))


def tiny_t5_encoder() -> Any:
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=t5_tokenizer().vocab_size, d_model=64, d_kv=8, d_ff=37, num_layers=1, num_heads=4, relative_attention_num_buckets=8))


# -- pipelines, shaped as their released families ------------------------------------------


def save_pipeline(pipeline: Any, folder: Path) -> Path:
    pipeline.save_pretrained(folder, safe_serialization=True)
    return folder


def build_sd15(folder: Path) -> Path:
    """Stable Diffusion 1.5's shape: UNet2DConditionModel, AutoencoderKL, CLIPTextModel +
    CLIPTokenizer, a PNDM scheduler, no safety checker."""
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        sample_size=IMAGE_SIZE // 2,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=8,
    )
    vae = AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4, norm_num_groups=8)
    scheduler = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", skip_prk_steps=True)
    pipeline = StableDiffusionPipeline(
        vae=vae,
        text_encoder=CLIPTextModel(clip_text_config()),
        tokenizer=clip_tokenizer(folder.parent / f"{folder.name}-tokenizer"),
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    return save_pipeline(pipeline, folder)


def build_sdxl(folder: Path) -> Path:
    """SDXL's shape: two CLIP text encoders (the second with a projection), a UNet with
    text-time added conditioning, Euler scheduler."""
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        sample_size=IMAGE_SIZE // 2,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 2),
        projection_class_embeddings_input_dim=80,  # 6 time ids x 8 + the second encoder's 32-wide pooled embedding
        cross_attention_dim=64,  # both encoders' hidden states, concatenated
        norm_num_groups=1,
    )
    vae = AutoencoderKL(block_out_channels=[32, 64], in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4, norm_num_groups=8)
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, steps_offset=1, beta_schedule="scaled_linear", timestep_spacing="leading")
    tokenizer = clip_tokenizer(folder.parent / f"{folder.name}-tokenizer")
    pipeline = StableDiffusionXLPipeline(
        vae=vae,
        text_encoder=CLIPTextModel(clip_text_config()),
        text_encoder_2=CLIPTextModelWithProjection(clip_text_config(projection_dim=32)),
        tokenizer=tokenizer,
        tokenizer_2=tokenizer,
        unet=unet,
        scheduler=scheduler,
    )
    return save_pipeline(pipeline, folder)


def build_sd3(folder: Path) -> Path:
    """Stable Diffusion 3's shape: SD3Transformer2DModel, two projected CLIP text encoders
    and a T5 encoder, flow-matching Euler scheduler, a VAE without quant convs."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection

    transformer = SD3Transformer2DModel(
        sample_size=IMAGE_SIZE // 2,
        patch_size=1,
        in_channels=4,
        num_layers=1,
        attention_head_dim=8,
        num_attention_heads=4,
        caption_projection_dim=32,
        joint_attention_dim=64,  # T5's width, and the CLIP encoders' concatenated one
        pooled_projection_dim=64,
        out_channels=4,
    )
    vae = AutoencoderKL(
        sample_size=IMAGE_SIZE,
        in_channels=3,
        out_channels=3,
        block_out_channels=(8, 8),
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=1,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    tokenizer = clip_tokenizer(folder.parent / f"{folder.name}-tokenizer")
    pipeline = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=CLIPTextModelWithProjection(clip_text_config(projection_dim=32)),
        tokenizer=tokenizer,
        text_encoder_2=CLIPTextModelWithProjection(clip_text_config(projection_dim=32)),
        tokenizer_2=tokenizer,
        text_encoder_3=tiny_t5_encoder(),
        tokenizer_3=t5_tokenizer(),
    )
    return save_pipeline(pipeline, folder)


def build_flux(folder: Path) -> Path:
    """Flux's shape: FluxTransformer2DModel, a CLIP text encoder (pooled) and a T5 encoder
    (the sequence), flow-matching Euler scheduler, a one-channel VAE packed 2x2."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel

    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2, joint_attention_dim=64, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8]
    )
    vae = AutoencoderKL(
        sample_size=IMAGE_SIZE,
        in_channels=3,
        out_channels=3,
        block_out_channels=(4,),
        layers_per_block=1,
        latent_channels=1,
        norm_num_groups=1,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    pipeline = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=CLIPTextModel(clip_text_config(projection_dim=32)),
        tokenizer=clip_tokenizer(folder.parent / f"{folder.name}-tokenizer"),
        text_encoder_2=tiny_t5_encoder(),
        tokenizer_2=t5_tokenizer(),
        transformer=transformer,
    )
    return save_pipeline(pipeline, folder)


PIPELINES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "sd-1.5": (build_sd15, "StableDiffusionPipeline"),
    "sdxl": (build_sdxl, "StableDiffusionXLPipeline"),
    "sd3": (build_sd3, "StableDiffusion3Pipeline"),
    "flux": (build_flux, "FluxPipeline"),
}

#: Descriptions within every text encoder's limit (the tiny CLIP vocabulary spends about a
#: token per letter, so 77 tokens are some 70 characters).
GENERATION_PROMPTS = ["a red circle.", "a blue square on the left.", "the green triangle is right of the red square."]
#: What GenCeption sends for a detailed description: the text-to-image instruction around
#: it, far past CLIP's 77 tokens; the two differ only after CLIP's cut.
DESCRIPTION = "Generate an image that fully and precisely reflects this description: " + " ".join(
    f"there is a {colour} {shape} on the {side}." for colour in ("red", "green", "blue") for shape in ("circle", "square", "triangle") for side in ("left", "right")
)
LONG_PROMPTS = [DESCRIPTION + " The last shape is a circle.", DESCRIPTION + " The last shape is a square."]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoint folders built once per module, by name."""
    return {}


def pipeline_folder(name: str, built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if name not in built:
        torch.manual_seed(0)
        built[name] = PIPELINES[name][0](tmp_path_factory.mktemp(name) / "pipeline")
    return built[name]


def pixels(images: list[Image.Image]) -> list[np.ndarray]:
    return [np.asarray(image, dtype=np.int16) for image in images]


@torch.no_grad()
def pipeline_images(pipeline: Any, prompts: list[str], seed: int, batch_size: int, **per_encoder: list[str]) -> list[Image.Image]:
    """The pipeline called directly, chunk by chunk, with the settings and per-prompt seeded
    CPU generators the loader uses, and the prompts as given (the pipeline cuts them itself);
    ``per_encoder`` gives other encoders' prompts (``prompt_2``, ``prompt_3``)."""
    images: list[Image.Image] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        result = pipeline(
            prompt=chunk,
            **{argument: texts[start : start + batch_size] for argument, texts in per_encoder.items()},
            num_inference_steps=STEPS,
            guidance_scale=1.0,
            height=IMAGE_SIZE,
            width=IMAGE_SIZE,
            generator=[torch.Generator("cpu").manual_seed(seed) for _ in chunk],
            output_type="pil",
        )
        images += [image.convert("RGB") for image in result.images]
    return images


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_diffusers_pipeline_folder_generates_what_the_pipeline_itself_does(name, built, tmp_path_factory):
    from diffusers import DiffusionPipeline

    folder = pipeline_folder(name, built, tmp_path_factory)
    generator = DiffusersGenerator.load(folder, device="cpu", settings=DiffusionSettings(num_inference_steps=STEPS, guidance_scale=1.0, height=IMAGE_SIZE, width=IMAGE_SIZE, batch_size=2))
    assert generator.info.extra["pipeline"] == PIPELINES[name][1]
    assert generator.info.extra["dtype"] == "float32"

    images = generator.generate_images(GENERATION_PROMPTS, seed=7)
    assert len(images) == len(GENERATION_PROMPTS)
    assert all(image.size == (IMAGE_SIZE, IMAGE_SIZE) and image.mode == "RGB" for image in images)
    again = generator.generate_images(GENERATION_PROMPTS, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(pixels(images), pixels(again)))
    other = generator.generate_images(GENERATION_PROMPTS, seed=8)
    assert all(not np.array_equal(a, b) for a, b in zip(pixels(images), pixels(other))), "another seed must give other images"

    direct = DiffusionPipeline.from_pretrained(folder, use_safetensors=True)
    assert type(direct).__name__ == PIPELINES[name][1]
    direct.set_progress_bar_config(disable=True)
    expected = pipeline_images(direct, GENERATION_PROMPTS, seed=7, batch_size=2)
    for index, (got, want) in enumerate(zip(pixels(images), pixels(expected), strict=True)):
        assert np.array_equal(got, want), f"{name}: prompt {index} differs from the pipeline's own image by up to {np.abs(got - want).max()} levels"
    alone = generator.generate_images(GENERATION_PROMPTS[2:], seed=7)
    assert np.abs(pixels(alone)[0] - pixels(images)[2]).max() <= 1, "an image depends on its prompt and seed, not on its batch"
    generator.close()


@pytest.mark.parametrize("name", ["flux", "sd3"])
def test_a_long_description_reaches_the_t5_encoder_whole(name, built, tmp_path_factory):
    """CLIP reads 77 tokens, T5 hundreds: the loader cuts each encoder's prompt at its own
    limit, so the T5 encoder reads what the pipeline itself gives it."""
    from diffusers import DiffusionPipeline

    from vlgate.evaluators.backends.image_generators import truncate_prompt

    folder = pipeline_folder(name, built, tmp_path_factory)
    generator = DiffusersGenerator.load(folder, device="cpu", settings=DiffusionSettings(num_inference_steps=STEPS, guidance_scale=1.0, height=IMAGE_SIZE, width=IMAGE_SIZE, batch_size=2))
    clip_cut = [truncate_prompt(generator.pipeline.tokenizer, prompt) for prompt in LONG_PROMPTS]
    assert clip_cut[0] == clip_cut[1] and len(clip_cut[0]) < len(DESCRIPTION), "the two prompts must differ only after CLIP's cut"
    images = pixels(generator.generate_images(LONG_PROMPTS, seed=7))
    assert not np.array_equal(images[0], images[1]), "T5 reads past CLIP's cut, so the two descriptions give two images"
    direct = DiffusionPipeline.from_pretrained(folder, use_safetensors=True)
    direct.set_progress_bar_config(disable=True)
    # SD3: prompt_2 feeds its second CLIP, prompt_3 its T5; Flux: prompt_2 feeds its T5
    per_encoder = {"prompt_2": clip_cut, "prompt_3": list(LONG_PROMPTS)} if name == "sd3" else {"prompt_2": list(LONG_PROMPTS)}
    expected = pixels(pipeline_images(direct, clip_cut, seed=7, batch_size=2, **per_encoder))
    for got, want in zip(images, expected, strict=True):
        assert np.array_equal(got, want), f"{name}: differs from the pipeline's own image by up to {np.abs(got - want).max()} levels"
    generator.close()


# -- image encoders -------------------------------------------------------------------------


def build_vit(folder: Path) -> tuple[Any, Path]:
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    model = ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128), add_pooling_layer=False).eval()
    processor = ViTImageProcessor(size={"height": 32, "width": 32})
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return model, folder


def build_clip(folder: Path) -> tuple[Any, Path]:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    vision = dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    config = CLIPConfig(text_config=clip_text_config().to_dict(), vision_config=vision, projection_dim=48)
    model = CLIPModel(config).eval()
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=clip_tokenizer(folder.parent / "clip-tokenizer"))
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return model, folder


def build_siglip(folder: Path) -> tuple[Any, Path]:
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    vision = dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    text = dict(vocab_size=100, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128, max_position_embeddings=16)
    model = SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval()
    processor = SiglipImageProcessor(size={"height": 32, "width": 32})
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return model, folder


def image_features(output: Any) -> torch.Tensor:
    """``get_image_features``' embeddings: a tensor (transformers 4) or the output's pooler_output (5)."""
    return getattr(output, "pooler_output", output)


ENCODERS: dict[str, tuple[Callable[[Path], tuple[Any, Path]], type, Callable[[Any, torch.Tensor], torch.Tensor], int]] = {
    "vit": (build_vit, VitClsEncoder, lambda model, pixel_values: model(pixel_values=pixel_values).last_hidden_state[:, 0], 64),
    "clip": (build_clip, ClipImageEncoder, lambda model, pixel_values: image_features(model.get_image_features(pixel_values=pixel_values)), 48),
    "siglip": (build_siglip, ClipImageEncoder, lambda model, pixel_values: image_features(model.get_image_features(pixel_values=pixel_values)), 64),
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_image_encoder_features_equal_a_direct_forward(name, tmp_path):
    from transformers import AutoImageProcessor

    build, encoder_class, direct_features, dimension = ENCODERS[name]
    torch.manual_seed(0)
    model, folder = build(tmp_path / name)
    encoder = encoder_class.load(folder, device="cpu", batch_size=2)
    images = tiny_images(5, size=40, seed=3)
    features = encoder.embed(images)
    assert features.shape == (5, dimension) and features.dtype == np.float64
    assert encoder.dimension() == dimension
    assert encoder.embed([]).shape == (0, dimension)
    processor = AutoImageProcessor.from_pretrained(folder)
    with torch.no_grad():
        expected = direct_features(model, processor(images=[image.convert("RGB") for image in images], return_tensors="pt")["pixel_values"]).numpy()
    np.testing.assert_allclose(features, expected, atol=TOLERANCE, rtol=0)
    assert not np.allclose(features[0], features[1]), "different images must give different features"


# -- DeCC's LLM agent: causal LM families ---------------------------------------------------

#: Meta-Llama-3-8B-Instruct's published template.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

#: Qwen2.5-Instruct's published template.
QWEN2_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""  # noqa: E501  (the published template, verbatim)

#: Qwen3's published template (the hybrid-thinking one).
QWEN3_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""  # noqa: E501  (the published template, verbatim)

#: gemma-2-2b-it's published template.
GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

#: gemma-3-1b-it's published template.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

#: Mistral-7B-Instruct's published template (v0.1/v0.2).
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

#: The shape every tiny LLM shares: head dim 32, grouped-query attention, two layers.
LLM_SHAPE: dict[str, Any] = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=128, num_hidden_layers=2, max_position_embeddings=512)


def save_llm(model: Any, tokenizer: Any, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def token_ids(tokenizer: Any, *names: str | None) -> dict[str, int | None]:
    return {f"{name}_token_id": tokenizer.convert_tokens_to_ids(token) if token else None for name, token in zip(("bos", "eos", "pad"), names)}


def build_llama(folder: Path) -> Path:
    """Llama 3: byte-level BPE whose tokenizer adds ``<|begin_of_text|>``, and a template that writes it too."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer(
        special_tokens=["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad="<|finetune_right_pad_id|>",
        add_bos=True,
        style="byte_level",
        chat_template=LLAMA3_TEMPLATE,
    )
    config = LlamaConfig(vocab_size=len(tokenizer), **LLM_SHAPE, **token_ids(tokenizer, "<|begin_of_text|>", "<|eot_id|>", None))
    return save_llm(LlamaForCausalLM(config), tokenizer, folder)


def build_qwen2(folder: Path) -> Path:
    """Qwen2.5: byte-level BPE, no BOS, ChatML template with its default system turn."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer(special_tokens=["<|im_start|>", "<|im_end|>"], eos="<|im_end|>", pad="<|endoftext|>", style="byte_level", chat_template=QWEN2_TEMPLATE)
    config = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=False, **LLM_SHAPE, **token_ids(tokenizer, None, "<|im_end|>", "<|endoftext|>"))
    return save_llm(Qwen2ForCausalLM(config), tokenizer, folder)


def build_qwen3(folder: Path) -> Path:
    """Qwen3: byte-level BPE, no BOS, ChatML template with thinking markers."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = tiny_tokenizer(special_tokens=["<|im_start|>", "<|im_end|>", "<think>", "</think>"], eos="<|im_end|>", pad="<|endoftext|>", style="byte_level", chat_template=QWEN3_TEMPLATE)
    config = Qwen3Config(vocab_size=len(tokenizer), tie_word_embeddings=False, **LLM_SHAPE, **token_ids(tokenizer, None, "<|im_end|>", "<|endoftext|>"))
    return save_llm(Qwen3ForCausalLM(config), tokenizer, folder)


def gemma_tokenizer(template: str) -> Any:
    return tiny_tokenizer(special_tokens=["<start_of_turn>", "<end_of_turn>"], bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>", add_bos=True, style="metaspace", chat_template=template)


def build_gemma2(folder: Path) -> Path:
    """Gemma 2: SentencePiece-style BPE whose tokenizer adds ``<bos>``, and a template that writes it too."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tokenizer = gemma_tokenizer(GEMMA2_TEMPLATE)
    config = Gemma2Config(vocab_size=len(tokenizer), sliding_window=16, **LLM_SHAPE, **token_ids(tokenizer, "<bos>", "<eos>", "<pad>"))
    return save_llm(Gemma2ForCausalLM(config), tokenizer, folder)


def build_gemma3(folder: Path) -> Path:
    """Gemma 3 text (gemma-3-1b's architecture): as Gemma 2, with the template that reads content parts."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tokenizer = gemma_tokenizer(GEMMA3_TEMPLATE)
    config = Gemma3TextConfig(vocab_size=len(tokenizer), sliding_window=16, **LLM_SHAPE, **token_ids(tokenizer, "<bos>", "<eos>", "<pad>"))
    return save_llm(Gemma3ForCausalLM(config), tokenizer, folder)


def build_mistral(folder: Path) -> Path:
    """Mistral 7B Instruct: SentencePiece-style BPE whose tokenizer adds ``<s>``, and a template that writes it too."""
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = tiny_tokenizer(special_tokens=["[INST]", "[/INST]"], bos="<s>", eos="</s>", pad="</s>", unk="<unk>", add_bos=True, style="metaspace", chat_template=MISTRAL_TEMPLATE)
    config = MistralConfig(vocab_size=len(tokenizer), sliding_window=None, **LLM_SHAPE, **token_ids(tokenizer, "<s>", "</s>", None))
    return save_llm(MistralForCausalLM(config), tokenizer, folder)


LLMS: dict[str, Callable[[Path], Path]] = {
    "llama": build_llama,
    "qwen2": build_qwen2,
    "qwen3": build_qwen3,
    "gemma2": build_gemma2,
    "gemma3": build_gemma3,
    "mistral": build_mistral,
}

#: DeCC's agent prompts: different lengths, so a batch is padded.
AGENT_PROMPTS = [
    "Is the triangle bigger than the square? Answer Yes or No.",
    "How many shapes are there?",
    "There is a red circle on the left and a blue square on the right of the picture. Is there a red circle? Answer Yes or No.",
]


def llm_cases() -> list[str]:
    return sorted(LLMS)


def llm_folder(name: str, built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if name not in built:
        torch.manual_seed(0)
        built[name] = LLMS[name](tmp_path_factory.mktemp(name) / "checkpoint")
    return built[name]


def model_card_ids(tokenizer: Any, prompt: str) -> torch.Tensor:
    """The model card's ids: the user turn, a string, through ``apply_chat_template``."""
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
    ids = encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys") else encoded
    return torch.tensor([list(ids)])


@torch.no_grad()
def model_card_probs(model: Any, tokenizer: Any, prompt: str, options: tuple[str, ...]) -> np.ndarray:
    probabilities = torch.softmax(model(input_ids=model_card_ids(tokenizer, prompt)).logits[0, -1].float(), dim=-1)
    masses = np.array([float(probabilities[ids].sum()) for ids in option_token_ids(tokenizer, options)])
    return masses / masses.sum()


@pytest.mark.parametrize("batch_size", [1, 16])
@pytest.mark.parametrize("name", llm_cases())
def test_llm_agent_scores_as_the_model_card_forward(name, batch_size, built, tmp_path_factory):
    from transformers import AutoTokenizer

    folder = llm_folder(name, built, tmp_path_factory)
    backend = TransformersBackend.load(folder, device="cpu", batch_size=batch_size)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    options = ("Yes", "No")
    got = backend.choice_probs([ChoiceRequest((), prompt, options) for prompt in AGENT_PROMPTS])
    for prompt, probs in zip(AGENT_PROMPTS, got, strict=True):
        expected = model_card_probs(backend.model, tokenizer, prompt, options)
        np.testing.assert_allclose(probs, expected, atol=TOLERANCE, rtol=0, err_msg=f"{name}: {prompt!r}")
    single = backend.choice_probs([ChoiceRequest((), AGENT_PROMPTS[1], options)])[0]
    np.testing.assert_allclose(single, model_card_probs(backend.model, tokenizer, AGENT_PROMPTS[1], options), atol=TOLERANCE, rtol=0)
    backend.close()


@pytest.mark.parametrize("name", llm_cases())
def test_llm_agent_generates_as_greedy_model_generate(name, built, tmp_path_factory):
    from transformers import AutoTokenizer

    folder = llm_folder(name, built, tmp_path_factory)
    backend = TransformersBackend.load(folder, device="cpu", batch_size=16)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    got = backend.generate([GenerateRequest((), prompt, max_new_tokens=8) for prompt in AGENT_PROMPTS])
    assert len(set(got)) > 1, "the prompts must steer the tiny model's greedy text, or the check proves nothing"
    for prompt, text in zip(AGENT_PROMPTS, got, strict=True):
        ids = model_card_ids(tokenizer, prompt)
        with torch.no_grad():
            generated = backend.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        expected = tokenizer.decode(generated[0, ids.shape[1] :], skip_special_tokens=True).strip()
        assert text == expected, f"{name}: {prompt!r}"
    backend.close()
