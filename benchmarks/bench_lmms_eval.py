"""What an lmms-eval task's evaluation costs through vlgate against the same docs through
lmms-eval alone, as ratios (docs/lmms-eval.md).

The task: POPE of the installed lmms-eval on the world's yes/no docs, written in POPE's
schema (``evaluators/world/lmms_task.py``); the model: the world's LLaVA at 10,000 steps,
float32 on the CPU, greedy. Each side runs in a child process of its own, so that each
pays its imports as a user's command does, and is timed twice: the child's whole wall
time, and the evaluation alone, after both sides have imported lmms-eval (building the
task, reading the docs, loading the model, answering and scoring every doc):

- **lmms-eval**: ``simple_evaluate(model="llava_hf", ...)``, one doc at a time (its chat
  LLaVA class refuses a larger batch);
- **vlgate, computed**: ``Suite`` (the entry read and its task built) and ``run_suite`` with
  a new record cache, one doc at a time, then at ``--batch-size`` docs a batch (the suite's
  default, 8: batched generation, which the model check holds to one at a time);
- **vlgate, cached**: the same in a new output folder, every record taken from that cache.

The two sides' filtered responses and ``pope_accuracy`` are printed too: a ratio of two
runs that disagree would compare nothing (``tests/test_lmms_eval.py`` holds them equal).

    OMP_NUM_THREADS=1 python benchmarks/bench_lmms_eval.py [--limit N] [--batch-size B]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "evaluators" / "world" / "shipped"
CHECKPOINT = SHIPPED / "checkpoints" / "vlm-steps10000"

_LMMS_EVAL = """\
import json, time
started = time.perf_counter()
from lmms_eval.evaluator import simple_evaluate
from lmms_eval.tasks import TaskManager
imported = time.perf_counter()
manager = TaskManager(include_path={folder!r}, model_name="llava_hf")
result = simple_evaluate(model="llava_hf", model_args="pretrained={checkpoint},dtype=float32,device_map=cpu", tasks=["pope_world"], task_manager=manager,
                         limit={limit}, batch_size={batch}, device="cpu", log_samples=True, bootstrap_iters=0)
done = time.perf_counter()
responses = [sample["filtered_resps"][0] for sample in sorted(result["samples"]["pope_world"], key=lambda s: s["doc_id"])]
print("RESULT " + json.dumps({{"evaluation_s": done - imported, "responses": responses, "pope_accuracy": result["results"]["pope_world"]["pope_accuracy,none"]}}))
"""

_VLGATE = """\
import json, time
started = time.perf_counter()
from pathlib import Path
from vlgate.evaluators.runners.cache import FolderRecordCache
from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite
import lmms_eval.evaluator, lmms_eval.tasks  # what the other side imports before its clock starts (vlgate imports it when the suite names a task)
imported = time.perf_counter()
suite = Suite.model_validate({{"name": "bench", "batch_size": {batch}, "evaluators": {{"pope_world": {{"kind": "lmms-eval", "task": "pope_world", "include_path": {folder!r}, "limit": {limit}}}}}}})
summary = run_suite({checkpoint!r}, suite, Path({out!r}), RunOptions(cache_dir=Path({cache!r}) / "models", record_cache=FolderRecordCache(Path({cache!r}) / "records"), progress=False))
done = time.perf_counter()
records = [json.loads(line) for line in (Path({out!r}) / "pope_world" / "records.jsonl").read_text().splitlines()]
responses = [record["filtered"]["none"] for record in sorted(records, key=lambda r: r["doc_id"])]
print("RESULT " + json.dumps({{"evaluation_s": done - imported, "responses": responses, "pope_accuracy": summary["evaluators"]["pope_world"]["metrics"]["pope_accuracy"]}}))
"""


def run_child(script: str) -> dict:
    """The script in a child process of its own: its wall time and what it printed."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return {"wall_s": wall, **json.loads(line.removeprefix("RESULT "))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=48, help="the task's first N docs (the world's yes/no items: 48 in all)")
    parser.add_argument("--batch-size", type=int, default=8, help="vlgate's batched run's batch size (a suite's default: 8)")
    args = parser.parse_args()
    from vlgate.evaluators.world.lmms_task import export_world_task

    with tempfile.TemporaryDirectory() as scratch:
        folder, cache = Path(scratch) / "tasks", Path(scratch) / "cache"
        export_world_task(SHIPPED / "data", folder)
        common = {"folder": str(folder), "checkpoint": str(CHECKPOINT), "limit": args.limit}
        theirs = run_child(_LMMS_EVAL.format(**common, batch=1))
        runs = {"lmms-eval, batch 1": theirs}
        runs["vlgate, computed, batch 1"] = run_child(_VLGATE.format(**common, batch=1, out=str(Path(scratch) / "one"), cache=str(cache / "one")))
        runs[f"vlgate, computed, batch {args.batch_size}"] = run_child(_VLGATE.format(**common, batch=args.batch_size, out=str(Path(scratch) / "batched"), cache=str(cache / "batched")))
        runs["vlgate, cached"] = run_child(_VLGATE.format(**common, batch=args.batch_size, out=str(Path(scratch) / "cached"), cache=str(cache / "batched")))
    same = all(run["responses"] == theirs["responses"] for run in runs.values())
    print(f"POPE on the world's {args.limit} docs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"same filtered responses in every run: {same}; pope_accuracy " + ", ".join(f"{name} {run['pope_accuracy']:.4f}" for name, run in runs.items()))
    print(f"{'':28}{'wall s':>10}{'evaluation s':>14}{'wall ratio':>12}{'evaluation ratio':>18}")
    for name, run in runs.items():
        print(f"{name:28}{run['wall_s']:10.1f}{run['evaluation_s']:14.1f}{run['wall_s'] / theirs['wall_s']:12.2f}{run['evaluation_s'] / theirs['evaluation_s']:18.2f}")


if __name__ == "__main__":
    main()
