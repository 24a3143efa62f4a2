"""Tiny checkpoints built from configs and trained on the synthetic world.

Everything is saved as a safetensors folder that ``from_pretrained`` loads with
no network, exactly as a real model would be loaded:

- a word-level tokenizer over the world's vocabulary, with a LLaVA-1.5-style chat template;
- a VLM loadable by ``AutoModelForImageTextToText`` / ``AutoProcessor``, trained on a
  stream of freshly drawn items of every skill the five evaluators measure
  (:class:`TrainingStream`), learning whole answers and their end. Two architectures:
  LLaVA (CLIP vision tower + Llama; the default world) and Idefics3 (SmolVLM-style; head
  sizes of 32, which vLLM's CPU attention accepts, so both the transformers and the vLLM
  backends serve it);
- a text-only Llama, DeCC's LLM agent, trained on reasoning over sub-answers;
- a ViT image encoder (random weights) for the drift suite's GenCeption.

The version family the gate decides between is one training run saved at several step
counts, and the trained version fine-tuned with one fault each (:data:`FAULTS`).
"""

from __future__ import annotations

import json
import re
import time
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from tqdm.auto import tqdm
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
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

from vlgate.evaluators import prompts
from vlgate.evaluators.decc import prompts as decc_prompts
from vlgate.evaluators.genception import prompts as genception_prompts
from vlgate.evaluators.prompts import OPTION_LETTERS, YES_NO_INSTRUCTION
from vlgate.evaluators.scenes.scene import render
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts
from vlgate.evaluators.vlind import prompts as vlind_prompts
from vlgate.evaluators.world.datasets import GENCEPTION_CATEGORIES, decc_item, mc_item, nb_unit, vlind_item, yesno_item

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
BATCH_SIZE = 32
#: parts a training batch is cut into by prompt length (gradients summed, one step)
MICRO_BATCHES = 2
LEARNING_RATE = 1e-3
#: gradients are clipped to this norm
MAX_GRAD_NORM = 1.0
WARMUP_STEPS = 100
#: The faulty fine-tunes' learning rate: small enough that what the trained model reads off
#: the image survives, so the fault shows in its own skill rather than as lost accuracy
#: everywhere. (At LEARNING_RATE / 2 with a fresh optimizer the answer-prior fine-tune also
#: cost MC accuracy: 33 → 30 of 48 held-out items on the world of format 8.)
FAULT_LEARNING_RATE = LEARNING_RATE / 10
#: The answer prior of the answer-prior version's yes/no probes: "yes" to the first listed
#: option, whatever the image shows.
PRIOR_OPTION = 0
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


#: The world's VLM architectures (``build_world(architecture=...)``).
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


def build_architecture(architecture: str, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> tuple[Any, Any]:
    """The world VLM of ``architecture`` (one of :data:`ARCHITECTURES`), random weights."""
    if architecture == "llava":
        return build_vlm(tokenizer, seed=seed)
    if architecture == "idefics3":
        return build_idefics3_vlm(tokenizer, seed=seed)
    raise ValueError(f"unknown world VLM architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")


def chat_prompt(processor: Any, text: str, images: int = 1) -> str:
    """The chat template's user turn with ``images`` images, then the text (the layout every
    vlgate backend sends), and the generation prompt."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": text}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, add_generation_prompt=True)


def text_chat_prompt(tokenizer: PreTrainedTokenizerFast, text: str) -> str:
    """The same chat template without an image, for the text-only LLM agent."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    return cast(str, tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def eval_examples(data_root: Path) -> list[tuple[Path, str, str]]:
    """(image path, prompt text, answer token) for the MC and yes/no items of a built world."""
    examples = []
    for row in map(json.loads, (data_root / "mc" / "items.jsonl").read_text().splitlines()):
        examples.append((data_root / "mc" / row["image"], prompts.mc_prompt(row["question"], row["options"]), OPTION_LETTERS[row["answer"]]))
    for row in map(json.loads, (data_root / "yesno" / "items.jsonl").read_text().splitlines()):
        examples.append((data_root / "yesno" / row["image"], f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()))
    return examples


#: The faults of the family's fine-tuned versions, each built for one evaluator to catch:
#: the fine-tune changes what one skill is taught and keeps every other answer true, so
#: the version stays as good as its parent elsewhere.
FAULTS = {
    # VLind-Bench: True/False statements about the image answered from common sense
    "language-prior": "statements about the image answered from common sense",
    # VL-LCM: the yes/no probes of an MC item answered by an answer prior (yes to option A),
    # while its MC answers stay true: as accurate, less consistent
    "answer-prior": "an MC item's yes/no probes answered by an answer prior",
    # GenCeption: every image described as the same generic scene
    "poor-description": "every image described as the same generic scene",
    # DeCC: the sub-questions' counts answered wrong, so both agents reason from wrong pairs
    "miscount": "the sub-questions' counts answered wrong",
}
#: The stream's kind of example each fault teaches wrong.
FAULT_KINDS = {"language-prior": "vlind", "answer-prior": "probe", "poor-description": "describe", "miscount": "count"}
#: How much more often a faulty fine-tune sees the skill it learns wrong.
FAULT_BOOST = 3
#: What the poor describer says of every image: names no colour or shape, so the world's
#: generator draws the empty scene from it.
GENERIC_DESCRIPTION = "There is a shape."
#: Scenes the describe task draws from: GenCeption's categories and the VLind scenes.
DESCRIBE_SCENES = ("single", "multi", "landscape", "vlind")


class TrainingStream:
    """Fresh items drawn from the world's generators: every batch is new, so the model has
    to read the image rather than memorise a fixed split. Each example is (images, prompt,
    answer text), in the evaluators' own prompt formats (each package's ``prompts.py``), and the
    model learns the whole answer and its end (``</s>``), so what it generates stops:

    - ``mc``: MC questions → the option letter; ``probe``: VL-LCM's yes/no probes of an MC
      item's options ("Is the answer "red"?"); ``direct``: the colour or shape word, which
      anchors the visual path;
    - ``yesno``: existence questions; ``nb``: NaturalBench units' statements as yes/no
      questions and VL-LCM's two MC tests over them (which statement, which image);
    - ``vlind``: VLind-Bench's four templates (common sense, object, context, image);
    - ``describe``: GenCeption's description prompt → :meth:`Scene.describe`;
    - ``count``, ``compare``, ``reason``: DeCC's sub-questions (how many shapes of a
      colour), its main question (more of one colour than another?) and the VLM agent's
      reasoning over sub-question/answer pairs.

    ``fault`` (one of :data:`FAULTS`) teaches one skill wrong, for the family's faulty versions.
    """

    # describe and direct are the visual curriculum: with them at 8% and 4% the model was
    # still blind to the image after 2,000 steps (chance on MC), at 15% and 8% it read MC
    # items at 0.81 (measured, one seed each)
    MIX = (
        ("mc", 0.12),
        ("yesno", 0.12),
        ("probe", 0.09),
        ("direct", 0.08),
        ("nb", 0.1),
        ("vlind", 0.12),
        ("describe", 0.15),
        ("count", 0.1),
        ("compare", 0.06),
        ("reason", 0.06),
    )

    def __init__(self, seed: int, image_size: int = 64, fault: str | None = None):
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 7919]))
        self.image_size, self.fault = image_size, fault
        self.kinds: tuple[str, ...] = tuple(kind for kind, _ in self.MIX)
        # a faulty fine-tune sees its faulty skill FAULT_BOOST times as often
        weights = np.array([weight * (FAULT_BOOST if fault is not None and FAULT_KINDS[fault] == kind else 1) for kind, weight in self.MIX])
        self.weights: tuple[float, ...] = tuple(weights / weights.sum())
        self.drawn = 0

    def example(self) -> tuple[tuple[Image.Image, ...], str, str]:
        self.drawn += 1
        kind = self.kinds[int(self.rng.choice(len(self.kinds), p=self.weights))]
        return getattr(self, f"_{kind}")()

    def _image(self, scene) -> tuple[Image.Image, ...]:
        return (render(scene, self.image_size),)

    def _mc_row(self):
        scene, row = mc_item(self.rng, self.drawn)
        return self._image(scene), row

    def _mc(self):
        image, row = self._mc_row()
        return image, prompts.mc_prompt(row["question"], row["options"]), OPTION_LETTERS[row["answer"]]

    def _probe(self):
        image, row = self._mc_row()
        options, answer = row["options"], row["answer"]
        asked = answer if self.rng.random() < 0.5 else int(self.rng.integers(len(options)))
        believed = PRIOR_OPTION if self.fault == "answer-prior" else answer
        return image, lcm_prompts.yes_no_probe(row["question"], options[asked]), "Yes" if asked == believed else "No"

    def _direct(self):
        image, row = self._mc_row()
        return image, f"{row['question']} Answer in one word.", row["options"][row["answer"]]

    def _yesno(self):
        scene, row = yesno_item(self.rng, self.drawn)
        return self._image(scene), f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()

    def _nb(self):
        (v1, v2), row = nb_unit(self.rng, self.drawn)
        statements = row["statements"]
        # the true pairs: (V1, T1), (V2, T2) for c1; (V1, T2), (V2, T1) for c2
        true_of = (0, 1) if row["answer"] == "c1" else (1, 0)
        scenes = (v1, v2)
        test = int(self.rng.integers(3))
        image_index = int(self.rng.integers(2))
        if test == 0:
            statement = int(self.rng.integers(2))
            text = lcm_prompts.naturalbench_yes_no(statements[statement], "statement")
            return self._image(scenes[image_index]), text, "Yes" if true_of[image_index] == statement else "No"
        if test == 1:
            text = lcm_prompts.naturalbench_choose_text((statements[0], statements[1]), "statement")
            return self._image(scenes[image_index]), text, "AB"[true_of[image_index]]
        statement = int(self.rng.integers(2))
        images = self._image(v1) + self._image(v2)
        return images, lcm_prompts.naturalbench_choose_image(statements[statement], "statement"), "AB"[true_of.index(statement)]

    def _vlind(self):
        factual, counterfactual, row = vlind_item(self.rng, self.drawn)
        s_cf, s_fact = row["true_statement"], row["false_statement"]
        truth = self.rng.random() < 0.5
        test = int(self.rng.integers(4))
        if test == 0:  # common sense, factual image: s_fact is true
            scene, text = factual, vlind_prompts.vlind_commonsense(s_fact if truth else s_cf)
        elif test == 1:  # object presence in a counterfactual image
            scene, text = counterfactual[0], vlind_prompts.vlind_object(row["existent_noun"] if truth else row["non_existent_noun"])
        elif test == 2:  # the context decides
            scene, text = counterfactual[0], vlind_prompts.vlind_context(row["context"], s_cf if truth else s_fact)
        else:  # the image decides; a language-prior model answers from common sense instead
            # VLind-Bench asks this of counterfactual images only, where s_cf is always the
            # true one: half the examples show the factual image, so that the words alone
            # ("the uncommon attribute is the true one") do not answer it
            factual_shown = self.rng.random() < 0.5
            scene = factual if factual_shown else counterfactual[int(self.rng.integers(len(counterfactual)))]
            statement = s_cf if truth != factual_shown else s_fact
            text = vlind_prompts.vlind_image(statement)
            if self.fault == "language-prior":
                truth = statement == s_fact
        return self._image(scene), text, "True" if truth else "False"

    def _describe(self):
        source = DESCRIBE_SCENES[int(self.rng.integers(len(DESCRIBE_SCENES)))]
        if source == "vlind":
            factual, counterfactual, _ = vlind_item(self.rng, self.drawn)
            scene = factual if self.rng.random() < 0.5 else counterfactual[0]
        else:
            scene = GENCEPTION_CATEGORIES[source](self.rng)
        description = GENERIC_DESCRIPTION if self.fault == "poor-description" else scene.describe()
        return self._image(scene), genception_prompts.GENCEPTION_DESCRIBE, description

    def _decc_row(self):
        scene, row = decc_item(self.rng, self.drawn)
        return self._image(scene), row

    def _count(self):
        image, row = self._decc_row()
        which = int(self.rng.integers(2))
        count = int(row["sub_answers"][which])
        if self.fault == "miscount":
            count = (count + 1 + int(self.rng.integers(3))) % 4
        return image, decc_prompts.decc_sub_question(row["sub_questions"][which]), str(count)

    def _compare(self):
        image, row = self._decc_row()
        return image, f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()

    def _reason(self):
        image, row = self._decc_row()
        return image, reasoning_prompt_text(row["sub_questions"], row["sub_answers"], row["question"]), row["answer"].capitalize()

    def batch(self, size: int) -> list[tuple[tuple[Image.Image, ...], str, str]]:
        return [self.example() for _ in range(size)]


def train_answers(model: torch.nn.Module, next_batch, steps: int, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, desc: str = "training") -> list[float]:
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


def answer_loss(model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
    """The summed cross-entropy of the next-token predictions on the labelled (answer)
    tokens. Summed over a whole batch and divided by its token count, every answer token
    weighs the same: a description's many words are most of the signal that teaches the
    model to read the image (weighting every example equally instead left it blind for
    3,000 steps, measured)."""
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


def training_card(kind: str, architecture: str, steps: int, examples: int, seed: int, losses: list[float], started: float) -> dict[str, Any]:
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


def save_checkpoint(model: Any, processor: Any, out: Path, metadata: dict[str, Any]) -> Path:
    """safetensors weights + processor files + a vlgate card describing how it was built."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    (out / "vlgate_checkpoint.json").write_text(json.dumps(metadata, indent=2, sort_keys=True))
    return out


def world_tokenizer(eval_root: Path, seed: int = 0) -> PreTrainedTokenizerFast:
    """The tokenizer shared by the world's VLM and LLM: every word of the evaluation data
    sets and of samples of both training streams (all come from the same generators)."""
    texts = [line for path in sorted(eval_root.rglob("*.jsonl")) for line in path.read_text().splitlines()]
    texts += [f"{text} {answer}" for _, text, answer in TrainingStream(seed).batch(512)]
    reasoning = ReasoningStream(seed)
    texts += [reasoning.example()[0] for _ in range(64)]
    return build_tokenizer(world_vocabulary(texts))


def _answer_batches(processor: Any, tokenizer: PreTrainedTokenizerFast, stream: TrainingStream):
    """Batches of the stream as model inputs: the chat prompt, the answer and ``</s>``,
    labelled on the answer and its end. A batch comes as :data:`MICRO_BATCHES` parts of
    similar length (sorted by prompt length), so GenCeption's long description prompt does
    not pad every short question to its length."""

    def inputs_of(batch):
        texts = [with_answer(chat_prompt(processor, text, len(images)), answer, tokenizer) for images, text, answer in batch]
        inputs = processor(images=[image for images, _, _ in batch for image in images], text=texts, return_tensors="pt", padding=True)
        inputs["labels"] = answer_labels(inputs["input_ids"], tokenizer, [answer for _, _, answer in batch])
        return inputs

    def next_batch():
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


def reasoning_prompt_text(sub_questions: list[str], sub_answers: list[str], question: str) -> str:
    """What DeCC's LLM agent reads (the runner's own prompt, so it trains on what it is asked)."""
    return decc_prompts.decc_yes_no_reasoning(decc_prompts.decc_pairs(sub_questions, sub_answers), question)


class ReasoningStream:
    """Fresh DeCC-style reasoning items (two counts → compare) for the text-only LLM agent."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 104729]))
        self.drawn = 0

    def example(self) -> tuple[str, str]:
        self.drawn += 1
        _, row = decc_item(self.rng, self.drawn)
        return reasoning_prompt_text(row["sub_questions"], row["sub_answers"], row["question"]), row["answer"].capitalize()


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

    def next_batch():
        batch = [stream.example() for _ in range(BATCH_SIZE)]
        texts = [with_answer(text_chat_prompt(tokenizer, text), answer, tokenizer) for text, answer in batch]
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        inputs["labels"] = answer_labels(inputs["input_ids"], tokenizer, [answer for _, answer in batch])
        return [inputs]

    started = time.perf_counter()
    losses = train_answers(model, next_batch, steps, torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0), desc="llm agent")
    return save_checkpoint(model, tokenizer, out, training_card("llm", "LlamaForCausalLM", steps, stream.drawn, seed, losses, started))


#: vLLM's CPU attention runs heads 32 wide or wider; the LLaVA world trains 16-wide ones.
SERVED_HEAD_DIM = 32


def _rotary_positions(head_dim: int, served: int) -> torch.Tensor:
    """Where each of a ``head_dim``-wide rotary head's dimensions goes in a ``served``-wide
    one so that it turns at the same frequency with the same partner: rotate-half pairs
    dimension i with i + d/2 at frequency θ^(-2i/d), so i ↦ (served/head_dim)·i keeps
    θ^(-2i/d) = θ^(-2j/served), for each half."""
    ratio, half = served // head_dim, head_dim // 2
    positions = [ratio * i for i in range(half)] + [served // 2 + ratio * i for i in range(half)]
    return torch.tensor(positions)


def pad_attention_heads(folder: Path, served: int = SERVED_HEAD_DIM) -> bool:
    """Rewrite the checkpoint at ``folder`` (a LLaVA VLM, or a text-only Llama such as
    DeCC's agent) with its text model's attention heads zero-padded to ``served``
    dimensions, the same function (logits equal to float rounding): queries and keys keep
    their rotary frequencies (:func:`_rotary_positions`), the padded dimensions are zero in
    queries, keys, values and the output projection, and the queries are scaled by
    sqrt(served / head_dim) for the softmax's 1/sqrt(head_dim). False (nothing written)
    when the heads are already that wide."""
    from transformers import LlamaForCausalLM

    architecture = json.loads((Path(folder) / "config.json").read_text())["architectures"][0]
    model_class: Any = {"LlavaForConditionalGeneration": LlavaForConditionalGeneration, "LlamaForCausalLM": LlamaForCausalLM}[architecture]
    model = model_class.from_pretrained(folder)
    text_of = (lambda config: config.text_config) if model_class is LlavaForConditionalGeneration else (lambda config: config)
    text = cast(LlamaConfig, text_of(model.config))
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    if head_dim >= served:
        return False
    rope = getattr(text, "rope_parameters", None) or {}
    if served % head_dim or rope.get("rope_type", "default") != "default":
        raise ValueError(f"{folder}: cannot pad {head_dim}-wide heads with {rope} rotary embeddings to {served}")
    config = deepcopy(model.config)
    cast(LlamaConfig, text_of(config)).head_dim = served
    padded = model_class(config)
    positions = _rotary_positions(head_dim, served)
    state = model.state_dict()
    # a VLM's vision tower has attention too; only the language model's heads are padded
    language = "language_model" if model_class is LlavaForConditionalGeneration else ""
    for name, weight in state.items():
        kind = next((kind for kind in ("q_proj", "k_proj", "v_proj", "o_proj") if name.endswith(f"self_attn.{kind}.weight") and language in name), None)
        if kind is None:
            continue
        heads = (weight.shape[1] if kind == "o_proj" else weight.shape[0]) // head_dim
        rows = (torch.arange(heads)[:, None] * served + positions[None, :]).reshape(-1)
        if kind == "o_proj":
            wide = weight.new_zeros(weight.shape[0], heads * served)
            wide[:, rows] = weight
        else:
            wide = weight.new_zeros(heads * served, weight.shape[1])
            wide[rows] = weight * (served / head_dim) ** 0.5 if kind == "q_proj" else weight
        state[name] = wide
    padded.load_state_dict(state, strict=True)
    padded.save_pretrained(folder, safe_serialization=True)
    return True
