"""Serving the LLaVA world on vLLM: its text attention heads zero-padded to the width
vLLM's CPU attention runs, the same function."""

from __future__ import annotations

import json
from copy import deepcopy
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from transformers import LlamaConfig, LlavaForConditionalGeneration

if TYPE_CHECKING:
    from transformers import PreTrainedModel

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
    model_class: type[PreTrainedModel] = {"LlavaForConditionalGeneration": LlavaForConditionalGeneration, "LlamaForCausalLM": LlamaForCausalLM}[architecture]
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
