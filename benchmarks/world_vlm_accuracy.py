"""Held-out accuracy of the synthetic world's VLM family.

Scores every VLM version of a built world (the family and its faulty versions)
through the transformers backend on the world's MC and yes/no items — option letter or
Yes/No argmax at the answer position — and prints hits next to chance, so "trained beats
chance, untrained does not" can be read off.

    python benchmarks/world_vlm_accuracy.py [WORLD_DIR]   # default: $VLGATE_HOME/world
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vlgate.evaluators.backends.transformers_backend import TransformersBackend
from vlgate.evaluators.world.heldout import held_out_requests, hits_by_group
from vlgate.home import vlgate_home


def main() -> None:
    world = Path(sys.argv[1]) if len(sys.argv) > 1 else vlgate_home() / "world"
    manifest = json.loads((world / "manifest.json").read_text())
    rows = held_out_requests(world / "data")
    print(f"{world}: {len(rows)} held-out items; chance = MC 1/4, yes/no 1/2")
    versions = {f"steps {steps}": relative for steps, relative in manifest["checkpoints"]["vlm"].items()}
    versions |= manifest["checkpoints"].get("vlm_faults", {})
    for name, relative in versions.items():
        backend = TransformersBackend.load(world / relative, batch_size=64)
        scores = hits_by_group(backend, rows)
        print(f"  {name:>15}: " + ", ".join(f"{group} {hit}/{total} = {hit / total:.2f}" for group, (hit, total) in scores.items()))


if __name__ == "__main__":
    main()
