"""``vlgate make-world``: the synthetic world under one folder — copied from the world that
ships with vlgate, or trained from code.

Layout under ``out``::

    data/          evaluation data sets of every evaluator (datasets.build_datasets)
    checkpoints/   vlm-steps{N}/ (the version family), vlm-{fault}/ (the best version fine-tuned with one
                   fault each: language-prior, answer-prior, poor-description, miscount; faults.FAULTS),
                   llm-agent/ (DeCC's LLM), vit-encoder/, clip/ (briefly contrastive-trained CLIP),
                   diffusion/ (a tiny random-weight StableDiffusionPipeline: the diffusers path of
                   GenCeption's generator; the world's suite uses the scene renderer)
    suite.yaml     a suite running every evaluator on data/ (vlgate evaluate --suite)
    suite-vllm.yaml  the same suite with ``backend: vllm`` (in vLLM's environment)
    manifest.json  what was built, from which seed, size and code, how long it took, and the
                   sha256 of every file

A second call with the same size and seed finds the manifest and returns at once.

**The shipped world.** Training is pinned (seed, steps, ``BUILD_THREADS``), but the float
rounding of the CPU's kernels still differs between machines, and training amplifies it:
two machines of the same kind built versions that told different stories (on one the
shortcut version was the more accurate, on the other the less). So the default world is
built once (``vlgate make-world --from-code --out evaluators/world/shipped``), committed
under ``evaluators/world/shipped/`` (safetensors, about 11 MB) and copied from there: the
demo and the tests that need trained behaviour see the same weights on every machine.
``--from-code`` still trains everything here. A world of another size (the medium one: 400
MC items where the small has 48) gets the shipped models with its data drawn at that size
(``resize_shipped_world``); another seed or step count is always trained.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar, cast

from vlgate import __version__
from vlgate.evaluators.world.datasets import build_datasets

#: Bump when what the builder produces changes, so cached worlds are rebuilt (and rebuild
#: and commit the shipped world).
#: 6: trained with BUILD_THREADS torch threads (format 5 depended on the machine's count).
#: 7: the shortcut version's probes follow an answer prior, at a tenth of the learning rate;
#:    the manifest lists every file's sha256.
#: 8: the world's suite runs every evaluator under the vlgate protocol (the prompts its
#:    models are trained on); weights unchanged.
#: 9: every skill the five evaluators measure is trained (whole answers ending in </s>:
#:    descriptions, DeCC's counts and comparisons, NaturalBench's tests, VLind's four); one
#:    faulty version per evaluator instead of the language-prior one; 48 px images in 16 px
#:    patches, one patch per grid cell.
#: 10: the LLaVA world's VLM checkpoints have their text attention heads zero-padded from 16
#:    to 32 dimensions after training (the same function: ``vllm_padding.pad_attention_heads``),
#:    so vLLM's CPU attention serves them; ``suite-vllm.yaml`` runs the suite on vLLM.
WORLD_FORMAT = 10
#: The default world as built once and committed (see the module docstring).
SHIPPED_WORLD = Path(__file__).parent / "shipped"
#: The modules whose code decides what the world is (recorded as the manifest's code digest).
WORLD_CODE = (
    "build.py", "architectures.py", "curriculum.py", "datasets.py", "faults.py", "generators.py", "tokenizer.py", "training.py",
    "vllm_padding.py", "../scenes/renderer.py", "../scenes/scene.py",
    "../prompts.py", "../vl_lcm/prompts.py", "../vlind/prompts.py", "../genception/prompts.py", "../decc/prompts.py",
)  # fmt: skip
#: Torch's intra-op thread count splits every reduction, so it changes the float sums and,
#: through training, the weights: the same seed built with 1 and with 2 threads gave
#: different checkpoints (and different gate decisions). The build pins it, to one: the
#: training recipe was measured with one thread, and it leaves the machine's other cores
#: to everything else.
BUILD_THREADS = 1
#: Training is the same whatever the data sets' size: the models learn from a stream of fresh
#: items, not from the evaluation data, so a larger world evaluates the same models on more
#: items (and, with the shipped world's seed, copies its weights rather than training).
VLM_STEPS = (0, 3000, 10000)
#: The LLM agent's attention heads per world architecture (the agent runs on transformers
#: only; the Idefics3 world's are 32 wide, as its VLM's).
LLM_HEADS = {"llava": 4, "idefics3": 2}
LLM_STEPS = 300
FAULT_STEPS = 300

_P = ParamSpec("_P")
_T = TypeVar("_T")


#: The suite that runs every evaluator on the world's data (``vlgate evaluate --suite WORLD/suite.yaml``).
WORLD_SUITE = """\
# Every evaluator on the synthetic world's data; paths are relative to this file. The
# world's models are trained on vlgate's own prompts, so every evaluator runs under the
# vlgate protocol (each evaluator's protocols.py), not the benchmarks' released ones. GenCeption
# compares images with the world's contrastively trained CLIP: the random-weight ViT's
# features put every pair of the world's images above 0.95 cosine, too close to rank
# describers by.
name: synthetic-world
batch_size: 8
evaluators:
  lcm-mc: {data: data/mc, protocol: vlgate}
  lcm-nb: {data: data/nb, protocol: vlgate}
  vlind: {data: data/vlind, protocol: vlgate}
  genception: {data: data/genception, iterations: 3, generator: scene-renderer, encoder: checkpoints/clip, encoder_kind: clip, protocol: vlgate}
  decc: {data: data/decc, llm: checkpoints/llm-agent, protocol: vlgate}
"""


#: How vLLM runs the world's VLM (read only under ``backend: vllm``): float32 (the parity
#: tests compare it with the transformers backend in float32), NaturalBench's two images,
#: and a KV cache of a tenth of the machine's memory (vLLM's CPU build reserves 92 % by
#: default and refuses to start when that much is not free).
WORLD_VLLM_SETTINGS = """\
vllm: {dtype: float32, max_model_len: 512, gpu_memory_utilization: 0.1, limit_mm_per_prompt: {image: 2}}
"""


def world_suite(backend: str = "transformers") -> str:
    """The world's suite file (``suite.yaml``), or the same suite on vLLM (``suite-vllm.yaml``)."""
    return WORLD_SUITE + WORLD_VLLM_SETTINGS + (f"backend: {backend}\n" if backend != "transformers" else "")


@dataclass(frozen=True)
class TrainingRecipe:
    """How the world's models are made: the VLM family's architecture
    (``architectures.ARCHITECTURES``; vLLM's CPU build serves both) and each training's
    length in steps (the VLM versions', the LLM agent's, each faulty version's; None:
    :data:`VLM_STEPS`, :data:`LLM_STEPS`, :data:`FAULT_STEPS` as they are when the world is
    built). Together, because the manifest records them together and a cached or shipped
    world is reused only when all of them match; tests use tiny lengths."""

    architecture: str = "llava"
    vlm_steps: tuple[int, ...] | None = None
    llm_steps: int | None = None
    fault_steps: int | None = None


def build_world(
    out: str | Path,
    size: str = "small",
    seed: int = 0,
    force: bool = False,
    training: TrainingRecipe = TrainingRecipe(),
    from_code: bool = False,
    on_phase: Callable[[str, float | None], None] | None = None,
) -> dict[str, object]:
    """The world under ``out``: kept when a manifest there already matches (unless
    ``force``), else copied from the shipped world when that is the one asked for (unless
    ``from_code``), else trained. ``training``: the architecture and training lengths
    (:class:`TrainingRecipe`; by default the shipped world's).
    ``on_phase(phase, seconds)`` is told as each phase of a training starts (seconds None)
    and ends (the manifest's ``seconds`` keys)."""
    out = Path(out)
    manifest_path = out / "manifest.json"
    steps = tuple(training.vlm_steps if training.vlm_steps is not None else VLM_STEPS)
    llm_steps = LLM_STEPS if training.llm_steps is None else training.llm_steps
    fault_steps = FAULT_STEPS if training.fault_steps is None else training.fault_steps
    wanted = {
        "format": WORLD_FORMAT,
        "size": size,
        "seed": seed,
        "vlm_steps": list(steps),
        "llm_steps": llm_steps,
        "fault_steps": fault_steps,
        "threads": BUILD_THREADS,
        "architecture": training.architecture,
    }
    if training.architecture not in LLM_HEADS:
        raise ValueError(f"unknown world VLM architecture {training.architecture!r}; known: {', '.join(LLM_HEADS)}")
    if manifest_path.is_file() and not force:
        manifest = json.loads(manifest_path.read_text())
        if {k: manifest.get(k) for k in wanted} == wanted:
            return manifest | {"cached": True}
    shipped = shipped_manifest()
    if not from_code and {k: shipped.get(k) for k in wanted} == wanted:
        return copy_shipped_world(out)
    trained_as_shipped = {k: v for k, v in wanted.items() if k != "size"}
    if not from_code and {k: shipped.get(k) for k in trained_as_shipped} == trained_as_shipped:
        return resize_shipped_world(out, size)
    # torch and transformers load only when something has to be built: a cached call stays fast
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        return _build(out, size, seed, wanted, on_phase)
    finally:
        torch.set_num_threads(threads)


def _build(out: Path, size: str, seed: int, wanted: dict[str, object], on_phase: Callable[[str, float | None], None] | None = None) -> dict[str, object]:
    """Train the world that ``wanted`` (the manifest's recipe: training lengths, architecture) describes."""
    from vlgate.evaluators.world.faults import FAULTS
    from vlgate.evaluators.world.generators import build_clip, build_diffusion_pipeline
    from vlgate.evaluators.world.tokenizer import world_tokenizer
    from vlgate.evaluators.world.training import build_faulty_version, build_llm, build_vit_encoder, build_vlm_versions
    from vlgate.evaluators.world.vllm_padding import pad_attention_heads

    manifest_path = out / "manifest.json"
    if out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if on_phase is not None:
            on_phase(name, None)
        t = time.perf_counter()
        result = fn(*args, **kwargs)
        timings[name] = round(time.perf_counter() - t, 2)
        if on_phase is not None:
            on_phase(name, timings[name])
        return result

    data = timed("data", build_datasets, out / "data", size, seed)
    tokenizer = world_tokenizer(out / "data", seed)
    architecture, steps = cast(str, wanted["architecture"]), tuple(cast(list[int], wanted["vlm_steps"]))
    vlms = timed("vlm", build_vlm_versions, tokenizer, out / "checkpoints", steps, seed, architecture)
    faults = {fault: timed(f"vlm_{fault}", build_faulty_version, vlms[max(steps)], out / "checkpoints" / f"vlm-{fault}", fault, cast(int, wanted["fault_steps"]), seed) for fault in FAULTS}
    if architecture == "llava":  # after training, which the 16-wide heads were tuned for
        for folder in [*vlms.values(), *faults.values()]:
            pad_attention_heads(folder)
    llm = timed("llm", build_llm, tokenizer, out / "checkpoints" / "llm-agent", cast(int, wanted["llm_steps"]), seed, LLM_HEADS[architecture])
    vit = timed("vit", build_vit_encoder, out / "checkpoints" / "vit-encoder", seed=seed)
    clip = timed("clip", build_clip, out / "checkpoints" / "clip", seed=seed)
    diffusion = timed("diffusion", build_diffusion_pipeline, out / "checkpoints" / "diffusion", seed=seed)
    manifest = wanted | {
        "vlgate_version": __version__,
        "code_digest": world_code_digest(),
        "data": {name: str(path.relative_to(out)) for name, path in data.items()},
        "checkpoints": {
            "vlm": {str(n): str(path.relative_to(out)) for n, path in vlms.items()},
            "vlm_faults": {fault: str(path.relative_to(out)) for fault, path in faults.items()},
            "llm_agent": str(llm.relative_to(out)),
            "vit_encoder": str(vit.relative_to(out)),
            "clip": str(clip.relative_to(out)),
            "diffusion": str(diffusion.relative_to(out)),
        },
        "seconds": timings | {"total": round(time.perf_counter() - started, 2)},
    }
    (out / "suite.yaml").write_text(world_suite())
    (out / "suite-vllm.yaml").write_text(world_suite("vllm"))
    manifest["files"] = file_hashes(out)
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return manifest | {"cached": False}


def resize_shipped_world(out: Path, size: str) -> dict[str, object]:
    """The shipped world's models with its data sets drawn at another ``size`` (same seed):
    the models are trained on a stream, never on the evaluation data, and every word of a
    larger draw is in their vocabulary (``tests/test_world_checkpoints.py`` checks), so
    this is the world ``--from-code`` would train but for the tokenizer's item ids, in
    seconds and with the same weights on every machine. ``models: shipped`` in the
    manifest says so."""
    manifest = copy_shipped_world(out)
    shutil.rmtree(out / "data")
    data = build_datasets(out / "data", size, cast(int, manifest["seed"]))
    manifest = {k: v for k, v in manifest.items() if k not in ("cached", "shipped", "files")} | {
        "size": size,
        "models": "shipped",
        "data": {name: str(path.relative_to(out)) for name, path in data.items()},
    }
    manifest["files"] = file_hashes(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest | {"cached": False, "shipped": True}


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` but the manifest, by relative path."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != "manifest.json" and "__pycache__" not in path.parts
    }


def world_code_digest() -> str:
    """sha256 over the source of the modules that decide what the world is."""
    here = Path(__file__).parent
    return "sha256:" + hashlib.sha256(b"\0".join((here / name).read_bytes() for name in WORLD_CODE)).hexdigest()


def shipped_manifest() -> dict[str, object]:
    """The shipped world's manifest; empty when this installation has none."""
    path = SHIPPED_WORLD / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


class DamagedWorldError(RuntimeError):
    pass


def copy_shipped_world(out: Path) -> dict[str, object]:
    """The shipped world copied to ``out``, every file checked against its manifest hash."""
    manifest = shipped_manifest()
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(SHIPPED_WORLD, out, ignore=shutil.ignore_patterns("__pycache__"))
    found = file_hashes(out)
    if found != manifest.get("files"):
        changed = sorted({name for name, _ in set(found.items()) ^ set(cast(dict[str, str], manifest.get("files", {})).items())})
        raise DamagedWorldError(f"the shipped world in {SHIPPED_WORLD} does not match its manifest ({len(changed)} files differ, e.g. {changed[0]}); rebuild it with vlgate make-world --from-code")
    return manifest | {"cached": False, "shipped": True}
