"""Held-out accuracy of the synthetic world's VLM family (issue 3).

Scores every VLM version of a built world on the world's MC and yes/no items
(option-letter / Yes-No argmax at the answer position) and prints the counts
next to chance, so "trained beats chance, untrained does not" can be read off.

    python benchmarks/world_vlm_accuracy.py [WORLD_DIR]   # default: $VLGATE_HOME/world
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from vlgate.evaluators.world import checkpoints as ck
from vlgate.home import vlgate_home


def main() -> None:
    world = Path(sys.argv[1]) if len(sys.argv) > 1 else vlgate_home() / "world"
    manifest = json.loads((world / "manifest.json").read_text())
    examples = ck.eval_examples(world / "data")
    print(f"{world}: {len(examples)} held-out items; chance = MC 1/4, yes/no 1/2")
    for steps, relative in manifest["checkpoints"]["vlm"].items():
        model = AutoModelForImageTextToText.from_pretrained(world / relative).eval()
        processor = AutoProcessor.from_pretrained(world / relative)
        token = processor.tokenizer.convert_tokens_to_ids
        choices = {"mc": [token(letter.lower()) for letter in "ABCD"], "yes/no": [token("yes"), token("no")]}
        labels = {"mc": list("ABCD"), "yes/no": ["Yes", "No"]}
        inputs = processor(
            images=[Image.open(path).convert("RGB") for path, _, _ in examples],
            text=[ck.chat_prompt(processor, text) for _, text, _ in examples],
            return_tensors="pt",
            padding=True,
        )
        with torch.no_grad():
            logits = model(**inputs, logits_to_keep=1).logits[:, -1, :]
        right = {"mc": [0, 0], "yes/no": [0, 0]}
        for (_, _, answer), row in zip(examples, logits):
            kind = "mc" if answer in labels["mc"] else "yes/no"
            predicted = labels[kind][int(torch.argmax(row[choices[kind]]))]
            right[kind][0] += predicted == answer
            right[kind][1] += 1
        print(f"  steps {steps:>5}: " + ", ".join(f"{kind} {hit}/{total} = {hit / total:.2f}" for kind, (hit, total) in right.items()))


if __name__ == "__main__":
    main()
