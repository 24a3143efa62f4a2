"""Scoring speed of `lcm-mc` on 1,000,000 records (K=4): the scoring path's speed target.

Prints records/second for each stage and its time as a ratio of the 3 s target:
  rows: parse       read the JSONL file and parse every line into a dict
  rows: validate    schema validation and stacking into arrays, from parsed records
  columns: read     read the file column by column (pyarrow) and validate the columns
  metrics           per-sample quantities + set metrics + per-category breakdown, from arrays
  end-to-end        `score_file` as `vlgate score` runs it: the column path when every record
                    is plainly valid (as here), else the row path
  vlgate score      the console script itself: end-to-end plus Python's start, vlgate's
                    imports (about 1 s here) and printing the JSON

    python benchmarks/bench_score_lcm_mc.py [--n 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vlgate.evaluators import registry
from vlgate.evaluators.records import read_jsonl
from vlgate.evaluators.schemas import validate_file
from vlgate.evaluators.scoring import score, score_file, validate

TARGET_SECONDS = 3.0


def make_records(n: int, k: int = 4, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    p_mc = np.round(rng.dirichlet(np.ones(k), size=n), 6).tolist()
    p_yes = np.round(rng.uniform(size=(n, k)), 6).tolist()
    answer = rng.integers(0, k, size=n).tolist()
    categories = ("color", "count", "shape", "position")
    return [{"id": i, "p_mc": p_mc[i], "p_yes": p_yes[i], "answer": answer[i], "category": categories[i % 4]} for i in range(n)]


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    records = make_records(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.jsonl"
        with open(path, "w") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)
        parsed = read_jsonl(path)
        columns = validate_file(registry.get("lcm-mc").schema, "lcm-mc", path)
        assert columns.table is not None, "the benchmark's records should take the column path"
        stages = {
            "rows: parse": lambda: read_jsonl(path),
            "rows: validate": lambda: validate("lcm-mc", parsed),
            "columns: read": lambda: validate_file(registry.get("lcm-mc").schema, "lcm-mc", path),
            "metrics": lambda: score(columns),
            "end-to-end": lambda: score_file("lcm-mc", path),
            "vlgate score": lambda: subprocess.run([str(Path(sys.executable).parent / "vlgate"), "score", "lcm-mc", str(path)], check=True, stdout=subprocess.DEVNULL),
        }
        print(f"lcm-mc, N={args.n:,} records, K=4, best of {args.repeat}")
        for name, fn in stages.items():
            seconds = best_of(args.repeat, fn)
            print(f"  {name:<15} {seconds:7.3f} s  {args.n / seconds:12,.0f} records/s  time/target = {seconds / TARGET_SECONDS:.2f}")


if __name__ == "__main__":
    main()
