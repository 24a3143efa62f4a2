"""The vLLM backend, in process (``vllm.LLM``); an optional extra: ``pip install 'vlgate[vllm]'``
on a GPU machine, ``make vllm-env`` for the CPU build (docs/vllm.md).

- Loading goes through the same gate as the transformers backend: :func:`resolve_model`,
  :func:`check_checkpoint`, ``trust_remote_code`` from the :class:`LoadPolicy`, and
  safetensors only (``load_format="safetensors"``) unless the policy allows pickles.
- Prompts are rendered by vlgate, not by vLLM: the checkpoint's chat template (images
  first, then the text) in a child process with time, memory and size limits
  (``chat_templates.py``; a template is the checkpoint author's program, and vLLM would run
  it in this process with none), exactly as the transformers backend renders them; the
  text goes to ``LLM.generate`` with the images as multi-modal data, special tokens added
  exactly where the model card's path adds them (:func:`adds_special_tokens`: a VLM's text
  gets BOS from the tokenizer unless the template wrote it, as LLaVA-1.5's does not).
- :meth:`VllmBackend.choice_probs` runs one greedy token per request and reads the
  logprobs of the first position. vLLM computes them from the raw logits, before
  ``allowed_token_ids`` or structured-output masks, so they are the model's distribution;
  the option probabilities are the summed probabilities of each option's token ids
  (:func:`option_token_ids`), renormalised over the options. Where the installed
  ``SamplingParams`` has ``logprob_token_ids`` (newer vLLM) exactly those ids are asked
  for; otherwise the top ``k`` (``k`` ≤ the engine's ``max_logprobs``), an option outside
  it counting 0 and a request with no option in it logged and scored uniform.
- ``shared_prefix`` is not needed: vLLM's automatic prefix caching (on by default, and
  set here) computes a repeated image-and-question prefix once.
- :meth:`VllmBackend.generate` is greedy decoding with ``max_tokens``, the text decoded from
  the generated ids as the transformers backend decodes them.

Engine settings beyond these (``dtype``, ``max_model_len``, ``gpu_memory_utilization``,
``limit_mm_per_prompt`` — NaturalBench's image-choice tests send two images, ...) pass
through ``VllmBackend.load(**engine_kwargs)`` to ``vllm.LLM`` (a suite's ``vllm:`` section).
On vLLM's CPU build ``gpu_memory_utilization`` is the share of the machine's memory kept
for the KV cache, and the engine refuses to start when less than that is free: set it
(the world's suites use 0.1).

**One engine per model per process.** Evaluators run as concurrent tasks of one process (the
validation flow's shards), and each loads its model: backends of the same checkpoint and
engine settings share one ``vllm.LLM`` (:class:`SharedEngine`), counted by its users and
shut down (its processes ended, its memory returned) when the last one closes. Calls into a
shared engine take its lock, since ``vllm.LLM`` is not safe to call from two threads.

A checkpoint saved by transformers 5 whose CLIP or SigLIP vision tower lacks the
``vision_model`` level vLLM reads is served from a copy with the released names
(:mod:`.weight_layout`); ``info.extra["served"]`` names the folder the engine loaded.

A model whose attention the engine cannot compute here (Gemma3's and PaliGemma's
bidirectional image attention on vLLM's CPU build: :func:`attention_gap`) is refused before
an engine starts, in one line naming the model and the reason.

Before the engine starts, the checkpoint's architecture is checked against vLLM's model
registry: an architecture vLLM implements but cannot import here (a module needing a package
the environment lacks, e.g. Kanana-V's timm) is refused with the model and the reason in
one line, instead of the engine's "initialization failed, see the logs above".
"""

from __future__ import annotations

import gc
import inspect
import json
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np
from PIL import Image

from vlgate.evaluators.backends.base import BackendError, BackendInfo, ChoiceRequest, GenerateRequest, VisionLanguageBackend, renormalise
from vlgate.evaluators.backends.chat_templates import ChatTemplateRenderer, adds_special_tokens, renderer_for, user_turn
from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model
from vlgate.evaluators.backends.options import option_masses_from_token_ids, option_token_ids
from vlgate.evaluators.backends.weight_layout import vllm_layout

if TYPE_CHECKING:
    from transformers import PretrainedConfig
    from vllm import LLM, RequestOutput, SamplingParams

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'vlgate[vllm]'"
#: vLLM's cap on ``SamplingParams.logprob_token_ids`` (``MAX_LOGPROB_TOKEN_IDS``); longer lists use top-k.
MAX_LOGPROB_TOKEN_IDS = 128
#: Load formats that never unpickle (``dummy`` loads random weights, for tests).
SAFE_LOAD_FORMATS = ("safetensors", "fastsafetensors", "dummy")


class EnginePrompt(TypedDict):
    """One request for ``LLM.generate`` (vLLM's ``TextPrompt``)."""

    prompt: str
    multi_modal_data: NotRequired[dict[str, list[Image.Image]]]


def accepts_field(params_class: object, name: str) -> bool:
    """Whether ``params_class`` (vLLM's ``SamplingParams``, a ``msgspec.Struct``) has a field ``name``."""
    fields = getattr(params_class, "__struct_fields__", None)
    if fields is not None:
        return name in fields
    try:
        return callable(params_class) and name in inspect.signature(params_class).parameters
    except (TypeError, ValueError):
        return False


@dataclass(eq=False)
class SharedEngine:
    """A ``vllm.LLM`` and the backends using it (see the module docstring)."""

    llm: LLM
    key: str
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


#: The engines of this process by :func:`engine_key`; guarded by ``_ENGINES_LOCK``.
_ENGINES: dict[str, SharedEngine] = {}
_ENGINES_LOCK = threading.Lock()


def engine_key(path: Path, digest: str, trust_remote_code: bool, engine_kwargs: Mapping[str, object]) -> str:
    """Which loads may share an engine: the same weights, policy and engine settings."""
    return json.dumps([str(path.resolve()), digest, trust_remote_code, dict(engine_kwargs)], sort_keys=True, default=str)


def shutdown_engine(llm: LLM) -> None:
    """End a ``vllm.LLM``'s engine processes and give its memory back (best effort: vLLM
    holds GPU memory until it is collected)."""
    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if callable(shutdown):
        try:
            shutdown()
        except Exception as error:  # already stopped, or a version without it
            logger.debug("vLLM engine shutdown: %s", error)
    del llm, engine
    gc.collect()
    torch = sys.modules.get("torch")  # vLLM imported it; no need to import it here
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def check_architecture(reference: str | Path, path: Path, vllm: ModuleType) -> None:
    """Refuse, naming the model, a checkpoint whose architecture vLLM implements but cannot
    load in this installation. Architectures vLLM does not list are left to the engine
    (it may run them through its transformers fallback)."""
    try:
        architectures = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return  # the engine reports a missing or broken config itself
    registered = getattr(getattr(vllm, "ModelRegistry", None), "models", {})
    for architecture in architectures:
        implementation = registered.get(architecture) if isinstance(architecture, str) else None
        if implementation is None:
            continue
        try:
            implementation.load_model_cls()
        except Exception as error:  # an import error in vLLM's module for this architecture
            version = getattr(vllm, "__version__", "unknown")
            raise BackendError(
                f"model {reference}: vLLM {version} cannot run its architecture {architecture} here: "
                f"loading vLLM's implementation failed ({type(error).__name__}: {error})"
            ) from error


def attention_gap(hf_config: PretrainedConfig | None) -> str | None:
    """Why vLLM would not compute the attention of the model ``hf_config`` describes, or
    None. Its CPU attention computes some head sizes only (the synthetic world's LLM agent's
    heads are 16 wide: the engine starts, then dies at the first request). Gemma3 and PaliGemma attend bidirectionally over each image's tokens (a prefix-LM
    mask); vLLM does that only on attention backends that support it
    (``supports_mm_prefix``), and its CPU backend does not: it would attend causally there
    and score another model. Which models need the mask is vLLM's own rule
    (``ModelArchConfigConvertorBase.is_mm_prefix_lm``), read from the checkpoint's config, so
    the refusal comes before an engine starts."""
    try:
        from vllm.platforms import current_platform
        from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:  # a vLLM without them picks a backend that supports the mask, or refuses itself
        return None
    if hf_config is None:
        return None
    text = hf_config.get_text_config()
    width = getattr(text, "head_dim", None) or (text.hidden_size // text.num_attention_heads if getattr(text, "num_attention_heads", None) else None)
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if current_platform.is_cpu() and width is not None and width not in supported:  # the engine would start, then die at the first request
        return f"its attention heads are {width} wide, and vLLM's CPU attention computes heads {', '.join(map(str, supported))} wide only"
    if not ModelArchConfigConvertorBase(hf_config, text).is_mm_prefix_lm():
        return None
    if current_platform.is_cpu() and not CPUAttentionBackend.supports_mm_prefix():
        architecture = getattr(hf_config, "model_type", "this model")
        return f"{architecture} attends bidirectionally over image tokens, which vLLM's CPU attention does not (it would attend causally)"
    return None


def checkpoint_config(path: Path, trust_remote_code: bool) -> PretrainedConfig | None:
    """The checkpoint's transformers config, or None when transformers cannot read it
    without the engine (the engine then reports the problem itself)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except Exception:  # an unknown model type, a broken config: the engine's error is the clearer one
        return None


def engine_prompt(text: str, images: Sequence[Image.Image]) -> EnginePrompt:
    """One request for ``LLM.generate``: the rendered text, and its images as multi-modal data."""
    return {"prompt": text, "multi_modal_data": {"image": list(images)}} if images else {"prompt": text}


class VllmBackend(VisionLanguageBackend):
    """One model in a ``vllm.LLM`` engine. Use :meth:`load`; the constructor takes an engine
    and vLLM's ``SamplingParams`` class (tests pass stand-ins)."""

    def __init__(
        self,
        llm: LLM,
        sampling_params_class: type[SamplingParams],
        info: BackendInfo,
        top_logprobs: int = 20,
        shared: SharedEngine | None = None,
        template: ChatTemplateRenderer | None = None,
        has_vision: bool = False,
    ):
        self.llm: LLM | None = llm  # None once closed
        self.sampling_params_class, self.info = sampling_params_class, info
        self.template, self.has_vision = template, has_vision
        self.shared = shared  # None: this backend owns its engine (tests build it directly)
        self._lock = shared.lock if shared is not None else threading.Lock()
        self.top_logprobs = top_logprobs
        self.exact_option_logprobs = accepts_field(sampling_params_class, "logprob_token_ids")
        self._option_ids: dict[tuple[str, ...], list[list[int]]] = {}

    @classmethod
    def load(
        cls,
        reference: str | Path,
        policy: LoadPolicy = LoadPolicy(),
        cache_dir: Path | None = None,
        top_logprobs: int = 20,
        **engine_kwargs: object,
    ) -> VllmBackend:
        try:
            import vllm
        except ImportError as error:
            raise BackendError(f"model {reference}: the vLLM backend needs vLLM, an optional extra ({INSTALL_HINT}); importing it failed: {error}") from error
        for reserved in ("model", "trust_remote_code"):
            if reserved in engine_kwargs:
                raise BackendError(f"model {reference}: {reserved!r} is not an engine setting here; it comes from the reference and the load policy")
        load_format = engine_kwargs.setdefault("load_format", "auto" if policy.allow_pickle else "safetensors")
        if not policy.allow_pickle and load_format not in SAFE_LOAD_FORMATS:
            raise BackendError(f"model {reference}: load_format={load_format!r} may unpickle weights; the load policy allows only {SAFE_LOAD_FORMATS}")
        path = resolve_model(reference, cache_dir, policy)
        check_checkpoint(path, policy)
        check_architecture(reference, path, vllm)
        if "tokenization_kwargs" not in inspect.signature(vllm.LLM.generate).parameters:
            version = getattr(vllm, "__version__", "unknown")
            raise BackendError(f"model {reference}: vLLM {version} is too old: vlgate renders chat templates itself and needs LLM.generate(tokenization_kwargs=...)")
        template, has_vision = _chat_template(str(reference), path, policy)
        if has_vision and template is None:  # before an engine starts for nothing
            raise BackendError(
                f"model {reference}: its processor has no chat template, which the vLLM backend renders every prompt with; "
                "score it with backend: transformers, which prompts such a VLM as its card does"
            )
        engine_kwargs.setdefault("enable_prefix_caching", True)
        engine_kwargs.setdefault("max_logprobs", max(top_logprobs, 20))
        max_logprobs = engine_kwargs["max_logprobs"]
        if isinstance(max_logprobs, int) and max_logprobs != -1:  # -1: the whole vocabulary
            top_logprobs = min(top_logprobs, max_logprobs)
        digest = model_digest(path)
        served = vllm_layout(path, digest, cache_dir or Path.cwd() / ".vlgate-model-cache")
        key = engine_key(served, digest, policy.trust_remote_code, engine_kwargs)
        config = checkpoint_config(served, policy.trust_remote_code)
        gap = attention_gap(config)
        if gap is not None:
            raise BackendError(f"model {reference}: vLLM cannot score it exactly here: {gap}; score it with backend: transformers")
        with _ENGINES_LOCK:  # a second load of the same model waits for the first engine, then shares it
            shared = _ENGINES.get(key)
            if shared is None:
                try:
                    llm = vllm.LLM(model=str(served), trust_remote_code=policy.trust_remote_code, **engine_kwargs)
                except Exception as error:  # vLLM raises several types for configs and models it cannot run
                    raise BackendError(f"model {reference}: vLLM could not load it from {path}: {error}") from error
                # a config transformers could not read alone is the engine's, now it has read it
                gap = attention_gap(llm.llm_engine.model_config.hf_config) if config is None else None
                if gap is not None:
                    shutdown_engine(llm)
                    raise BackendError(f"model {reference}: vLLM cannot score it exactly here: {gap}; score it with backend: transformers")
                shared = _ENGINES[key] = SharedEngine(llm, key)
            shared.users += 1
        extra = {"path": str(path), "served": str(served), "vllm": getattr(vllm, "__version__", "unknown"), "top_logprobs": str(top_logprobs)}
        extra |= {key: str(value) for key, value in sorted(engine_kwargs.items()) if isinstance(value, (str, int, float, bool))}
        info = BackendInfo(name="vllm", model=str(reference), digest=digest, device=_device_type(), extra=extra)
        backend = cls(shared.llm, vllm.SamplingParams, info, top_logprobs, shared, template, has_vision)
        info.extra["option_logprobs"] = "exact (logprob_token_ids)" if backend.exact_option_logprobs else f"top-{top_logprobs}"
        return backend

    # -- requests --------------------------------------------------------------------------

    @property
    def _engine(self) -> LLM:
        if self.llm is None:
            raise BackendError(f"vLLM ({self.info.model}): the backend is closed")
        return self.llm

    def _run(self, requests: Sequence[ChoiceRequest | GenerateRequest], params: list[SamplingParams], what: str) -> list[RequestOutput]:
        llm = self._engine
        texts = [user_turn(self.template, r.prompt, len(r.images), self.info.model, self.has_vision, r.turn if isinstance(r, GenerateRequest) else None) for r in requests]
        bos = getattr(llm.get_tokenizer(), "bos_token", None)
        # tokenised as the transformers backend and the model card tokenise (adds_special_tokens);
        # one engine call per setting, since LLM.generate takes one for all its prompts
        groups: dict[bool, list[int]] = {}
        for index, text in enumerate(texts):
            groups.setdefault(adds_special_tokens(text, bos, self.has_vision, self.template is not None), []).append(index)
        outputs: list[RequestOutput | None] = [None] * len(requests)
        try:
            with self._lock:
                for add_special, indices in groups.items():
                    done = llm.generate(
                        [engine_prompt(texts[i], requests[i].images) for i in indices], sampling_params=[params[i] for i in indices],
                        use_tqdm=False, tokenization_kwargs={"add_special_tokens": add_special},
                    )
                    for index, output in zip(indices, done, strict=True):
                        outputs[index] = output
        except Exception as error:  # vLLM's validation errors are ValueErrors; engine failures vary
            raise BackendError(f"vLLM ({self.info.model}): {what} of {len(requests)} requests failed: {error}") from error
        return outputs

    def _ids_of(self, options: tuple[str, ...]) -> list[list[int]]:
        if options not in self._option_ids:
            self._option_ids[options] = option_token_ids(self._engine.get_tokenizer(), options)
        return self._option_ids[options]

    def _choice_params(self, option_ids: list[list[int]]) -> SamplingParams:
        wanted = sorted(set(chain.from_iterable(option_ids)))
        if self.exact_option_logprobs and len(wanted) <= MAX_LOGPROB_TOKEN_IDS:
            # logprobs stays unset: vLLM then returns exactly these ids (and the sampled token)
            return self.sampling_params_class(max_tokens=1, temperature=0.0, logprob_token_ids=wanted)
        return self.sampling_params_class(max_tokens=1, temperature=0.0, logprobs=self.top_logprobs)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        if not requests:
            return []
        option_ids = [self._ids_of(tuple(r.options)) for r in requests]
        outputs = self._run(requests, [self._choice_params(ids) for ids in option_ids], "choice scoring")
        results = []
        for index, (request, ids, output) in enumerate(zip(requests, option_ids, outputs)):
            first = _first_position_logprobs(output, index)
            masses = option_masses_from_token_ids(first, ids)
            if not masses.sum() > 0:
                logger.warning(
                    "%s: request %d: no token of the options %s (ids %s) is among the returned logprobs (ids %s); scoring it uniform",
                    self.info.model, index, list(request.options), ids, sorted(first),
                )
            results.append(renormalise(masses))
        return results

    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        if not requests:
            return []
        params = [self.sampling_params_class(max_tokens=r.max_new_tokens, temperature=0.0) for r in requests]
        outputs = self._run(requests, params, "generation")
        # decoded from the token ids as the transformers backend decodes them: vLLM's incremental
        # detokenizer holds back a trailing partial UTF-8 character that decode() shows as "\ufffd"
        tokenizer = self._engine.get_tokenizer()
        return [str(tokenizer.decode(list(output.outputs[0].token_ids), skip_special_tokens=True)).strip() for output in outputs]

    def close(self) -> None:
        """Let go of the engine; the last backend using it shuts it down. Closing twice is a no-op."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        if self.template is not None:
            self.template.close()
        shared, self.shared = self.shared, None
        if shared is not None:
            with _ENGINES_LOCK:
                shared.users -= 1
                if shared.users > 0:
                    return
                _ENGINES.pop(shared.key, None)
        shutdown_engine(llm)


def _chat_template(model: str, path: Path, policy: LoadPolicy) -> tuple[ChatTemplateRenderer | None, bool]:
    """The checkpoint's chat template as the transformers backend finds it (a VLM's
    processor, a text-only model's tokenizer), and whether the model takes images."""
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer

    common = {"trust_remote_code": policy.trust_remote_code}
    try:
        has_vision = hasattr(AutoConfig.from_pretrained(path, **common), "vision_config")
        processor = AutoProcessor.from_pretrained(path, **common) if has_vision else AutoTokenizer.from_pretrained(path, **common)
    except (OSError, ValueError, KeyError) as error:
        raise BackendError(f"model {model}: transformers could not read its processor from {path}: {error}") from error
    tokenizer = processor.tokenizer if has_vision else processor
    return renderer_for(model, [processor], tokenizer, policy), has_vision


def _first_position_logprobs(output: RequestOutput, index: int) -> dict[int, float]:
    """token id → logprob at the first generated position of one ``RequestOutput``."""
    try:
        steps = output.outputs[0].logprobs
    except (AttributeError, IndexError) as error:
        raise BackendError(f"vLLM: request {index}: unexpected output {output!r}") from error
    if not steps:
        raise BackendError(f"vLLM: request {index}: the output carries no logprobs")
    return {int(token_id): float(getattr(value, "logprob", value)) for token_id, value in steps[0].items()}


def _device_type() -> str:
    try:
        from vllm.platforms import current_platform

        return str(current_platform.device_type)
    except Exception:  # an older vLLM without platforms: it ran on CUDA
        return "cuda"
