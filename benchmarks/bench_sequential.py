"""The sequential gate's operating characteristics against the fixed-sample gate's, by
simulation: a regression rule (``max_drop``, one-sided α) on per-item paired differences
of a correct/incorrect metric, 10,000 decisions per case, candidates with no true change,
a true drop at the margin and twice the margin, on suites sized at 1, 2 and 4 times the
items the margin needs for 80 % power (``vlgate plan``'s number). Prints each case's pass
and fail rates and the items per decision, fixed and sequential (with and without early
promotion), and the share of items the sequential gate saves. Interim looks are judged on
the studentised estimate, the last look (and the fixed gate's one) by the paired score
test, as the gate judges them; beside them the rates of the tests the gate does not use
at the margin (the percentile bootstrap, a t test), for the record. The champion's per-item
correctness comes from a records file of a validated version (``--records
VALIDATIONS/MODEL/N/lcm-mc/records.jsonl``: its accuracy is what is resampled), else a
60 %-accurate champion; a candidate regains 10 % of the champion's misses and loses what
sets the true change.

    python benchmarks/bench_sequential.py [--records FILE | --accuracy 0.84] [--decisions 10000] [--margin 0.05] [--looks 0.25 0.5 0.75 1] [--spending pocock] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats

from vlgate.evaluators.metrics import score_test, sequential

LOOKS = [0.25, 0.5, 0.75, 1.0]


def champion_accuracy(records: Path | None) -> float:
    if records is None:
        return 0.6
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    right = [int(np.argmax(row["p_mc"]) == row["answer"]) for row in rows if row.get("p_mc") and row.get("answer") is not None]
    return float(np.mean(right))


def differences(accuracy: float, change: float, decisions: int, items: int, rng: np.random.Generator) -> np.ndarray:
    champion = rng.random((decisions, items)) < accuracy
    gain = 0.1
    loss = (gain * (1 - accuracy) - change) / accuracy
    draw = rng.random((decisions, items))
    return np.where(champion, draw >= loss, draw < gain).astype(float) - champion


def percentile_bootstrap_passes(drawn: np.ndarray, margin: float, alpha: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Whether the percentile bootstrap's one-sided lower bound of each row's mean clears
    the margin (at or above it; the gate judges by the score test instead), a resample drawn as
    multinomial counts of the values −1, 0, 1."""
    values = np.array([-1.0, 0.0, 1.0])
    shares = np.stack([(drawn == v).mean(axis=1) for v in values], axis=1)
    passes = np.empty(drawn.shape[0], dtype=bool)
    for start in range(0, drawn.shape[0], 500):
        means = rng.multinomial(drawn.shape[1], shares[start : start + 500], size=(resamples, len(shares[start : start + 500]))) @ values / drawn.shape[1]
        passes[start : start + 500] = np.quantile(means, alpha, axis=0) >= margin
    return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path)
    parser.add_argument("--accuracy", type=float, help="the champion's accuracy, in place of a records file's")
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--looks", type=float, nargs="+", default=LOOKS, help="the looks' fractions (the policy's sequential.looks)")
    parser.add_argument("--spending", choices=sorted(sequential.SPENDING_FUNCTIONS), default="obrien-fleming", help="the policy's sequential.spending")
    parser.add_argument("--resamples", type=int, default=1000, help="the percentile bootstrap's, shown for comparison")
    args = parser.parse_args()
    looks = sequential.validated_fractions(args.looks).tolist()
    accuracy = args.accuracy if args.accuracy is not None else champion_accuracy(args.records)
    rng = np.random.default_rng(0)
    # the paired spread of no change, as `vlgate plan` would measure it between two versions
    spread = float(differences(accuracy, 0.0, 1, 200_000, rng).std())
    needed = sequential.items_needed(spread, args.margin, args.alpha)
    assert needed is not None
    print(f"champion accuracy {accuracy:.3f}; paired spread {spread:.3f}; max_drop {args.margin} at α {args.alpha}: {needed} items for 80 % power; looks {looks}, {args.spending} spending")
    header = f"{'items':>6} {'true change':>12} | {'fixed pass':>10} {'fail':>6} | {'seq pass':>8} {'fail':>6} {'items':>7} {'saved':>6} |"
    print(f"{header} {'early pass':>10} {'fail':>6} {'items':>7} {'saved':>6} | {'pctl pass':>9} {'t pass':>6}")
    for size in (needed, 2 * needed, 4 * needed):
        sizes = sequential.look_sizes(size, looks)
        for label, change in (("none", 0.0), ("margin", -args.margin), ("2×margin", -2 * args.margin)):
            drawn = differences(accuracy, change, args.decisions, size, rng)
            z = sequential.paired_z_at_looks(drawn, -args.margin, looks)
            tested = score_test.paired_score_p_values(drawn, -args.margin, sizes)  # every look: the gate's score test
            fixed, _ = sequential.sequential_decisions(z[:, -1:], [size], [1.0], args.alpha, promote_early=True, p_values=tuple(p[:, -1:] for p in tested))
            row = f"{size:>6} {label:>12} | {np.mean(fixed == 'pass'):>10.4f} {np.mean(fixed == 'fail'):>6.4f} |"
            for early in (False, True):
                verdict, stopped = sequential.sequential_decisions(z, sizes, looks, args.alpha, promote_early=early, p_values=tested, spending=args.spending)
                used = sizes[stopped].mean()
                row += f" {np.mean(verdict == 'pass'):>8.4f} {np.mean(verdict == 'fail'):>6.4f} {used:>7.0f} {1 - used / size:>6.1%} |"
            percentile = percentile_bootstrap_passes(drawn, -args.margin, args.alpha, args.resamples, rng).mean()
            t_passes = (stats.t.sf(z[:, -1], df=size - 1) <= args.alpha).mean()
            print(f"{row} {percentile:>9.4f} {t_passes:>6.4f}")
    print(f"Monte-Carlo standard error of a rate near α: {np.sqrt(args.alpha * (1 - args.alpha) / args.decisions):.4f}")


if __name__ == "__main__":
    main()
