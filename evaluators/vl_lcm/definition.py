"""VL-LCM's two evaluators: lcm-mc on multiple-choice VQA and lcm-nb on NaturalBench units
(docs/metrics.md#lcm-mc, #lcm-nb). The runner and the report's figures are imported when
they are used, so scoring records loads neither a model nor matplotlib."""

from __future__ import annotations

from pathlib import Path

from vlgate.evaluators.definition import (
    Column,
    DriftScore,
    EvaluatorDefinition,
    ItemLines,
    ItemScore,
    Metric,
    boolean_column,
    count_metric,
    imported_when_called,
    indicator_column,
    probability_column,
)
from vlgate.evaluators.figures import VersionsFigure
from vlgate.evaluators.runners.base import EvaluatorSettings
from vlgate.evaluators.vl_lcm import metrics_mc, metrics_nb
from vlgate.evaluators.vl_lcm.protocols import LCM_MC, LCM_NB
from vlgate.evaluators.vl_lcm.schema import LcmMcSchema, LcmNbSchema
from vlgate.evaluators.vl_lcm.settings import LcmNbSettings

EXAMPLES = Path(__file__).parent / "examples"

#: Unanswered questions (a tie at the top of the options' probabilities) allowed in a
#: probability-scored run: a working backend has none, so more than this is a broken
#: backend, not a model's finding
UNANSWERED_CEILING = 0.05


LCM_MC_DEFINITION = EvaluatorDefinition(
    name="lcm-mc",
    title="VL-LCM on multiple-choice VQA",
    schema=LcmMcSchema(),
    per_sample=lambda a: metrics_mc.per_sample(a["p_mc"], a["p_yes"], a["answer"]),
    aggregate=metrics_mc.aggregate,
    resampled=metrics_mc.resampled,
    metrics=(
        Metric("lcm", required=True, headline=True, correlate_with=("lcm-mc/acc", "lcm-mc/j_acc", "lcm-mc/f1")),
        Metric("acc", labelled=True, headline=True),
        Metric("j_acc", labelled=True, headline=True),
        Metric("f1", labelled=True, headline=True),
        Metric("lcm_gt", labelled=True, headline=True),
        Metric("abstention", direction="lower"),
        Metric("confidence"),
        Metric("overconfidence", direction="lower"),
        count_metric("n_reliable"),
        count_metric("n_unanswered", max_share=UNANSWERED_CEILING),
        count_metric("n_labelled", labelled=True),
        count_metric("n_reliable_correct", labelled=True),
    ),
    columns=(
        probability_column("p_lc"),
        Column("chosen", 0, None),
        Column("n_yes", 0, None),
        boolean_column("reliable"),
        boolean_column("unanswered"),
        indicator_column("correct", nullable=True),
        indicator_column("j_correct", nullable=True),
        probability_column("lc_gt", nullable=True),
        indicator_column("reliable_correct", nullable=True),
    ),
    settings=EvaluatorSettings,
    build_runner=imported_when_called("vlgate.evaluators.vl_lcm.runner", "build_lcm_mc_runner"),
    protocols=LCM_MC,
    group_field="category",
    drift_score=DriftScore("p_lc", "lcm"),
    champion_correlated="p_lc",
    item_scores=(ItemScore("correct", metrics=("acc", "f1")), ItemScore("p_lc", metrics=("lcm",)), ItemScore("reliable", metrics=("n_reliable",))),
    item_fields=("question", "options", "answer", "p_mc", "p_yes", "image"),
    item_lines=ItemLines(("options", "answer", "p_mc", "p_yes"), ("P_MC", "P(yes)"), imported_when_called("vlgate.evaluators.vl_lcm.items", "mc_item_lines")),
    report_section=imported_when_called("vlgate.evaluators.vl_lcm.figures", "section"),
    versions_figure=VersionsFigure(
        "response-distribution",
        "LCM and the yes/no response distribution per version, sorted by LCM (paper Fig. 2)",
        imported_when_called("vlgate.evaluators.vl_lcm.figures", "response_distribution_figure"),
    ),
    example=EXAMPLES / "lcm-mc.jsonl",
)

LCM_NB_DEFINITION = EvaluatorDefinition(
    name="lcm-nb",
    title="VL-LCM on NaturalBench units",
    schema=LcmNbSchema(),
    per_sample=lambda a: metrics_nb.per_sample(a["p_yes"], a["p_text"], a["p_image"], a["answer"]),
    aggregate=metrics_nb.aggregate,
    resampled=metrics_nb.resampled,
    metrics=(
        Metric("lcm", required=True, headline=True, correlate_with=("lcm-nb/acc", "lcm-nb/g_acc", "lcm-nb/j_acc", "lcm-nb/f1")),
        Metric("acc", labelled=True, headline=True),
        Metric("q_acc", labelled=True, headline=True),
        Metric("i_acc", labelled=True, headline=True),
        Metric("g_acc", labelled=True, headline=True),
        Metric("j_acc", labelled=True, headline=True),
        Metric("f1", labelled=True, headline=True),
        Metric("lcm_gt", labelled=True),
        count_metric("n_unanswered", max_share=UNANSWERED_CEILING),
        count_metric("n_labelled", labelled=True),
    ),
    columns=(
        probability_column("p_lc"),
        boolean_column("unanswered"),
        Column("yn_correct", 0, 4, nullable=True),
        Column("q_correct", 0, 2, nullable=True),
        Column("i_correct", 0, 2, nullable=True),
        indicator_column("g_correct", nullable=True),
        Column("j_correct", 0, 4, nullable=True),
        probability_column("lc_gt", nullable=True),
    ),
    settings=LcmNbSettings,
    build_runner=imported_when_called("vlgate.evaluators.vl_lcm.runner", "build_lcm_nb_runner"),
    protocols=LCM_NB,
    load_items=imported_when_called("vlgate.evaluators.vl_lcm.runner", "load_nb_units"),
    group_field="category",
    drift_score=DriftScore("p_lc", "lcm"),
    champion_correlated="p_lc",
    item_scores=(ItemScore("g_correct", metrics=("g_acc",)), ItemScore("p_lc", metrics=("lcm",)), ItemScore("yn_correct", metrics=("acc", "f1"))),
    item_fields=("texts", "answer", "p_yes", "images"),
    item_lines=ItemLines(("texts", "p_yes"), ("P(yes | V1)", "P(yes | V2)"), imported_when_called("vlgate.evaluators.vl_lcm.items", "nb_item_lines")),
    report_section=imported_when_called("vlgate.evaluators.vl_lcm.figures", "section"),
    example=EXAMPLES / "lcm-nb.jsonl",
)

DEFINITIONS = (LCM_MC_DEFINITION, LCM_NB_DEFINITION)
