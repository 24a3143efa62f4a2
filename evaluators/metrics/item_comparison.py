"""Two versions item by item: what a candidate lost and won against the champion.

The items compared are those both versions' records hold, joined on the record id, as the
gate's paired comparisons join them (``score_test.paired_score``), in the
candidate's order. Every numeric per-sample column both sides have is compared on its own
(an item whose value is missing on either side, a NaN, is left out of that column only):

* a 0/1 column (``correct``, ``reliable``, VLind-Bench's ``lp``, ...) gives the four cells
  of the paired table: both right, **lost** (champion 1, candidate 0), **won** (champion 0,
  candidate 1), both wrong. Lost and won are the discordant pairs the paired comparison of
  that column's mean turns on;
* any other numeric column (``p_lc``, GenCeption's ``gc``, ...) gives the change of every
  item, largest drop first.

"Lost" and "won" follow each column's direction (``directions``; higher is better unless
said otherwise): for a column where lower is better (a 0/1 column whose 1 is the bad case,
a distance) an item is lost where its value rose. A numeric column that is not a score
(``chosen``, an option index) compares as any other: the caller picks the columns that are
scores (``columns``), with their directions from the evaluator's definition. With the
items' categories, each column is also broken down by category. Pure pandas: no model,
MLflow or service code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

CANDIDATE, CHAMPION, CHANGE = "candidate", "champion", "change"
Direction = Literal["higher", "lower"]


@dataclass(frozen=True)
class ColumnComparison:
    """One per-sample column compared. ``items``: ``id``, ``category`` (None without
    categories), ``candidate``, ``champion``, ``change`` (candidate − champion), one row per
    item both sides have a value for, the largest loss first (the largest drop, or rise
    where lower is better; ties in the candidate's order)."""

    column: str
    kind: Literal["binary", "continuous"]
    items: pd.DataFrame
    direction: Direction = "higher"

    @property
    def n_shared(self) -> int:
        return len(self.items)

    @property
    def gain(self) -> pd.Series:
        """Each item's change the better way positive (``change``, negated where lower is better)."""
        return self.items[CHANGE] if self.direction == "higher" else -self.items[CHANGE]

    @property
    def lost(self) -> pd.DataFrame:
        """Items the champion had (1, or a better value) and the candidate does not, largest loss first."""
        return self.items[self.gain < 0]

    @property
    def won(self) -> pd.DataFrame:
        """Items the candidate gained, largest gain first."""
        return self.items[self.gain > 0].iloc[::-1]

    def cells(self) -> dict[str, int]:
        """A 0/1 column's paired table: both_right, lost, won, both_wrong (right: 1, or 0
        where lower is better)."""
        if self.kind != "binary":
            raise ValueError(f"{self.column} is not a 0/1 column; its items carry their change instead")
        good = 1 if self.direction == "higher" else 0
        candidate, champion = self.items[CANDIDATE].to_numpy() == good, self.items[CHAMPION].to_numpy() == good
        return {
            "both_right": int(np.sum(candidate & champion)),
            "lost": int(np.sum(~candidate & champion)),
            "won": int(np.sum(candidate & ~champion)),
            "both_wrong": int(np.sum(~candidate & ~champion)),
        }

    def by_category(self) -> pd.DataFrame:
        """Per category: ``n_shared``, ``lost``, ``won`` and ``mean_change``, categories in
        name order (an item without one is under None)."""
        grouped = self.items.assign(gain=self.gain).groupby("category", dropna=False, sort=False)
        table = pd.DataFrame(
            {
                "n_shared": grouped.size(),
                "lost": grouped["gain"].apply(lambda gain: int((gain < 0).sum())),
                "won": grouped["gain"].apply(lambda gain: int((gain > 0).sum())),
                "mean_change": grouped[CHANGE].mean(),
            }
        )
        table.index = pd.Index([None if pd.isna(name) else name for name in table.index], dtype=object, name="category")
        return table.sort_index(key=lambda index: index.map(lambda name: (name is None, str(name))))


def shared_items(candidate: pd.DataFrame, champion: pd.DataFrame) -> pd.DataFrame:
    """The rows of the ids both per-sample frames hold, side by side (columns suffixed
    ``_candidate`` and ``_champion``), in the candidate's order."""
    return candidate.merge(champion, on="id", how="inner", suffixes=("_candidate", "_champion"), sort=False)


def is_binary(values: pd.Series) -> bool:
    """A column of booleans, or of numbers that are all 0 or 1 (NaN aside)."""
    present = values.dropna()
    if values.dtype == bool:
        return True
    return pd.api.types.is_numeric_dtype(values) and bool(present.isin([0, 1]).all())


def compare_column(shared: pd.DataFrame, column: str, categories: pd.Series | None = None, direction: Direction = "higher") -> ColumnComparison:
    """``column`` of :func:`shared_items`'s frame compared item by item (see the module docstring)."""
    candidate = shared[f"{column}_candidate"].astype(float)
    champion = shared[f"{column}_champion"].astype(float)
    present = candidate.notna() & champion.notna()
    items = pd.DataFrame(
        {
            "id": shared["id"][present].to_numpy(),
            "category": shared["id"][present].map(categories).to_numpy() if categories is not None else None,
            CANDIDATE: candidate[present].to_numpy(),
            CHAMPION: champion[present].to_numpy(),
        }
    )
    items[CHANGE] = items[CANDIDATE] - items[CHAMPION]
    worst_first = items[CHANGE] if direction == "higher" else -items[CHANGE]
    items = items.iloc[np.argsort(worst_first.to_numpy(), kind="stable")].reset_index(drop=True)
    binary = is_binary(shared[f"{column}_candidate"]) and is_binary(shared[f"{column}_champion"])
    return ColumnComparison(column, "binary" if binary else "continuous", items, direction)


def compare_items(
    candidate: pd.DataFrame,
    champion: pd.DataFrame,
    categories: pd.Series | None = None,
    columns: list[str] | None = None,
    directions: dict[str, Direction] | None = None,
) -> dict[str, ColumnComparison]:
    """``columns`` (default: every numeric per-sample column both frames have, ``id``
    aside), compared on the items both hold. ``categories`` maps an id to its category (the
    evaluator's breakdown field); ``directions`` a column to which way is better (default
    higher)."""
    shared = shared_items(candidate, champion)
    numeric = [
        name
        for name in candidate.columns
        if name != "id" and name in champion.columns and pd.api.types.is_numeric_dtype(candidate[name]) and pd.api.types.is_numeric_dtype(champion[name])
    ]
    unknown = sorted(set(columns or ()) - set(numeric))
    if unknown:
        raise ValueError(f"not a numeric per-sample column of both versions: {', '.join(unknown)} (they have {', '.join(numeric)})")
    return {name: compare_column(shared, name, categories, (directions or {}).get(name, "higher")) for name in (columns if columns is not None else numeric)}
