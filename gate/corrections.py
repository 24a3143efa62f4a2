"""The multiplicity correction across a policy's comparisons (``correction:`` of the
policy): how the comparisons' p-values of "worse than the limit" are adjusted together
by the fixed-sample gate, which of them fail at a look of a sequential design, and the
level a "worse" finding is held to (what an inconclusive comparison's estimate of the
samples that would decide, and ``vlgate plan``, use). One object per name, chosen from the
policy (:func:`correction`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vlgate.evaluators.metrics import sequential
from vlgate.evaluators.metrics.bootstrap import bonferroni_adjusted, holm_adjusted
from vlgate.evaluators.metrics.sequential import Spending


@dataclass(frozen=True)
class Correction:
    """A correction by name; the methods' defaults split α evenly across the comparisons
    (Bonferroni's levels), which each correction keeps or refines."""

    name: str

    def adjusted(self, p_values: list[float]) -> list[float]:
        """The fixed-sample gate's p-values, adjusted across the ``p_values`` tested together."""
        return list(p_values)

    def fail_level(self, alpha: float, family: int) -> float:
        """The level a "worse" finding among ``family`` comparisons is held to after the
        correction (Bonferroni's, which Holm's step-down never asks more than)."""
        return alpha / family if family else alpha

    def failed_at_look(self, p_below: Sequence[float], alpha: float, fractions: Sequence[float], look: int, spending: Spending) -> np.ndarray:
        """Which comparisons are shown worse than their limits at ``look`` of a design with
        looks at ``fractions``: each p-value against the look's nominal level of α spent
        over the looks, α split across them first (:meth:`fail_level`)."""
        level = self.fail_level(alpha, len(p_below))
        return np.asarray(p_below) <= sequential.nominal_levels(fractions, level, spending)[look]


@dataclass(frozen=True)
class Uncorrected(Correction):
    """No correction (``none``): each comparison at the whole α."""

    name: str = "none"

    def fail_level(self, alpha: float, family: int) -> float:
        return alpha


@dataclass(frozen=True)
class Bonferroni(Correction):
    """Bonferroni: each of m comparisons at α/m."""

    name: str = "bonferroni"

    def adjusted(self, p_values: list[float]) -> list[float]:
        return bonferroni_adjusted(p_values)


@dataclass(frozen=True)
class Holm(Correction):
    """Holm's step-down (the policy's default): never less powerful than Bonferroni's."""

    name: str = "holm"

    def adjusted(self, p_values: list[float]) -> list[float]:
        return holm_adjusted(p_values)

    def failed_at_look(self, p_below: Sequence[float], alpha: float, fractions: Sequence[float], look: int, spending: Spending) -> np.ndarray:
        """Holm's step-down at the look, each step's level spent over the looks
        (``sequential.sequential_holm``)."""
        return sequential.sequential_holm(p_below, alpha, fractions, look, spending)


CORRECTIONS: dict[str, Correction] = {correction.name: correction for correction in (Holm(), Bonferroni(), Uncorrected())}


def correction(name: str) -> Correction:
    """The correction a policy names (``holm``, ``bonferroni`` or ``none``)."""
    return CORRECTIONS[name]
