"""Validations per minute on the real topology (``vlgate stack``) with 1 and with 2 process
workers, on the same registrations, and the time from a version's registration to its
decision: what a sweep of checkpoints costs, and whether more workers help.

Each round starts a stack (MLflow and Prefect on PostgreSQL, the deployments, N workers,
``vlgate serve``), registers the same VERSIONS checkpoints of a built synthetic world at
once as new versions (MLflow's webhook sends each to the pool), waits until every one is
decided, and stops the stack. The ratio is of the two rounds of one run: on a machine with
fewer free cores than workers, the workers share them and the ratio says so.

    python benchmarks/bench_stack.py [WORLD_DIR] [--versions 6] [--items 16] [--postgres URL]
    # WORLD_DIR defaults to $VLGATE_HOME/world; PostgreSQL on 127.0.0.1:5432 by default
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from vlgate.cli.processes import free_port
from vlgate.cli.stack import LocalStack
from vlgate.home import vlgate_home

CHECKPOINTS = ("vlm-steps0", "vlm-steps3000", "vlm-steps10000", "vlm-language-prior", "vlm-answer-prior", "vlm-miscount", "vlm-poor-description")


def round_with(workers: int, world: Path, versions: int, items: int, postgres: str, root: Path) -> tuple[float, list[float]]:
    """(seconds until every version was decided, each version's registration-to-decision seconds)."""
    from mlflow import MlflowClient

    from vlgate import tracking
    from vlgate.registry_hooks.claims import ClaimStore

    home = root / f"home-{workers}"
    home.mkdir(parents=True)
    (home / "suite.yaml").write_text(yaml.safe_dump({"name": "bench", "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": items, "protocol": "vlgate"}}}))
    (home / "gate.yaml").write_text(yaml.safe_dump({"required": ["lcm-mc"], "floors": {"lcm-mc/acc": 0.5}, "resamples": 200}))
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"models": {"bench": {"suite": "suite.yaml", "policy": "gate.yaml"}}, "poll_interval_s": 600, "webhook": {"port": free_port()}}))
    stack = LocalStack(root / f"stack-{workers}", home)
    state = stack.up(workers, postgres)
    try:
        client = MlflowClient(state.mlflow_url, state.mlflow_url)
        client.create_registered_model("bench")
        sources = [tracking.register_checkpoint(client, f"source-{name}", world / "checkpoints" / name, home=home) for name in CHECKPOINTS[:versions]]
        sources += sources[: versions - len(sources)]
        claims = ClaimStore(state.environment()["VLGATE_STATE_DB"])
        started = time.monotonic()
        registered: dict[str, float] = {}

        def create(source) -> None:
            version = client.create_model_version("bench", source.source, run_id=source.run_id)
            registered[str(version.version)] = time.monotonic()

        with ThreadPoolExecutor(max_workers=versions) as pool:
            list(pool.map(create, sources))
        decided: dict[str, float] = {}
        while len(decided) < versions:
            for claim in claims.all("bench"):
                if claim.state in ("done", "failed") and claim.version not in decided:
                    decided[claim.version] = time.monotonic()
            if time.monotonic() - started > 3600:
                raise TimeoutError(f"{versions - len(decided)} version(s) undecided after an hour")
            time.sleep(0.5)
        return max(decided.values()) - started, [decided[v] - registered[v] for v in decided]
    finally:
        stack.down(purge=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", nargs="?", type=Path, default=vlgate_home() / "world")
    parser.add_argument("--versions", type=int, default=6, help="checkpoints registered at once (default 6)")
    parser.add_argument("--items", type=int, default=16, help="lcm-mc items per validation (default 16)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for workers in (1, 2):
            total, latencies = round_with(workers, args.world, args.versions, args.items, args.postgres, Path(scratch))
            results[workers] = (args.versions / (total / 60), latencies)
            print(
                f"{workers} worker(s): {args.versions} versions in {total:.0f} s = {results[workers][0]:.2f} validations/min; "
                f"registration to decision median {statistics.median(latencies):.0f} s, max {max(latencies):.0f} s"
            )
    print(f"throughput 2 workers / 1 worker: {results[2][0] / results[1][0]:.2f}x")


if __name__ == "__main__":
    main()
