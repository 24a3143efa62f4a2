"""DeCC's answer reliability (docs/metrics.md#decc). The runner and the report's figures
are imported when they are used."""

from __future__ import annotations

from pathlib import Path

from vlgate.evaluators.decc import metrics
from vlgate.evaluators.decc.protocols import DECC
from vlgate.evaluators.decc.schema import DeccSchema
from vlgate.evaluators.decc.settings import DeccSettings
from vlgate.evaluators.definition import DriftScore, EvaluatorDefinition, ItemScore, Metric, count_metric, imported_when_called, indicator_column

EXAMPLES = Path(__file__).parent / "examples"

FIRST_ROUND = ("vlm", "llm", "multi")
SECOND_ROUND = ("vlm2", "llm2")


DECC_DEFINITION = EvaluatorDefinition(
    name="decc",
    title="DeCC answer reliability",
    schema=DeccSchema(),
    per_sample=lambda a: metrics.per_sample(a["direct"], a["v1"], a["l1"], a["v2"], a["l2"], a["answer"]),
    aggregate=metrics.aggregate,
    resampled=metrics.resampled,
    metrics=(
        Metric("reliable_rate/multi", required=True, headline=True, correlate_with=("decc/acc",)),
        *(Metric(f"reliable_rate/{s}", required=True) for s in FIRST_ROUND if s != "multi"),
        *(Metric(f"reliable_rate/{s}") for s in SECOND_ROUND),
        Metric("acc", labelled=True, headline=True),
        Metric("brier/multi", direction="lower", labelled=True, headline=True),
        Metric("er/multi", -1.0, 1.0, labelled=True, headline=True),
        *(Metric(f"brier/{s}", direction="lower", labelled=True) for s in (*FIRST_ROUND, *SECOND_ROUND) if s != "multi"),
        *(Metric(f"er/{s}", -1.0, 1.0, labelled=True) for s in (*FIRST_ROUND, *SECOND_ROUND) if s != "multi"),
        count_metric("n_round2"),
        count_metric("n_labelled", labelled=True),
    ),
    columns=(
        indicator_column("vlm"),
        indicator_column("llm"),
        indicator_column("multi"),
        indicator_column("vlm2", nullable=True),
        indicator_column("llm2", nullable=True),
        indicator_column("correct", nullable=True),
    ),
    settings=DeccSettings,
    build_runner=imported_when_called("vlgate.evaluators.decc.runner", "build_decc_runner"),
    protocols=DECC,
    group_field="category",
    drift_score=DriftScore("multi", "reliable_rate/multi"),
    item_scores=(
        ItemScore("multi", metrics=("reliable_rate/multi",)),
        ItemScore("correct", metrics=("acc",)),
        *(ItemScore(agent, metrics=(f"reliable_rate/{agent}",)) for agent in ("vlm", "llm")),
    ),
    item_fields=("direct", "answer", "v1", "l1", "sub_questions", "sub_answers"),
    report_section=imported_when_called("vlgate.evaluators.decc.figures", "section"),
    example=EXAMPLES / "decc.jsonl",
)

DEFINITIONS = (DECC_DEFINITION,)
