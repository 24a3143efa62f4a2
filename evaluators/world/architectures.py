"""The world VLM's two architectures, built from configs with random weights:

- LLaVA (CLIP vision tower + Llama; the default world), :func:`build_vlm`;
- Idefics3 (SmolVLM-style; head sizes of 32, which vLLM's CPU attention accepts, so both
  the transformers and the vLLM backends serve it), :func:`build_idefics3_vlm`.

Both load with ``AutoModelForImageTextToText`` / ``AutoProcessor`` once saved.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import cast

import torch
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    Idefics3VisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from vlgate.evaluators.world.tokenizer import CHAT_TEMPLATE


@dataclass(frozen=True)
class TinyVlmConfig:
    """48 px images in 16 px patches: one patch per cell of the scenes' 3×3 grid (rendered at
    64 px), so each image token sees one shape whole."""

    image_size: int = 48
    patch_size: int = 16
    vision_hidden: int = 64
    text_hidden: int = 64
    vision_layers: int = 2
    layers: int = 2
    heads: int = 4


def build_vlm(tokenizer: PreTrainedTokenizerFast, config: TinyVlmConfig = TinyVlmConfig(), seed: int = 0) -> tuple[LlavaForConditionalGeneration, LlavaProcessor]:
    """A random-weight tiny LLaVA and its processor. With the "default" feature strategy the
    CLS token is dropped, so the processor adds one token and removes it again
    (``num_additional_image_tokens=1``): (image/patch)² image tokens on both sides."""
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(
        hidden_size=config.vision_hidden,
        intermediate_size=config.vision_hidden * 2,
        num_hidden_layers=config.vision_layers,
        num_attention_heads=config.vision_hidden // 32,
        image_size=config.image_size,
        patch_size=config.patch_size,
        projection_dim=config.vision_hidden,
    )
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.text_hidden,
        intermediate_size=config.text_hidden * 2,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads // 2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        # tied: the direct-answer items then pull the image's colour towards the colour
        # word's input embedding, which the yes/no probes compare it with
        tie_word_embeddings=True,
    )
    image_tokens = (config.image_size // config.patch_size) ** 2
    model_config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=cast(int, tokenizer.convert_tokens_to_ids("<image>")),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=image_tokens,
        tie_word_embeddings=True,
    )
    model = LlavaForConditionalGeneration(model_config)
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": config.image_size},
        crop_size={"height": config.image_size, "width": config.image_size},
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=config.patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The world's VLM architectures (``TrainingRecipe(architecture=...)``, ``build.py``).
ARCHITECTURES = ("llava", "idefics3")
#: Every token Idefics3's processor looks up. A missing one silently becomes ``<unk>``,
#: and an unregistered one is split at its punctuation by the word-level pre-tokenizer.
IDEFICS3_SPECIAL_TOKENS = ["<fake_token_around_image>", "<global-img>", "<end_of_utterance>"] + [
    f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)
]


@dataclass(frozen=True)
class TinyIdefics3Config:
    """A SmolVLM-style Idefics3: every attention head 32 wide (vLLM's CPU kernels refuse 16).
    The image is one 32 px tile (no splitting) of 8 px patches, pixel-shuffled by
    ``scale_factor``: (32/8)² / 2² = 4 image tokens, as the LLaVA world's 16 CLIP patches."""

    image_size: int = 32
    patch_size: int = 8
    scale_factor: int = 2
    vision_hidden: int = 64
    text_hidden: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1

    @property
    def image_seq_len(self) -> int:
        return (self.image_size // self.patch_size) ** 2 // self.scale_factor**2


def idefics3_tokenizer(tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """A copy of the world tokenizer with Idefics3's special tokens appended (the LLaVA
    world's ids stay as they are)."""
    copy = deepcopy(tokenizer)
    copy.add_tokens(IDEFICS3_SPECIAL_TOKENS, special_tokens=True)
    return copy


def build_idefics3_vlm(tokenizer: PreTrainedTokenizerFast, config: TinyIdefics3Config = TinyIdefics3Config(), seed: int = 0) -> tuple[Idefics3ForConditionalGeneration, Idefics3Processor]:
    """A random-weight tiny Idefics3 and its processor (PIL image processor, no image
    splitting, the world's chat template); the tokenizer gains Idefics3's special tokens."""
    tokenizer = idefics3_tokenizer(tokenizer)
    torch.manual_seed(seed)
    vision = Idefics3VisionConfig(
        hidden_size=config.vision_hidden,
        intermediate_size=config.vision_hidden * 2,
        num_hidden_layers=config.layers,
        num_attention_heads=config.vision_hidden // 32,
        image_size=config.image_size,
        patch_size=config.patch_size,
    )
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.text_hidden,
        intermediate_size=config.text_hidden * 2,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads,
        head_dim=32,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    model_config = Idefics3Config(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_id=cast(int, tokenizer.convert_tokens_to_ids("<image>")),
        scale_factor=config.scale_factor,
        tie_word_embeddings=True,
        # taken by __post_init__ rather than declared as a field (the default is Llama 3's 128002)
        **{"pad_token_id": tokenizer.pad_token_id},
    )
    model = Idefics3ForConditionalGeneration(model_config)
    edge = {"longest_edge": config.image_size}
    image_processor = Idefics3ImageProcessorPil(do_image_splitting=False, size=edge, max_image_size=edge)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=config.image_seq_len, chat_template=CHAT_TEMPLATE)
    return model, processor


def build_architecture(architecture: str, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> tuple[LlavaForConditionalGeneration | Idefics3ForConditionalGeneration, LlavaProcessor | Idefics3Processor]:
    """The world VLM of ``architecture`` (one of :data:`ARCHITECTURES`), random weights."""
    if architecture == "llava":
        return build_vlm(tokenizer, seed=seed)
    if architecture == "idefics3":
        return build_idefics3_vlm(tokenizer, seed=seed)
    raise ValueError(f"unknown world VLM architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")
