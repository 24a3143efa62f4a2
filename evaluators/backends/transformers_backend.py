"""The transformers backend: VLMs through ``AutoModelForImageTextToText``/``AutoProcessor``,
text-only LLMs (DeCC's LLM agent) through ``AutoModelForCausalLM``/``AutoTokenizer``.

- Chat templates come from the checkpoint; prompts are the user turn, images first. They
  are rendered in a child process with time, memory and size limits (``chat_templates.py``):
  a template is the checkpoint author's program.
- :meth:`choice_probs` reads the next-token distribution at the assistant turn
  (``logits_to_keep=1``, one forward pass) and sums the probabilities of every token
  that spells each option (``A``/`` A``/``a``...), then renormalises over the options.
- Requests that repeat a prefix (VL-LCM's K yes/no probes of one sample: same image,
  same question) are scored from one cached prefix: the image and question run once, the
  K suffixes run as one batch on a copy of the prefix's KV cache. The tokenisation is
  checked to split exactly at the prefix; where it would not, the requests run whole.
- CUDA with bf16 when present, fp32 on CPU; batches are left-padded.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlgate.evaluators.backends.base import MODEL_LOAD_LOCK, BackendError, BackendInfo, ChoiceRequest, GenerateRequest, VisionLanguageBackend, default_device, renormalise
from vlgate.evaluators.backends.chat_templates import renderer_for, user_turn
from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model
from vlgate.evaluators.backends.options import option_token_ids


class TransformersBackend(VisionLanguageBackend):
    """One loaded transformers model. Use :meth:`load`."""

    def __init__(
        self, model: Any, processor: Any, tokenizer: Any, info: BackendInfo, has_vision: bool, batch_size: int = 16, policy: LoadPolicy = LoadPolicy()
    ):
        self.model, self.processor, self.tokenizer = model, processor, tokenizer
        self.info, self.has_vision, self.batch_size = info, has_vision, batch_size
        self.device = next(model.parameters()).device
        self._option_ids: dict[tuple[str, ...], list[list[int]]] = {}
        self.template = renderer_for(info.model, [processor], tokenizer, policy)

    @classmethod
    def load(
        cls,
        reference: str | Path,
        policy: LoadPolicy = LoadPolicy(),
        device: str | None = None,
        batch_size: int = 16,
        cache_dir: Path | None = None,
    ) -> TransformersBackend:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

        with MODEL_LOAD_LOCK:
            path = resolve_model(reference, cache_dir, policy)
            check_checkpoint(path, policy)
            device = device or default_device()
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            common = {"trust_remote_code": policy.trust_remote_code}
            try:
                config = AutoConfig.from_pretrained(path, **common)
                has_vision = hasattr(config, "vision_config")
                loader = AutoModelForImageTextToText if has_vision else AutoModelForCausalLM
                model = loader.from_pretrained(path, dtype=dtype, use_safetensors=not policy.allow_pickle, **common).to(device).eval()  # type: ignore[arg-type]  # transformers types .to() as taking a model
                processor = AutoProcessor.from_pretrained(path, **common) if has_vision else AutoTokenizer.from_pretrained(path, **common)
            except (OSError, ValueError, KeyError) as error:
                raise BackendError(f"model {reference}: transformers could not load it from {path}: {error}") from error
        tokenizer = processor.tokenizer if has_vision else processor
        tokenizer.padding_side = "left"  # the answer position is the last one in every row
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        info = BackendInfo(
            name="transformers",
            model=str(reference),
            digest=model_digest(path),
            device=device,
            extra={"architecture": type(model).__name__, "dtype": str(dtype).removeprefix("torch."), "path": str(path)},
        )
        return cls(model, processor, tokenizer, info, has_vision, batch_size, policy)

    # -- prompts ---------------------------------------------------------------------------

    def chat_text(self, prompt: str, n_images: int) -> str:
        """The user turn (images first, then the text) through the checkpoint's chat template."""
        return user_turn(self.template, prompt, n_images, self.info.model, self.has_vision)

    def _encode(self, texts: list[str], images: list[list[Any]]) -> dict[str, torch.Tensor]:
        flat = [image for row in images for image in row]
        if flat:
            if not self.has_vision:
                raise BackendError(f"model {self.info.model} is text-only but a request has images")
            inputs = self.processor(images=flat, text=texts, return_tensors="pt", padding=True)
        else:
            inputs = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not self.has_vision)
        return {key: value.to(self.device) for key, value in inputs.items()}

    # -- choice probabilities --------------------------------------------------------------

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        results: list[np.ndarray | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for index, request in enumerate(requests):
            if request.shared_prefix and request.prompt.startswith(request.shared_prefix):
                groups[(request.shared_prefix, tuple(id(image) for image in request.images))].append(index)
        shared = [indices for indices in groups.values() if len(indices) > 1]
        done = set()
        for start in range(0, len(shared), self.batch_size):
            group_chunk = shared[start : start + self.batch_size]
            for indices, scored in zip(group_chunk, self._shared_prefix_probs([[requests[i] for i in indices] for indices in group_chunk])):
                if scored is not None:
                    for index, probs in zip(indices, scored):
                        results[index] = probs
                    done.update(indices)
        rest = [i for i in range(len(requests)) if i not in done]
        for start in range(0, len(rest), self.batch_size):
            chunk = rest[start : start + self.batch_size]
            for index, probs in zip(chunk, self._whole_prompt_probs([requests[i] for i in chunk])):
                results[index] = probs
        return results  # type: ignore[return-value]

    def _option_distribution(self, last_logits: torch.Tensor, options: tuple[str, ...]) -> np.ndarray:
        if options not in self._option_ids:
            self._option_ids[options] = option_token_ids(self.tokenizer, options)
        probabilities = torch.softmax(last_logits.float(), dim=-1)
        return renormalise(np.array([float(probabilities[ids].sum()) for ids in self._option_ids[options]]))

    @torch.no_grad()
    def _whole_prompt_probs(self, requests: list[ChoiceRequest]) -> list[np.ndarray]:
        texts = [self.chat_text(r.prompt, len(r.images)) for r in requests]
        inputs = self._encode(texts, [list(r.images) for r in requests])
        logits = self.model(**inputs, logits_to_keep=1).logits[:, -1, :]
        return [self._option_distribution(row, r.options) for row, r in zip(logits, requests)]

    def _text_ids(self, text: str) -> torch.Tensor:
        # The tokenizer alone: the split only needs token ids, and the processor would also
        # preprocess the images again for every request of the group (the image tokens it
        # inserts all lie in the prefix, so the suffixes' ids are the same either way).
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=not self.has_vision)["input_ids"][0]

    def _split_at_prefix(self, requests: list[ChoiceRequest]) -> tuple[str, list[torch.Tensor]] | None:
        """The group's common chat-text prefix (cut at a word boundary, after every image
        placeholder) and each request's token ids after it; None when the tokeniser merges
        across the cut."""
        images = list(requests[0].images)
        texts = [self.chat_text(r.prompt, len(images)) for r in requests]
        prefix_text = os.path.commonprefix(texts)
        cut = max(prefix_text.rfind(" "), prefix_text.rfind("\n"))
        if cut <= 0:
            return None
        prefix_text = prefix_text[:cut]
        placeholder = getattr(self.processor, "image_token", None) if self.has_vision else None
        if placeholder and any(placeholder in text[cut:] for text in texts):
            return None  # an image placeholder after the cut: its expansion would land in a suffix
        prefix_ids = self._text_ids(prefix_text)
        suffixes = []
        for text in texts:
            full_ids = self._text_ids(text)
            if len(full_ids) <= len(prefix_ids) or not torch.equal(full_ids[: len(prefix_ids)], prefix_ids):
                return None
            suffixes.append(full_ids[len(prefix_ids) :])
        return prefix_text, suffixes

    @torch.no_grad()
    def _shared_prefix_probs(self, groups: list[list[ChoiceRequest]]) -> list[list[np.ndarray] | None]:
        """Every group's prefix in one left-padded forward pass, then every suffix of every
        group in a second one, each suffix row attending to its group's rows of the cache.
        A group whose tokenisation does not split cleanly at the prefix gets None."""
        splits = [self._split_at_prefix(group) for group in groups]
        usable = [g for g, split in enumerate(splits) if split is not None]
        results: list[list[np.ndarray] | None] = [None] * len(groups)
        if not usable:
            return results
        split_of = {g: split for g, split in enumerate(splits) if split is not None}
        prefix = self._encode([split_of[g][0] for g in usable], [list(groups[g][0].images) for g in usable])
        cache = self.model(**prefix, use_cache=True).past_key_values
        prefix_mask, prefix_length = prefix["attention_mask"], prefix["attention_mask"].shape[1]
        rows = [(position, suffix) for position, g in enumerate(usable) for suffix in split_of[g][1]]
        cache.reorder_cache(torch.tensor([position for position, _ in rows], device=self.device))
        width = max(len(suffix) for _, suffix in rows)
        # right padding here: each suffix must follow its prefix directly in the cache
        suffix_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((len(rows), prefix_length + width), dtype=torch.long, device=self.device)
        for row, (position, suffix) in enumerate(rows):
            suffix_ids[row, : len(suffix)] = suffix
            mask[row, :prefix_length] = prefix_mask[position]
            mask[row, prefix_length : prefix_length + len(suffix)] = 1
        logits = self.model(input_ids=suffix_ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits
        last = torch.tensor([len(suffix) - 1 for _, suffix in rows], device=self.device)
        final = logits[torch.arange(len(rows), device=self.device), last]
        row = 0
        for g in usable:
            scored = []
            for request in groups[g]:
                scored.append(self._option_distribution(final[row], request.options))
                row += 1
            results[g] = scored
        return results

    # -- generation ------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        outputs: list[str] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start : start + self.batch_size]
            texts = [self.chat_text(r.prompt, len(r.images)) for r in chunk]
            inputs = self._encode(texts, [list(r.images) for r in chunk])
            max_new = max(r.max_new_tokens for r in chunk)
            generated = self.model.generate(**inputs, max_new_tokens=max_new, do_sample=False, pad_token_id=self.tokenizer.pad_token_id)
            new_tokens = generated[:, inputs["input_ids"].shape[1] :]
            for request, row in zip(chunk, new_tokens):
                outputs.append(self.tokenizer.decode(row[: request.max_new_tokens], skip_special_tokens=True).strip())
        return outputs

    def close(self) -> None:
        self.model = None
        if self.template is not None:
            self.template.close()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

