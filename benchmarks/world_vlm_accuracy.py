"""Held-out accuracy of the synthetic world's VLM family (issue 3).

Scores every VLM version of a built world (the family and its language-prior version)
through the transformers backend on the world's MC and yes/no items — option letter or
Yes/No argmax at the answer position — and prints hits next to chance, so "trained beats
chance, untrained does not" can be read off.

    python benchmarks/world_vlm_accuracy.py [WORLD_DIR]   # default: $VLGATE_HOME/world
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.base import ChoiceRequest
from vlgate.evaluators.backends.transformers_backend import TransformersBackend
from vlgate.evaluators.loaders.items import open_image
from vlgate.home import vlgate_home


def held_out_requests(data: Path) -> list[tuple[str, ChoiceRequest, int]]:
    """(group, request, index of the right option) for every MC and yes/no item."""
    rows = []
    for row in map(json.loads, (data / "mc" / "items.jsonl").read_text().splitlines()):
        image = open_image(data / "mc" / row["image"], row["id"], "image")
        letters = tuple(prompts.OPTION_LETTERS[: len(row["options"])])
        rows.append((f"mc/{row['category']}", ChoiceRequest((image,), prompts.mc_prompt(row["question"], row["options"]), letters), row["answer"]))
    for row in map(json.loads, (data / "yesno" / "items.jsonl").read_text().splitlines()):
        image = open_image(data / "yesno" / row["image"], row["id"], "image")
        request = ChoiceRequest((image,), f"{row['question']} {prompts.YES_NO_INSTRUCTION}", ("Yes", "No"))
        rows.append(("yesno", request, 0 if row["answer"] == "yes" else 1))
    return rows


def accuracy_by_group(backend: TransformersBackend, rows: list[tuple[str, ChoiceRequest, int]]) -> dict[str, tuple[int, int]]:
    probabilities = backend.choice_probs([request for _, request, _ in rows])
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (group, _, right), probs in zip(rows, probabilities):
        for key in dict.fromkeys((group, group.split("/")[0])):
            hits[key][0] += int(np.argmax(probs) == right)
            hits[key][1] += 1
    return {key: (hit, total) for key, (hit, total) in sorted(hits.items())}


def main() -> None:
    world = Path(sys.argv[1]) if len(sys.argv) > 1 else vlgate_home() / "world"
    manifest = json.loads((world / "manifest.json").read_text())
    rows = held_out_requests(world / "data")
    print(f"{world}: {len(rows)} held-out items; chance = MC 1/4, yes/no 1/2")
    versions = {f"steps {steps}": relative for steps, relative in manifest["checkpoints"]["vlm"].items()}
    if "vlm_language_prior" in manifest["checkpoints"]:
        versions["language prior"] = manifest["checkpoints"]["vlm_language_prior"]
    for name, relative in versions.items():
        backend = TransformersBackend.load(world / relative, batch_size=64)
        scores = accuracy_by_group(backend, rows)
        print(f"  {name:>15}: " + ", ".join(f"{group} {hit}/{total} = {hit / total:.2f}" for group, (hit, total) in scores.items()))


if __name__ == "__main__":
    main()
