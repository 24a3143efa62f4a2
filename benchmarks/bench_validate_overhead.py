"""The service's own overhead: validating a version vs evaluating the same suite on it.

`vlgate validate` runs the suite's evaluators and then everything the service adds —
Prefect (flow, tasks, result cache), Great Expectations, MLflow logging, correlations,
the gate and the report. `vlgate evaluate` runs the same evaluators alone. Both run as
the console scripts a user runs, each in a fresh VLGATE_HOME (no model or evaluator
caches), on the shipped world's 10,000-step VLM and its suite. Prints both times and the
ratio (target: at most 1.3), and the CPU floor: validate's CPU seconds (the Prefect
server's included) spread perfectly over every core, over evaluate's time — the least
ratio any overlap of validate's work could reach on this machine.

    python benchmarks/bench_validate_overhead.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vlgate.cli.demo import DEMO_RULES
from vlgate.evaluators.world.build import build_world

TARGET_RATIO = 1.3
MODEL = "bench-vlm"


def vlgate(home: Path, *args: str, accepted: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system, its child processes included: the
    Prefect server) of one console-script call in ``home``; raises when it exits
    otherwise than ``accepted``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "PREFECT_API_URL")}
    command = [str(Path(sys.executable).parent / "vlgate"), *args]
    cpu_before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, env=env | {"VLGATE_HOME": str(home)}, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in accepted:
        raise SystemExit(f"vlgate {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return seconds, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for descendants, grandchildren too
    return usage.ru_utime + usage.ru_stime


def fresh_home(root: Path, name: str, world: Path) -> Path:
    home = root / name
    shutil.copytree(world, home / "world")
    (home / "gate.yaml").write_text(DEMO_RULES)  # judged once, on every item: as evaluate runs them
    (home / "vlgate.yaml").write_text(f"models:\n  {MODEL}:\n    suite: world/suite.yaml\n    policy: gate.yaml\n")
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs; the best of each is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        world = root / "world"
        manifest = build_world(world, "small", seed=0)
        checkpoint = world / manifest["checkpoints"]["vlm"]["10000"]
        evaluate_times, validate_times = [], []
        for run in range(args.repeat):
            home = fresh_home(root, f"evaluate-{run}", world)
            evaluate_times.append(vlgate(home, "evaluate", "--model", str(checkpoint), "--suite", str(home / "world" / "suite.yaml"), "--out", str(home / "out"), "--quiet"))
            home = fresh_home(root, f"validate-{run}", world)
            vlgate(home, "register", MODEL, str(home / "world" / manifest["checkpoints"]["vlm"]["10000"]))
            validate_times.append(vlgate(home, "validate", MODEL, "1", accepted=(0, 3)))  # promoted or rejected: judged
    (evaluate, evaluate_cpu), (validate, validate_cpu) = min(evaluate_times), min(validate_times)
    cores = len(os.sched_getaffinity(0))
    print(f"vlgate evaluate  {evaluate:7.1f} s  {evaluate_cpu:5.1f} s CPU  (the suite's evaluators alone)")
    print(f"vlgate validate  {validate:7.1f} s  {validate_cpu:5.1f} s CPU  (evaluators + Prefect, GX, MLflow logging, correlations, gate, report)")
    print(f"ratio            {validate / evaluate:7.2f}   (target <= {TARGET_RATIO})")
    # no schedule runs validate's CPU work in less than CPU / cores of wall-clock time
    print(f"CPU floor        {validate_cpu / cores / evaluate:7.2f}   (validate's CPU seconds spread over all {cores} cores, over evaluate's time)")


if __name__ == "__main__":
    main()
