"""The Qwen lineage: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, and the two families built on its
tokenizer or its M-RoPE vision design, InternVL (transformers-native, InternVL3-hf) and
GLM-4.1V/4.5V (``glm4v``).

Every checkpoint is random weights in the family's own classes: its config, model,
processor, image processor and video processor, a tiny byte-level tokenizer holding the
released tokenizer's special tokens (none of them adds BOS: Qwen's and GLM's do not; GLM's
template writes ``[gMASK]<sop>`` itself), and the released checkpoint's chat template.
Text towers are 64 wide with 32-wide heads (vLLM's CPU kernels refuse 16); image sizes
are capped so an image is at most 16 image tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import (
    GenerationConfig,
    Glm4vConfig,
    Glm4vForConditionalGeneration,
    Glm4vImageProcessor,
    Glm4vProcessor,
    Glm4vVideoProcessor,
    GotOcr2ImageProcessor,
    InternVLConfig,
    InternVLForConditionalGeneration,
    InternVLProcessor,
    InternVLVideoProcessor,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from model_families.common import Family, save_checkpoint, tiny_tokenizer

# -- chat templates (the released checkpoints' chat_template, verbatim) ---------------------

#: Qwen/Qwen2-VL-7B-Instruct's chat_template.json; Qwen/Qwen2.5-VL-7B-Instruct ships the same
#: string. Default system prompt "You are a helpful assistant." when none is given.
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Qwen/Qwen3-VL-*-Instruct's chat_template.json (no default system prompt; tools; images in
#: user and tool turns).
QWEN3_VL_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""  # noqa: E501 (the released template, verbatim)

#: OpenGVLab/InternVL3-*-hf's chat template (transformers' convert_internvl_weights_to_hf.py,
#: which wrote the -hf checkpoints): ChatML, ``<IMG_CONTEXT>\n`` per image (the processor
#: expands it to ``<img>`` + image_seq_length x ``<IMG_CONTEXT>`` per tile + ``</img>``), no
#: default system prompt.
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}"
    "{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{'<|im_end|>\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\n' }}"
    "{% endif %}"
)

#: zai-org/GLM-4.1V-9B-Thinking's chat_template ([gMASK]<sop> written by the template).
GLM4V_CHAT_TEMPLATE = r"""[gMASK]<sop>
{%- for msg in messages %}
    {%- if msg.role == 'system' %}
<|system|>
{{ msg.content }}
    {%- elif msg.role == 'user' %}
<|user|>{{ '\n' }}

        {%- if msg.content is string %}
{{ msg.content }}
        {%- else %}
            {%- for item in msg.content %}
                {%- if item.type == 'video' or 'video' in item %}
<|begin_of_video|><|video|><|end_of_video|>
                {%- elif item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>
                {%- elif item.type == 'text' %}
{{ item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
    {%- elif msg.role == 'assistant' %}
        {%- if msg.metadata %}
<|assistant|>{{ msg.metadata }}
{{ msg.content }}
        {%- else %}
<|assistant|>
{{ msg.content }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}<|assistant|>
{% endif %}"""

# -- tokenizers ------------------------------------------------------------------------------

#: The added tokens of Qwen2-VL's tokenizer (ids 151643-151656 in the release, in this order).
QWEN2_VL_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
#: Qwen2.5-VL's tokenizer (Qwen2.5's) adds tool-call and fill-in-the-middle tokens.
QWEN2_5_VL_SPECIAL_TOKENS = QWEN2_VL_SPECIAL_TOKENS + [
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
#: Qwen3-VL's tokenizer (Qwen3's) adds tool-response and thinking tokens.
QWEN3_VL_SPECIAL_TOKENS = QWEN2_5_VL_SPECIAL_TOKENS + ["<tool_response>", "</tool_response>", "<think>", "</think>"]
#: InternVL3-hf's tokenizer: Qwen2.5-VL's plus InternVL's image and grounding tokens.
INTERNVL_SPECIAL_TOKENS = QWEN2_5_VL_SPECIAL_TOKENS + ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>"]
#: GLM-4.1V's tokenizer (GLM-4's added tokens).
GLM4V_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|begin_of_transcription|>",
    "<|end_of_transcription|>",
    "<|code_prefix|>",
    "<|code_middle|>",
    "<|code_suffix|>",
    "/nothink",
    "<think>",
    "</think>",
    "<|image|>",
    "<|video|>",
    "<|begin_of_box|>",
    "<|end_of_box|>",
]


def qwen_tokenizer(special_tokens: list[str], chat_template: str, extra_special_tokens: dict[str, str] | None = None) -> PreTrainedTokenizerFast:
    """Qwen's tokenizer settings: byte-level BPE, no BOS, EOS ``<|im_end|>`` (the instruct
    checkpoints'), pad ``<|endoftext|>``."""
    return tiny_tokenizer(
        special_tokens=special_tokens,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        style="byte_level",
        chat_template=chat_template,
        extra_special_tokens=extra_special_tokens,
    )


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int) or found == tokenizer.unk_token_id:
        raise ValueError(f"{token!r} is not in the tokenizer")
    return found


def qwen_vision_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    return {
        "image_token_id": token_id(tokenizer, "<|image_pad|>"),
        "video_token_id": token_id(tokenizer, "<|video_pad|>"),
        "vision_start_token_id": token_id(tokenizer, "<|vision_start|>"),
        "vision_end_token_id": token_id(tokenizer, "<|vision_end|>"),
    }


def qwen_text_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """The text config's ids as the released configs set them: BOS ``<|endoftext|>`` (which
    the tokenizer never adds), EOS ``<|im_end|>``, pad ``<|endoftext|>``."""
    return {
        "vocab_size": len(tokenizer),
        "bos_token_id": token_id(tokenizer, "<|endoftext|>"),
        "eos_token_id": token_id(tokenizer, "<|im_end|>"),
        "pad_token_id": token_id(tokenizer, "<|endoftext|>"),
    }


#: Tiny text tower: 64 wide, two 32-wide query heads over one KV head, 2 layers.
TEXT: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 2048}


def qwen_generation_ends(model: Any, tokenizer: PreTrainedTokenizerFast) -> Any:
    """The released generation_config's ends: ``<|im_end|>`` and ``<|endoftext|>``
    (Qwen2-VL, Qwen2.5-VL and Qwen3-VL all ship ``eos_token_id: [151645, 151643]``)."""
    end = token_id(tokenizer, "<|endoftext|>")
    model.generation_config = GenerationConfig(bos_token_id=end, pad_token_id=end, eos_token_id=[token_id(tokenizer, "<|im_end|>"), end])
    return model


def qwen_pixels(factor: int, tokens: int) -> int:
    """Pixels of ``tokens`` merged patches (``factor`` = patch size x merge size)."""
    return factor * factor * tokens


# -- builders --------------------------------------------------------------------------------


def build_qwen2_vl(folder: Path) -> Path:
    tokenizer = qwen_tokenizer(QWEN2_VL_SPECIAL_TOKENS, QWEN2_VL_CHAT_TEMPLATE)
    config = Qwen2VLConfig(
        text_config={**TEXT, **qwen_text_ids(tokenizer), "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]}},
        vision_config={"depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        **qwen_vision_ids(tokenizer),
    )
    model = qwen_generation_ends(Qwen2VLForConditionalGeneration(config).eval(), tokenizer)
    size = {"shortest_edge": qwen_pixels(28, 4), "longest_edge": qwen_pixels(28, 16)}
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2),
        video_processor=Qwen2VLVideoProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2),
        tokenizer=tokenizer,
        chat_template=QWEN2_VL_CHAT_TEMPLATE,
    )
    return save_checkpoint(model, processor, folder)


def build_qwen2_5_vl(folder: Path, text: dict[str, Any] = TEXT, max_image_tokens: int = 16) -> Path:
    """Qwen2.5-VL; ``text`` and ``max_image_tokens`` let a benchmark make it the size whose
    cost is a real model's (``benchmarks/bench_vllm.py --model qwen-size``)."""
    tokenizer = qwen_tokenizer(QWEN2_5_VL_SPECIAL_TOKENS, QWEN2_VL_CHAT_TEMPLATE)
    config = Qwen2_5_VLConfig(
        text_config={**text, **qwen_text_ids(tokenizer), "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]}},
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "out_hidden_size": text["hidden_size"],  # the merger projects into the text model
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
        **qwen_vision_ids(tokenizer),
    )
    model = qwen_generation_ends(Qwen2_5_VLForConditionalGeneration(config).eval(), tokenizer)
    size = {"shortest_edge": qwen_pixels(28, 4), "longest_edge": qwen_pixels(28, max_image_tokens)}
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2),
        video_processor=Qwen2VLVideoProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2),
        tokenizer=tokenizer,
        chat_template=QWEN2_VL_CHAT_TEMPLATE,
    )
    return save_checkpoint(model, processor, folder)


def build_qwen3_vl(folder: Path) -> Path:
    tokenizer = qwen_tokenizer(QWEN3_VL_SPECIAL_TOKENS, QWEN3_VL_CHAT_TEMPLATE)
    config = Qwen3VLConfig(
        text_config={
            **TEXT,
            **qwen_text_ids(tokenizer),
            "head_dim": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [6, 5, 5], "mrope_interleaved": True},
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        **qwen_vision_ids(tokenizer),
    )
    model = qwen_generation_ends(Qwen3VLForConditionalGeneration(config).eval(), tokenizer)
    size = {"shortest_edge": qwen_pixels(32, 4), "longest_edge": qwen_pixels(32, 16)}
    half = [0.5, 0.5, 0.5]
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size, patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=half, image_std=half),
        video_processor=Qwen3VLVideoProcessor(size=size, patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=half, image_std=half),
        tokenizer=tokenizer,
        chat_template=QWEN3_VL_CHAT_TEMPLATE,
    )
    return save_checkpoint(model, processor, folder)


def build_internvl(folder: Path) -> Path:
    """InternVL3-hf: InternViT (64-px tiles of 16-px patches, pixel shuffle 0.5: 4 tokens a
    tile) + Qwen2; the processor tiles each image (``crop_to_patches``) as released."""
    tokenizer = qwen_tokenizer(
        INTERNVL_SPECIAL_TOKENS,
        INTERNVL_CHAT_TEMPLATE,
        extra_special_tokens={"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"},
    )
    tile, patch, ratio = 64, 16, 0.5
    image_seq_length = int((tile // patch) ** 2 * ratio**2)
    config = InternVLConfig(
        text_config={"model_type": "qwen2", **TEXT, **qwen_text_ids(tokenizer), "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": True},
        vision_config={
            "hidden_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "image_size": [tile, tile],
            "patch_size": [patch, patch],
            "attention_bias": True,
            "use_qk_norm": False,
            "norm_type": "layer_norm",
            "use_absolute_position_embeddings": True,
            "use_mean_pooling": True,
        },
        image_token_id=token_id(tokenizer, "<IMG_CONTEXT>"),
        image_seq_length=image_seq_length,
        downsample_ratio=ratio,
        tie_word_embeddings=True,
    )
    model = InternVLForConditionalGeneration(config).eval()
    imagenet: dict[str, Any] = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size={"height": tile, "width": tile}, crop_to_patches=False, min_patches=1, max_patches=3, **imagenet),
        video_processor=InternVLVideoProcessor(size={"height": tile, "width": tile}, **imagenet),
        tokenizer=tokenizer,
        image_seq_length=image_seq_length,
        chat_template=INTERNVL_CHAT_TEMPLATE,
    )
    return save_checkpoint(model, processor, folder)


def build_glm4v(folder: Path) -> Path:
    tokenizer = tiny_tokenizer(special_tokens=GLM4V_SPECIAL_TOKENS, eos="<|endoftext|>", pad="<|endoftext|>", style="byte_level", chat_template=GLM4V_CHAT_TEMPLATE)
    config = Glm4vConfig(
        text_config={
            **TEXT,
            "vocab_size": len(tokenizer),
            "eos_token_id": [token_id(tokenizer, t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")],
            "pad_token_id": token_id(tokenizer, "<|endoftext|>"),
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3], "partial_rotary_factor": 0.5},
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 2,
            "out_hidden_size": 64,
            "image_size": 56,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=token_id(tokenizer, "<|image|>"),
        video_token_id=token_id(tokenizer, "<|video|>"),
        image_start_token_id=token_id(tokenizer, "<|begin_of_image|>"),
        image_end_token_id=token_id(tokenizer, "<|end_of_image|>"),
        video_start_token_id=token_id(tokenizer, "<|begin_of_video|>"),
        video_end_token_id=token_id(tokenizer, "<|end_of_video|>"),
    )
    model = Glm4vForConditionalGeneration(config).eval()
    # GLM's smart_resize counts the two temporal copies of an image: pixels are 2 x h x w.
    size = {"shortest_edge": 2 * qwen_pixels(28, 4), "longest_edge": 2 * qwen_pixels(28, 16)}
    clip: dict[str, Any] = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
    processor = Glm4vProcessor(
        # patch 14, merge 2, temporal 2: the image processor's class defaults
        image_processor=Glm4vImageProcessor(size=size, **clip),
        video_processor=Glm4vVideoProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2, **clip),
        tokenizer=tokenizer,
        chat_template=GLM4V_CHAT_TEMPLATE,
    )
    return save_checkpoint(model, processor, folder)


FAMILIES = [
    Family(name="qwen2-vl", build=build_qwen2_vl, notes="multimodal RoPE (a shared prefix's suffixes continue from its rope_deltas); byte-level, no BOS"),
    Family(name="qwen2.5-vl", build=build_qwen2_5_vl, notes="window attention in the vision tower; the Qwen2-VL template"),
    Family(name="qwen3-vl", build=build_qwen3_vl, notes="interleaved multimodal RoPE, DeepStack; no default system prompt"),
    Family(name="internvl", build=build_internvl, notes="GOT-OCR2 tiling (up to 3 tiles); Qwen2 text"),
    Family(name="glm-4v", build=build_glm4v, notes="multimodal RoPE; the template writes [gMASK]<sop>"),
]
