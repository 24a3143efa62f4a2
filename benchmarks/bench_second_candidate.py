"""A second candidate's GenCeption and DeCC runs vs the first's:
what the shared caches save — the seed images' features (GenCeption) and the
decompositions (DeCC), both independent of the candidate. Target: ≥ 30% less time.

Runs on a built synthetic world (``vlgate make-world``). DeCC items are stripped of their
reference sub-questions so the decomposer (the world's best VLM, a separate model from the
candidates) has to write them, as on a real data set. The two candidates have the same
architecture, so without the caches their runs would cost the same.

GenCeption's candidate-independent work is small by construction: Enc(X⁰) of each seed
image, one of the T+1 embeddings per item. Everything else depends on the candidate's
descriptions, and is reused only where two candidates write the same description (the
generation cache, per generator, prompt and seed). So the benchmark prints, besides the
two timings, the seed features' share of the first run (what the seed cache alone can
save) and how many of the second run's T draws the generation cache served.

    python benchmarks/bench_second_candidate.py [WORLD_DIR] [--generator renderer|diffusion] [--steps N]
    # WORLD_DIR defaults to $VLGATE_HOME/world; --steps is the diffusion sampler's step count
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.encoders import VitClsEncoder
from vlgate.evaluators.backends.image_generators import DiffusersGenerator, DiffusionSettings
from vlgate.evaluators.backends.transformers_backend import TransformersBackend
from vlgate.evaluators.decc.runner import decc_runner
from vlgate.evaluators.genception.runner import GenceptionLoop, genception_runner
from vlgate.evaluators.loaders import load_dataset
from vlgate.evaluators.loaders.items import open_image
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.scenes.generator import SceneRendererGenerator
from vlgate.home import vlgate_home


def count_drawings(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.npy")) if folder.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", nargs="?", type=Path, default=vlgate_home() / "world")
    parser.add_argument("--generator", choices=("renderer", "diffusion"), default="renderer")
    parser.add_argument("--steps", type=int, default=25, help="diffusion sampler steps (default 25)")
    args = parser.parse_args()
    world = args.world
    manifest = json.loads((world / "manifest.json").read_text())
    steps = sorted(manifest["checkpoints"]["vlm"], key=int)
    candidates = [TransformersBackend.load(world / manifest["checkpoints"]["vlm"][s]) for s in steps[-2:]]
    decomposer = TransformersBackend.load(world / manifest["checkpoints"]["vlm_faults"]["language-prior"])
    llm = TransformersBackend.load(world / manifest["checkpoints"]["llm_agent"])
    encoder = VitClsEncoder.load(world / manifest["checkpoints"]["vit_encoder"])
    if args.generator == "diffusion":
        generator = DiffusersGenerator.load(world / manifest["checkpoints"]["diffusion"], settings=DiffusionSettings(num_inference_steps=args.steps))
    else:
        generator = SceneRendererGenerator()
    seeds = load_dataset("genception", world / "data" / "genception").items
    decc_items = [dataclasses.replace(item, sub_questions=None) for item in load_dataset("decc", world / "data" / "decc").items]
    # first calls pay one-time costs (kernels, allocator); pay them before timing anything
    warm = open_image(seeds[0].image, seeds[0].id, "image")
    for model in (*candidates, decomposer):
        model.generate([GenerateRequest((warm,), "warm up", 2)])
        model.choice_probs([ChoiceRequest((warm,), "warm up", ("Yes", "No"))])
    llm.choice_probs([ChoiceRequest((), "warm up", ("Yes", "No"))])
    encoder.embed([warm])
    generator.generate_images(["warm up"])
    seed_images = [open_image(item.image, item.id, "image") for item in seeds]
    started = time.perf_counter()
    encoder.embed(seed_images)
    seed_feature_seconds = time.perf_counter() - started
    print(f"{world}: {len(seeds)} GenCeption seed images (T=3, generator {generator.info.name}), {len(decc_items)} DeCC items; candidates {', '.join('steps ' + s for s in steps[-2:])}")
    with tempfile.TemporaryDirectory() as folder:
        shared = Path(folder) / "shared-cache"
        for name, make, items in (
            ("genception", lambda vlm, out: genception_runner(vlm, generator, encoder, GenceptionLoop(iterations=3), artifacts_dir=out, feature_cache_dir=shared / "features"), seeds),
            ("decc", lambda vlm, out: decc_runner(vlm, llm, decomposer, cache_dir=shared), decc_items),
        ):
            seconds, new_drawings = [], []
            for n, candidate in enumerate(candidates):
                out = Path(folder) / f"{name}-{n}"
                drawn_before = count_drawings(shared / "features" / "generations")
                started = time.perf_counter()
                make(candidate, out / "artifacts").run(items, RecordStore(out / "records.jsonl"), batch_size=8, progress=False)
                seconds.append(time.perf_counter() - started)
                new_drawings.append(count_drawings(shared / "features" / "generations") - drawn_before)
            saved = 1 - seconds[1] / seconds[0]
            print(f"  {name:>10}: first candidate {seconds[0]:.2f} s, second {seconds[1]:.2f} s -> {saved:.0%} less time (target >= 30%)")
            if name == "genception":
                draws = len(seeds) * 3
                print(f"{'':>14}seed features are {seed_feature_seconds:.2f} s = {seed_feature_seconds / seconds[0]:.0%} of the first run (all the seed cache can save)")
                print(f"{'':>14}generation cache: second candidate drew {new_drawings[1]} new images for {draws} steps ({draws - new_drawings[1]} served from the first's drawings)")


if __name__ == "__main__":
    main()
