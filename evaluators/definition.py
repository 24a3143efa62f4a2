"""What an evaluator is: its record schema, its metric math, what its metrics mean, how its
output is checked, gated, correlated, watched for drift and shown, and how it runs on a model.
Each evaluator's package (``vl_lcm/``, ``vlind/``, ``genception/``, ``decc/``) builds its
:class:`EvaluatorDefinition` in its ``definition.py``; ``registry.py`` registers them, and a
definition checks itself on its example records when it is registered (:meth:`EvaluatorDefinition.check`).

Every other part of vlgate reads the definitions instead of keeping its own tables:

* scoring (``evaluators/scoring.py``): ``schema``, ``per_sample``, ``aggregate``,
  ``group_field``, ``features`` (extra inputs kept with the records, e.g. GenCeption's);
* the suite (``evaluators/running/suite.py``): ``settings`` (the pydantic model of the
  evaluator's suite entry), ``protocols`` (the first is the default), ``load_items`` and
  ``build_runner``;
* Great Expectations (``flows/expectations.py``): ``columns``, ``ordered_columns`` and
  every metric's range, ``required`` and ``count``, and where output turns unusable
  (``max_share``, ``usable_low``/``usable_high``, ``unusable``);
* the gate's bootstrap (``gate/``): ``resampled``;
* the gate (``gate/``): a policy may name only metrics listed here, and a
  regression rule follows the metric's ``direction``;
* correlations (``flows/correlations.py``): ``correlate_with`` across versions and
  ``champion_correlated`` per sample against the champion;
* drift (``flows/drift.py``): ``drift_score``;
* item comparisons (``vlgate diff``, the report): ``item_scores`` (each with its
  direction and the metrics it is behind) and ``item_fields``;
* reports (``dashboards/report.py``): ``report_section``, ``versions_figure`` and the
  ``headline`` metrics (leaderboard columns); ``vlgate examples``: ``example`` and the
  headline metrics.

Metric names may hold integer placeholders fixed by the evaluator's settings or its
records, e.g. ``gc@{T}``: ``gc@3`` and ``gc@5`` are the same metric of a 3- and a
5-iteration run, and every table above matches them by pattern, so nothing writes
``gc@3`` literally. Adding an evaluator: CONTRIBUTING.md.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from vlgate.evaluators import protocols as protocol_tables
from vlgate.evaluators import schemas
from vlgate.evaluators.features import load_features
from vlgate.evaluators.metrics.common import LeaveOneOut, MetricValues, Weights
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.base import EvaluatorSettings
from vlgate.evaluators.schemas import Arrays

if TYPE_CHECKING:
    import PIL.Image

    from vlgate.evaluators.figures import Section, SectionInputs, VersionsFigure
    from vlgate.evaluators.loaders.items import ItemError
    from vlgate.evaluators.runners.base import Identified, Runner, RunnerContext

Direction = Literal["higher", "lower"]
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def name_pattern(template: str) -> re.Pattern[str]:
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
    #: why no rule can gate it (an lmms-eval aggregation that needs its docs whole); "": any rule may
    ungateable: str = ""

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return name_pattern(self.name)

    def matches(self, name: str) -> bool:
        return self.pattern.fullmatch(name) is not None

    def resolve(self, values: dict[str, int]) -> str:
        """The concrete name for the given placeholder values (``gc@{T}``, T=5 → ``gc@5``)."""
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), self.name)

    @property
    def templated(self) -> bool:
        return bool(_PLACEHOLDER.search(self.name))


def count_metric(name: str, labelled: bool = False, max_share: float | None = None, unusable: str = "") -> Metric:
    return Metric(name, None, None, direction=None, count=True, labelled=labelled, max_share=max_share, unusable=unusable)


#: Metrics every evaluator's scoring produces: ``n`` (records scored), ``n_skipped``
#: (invalid records dropped) and ``n_item_errors`` (items that could not be loaded).
COMMON_METRICS = (count_metric("n"), count_metric("n_skipped"), count_metric("n_item_errors"))


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
    #: a value only its evaluator's own aggregation reads (an lmms-eval task's per-doc
    #: ``process_results`` value, any JSON): present, never range-checked
    opaque: bool = False

    def expand(self, frame_columns: Sequence[str]) -> list[Column]:
        if not _PLACEHOLDER.search(self.name):
            return [self]
        pattern = name_pattern(self.name)
        found = [m for m in (pattern.fullmatch(str(c)) for c in frame_columns) if m]
        (placeholder,) = pattern.groupindex
        largest = max((int(m.group(placeholder)) for m in found), default=1)
        return [replace(self, name=self.name.replace("{" + placeholder + "}", str(k))) for k in range(1, largest + 1)]


@dataclass(frozen=True)
class ItemScore:
    """A per-sample column compared item by item between two versions (``vlgate diff``, the
    report's "Against the champion"): which way is better (an item is lost where it moved
    the other way), and the set-level metrics it is behind (names as ``metrics`` declares
    them, ``gc@{T}`` included): a gate check on one of those that fails lists this score's
    items first."""

    column: str
    direction: Direction = "higher"
    metrics: tuple[str, ...] = ()


def probability_column(name: str, nullable: bool = False) -> Column:
    return Column(name, 0.0, 1.0, nullable=nullable)


def indicator_column(name: str, nullable: bool = False) -> Column:
    return Column(name, values=(0, 1), nullable=nullable)


def boolean_column(name: str) -> Column:
    return Column(name, values=(True, False))


@dataclass(frozen=True)
class ItemLine:
    """One line of a compared item's table: what it stands for (an option, with its label),
    whether it is the item's answer, and its numbers, one per :attr:`ItemLines.columns`."""

    text: str
    answer: bool
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class ItemLines:
    """A compared item's record fields read as a table, a line per option (an MC item's
    options with their P_MC and P(yes)), instead of the raw fields: ``fields`` are the
    record fields the lines show (left out of the field rows beside them), ``columns``
    the numbers of each line, ``read`` a record's lines (none where it lacks a field)."""

    fields: tuple[str, ...]
    columns: tuple[str, ...]
    read: Callable[[Record], list[ItemLine]]


@dataclass(frozen=True)
class DriftScore:
    """The label-free per-sample column drift checks compare between batches, and the
    name its mean is reported under (``EVALUATOR/METRIC``)."""

    column: str
    metric: str


@dataclass(frozen=True)
class EvaluatorDefinition:
    """Everything vlgate knows about one evaluator (see the module docstring for who reads what)."""

    name: str
    title: str
    schema: schemas.Schema
    #: the schema's arrays → one row per record (without ``id``; scoring adds it first)
    per_sample: Callable[[Arrays], pd.DataFrame]
    #: the per-sample frame (without ``id``) → the set-level metrics (named as in docs/metrics.md)
    aggregate: Callable[[pd.DataFrame], MetricValues]
    metrics: tuple[Metric, ...]
    columns: tuple[Column, ...]
    settings: type[EvaluatorSettings]
    #: (its settings, the run's context) → the runner; the package imports its runner here only
    build_runner: Callable[[Any, RunnerContext], Runner[Any, Any]]
    #: its named protocols (what is asked, generation limits); the first is the default
    protocols: tuple[protocol_tables.Protocol[Any], ...]
    #: the example records it checks itself on (``vlgate examples`` scores them too)
    example: Path
    #: (A, B): A >= B on every row, B being a later pipeline stage gated on A
    ordered_columns: tuple[tuple[str, str], ...] = ()
    #: the record field metrics are broken down by, where the records carry it
    group_field: str | None = None
    drift_score: DriftScore | None = None
    #: the per-sample column correlated with the champion's on shared samples
    champion_correlated: str | None = None
    #: placeholder values of the metric names, read off a run's per-sample frame (and
    #: its metrics, where the frame has no columns that tell)
    template_values: Callable[[pd.DataFrame, Mapping[str, object]], dict[str, int]] = lambda _frame, _metrics: {}
    #: (settings, output folder) → (items, item errors); None: the data set's loader
    load_items: Callable[[Any, Path], tuple[Sequence[Identified], list[ItemError]]] | None = None
    #: (records, evaluator folder) → extra per-iteration inputs to scoring (GenCeption's
    #: image features for FID), written beside the records; None: none
    features: Callable[[list[Record], Path], list[np.ndarray] | None] | None = None
    #: (per-sample frame without ``id``, features) → the metrics of the features (FID)
    feature_metrics: Callable[[pd.DataFrame, list[np.ndarray]], MetricValues] | None = None
    #: the example records' features file (``evaluators/features.py``), where it has ``feature_metrics``
    example_features: Path | None = None
    #: (per-sample frame without ``id``, B × n row weights or ``LeaveOneOut(n)``) →
    #: ``aggregate``'s metrics of B reweighted copies at once, for the metrics it covers:
    #: the gate's bootstrap resamples in one pass, and its jackknife leaves each row out in
    #: O(n) (built on ``weighted_mean``/``weighted_ratio``, which take both); None (or a
    #: metric it leaves out): each resample and leave-one-out frame is aggregated
    resampled: Callable[[pd.DataFrame, Weights], dict[str, np.ndarray]] | None = None
    #: the per-sample columns that are scores, each with its direction and the metrics it
    #: is behind, compared item by item between two versions (``vlgate diff``, the
    #: report); the first is the one whose items ``vlgate diff`` lists
    item_scores: tuple[ItemScore, ...] = ()
    #: the record fields shown beside a compared item (question, options, answers, images)
    item_fields: tuple[str, ...] = ()
    #: some of ``item_fields`` shown as a table of lines, both versions side by side
    item_lines: ItemLines | None = None
    #: an item's pictures where its record names no file (an lmms-eval doc's, rebuilt by
    #: the task's own code); none where they cannot be rebuilt as they were evaluated
    item_images: Callable[[Record], Sequence[PIL.Image.Image]] | None = None
    #: a suite-defined evaluator's scoring, ``(what, digest)``: what defines it (``lmms-eval
    #: task 'pope'``) and the digest of what its metrics are computed with (an lmms-eval
    #: task's metric list, aggregations and ``process_results``, each function by its
    #: source's sha256). A process keeps one definition a name: another suite may define the
    #: name again only with the same digest (``registry.define``)
    scored_by: tuple[str, str] | None = None
    #: what its section of a version's report shows, drawn from that version's records
    report_section: Callable[[SectionInputs], Section] | None = None
    #: the figure drawn once per model across its versions, shown in its section and on the leaderboard
    versions_figure: VersionsFigure | None = None

    def metric(self, name: str) -> Metric | None:
        """The definition of a concrete metric name (``gc@5`` → ``gc@{T}``), common ones included."""
        for metric in (*self.metrics, *COMMON_METRICS):
            if metric.matches(name):
                return metric
        return None

    @property
    def item_score_columns(self) -> tuple[str, ...]:
        return tuple(score.column for score in self.item_scores)

    def item_score(self, column: str) -> ItemScore:
        """The item score of ``column``; KeyError when it is none."""
        for score in self.item_scores:
            if score.column == column:
                return score
        raise KeyError(f"{column} is not an item score of {self.name}")

    def item_scores_behind(self, metric: str) -> list[str]:
        """The item scores behind a concrete metric name of this evaluator (``acc`` →
        ``correct``; ``gc@5`` → ``gc``): those that declare its metric."""
        spec = self.metric(metric)
        return [score.column for score in self.item_scores if spec is not None and spec.name in score.metrics]

    def headline(self, metrics: Iterable[str]) -> list[str]:
        """The headline metrics among the names in ``metrics``, in the definition's order."""
        names = [name for name in metrics if isinstance(name, str)]
        return [name for metric in self.metrics if metric.headline for name in names if metric.matches(name)]

    def protocol(self, name: str | None = None) -> protocol_tables.Protocol[Any]:
        """The protocol called ``name`` (None: the default); UnknownProtocolError otherwise."""
        return protocol_tables.choose(self.protocols, self.name, name)

    def required_metrics(self, values: dict[str, int]) -> list[Metric]:
        return [metric for metric in self.metrics if metric.required and (not metric.templated or values)]

    def check(self) -> None:
        """That the definition says what its functions do, on its example records; raises
        :class:`DefinitionError` naming every disagreement. ``per_sample``'s columns are the
        declared ``columns``; the metrics ``aggregate`` (and ``feature_metrics``) return are
        the declared ``metrics`` and nothing else; ``resampled`` covers exactly those of
        ``aggregate``'s metrics that have a direction, equals ``aggregate`` on the records
        as they are (each row weighted once) and takes ``LeaveOneOut`` weights (the gate's
        jackknife) as it takes them written out. Checking all this when an evaluator is
        registered is what lets one definition be the only place a metric is named."""
        problems: list[str] = []
        valid = schemas.validate_file(self.schema, self.name, self.example)
        frame = self.per_sample(valid.arrays)
        produced = [str(column) for column in frame.columns]
        declared = [column.name for spec in self.columns for column in spec.expand(produced)]
        if sorted(produced) != sorted(declared):
            problems += _differences("per_sample's column", produced, declared)
        aggregated = self.aggregate(frame)
        metrics = dict(aggregated)
        if self.feature_metrics is not None:
            if self.example_features is None:
                problems.append("it has feature_metrics but no example_features to check them on")
            else:
                metrics |= self.feature_metrics(frame, load_features(self.example_features, len(valid), valid.column("id")))
        values = self.template_values(frame, metrics)
        for score in self.item_scores:
            if score.column not in produced:
                problems.append(f"its item score {score.column!r} is not a per_sample column")
            problems += [f"its item score {score.column!r} is behind {name!r}, which it does not declare" for name in score.metrics if name not in {m.name for m in self.metrics}]
        undeclared = [name for name in metrics if self.metric(name) is None]
        problems += [f"its functions return the metric {name!r}, which it does not declare" for name in undeclared]
        common = {metric.name for metric in COMMON_METRICS}
        for metric in self.metrics:
            if metric.name not in common and not any(metric.matches(name) for name in metrics):
                problems.append(f"it declares the metric {metric.resolve(values) if metric.templated and values else metric.name!r} but its functions do not return it")
        if self.resampled is not None:
            directed = [name for name in aggregated if (spec := self.metric(name)) is not None and spec.direction is not None]
            resampled = self.resampled(frame, np.ones((1, len(frame))))
            problems += _differences("resampled's metric", list(resampled), directed)
            for name in set(resampled) & set(directed):
                once = float(np.asarray(resampled[name])[0])
                value = aggregated[name]
                plain = math.nan if value is None else float(value)  # undefined: None here, NaN there
                if not (math.isclose(once, plain, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(once) and math.isnan(plain))):
                    problems.append(f"resampled gives {name} = {once!r} on the records weighted once, aggregate {aggregated[name]!r}")
            problems += self._leave_one_out_problems(frame, set(resampled) & set(directed))
        if problems:
            raise DefinitionError(f"evaluator {self.name!r} (checked on {self.example.name}): " + "; ".join(problems))

    def _leave_one_out_problems(self, frame: pd.DataFrame, names: set[str]) -> list[str]:
        """``resampled`` on ``LeaveOneOut`` weights (the gate's jackknife) against the same
        n × n weights written out, for the metrics in ``names``."""
        assert self.resampled is not None
        n = len(frame)
        try:
            left_out = self.resampled(frame, LeaveOneOut(n))
        except (TypeError, AttributeError, ValueError) as error:
            return [f"resampled does not take LeaveOneOut weights ({type(error).__name__}: {error}); weighted_mean and weighted_ratio take them"]
        written_out = self.resampled(frame, 1.0 - np.eye(n))
        problems = []
        for name in sorted(names):
            if name not in left_out:
                problems.append(f"resampled gives no {name} on LeaveOneOut weights")
                continue
            fast, dense = np.asarray(left_out[name], dtype=float), np.asarray(written_out[name], dtype=float)
            if fast.shape != dense.shape or not np.allclose(fast, dense, rtol=1e-9, atol=1e-12, equal_nan=True):
                problems.append(f"resampled gives {name} on LeaveOneOut weights {fast!r}, on the same weights written out {dense!r}")
        return problems


def imported_when_called(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported the first time it is called: what a definition names from its
    runner and figures, so that registering (and scoring) loads neither a model's code nor
    matplotlib."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__module__, call.__name__, call.__qualname__ = module, name, name
    return call


class DefinitionError(ValueError):
    """An evaluator's definition disagrees with its own functions."""


def _differences(what: str, produced: Sequence[str], declared: Sequence[str]) -> list[str]:
    extra, missing = sorted(set(produced) - set(declared)), sorted(set(declared) - set(produced))
    return [f"{what} {name!r} is not declared" for name in extra] + [f"the declared {what} {name!r} is missing" for name in missing]
