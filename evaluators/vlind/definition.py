"""VLind-Bench's pipeline scores (docs/metrics.md#vlind). The runner and the report's
figures are imported when they are used."""

from __future__ import annotations

from pathlib import Path

from vlgate.evaluators.definition import Column, EvaluatorDefinition, ItemScore, Metric, boolean_column, count_metric, imported_when_called, probability_column
from vlgate.evaluators.vlind import metrics
from vlgate.evaluators.vlind.protocols import VLIND
from vlgate.evaluators.vlind.schema import VlindSchema
from vlgate.evaluators.vlind.settings import VlindSettings

EXAMPLES = Path(__file__).parent / "examples"

#: Instances with an answer the benchmark's parser cannot read, allowed where the model
#: writes its answers: a model may miss the format now and then, but past a fifth of the
#: instances the scores measure the format, not the skill
UNPARSEABLE_CEILING = 0.2

#: The share of the commoner answer among the parsed answers above which a model is
#: answering without reading the statement (VLind-Bench pairs every true statement with a
#: false one, so a model that reads them answers "true" about half the time)
ONE_ANSWER_CEILING = 0.9


VLIND_DEFINITION = EvaluatorDefinition(
    name="vlind",
    title="VLind-Bench pipeline scores",
    schema=VlindSchema(),
    per_sample=lambda a: metrics.per_sample(a["ck"], a["vp"], a["cb"], a["lp"], a["lp_instance"]),
    aggregate=metrics.aggregate,
    resampled=metrics.resampled,
    # s_cb / s_lp are undefined when no instance passed the earlier stages (docs/metrics.md#vlind):
    # a finding about the model, not broken data, so they are not required
    metrics=(
        Metric("s_ck", required=True, headline=True),
        Metric("s_vp", required=True, headline=True),
        Metric("s_cb", headline=True),
        Metric("s_lp", headline=True),
        Metric("acc_cb", headline=True),
        Metric("acc_lp", headline=True),
        count_metric("n_unanswered", max_share=UNPARSEABLE_CEILING, unusable=f"more than {UNPARSEABLE_CEILING:.0%} of the instances have an answer the parser cannot read"),
        Metric(
            "one_answer_share",
            0.5,
            1.0,
            direction=None,
            usable_high=ONE_ANSWER_CEILING,
            unusable=f"one answer (true or false) to more than {ONE_ANSWER_CEILING:.0%} of statements that are half true and half false",
        ),
    ),
    columns=(
        boolean_column("unanswered"),
        Column("n_true", 0, None),
        Column("n_parsed", 0, None),
        boolean_column("ck"),
        boolean_column("vp"),
        boolean_column("cb_raw"),
        boolean_column("cb"),
        probability_column("lp_raw"),
        probability_column("lp"),
    ),
    ordered_columns=(("ck", "cb"), ("cb_raw", "cb"), ("lp_raw", "lp")),
    settings=VlindSettings,
    build_runner=imported_when_called("vlgate.evaluators.vlind.runner", "build_vlind_runner"),
    protocols=VLIND,
    group_field="concept",
    item_scores=tuple(ItemScore(stage, metrics=(f"s_{stage}",)) for stage in ("lp", "cb", "ck", "vp")),
    item_fields=("concept", "responses"),
    report_section=imported_when_called("vlgate.evaluators.vlind.figures", "section"),
    example=EXAMPLES / "vlind.jsonl",
)

DEFINITIONS = (VLIND_DEFINITION,)
