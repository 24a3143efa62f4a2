"""What rendering chat templates in a limited child process costs (``evaluators/backends/
chat_templates.py``), against transformers rendering them in process, on the shipped world
VLM's processor and the evaluators' own prompts.

Prints, from one run: the child's start (imports, first answer), the time per render in
process and in the child, their ratio, and the renders' share of a forward pass of the
world VLM on the same prompts (what a request costs anyway).

    python benchmarks/bench_chat_templates.py [--renders 2000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.chat_templates import ChatTemplateRenderer, template_variables, user_turn
from vlgate.evaluators.backends.transformers_backend import TransformersBackend

CHECKPOINT = Path(__file__).parents[1] / "evaluators" / "world" / "shipped" / "checkpoints" / "vlm-steps10000"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    backend = TransformersBackend.load(CHECKPOINT, device="cpu")
    texts = [prompts.mc_prompt(f"What colour is shape {i}?", ["red", "green", "blue", "grey"]) for i in range(args.renders)]
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}] for text in texts]

    started = time.perf_counter()
    in_process = [backend.processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    in_process_s = time.perf_counter() - started

    renderer = ChatTemplateRenderer("world-vlm", backend.processor.chat_template, template_variables(backend.tokenizer))
    started = time.perf_counter()
    renderer.render(messages[0])
    start_s = time.perf_counter() - started
    started = time.perf_counter()
    in_child = [renderer.render(m) for m in messages]
    in_child_s = time.perf_counter() - started
    renderer.close()
    assert in_child == in_process, "the child rendered other text"

    sample = texts[:64]
    from vlgate.evaluators.backends.base import ChoiceRequest
    from vlgate.evaluators.scenes.scene import Scene, render

    image = render(Scene(shapes=()), 64)
    requests = [ChoiceRequest((image,), text, ("A", "B", "C", "D")) for text in sample]
    started = time.perf_counter()
    backend.choice_probs(requests)
    forward_s = (time.perf_counter() - started) / len(sample)
    started = time.perf_counter()
    for text in sample:
        user_turn(backend.template, text, 1, "world-vlm", True)
    backend_render_s = (time.perf_counter() - started) / len(sample)
    backend.close()

    per_in_process, per_child = in_process_s / args.renders, in_child_s / args.renders
    print(f"child start (imports, first render): {start_s:.2f} s")
    print(f"per render: in process {per_in_process * 1e6:.0f} us, in the child {per_child * 1e6:.0f} us: ratio {per_child / per_in_process:.2f}x")
    print(f"per request of the world VLM: forward {forward_s * 1e3:.2f} ms, render in the child {backend_render_s * 1e3:.3f} ms: {backend_render_s / forward_s:.1%} of it")


if __name__ == "__main__":
    main()
