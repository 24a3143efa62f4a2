"""What the shared record cache (evaluators/runners/cache.py, docs/record-cache.md) saves, in
one run on the synthetic world, as ratios of evaluation time (``run_suite``: the model
loaded, every evaluator's records reused, taken from the cache or computed, scored):

(a) identical weights registered under a new version: the second version's evaluation
    (a new output folder, the same digest) against the first's. Target: ≤ 5%.
(b) the champion on a suite grown by 10%: the suite at 90% of each evaluator's items
    first, then the whole suite in a new folder, against a full evaluation. Target: about
    10% (plus the model's load and the scoring).
(c) a second drift check on a new batch: the reference batch and batch A, then (another
    folder: another worker, or a new champion version with the same weights) the
    reference again and batch B, against batch B alone. Target: batch B plus overhead.

Each run has its own model cache (the evaluators' helper caches, ``evaluator-cache``),
so only the record cache differs between a first and a second run; a short warm-up run
(two items an evaluator) takes the one-time costs (imports, kernels) first. What a cached
run still pays: reading the data, scoring and writing the folder (it loads no model: a
model is described by its digest and loaded only when a record must be computed).

    OMP_NUM_THREADS=1 python benchmarks/bench_record_cache.py [WORLD_DIR] [--limit N] [--batch-items N]
    # WORLD_DIR defaults to $VLGATE_HOME/world (built from the shipped world when missing)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.cache import FolderRecordCache, RecordCache
from vlgate.evaluators.running.suite import RunOptions, Suite, SuiteSummary, count_items, run_suite
from vlgate.home import vlgate_home


class TimedCache(FolderRecordCache):
    """The folder cache, counting the seconds spent in it (lookups and puts)."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.seconds = 0.0

    def get_many(self, fingerprints: Sequence[str]) -> dict[str, Record]:
        started = time.perf_counter()
        try:
            return super().get_many(fingerprints)
        finally:
            self.seconds += time.perf_counter() - started

    def put(self, records: Iterable[Record]) -> None:
        started = time.perf_counter()
        try:
            super().put(records)
        finally:
            self.seconds += time.perf_counter() - started

    def spent(self) -> float:
        """Seconds in the cache since the last call."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def timed(model: str, suite: Suite, out: Path, cache: RecordCache) -> tuple[float, SuiteSummary]:
    started = time.perf_counter()
    summary = run_suite(model, suite, out, RunOptions(cache_dir=out.parent / f"{out.name}-model-cache", record_cache=cache, progress=False))
    failed = {name: entry["error"] for name, entry in summary["evaluators"].items() if "error" in entry}
    if failed:
        raise SystemExit(f"{out.name}: {failed}")
    return time.perf_counter() - started, summary


def counts(summary: SuiteSummary) -> str:
    """reused/from_cache/computed summed over the evaluators."""
    entries = summary["evaluators"].values()
    return "/".join(str(sum(int(e.get(key, 0) or 0) for e in entries)) for key in ("reused", "from_cache", "computed"))


def limited(suite: Suite, limits: dict[str, int]) -> Suite:
    return suite.model_copy(update={"evaluators": {name: spec.model_copy(update={"limit": limits[name]}) for name, spec in suite.evaluators.items()}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", nargs="?", type=Path, default=vlgate_home() / "world")
    parser.add_argument("--limit", type=int, default=None, help="at most N items an evaluator (default: all of the world's)")
    parser.add_argument("--batch-items", type=int, default=64, help="items of each drift batch (default 64, the demo's)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-record-cache-"))
    world = args.world
    if not (world / "manifest.json").is_file():
        from vlgate.evaluators.world.build import build_world

        world = scratch / "world"
        build_world(world, "small", seed=0)
    manifest = json.loads((world / "manifest.json").read_text())
    champion = str(world / manifest["checkpoints"]["vlm"][max(manifest["checkpoints"]["vlm"], key=int)])
    suite = Suite.from_file(world / "suite.yaml")
    full_counts = count_items(suite, set(suite.evaluators))
    if args.limit is not None:
        full_counts = {name: min(n, args.limit) for name, n in full_counts.items()}
    full = limited(suite, full_counts)
    print(f"{world}: champion {Path(champion).name}; items {full_counts} (record counts below: reused/from cache/computed)")

    # one-time costs (imports, kernels, the first load of each model's files) before anything is timed
    timed(champion, limited(suite, dict.fromkeys(full_counts, 2)), scratch / "warm-up", FolderRecordCache(scratch / "cache-warm-up"))
    # what any run that computes something pays besides its items: the models' loads, their
    # first forward passes and chat-template processes, the scoring (one item an evaluator)
    fixed_s, _ = timed(champion, limited(suite, dict.fromkeys(full_counts, 1)), scratch / "fixed", FolderRecordCache(scratch / "cache-fixed"))

    # (a) identical weights under a new version
    cache_a = TimedCache(scratch / "cache-a")
    first_s, first = timed(champion, full, scratch / "a-v1", cache_a)
    first_in_cache = cache_a.spent()
    again_s, again = timed(champion, full, scratch / "a-v2", cache_a)
    print(
        f"(a) first validation's evaluation {first_s:.1f} s [{counts(first)}] ({first_in_cache * 1000:.0f} ms of it in the cache); "
        f"same weights, new version {again_s:.2f} s [{counts(again)}] ({cache_a.spent() * 1000:.0f} ms in the cache): {again_s / first_s:.1%} (target ≤ 5%)"
    )

    # (b) the suite grown by 10%
    cache_b = TimedCache(scratch / "cache-b")
    before = limited(suite, {name: max(1, round(n * 0.9)) for name, n in full_counts.items()})
    before_s, _ = timed(champion, before, scratch / "b-before", cache_b)
    cache_b.spent()
    grown_s, grown = timed(champion, full, scratch / "b-grown", cache_b)
    grown_counts, total = [int(n) for n in counts(grown).split("/")], sum(full_counts.values())
    print(
        f"(b) suite at 90% {before_s:.1f} s; grown to 100% {grown_s:.2f} s [{counts(grown)}] ({cache_b.spent() * 1000:.0f} ms in the cache): "
        f"{grown_s / first_s:.1%} of a full evaluation (target about 10%); "
        f"beyond the fixed cost of a run that computes ({fixed_s:.2f} s: one item an evaluator, no cache): {(grown_s - fixed_s) / (first_s - fixed_s):.1%} of a full evaluation's rest, "
        f"for {grown_counts[2]} / {total} = {grown_counts[2] / total:.1%} of the records"
    )

    # (c) a second drift check on a new batch
    from vlgate.evaluators.world.datasets import build_unlabelled_batch

    batches = {name: build_unlabelled_batch(scratch / "batches" / name, world / "checkpoints", n=args.batch_items, seed=seed) for name, seed in (("reference", 1), ("a", 2), ("b", 3))}
    drift = {name: Suite.from_file(path) for name, path in batches.items()}
    cache_c = FolderRecordCache(scratch / "cache-c")
    reference_s, _ = timed(champion, drift["reference"], scratch / "c1-reference", cache_c)
    batch_a_s, _ = timed(champion, drift["a"], scratch / "c1-batch", cache_c)
    reference_again_s, reference_again = timed(champion, drift["reference"], scratch / "c2-reference", cache_c)
    batch_b_s, _ = timed(champion, drift["b"], scratch / "c2-batch", cache_c)
    check_1, check_2 = reference_s + batch_a_s, reference_again_s + batch_b_s
    print(
        f"(c) drift check 1 {check_1:.1f} s (reference {reference_s:.1f} + batch A {batch_a_s:.1f}); "
        f"check 2 {check_2:.1f} s (reference {reference_again_s:.2f} [{counts(reference_again)}] + batch B {batch_b_s:.1f}): "
        f"{check_2 / batch_b_s:.2f}× batch B alone, {check_2 / check_1:.1%} of check 1"
    )
    print(f"cache: {cache_a.stats().entries} records, {cache_a.stats().bytes / 1e6:.2f} MB for the full suite; scratch {scratch}")


if __name__ == "__main__":
    main()
