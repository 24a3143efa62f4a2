"""The backends a suite may name (``backend:``), and DeCC's agents too (``llm_backend:``),
as a registry like the evaluators': a name, how a model is loaded behind it, and what vlgate
may do with it. Adding a backend is one :func:`register` call; nothing else branches on
its name. GenCeption's helper models are chosen the same way, from
:data:`IMAGE_ENCODERS` (``encoder_kind:``) and :data:`IMAGE_GENERATORS` (``generator:``).

* ``transformers``: the reference; every fast path is proven exact against its plain
  forward pass (``running/model_check.py``).
* ``vllm``: another engine on the same weights; its numbers count only once the model
  check has shown them equal to the transformers plain path.
* ``openai``: a model served over HTTP (``http://host:port/v1#served-name``); vlgate
  cannot read its weights, so it has no digest and no model check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from vlgate.evaluators.backends.base import MODEL_LOAD_LOCK, BackendError, BackendInfo, ImageEncoder, ImageGenerator, VisionLanguageBackend
from vlgate.evaluators.backends.deferred import NOT_LOADED, DeferredBackend, DeferredEncoder, DeferredGenerator
from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model
from vlgate.evaluators.registries import Registry


@dataclass(frozen=True)
class BackendOptions:
    """What a suite says about loading a model: its load policy, the model cache, its batch
    size (items per batch; None: the backend's own default, as for helper models) and its
    engine's own settings (the suite's ``vllm:`` section)."""

    policy: LoadPolicy = field(default_factory=LoadPolicy)
    cache_dir: Path | None = None
    batch_size: int | None = None
    engine: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendKind:
    """One backend: ``load(model, options)``; ``local``: it runs the weights on this
    machine (they have a digest and can be checked); ``other_engine``: its numbers must be
    proven equal to the transformers plain path before they count; ``describe(model,
    options)``: its info without loading it, when it can say so (the digest: ``deferred.py``)."""

    name: str
    load: Callable[[str, BackendOptions], VisionLanguageBackend]
    local: bool = True
    other_engine: bool = False
    describe: Callable[[str, BackendOptions], BackendInfo] | None = None


def local_checkpoint(name: str, check: Callable[[Path, LoadPolicy], None] | None = None) -> Callable[[str, BackendOptions], BackendInfo]:
    """How a backend loading a checkpoint folder describes it: the folder resolved (from
    MLflow into the model cache, as a load does) and checked against the load policy (and by
    ``check``), its files hashed; loading it gives the same digest."""

    def describe(model: str, options: BackendOptions) -> BackendInfo:
        with MODEL_LOAD_LOCK:
            path = resolve_model(model, options.cache_dir, options.policy)
            check_checkpoint(path, options.policy)
            if check is not None:
                check(path, options.policy)
        return BackendInfo(name=name, model=model, digest=model_digest(path), device=NOT_LOADED)

    return describe


def transformers_batch_size(batch_size: int) -> int:
    """Requests a transformers forward pass holds for a suite of ``batch_size`` items: each
    item asks several (K+1 for lcm-mc, 8 for lcm-nb)."""
    return max(16, batch_size * 4)


def _load_transformers(model: str, options: BackendOptions) -> VisionLanguageBackend:
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend

    if options.batch_size is None:  # a helper model: the backend's own batch size
        return TransformersBackend.load(model, options.policy, cache_dir=options.cache_dir)
    return TransformersBackend.load(model, options.policy, cache_dir=options.cache_dir, batch_size=transformers_batch_size(options.batch_size))


def _load_vllm(model: str, options: BackendOptions) -> VisionLanguageBackend:
    from vlgate.evaluators.backends.vllm_offline import VllmBackend

    engine = dict(options.engine)
    top_logprobs = engine.pop("top_logprobs", 20)  # a load argument of its own; the rest are the engine's
    if not isinstance(top_logprobs, int):
        raise BackendError(f"model {model}: top_logprobs must be an integer, got {top_logprobs!r}")
    return VllmBackend.load(model, options.policy, cache_dir=options.cache_dir, top_logprobs=top_logprobs, **engine)


def _load_openai(model: str, options: BackendOptions) -> VisionLanguageBackend:
    from vlgate.evaluators.backends.openai_http import OpenAIHttpBackend

    base_url, _, served_name = model.partition("#")  # "http://host:8000/v1#served-model-name"
    return OpenAIHttpBackend(base_url, served_name or "default")


class UnknownBackendError(ValueError):
    pass


#: the backends a suite may name (``registries.Registry``)
BACKENDS: Registry[BackendKind] = Registry("backend", lambda kind: kind.name, unknown=UnknownBackendError)


def register(kind: BackendKind) -> BackendKind:
    """Add a backend; its name must be new."""
    return BACKENDS.add(kind)


def unregister(name: str) -> None:
    BACKENDS.remove(name)


def names() -> tuple[str, ...]:
    return BACKENDS.names()


def get(name: str) -> BackendKind:
    return BACKENDS.get(name)


def load(name: str, model: str, options: BackendOptions) -> VisionLanguageBackend:
    """``model`` behind the backend called ``name``: described now and loaded on first use
    where the backend can describe it (``deferred.py``), else loaded now."""
    kind = get(name)
    if kind.describe is None:
        return kind.load(model, options)
    return DeferredBackend(kind.describe(model, options), lambda: kind.load(model, options))


register(BackendKind("transformers", _load_transformers, describe=local_checkpoint("transformers")))
# loaded when named: vLLM's engine start is where it refuses what it cannot score exactly
# (attention_gap), and a served model has no files to hash
register(BackendKind("vllm", _load_vllm, other_engine=True))
register(BackendKind("openai", _load_openai, local=False))


Helper = TypeVar("Helper", ImageEncoder, ImageGenerator)


@dataclass(frozen=True)
class HelperKind(Generic[Helper]):
    """A kind of helper model (an image encoder, an image generator): ``load(model, options)``;
    ``needs_model``: False for one vlgate draws itself (the world's scene renderer)."""

    name: str
    load: Callable[[str, BackendOptions], Helper]
    needs_model: bool = True
    #: how it is described without loading it, and the type standing for it until it is
    #: loaded (``deferred.py``); None: loaded when opened
    describe: Callable[[str, BackendOptions], BackendInfo] | None = None
    deferred: Callable[[BackendInfo, Callable[[], Helper]], Helper] | None = None

    def open(self, model: str, options: BackendOptions) -> Helper:
        """``model``, described now and loaded on first use where the kind can describe it,
        else loaded now (as :func:`load`)."""
        if self.describe is None or self.deferred is None:
            return self.load(model, options)
        return self.deferred(self.describe(model, options), lambda: self.load(model, options))


def _load_vit(model: str, options: BackendOptions) -> ImageEncoder:
    from vlgate.evaluators.backends.encoders import VitClsEncoder

    return VitClsEncoder.load(model, options.policy, cache_dir=options.cache_dir)


def _load_clip(model: str, options: BackendOptions) -> ImageEncoder:
    from vlgate.evaluators.backends.encoders import ClipImageEncoder

    return ClipImageEncoder.load(model, options.policy, cache_dir=options.cache_dir)


def _check_pipeline(path: Path, policy: LoadPolicy) -> None:
    from vlgate.evaluators.backends.image_generators import check_pipeline_index

    check_pipeline_index(path, policy)


def _load_diffusers(model: str, options: BackendOptions) -> ImageGenerator:
    from vlgate.evaluators.backends.image_generators import DiffusersGenerator

    return DiffusersGenerator.load(model, options.policy, cache_dir=options.cache_dir)


#: GenCeption's image encoders: ViT's CLS token (the paper's) or CLIP's image embedding
IMAGE_ENCODERS: Registry[HelperKind[ImageEncoder]] = Registry(
    "image encoder",
    lambda kind: kind.name,
    entries=(
        HelperKind("vit", _load_vit, describe=local_checkpoint("vit-cls"), deferred=DeferredEncoder),
        HelperKind("clip", _load_clip, describe=local_checkpoint("clip-image"), deferred=DeferredEncoder),
    ),
)
#: The entry-point group where a package registers an image generator kind (a ``HelperKind``):
#: the synthetic world's scene renderer is one (``evaluators/scenes/generator.py``).
IMAGE_GENERATOR_ENTRY_POINTS = "vlgate.image_generators"


def _generators_by_entry_point() -> Iterator[HelperKind[ImageGenerator]]:
    """The image generator kinds the installed packages register, read on first use and
    once a process: reading every installed package's metadata is not free, and nothing is
    imported until a suite names a generator."""
    from importlib.metadata import entry_points

    for point in entry_points(group=IMAGE_GENERATOR_ENTRY_POINTS):
        if point.name not in IMAGE_GENERATORS:
            kind = point.load()
            if not isinstance(kind, HelperKind) or kind.name != point.name:
                raise BackendError(f"entry point {point.name} = {point.value} ({IMAGE_GENERATOR_ENTRY_POINTS}) is not the HelperKind named {point.name!r}")
            yield kind


#: GenCeption's image generators: a diffusers pipeline folder, and the kinds registered by entry point
IMAGE_GENERATORS: Registry[HelperKind[ImageGenerator]] = Registry(
    "image generator",
    lambda kind: kind.name,
    entries=(HelperKind("diffusers", _load_diffusers, describe=local_checkpoint("diffusers", _check_pipeline), deferred=DeferredGenerator),),
    sources=_generators_by_entry_point,
)


def image_generator(generator: str) -> HelperKind[ImageGenerator]:
    """The kind behind a suite's ``generator:``: a generator that needs no model, by its name;
    anything else is a diffusers pipeline's folder or id."""
    named = IMAGE_GENERATORS.find(generator)
    return named if named is not None and not named.needs_model else IMAGE_GENERATORS.get("diffusers")
