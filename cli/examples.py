"""``vlgate examples``: the model-free tour, in seconds.

Scores the shipped example records of all five evaluators (docs/metrics.md) and reproduces the
VL-LCM paper's Table 1 correlations from its printed values (docs/metrics.md#correlations). ``vlgate demo``
is the whole service loop; this is what the metric layer alone does.
"""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table

from vlgate.cli.terminal import terminal_console
from vlgate.evaluators import registry
from vlgate.evaluators.metrics.correlation import correlate_table
from vlgate.evaluators.scoring import score_file
from vlgate.evaluators.vl_lcm.definition import EXAMPLES as VL_LCM_EXAMPLES


def run_examples(console: Console | None = None) -> int:
    console = console or terminal_console()
    table = Table(title="vlgate score on the shipped example records")
    table.add_column("evaluator")
    table.add_column("n", justify="right")
    table.add_column("metrics")
    for definition in registry.definitions():  # the headline metrics are shown; `vlgate score` prints them all
        metrics, _ = score_file(definition.name, definition.example, features_path=definition.example_features)
        shown = ", ".join(f"{key}={metrics[key]:.4f}" for key in definition.headline(metrics) if metrics.get(key) is not None)
        table.add_row(definition.name, str(metrics["n"]), shown)
    console.print(table)

    for data_set in ("coco", "voc2007"):
        frame = pd.read_csv(VL_LCM_EXAMPLES / f"vl-lcm-table1-{data_set}.csv", dtype=str, keep_default_na=False)
        result = correlate_table(frame, "lcm", ["acc", "j_acc", "f1"], ranks=True)
        corr = Table(title=f"VL-LCM paper Table 1 ({data_set}): LCM against the labelled metrics, 11 models")
        for column in ("metric", "pearson", "spearman", "kendall"):
            corr.add_column(column, justify="right" if column != "metric" else "left")
        for metric, values in result.items():
            corr.add_row(metric, *(f"{values[k]:.4f}" for k in ("pearson", "spearman", "kendall")))
        console.print(corr)
    console.print("Score your own records with: vlgate score EVALUATOR FILE  (see `vlgate score --help`)")
    return 0
