"""Two versions' outputs of one evaluator, item by item: what ``vlgate diff`` prints.

Each of the evaluator's item scores (``EvaluatorDefinition.item_scores``: per-sample columns,
each with the direction that is better) is compared on the items both versions hold
(:mod:`vlgate.evaluators.metrics.item_comparison`: a 0/1 score's lost and won items, a
continuous one's changes), and each item listed carries, from both versions' records, the
fields people read to see what happened (``item_fields``: the question, the options, both
answers, the images).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

import pandas as pd
from pydantic import JsonValue

from vlgate.evaluators import registry
from vlgate.evaluators.metrics.item_comparison import ColumnComparison, compare_items
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.records import Record


class NothingToCompareError(ValueError):
    """A version has no records of the evaluator (it did not run, or failed)."""


class ComparedField(TypedDict):
    """One record field of a listed item, as both versions' records have it (None where absent)."""

    candidate: JsonValue
    champion: JsonValue


class ListedItem(TypedDict):
    """An item the candidate lost or won on a score: its values and change, and the fields people read."""

    id: str
    #: the item's breakdown category (None, or NaN, where it has none)
    category: object
    candidate: float
    champion: float
    change: float
    fields: dict[str, ComparedField]


class ScoreSummary(TypedDict, total=False):
    """One item score compared: a 0/1 score's four cells, a continuous one's ``mean_change``."""

    kind: Literal["binary", "continuous"]
    n_shared: int
    both_right: int
    lost: int
    won: int
    both_wrong: int
    mean_change: float | None


class DiffJson(TypedDict):
    """An :class:`EvaluatorDiff` as ``vlgate diff --json`` prints it."""

    evaluator: str
    scores: dict[str, ScoreSummary]
    listed_score: str
    lost: list[ListedItem]
    won: list[ListedItem]


@dataclass(frozen=True)
class EvaluatorDiff:
    """One evaluator's item scores compared, and both versions' records by id."""

    evaluator: str
    scores: dict[str, ColumnComparison]
    candidate_records: dict[str, Record]
    champion_records: dict[str, Record]
    #: the score whose items are listed (the evaluator's first item score unless chosen)
    listed_score: str

    def listed(self, which: str = "lost", limit: int | None = 10, score: str | None = None) -> list[ListedItem]:
        """The items the candidate ``lost`` (largest drop first) or ``won`` on ``score``
        (default: the listed score), each with both versions' values and record fields."""
        comparison = self.scores[score or self.listed_score]
        rows = comparison.lost if which == "lost" else comparison.won
        fields = registry.get(self.evaluator).item_fields
        listed: list[ListedItem] = []
        for row in rows.head(limit).itertuples(index=False):
            mine, theirs = self.candidate_records.get(str(row.id), {}), self.champion_records.get(str(row.id), {})
            listed.append(
                {
                    "id": row.id,
                    "category": row.category,
                    "candidate": row.candidate,
                    "champion": row.champion,
                    "change": row.change,
                    "fields": {name: {"candidate": mine.get(name), "champion": theirs.get(name)} for name in fields if name in mine or name in theirs},
                }
            )
        return listed

    def first_score_lost(self) -> str:
        """The first item score on which the candidate lost any item (the listed score when none)."""
        return next((name for name, comparison in self.scores.items() if len(comparison.lost)), self.listed_score)

    def scores_behind(self, metrics: Iterable[str]) -> list[str]:
        """The item scores behind the evaluator's metrics ``metrics`` (concrete names, e.g.
        those of the gate's failing checks), in the order the metrics come, each once."""
        definition = registry.get(self.evaluator)
        behind = [score for metric in metrics for score in definition.item_scores_behind(metric) if score in self.scores]
        return list(dict.fromkeys(behind))

    def listed_scores(self, failing: Iterable[str] = ()) -> list[str]:
        """The item scores whose lost items are worth listing, in order: those behind the
        ``failing`` metrics (the gate's failing checks on this evaluator), then the first
        score that lost any item, when it is not one of them."""
        scores = self.scores_behind(failing)
        first = self.first_score_lost()
        return scores if first in scores else [*scores, first]

    def summary(self) -> dict[str, ScoreSummary]:
        """Per score: the items compared and, for a 0/1 score, its four cells; for a
        continuous one the mean change and the items that fell and rose."""
        table: dict[str, ScoreSummary] = {}
        for name, comparison in self.scores.items():
            entry: ScoreSummary = {"kind": comparison.kind, "n_shared": comparison.n_shared}
            if comparison.kind == "binary":
                cells = comparison.cells()
                entry |= {"both_right": cells["both_right"], "lost": cells["lost"], "won": cells["won"], "both_wrong": cells["both_wrong"]}
            else:
                entry |= {"lost": len(comparison.lost), "won": len(comparison.won), "mean_change": float(comparison.items["change"].mean()) if comparison.n_shared else None}
            table[name] = entry
        return table

    def as_dict(self, limit: int | None = 10) -> DiffJson:
        return {
            "evaluator": self.evaluator,
            "scores": self.summary(),
            "listed_score": self.listed_score,
            "lost": self.listed("lost", limit),
            "won": self.listed("won", limit),
        }


def diff_outputs(
    candidate: EvaluatorOutput, champion: EvaluatorOutput, category: str | None = None, listed: str | None = None, names: tuple[str, str] = ("candidate", "champion")
) -> EvaluatorDiff:
    """``candidate`` against ``champion`` on one evaluator; ``category`` keeps the items of
    that breakdown category (the evaluator's ``group_field``) alone; ``listed`` is the item
    score whose items are listed (default: the first). ``names`` name the two versions in
    the error raised when one of them has no records."""
    evaluator = candidate.evaluator
    definition = registry.get(evaluator)
    columns = definition.item_score_columns
    if not columns:
        raise NothingToCompareError(f"{evaluator} has no per-item score to compare item by item")
    if listed is not None and listed not in columns:
        raise NothingToCompareError(f"{listed} is not an item score of {evaluator} (it has {', '.join(columns)})")
    for name, output in zip(names, (candidate, champion)):
        if output.samples is None or output.error:
            raise NothingToCompareError(f"{name} has no {evaluator} records" + (f" ({output.error})" if output.error else ""))
    categories = _categories(definition.group_field, candidate.records, champion.records)
    assert candidate.samples is not None and champion.samples is not None  # checked above
    # ids as the records' keys are: a data set may number its items
    mine, theirs = (samples.assign(id=samples["id"].astype(str)) for samples in (candidate.samples, champion.samples))
    if category is not None:
        if definition.group_field is None:
            raise NothingToCompareError(f"{evaluator} records have no category to choose from")
        known = sorted({str(name) for name in categories.dropna()})
        if category not in known:
            where = f"they are in {', '.join(known)}" if known else f"the records name no {definition.group_field}"
            raise NothingToCompareError(f"no {evaluator} item of either version is in the {definition.group_field} {category!r} ({where})")
        keep = set(categories[categories == category].index)
        mine, theirs = mine[mine["id"].isin(keep)], theirs[theirs["id"].isin(keep)]
    directions = {score.column: score.direction for score in definition.item_scores}
    scores = compare_items(mine, theirs, categories if definition.group_field else None, columns=list(columns), directions=directions)
    return EvaluatorDiff(evaluator, scores, _by_id(candidate.records), _by_id(champion.records), listed or columns[0])


def compare_outputs(candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput]) -> tuple[dict[str, EvaluatorDiff], dict[str, str]]:
    """Every evaluator of ``candidate`` against the champion's, as the gate pairs them:
    the diffs of those both versions ran under one protocol, and for each other evaluator
    of the candidate why it was not compared."""
    diffs: dict[str, EvaluatorDiff] = {}
    skipped: dict[str, str] = {}
    for evaluator, mine in candidate.items():
        theirs = champion.get(evaluator)
        if theirs is None:
            skipped[evaluator] = f"the champion has no {evaluator} output"
        elif mine.protocol != theirs.protocol:
            skipped[evaluator] = f"not comparable: asked under protocol {mine.protocol}, the champion under {theirs.protocol}"
        else:
            try:
                diffs[evaluator] = diff_outputs(mine, theirs)
            except NothingToCompareError as error:  # an evaluator that failed on either side
                skipped[evaluator] = str(error)
    return diffs, skipped


def _readable(value: JsonValue) -> str:
    """A field's value as a person reads it: numbers to 3 digits, at any depth of lists
    (a 2×2 matrix of probabilities); a list of texts as the texts, ``·`` between them."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list) and value and all(isinstance(entry, str) for entry in value):
        return " · ".join(str(entry) for entry in value)
    if isinstance(value, list):
        return "[" + ", ".join(_readable(entry) for entry in value) + "]"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def field_text(value: JsonValue, width: int = 100) -> str:
    """A record field on one line (:func:`_readable`), cut at ``width`` characters."""
    text = _readable(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _by_id(records: Sequence[Record]) -> dict[str, Record]:
    return {str(record.get("id")): record for record in records}


def _categories(field: str | None, *record_sets: Sequence[Mapping[str, JsonValue]]) -> pd.Series:
    """id → the record's breakdown category (the candidate's where both name one)."""
    found: dict[str, JsonValue] = {}
    if field is not None:
        for records in reversed(record_sets):
            found |= {str(record.get("id")): record.get(field) for record in records}
    return pd.Series(found, dtype=object)
