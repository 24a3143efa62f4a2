"""The world's word-level tokenizer, over the world's vocabulary, with a LLaVA-1.5-style
chat template; shared by the world's VLM and its text-only LLM agent."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from vlgate.evaluators.world.curriculum import ReasoningStream, TrainingStream

if TYPE_CHECKING:
    from transformers import ProcessorMixin

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


def chat_prompt(processor: ProcessorMixin, text: str, images: int = 1) -> str:
    """The chat template's user turn with ``images`` images, then the text (the layout every
    vlgate backend sends), and the generation prompt."""
    # Any: transformers annotates a conversation as list[dict[str, str]], which a message
    # whose content is a list of parts (as every multimodal template reads) does not fit
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": text}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, add_generation_prompt=True)


def text_chat_prompt(tokenizer: PreTrainedTokenizerFast, text: str) -> str:
    """The same chat template without an image, for the text-only LLM agent."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    return cast(str, tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def world_tokenizer(eval_root: Path, seed: int = 0) -> PreTrainedTokenizerFast:
    """The tokenizer shared by the world's VLM and LLM: every word of the evaluation data
    sets and of samples of both training streams (all come from the same generators)."""
    texts = [line for path in sorted(eval_root.rglob("*.jsonl")) for line in path.read_text().splitlines()]
    texts += [f"{text} {answer}" for _, text, answer in TrainingStream(seed).batch(512)]
    reasoning = ReasoningStream(seed)
    texts += [reasoning.example()[0] for _ in range(64)]
    return build_tokenizer(world_vocabulary(texts))
