"""What a decision costs when nothing is left to compute: `vlgate validate` of a version
whose every record is in the record cache, against the same validation computed cold.

On the demo's suite (the medium world: 1,010 records) and policy (group-sequential, four
looks), in one VLGATE_HOME, as the console scripts a user runs: the shipped world's
10,000-step VLM is registered as ``cold-vlm`` v1 and validated (every record computed),
then the same weights as ``cached-vlm`` v1 and validated (every record from the cache:
no model loads). Both validations are judged alike (no champion: the floors), so they
take the same looks. Prints:

- both wall times and their ratio (targets: cached at most 10 s, at most 30 % of cold);
- each look's wall time in the cached run, read from the flow's own "look N of M" log
  lines (a cached look runs no model: its time is everything but the model passes;
  target at most 1 s); the first look's time counts from the validation flow's start (it
  holds the run's set-up: params, datasets, configuration artifacts); the records and
  tables uploaded once, before the deciding gate, are timed apart;
- the records the cached run says it took from the cache, against its records in all
  (they must be equal: every record came from the cache).

    OMP_NUM_THREADS=1 python benchmarks/bench_cached_validation.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from vlgate.cli.demo import DEMO_POLICY
from vlgate.evaluators.world.build import build_world

TARGET_CACHED_S = 10.0
TARGET_SHARE = 0.30
TARGET_LOOK_S = 1.0
#: Prefect's log line time, e.g. ``12:01:02.345 | INFO    | Flow run 'x' - cached-vlm v1: look 2 of 4: goes on``
_LOG_TIME = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) \|")
_LOOK = re.compile(r": look (\d+) of (\d+):")
_TASK_DONE = re.compile(r"Task run '(log-look|log-outputs)-[0-9a-f]+' - Finished")
_FLOW_START = re.compile(r"Beginning flow run .* for flow 'vlgate-validate'")


def vlgate(home: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall-clock seconds and the finished process of one console-script call in ``home``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "PREFECT_API_URL", "VLGATE_RECORD_CACHE")}
    env |= {"VLGATE_HOME": str(home), "PREFECT_LOGGING_LEVEL": "INFO"}  # the flow's "look N of M" lines, with their times
    start = time.perf_counter()
    done = subprocess.run([str(Path(sys.executable).parent / "vlgate"), *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 3, 5):  # promoted, rejected or inconclusive: judged
        raise SystemExit(f"vlgate {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, done


def look_times(log: str) -> tuple[list[float], float]:
    """Each look's seconds, from the flow's log (look 1 from the validation flow's start, each
    later one from the look before), without the one upload of the records and tables (the
    ``log-outputs`` task: from the look's ``log-look`` to its own end); and that upload's seconds."""
    stamps: list[datetime] = []
    started: datetime | None = None
    last_look_log: datetime | None = None
    upload = 0.0
    for line in log.splitlines():
        when = _LOG_TIME.match(line)
        if when is None:
            continue
        stamp = datetime.strptime(when.group(1), "%H:%M:%S.%f")
        if started is None and _FLOW_START.search(line):
            started = stamp
        task = _TASK_DONE.search(line)
        if task and task.group(1) == "log-look":
            last_look_log = stamp
        elif task and last_look_log is not None:
            upload += (stamp - last_look_log).total_seconds()
        if _LOOK.search(line):
            stamps.append(stamp - timedelta(seconds=upload))  # the uploads so far taken out
    if started is None or not stamps:
        return [], upload
    edges = [started, *stamps]
    return [(later - earlier).total_seconds() for earlier, later in zip(edges, edges[1:], strict=False)], upload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, help="build the home here and keep it (to profile the cached run again: VLGATE_HOME=KEEP/home vlgate validate cached-vlm 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        world = root / "world"
        manifest = build_world(world, "medium", seed=0)
        home = root / "home"
        shutil.copytree(world, home / "world")
        (home / "gate.yaml").write_text(DEMO_POLICY)
        models = "".join(f"  {name}:\n    suite: world/suite.yaml\n    policy: gate.yaml\n" for name in ("cold-vlm", "cached-vlm"))
        (home / "vlgate.yaml").write_text(f"models:\n{models}record_cache: {{kind: folder}}\n")
        checkpoint = str(home / "world" / manifest["checkpoints"]["vlm"]["10000"])
        vlgate(home, "register", "cold-vlm", checkpoint)
        cold, cold_done = vlgate(home, "validate", "cold-vlm", "1", "--json")
        vlgate(home, "register", "cached-vlm", checkpoint)
        cached, cached_done = vlgate(home, "validate", "cached-vlm", "1", "--json")
    result = json.loads(cached_done.stdout)
    from_cache, total = sum(result.get("records_from_cache", {}).values()), sum(result.get("records_total", {}).values())
    print(f"cold validation    {cold:7.1f} s  ({json.loads(cold_done.stdout)['outcome']})")
    print(f"cached validation  {cached:7.1f} s  ({result['outcome']}; target <= {TARGET_CACHED_S:g} s)")
    print(f"cached / cold      {cached / cold:7.2f}    (target <= {TARGET_SHARE:.2f})")
    for label, done in (("cold", cold_done), ("cached", cached_done)):
        times, upload = look_times(done.stderr)
        print(f"{label} looks, s       " + "  ".join(f"{seconds:5.2f}" for seconds in times) + (f"   (target <= {TARGET_LOOK_S:g} s each)" if label == "cached" else ""))
        print(f"{label} records and tables, uploaded once: {upload:5.2f} s")
    print(f"records from cache {from_cache:7d} of {total} {'(all)' if from_cache == total else '(WRONG: every record came from the cache)'}")


if __name__ == "__main__":
    main()
