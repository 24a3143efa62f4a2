"""What an evaluator is, in one place: its record schema, its metric math, what its
metrics mean, how its output is checked, gated, correlated, watched for drift and shown,
and how it runs on a model.

Every other part of vlgate reads this table instead of keeping its own:

* scoring (``evaluators/scoring.py``): ``schema``, ``per_sample``, ``aggregate``,
  ``group_field``, ``features`` (extra inputs kept with the records, e.g. GenCeption's);
* the suite (``evaluators/runners/suite.py``): ``settings`` (the pydantic model of the
  evaluator's suite entry), ``protocols`` (``evaluators/protocols.py``; the first is the
  default), ``load_items`` and ``build_runner``;
* Great Expectations (``flows/expectations.py``): ``columns``, ``ordered_columns`` and
  every metric's range, ``required`` and ``count``, and where output turns unusable
  (``max_share``, ``usable_low``/``usable_high``, ``unusable``);
* the gate's bootstrap (``flows/gate.py``): ``resampled``;
* the gate (``flows/gate.py``): a policy may name only metrics listed here, and a
  regression rule follows the metric's ``direction``;
* correlations (``flows/correlations.py``): ``correlate_with`` across versions and
  ``champion_correlated`` per sample against the champion;
* drift (``flows/drift.py``): ``drift_score``;
* reports (``dashboards/report.py``): ``report_figures`` and the ``headline`` metrics
  (leaderboard columns), ``vlgate examples``: ``example`` and the headline metrics.

Metric names may hold integer placeholders fixed by the evaluator's settings or its
records, e.g. ``gc@{T}``: ``gc@3`` and ``gc@5`` are the same metric of a 3- and a
5-iteration run, and every table above matches them by pattern, so nothing writes
``gc@3`` literally. Adding an evaluator: CONTRIBUTING.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from vlgate.evaluators import protocols as protocol_tables
from vlgate.evaluators import schemas
from vlgate.evaluators.metrics import decc, genception, lcm_mc, lcm_nb, vlind
from vlgate.evaluators.runners import decc as decc_runner
from vlgate.evaluators.runners import genception as genception_runner
from vlgate.evaluators.runners import lcm as lcm_runner
from vlgate.evaluators.runners import vlind as vlind_runner
from vlgate.evaluators.runners.base import EvaluatorSettings

if TYPE_CHECKING:
    from vlgate.evaluators.runners.base import Runner, RunnerContext

Direction = Literal["higher", "lower"]
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _pattern(template: str) -> re.Pattern[str]:
    """``gc@{T}`` → ``gc@(?P<T>\\d+)`` (full match)."""
    parts = _PLACEHOLDER.split(template)  # literal, name, literal, name, ...
    regex = "".join(re.escape(part) if n % 2 == 0 else f"(?P<{part}>\\d+)" for n, part in enumerate(parts))
    return re.compile(regex)


@dataclass(frozen=True)
class Metric:
    """One set-level metric as ``aggregate`` (or ``features``) names it.

    ``low``/``high``: its valid range (None: unbounded); ``count``: a count in
    ``[0, n]`` instead; ``direction``: which way is better (None for counts and
    descriptive shares, which a regression rule cannot use); ``labelled``: needs labels
    in the records (absent on unlabelled data); ``required``: defined on every complete
    run, so an undefined one fails the expectations; ``headline``: shown in the
    leaderboard and ``vlgate examples``; ``correlate_with``: the labelled metrics
    (``EVALUATOR/METRIC``) this label-free one is correlated with across versions;
    ``max_share``: for a count, the share of ``n`` it may reach before Great
    Expectations fails the run (e.g. unanswered questions: a backend losing the option
    tokens must not pass as a model answering "no"); ``usable_low``/``usable_high``: for a
    rate, the bounds of usable output inside its valid range (a description per image
    that is the same for all, one answer to every statement): past them Great
    Expectations fails the run, saying ``unusable`` (why such output is unusable).
    """

    name: str
    low: float | None = 0.0
    high: float | None = 1.0
    direction: Direction | None = "higher"
    labelled: bool = False
    required: bool = False
    headline: bool = False
    count: bool = False
    correlate_with: tuple[str, ...] = ()
    max_share: float | None = None
    usable_low: float | None = None
    usable_high: float | None = None
    unusable: str = ""

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return _pattern(self.name)

    def matches(self, name: str) -> bool:
        return self.pattern.fullmatch(name) is not None

    def resolve(self, values: dict[str, int]) -> str:
        """The concrete name for the given placeholder values (``gc@{T}``, T=5 → ``gc@5``)."""
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), self.name)

    @property
    def templated(self) -> bool:
        return bool(_PLACEHOLDER.search(self.name))


def _count(name: str, labelled: bool = False, max_share: float | None = None, unusable: str = "") -> Metric:
    return Metric(name, None, None, direction=None, count=True, labelled=labelled, max_share=max_share, unusable=unusable)


#: Unanswered questions (a tie at the top of the options' probabilities, or an answer the
#: benchmark's parser cannot read) allowed in a probability-scored run: a working backend
#: has none, so more than this is a broken backend, not a model's finding
UNANSWERED_CEILING = 0.05

#: Instances with an answer the benchmark's parser cannot read, allowed where the model
#: writes its answers (VLind-Bench): a model may miss the format now and then, but past a
#: fifth of the instances the scores measure the format, not the skill
UNPARSEABLE_CEILING = 0.2

#: The share of the commoner answer among a balanced benchmark's parsed answers above which
#: a model is answering without reading the statement (VLind-Bench pairs every true
#: statement with a false one, so a model that reads them answers "true" about half the time)
ONE_ANSWER_CEILING = 0.9

#: The share of distinct descriptions of distinct images below which a describer says the
#: same thing of every image (GenCeption's chains are then no test of the image)
DISTINCT_DESCRIPTIONS_FLOOR = 0.25


#: Metrics every evaluator's scoring produces: ``n`` (records scored), ``n_skipped``
#: (invalid records dropped) and ``n_item_errors`` (items that could not be loaded).
COMMON_METRICS = (_count("n"), _count("n_skipped"), _count("n_item_errors"))


@dataclass(frozen=True)
class Column:
    """A per-sample column of ``per_sample``'s frame: a range or a value set, and whether
    null is legitimate (labelled-only columns are null on unlabelled records). A name
    may be a template (``s@{t}``): the frame's matching columns, t = 1 up to the largest
    found (at least 1), must all exist."""

    name: str
    low: float | None = None
    high: float | None = None
    values: tuple[Any, ...] | None = None
    nullable: bool = False
    #: a label (e.g. GenCeption's category): a non-empty string, no range or value set
    text: bool = False
    #: text the model wrote (e.g. a description): any string, possibly empty
    free_text: bool = False

    def expand(self, frame_columns: Sequence[str]) -> list[Column]:
        if not _PLACEHOLDER.search(self.name):
            return [self]
        pattern = _pattern(self.name)
        found = [m for m in (pattern.fullmatch(str(c)) for c in frame_columns) if m]
        (placeholder,) = pattern.groupindex
        largest = max((int(m.group(placeholder)) for m in found), default=1)
        return [replace(self, name=self.name.replace("{" + placeholder + "}", str(k))) for k in range(1, largest + 1)]


def _probability(name: str, nullable: bool = False) -> Column:
    return Column(name, 0.0, 1.0, nullable=nullable)


def _indicator(name: str, nullable: bool = False) -> Column:
    return Column(name, values=(0, 1), nullable=nullable)


def _boolean(name: str) -> Column:
    return Column(name, values=(True, False))


@dataclass(frozen=True)
class DriftScore:
    """The label-free per-sample column drift checks compare between batches, and the
    name its mean is reported under (``EVALUATOR/METRIC``)."""

    column: str
    metric: str


Arrays = dict[str, Any]


@dataclass(frozen=True)
class EvaluatorDefinition:
    """Everything vlgate knows about one evaluator (see the module docstring for who reads what)."""

    name: str
    title: str
    schema: schemas.Schema
    #: the schema's arrays → one row per record (without ``id``; scoring adds it first)
    per_sample: Callable[[Arrays], pd.DataFrame]
    #: the per-sample frame (without ``id``) → the set-level metrics (named as in docs/metrics.md)
    aggregate: Callable[[pd.DataFrame], dict[str, Any]]
    metrics: tuple[Metric, ...]
    columns: tuple[Column, ...]
    settings: type[EvaluatorSettings]
    build_runner: Callable[[Any, RunnerContext], Runner[Any, Any]]
    #: its named protocols (what is asked, generation limits); the first is the default
    protocols: tuple[protocol_tables.Protocol[Any], ...]
    #: (A, B): A >= B on every row, B being a later pipeline stage gated on A
    ordered_columns: tuple[tuple[str, str], ...] = ()
    #: the record field metrics are broken down by, where the records carry it
    group_field: str | None = None
    drift_score: DriftScore | None = None
    #: the per-sample column correlated with the champion's on shared samples
    champion_correlated: str | None = None
    #: placeholder values of the metric names, read off a run's per-sample frame (and
    #: its metrics, where the frame has no columns that tell)
    template_values: Callable[[pd.DataFrame, dict[str, Any]], dict[str, int]] = lambda _frame, _metrics: {}
    #: (settings, output folder) → (items, item errors); None: the data set's loader
    load_items: Callable[[Any, Path], tuple[list[Any], list[Any]]] | None = None
    #: (records, evaluator folder) → extra per-iteration inputs to scoring (GenCeption's
    #: image features for FID), written beside the records; None: none
    features: Callable[[list[dict[str, Any]], Path], list[np.ndarray] | None] | None = None
    #: (per-sample frame without ``id``, features) → the metrics of the features (FID)
    feature_metrics: Callable[[pd.DataFrame, list[np.ndarray]], dict[str, Any]] | None = None
    #: (per-sample frame without ``id``, B × n row weights) → ``aggregate``'s metrics of B
    #: reweighted copies at once, for the metrics it covers: the gate's bootstrap resamples
    #: in one pass; None (or a metric it leaves out): each resample is aggregated
    resampled: Callable[[pd.DataFrame, np.ndarray], dict[str, np.ndarray]] | None = None
    #: the per-sample columns that are scores (higher is better), compared item by item
    #: between two versions (``vlgate diff``); the first is the one whose items are listed
    item_scores: tuple[str, ...] = ()
    #: the record fields shown beside a compared item (question, options, answers, images)
    item_fields: tuple[str, ...] = ()
    #: the report's figures for this evaluator's section, by kind (``dashboards/report.py``)
    report_figures: tuple[str, ...] = ()
    #: the example records under ``evaluators/examples/`` and, if any, their features file
    example: str = ""
    example_features: str | None = None

    def metric(self, name: str) -> Metric | None:
        """The definition of a concrete metric name (``gc@5`` → ``gc@{T}``), common ones included."""
        for metric in (*self.metrics, *COMMON_METRICS):
            if metric.matches(name):
                return metric
        return None

    def headline(self, metrics: Iterable[str]) -> list[str]:
        """The headline metrics among the names in ``metrics``, in the definition's order."""
        names = [name for name in metrics if isinstance(name, str)]
        return [name for metric in self.metrics if metric.headline for name in names if metric.matches(name)]

    def protocol(self, name: str | None = None) -> protocol_tables.Protocol[Any]:
        """The protocol called ``name`` (None: the default); UnknownProtocolError otherwise."""
        return protocol_tables.choose(self.protocols, self.name, name)

    def required_metrics(self, values: dict[str, int]) -> list[Metric]:
        return [metric for metric in self.metrics if metric.required and (not metric.templated or values)]


class UnknownEvaluatorError(ValueError):
    pass


_REGISTRY: dict[str, EvaluatorDefinition] = {}


def register(definition: EvaluatorDefinition) -> EvaluatorDefinition:
    """Add an evaluator (a plugin's or a test's); its name must be new."""
    if definition.name in _REGISTRY:
        raise ValueError(f"evaluator {definition.name!r} is already registered")
    for metric in definition.metrics:
        for target in metric.correlate_with:
            evaluator, _, name = target.partition("/")
            if not name:
                raise ValueError(f"{definition.name}/{metric.name}: correlate_with {target!r} is not EVALUATOR/METRIC")
    _REGISTRY[definition.name] = definition
    return definition


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered evaluator, in registration order (the order reports show them in)."""
    return tuple(_REGISTRY)


def definitions() -> tuple[EvaluatorDefinition, ...]:
    return tuple(_REGISTRY.values())


def get(name: str) -> EvaluatorDefinition:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownEvaluatorError(f"unknown evaluator {name!r}; expected one of {', '.join(sorted(_REGISTRY))}") from None


def split_metric(qualified: str) -> tuple[str, str]:
    """``genception/gc@3`` → (``genception``, ``gc@3``); ``decc/reliable_rate/multi`` → (``decc``, ``reliable_rate/multi``)."""
    evaluator, _, metric = qualified.partition("/")
    return evaluator, metric


def metric(qualified: str) -> Metric | None:
    """The definition of ``EVALUATOR/METRIC``, or None for an unknown evaluator or metric."""
    evaluator, name = split_metric(qualified)
    definition = _REGISTRY.get(evaluator)
    return definition.metric(name) if definition is not None and name else None


def correlated_pairs(available: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(label-free, labelled) pairs of qualified metric names among ``available`` (e.g. the
    columns of the across-versions table), templates matched against what is there."""
    for definition in _REGISTRY.values():
        for spec in definition.metrics:
            if not spec.correlate_with:
                continue
            xs = [name for name in available if split_metric(name)[0] == definition.name and spec.matches(split_metric(name)[1])]
            for x in xs:
                for y in spec.correlate_with:
                    yield x, y


# ---------------------------------------------------------------------------
# The five evaluators of docs/metrics.md


_SIMILARITY, _GC_AT = _pattern("s@{t}"), _pattern("gc@{T}")


def _genception_template_values(frame: pd.DataFrame, metrics: dict[str, Any]) -> dict[str, int]:
    """T from the per-sample frame's ``s@t`` columns; without them from a ``gc@T`` metric;
    else the default of 3."""
    iterations = sum(1 for column in frame.columns if _SIMILARITY.fullmatch(str(column)))
    if not iterations:
        found = sorted(int(m.group("T")) for m in (_GC_AT.fullmatch(k) for k in metrics if isinstance(k, str)) if m)
        iterations = found[-1] if found else 3
    return {"T": iterations}


def _genception_feature_metrics(samples: pd.DataFrame, features: list[np.ndarray]) -> dict[str, Any]:
    """``fid@t`` and ``gc_fid@T`` of the features X⁰…Xᵀ, which must match the records' T."""
    n_iterations = genception.iterations(samples)
    if len(features) != n_iterations + 1:
        raise ValueError(f"features hold {len(features) - 1} iterations but the records have T={n_iterations}")
    return genception.fid_metrics(features)


register(
    EvaluatorDefinition(
        name="lcm-mc",
        title="VL-LCM on multiple-choice VQA",
        schema=schemas.LcmMcSchema(),
        per_sample=lambda a: lcm_mc.per_sample(a["p_mc"], a["p_yes"], a["answer"]),
        aggregate=lcm_mc.aggregate,
        resampled=lcm_mc.resampled,
        metrics=(
            Metric("lcm", required=True, headline=True, correlate_with=("lcm-mc/acc", "lcm-mc/j_acc", "lcm-mc/f1")),
            Metric("acc", labelled=True, headline=True),
            Metric("j_acc", labelled=True, headline=True),
            Metric("f1", labelled=True, headline=True),
            Metric("lcm_gt", labelled=True, headline=True),
            Metric("abstention", direction="lower"),
            Metric("confidence"),
            Metric("overconfidence", direction="lower"),
            _count("n_reliable"),
            _count("n_unanswered", max_share=UNANSWERED_CEILING),
            _count("n_labelled", labelled=True),
            _count("n_reliable_correct", labelled=True),
        ),
        columns=(
            _probability("p_lc"),
            Column("chosen", 0, None),
            Column("n_yes", 0, None),
            _boolean("reliable"),
            _boolean("unanswered"),
            _indicator("correct", nullable=True),
            _indicator("j_correct", nullable=True),
            _probability("lc_gt", nullable=True),
            _indicator("reliable_correct", nullable=True),
        ),
        settings=EvaluatorSettings,
        build_runner=lcm_runner.build_lcm_mc_runner,
        protocols=protocol_tables.LCM_MC,
        group_field="category",
        drift_score=DriftScore("p_lc", "lcm"),
        champion_correlated="p_lc",
        item_scores=("correct", "p_lc", "reliable"),
        item_fields=("question", "options", "answer", "p_mc", "p_yes", "image"),
        report_figures=("response-distribution", "low-p_lc-examples"),
        example="lcm-mc.jsonl",
    )
)

register(
    EvaluatorDefinition(
        name="lcm-nb",
        title="VL-LCM on NaturalBench units",
        schema=schemas.LcmNbSchema(),
        per_sample=lambda a: lcm_nb.per_sample(a["p_yes"], a["p_text"], a["p_image"], a["answer"]),
        aggregate=lcm_nb.aggregate,
        resampled=lcm_nb.resampled,
        metrics=(
            Metric("lcm", required=True, headline=True, correlate_with=("lcm-nb/acc", "lcm-nb/g_acc", "lcm-nb/j_acc", "lcm-nb/f1")),
            Metric("acc", labelled=True, headline=True),
            Metric("q_acc", labelled=True, headline=True),
            Metric("i_acc", labelled=True, headline=True),
            Metric("g_acc", labelled=True, headline=True),
            Metric("j_acc", labelled=True, headline=True),
            Metric("f1", labelled=True, headline=True),
            Metric("lcm_gt", labelled=True),
            _count("n_unanswered", max_share=UNANSWERED_CEILING),
            _count("n_labelled", labelled=True),
        ),
        columns=(
            _probability("p_lc"),
            _boolean("unanswered"),
            Column("yn_correct", 0, 4, nullable=True),
            Column("q_correct", 0, 2, nullable=True),
            Column("i_correct", 0, 2, nullable=True),
            _indicator("g_correct", nullable=True),
            Column("j_correct", 0, 4, nullable=True),
            _probability("lc_gt", nullable=True),
        ),
        settings=lcm_runner.LcmNbSettings,
        build_runner=lcm_runner.build_lcm_nb_runner,
        protocols=protocol_tables.LCM_NB,
        load_items=lcm_runner.load_nb_units,
        group_field="category",
        drift_score=DriftScore("p_lc", "lcm"),
        champion_correlated="p_lc",
        item_scores=("g_correct", "p_lc", "yn_correct"),
        item_fields=("texts", "answer", "p_yes", "images"),
        report_figures=("low-p_lc-examples",),
        example="lcm-nb.jsonl",
    )
)

register(
    EvaluatorDefinition(
        name="vlind",
        title="VLind-Bench pipeline scores",
        schema=schemas.VlindSchema(),
        per_sample=lambda a: vlind.per_sample(a["ck"], a["vp"], a["cb"], a["lp"], a["lp_instance"]),
        aggregate=vlind.aggregate,
        resampled=vlind.resampled,
        # s_cb / s_lp are undefined when no instance passed the earlier stages (docs/metrics.md#vlind):
        # a finding about the model, not broken data, so they are not required
        metrics=(
            Metric("s_ck", required=True, headline=True),
            Metric("s_vp", required=True, headline=True),
            Metric("s_cb", headline=True),
            Metric("s_lp", headline=True),
            Metric("acc_cb", headline=True),
            Metric("acc_lp", headline=True),
            _count("n_unanswered", max_share=UNPARSEABLE_CEILING, unusable=f"more than {UNPARSEABLE_CEILING:.0%} of the instances have an answer the parser cannot read"),
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
            _boolean("unanswered"),
            Column("n_true", 0, None),
            Column("n_parsed", 0, None),
            _boolean("ck"),
            _boolean("vp"),
            _boolean("cb_raw"),
            _boolean("cb"),
            _probability("lp_raw"),
            _probability("lp"),
        ),
        ordered_columns=(("ck", "cb"), ("cb_raw", "cb"), ("lp_raw", "lp")),
        settings=vlind_runner.VlindSettings,
        build_runner=vlind_runner.build_vlind_runner,
        protocols=protocol_tables.VLIND,
        group_field="concept",
        item_scores=("lp", "cb", "ck", "vp"),
        item_fields=("concept", "responses"),
        report_figures=("vlind-funnel",),
        example="vlind.jsonl",
    )
)

register(
    EvaluatorDefinition(
        name="genception",
        title="GenCeption",
        schema=schemas.GenceptionSchema(),
        per_sample=lambda a: genception.per_sample(a["s"], a["category"], a["description"]),
        aggregate=genception.aggregate,
        resampled=genception.resampled,
        metrics=(
            Metric("gc@{T}", -1.0, 1.0, required=True, headline=True, correlate_with=("lcm-mc/acc",)),
            Metric("gc_image_mean@{T}", -1.0, 1.0, required=True),
            Metric("gc_fid@{T}", 0.0, None, direction="lower", headline=True),
            Metric("s@{t}", -1.0, 1.0),
            Metric("fid@{t}", 0.0, None, direction="lower"),
            Metric(
                "distinct_descriptions",
                direction=None,
                usable_low=DISTINCT_DESCRIPTIONS_FLOOR,
                unusable=f"fewer than {DISTINCT_DESCRIPTIONS_FLOOR:.0%} of the images got a description of their own",
            ),
        ),
        columns=(
            Column("category", text=True),
            Column("gc", -1.0, 1.0),
            Column("s@{t}", -1.0, 1.0),
            Column("description", nullable=True, free_text=True),
        ),
        settings=genception_runner.GenceptionSettings,
        build_runner=genception_runner.build_genception_runner,
        protocols=protocol_tables.GENCEPTION,
        group_field="category",
        drift_score=DriftScore("gc", "gc"),
        template_values=_genception_template_values,
        features=genception_runner.features_for_scoring,
        feature_metrics=_genception_feature_metrics,
        item_scores=("gc",),
        item_fields=("seed", "descriptions", "s"),
        report_figures=("genception-curves", "genception-chains"),
        example="genception.jsonl",
        example_features="genception-features.npz",
    )
)

_DECC_FIRST_ROUND = ("vlm", "llm", "multi")
_DECC_SECOND_ROUND = ("vlm2", "llm2")
register(
    EvaluatorDefinition(
        name="decc",
        title="DeCC answer reliability",
        schema=schemas.DeccSchema(),
        per_sample=lambda a: decc.per_sample(a["direct"], a["v1"], a["l1"], a["v2"], a["l2"], a["answer"]),
        aggregate=decc.aggregate,
        resampled=decc.resampled,
        metrics=(
            Metric("reliable_rate/multi", required=True, headline=True, correlate_with=("decc/acc",)),
            *(Metric(f"reliable_rate/{s}", required=True) for s in _DECC_FIRST_ROUND if s != "multi"),
            *(Metric(f"reliable_rate/{s}") for s in _DECC_SECOND_ROUND),
            Metric("acc", labelled=True, headline=True),
            Metric("brier/multi", direction="lower", labelled=True, headline=True),
            Metric("er/multi", -1.0, 1.0, labelled=True, headline=True),
            *(Metric(f"brier/{s}", direction="lower", labelled=True) for s in (*_DECC_FIRST_ROUND, *_DECC_SECOND_ROUND) if s != "multi"),
            *(Metric(f"er/{s}", -1.0, 1.0, labelled=True) for s in (*_DECC_FIRST_ROUND, *_DECC_SECOND_ROUND) if s != "multi"),
            _count("n_round2"),
            _count("n_labelled", labelled=True),
        ),
        columns=(
            _indicator("vlm"),
            _indicator("llm"),
            _indicator("multi"),
            _indicator("vlm2", nullable=True),
            _indicator("llm2", nullable=True),
            _indicator("correct", nullable=True),
        ),
        settings=decc_runner.DeccSettings,
        build_runner=decc_runner.build_decc_runner,
        protocols=protocol_tables.DECC,
        group_field="category",
        drift_score=DriftScore("multi", "reliable_rate/multi"),
        item_scores=("multi", "correct", "vlm", "llm"),
        item_fields=("direct", "answer", "v1", "l1", "sub_questions", "sub_answers"),
        report_figures=("decc-matrix",),
        example="decc.jsonl",
    )
)

__all__ = [
    "COMMON_METRICS",
    "Column",
    "DriftScore",
    "EvaluatorDefinition",
    "Metric",
    "UnknownEvaluatorError",
    "correlated_pairs",
    "definitions",
    "get",
    "metric",
    "names",
    "register",
    "split_metric",
    "unregister",
]
