"""vlgate's transformers backend on a LLaVA-1.5-7B-shaped model: what VL-LCM costs over MC
accuracy, what option scoring saves over generation, and whether the shared-prefix path
is exact in the model's dtype. Everything runs through ``TransformersBackend`` itself,
built around a random-weight model made in memory (weights do not change timings).

(a) full VL-LCM per item (the MC question and its K=4 yes/no probes, the five requests
    ``lcm_mc_requests`` builds, which share the image-and-question prefix) vs MC-only (the
    MC request alone), with shared-prefix scoring on (the backend's default) and off
    (``share_prefixes=False``, every request scored whole). Read "full / MC-only" as what
    VL-LCM costs on top of the accuracy run (1.0 would be free, 5.0 is five separate
    prompts) and "off / on" as what the shared prefix buys on the full run.
(b) option scoring (``choice_probs`` on the MC request: one forward pass) vs
    generate-and-parse (``generate`` of ``--new-tokens`` greedy tokens for the same
    request). A random-weight model does not know when to stop, so EOS is switched off
    and every generation runs the full answer length, as a chatty VLM writing "The answer
    is (B) circle." would. Read "generate / option scoring" as how much slower the parsed
    answer is. Whether parsed letters match the scored ones needs a trained model.
(c) exactness of the shared-prefix path in the model's dtype: ``backend.prefix_sharing``
    after its first call (the backend checks its first groups against the whole prompts
    and turns sharing off past its tolerance: ``PREFIX_TOLERANCE`` in full precision, twice
    the batching noise in half), and this script's own comparison of
    every shared-prefix probability with the whole-prompt one from a ``share_prefixes=False``
    backend on the same model object. For scale, the whole-prompt path is also compared
    with itself run over the requests in reverse order (other batch neighbours, other
    padding): in bf16 that re-batching noise is the floor any split prompt is judged against.

Shapes (``--shape``):

- ``tiny``: the synthetic world's LLaVA (``build_vlm``: 48 px images, 9 image tokens, 64
  wide), fp32 on the CPU; checks this script in under a minute.
- ``7b``: LLaVA-1.5-7B's shape: CLIP ViT-L/14 at 336 px (576 image tokens; 1024 wide, 24
  layers, 16 heads), Llama-2-7B text (4096 wide, 32 layers, 32 heads, MLP 11008), built
  directly on CUDA in bf16. The vocabulary is the world's word-level tokenizer's (a few
  hundred words, not 32,000): scoring computes only the last position's logits, so it
  costs nothing measurable there; the real head (131 M weights, about 2% of the model)
  would add about 2% to each generated token of (b).

Times are the best of ``--repeat`` runs after one warm-up pass of every workload, with
``torch.cuda.synchronize()`` around each run on CUDA; per-item times divide by ``--items``.

    OMP_NUM_THREADS=1 python benchmarks/bench_transformers_gpu.py --shape tiny --items 8
    python benchmarks/bench_transformers_gpu.py --shape 7b [--items 24] [--batch-size 16] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

from vlgate.evaluators.backends.base import BackendInfo, GenerateRequest
from vlgate.evaluators.backends.transformers_backend import LoadedModel, PrefixSharing, TransformersBackend
from vlgate.evaluators.loaders.items import McItem
from vlgate.evaluators.vl_lcm.runner import lcm_mc_requests
from vlgate.evaluators.world.architectures import build_vlm
from vlgate.evaluators.world.tokenizer import CHAT_TEMPLATE, build_tokenizer, world_vocabulary

Result = TypeVar("Result")

#: LLaVA-1.5-7B: CLIP ViT-L/14-336 and Llama-2-7B
LLAVA_7B_IMAGE_SIZE = 336
LLAVA_7B_PATCH_SIZE = 14
#: the world's tiny LLaVA (``TinyVlmConfig``'s defaults)
TINY_IMAGE_SIZE = 48
OPTION_LETTERS = "ABCD"

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white", "brown", "gray"]
OBJECTS = ["circle", "square", "triangle", "star", "car", "dog", "cat", "tree", "house", "boat"]
PLACES = ["left", "right", "top", "bottom", "middle", "corner"]
MATERIALS = ["wood", "metal", "glass", "stone", "plastic", "paper"]
COUNTS = ["0", "1", "2", "3", "4", "5", "6", "7"]
#: question wordings and the pool their four options are drawn from
QUESTION_TEMPLATES: list[tuple[str, list[str]]] = [
    ("What color is the {object} in the picture?", COLORS),
    ("Which color does the {object} on the {place} have?", COLORS),
    ("How many {object}s can be seen in this image?", COUNTS),
    ("Count the {object}s in the scene. How many are there?", COUNTS),
    ("Which object is shown on the {place} of the image?", OBJECTS),
    ("What is the large {color} shape next to the {object}?", OBJECTS),
    ("What material is the {object} on the {place} made of?", MATERIALS),
    ("Where in the image is the {color} {object}?", PLACES),
]


def synthetic_items(count: int, seed: int) -> list[McItem]:
    """``count`` four-option MC items, cycling through the question wordings with random fillers."""
    rng = np.random.default_rng(seed)
    items = []
    for index in range(count):
        template, pool = QUESTION_TEMPLATES[index % len(QUESTION_TEMPLATES)]
        question = template.format(object=rng.choice(OBJECTS), place=rng.choice(PLACES), color=rng.choice(COLORS))
        options = tuple(str(option) for option in rng.choice(pool, size=4, replace=False))
        items.append(McItem(f"bench-{index}", Path(f"bench-{index}.png"), question, options, answer=int(rng.integers(4))))
    return items


def noise_images(count: int, size: int, seed: int) -> list[Image.Image]:
    """Distinct random-noise RGB images (distinct objects too: the backend groups requests by image identity)."""
    rng = np.random.default_rng(seed + 1)
    return [Image.fromarray(rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)) for _ in range(count)]


def clip_image_processor(size: int) -> Any:
    """CLIP's image processor at ``size`` px: the torchvision one (as ``build_vlm`` uses) where
    torchvision is installed, else transformers' PIL one (same resize, crop and normalisation)."""
    try:
        import torchvision  # noqa: F401
        from transformers import CLIPImageProcessor as processor_class
    except ImportError:
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil as processor_class
    return processor_class(size={"shortest_edge": size}, crop_size={"height": size, "width": size})


def build_llava_7b(tokenizer: Any, device: torch.device, dtype: torch.dtype, seed: int) -> tuple[LlavaForConditionalGeneration, LlavaProcessor]:
    """A random-weight LLaVA-1.5-7B-shaped model built on ``device`` in ``dtype`` (no CPU copy)
    and its processor, mirroring ``build_vlm``: with the "default" feature strategy the CLS
    token is dropped, so the processor adds one token and removes it (576 image tokens)."""
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=LLAVA_7B_IMAGE_SIZE,
        patch_size=LLAVA_7B_PATCH_SIZE,
        projection_dim=768,
        hidden_act="quick_gelu",
    )
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    image_tokens = (LLAVA_7B_IMAGE_SIZE // LLAVA_7B_PATCH_SIZE) ** 2
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        image_seq_length=image_tokens,
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )
    with device:
        model = LlavaForConditionalGeneration._from_config(config, dtype=dtype)
    processor = LlavaProcessor(
        image_processor=clip_image_processor(LLAVA_7B_IMAGE_SIZE),
        tokenizer=tokenizer,
        patch_size=LLAVA_7B_PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    return model.eval(), processor


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_time(run: Callable[[], Result], repeat: int, device: torch.device) -> tuple[float, Result]:
    """The fastest of ``repeat`` runs in seconds, and the last run's result."""
    best, result = math.inf, None
    for _ in range(repeat):
        synchronize(device)
        started = time.perf_counter()
        result = run()
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return best, result  # type: ignore[return-value]


def largest_difference(left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> float:
    return max(float(np.max(np.abs(a - b))) for a, b in zip(left, right, strict=True))


def first_letter(text: str) -> int | None:
    match = re.search(rf"\b([{OPTION_LETTERS}])\b", text.upper())
    return OPTION_LETTERS.index(match.group(1)) if match else None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} torch threads)"


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=("tiny", "7b"), default="tiny", help="tiny: the world's LLaVA, fp32 on CPU; 7b: LLaVA-1.5-7B-shaped, bf16 on CUDA")
    parser.add_argument("--items", type=int, default=24, help="synthetic MC items (K=4 options each)")
    parser.add_argument("--batch-size", type=int, default=16, help="the backend's batch size (requests, or prefix groups on the shared path)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per workload; the best is reported")
    parser.add_argument("--new-tokens", type=int, default=8, help="max_new_tokens of generate-and-parse (b)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    return parser.parse_args()


def main() -> None:
    arguments = parse_arguments()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    transformers.logging.set_verbosity_error()
    torch.set_grad_enabled(False)

    items = synthetic_items(arguments.items, arguments.seed)
    if arguments.shape == "7b":
        if not torch.cuda.is_available():
            raise SystemExit("--shape 7b needs CUDA")
        device, dtype, image_size = torch.device("cuda"), torch.bfloat16, LLAVA_7B_IMAGE_SIZE
    else:
        device, dtype, image_size = torch.device("cpu"), torch.float32, TINY_IMAGE_SIZE
    images = noise_images(arguments.items, image_size, arguments.seed)
    full_requests = [request for item, image in zip(items, images) for request in lcm_mc_requests(item, image)]
    mc_requests = full_requests[:: 1 + 4]  # each item's first request is its MC question
    vocabulary_texts = [request.prompt for request in full_requests] + ["the answer is"]
    tokenizer = build_tokenizer(world_vocabulary(vocabulary_texts))

    started = time.perf_counter()
    if arguments.shape == "7b":
        model, processor = build_llava_7b(tokenizer, device, dtype, arguments.seed)
    else:
        model, processor = build_vlm(tokenizer, seed=arguments.seed)
        model = model.to(device=device, dtype=dtype).eval()
    synchronize(device)
    build_seconds = time.perf_counter() - started
    model.generation_config.eos_token_id = None  # (b): every generation runs the full answer length
    parameters = sum(parameter.numel() for parameter in model.parameters())

    info = BackendInfo(
        name="transformers",
        model=f"random-llava-{arguments.shape}",
        digest="random-weights",
        device=str(device),
        extra={"architecture": type(model).__name__, "dtype": str(dtype).removeprefix("torch.")},
    )
    loaded = LoadedModel(model, processor, tokenizer, has_vision=True)
    shared = TransformersBackend(loaded, info, batch_size=arguments.batch_size)
    whole = TransformersBackend(loaded, info, batch_size=arguments.batch_size, share_prefixes=False)
    # the shared path's own speed and difference, whatever the backend's check decides
    forced = TransformersBackend(loaded, info, batch_size=arguments.batch_size)
    forced.prefix_sharing = PrefixSharing(True, "forced by the benchmark")
    generate_requests = [GenerateRequest(request.images, request.prompt, max_new_tokens=arguments.new_tokens) for request in mc_requests]

    example = processor(images=[[images[0]]], text=[shared.chat_text(mc_requests[0].prompt, 1)], return_tensors="pt")
    image_tokens = int((example["input_ids"] == processor.image_token_id).sum())
    mc_prompt_tokens = int(example["input_ids"].shape[1])

    # warm-up: one untimed pass of every workload; the shared backend's first call is the
    # one that checks its shared-prefix path against the whole prompts (c)
    shared.choice_probs(full_requests)
    prefix_sharing_after_first_call = dict(vars(shared.prefix_sharing))
    shared.choice_probs(mc_requests)
    whole.choice_probs(full_requests)
    whole.choice_probs(mc_requests)
    forced.choice_probs(full_requests)
    shared.generate(generate_requests)

    repeat = arguments.repeat
    seconds: dict[str, float] = {}
    seconds["mc_only_sharing_on"], mc_probs = best_time(lambda: shared.choice_probs(mc_requests), repeat, device)
    seconds["full_sharing_on"], full_shared_probs = best_time(lambda: shared.choice_probs(full_requests), repeat, device)
    seconds["mc_only_sharing_off"], _ = best_time(lambda: whole.choice_probs(mc_requests), repeat, device)
    seconds["full_sharing_off"], full_whole_probs = best_time(lambda: whole.choice_probs(full_requests), repeat, device)
    seconds["full_sharing_forced"], full_forced_probs = best_time(lambda: forced.choice_probs(full_requests), repeat, device)
    seconds["generate_and_parse"], generated = best_time(lambda: shared.generate(generate_requests), repeat, device)
    reordered = whole.choice_probs(full_requests[::-1])[::-1]  # (c)'s re-batching noise floor
    peak_memory_gib = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None

    ratios = {
        "full_over_mc_only_sharing_on": seconds["full_sharing_on"] / seconds["mc_only_sharing_on"],
        "full_over_mc_only_sharing_off": seconds["full_sharing_off"] / seconds["mc_only_sharing_off"],
        "full_sharing_off_over_on": seconds["full_sharing_off"] / seconds["full_sharing_on"],
        "full_sharing_forced_over_mc_only": seconds["full_sharing_forced"] / seconds["mc_only_sharing_off"],
        "full_sharing_off_over_forced": seconds["full_sharing_off"] / seconds["full_sharing_forced"],
        "generate_over_option_scoring": seconds["generate_and_parse"] / seconds["mc_only_sharing_on"],
    }
    is_mc = [index % 5 == 0 for index in range(len(full_requests))]
    scored_letters = [int(np.argmax(probs)) for probs in mc_probs]
    parsed_letters = [first_letter(text) for text in generated]
    exactness = {
        "prefix_sharing_after_first_call": prefix_sharing_after_first_call,
        "prefix_sharing_now": dict(vars(shared.prefix_sharing)),
        "tolerance": prefix_sharing_after_first_call["tolerance"],
        "shared_vs_whole_max_abs_difference": largest_difference(full_shared_probs, full_whole_probs),
        "shared_vs_whole_max_abs_difference_mc": largest_difference([p for p, mc in zip(full_shared_probs, is_mc) if mc], [p for p, mc in zip(full_whole_probs, is_mc) if mc]),
        "shared_vs_whole_max_abs_difference_probes": largest_difference([p for p, mc in zip(full_shared_probs, is_mc) if not mc], [p for p, mc in zip(full_whole_probs, is_mc) if not mc]),
        "forced_shared_vs_whole_max_abs_difference": largest_difference(full_forced_probs, full_whole_probs),
        "shared_vs_whole_same_argmax": sum(int(np.argmax(a) == np.argmax(b)) for a, b in zip(full_shared_probs, full_whole_probs)),
        "whole_vs_whole_reordered_max_abs_difference": largest_difference(full_whole_probs, reordered),
        "requests_compared": len(full_requests),
    }
    results: dict[str, Any] = {
        "shape": arguments.shape,
        "device": device_name(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": parameters,
        "model_build_seconds": build_seconds,
        "peak_gpu_memory_gib": peak_memory_gib,
        "items": arguments.items,
        "options_per_item": 4,
        "requests_full": len(full_requests),
        "image_tokens": image_tokens,
        "mc_prompt_tokens": mc_prompt_tokens,
        "batch_size": arguments.batch_size,
        "repeat": repeat,
        "new_tokens": arguments.new_tokens,
        "seconds": seconds,
        "ms_per_item": {name: 1000 * value / arguments.items for name, value in seconds.items()},
        "ratios": ratios,
        "generate_parsed_a_letter": sum(letter is not None for letter in parsed_letters),
        "generate_letter_equals_scored": sum(parsed == scored for parsed, scored in zip(parsed_letters, scored_letters)),
        "exactness": exactness,
    }
    shared.close()
    whole.close()
    forced.close()
    print_results(results)
    if arguments.out:
        arguments.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {arguments.out}")


def print_results(results: dict[str, Any]) -> None:
    per_item, ratios, exactness = results["ms_per_item"], results["ratios"], results["exactness"]
    first = exactness["prefix_sharing_after_first_call"]
    memory = f", peak GPU memory {results['peak_gpu_memory_gib']:.1f} GiB" if results["peak_gpu_memory_gib"] is not None else ""
    print(f"device {results['device']}; torch {results['torch']}, transformers {results['transformers']}, Python {results['python']}; dtype {results['dtype']}")
    print(
        f"shape {results['shape']}: random-weight LLaVA, {results['parameters'] / 1e6:,.1f} M parameters (built in {results['model_build_seconds']:.1f} s){memory}; "
        f"{results['image_tokens']} image tokens, MC prompt {results['mc_prompt_tokens']} tokens"
    )
    print(f"{results['items']} items x (MC + 4 yes/no probes) = {results['requests_full']} requests; batch size {results['batch_size']}; best of {results['repeat']} after a warm-up")
    print()
    print(f"{'workload':<46} {'total s':>9} {'ms / item':>10}")
    for name, label in [
        ("mc_only_sharing_on", "MC-only (choice_probs), sharing on"),
        ("full_sharing_on", "full VL-LCM (MC + 4 probes), sharing on"),
        ("mc_only_sharing_off", "MC-only (choice_probs), sharing off"),
        ("full_sharing_off", "full VL-LCM (MC + 4 probes), sharing off"),
        ("full_sharing_forced", "full VL-LCM, shared prefix forced on"),
        ("generate_and_parse", f"generate-and-parse ({results['new_tokens']} new tokens)"),
    ]:
        print(f"{label:<46} {results['seconds'][name]:>9.3f} {per_item[name]:>10.1f}")
    print()
    print(f"(a) full VL-LCM / MC-only, sharing on : {ratios['full_over_mc_only_sharing_on']:.2f}x")
    print(f"(a) full VL-LCM / MC-only, sharing off: {ratios['full_over_mc_only_sharing_off']:.2f}x")
    print(f"(a) full VL-LCM, sharing off / on     : {ratios['full_sharing_off_over_on']:.2f}x (what the shared prefix buys, where the check keeps it)")
    print(f"(a) full VL-LCM forced shared / MC-only: {ratios['full_sharing_forced_over_mc_only']:.2f}x; off / forced: {ratios['full_sharing_off_over_forced']:.2f}x")
    print(
        f"(b) generate-and-parse / option scoring: {ratios['generate_over_option_scoring']:.2f}x "
        f"(random weights: a letter parsed from {results['generate_parsed_a_letter']} of {results['items']} answers, equal to the scored argmax on {results['generate_letter_equals_scored']})"
    )
    print(f"(c) backend.prefix_sharing after the first call: verified={first['verified']}, largest_difference={first['largest_difference']:.3g}, reason={first['reason']!r} (tolerance {exactness['tolerance']:.3g})")
    print(
        f"(c) shared vs whole probabilities over {exactness['requests_compared']} requests: max |diff| {exactness['shared_vs_whole_max_abs_difference']:.3g} "
        f"(MC {exactness['shared_vs_whole_max_abs_difference_mc']:.3g}, probes {exactness['shared_vs_whole_max_abs_difference_probes']:.3g}), "
        f"same argmax on {exactness['shared_vs_whole_same_argmax']}; whole vs whole re-batched: {exactness['whole_vs_whole_reordered_max_abs_difference']:.3g}; "
        f"forced shared vs whole: {exactness['forced_shared_vs_whole_max_abs_difference']:.3g}"
    )
    if exactness["prefix_sharing_now"]["verified"] is False:
        print(f"    shared-prefix scoring is OFF for this model: {exactness['prefix_sharing_now']['reason']}")


if __name__ == "__main__":
    main()
