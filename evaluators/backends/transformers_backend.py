"""The transformers backend: VLMs through ``AutoModelForImageTextToText``/``AutoProcessor``,
text-only LLMs (DeCC's LLM agent) through ``AutoModelForCausalLM``/``AutoTokenizer``.

Every request is tokenised the way the model card's path does it
(``processor.apply_chat_template(..., tokenize=True)``), so the numbers are the model's own:

- Chat templates come from the checkpoint; prompts are the user turn, images first. They
  are rendered in a child process with time, memory and size limits (``chat_templates.py``):
  a template is the checkpoint author's program. A VLM released without a template
  (PaliGemma's base checkpoints) gets the bare prompt when its processor places the image
  tokens itself, as its card prompts it; any other VLM without one is refused.
- Special tokens: a rendered text that already begins with BOS is encoded without the
  tokenizer's own (``apply_chat_template`` does the same: Gemma 3's, Llama 3's and
  Idefics3's templates write BOS themselves); a text-only LLM's templated text is encoded
  without special tokens, as the tokenizer's ``apply_chat_template`` encodes it.
- Images go to the processor per sample (a list per request), never as one flat list: the
  processors of Gemma 3, Mllama, SmolVLM and LLaVA-OneVision read a flat list as one
  sample's images. A batch holds requests with the same number of images.
- :meth:`choice_probs` reads the next-token distribution at the assistant turn
  (``logits_to_keep=1``, one forward pass) and sums the probabilities of every token
  that spells each option (``A``/`` A``/``a``...), then renormalises over the options.
- Requests that repeat a prefix (VL-LCM's K yes/no probes of one sample: same image,
  same question) may be scored from one cached prefix: the image and question run once,
  the K suffixes run as one batch on a copy of the prefix's KV cache. That is an
  optimisation that must be exact or not used (:class:`PrefixSharing`): the first groups
  it scores are also scored whole, and a difference past the dtype's tolerance, or any
  error, turns it off for good with a logged reason (PaliGemma's prompt attends
  bidirectionally, so a split prompt is not the same prompt). In half precision the
  tolerance is what batching alone moves the same requests, twice over.
- CUDA with bf16 when present, fp32 on CPU; batches are left-padded.
"""

from __future__ import annotations

import copy
import logging
import os
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from vlgate.evaluators.backends.base import MODEL_LOAD_LOCK, BackendError, BackendInfo, ChoiceRequest, GenerateRequest, TurnPart, VisionLanguageBackend, default_device, renormalise
from vlgate.evaluators.backends.chat_templates import adds_special_tokens, renderer_for, user_turn
from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model
from vlgate.evaluators.backends.options import option_token_ids

if TYPE_CHECKING:
    from transformers import GenerationMixin, PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin

    class GenerativeModel(PreTrainedModel, GenerationMixin):
        """What ``AutoModelForImageTextToText`` and ``AutoModelForCausalLM`` load (for typing only)."""

logger = logging.getLogger(__name__)

#: Per-token inputs a processor returns besides the ids and the mask (Gemma 3's and
#: PaliGemma's token types, Qwen-VL's multimodal token types, Mllama's cross-attention
#: mask). A text suffix after the prefix continues each with the prefix's last position.
PER_TOKEN_INPUTS = ("token_type_ids", "mm_token_type_ids", "cross_attention_mask")
#: Inputs a processor returns for training only (PaliGemma's ``labels``).
TRAINING_ONLY_INPUTS = ("labels",)
#: How far the shared-prefix path may be from the whole prompt's in full precision: fp32
#: noise between two orders of the same sums is 1e-7 to 1e-6.
PREFIX_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9}
#: In half precision nothing is exact: the same prompts batched with other neighbours move
#: a random-weight 7B LLaVA's option probabilities by up to 0.05 in bf16 (H200). There the
#: split prompt may differ from the whole one by twice what batching alone moves them on
#: the same requests, and never less than this floor.
HALF_PRECISION_FLOOR = 1e-3
#: Groups of the first shared-prefix batch that are also scored whole, to check the path.
PREFIX_CHECK_GROUPS = 2
#: Word boundaries tried, from the last one back, for a cut the tokenizer does not merge across.
PREFIX_CUT_TRIES = 8


@dataclass
class PrefixSharing:
    """Whether this model's shared-prefix path is used: ``None`` until it has been checked
    against the whole prompts, then ``True``, or ``False`` with the reason."""

    verified: bool | None = None
    reason: str = ""
    largest_difference: float = 0.0
    tolerance: float = 0.0


@dataclass(frozen=True)
class LoadedModel:
    """What transformers loads from one checkpoint, as the backend is built from it: the
    model, its processor (for a text-only LLM, its tokenizer), the tokenizer, and whether
    the model reads images. They travel together from :meth:`TransformersBackend.load`
    (or a benchmark's own build) into the backend."""

    model: GenerativeModel
    processor: ProcessorMixin | PreTrainedTokenizerBase
    tokenizer: PreTrainedTokenizerBase
    has_vision: bool


class TransformersBackend(VisionLanguageBackend):
    """One loaded transformers model. Use :meth:`load`."""

    def __init__(self, loaded: LoadedModel, info: BackendInfo, batch_size: int = 16, policy: LoadPolicy = LoadPolicy(), share_prefixes: bool = True):
        self.model: GenerativeModel | None = loaded.model  # None once closed
        self.processor, self.tokenizer = loaded.processor, loaded.tokenizer
        self.info, self.has_vision, self.batch_size = info, loaded.has_vision, batch_size
        self.device = next(loaded.model.parameters()).device
        self._option_ids: dict[tuple[str, ...], list[list[int]]] = {}
        self.template = renderer_for(info.model, [loaded.processor], loaded.tokenizer, policy)
        self.bare_prompts = self.template is None and loaded.has_vision and processor_places_images(loaded.processor)
        self.prefix_sharing = PrefixSharing() if share_prefixes else PrefixSharing(False, "turned off by the caller")

    @classmethod
    def load(
        cls,
        reference: str | Path,
        policy: LoadPolicy = LoadPolicy(),
        device: str | None = None,
        batch_size: int = 16,
        cache_dir: Path | None = None,
        dtype: torch.dtype | None = None,
        share_prefixes: bool = True,
    ) -> TransformersBackend:
        """Load ``reference`` (a folder, an MLflow URI or a Hub id); ``dtype`` defaults to
        bf16 on CUDA and fp32 elsewhere."""
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

        with MODEL_LOAD_LOCK:
            path = resolve_model(reference, cache_dir, policy)
            check_checkpoint(path, policy)
            device = device or default_device()
            dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
            common = {"trust_remote_code": policy.trust_remote_code}
            config = None
            try:
                config = AutoConfig.from_pretrained(path, **common)
                has_vision = hasattr(config, "vision_config")
                loader = AutoModelForImageTextToText if has_vision else AutoModelForCausalLM
                model = loader.from_pretrained(path, dtype=dtype, use_safetensors=not policy.allow_pickle, **common).to(device).eval()  # type: ignore[arg-type]  # transformers types .to() as taking a model
                processor = AutoProcessor.from_pretrained(path, **common) if has_vision else AutoTokenizer.from_pretrained(path, **common)
            except ImportError as error:  # a processor's torchvision, num2words, ...
                family = getattr(config, "model_type", "its family")
                raise BackendError(f"model {reference}: {family} needs a package this environment lacks: {error}") from error
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
        return cls(LoadedModel(model, processor, tokenizer, has_vision), info, batch_size, policy, share_prefixes)

    def plain_copy(self, batch_size: int = 1) -> TransformersBackend:
        """The same loaded model scored the plain way: whole prompts, no shared prefixes,
        ``batch_size`` requests a forward pass (1: each request alone)."""
        plain = copy.copy(self)
        plain.batch_size, plain.prefix_sharing = batch_size, PrefixSharing(False, "the plain path")
        return plain

    def fresh_copy(self) -> TransformersBackend:
        """The same loaded model with its shared-prefix path not yet checked."""
        fresh = copy.copy(self)
        fresh.prefix_sharing = PrefixSharing()
        return fresh

    @property
    def _model(self) -> GenerativeModel:
        if self.model is None:
            raise BackendError(f"transformers ({self.info.model}): the backend is closed")
        return self.model

    # -- prompts ---------------------------------------------------------------------------

    def chat_text(self, prompt: str, n_images: int, turn: Sequence[TurnPart] | None = None) -> str:
        """The user turn (images first, then the text, unless ``turn`` lays it out) through the checkpoint's chat template."""
        if self.bare_prompts:
            return prompt
        return user_turn(self.template, prompt, n_images, self.info.model, self.has_vision, turn)

    def _encode(self, texts: list[str], images: Sequence[Sequence[Image.Image]]) -> dict[str, torch.Tensor]:
        """The model's inputs for one batch, as ``apply_chat_template(tokenize=True)`` builds
        them for each text alone (then left-padded)."""
        if any(images) and not self.has_vision:
            raise BackendError(f"model {self.info.model} is text-only but a request has images")
        if len({len(row) for row in images}) > 1:
            raise ValueError("a batch mixes requests with different numbers of images")  # callers group them
        special = self._special_tokens_kwargs(texts)
        if not self.has_vision:
            inputs = self.tokenizer(texts, return_tensors="pt", padding=True, **special)
        elif images[0]:
            inputs = self.processor(images=[list(row) for row in images], text=texts, return_tensors="pt", padding=True, **special)
        else:
            inputs = self.processor(text=texts, return_tensors="pt", padding=True, **special)
        return {key: self._on_device(value) for key, value in inputs.items() if key not in TRAINING_ONLY_INPUTS}

    def _on_device(self, value: torch.Tensor) -> torch.Tensor:
        """An input on the model's device; floating-point inputs in the model's dtype (Llama 4's
        image processor returns bf16 pixels whatever the model runs in)."""
        return value.to(self.device, dtype=self._model.dtype) if value.is_floating_point() else value.to(self.device)

    def _special_tokens_kwargs(self, texts: list[str]) -> dict[str, bool]:
        """``add_special_tokens`` by :func:`adds_special_tokens`; a VLM whose texts get them
        leaves the processor its own default."""
        flags = {adds_special_tokens(text, self.tokenizer.bos_token, self.has_vision, self.template is not None) for text in texts}
        if len(flags) > 1:
            raise ValueError("a batch mixes texts with and without a leading BOS")
        flag = flags.pop()
        return {} if flag and self.has_vision else {"add_special_tokens": flag}

    def _batches(self, indices: Sequence[int], image_counts: Sequence[int]) -> Iterator[list[int]]:
        """``indices`` in batches of at most ``batch_size`` whose requests carry the same number of images."""
        by_count: dict[int, list[int]] = defaultdict(list)
        for index in indices:
            by_count[image_counts[index]].append(index)
        for group in by_count.values():
            for start in range(0, len(group), self.batch_size):
                yield group[start : start + self.batch_size]

    # -- choice probabilities --------------------------------------------------------------

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        results: list[np.ndarray | None] = [None] * len(requests)
        done: set[int] = set()
        if self.prefix_sharing.verified is not False:
            for indices, scored in self._shared_prefix_results(requests):
                for index, probs in zip(indices, scored):
                    results[index] = probs
                done.update(indices)
        rest = [i for i in range(len(requests)) if i not in done]
        for chunk in self._batches(rest, [len(r.images) for r in requests]):
            for index, probs in zip(chunk, self._whole_prompt_probs([requests[i] for i in chunk])):
                results[index] = probs
        return results  # type: ignore[return-value]

    def _shared_prefix_results(self, requests: Sequence[ChoiceRequest]) -> Iterator[tuple[list[int], list[np.ndarray]]]:
        """(request indices, their probabilities) for every group of requests that share a
        prefix and images and were scored from one cached prefix; the first two scored
        groups are checked against the whole prompts (:class:`PrefixSharing`)."""
        groups: dict[tuple[str, tuple[int, ...]], list[int]] = defaultdict(list)
        for index, request in enumerate(requests):
            if request.shared_prefix and request.prompt.startswith(request.shared_prefix):
                groups[(request.shared_prefix, tuple(id(image) for image in request.images))].append(index)
        shared = [indices for indices in groups.values() if len(indices) > 1]
        by_count: dict[int, list[list[int]]] = defaultdict(list)
        for indices in shared:
            by_count[len(requests[indices[0]].images)].append(indices)
        for same_count in by_count.values():
            for start in range(0, len(same_count), self.batch_size):
                if self.prefix_sharing.verified is False:
                    return
                group_chunk = same_count[start : start + self.batch_size]
                chunk_requests = [[requests[i] for i in indices] for indices in group_chunk]
                try:
                    scored = self._shared_prefix_probs(chunk_requests)
                except BackendError:  # the checkpoint's own fault (its chat template): no other path helps
                    raise
                except Exception as error:  # any model's own failure on a split prompt: score whole
                    self._refuse_prefix_sharing(f"the shared-prefix pass raised {type(error).__name__}: {error}")
                    return
                if self.prefix_sharing.verified is None and any(s is not None for s in scored):
                    if not self._verify_prefix_sharing(chunk_requests[:PREFIX_CHECK_GROUPS], scored[:PREFIX_CHECK_GROUPS]):
                        return
                for indices, probs in zip(group_chunk, scored):
                    if probs is not None:
                        yield indices, probs

    def _verify_prefix_sharing(self, groups: list[list[ChoiceRequest]], scored: list[list[np.ndarray] | None]) -> bool:
        """Score the first shared groups whole as well; keep the shared path only where the
        two agree within the dtype's tolerance."""
        pairs = [(request, probs) for group, probs_of_group in zip(groups, scored) if probs_of_group is not None for request, probs in zip(group, probs_of_group)]
        image_counts = [len(request.images) for request, _ in pairs]
        by_position: dict[int, np.ndarray] = {}
        for chunk in self._batches(range(len(pairs)), image_counts):
            for position, probs in zip(chunk, self._whole_prompt_probs([pairs[i][0] for i in chunk])):
                by_position[position] = probs
        whole = [by_position[i] for i in range(len(pairs))]
        difference = max(float(np.max(np.abs(shared - full))) for (_, shared), full in zip(pairs, whole))
        tolerance = self._prefix_tolerance([request for request, _ in pairs], whole)
        self.prefix_sharing.largest_difference, self.prefix_sharing.tolerance = difference, tolerance
        if difference > tolerance:
            self._refuse_prefix_sharing(f"on its first {len(pairs)} requests it differed from the whole prompts by up to {difference:.2g} (tolerance {tolerance:.2g} in {str(self._model.dtype).removeprefix('torch.')})")
            return False
        self.prefix_sharing.verified = True
        logger.info("model %s: shared-prefix scoring checked on %d requests (largest difference %.2g); used from now on", self.info.model, len(pairs), difference)
        return True

    def _prefix_tolerance(self, requests: list[ChoiceRequest], batched: list[np.ndarray]) -> float:
        """:data:`PREFIX_TOLERANCE` in full precision; in half precision twice what batching
        alone moves these requests (batched against each scored alone), at least
        :data:`HALF_PRECISION_FLOOR`."""
        if self._model.dtype in PREFIX_TOLERANCE:
            return PREFIX_TOLERANCE[self._model.dtype]
        alone = [self._whole_prompt_probs([request])[0] for request in requests]
        noise = max(float(np.max(np.abs(a - b))) for a, b in zip(alone, batched))
        return max(HALF_PRECISION_FLOOR, 2 * noise)

    def _refuse_prefix_sharing(self, reason: str) -> None:
        self.prefix_sharing.verified, self.prefix_sharing.reason = False, reason
        logger.warning("model %s: shared-prefix scoring is off for this model, every request is scored whole: %s", self.info.model, reason)

    def _option_distribution(self, last_logits: torch.Tensor, options: tuple[str, ...]) -> np.ndarray:
        if options not in self._option_ids:
            self._option_ids[options] = option_token_ids(self.tokenizer, options)
        probabilities = torch.softmax(last_logits.float(), dim=-1)
        return renormalise(np.array([float(probabilities[ids].sum()) for ids in self._option_ids[options]]))

    @torch.no_grad()
    def _whole_prompt_probs(self, requests: list[ChoiceRequest]) -> list[np.ndarray]:
        texts = [self.chat_text(r.prompt, len(r.images)) for r in requests]
        inputs = self._encode(texts, [r.images for r in requests])
        logits = self._model(**inputs, logits_to_keep=1).logits[:, -1, :]
        return [self._option_distribution(row, r.options) for row, r in zip(logits, requests)]

    def _text_ids(self, text: str) -> torch.Tensor:
        # The tokenizer alone: the split only needs token ids, and the processor would also
        # preprocess the images again for every request of the group (the image tokens it
        # inserts all lie in the prefix, so the suffixes' ids are the same either way).
        return self.tokenizer(text, return_tensors="pt", **self._special_tokens_kwargs([text]))["input_ids"][0]

    def _split_at_prefix(self, requests: list[ChoiceRequest]) -> tuple[str, list[torch.Tensor]] | None:
        """The group's common chat-text prefix (cut at a word boundary, after every image
        placeholder) and each request's token ids after it; None when the tokeniser merges
        across every boundary tried."""
        images = list(requests[0].images)
        texts = [self.chat_text(r.prompt, len(images)) for r in requests]
        common = os.path.commonprefix(texts)
        full_ids = [self._text_ids(text) for text in texts]
        placeholder = getattr(self.processor, "image_token", None) if self.has_vision else None
        # the last word boundary first; a tokenizer that merges across it ("?\nIs" in one
        # piece) gets the boundaries before it, up to a few words back
        cuts = sorted({match.start() for match in re.finditer(r"[ \n]", common) if match.start() > 0}, reverse=True)[:PREFIX_CUT_TRIES]
        for cut in cuts:
            if placeholder and any(placeholder in text[cut:] for text in texts):
                return None  # an image placeholder after the cut: its expansion would land in a suffix
            prefix_ids = self._text_ids(common[:cut])
            if all(len(ids) > len(prefix_ids) and torch.equal(ids[: len(prefix_ids)], prefix_ids) for ids in full_ids):
                return common[:cut], [ids[len(prefix_ids) :] for ids in full_ids]
        return None

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
        prefix = self._encode([split_of[g][0] for g in usable], [groups[g][0].images for g in usable])
        inner: Any = getattr(self.model, "model", None)
        if getattr(inner, "rope_deltas", None) is not None:
            inner.rope_deltas = None  # so that what the prefix pass leaves there is its own
        cache = self._model(**prefix, use_cache=True).past_key_values
        prefix_mask, prefix_length = prefix["attention_mask"], prefix["attention_mask"].shape[1]
        rows = [(position, suffix) for position, g in enumerate(usable) for suffix in split_of[g][1]]
        row_of = torch.tensor([position for position, _ in rows], device=self.device)
        cache.reorder_cache(row_of)
        width = max(len(suffix) for _, suffix in rows)
        # right padding here: each suffix must follow its prefix directly in the cache
        suffix_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((len(rows), prefix_length + width), dtype=torch.long, device=self.device)
        for row, (position, suffix) in enumerate(rows):
            suffix_ids[row, : len(suffix)] = suffix
            mask[row, :prefix_length] = prefix_mask[position]
            mask[row, prefix_length : prefix_length + len(suffix)] = 1
        extra = {key: prefix[key][row_of, -1:].repeat_interleave(width, dim=1) for key in PER_TOKEN_INPUTS if key in prefix}
        positions = self._multimodal_rope_positions(prefix_mask, row_of, width)
        if positions is not None:
            extra["position_ids"] = positions
        logits = self._model(input_ids=suffix_ids, attention_mask=mask, past_key_values=cache, use_cache=True, **extra).logits
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

    def _multimodal_rope_positions(self, prefix_mask: torch.Tensor, row_of: torch.Tensor, width: int) -> torch.Tensor | None:
        """The suffix tokens' 3-D positions for a multimodal-RoPE model (Qwen-VL, GLM-4V):
        each row's text continues from its prefix's last position, which is the prefix's
        real length plus the ``rope_deltas`` the prefix pass left on the model. None for
        any other model (and for a prefix without images), which takes positions from the cache."""
        deltas = getattr(getattr(self.model, "model", None), "rope_deltas", None)
        if not isinstance(deltas, torch.Tensor):
            return None
        start = prefix_mask.sum(dim=-1)[row_of] + deltas.reshape(-1).to(prefix_mask.device)[row_of]
        positions = start[:, None] + torch.arange(width, device=prefix_mask.device)[None, :]
        return positions[None].expand(3, -1, -1)

    # -- generation ------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        outputs: list[str | None] = [None] * len(requests)
        for chunk in self._batches(range(len(requests)), [len(r.images) for r in requests]):
            batch = [requests[i] for i in chunk]
            texts = [self.chat_text(r.prompt, len(r.images), r.turn) for r in batch]
            inputs = self._encode(texts, [r.images for r in batch])
            max_new = max(r.max_new_tokens for r in batch)
            # transformers types generate's self as its GenerativePreTrainedModel protocol and names each of its
            # keyword arguments, so a model's own inputs passed as **inputs cannot be checked against it
            generated = self._model.generate(**inputs, max_new_tokens=max_new, do_sample=False, pad_token_id=self.tokenizer.pad_token_id)  # type: ignore[misc, arg-type]
            new_tokens = generated[:, inputs["input_ids"].shape[1] :]
            for index, request, row in zip(chunk, batch, new_tokens):
                outputs[index] = str(self.tokenizer.decode(row[: request.max_new_tokens], skip_special_tokens=True)).strip()
        return outputs  # type: ignore[return-value]

    def close(self) -> None:
        self.model = None
        if self.template is not None:
            self.template.close()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def processor_places_images(processor: ProcessorMixin | PreTrainedTokenizerBase) -> bool:
    """Whether ``processor`` puts an image's tokens into a text that names none (PaliGemma's
    processor prepends them, with BOS, as its base checkpoints are prompted): tried once on
    a blank 32 px image; a processor that wants placeholders in the text refuses."""
    try:
        inputs = processor(images=[[Image.new("RGB", (32, 32))]], text=["a"], return_tensors="pt")
    except Exception:  # each processor words "no placeholder for this image" its own way
        return False
    image_token_id = getattr(processor, "image_token_id", None)
    return image_token_id is not None and bool((inputs["input_ids"] == image_token_id).any())
