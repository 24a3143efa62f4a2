"""Tiny checkpoints built from configs and briefly trained on the synthetic world (issue 3).

Everything is saved as a safetensors folder that ``from_pretrained`` loads with
no network, exactly as a real model would be loaded:

- a word-level tokenizer over the world's vocabulary, with a LLaVA-1.5-style chat template;
- a LLaVA VLM (CLIP vision tower + Llama), loadable by ``AutoModelForImageTextToText`` /
  ``AutoProcessor``, trained for a chosen number of steps on the MC and yes/no items
  (loss on the answer token only: the option letter, or Yes/No).

The version family the gate decides between comes from the number of steps
(0 = untrained, N, 10·N).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<image>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] | upper }}: "
    "{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<image>\n{% else %}{{ item['text'] }} {% endif %}"
    "{% endfor %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
YES_NO_INSTRUCTION = "Please answer yes or no."
OPTION_LETTERS = "ABCDEFGH"
#: Words the prompts of the evaluators use beyond the data sets' own text.
PROMPT_WORDS = (
    "user assistant yes no true false a b c d e f g h option letter answer question choices given directly "
    "please or only respond in based on the image statement following is this there describe detail "
    "which how many more than are of what color shape first second context forget common sense "
    "0 1 2 3 4 5 6 7 8 9 . , ? : ; ' ( ) -"
)


def world_vocabulary(texts: list[str]) -> list[str]:
    """Special tokens, then every lower-cased word and punctuation mark of the texts, sorted."""
    words = set(PROMPT_WORDS.split())
    for text in texts:
        words.update(re.findall(r"\w+|[^\w\s]", text.lower()))
    return SPECIAL_TOKENS + sorted(words - set(SPECIAL_TOKENS))


def build_tokenizer(vocabulary: list[str]) -> PreTrainedTokenizerFast:
    """A word-level fast tokenizer: lower-cases, splits on spaces and punctuation."""
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(vocabulary)}, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@dataclass(frozen=True)
class TinyVlmConfig:
    image_size: int = 32
    patch_size: int = 8
    vision_hidden: int = 48
    text_hidden: int = 64
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
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
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
        tie_word_embeddings=False,
    )
    image_tokens = (config.image_size // config.patch_size) ** 2
    model_config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=image_tokens,
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


def mc_prompt_text(question: str, options: list[str]) -> str:
    """The MMMU-style multiple-choice prompt (VL-LCM paper App. C, "MC with default prompt")."""
    lines = [question] + [f"{OPTION_LETTERS[i]}. {option}" for i, option in enumerate(options)]
    return " ".join(lines) + " " + MC_INSTRUCTION


def chat_prompt(processor: LlavaProcessor, text: str) -> str:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True)


def training_examples(data_root: Path) -> list[tuple[Path, str, str]]:
    """(image, prompt text, answer token) from the MC and yes/no items of a built world."""
    examples = []
    for row in map(json.loads, (data_root / "mc" / "items.jsonl").read_text().splitlines()):
        examples.append((data_root / "mc" / row["image"], mc_prompt_text(row["question"], row["options"]), OPTION_LETTERS[row["answer"]]))
    for row in map(json.loads, (data_root / "yesno" / "items.jsonl").read_text().splitlines()):
        examples.append((data_root / "yesno" / row["image"], f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()))
    return examples


def train_answer_token(
    model: LlavaForConditionalGeneration,
    processor: LlavaProcessor,
    examples: list[tuple[Path, str, str]],
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Train on the answer token only (cross-entropy at the last prompt position); returns the losses."""
    if steps == 0:
        return []
    generator = np.random.default_rng(seed)
    torch.manual_seed(seed)
    images = {path: Image.open(path).convert("RGB") for path, _, _ in examples}
    prompts = [chat_prompt(processor, text) for _, text, _ in examples]
    targets = torch.tensor([processor.tokenizer.convert_tokens_to_ids(answer.lower()) for _, _, answer in examples])
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = generator.choice(len(examples), size=min(batch_size, len(examples)), replace=False)
        inputs = processor(images=[images[examples[i][0]] for i in batch], text=[prompts[i] for i in batch], return_tensors="pt", padding=True)
        logits = model(**inputs, logits_to_keep=1).logits[:, -1, :]
        loss = torch.nn.functional.cross_entropy(logits, targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def save_checkpoint(model: Any, processor: Any, out: Path, metadata: dict[str, Any]) -> Path:
    """safetensors weights + processor files + a vlgate card describing how it was built."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    (out / "vlgate_checkpoint.json").write_text(json.dumps(metadata, indent=2, sort_keys=True))
    return out


def build_vlm_versions(train_root: Path, eval_root: Path, out: Path, steps: tuple[int, ...] = (0, 60, 600), seed: int = 0) -> dict[int, Path]:
    """The VLM family: one checkpoint per number of training steps, same initial weights.

    Trained on a separate training split (``train_root``); the vocabulary also
    covers every text of the evaluation data sets (``eval_root``).
    """
    examples = training_examples(train_root)
    texts = [text for _, text, _ in examples]
    for path in sorted(eval_root.rglob("*.jsonl")):
        texts.extend(path.read_text().split("\n"))
    tokenizer = build_tokenizer(world_vocabulary(texts))
    paths = {}
    for n_steps in steps:
        model, processor = build_vlm(tokenizer, seed=seed)
        started = time.perf_counter()
        losses = train_answer_token(model, processor, examples, n_steps, seed=seed)
        metadata = {
            "kind": "vlm",
            "architecture": "LlavaForConditionalGeneration",
            "train_steps": n_steps,
            "seed": seed,
            "final_loss": float(np.mean(losses[-10:])) if losses else None,
            "train_seconds": round(time.perf_counter() - started, 2),
        }
        paths[n_steps] = save_checkpoint(model, processor, out / f"vlm-steps{n_steps}", metadata)
    return paths


def build_vit_encoder(out: Path, image_size: int = 32, seed: int = 0) -> Path:
    """A random-weight tiny ViT image encoder (GenCeption's reference encoder: CLS of the last hidden state)."""
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=image_size, patch_size=8)
    model = ViTModel(config, add_pooling_layer=False)
    processor = ViTImageProcessor(size={"height": image_size, "width": image_size})
    return save_checkpoint(model, processor, out, {"kind": "image-encoder", "architecture": "ViTModel", "train_steps": 0, "seed": seed})
