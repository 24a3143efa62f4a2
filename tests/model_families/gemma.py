"""Google's and Meta's multi-image lineages of the family matrix: PaliGemma (a fine-tune with
a chat template, and the base model as released, without one), Gemma 3, Llama 3.2 Vision
(Mllama) and Llama 4; each a tiny random-weight checkpoint in its own transformers classes
(see ``common.py``).

Phi-4-multimodal is left out: transformers' native ``phi4_multimodal`` is not in
``AutoModelForImageTextToText``'s mapping (only ``AutoModelForCausalLM``), so a checkpoint of it
cannot load through the path every family of the matrix is loaded by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import processors
from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3ImageProcessor,
    Gemma3Processor,
    Gemma3TextConfig,
    GemmaConfig,
    Llama4Config,
    Llama4ForConditionalGeneration,
    Llama4ImageProcessor,
    Llama4Processor,
    Llama4TextConfig,
    Llama4VisionConfig,
    MllamaConfig,
    MllamaForConditionalGeneration,
    MllamaImageProcessor,
    MllamaProcessor,
    MllamaTextConfig,
    MllamaVisionConfig,
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    PaliGemmaProcessor,
    PreTrainedTokenizerFast,
    SiglipImageProcessor,
    SiglipVisionConfig,
)
from transformers.models.mllama.image_processing_mllama import get_all_supported_aspect_ratios

from model_families.common import Family, OnVllm, save_checkpoint, tiny_tokenizer

# --------------------------------------------------------------------------- shared sizes

HIDDEN = 64
HEAD_DIM = 32
HEADS = HIDDEN // HEAD_DIM  # 2 heads of 32
INTERMEDIATE = 128
LAYERS = 2


def gemma_text_sizes() -> dict[str, Any]:
    return dict(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        head_dim=HEAD_DIM,
        max_position_embeddings=512,
    )


def siglip_vision(image_size: int, patch_size: int) -> SiglipVisionConfig:
    return SiglipVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        image_size=image_size,
        patch_size=patch_size,
        # as released (PaliGemma, Gemma3): the pooling head is not part of the VLM
        vision_use_head=False,
    )


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    ids = tokenizer.convert_tokens_to_ids(token)
    assert isinstance(ids, int) and ids != tokenizer.unk_token_id, token
    return ids


# --------------------------------------------------------------------------- PaliGemma

PALIGEMMA_IMAGE = 32
PALIGEMMA_PATCH = 16  # (32 / 16)² = 4 image tokens an image
PALIGEMMA_INIT_RANGE = 0.2
#: A Gemma-style turn template as teams add to a PaliGemma fine-tune (PaliGemma is released
#: without one): every image of the conversation first (PaliGemma's prefix is images, then
#: BOS, then text; the processor inserts BOS after the last ``<image>`` and appends "\n"),
#: then Gemma's turns. No ``{{ bos_token }}``: the processor adds BOS itself.
PALIGEMMA_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is not string -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<image>' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def restore_bos_post_processor(tokenizer: PreTrainedTokenizerFast) -> None:
    """PaliGemmaProcessor sets ``add_bos_token = False`` (it writes BOS into the text
    itself), which rewrites the backend's post-processor; the released tokenizer.json
    still adds BOS (as Gemma's does), and the processor turns it off again on every load.
    Put the released post-processor back before saving, bypassing the setter."""
    bos = tokenizer.bos_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_token_id)])


def build_paligemma_checkpoint(folder: Path, chat_template: str | None) -> Path:
    tokenizer = tiny_tokenizer(
        special_tokens=["<image>"],
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        unk="<unk>",
        add_bos=True,
        style="metaspace",
        extra_special_tokens={"image_token": "<image>"},
    )
    image_processor = SiglipImageProcessor(
        size={"height": PALIGEMMA_IMAGE, "width": PALIGEMMA_IMAGE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    image_processor.image_seq_length = (PALIGEMMA_IMAGE // PALIGEMMA_PATCH) ** 2
    # the processor adds PaliGemma's 1,024 <locXXXX> and 128 <segXXX> tokens: the vocabulary
    # is the tokenizer's length after it
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template)
    tokenizer = processor.tokenizer
    text = GemmaConfig(
        vocab_size=len(tokenizer),
        # wider random weights: with the default 0.02 the tied head, reading a residual stream
        # that Gemma's sqrt(hidden) embedding scale dominates, repeats the last prompt token
        # ("\n") for ever and every greedy generation decodes to ""
        initializer_range=PALIGEMMA_INIT_RANGE,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **gemma_text_sizes(),
    )
    config = PaliGemmaConfig(
        vision_config=siglip_vision(PALIGEMMA_IMAGE, PALIGEMMA_PATCH),
        text_config=text,
        image_token_index=token_id(tokenizer, "<image>"),
        vocab_size=len(tokenizer),
        projection_dim=HIDDEN,
        hidden_size=HIDDEN,
        initializer_range=PALIGEMMA_INIT_RANGE,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = PaliGemmaForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    restore_bos_post_processor(tokenizer)
    return save_checkpoint(model, processor, folder)


def build_paligemma(folder: Path) -> Path:
    return build_paligemma_checkpoint(folder, PALIGEMMA_CHAT_TEMPLATE)


def build_paligemma_base(folder: Path) -> Path:
    return build_paligemma_checkpoint(folder, None)


# --------------------------------------------------------------------------- Gemma 3

GEMMA3_IMAGE = 32
GEMMA3_PATCH = 8  # 4×4 patches, pooled to 2×2 = 4 soft tokens an image
GEMMA3_TOKENS_PER_IMAGE = 4
GEMMA3_SLIDING_WINDOW = 8
#: google/gemma-3-4b-it's chat_template (verbatim).
GEMMA3_CHAT_TEMPLATE = "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"  # fmt: skip  # noqa: E501


def build_gemma3(folder: Path) -> Path:
    tokenizer = tiny_tokenizer(
        special_tokens=["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"],
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        unk="<unk>",
        add_bos=True,
        style="metaspace",
        chat_template=GEMMA3_CHAT_TEMPLATE,
        extra_special_tokens={"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"},
        # single pieces in Gemma's vocabulary; the processor frames each image with "\n\n"
        whole_tokens=["\n\n", "\n\n\n", "\n\n\n\n"],
    )
    image_processor = Gemma3ImageProcessor(
        size={"height": GEMMA3_IMAGE, "width": GEMMA3_IMAGE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, chat_template=GEMMA3_CHAT_TEMPLATE, image_seq_length=GEMMA3_TOKENS_PER_IMAGE)
    text = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, token_id(tokenizer, "<end_of_turn>")],
        query_pre_attn_scalar=HEAD_DIM,
        sliding_window=GEMMA3_SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        **gemma_text_sizes(),
    )
    config = Gemma3Config(
        vision_config=siglip_vision(GEMMA3_IMAGE, GEMMA3_PATCH),
        text_config=text,
        mm_tokens_per_image=GEMMA3_TOKENS_PER_IMAGE,
        boi_token_index=token_id(tokenizer, "<start_of_image>"),
        eoi_token_index=token_id(tokenizer, "<end_of_image>"),
        image_token_index=token_id(tokenizer, "<image_soft_token>"),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, token_id(tokenizer, "<end_of_turn>")],
    )
    model = Gemma3ForConditionalGeneration(config).eval()
    # gemma-3-4b-it's generation_config: ends at <eos> or <end_of_turn>
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, token_id(tokenizer, "<end_of_turn>")]
    return save_checkpoint(model, processor, folder)


# --------------------------------------------------------------------------- Llama 3.2 Vision (Mllama)

#: The special tokens of Llama 3.2 Vision's tokenizer the processor and template use.
LLAMA3_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|finetune_right_pad_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]
MLLAMA_TILE = 16
MLLAMA_PATCH = 8  # (16 / 8)² + 1 (class) = 5 vision tokens a tile
MLLAMA_MAX_TILES = 2
#: meta-llama/Llama-3.2-11B-Vision-Instruct's chat_template (verbatim).
MLLAMA_CHAT_TEMPLATE = '{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the system message, so we can slot it into the right place. #}\n{%- if messages[0][\'role\'] == \'system\' %}\n    {%- set system_message = messages[0][\'content\']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = "" %}\n{%- endif %}\n\n{#- Find out if there are any images #}\n{% set image_ns = namespace(has_images=false) %}      \n{%- for message in messages %}\n    {%- for content in message[\'content\'] %}\n        {%- if content[\'type\'] == \'image\' %}\n            {%- set image_ns.has_images = true %}\n        {%- endif %}\n    {%- endfor %}\n{%- endfor %}\n\n{#- Error out if there are images and system message #}\n{%- if image_ns.has_images and not system_message == "" %}\n    {{- raise_exception("Prompting with images is incompatible with system messages.") }}\n{%- endif %}\n\n{#- System message if there are no images #}\n{%- if not image_ns.has_images %}\n    {{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n    {%- if tools is not none %}\n        {{- "Environment: ipython\\n" }}\n    {%- endif %}\n    {{- "Cutting Knowledge Date: December 2023\\n" }}\n    {{- "Today Date: " + date_string + "\\n\\n" }}\n    {%- if tools is not none and not tools_in_user_message %}\n        {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n        {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n        {{- "Do not use variables.\\n\\n" }}\n        {%- for t in tools %}\n            {{- t | tojson(indent=4) }}\n            {{- "\\n\\n" }}\n        {%- endfor %}\n    {%- endif %}\n    {{- system_message }}\n    {{- "<|eot_id|>" }}\n{%- endif %}\n\n{#- Custom tools are passed in a user message with some extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0][\'content\']|trim %}\n        {%- set messages = messages[1:] %}\n    {%- else %}\n        {{- raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n{%- endif %}\n    {{- \'<|start_header_id|>user<|end_header_id|>\\n\\n\' -}}\n    {{- "Given the following functions, please respond with a JSON for a function call " }}\n    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n    {{- "Do not use variables.\\n\\n" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- "\\n\\n" }}\n    {%- endfor %}\n    {{- first_user_message + "<|eot_id|>"}}\n{%- endif %}\n\n{%- for message in messages %}\n    {%- if not (message.role == \'ipython\' or message.role == \'tool\' or \'tool_calls\' in message) %}\n    {{- \'<|start_header_id|>\' + message[\'role\'] + \'<|end_header_id|>\\n\\n\' }}\n        {%- if message[\'content\'] is string %}\n            {{- message[\'content\'] }}\n        {%- else %}\n            {%- for content in message[\'content\'] %}\n                {%- if content[\'type\'] == \'image\' %}\n                    {{- \'<|image|>\' }}\n                {%- elif content[\'type\'] == \'text\' %}\n                    {{- content[\'text\'] }}\n                {%- endif %}\n            {%- endfor %}\n        {%- endif %}\n        {{- \'<|eot_id|>\' }}\n    {%- elif \'tool_calls\' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n            {{- raise_exception("This model only supports single tool-calls at once!") }}\n        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n        {{- \'<|start_header_id|>assistant<|end_header_id|>\\n\\n\' -}}\n        {{- \'{"name": "\' + tool_call.name + \'", \' }}\n        {{- \'"parameters": \' }}\n        {{- tool_call.arguments | tojson }}\n        {{- "}" }}\n        {{- "<|eot_id|>" }}\n    {%- elif message.role == "tool" or message.role == "ipython" %}\n        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}\n        {%- if message.content is mapping or message.content is iterable %}\n            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n        {{- "<|eot_id|>" }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|start_header_id|>assistant<|end_header_id|>\\n\\n\' }}\n{%- endif %}\n'  # fmt: skip  # noqa: E501


def build_mllama(folder: Path) -> Path:
    """Llama 3.2 Vision: the text vocabulary is the tokenizer's less ``<|image|>``, which is the
    last id (128256 of 128257 in the release) and lives only in the 8 extra embedding rows
    (``vocab_size + 8``) that the text model keeps for it: the LM head never predicts it."""
    tokenizer = tiny_tokenizer(
        special_tokens=LLAMA3_SPECIAL_TOKENS,
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad="<|finetune_right_pad_id|>",
        add_bos=True,
        style="byte_level",
        chat_template=MLLAMA_CHAT_TEMPLATE,
    )
    text_vocab = len(tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|image|>"]})
    image_token = token_id(tokenizer, "<|image|>")
    assert image_token == text_vocab
    image_processor = MllamaImageProcessor(size={"height": MLLAMA_TILE, "width": MLLAMA_TILE}, max_image_tiles=MLLAMA_MAX_TILES)
    processor = MllamaProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=MLLAMA_CHAT_TEMPLATE)
    eos = [token_id(tokenizer, t) for t in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
    vision = MllamaVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=1,
        num_global_layers=1,
        attention_heads=HEADS,
        image_size=MLLAMA_TILE,
        patch_size=MLLAMA_PATCH,
        max_num_tiles=MLLAMA_MAX_TILES,
        supported_aspect_ratios=[list(ratio) for ratio in get_all_supported_aspect_ratios(MLLAMA_MAX_TILES)],
        intermediate_layers_indices=[0],
        vision_output_dim=HIDDEN * 2,  # the last layer's output and one intermediate layer's
    )
    text = MllamaTextConfig(
        vocab_size=text_vocab,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        cross_attention_layers=[1],
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = MllamaConfig(vision_config=vision, text_config=text, image_token_index=image_token)
    model = MllamaForConditionalGeneration(config).eval()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return save_checkpoint(model, processor, folder)


# --------------------------------------------------------------------------- Llama 4

#: The special tokens of Llama 4's tokenizer the processor and template use.
LLAMA4_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|header_start|>",
    "<|header_end|>",
    "<|eom|>",
    "<|eot|>",
    "<|python_start|>",
    "<|python_end|>",
    "<|finetune_right_pad|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|tile_x_separator|>",
    "<|tile_y_separator|>",
    "<|image|>",
    "<|patch|>",
]
LLAMA4_TILE = 16
LLAMA4_PATCH = 4  # (16 / 4)² patches, pixel-shuffled by 0.5: 4 <|patch|> tokens a tile
LLAMA4_MAX_PATCHES = 2  # tiles an image besides the global view
LLAMA4_CHUNK = 32
#: meta-llama/Llama-4-Scout-17B-16E-Instruct's chat_template (verbatim; transformers ships it
#: as Llama4Processor's default).
LLAMA4_CHAT_TEMPLATE = '{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the system message, so we can slot it into the right place. #}\n{%- if messages[0][\'role\'] == \'system\' %}    \n    {%- if messages[0][\'content\'] is string %}\n        {%- set system_message = messages[0][\'content\']|trim %}\n    {%- else %}\n        {#- FIXME: The processor requires an array, always. #}\n        {%- set system_message = messages[0][\'content\'][0][\'text\']|trim %}\n    {%- endif %}\n    {%- set messages = messages[1:] %}\n    {%- set user_supplied_system_message = true %}\n{%- else %}\n    {%- set system_message = "" %}\n    {%- set user_supplied_system_message = false %}\n{%- endif %}\n\n{#- System message if the user supplied one #}\n{%- if user_supplied_system_message %}\n    {{- "<|header_start|>system<|header_end|>\n\n" }}\n    {%- if tools is not none %}\n        {{- "Environment: ipython\n" }}\n    {%- endif %}\n    {%- if tools is not none and not tools_in_user_message %}\n        {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n        {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n        {{- "Do not use variables.\n\n" }}\n        {%- for t in tools %}\n            {{- t | tojson(indent=4) }}\n            {{- "\n\n" }}\n        {%- endfor %}\n    {%- endif %}\n    {{- system_message }}\n    {{- "<|eot|>" }}\n{%- endif %}\n\n{#- Custom tools are passed in a user message with some extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0][\'content\']|trim %}\n        {%- set messages = messages[1:] %}\n    {%- else %}\n        {{- raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n{%- endif %}\n    {{- \'<|header_start|>user<|header_end|>\n\n\' -}}\n    {{- "Given the following functions, please respond with a JSON for a function call " }}\n    {{- "with its proper arguments that best answers the given prompt.\n\n" }}\n    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n    {{- "Do not use variables.\n\n" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- "\n\n" }}\n    {%- endfor %}\n    {{- first_user_message + "<|eot|>"}}\n{%- endif %}\n\n{%- for message in messages %}\n    {%- if not (message.role == \'ipython\' or message.role == \'tool\' or \'tool_calls\' in message) %}\n    {{- \'<|header_start|>\' + message[\'role\'] + \'<|header_end|>\n\n\' }}\n        {%- if message[\'content\'] is string %}\n            {{- message[\'content\'] }}\n        {%- else %}\n            {%- for content in message[\'content\'] %}\n                {%- if content[\'type\'] == \'image\' %}\n                    {{- \'<|image|>\' }}\n                {%- elif content[\'type\'] == \'text\' %}\n                    {{- content[\'text\'] }}\n                {%- endif %}\n            {%- endfor %}\n        {%- endif %}\n        {{- "<|eot|>" }}\n    {%- elif \'tool_calls\' in message and message.tool_calls|length > 0 %}\n       {{- \'<|header_start|>assistant<|header_end|>\n\n\' -}}\n       {{- \'<|python_start|>\' }}\n        {%- if message[\'content\'] is string %}\n            {{- message[\'content\'] }}\n        {%- else %}\n            {%- for content in message[\'content\'] %}\n                {%- if content[\'type\'] == \'image\' %}\n                    {{- \'<|image|>\' }}\n                {%- elif content[\'type\'] == \'text\' %}\n                    {{- content[\'text\'] }}\n                {%- endif %}\n            {%- endfor %}\n        {%- endif %}\n       {{- \'<|python_end|>\' }}\n        {%- for tool_call in message.tool_calls %}\n           {{- \'{"name": "\' + tool_call.function.name + \'", \' }}\n           {{- \'"parameters": \' }}\n           {{- tool_call.function.arguments | tojson }}\n           {{- "}" }}\n        {%- endfor %}\n       {{- "<|eot|>" }}\n    {%- elif message.role == "tool" or message.role == "ipython" %}\n        {{- "<|header_start|>ipython<|header_end|>\n\n" }}\n        {%- if message.content is mapping or message.content is iterable %}\n            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n        {{- "<|eot|>" }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|header_start|>assistant<|header_end|>\n\n\' }}\n{%- endif %}\n'  # fmt: skip  # noqa: E501


def build_llama4(folder: Path) -> Path:
    """Llama 4 Scout in miniature: 2 experts (one routed a token) in every layer, layer 0 chunked
    attention with RoPE (chunk of 16 tokens, shorter than the prompts), layer 1 global attention
    without RoPE, as Scout interleaves them. The image's features replace its ``<|patch|>``
    tokens (``image_token_index``); ``<|image|>`` marks the global view."""
    tokenizer = tiny_tokenizer(
        special_tokens=LLAMA4_SPECIAL_TOKENS,
        bos="<|begin_of_text|>",
        eos="<|eot|>",
        pad="<|finetune_right_pad|>",
        add_bos=True,
        style="byte_level",
        chat_template=LLAMA4_CHAT_TEMPLATE,
    )
    image_processor = Llama4ImageProcessor(size={"height": LLAMA4_TILE, "width": LLAMA4_TILE}, max_patches=LLAMA4_MAX_PATCHES)
    processor = Llama4Processor(image_processor=image_processor, tokenizer=tokenizer, patch_size=LLAMA4_PATCH, pixel_shuffle_ratio=0.5, chat_template=LLAMA4_CHAT_TEMPLATE)
    eos = [token_id(tokenizer, t) for t in ("<|end_of_text|>", "<|eom|>", "<|eot|>")]
    vision = Llama4VisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN * 4,  # the pixel-shuffled width: hidden / 0.5²
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        image_size=LLAMA4_TILE,
        patch_size=LLAMA4_PATCH,
        pixel_shuffle_ratio=0.5,
        projector_input_dim=HIDDEN,
        projector_output_dim=HIDDEN,
        vision_output_dim=HIDDEN,
    )
    text = Llama4TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        intermediate_size_mlp=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        head_dim=HEAD_DIM,
        num_local_experts=2,
        num_experts_per_tok=1,
        no_rope_layers=[1, 0],
        attention_chunk_size=LLAMA4_CHUNK,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = Llama4Config(
        vision_config=vision,
        text_config=text,
        boi_token_index=token_id(tokenizer, "<|image_start|>"),
        eoi_token_index=token_id(tokenizer, "<|image_end|>"),
        image_token_index=token_id(tokenizer, "<|patch|>"),
    )
    model = Llama4ForConditionalGeneration(config).eval()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return save_checkpoint(model, processor, folder)


#: vLLM's CPU attention has no prefix-LM mask; Gemma3 and PaliGemma attend bidirectionally over image tokens.
BIDIRECTIONAL_IMAGES = OnVllm(
    outcome="refused",
    reason="attends bidirectionally over image tokens, which vLLM's CPU attention cannot (it would attend causally); GPU attention backends with mm-prefix support can",
    evidence=r"attends bidirectionally over image tokens, which vLLM's CPU attention does not",
)

FAMILIES: list[Family] = [
    Family(
        "paligemma",
        build_paligemma,
        notes="a fine-tune's Gemma-style turn template (the release has none); the processor adds BOS and a final newline",
        vllm=BIDIRECTIONAL_IMAGES,
    ),
    Family(
        "paligemma-base",
        build_paligemma_base,
        notes="as released: no chat template; prompted as its card does, the processor placing the image tokens",
        vllm=OnVllm(
            outcome="refused",
            reason="no chat template, which vlgate's vLLM backend renders every prompt with; it also attends bidirectionally over image tokens, as PaliGemma does",
            evidence=r"its processor has no chat template",
        ),
    ),
    Family(
        "gemma3",
        build_gemma3,
        notes=f"sliding window {GEMMA3_SLIDING_WINDOW} tokens (shorter than the prompts), one sliding and one full layer",
        vllm=BIDIRECTIONAL_IMAGES,
    ),
    Family(
        "mllama",
        build_mllama,
        notes="Llama 3.2 Vision: images through cross-attention (layer 1), up to 2 tiles an image",
        vllm=OnVllm(
            outcome="fails",
            reason="vLLM 0.32's Mllama glue calls MllamaProcessor._get_num_multimodal_tokens, which the transformers it allows (<5.20) lacks",
            evidence=r"'MllamaProcessor' object has no attribute '_get_num_multimodal_tokens'",
        ),
    ),
    Family(
        "llama4",
        build_llama4,
        notes=f"Scout-style MoE (2 experts), chunked attention of {LLAMA4_CHUNK} tokens; its image processor returns bf16 pixels, cast to the model's dtype",
        vllm=OnVllm(
            outcome="fails",
            reason="vLLM's CPU matrix multiply (oneDNN) refuses the vision patch embedding's non-contiguous input",
            evidence=r"Expected a\.stride\(-1\) == 1",
            # the chunk must be a whole number of KV blocks, which are multiples of 32 on the CPU
            engine={"block_size": LLAMA4_CHUNK},
        ),
    ),
]
