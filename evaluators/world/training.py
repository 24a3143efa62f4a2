"""Training and saving the world's checkpoints.

Everything is saved as a safetensors folder that ``from_pretrained`` loads with no
network, exactly as a real model would be loaded:

- the VLM family (:func:`build_vlm_versions`): one model of an architecture of
  :mod:`.architectures`, trained on :class:`.curriculum.TrainingStream` (whole answers
  and their end), saved at several step counts;
- the faulty versions (:func:`build_faulty_version`): the trained version fine-tuned with
  one fault each (:data:`.faults.FAULTS`);
- a text-only Llama, DeCC's LLM agent, trained on reasoning over sub-answers (:func:`build_llm`);
- a ViT image encoder (random weights) for the drift suite's GenCeption (:func:`build_vit_encoder`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForImageTextToText, AutoProcessor, LlamaConfig, PreTrainedTokenizerFast

from vlgate.evaluators.world.architectures import build_architecture
from vlgate.evaluators.world.curriculum import ReasoningStream, TrainingExample, TrainingStream
from vlgate.evaluators.world.tokenizer import chat_prompt, text_chat_prompt

if TYPE_CHECKING:
    from transformers import BatchEncoding, BatchFeature, PreTrainedModel, ProcessorMixin
    from transformers.image_processing_utils import BaseImageProcessor
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

BATCH_SIZE = 32
#: parts a training batch is cut into by prompt length (gradients summed, one step)
MICRO_BATCHES = 2
LEARNING_RATE = 1e-3
#: gradients are clipped to this norm
MAX_GRAD_NORM = 1.0
WARMUP_STEPS = 100
#: The faulty fine-tunes' learning rate: small enough that what the trained model reads off
#: the image survives, so the fault shows in its own skill rather than as lost accuracy
#: everywhere (at a larger rate the answer-prior fine-tune also cost MC accuracy; the
#: measurement: docs/world.md, "How the training recipe was chosen").
FAULT_LEARNING_RATE = LEARNING_RATE / 10


def train_answers(
    model: torch.nn.Module,
    next_batch: Callable[[], Sequence[Mapping[str, torch.Tensor]]],
    steps: int,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    desc: str = "training",
) -> list[float]:
    """Teacher-forced training on the answer tokens only (:func:`answer_loss`):
    ``next_batch()`` returns a batch as a list of equal parts (model inputs whose
    ``labels`` are -100 outside the answers), one optimizer step per batch; returns the
    losses. A tqdm bar shows steps, loss and the time left."""
    model.train()
    losses: list[float] = []
    with tqdm(total=steps, desc=desc, unit="step", disable=steps == 0, mininterval=2.0) as bar:
        for _ in range(steps):
            parts = next_batch()
            optimizer.zero_grad()
            tokens = sum(int((part["labels"] != -100).sum()) for part in parts)
            loss = torch.zeros(())
            for part in parts:  # the batch's mean over its answer tokens, part by part
                part_loss = answer_loss(model, part)
                (part_loss / tokens).backward()
                loss += part_loss.detach() / tokens
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(loss.item())
            bar.update()
            if len(losses) % 50 == 0:
                bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
    model.eval()
    return losses


def answer_loss(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The summed cross-entropy of the next-token predictions on the labelled (answer)
    tokens. Summed over a whole batch and divided by its token count, every answer token
    weighs the same: a description's many words are most of the signal that teaches the
    model to read the image (weighting every example equally instead left it blind to the
    image far longer: docs/world.md, "How the training recipe was chosen")."""
    logits = model(**{name: value for name, value in inputs.items() if name != "labels"}).logits[:, :-1, :]
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), inputs["labels"][:, 1:], ignore_index=-100, reduction="sum")


def with_answer(prompt: str, answer: str, tokenizer: PreTrainedTokenizerFast) -> str:
    """A training text: the chat prompt, then the answer and its end (``</s>``)."""
    return f"{prompt} {answer}{tokenizer.eos_token}"


def answer_labels(input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerFast, answers: list[str]) -> torch.Tensor:
    """Labels for left-padded rows that end with their answers and ``</s>``: each row's
    answer tokens keep their ids, everything before is -100 (no loss)."""
    labels = torch.full_like(input_ids, -100)
    width = input_ids.shape[1]
    for row, answer in enumerate(answers):
        length = len(tokenizer(f"{answer}{tokenizer.eos_token}", add_special_tokens=False)["input_ids"])
        labels[row, width - length :] = input_ids[row, width - length :]
    return labels


def training_card(kind: str, architecture: str, steps: int, examples: int, seed: int, losses: list[float], started: float) -> dict[str, object]:
    """What ``vlgate_checkpoint.json`` records about how a checkpoint was trained."""
    return {
        "kind": kind,
        "architecture": architecture,
        "train_steps": steps,
        "train_examples": examples,
        "seed": seed,
        "final_loss": float(np.mean(losses[-20:])) if losses else None,
        "train_seconds": round(time.perf_counter() - started, 2),
    }


def save_checkpoint(model: PreTrainedModel, processor: ProcessorMixin | PreTrainedTokenizerBase | BaseImageProcessor, out: Path, metadata: Mapping[str, object]) -> Path:
    """safetensors weights + processor files + a vlgate card describing how it was built."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    (out / "vlgate_checkpoint.json").write_text(json.dumps(metadata, indent=2, sort_keys=True))
    return out


def _answer_batches(processor: ProcessorMixin, tokenizer: PreTrainedTokenizerFast, stream: TrainingStream) -> Callable[[], list[BatchFeature]]:
    """Batches of the stream as model inputs: the chat prompt, the answer and ``</s>``,
    labelled on the answer and its end. A batch comes as :data:`MICRO_BATCHES` parts of
    similar length (sorted by prompt length), so GenCeption's long description prompt does
    not pad every short question to its length."""

    def inputs_of(batch: list[TrainingExample]) -> BatchFeature:
        texts = [with_answer(chat_prompt(processor, text, len(images)), answer, tokenizer) for images, text, answer in batch]
        inputs = processor(images=[image for images, _, _ in batch for image in images], text=texts, return_tensors="pt", padding=True)
        inputs["labels"] = answer_labels(inputs["input_ids"], tokenizer, [answer for _, _, answer in batch])
        return inputs

    def next_batch() -> list[BatchFeature]:
        batch = sorted(stream.batch(BATCH_SIZE), key=lambda example: len(example[1]))
        size = BATCH_SIZE // MICRO_BATCHES
        return [inputs_of(batch[start : start + size]) for start in range(0, BATCH_SIZE, size)]

    return next_batch


def build_faulty_version(start: Path, out: Path, fault: str, steps: int = 300, seed: int = 0) -> Path:
    """One of the family's faulty versions: the best version fine-tuned for ``steps`` more,
    at a tenth of the learning rate, on the stream with ``fault`` (:data:`FAULTS`): one
    skill taught wrong, the others as before, as a fine-tune on flawed data would do."""
    model = AutoModelForImageTextToText.from_pretrained(start)
    processor = AutoProcessor.from_pretrained(start)
    stream = TrainingStream(seed + 1, fault=fault)
    optimizer = torch.optim.AdamW(model.parameters(), lr=FAULT_LEARNING_RATE, weight_decay=0.0)
    started = time.perf_counter()
    losses = train_answers(model, _answer_batches(processor, processor.tokenizer, stream), steps, optimizer, desc=f"vlm {fault}")
    base = json.loads((start / "vlgate_checkpoint.json").read_text())
    card = training_card("vlm", type(model).__name__, base["train_steps"] + steps, base["train_examples"] + stream.drawn, seed, losses, started)
    return save_checkpoint(model, processor, out, card | {"fault": fault, "fine_tuned_from": start.name, "fine_tune_steps": steps})


def build_vlm_versions(tokenizer: PreTrainedTokenizerFast, out: Path, steps: tuple[int, ...] = (0, 100, 1000), seed: int = 0, architecture: str = "llava") -> dict[int, Path]:
    """The VLM family: one model trained once on a fresh-item stream, saved at each step count."""
    model, processor = build_architecture(architecture, tokenizer, seed)
    tokenizer = processor.tokenizer  # Idefics3's has its special tokens
    stream = TrainingStream(seed)

    next_batch = _answer_batches(processor, tokenizer, stream)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))
    paths, done, losses, started = {}, 0, [], time.perf_counter()
    for target in sorted(steps):
        losses += train_answers(model, next_batch, target - done, optimizer, scheduler, desc=f"vlm {done}→{target} steps")
        done = target
        card = training_card("vlm", type(model).__name__, done, stream.drawn, seed, losses, started) | {"fault": None}
        paths[target] = save_checkpoint(model, processor, out / f"vlm-steps{target}", card)
    return paths


def build_vit_encoder(out: Path, image_size: int = 32, seed: int = 0) -> Path:
    """A random-weight tiny ViT image encoder (GenCeption's reference encoder: CLS of the last hidden state)."""
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=image_size, patch_size=8)
    model = ViTModel(config, add_pooling_layer=False)
    processor = ViTImageProcessor(size={"height": image_size, "width": image_size})
    return save_checkpoint(model, processor, out, {"kind": "image-encoder", "architecture": "ViTModel", "train_steps": 0, "seed": seed})


def build_llm(tokenizer: PreTrainedTokenizerFast, out: Path, steps: int = 300, seed: int = 0, heads: int = 4) -> Path:
    """A tiny Llama (text only, ``AutoModelForCausalLM``) sharing the VLM's tokenizer, trained
    on the answer token of reasoning items; DeCC's LLM agent in the synthetic world. With
    ``heads=2`` its heads are 32 wide, which vLLM's CPU attention takes (the default world's
    4 heads of 16 it refuses)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    stream = ReasoningStream(seed)

    def next_batch() -> list[BatchEncoding]:
        batch = [stream.example() for _ in range(BATCH_SIZE)]
        texts = [with_answer(text_chat_prompt(tokenizer, text), answer, tokenizer) for text, answer in batch]
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        inputs["labels"] = answer_labels(inputs["input_ids"], tokenizer, [answer for _, answer in batch])
        return [inputs]

    started = time.perf_counter()
    losses = train_answers(model, next_batch, steps, torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0), desc="llm agent")
    return save_checkpoint(model, tokenizer, out, training_card("llm", "LlamaForCausalLM", steps, stream.drawn, seed, losses, started))
