"""How the gate's cost grows with the items: the paired score of one metric (the
jackknife's pseudo-values of the change, what every comparison with the champion is
tested on) at a small and a large number of items, for a metric of each evaluator, and a
whole judgement by the gate's public function (``gate.gates.decide``) under the demo's
policy (``cli/demo.py``: six floors, five regressions, four sequential looks), at the
last look and at an interim one (its floors bootstrapped). The versions are random
per-sample frames made by each evaluator's own ``per_sample``; the candidate redraws a
tenth of the champion's items.

The paired score is timed through the gate (``gate.checks.PairedScores``: each version's
leave-one-out values by ``resampled`` on ``LeaveOneOut`` weights, O(n)) and, with
``--before``, through the path the gate took before (``score_test.paired_score`` handing
``resampled`` the n × n leave-one-out weights in batches, O(n²)) on the sizes up to
``--before-max`` items (the judgements too: ``--before-max 20000`` times the path before
on the 20,000-item judgement, a few minutes). Prints seconds and the large/small ratio of
each.

    python benchmarks/bench_gate_scaling.py [--small 1000] [--large 16000] [--judgement 20000] [--before] [--before-max 16000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import pandas as pd
import yaml

from vlgate.cli.demo import DEMO_POLICY, DEMO_RULES
from vlgate.evaluators import registry
from vlgate.evaluators.definition import EvaluatorDefinition
from vlgate.evaluators.metrics.score_test import PairedScore, paired_score
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.gate.checks import PairedScores, resampled_statistic, set_statistic
from vlgate.gate.gates import decide
from vlgate.gate.policy import GatePolicy, ResolvedMetric, resolve_metric

#: the metric timed for each evaluator: the demo policy's regression on it
METRICS = ("lcm-mc/acc", "lcm-nb/lcm", "vlind/s_lp", "genception/gc@3", "decc/reliable_rate/multi")
#: the evaluators the demo's policy requires
DEMO_EVALUATORS = ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")
#: GenCeption's categories (MME's 14)
CATEGORIES = tuple(f"category-{k}" for k in range(14))
#: the share of the champion's items the candidate answers anew
REDRAWN = 0.1


def _options(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Probabilities over the last axis (a model's option distribution)."""
    return rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])


def _answers(rng: np.random.Generator, n: int, first: np.ndarray, other: np.ndarray) -> np.ndarray:
    """A test's answer pairs coded 1/0/−1: mostly right, some wrong, a few unparsed."""
    codes = np.array([1, 0, -1], dtype=np.int8)
    return np.stack([rng.choice(codes, size=n, p=first), rng.choice(codes[[1, 0, 2]], size=n, p=other)], axis=1)


def version_arrays(evaluator: str, n: int, rng: np.random.Generator) -> dict[str, object]:
    """Random schema arrays of ``n`` items, as the evaluator's schema gives them to ``per_sample``."""
    labelled = rng.random(n) >= 0.1
    if evaluator == "lcm-mc":
        return {"p_mc": _options(rng, (n, 4)), "p_yes": rng.random((n, 4)), "answer": np.where(labelled, rng.integers(0, 4, n), -1)}
    if evaluator == "lcm-nb":
        return {"p_yes": rng.random((n, 2, 2)), "p_text": _options(rng, (n, 2, 2)), "p_image": _options(rng, (n, 2, 2)), "answer": np.where(labelled, rng.integers(0, 2, n), -1)}
    if evaluator == "vlind":
        right = np.array([0.8, 0.15, 0.05])
        images = rng.integers(1, 4, n)
        tests = {name: _answers(rng, n, right, right) for name in ("ck", "vp", "cb")}
        return tests | {"lp": _answers(rng, int(images.sum()), right, right), "lp_instance": np.repeat(np.arange(n), images)}
    if evaluator == "genception":
        return {"s": rng.random((n, 3)), "category": rng.choice(np.array(CATEGORIES, dtype=object), n), "description": np.full(n, None, dtype=object)}
    if evaluator == "decc":
        letters = np.array(list("ABCD"), dtype=object)
        direct = rng.choice(letters, n)

        def same(share: float) -> np.ndarray:
            return np.where(rng.random(n) < share, direct, rng.choice(letters, n))

        v1, l1 = same(0.7), same(0.7)
        second = v1 != l1
        missing = np.array(None, dtype=object)
        v2, l2 = np.where(second, same(0.7), missing), np.where(second, same(0.7), missing)
        answer = np.where(labelled, same(0.6), missing)
        return {name: pd.Series(values, dtype=object) for name, values in {"direct": direct, "v1": v1, "l1": l1, "v2": v2, "l2": l2, "answer": answer}.items()}
    raise ValueError(f"no arrays for {evaluator}")


def versions(definition: EvaluatorDefinition, n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(candidate, champion) per-sample frames with ``id`` on the same ``n`` items."""
    rng = np.random.default_rng(seed)
    champion = definition.per_sample(version_arrays(definition.name, n, rng))
    redrawn = definition.per_sample(version_arrays(definition.name, n, rng))
    answered_anew = rng.random(n) < REDRAWN
    candidate = pd.concat([champion[~answered_anew], redrawn[answered_anew]]).sort_index()
    ids = [f"{definition.name}-{i}" for i in range(n)]
    return candidate.assign(id=ids)[["id", *champion.columns]], champion.assign(id=ids)[["id", *champion.columns]]


def timed(run: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` runs, in seconds."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return float(best)


def through_the_gate(metric: ResolvedMetric, candidate: pd.DataFrame, champion: pd.DataFrame) -> None:
    PairedScores().score(metric, candidate, champion)


def as_before(metric: ResolvedMetric, candidate: pd.DataFrame, champion: pd.DataFrame) -> PairedScore:
    """The gate's paired score as it was made before: the leave-one-out weights written out
    (a plain function of arrays is handed the n × n matrix in batches)."""
    reweighting = resampled_statistic(metric, candidate)
    assert reweighting is not None
    return paired_score(candidate, champion, set_statistic(metric), lambda frame, counts: reweighting(frame, counts), metric.value_range)


@contextmanager
def gate_as_before() -> Iterator[None]:
    """The gate's comparisons made as before, each on its own by :func:`as_before`."""

    def score(_scores: PairedScores, metric: ResolvedMetric, candidate: pd.DataFrame, champion: pd.DataFrame, ids: frozenset[object] | None = None) -> PairedScore:
        if ids is not None:
            candidate, champion = candidate[candidate["id"].isin(ids)], champion[champion["id"].isin(ids)]
        return as_before(metric, candidate, champion)

    made = PairedScores.score
    PairedScores.score = score
    try:
        yield
    finally:
        PairedScores.score = made


def outputs(frames: dict[str, pd.DataFrame]) -> dict[str, EvaluatorOutput]:
    """Scored outputs of one version from its per-sample frames."""
    made = {}
    for name, frame in frames.items():
        definition = registry.get(name)
        records = [{"id": i, "category": c} for i, c in zip(frame["id"], frame["category"], strict=True)] if "category" in frame else [{"id": i} for i in frame["id"]]
        metrics = dict(definition.aggregate(frame.drop(columns="id")))
        made[name] = EvaluatorOutput(name, metrics=metrics, records=records, samples=frame)
    return made


def judgements(n: int, repeats: int, before: bool) -> dict[str, float]:
    """Seconds of the demo policy's judgements of a candidate on ``n`` items an evaluator:
    the fixed-sample gate, the sequential gate's last look and an interim look (the
    floors bootstrapped: the policy's 1,000 resamples); with ``before``, the same as the
    gate made them before."""
    candidate, champion = {}, {}
    for name in DEMO_EVALUATORS:
        candidate[name], champion[name] = versions(registry.get(name), n, seed=n + len(name))
    mine, theirs = outputs(candidate), outputs(champion)
    fixed, sequential = (GatePolicy.model_validate(yaml.safe_load(text)) for text in (DEMO_RULES, DEMO_POLICY))
    cases: dict[str, Callable[[], object]] = {
        "fixed-sample gate": lambda: decide(fixed, mine, theirs),
        "sequential, last look": lambda: decide(sequential, mine, theirs, look=3),
        "sequential, interim look": lambda: decide(sequential, mine, theirs, look=1),
    }
    if not before:
        return {case: timed(run, repeats) for case, run in cases.items()}
    with gate_as_before():
        return {case: timed(run, repeats) for case, run in cases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=16000)
    parser.add_argument("--judgement", type=int, default=20000, help="items per evaluator of the whole judgement")
    parser.add_argument("--before", action="store_true", help="also time the O(n²) path the gate took before")
    parser.add_argument("--before-max", type=int, default=16000, help="the largest size the dense path is timed at (it is quadratic: benchmarks/RESULTS.md has its times)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"paired score of one metric, candidate − champion (best of {args.repeats}; seconds)")
    header = f"| metric | {args.small:,} items | {args.large:,} items | ratio |"
    if args.before:
        header += f" before, {args.small:,} | before, {args.large:,} | ratio before |"
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for qualified in METRICS:
        metric = resolve_metric(qualified)
        cells = []
        before = []
        for n in (args.small, args.large):
            candidate, champion = versions(metric.definition, n, seed=n)
            cells.append(timed(partial(through_the_gate, metric, candidate, champion), args.repeats))
            if args.before and n <= args.before_max:
                before.append(timed(partial(as_before, metric, candidate, champion), 1 if n > 4000 else args.repeats))
        row = f"| {qualified} | {cells[0]:.4f} | {cells[1]:.4f} | {cells[1] / cells[0]:.1f}× |"
        if args.before:
            shown = [f"{t:.3f}" for t in before] + ["not run"] * (2 - len(before))
            row += f" {shown[0]} | {shown[1]} | {before[1] / before[0]:.0f}× |" if len(before) == 2 else f" {shown[0]} | {shown[1]} | |"
        print(row, flush=True)

    print(f"\na whole judgement of the demo's policy (gate.gates.decide; {len(DEMO_EVALUATORS)} evaluators; best of {args.repeats}; seconds)")
    small, large = judgements(args.small, args.repeats, before=False), judgements(args.judgement, args.repeats, before=False)
    earlier = [judgements(n, args.repeats if n <= 4000 else 1, before=True) for n in (args.small, args.judgement) if args.before and n <= args.before_max]
    header = f"| judgement | {args.small:,} items | {args.judgement:,} items | ratio |"
    header += "".join(f" before, {n:,} |" for n in (args.small, args.judgement)[: len(earlier)]) + (" ratio before |" if len(earlier) == 2 else "")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for case in small:
        row = f"| {case} | {small[case]:.3f} | {large[case]:.3f} | {large[case] / small[case]:.1f}× |" + "".join(f" {seconds[case]:.3f} |" for seconds in earlier)
        print(row + (f" {earlier[1][case] / earlier[0][case]:.0f}× |" if len(earlier) == 2 else ""), flush=True)


if __name__ == "__main__":
    main()
