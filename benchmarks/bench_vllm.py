"""VL-LCM's cost on vLLM, as ratios from one run on the same items.

Runs in the vLLM environment (``make bench-vllm``, or ``.venv-vllm/bin/python
benchmarks/bench_vllm.py``) on the shipped world's trained VLM (the demo's v3), or a
random-weight model of a realistic shape.

  (a) full VL-LCM (the MC question and its K yes/no probes: K+1 requests per item) against
      MC only (1 request per item), with vLLM's prefix caching on and, in a second engine,
      off. Target: full ≤ 1.25 × MC-only with prefix caching.
  (b) option scoring (one step, the options' log-probabilities) against generate-and-parse
      (greedy text of up to 16 tokens, VLind-Bench's way), for the same True/False answers.

  (c) transformers against vLLM on the same full VL-LCM batch: vlgate's transformers backend
      (batches of 16, shared prefixes checked exact) against vLLM with prefix caching.

Every timing is the best of ``--repeat`` runs of the whole batch; the engine's start is
not timed, and each batch is run once first so that compilation is not timed either.

``--model world`` is the shipped world's trained LLaVA (10,000 steps): 9 image tokens and a
64-wide text model, so a request costs the engine's fixed overhead (1.5–2 ms on a CPU)
whatever its length, and its prompts (under 40 tokens) are shorter than one KV block, so
nothing is cached. ``--model wide`` is a random-weight Idefics3 with the world's tokenizer whose cost is in
the shared prefix, as in a real VLM: a 128 px image (64 image tokens), 256-wide text with
4 layers; its answers are meaningless, its timings are the point. ``--model llava-size``
gives the image LLaVA-1.5's 576 tokens (a 768 px image of 16 px patches) and the text
model 512 width and 8 layers, so a probe's own tokens are a few per cent of its prompt
(its default is 24 items: a request costs about 0.3 s on two cores). ``--model qwen-size``
is the family matrix's Qwen2.5-VL (``tests/model_families/qwen.py``) made 512 wide with 8
layers, its images 448 px: 256 image tokens each, as Qwen2.5-VL gives a 448 px image.

    python benchmarks/bench_vllm.py [--model world|wide|llava-size|qwen-size] [--items N] [--repeat 3] [--block-size 32]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from vlgate.evaluators import protocols
from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.vllm_offline import VllmBackend
from vlgate.evaluators.loaders.items import McItem
from vlgate.evaluators.scenes.scene import render
from vlgate.evaluators.vl_lcm.runner import lcm_mc_requests
from vlgate.evaluators.vlind import prompts as vlind_prompts
from vlgate.evaluators.vlind import protocols as vlind_protocols
from vlgate.evaluators.vlind.metrics import parse_true_false
from vlgate.evaluators.world.build import build_world
from vlgate.evaluators.world.datasets import mc_item

FULL_OVER_MC_TARGET = 1.25
#: vlgate's VLind-Bench answer length (the generate-and-parse side of (b))
ANSWER_TOKENS = next(p for p in vlind_protocols.VLIND if p.name == protocols.VLGATE).max_new_tokens["answer"]


def best_of(repeat: int, run: Callable[[], object], reset: Callable[[], object]) -> float:
    """Best of ``repeat`` timed runs after one warm-up (compilation is not what is compared);
    ``reset`` empties the prefix cache before each, so no run reuses an earlier run's blocks."""
    reset()
    run()
    times = []
    for _ in range(repeat):
        reset()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def mc_requests(n_items: int, seed: int = 0, image_px: int = 64) -> list[list[ChoiceRequest]]:
    """VL-LCM's requests (the MC question, then its K yes/no probes) for ``n_items`` fresh
    world items: every image and question distinct, as in an evaluation."""
    rng = np.random.default_rng(seed)
    per_item = []
    for index in range(n_items):
        scene, row = mc_item(rng, index)
        item = McItem(id=str(index), image=Path("unused"), question=row["question"], options=tuple(row["options"]), answer=row["answer"])
        per_item.append(lcm_mc_requests(item, render(scene, image_px)))
    return per_item


def true_false_requests(per_item: list[list[ChoiceRequest]]) -> list[ChoiceRequest]:
    return [ChoiceRequest(requests[0].images, vlind_prompts.vlind_image(f"the answer is {requests[0].options[0]}"), ("True", "False")) for requests in per_item]


def measure(backend: VllmBackend, caching: bool, mc_only: list[ChoiceRequest], full: list[ChoiceRequest], true_false: list[ChoiceRequest], repeat: int) -> list[tuple[str, float, int]]:
    """(a) on this engine; (b) too when its prefix caching is on (the default engine)."""
    label = "prefix caching on" if caching else "prefix caching off"
    reset = backend.llm.reset_prefix_cache
    mc_seconds = best_of(repeat, lambda: backend.choice_probs(mc_only), reset)
    full_seconds = best_of(repeat, lambda: backend.choice_probs(full), reset)
    rows = [(f"(a) MC only, {label}", mc_seconds, len(mc_only)), (f"(a) full VL-LCM, {label}", full_seconds, len(full))]
    print(f"(a) {label}: full / MC-only = {full_seconds / mc_seconds:.2f}x (target <= {FULL_OVER_MC_TARGET}x with caching)", flush=True)
    if not caching:
        return rows
    generate_requests = [GenerateRequest(r.images, r.prompt, ANSWER_TOKENS) for r in true_false]
    scoring = best_of(repeat, lambda: backend.choice_probs(true_false), reset)
    generating = best_of(repeat, lambda: backend.generate(generate_requests), reset)
    parsed = [parse_true_false(text) for text in backend.generate(generate_requests)]
    chosen = [bool(np.argmax(p) == 0) for p in backend.choice_probs(true_false)]
    agree = sum(p == c for p, c in zip(parsed, chosen))
    print(
        f"(b) generate-and-parse / option scoring = {generating / scoring:.2f}x; the two agree on {agree} of "
        f"{len(true_false)} answers ({sum(p is None for p in parsed)} generated answers unparseable)",
        flush=True,
    )
    return rows + [("(b) option scoring, True/False", scoring, len(true_false)), ("(b) generate-and-parse, True/False", generating, len(true_false))]


#: Random-weight Idefics3 checkpoints whose work is where a real VLM's is (see above), by ``--model``.
BENCH_MODELS = {
    "wide": {"image_size": 128, "vision_hidden": 128, "text_hidden": 256, "layers": 4, "heads": 8, "kv_heads": 4},
    # LLaVA-1.5's 576 image tokens: a 768 px image of 16 px patches (48 x 48), pixel-shuffled by 2
    "llava-size": {"image_size": 768, "patch_size": 16, "vision_hidden": 128, "text_hidden": 512, "layers": 8, "heads": 16, "kv_heads": 4},
}


#: ``--model qwen-size``: the matrix's Qwen2.5-VL at a size whose cost is in the model, and its image size.
QWEN_SIZE = {
    "text": {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 4096},
    "max_image_tokens": 256,
}
QWEN_IMAGE_PX = 448  # 32 x 32 patches of 14 px, merged 2 x 2: 256 tokens


def qwen_checkpoint(world: Path) -> Path:
    """The family matrix's Qwen2.5-VL builder at :data:`QWEN_SIZE`, built once into ``world``."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from model_families.qwen import build_qwen2_5_vl

    out = world / "checkpoints" / "bench-qwen-size"
    if not (out / "config.json").is_file():
        torch.manual_seed(0)
        build_qwen2_5_vl(out, **QWEN_SIZE)  # type: ignore[arg-type]
    return out


def transformers_seconds(checkpoint: Path, full: list[ChoiceRequest], repeat: int) -> float:
    """(c): the transformers backend (float32, batches of 16, shared prefixes) on the full batch."""
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend.load(checkpoint, device="cpu", batch_size=16)
    try:
        seconds = best_of(repeat, lambda: backend.choice_probs(full), lambda: None)
        print(f"(c) transformers: shared prefix {backend.prefix_sharing.verified} ({backend.prefix_sharing.reason or 'checked exact'})", flush=True)
        return seconds
    finally:
        backend.close()


def bench_checkpoint(world: Path, name: str) -> Path:
    """The random-weight Idefics3 ``name`` of :data:`BENCH_MODELS`, built once into ``world``."""
    from transformers import AutoTokenizer

    from vlgate.evaluators.world.architectures import TinyIdefics3Config, build_idefics3_vlm
    from vlgate.evaluators.world.training import save_checkpoint

    out = world / "checkpoints" / f"bench-{name}"
    if not (out / "config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(world / "checkpoints" / "llm-agent")  # the world's, without Idefics3's tokens
        config = TinyIdefics3Config(**BENCH_MODELS[name])
        model, processor = build_idefics3_vlm(tokenizer, config)
        # rotary positions: the world's 512 is a setting, not a learnt table; the image alone fills 576
        model.config.text_config.max_position_embeddings = 2048
        save_checkpoint(model, processor, out, {"kind": "benchmark", "architecture": type(model).__name__})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, help="MC items (default 200; 24 for llava-size)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--block-size", type=int, default=32, help="KV block size (CPU: a multiple of 32; only full blocks are cached)")
    parser.add_argument("--model", choices=("world", *BENCH_MODELS, "qwen-size"), default="world", help="what is measured (see above)")
    parser.add_argument("--world", type=Path, help="the world's folder (default: the shipped world copied to a temporary folder)")
    args = parser.parse_args()

    world = args.world or Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "world"
    manifest = build_world(world)
    checkpoint = world / manifest["checkpoints"]["vlm"]["10000"]
    settings = yaml.safe_load((world / "suite.yaml").read_text())["vllm"] | {"block_size": args.block_size}
    if args.model != "world":
        checkpoint = qwen_checkpoint(world) if args.model == "qwen-size" else bench_checkpoint(world, args.model)
        # its profiling run alone needs about the world's whole 0.1 share; the KV cache needs more
        settings["gpu_memory_utilization"] = 0.3
        settings["max_model_len"] = 1024
    args.items = args.items or (24 if args.model in ("llava-size", "qwen-size") else 200)
    per_item = mc_requests(args.items, image_px=QWEN_IMAGE_PX if args.model == "qwen-size" else 64)
    mc_only = [requests[0] for requests in per_item]
    full = [request for requests in per_item for request in requests]
    true_false = true_false_requests(per_item)
    k = len(per_item[0]) - 1
    print(f"{args.items} MC items (K={k}) of the world; {checkpoint.name}; engine {settings}; best of {args.repeat}", flush=True)

    rows: list[tuple[str, float, int]] = []
    for caching in (True, False):
        backend = VllmBackend.load(checkpoint, **settings, enable_prefix_caching=caching)
        try:
            rows += measure(backend, caching, mc_only, full, true_false, args.repeat)
        finally:
            backend.close()
    vllm_full = next(seconds for name, seconds, _ in rows if name == "(a) full VL-LCM, prefix caching on")
    transformers_full = transformers_seconds(checkpoint, full, args.repeat)
    rows.append(("(c) full VL-LCM, transformers", transformers_full, len(full)))
    print(f"(c) transformers / vLLM (prefix caching on), full VL-LCM = {transformers_full / vllm_full:.2f}x", flush=True)
    print()
    print(f"{'batch':40s} {'seconds':>8s} {'requests':>9s} {'ms/request':>11s}")
    for name, seconds, n in rows:
        print(f"{name:40s} {seconds:8.2f} {n:9d} {1000 * seconds / n:11.2f}")


if __name__ == "__main__":  # vLLM starts its engine in a spawned process
    main()
