"""What every tiny family checkpoint is built from, and the model-card path it is judged by.

A family's checkpoint is random weights in the family's own transformers classes, small
enough to run in milliseconds, saved the way a team saves a fine-tune
(``model.save_pretrained`` + ``processor.save_pretrained`` into one folder, safetensors),
with a tokenizer that holds the family's special tokens, adds BOS where the released one
does, and the chat template in the family's published format.

The reference every vlgate number is compared with is the **model-card path**: the
conversation (images first, then the text) through ``processor.apply_chat_template(...,
tokenize=True, return_dict=True)`` with the images inside the messages, one sample at a
time, and one plain forward pass (or ``model.generate``) of exactly those inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.options import option_token_ids
from vlgate.evaluators.genception import prompts as genception_prompts
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts
from vlgate.evaluators.vlind import prompts as vlind_prompts

#: Text the tiny tokenizers are trained on: every prompt family vlgate sends, so the merges
#: cut its prompts the way a real vocabulary would (words, not characters).
CORPUS = [
    prompts.mc_prompt("What colour is the shape in the middle?", ["red", "green", "blue", "yellow"]),
    lcm_prompts.yes_no_probe("What colour is the shape in the middle?", "red"),
    lcm_prompts.naturalbench_yes_no("Is there a red circle?", "question"),
    lcm_prompts.naturalbench_multiple_choice("Which shape is red?\nA. circle\nB. square"),
    vlind_prompts.vlind_image("The sky is green."),
    genception_prompts.GENCEPTION_DESCRIBE,
    vlind_prompts.TRUE_FALSE_INSTRUCTION,
    lcm_prompts.NATURALBENCH_MC_SUFFIX,
    "A B C D E F Yes No True False yes no true false A. B. C. D. (A) (B) user assistant system model",
    "There is a red circle on the left and a blue square on the right of the picture.",
    "How many shapes are there? Describe the image. Is the triangle bigger than the square?",
]


def tiny_tokenizer(
    *,
    special_tokens: Sequence[str],
    eos: str,
    pad: str,
    bos: str | None = None,
    unk: str | None = None,
    add_bos: bool = False,
    style: str = "byte_level",
    vocab_size: int = 700,
    chat_template: str | None = None,
    extra_special_tokens: dict[str, str] | None = None,
    whole_tokens: Sequence[str] = (),
) -> PreTrainedTokenizerFast:
    """A BPE tokenizer trained on :data:`CORPUS`: ``byte_level`` (GPT-2/Qwen/Llama 3 style,
    ``Ġ`` for spaces, every byte in the alphabet) or ``metaspace`` (SentencePiece style, ``▁``
    for spaces, Llama 2/Gemma/Mistral). ``special_tokens`` (BOS, EOS, pad, image and turn
    markers) are added tokens that are never split, as are ``whole_tokens`` (ordinary text
    the released vocabulary holds as one piece, e.g. Gemma's ``"\n\n"``); ``add_bos`` prepends BOS to every
    encoding with special tokens, as Llama's and Gemma's tokenizers do and Qwen's do not."""
    specials = list(dict.fromkeys([t for t in (bos, eos, pad, unk) if t] + list(special_tokens)))
    if style == "byte_level":
        backend = Tokenizer(models.BPE(unk_token=None))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif style == "metaspace":
        backend = Tokenizer(models.BPE(unk_token=unk, byte_fallback=False))
        backend.normalizer = normalizers.Sequence([])
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = [chr(c) for c in range(32, 127)] + ["▁", "\n"]
    else:
        raise ValueError(f"unknown tokenizer style {style!r}")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet, show_progress=False)
    backend.train_from_iterator(CORPUS * 4, trainer=trainer)
    backend.add_tokens([AddedToken(token, normalized=False, special=False) for token in whole_tokens])
    if add_bos:
        if bos is None:
            raise ValueError("add_bos needs a bos token")
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, backend.token_to_id(bos))]
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        unk_token=unk,
        extra_special_tokens=extra_special_tokens or {},
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def save_checkpoint(model: Any, processor: Any, folder: Path) -> Path:
    """The folder a team would register: safetensors weights, config, processor, tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder


def tiny_images(count: int, size: int = 48, seed: int = 0) -> list[Image.Image]:
    """``count`` different RGB images (random noise: each gives the vision tower other input)."""
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size, size + 8 * i, 3), dtype=np.uint8)) for i in range(count)]


def conversation(prompt: str, images: Sequence[Image.Image]) -> list[dict[str, Any]]:
    """One user turn as vlgate sends it: every image first, then the text."""
    return [{"role": "user", "content": [{"type": "image", "image": image} for image in images] + [{"type": "text", "text": prompt}]}]


def model_card_inputs(processor: Any, prompt: str, images: Sequence[Image.Image]) -> Any:
    """The inputs the model card's path gives one sample: the processor's own
    ``apply_chat_template(tokenize=True)`` with the images in the message; for a checkpoint
    released without a chat template (PaliGemma's base models), the card's
    ``processor(text=prompt, images=images)``, where the processor places the image tokens."""
    if processor.chat_template is None:
        return processor(text=[prompt], images=[list(images)], return_tensors="pt")
    return processor.apply_chat_template(
        conversation(prompt, images), add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )


@torch.no_grad()
def model_card_option_probs(model: Any, processor: Any, prompt: str, images: Sequence[Image.Image], options: Sequence[str]) -> np.ndarray:
    """The option distribution from one plain full forward pass of the model-card inputs:
    the next-token softmax at the last position, each option's tokens summed, renormalised."""
    inputs = model_card_inputs(processor, prompt, images).to(model.device, dtype=model.dtype)
    logits = model(**inputs).logits[0, -1].float()
    probabilities = torch.softmax(logits, dim=-1)
    masses = np.array([float(probabilities[ids].sum()) for ids in option_token_ids(processor.tokenizer, options)])
    return masses / masses.sum()


@torch.no_grad()
def model_card_generate(model: Any, processor: Any, prompt: str, images: Sequence[Image.Image], max_new_tokens: int) -> str:
    """Greedy ``model.generate`` on the model-card inputs; the new text, special tokens skipped, stripped."""
    inputs = model_card_inputs(processor, prompt, images).to(model.device, dtype=model.dtype)
    generated = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return str(processor.tokenizer.decode(generated[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)).strip()


@dataclass(frozen=True)
class OnVllm:
    """How the family runs on vLLM's CPU build here; ``tests/test_vllm_families.py`` checks
    every field, so the README's vLLM column goes stale loudly.

    ``outcome``: ``exact`` (option probabilities within 1e-5 of the model card's path, greedy
    text equal), ``differs`` (runs, other probabilities: ``reason`` says why, and the test
    shows it), ``refused`` (vlgate refuses it in one line before scoring) or ``fails`` (vLLM
    itself fails here). ``evidence`` is what the refusal or failure says (a regular
    expression). ``two_images`` is ``differs`` where only multi-image prompts disagree.
    ``engine`` holds engine settings the family needs here.
    """

    outcome: str = "exact"
    reason: str = ""
    evidence: str = ""
    two_images: str = "exact"
    engine: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """One VLM family of the matrix.

    ``build(folder)`` saves a tiny random-weight checkpoint of the family into ``folder``.
    ``max_images`` is how many images one request may carry (1 for families trained on
    single images only). ``notes`` says anything the README's table should say of it;
    ``vllm`` how it runs on vLLM.
    """

    name: str
    build: Callable[[Path], Path]
    max_images: int = 2
    notes: str = ""
    vllm: OnVllm = OnVllm()
