"""What VL-LCM costs on top of MC accuracy, and what option scoring saves over generation
(benchmarks (a) full VL-LCM vs MC-only and (b) option scoring vs generate-and-parse); one run, one backend, one data set.

The model is a random-weight LLaVA shaped like the real thing where it matters for cost:
224 px images in 14 px patches, so 256 image tokens dominate every prompt (LLaVA-1.5 has
576). Weights do not change timings, so random ones are fine here.

(a) full VL-LCM per sample (MC prompt + K=4 yes/no probes, sharing the image-and-question
    prefix) vs MC-only accuracy (the MC prompt alone) — target ≤ 1.6×.
(b) option scoring (one forward pass, next-token probabilities over the option letters)
    vs generate-and-parse (greedy generation, first option letter in the text) for the
    same MC prompts — target ≥ 5× faster. A random-weight model has no idea when to stop,
    so generation runs to a fixed answer length (EOS off), as a chatty VLM writing "The
    answer is (B) circle." would; the cost ratio is what this measures. Whether the parsed
    letters equal the scored ones needs a trained model: benchmarks/world_vlm_accuracy.py.
Also printed: the shared-prefix path vs the same K+1 prompts run whole.

    python benchmarks/bench_scoring.py [N_SAMPLES]
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.transformers_backend import TransformersBackend
from vlgate.evaluators.loaders.items import McItem
from vlgate.evaluators.scenes.scene import render
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts
from vlgate.evaluators.vl_lcm.runner import lcm_mc_requests
from vlgate.evaluators.world.architectures import TinyVlmConfig, build_vlm
from vlgate.evaluators.world.datasets import mc_item
from vlgate.evaluators.world.tokenizer import build_tokenizer, world_vocabulary
from vlgate.evaluators.world.training import save_checkpoint

GENERATE_TOKENS = 8  # "The answer is (B) circle." is about 8 tokens


def best_of(runs: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def first_letter(text: str, letters: str) -> int | None:
    match = re.search(rf"\b([{letters}])\b", text.upper())
    return letters.index(match.group(1)) if match else None


def main() -> None:
    n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rng = np.random.default_rng(0)
    drawn = [mc_item(rng, i) for i in range(n_samples)]
    items = [McItem(f"s{i}", Path("unused.png"), row["question"], tuple(row["options"]), row["answer"]) for i, (_, row) in enumerate(drawn)]
    images = [render(scene, 224) for scene, _ in drawn]
    texts = [text for item in items for text in (prompts.mc_prompt(item.question, item.options), *(lcm_prompts.yes_no_probe(item.question, o) for o in item.options))]
    tokenizer = build_tokenizer(world_vocabulary(texts + ["the answer is"]))
    model, processor = build_vlm(tokenizer, TinyVlmConfig(image_size=224, patch_size=14, vision_hidden=128, text_hidden=256, layers=4, heads=4))
    with tempfile.TemporaryDirectory() as folder:
        backend = TransformersBackend.load(save_checkpoint(model, processor, Path(folder) / "bench-vlm", {"kind": "benchmark"}), batch_size=8)
    torch.set_grad_enabled(False)
    backend.model.generation_config.eos_token_id = None  # see (b) above: a fixed answer length

    full = [request for item, image in zip(items, images) for request in lcm_mc_requests(item, image)]
    whole = [ChoiceRequest(r.images, r.prompt, r.options) for r in full]
    mc_only = [ChoiceRequest((image,), prompts.mc_prompt(item.question, item.options), tuple("ABCD")) for item, image in zip(items, images)]
    generate = [GenerateRequest((image,), prompts.mc_prompt(item.question, item.options), GENERATE_TOKENS) for item, image in zip(items, images)]
    generate_full = [GenerateRequest(r.images, r.prompt, GENERATE_TOKENS) for r in whole]
    backend.choice_probs(full[:5])  # warm-up

    t_mc, mc_probs = best_of(3, lambda: backend.choice_probs(mc_only))
    t_full, full_probs = best_of(3, lambda: backend.choice_probs(full))
    t_whole, whole_probs = best_of(3, lambda: backend.choice_probs(whole))
    t_generate, generated = best_of(1, lambda: backend.generate(generate))
    t_generate_full, _ = best_of(1, lambda: backend.generate(generate_full))
    np.testing.assert_allclose(np.concatenate(full_probs), np.concatenate(whole_probs), atol=1e-4)

    print(f"{n_samples} MC samples, K=4, ~{(224 // 14) ** 2} image tokens per prompt, device {backend.info.device}, torch threads {torch.get_num_threads()}")
    print(f"  MC only (accuracy)           : {t_mc:.3f} s")
    print(f"  full VL-LCM, shared prefix   : {t_full:.3f} s   (same {len(full)} prompts run whole: {t_whole:.3f} s)")
    print(f"  (a) full VL-LCM / MC only    = {t_full / t_mc:.2f}x   target <= 1.6x")
    print(f"  generate-and-parse ({GENERATE_TOKENS} tokens) : {t_generate:.3f} s   (parsed: {[first_letter(text, 'ABCD') for text in generated][:4]}...)")
    print(f"  (b) generate / option scoring = {t_generate / t_mc:.2f}x   target >= 5x")
    print(f"      all {len(full)} VL-LCM answers generated: {t_generate_full:.3f} s = {t_generate_full / t_full:.2f}x the shared-prefix scoring")
    print(f"  shared prefix saves            {t_whole / t_full:.2f}x over whole prompts")


if __name__ == "__main__":
    main()
