"""The LLaVA lineage and its neighbours: LLaVA-1.5, LLaVA-NeXT, LLaVA-OneVision, Idefics3,
SmolVLM, Aya Vision and Mistral3 (Mistral-Small-3.1), each as a tiny random-weight checkpoint
in the family's own transformers classes, with its released tokenizer's style and special
tokens and its published chat template (verbatim Jinja strings below; sources in comments).

Sizes: text hidden 64, 2 layers, heads of 32 (vLLM's CPU kernels refuse 16); vision towers of
the same width on 28–32 px tiles, so an image is 4 image tokens a tile (a few dozen at most
with anyres tiling or image splitting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import (
    AyaVisionConfig,
    AyaVisionForConditionalGeneration,
    AyaVisionProcessor,
    CLIPImageProcessor,
    CLIPVisionConfig,
    Cohere2Config,
    GotOcr2ImageProcessor,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessor,
    Idefics3Processor,
    Idefics3VisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    LlavaNextImageProcessor,
    LlavaNextProcessor,
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessor,
    LlavaOnevisionProcessor,
    LlavaOnevisionVideoProcessor,
    LlavaProcessor,
    Mistral3Config,
    Mistral3ForConditionalGeneration,
    MistralConfig,
    PixtralImageProcessor,
    PixtralProcessor,
    PixtralVisionConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    SiglipVisionConfig,
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
    SmolVLMImageProcessor,
    SmolVLMProcessor,
    SmolVLMVideoProcessor,
    SmolVLMVisionConfig,
)

from model_families.common import Family, OnVllm, save_checkpoint, tiny_tokenizer

HIDDEN = 64
LAYERS = 2
HEADS = 2
HEAD_DIM = 32
#: Mistral-Small-3.1's default system prompt alone is a few hundred tokens of the tiny vocabulary.
MAX_POSITIONS = 4096

# -- published chat templates (verbatim) ---------------------------------------------------

#: llava-hf/llava-1.5-7b-hf (chat_template.json); also transformers' tests/models/llava
#: test_processing_llava.py ("must match processor_config.json from the Hub repo").
LLAVA_15_TEMPLATE = "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != 'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"  # noqa: E501

#: llava-hf/llava-v1.6-mistral-7b-hf (chat_template.json, current revision: '</s> ' after an
#: assistant turn; an older revision wrote '<\\s> '). It has no generation prompt: the user
#: turn ends with ' [/INST]'.
LLAVA_NEXT_MISTRAL_TEMPLATE = "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\n' + message['content'][0]['text'] + '\n<</SYS>>\n\n' }}{% elif message['role'] == 'user' %}{{ '[INST] ' }}{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}{{' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'][0]['text'] + '</s> '}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"  # noqa: E501

#: llava-hf/llava-onevision-qwen2-0.5b-ov-hf (chat_template.json); as in transformers'
#: tests/models/llava_onevision/test_processing_llava_onevision.py.
LLAVA_ONEVISION_TEMPLATE = "{% for message in messages %}{{'<|im_start|>' + message['role'] + ' '}}{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>' }}{% endfor %}{# Render all video then #}{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}{{ '<video>' }}{% endfor %}{# Render all text next #}{% if message['role'] != 'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ '\n' + content['text'] }}{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{% generation %}{{ '\n' + content['text'] }}{% endgeneration %}{% endfor %}{% endif %}{{'<|im_end|>'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"  # noqa: E501

#: HuggingFaceM4/Idefics3-8B-Llama3 (chat_template.json): the template writes BOS itself.
IDEFICS3_TEMPLATE = "<|begin_of_text|>{% for message in messages %}{{message['role'].capitalize()}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"  # noqa: E501

#: HuggingFaceTB/SmolVLM-Instruct (chat_template.json == tokenizer_config.json).
SMOLVLM_TEMPLATE = "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"  # noqa: E501

#: CohereForAI/aya-vision-8b: NOT found verbatim offline (the repo is gated; no stored copy).
#: Reconstructed from the Aya/Command-R template family (aya-expanse's, verbatim up to the
#: user turn) with the multimodal content loop the vision checkpoints use ('<image>' per
#: image part, text parts as they are), giving the prompt vLLM's Aya Vision example sends:
#: '<|START_OF_TURN_TOKEN|><|USER_TOKEN|><image>{question}<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'
#: (after BOS, which the template writes).
AYA_VISION_TEMPLATE = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% if system_message != false %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' }}{% if system_message is string %}{{ system_message }}{% else %}{% for item in system_message %}{% if item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' }}{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>' }}{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|END_OF_TURN_TOKEN|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"  # noqa: E501

#: mistralai/Mistral-Small-3.1-24B-Instruct-2503 (chat_template.json), as transformers'
#: tests/models/pixtral/test_processing_pixtral.py copies it from
#: hf-internal-testing/Mistral-Small-3.1-24B-Instruct-2503-only-processor. Without a system
#: message it writes the default system prompt, with today's date (``strftime_now``).
MISTRAL3_TEMPLATE = "{%- set today = strftime_now(\"%Y-%m-%d\") %}\n{%- set default_system_message = \"You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\\nYour knowledge base was last updated on 2023-10-01. The current date is \" + today + \".\\n\\nWhen you're not sure about some information, you say that you don't have the information and don't make up anything.\\nIf the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. \\\"What are some good restaurants around me?\\\" => \\\"Where are you?\\\" or \\\"When is the next flight to Tokyo\\\" => \\\"Where do you travel from?\\\")\" %}\n\n{{- bos_token }}\n\n{%- if messages[0]['role'] == 'system' %}\n    {%- if messages[0] is string %}\n        {%- set system_message = messages[0]['content'] %}\n        {%- set loop_messages = messages[1:] %}\n    {%- else %} \n        {%- set system_message = messages[0]['content'][0]['text'] %}\n        {%- set loop_messages = messages[1:] %}\n    {%- endif %}\n{%- else %}\n    {%- set system_message = default_system_message %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}\n\n{%- for message in loop_messages %}\n    {%- if message['role'] == 'user' %}\n            {%- if message['content'] is string %}\n            {{- '[INST]' + message['content'] + '[/INST]' }}\n            {%- else %}\n                    {{- '[INST]' }}\n                    {%- for block in message['content'] %}\n                            {%- if block['type'] == 'text' %}\n                                    {{- block['text'] }}\n                            {%- elif block['type'] == 'image' or block['type'] == 'image_url' %}\n                                    {{- '[IMG]' }}\n                                {%- else %}\n                                    {{- raise_exception('Only text and image blocks are supported in message content!') }}\n                                {%- endif %}\n                        {%- endfor %}\n                    {{- '[/INST]' }}\n                {%- endif %}\n    {%- elif message['role'] == 'system' %}\n        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}\n    {%- elif message['role'] == 'assistant' %}\n        {%- if message['content'] is string %}\n            {{- message['content'] + eos_token }}\n        {%- else %}\n            {{- message['content'][0]['text'] + eos_token }}\n        {%- endif %}\n    {%- else %}\n        {{- raise_exception('Only user, system and assistant roles are supported!') }}\n    {%- endif %}\n{%- endfor %}"  # noqa: E501

#: Idefics3/SmolVLM image-splitting tokens (rows and columns up to 6, as the processor looks up).
ROW_COL_TOKENS = [f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)]
IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", *ROW_COL_TOKENS]

# -- shared pieces ---------------------------------------------------------------------------


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int) or found == tokenizer.unk_token_id and token != tokenizer.unk_token:
        raise ValueError(f"{token!r} is not in the tiny tokenizer")
    return found


def text_kwargs(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """The tiny decoder's sizes and the tokenizer's ids, for any Llama-like text config."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN * 2,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def vision_kwargs(image_size: int, patch_size: int) -> dict[str, Any]:
    return {
        "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN * 2,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HIDDEN // HEAD_DIM,
        "image_size": image_size,
        "patch_size": patch_size,
    }


def finish(model: Any, processor: Any, folder: Path) -> Path:
    model.eval()
    # generate() stops and pads with the tokenizer's ids (the config's are set from them above)
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    model.generation_config.bos_token_id = processor.tokenizer.bos_token_id
    return save_checkpoint(model, processor, folder)


# -- LLaVA-1.5 -------------------------------------------------------------------------------


def llama2_tokenizer(template: str, extra: list[str]) -> PreTrainedTokenizerFast:
    """Llama 2 / Vicuna / Mistral v0.x SentencePiece style: metaspace, BOS ``<s>`` added."""
    return tiny_tokenizer(
        special_tokens=extra,
        bos="<s>",
        eos="</s>",
        pad="<pad>",
        unk="<unk>",
        add_bos=True,
        style="metaspace",
        chat_template=template,
        extra_special_tokens={"image_token": "<image>"},
    )


def build_llava_15(folder: Path) -> Path:
    """llava-hf/llava-1.5-7b-hf: CLIP ViT (penultimate layer, CLS dropped) + Vicuna (Llama)."""
    tokenizer = llama2_tokenizer(LLAVA_15_TEMPLATE, ["<image>"])
    vision = CLIPVisionConfig(**vision_kwargs(28, 14), projection_dim=HIDDEN)
    config = LlavaConfig(
        vision_config=vision,
        text_config=LlamaConfig(**text_kwargs(tokenizer)),
        image_token_index=token_id(tokenizer, "<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        image_seq_length=4,
        # taken by __post_init__ rather than declared as a field
        **{"pad_token_id": tokenizer.pad_token_id},
    )
    model = LlavaForConditionalGeneration(config)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_15_TEMPLATE,
    )
    return finish(model, processor, folder)


# -- LLaVA-NeXT (v1.6 Mistral, anyres) ---------------------------------------------------------

#: llava-v1.6's pinpoints ([336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]) at 28 px.
NEXT_PINPOINTS = [[28, 56], [56, 28], [56, 56], [84, 28], [28, 84]]


def build_llava_next(folder: Path) -> Path:
    """llava-hf/llava-v1.6-mistral-7b-hf: CLIP ViT + Mistral, anyres tiling (base image plus
    up to 3×1 / 2×2 tiles of 28 px, 4 tokens each, with a newline embedding per row)."""
    tokenizer = llama2_tokenizer(LLAVA_NEXT_MISTRAL_TEMPLATE, ["<image>", "[INST]", "[/INST]"])
    vision = CLIPVisionConfig(**vision_kwargs(28, 14), projection_dim=HIDDEN)
    config = LlavaNextConfig(
        vision_config=vision,
        text_config=MistralConfig(**text_kwargs(tokenizer), sliding_window=None),
        image_token_index=token_id(tokenizer, "<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        image_grid_pinpoints=NEXT_PINPOINTS,
        image_seq_length=4,
        # taken by __post_init__ rather than declared as a field
        **{"pad_token_id": tokenizer.pad_token_id},
    )
    model = LlavaNextForConditionalGeneration(config)
    image_processor = LlavaNextImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}, image_grid_pinpoints=NEXT_PINPOINTS)
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_NEXT_MISTRAL_TEMPLATE,
    )
    return finish(model, processor, folder)


# -- LLaVA-OneVision (Qwen2) -------------------------------------------------------------------

#: OneVision's pinpoints are every (i·384, j·384) for i, j in 1..6; here i, j in 1..3 at 28 px.
ONEVISION_PINPOINTS = [[28 * i, 28 * j] for i in range(1, 4) for j in range(1, 4)]


def qwen2_tokenizer(template: str, extra: list[str]) -> PreTrainedTokenizerFast:
    """Qwen2 style: byte-level BPE, no BOS, ``<|im_end|>`` ends a turn, ``<|endoftext|>`` pads."""
    return tiny_tokenizer(
        special_tokens=["<|im_start|>", *extra],
        eos="<|im_end|>",
        pad="<|endoftext|>",
        style="byte_level",
        chat_template=template,
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
    )


def build_llava_onevision(folder: Path) -> Path:
    """llava-hf/llava-onevision-qwen2-0.5b-ov-hf: SigLIP + Qwen2, anyres_max_9 for one image,
    the base tile only when a prompt has several; a video processor for videos."""
    tokenizer = qwen2_tokenizer(LLAVA_ONEVISION_TEMPLATE, ["<image>", "<video>"])
    text = Qwen2Config(**{key: value for key, value in text_kwargs(tokenizer).items() if key != "head_dim"}, tie_word_embeddings=True)
    config = LlavaOnevisionConfig(
        vision_config=SiglipVisionConfig(**vision_kwargs(28, 14), vision_use_head=False),
        text_config=text,
        image_token_index=token_id(tokenizer, "<image>"),
        video_token_index=token_id(tokenizer, "<video>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        vision_aspect_ratio="anyres_max_9",
        image_grid_pinpoints=ONEVISION_PINPOINTS,
        tie_word_embeddings=True,
        # taken by __post_init__ rather than declared as a field
        **{"pad_token_id": tokenizer.pad_token_id},
    )
    model = LlavaOnevisionForConditionalGeneration(config)
    image_processor = LlavaOnevisionImageProcessor(size={"height": 28, "width": 28}, image_grid_pinpoints=ONEVISION_PINPOINTS)
    video_processor = LlavaOnevisionVideoProcessor(size={"height": 28, "width": 28})
    processor = LlavaOnevisionProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        num_image_tokens=4,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        chat_template=LLAVA_ONEVISION_TEMPLATE,
    )
    return finish(model, processor, folder)


# -- Idefics3 (Llama 3) ------------------------------------------------------------------------


def build_idefics3(folder: Path) -> Path:
    """HuggingFaceM4/Idefics3-8B-Llama3: SigLIP-like tower, pixel shuffle, Llama 3. Images are
    split into 32 px tiles (up to 2×2 here) plus the global image, 4 tokens each. Llama 3's
    tokenizer adds ``<|begin_of_text|>`` and the template writes it too (the model card's
    ``apply_chat_template(tokenize=True)`` then tokenizes without special tokens)."""
    tokenizer = tiny_tokenizer(
        special_tokens=["<|reserved_special_token_0|>", *IDEFICS3_TOKENS],
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        pad="<|reserved_special_token_0|>",
        add_bos=True,
        style="byte_level",
        chat_template=IDEFICS3_TEMPLATE,
    )
    text = LlamaConfig(**text_kwargs(tokenizer))
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(**vision_kwargs(32, 8)).to_dict(),
        text_config=text.to_dict(),
        image_token_id=token_id(tokenizer, "<image>"),
        scale_factor=2,
        **{"pad_token_id": tokenizer.pad_token_id},
    )
    model = Idefics3ForConditionalGeneration(config)
    image_processor = Idefics3ImageProcessor(do_image_splitting=True, size={"longest_edge": 64}, max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4, chat_template=IDEFICS3_TEMPLATE)
    return finish(model, processor, folder)


# -- SmolVLM (SmolLM2) -------------------------------------------------------------------------


def build_smolvlm(folder: Path) -> Path:
    """SmolVLM in transformers' SmolVLM classes (as SmolVLM2 ships; SmolVLM-Instruct itself was
    saved as Idefics3) with SmolVLM-Instruct's template and tokenizer: GPT-2-style byte-level
    BPE, no BOS added (the template writes ``<|im_start|>``), ``<end_of_utterance>`` EOS,
    ``<|im_end|>`` pad. Image splitting as Idefics3's."""
    tokenizer = tiny_tokenizer(
        special_tokens=["<|endoftext|>", *IDEFICS3_TOKENS, "<video>"],
        bos="<|im_start|>",
        eos="<end_of_utterance>",
        pad="<|im_end|>",
        style="byte_level",
        chat_template=SMOLVLM_TEMPLATE,
        extra_special_tokens={
            "image_token": "<image>",
            "fake_image_token": "<fake_token_around_image>",
            "global_image_token": "<global-img>",
            "end_of_utterance_token": "<end_of_utterance>",
        },
    )
    text = LlamaConfig(**text_kwargs(tokenizer))
    config = SmolVLMConfig(
        vision_config=SmolVLMVisionConfig(**vision_kwargs(32, 8)).to_dict(),
        text_config=text.to_dict(),
        image_token_id=token_id(tokenizer, "<image>"),
        scale_factor=2,
        **{"pad_token_id": tokenizer.pad_token_id},
    )
    model = SmolVLMForConditionalGeneration(config)
    edge = {"longest_edge": 32}
    image_processor = SmolVLMImageProcessor(do_image_splitting=True, size={"longest_edge": 64}, max_image_size=edge)
    video_processor = SmolVLMVideoProcessor(size=edge, max_image_size=edge)
    processor = SmolVLMProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor, image_seq_len=4, chat_template=SMOLVLM_TEMPLATE)
    return finish(model, processor, folder)


# -- Aya Vision (Command R7B / Cohere2) ---------------------------------------------------------

AYA_TOKENS = [
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|CHATBOT_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    "<image>",
    "<|START_OF_IMG|>",
    "<|END_OF_IMG|>",
    "<|IMG_PATCH|>",
    "<|IMG_LINE_BREAK|>",
    "TILE",
    "TILE_GLOBAL",
]


def build_aya_vision(folder: Path) -> Path:
    """CohereForAI/aya-vision-8b: SigLIP + pixel-shuffle SwiGLU projector + Cohere2. Cohere's
    tokenizer is byte-level and adds ``<BOS_TOKEN>`` (the template writes it too); images are
    GOT-OCR2 tiles of 28 px (up to 2 plus a thumbnail here, 12 released), 4 patch tokens each."""
    tokenizer = tiny_tokenizer(
        special_tokens=AYA_TOKENS,
        bos="<BOS_TOKEN>",
        eos="<|END_OF_TURN_TOKEN|>",
        pad="<PAD>",
        unk="<UNK>",
        add_bos=True,
        style="byte_level",
        chat_template=AYA_VISION_TEMPLATE,
    )
    text = Cohere2Config(**text_kwargs(tokenizer), sliding_window=4096, layer_types=["sliding_attention", "full_attention"])
    config = AyaVisionConfig(
        vision_config=SiglipVisionConfig(**vision_kwargs(28, 7), vision_use_head=False),
        text_config=text,
        downsample_factor=2,
        image_token_index=token_id(tokenizer, "<|IMG_PATCH|>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        # read by the projector with getattr, not a declared field (the released config sets it)
        **{"alignment_intermediate_size": HIDDEN * 2, "pad_token_id": tokenizer.pad_token_id},
    )
    model = AyaVisionForConditionalGeneration(config)
    image_processor = GotOcr2ImageProcessor(
        size={"height": 28, "width": 28},
        crop_to_patches=False,
        min_patches=1,
        max_patches=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    processor = AyaVisionProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=14, img_size=28, downsample_factor=1, chat_template=AYA_VISION_TEMPLATE)
    return finish(model, processor, folder)


# -- Mistral3 (Mistral-Small-3.1: Pixtral vision) ---------------------------------------------

MISTRAL3_TOKENS = ["[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]


def build_mistral3(folder: Path) -> Path:
    """mistralai/Mistral-Small-3.1-24B-Instruct-2503: Pixtral vision (2D RoPE, any aspect
    ratio, 8 px patches here) merged 2×2 into Mistral. Tekken is a byte-level BPE; the HF
    tokenizer adds ``<s>`` and the template writes it too."""
    tokenizer = tiny_tokenizer(
        special_tokens=MISTRAL3_TOKENS,
        bos="<s>",
        eos="</s>",
        pad="<pad>",
        unk="<unk>",
        add_bos=True,
        style="byte_level",
        chat_template=MISTRAL3_TEMPLATE,
        extra_special_tokens={"image_token": "[IMG]"},
    )
    vision = PixtralVisionConfig(hidden_size=HIDDEN, intermediate_size=HIDDEN * 2, num_hidden_layers=LAYERS, num_attention_heads=HEADS, image_size=32, patch_size=8)
    config = Mistral3Config(
        vision_config=vision,
        text_config=MistralConfig(**text_kwargs(tokenizer), sliding_window=None),
        image_token_index=token_id(tokenizer, "[IMG]"),
        spatial_merge_size=2,
        vision_feature_layer=-1,
        multimodal_projector_bias=False,
        tie_word_embeddings=False,
    )
    model = Mistral3ForConditionalGeneration(config)
    image_processor = PixtralImageProcessor(size={"longest_edge": 32}, patch_size={"height": 8, "width": 8})
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=8, spatial_merge_size=2, chat_template=MISTRAL3_TEMPLATE)
    return finish(model, processor, folder)


FAMILIES: list[Family] = [
    Family("llava-1.5", build_llava_15, notes="CLIP + Llama (Vicuna); metaspace tokenizer with BOS; trained on one image a prompt, takes several"),
    Family("llava-next", build_llava_next, notes="CLIP + Mistral, anyres tiling; [INST] template without a generation prompt"),
    Family(
        "llava-onevision",
        build_llava_onevision,
        notes="SigLIP + Qwen2, anyres_max_9 (several images: base tile only); byte-level, no BOS",
        vllm=OnVllm(
            two_images="differs",
            reason="vLLM tiles every image of a multi-image prompt (anyres); transformers' processor gives each image of a multi-image sample one base view, as the family was trained",
        ),
    ),
    Family("idefics3", build_idefics3, notes="image splitting; Llama 3 tokenizer adds BOS and the template writes it"),
    Family("smolvlm", build_smolvlm, notes="SmolVLM classes with SmolVLM-Instruct's template; image splitting; no BOS added"),
    Family(
        "aya-vision",
        build_aya_vision,
        notes="GOT-OCR2 tiling; chat template reconstructed (released one not available offline)",
        vllm=OnVllm(
            outcome="differs",
            reason="vLLM multiplies the logits by the Cohere2 text config's logit_scale, transformers' AyaVisionForConditionalGeneration does not: other probabilities, the same ranking",
        ),
    ),
    Family("mistral3", build_mistral3, notes="Pixtral vision; default system prompt with today's date; tokenizer adds BOS and the template writes it"),
]
