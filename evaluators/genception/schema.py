"""GenCeption's record schema (docs/metrics.md#genception)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from vlgate.evaluators.records import Record, probability_list_problem
from vlgate.evaluators.schemas import Arrays, FieldCheck, Problem, Schema, as_list, outside, stack

#: How far past ±1 a cosine similarity may lie from floating-point error alone: the
#: reference pipeline's cosine of an image's features with themselves gives
#: 1.0000000000000009 in float64, and float32 features land up to about 1e-7 out. Such a
#: value is taken as the ±1 it is (clipped); anything further out is refused.
SIMILARITY_ROUNDING = 1e-6


class GenceptionSchema(Schema):
    """A GenCeption record: ``{"id", "category", "s": [s1, ..., sT]}``, the cosine similarity
    of each iteration's image to the seed image, in [−1, 1] within
    :data:`SIMILARITY_ROUNDING` (then clipped)."""


    def structure_problems(self, record: Record) -> Iterator[Problem]:
        category = record.get("category")
        if not isinstance(category, str) or not category:
            yield ("category", "missing" if category is None else "must be a non-empty string")
        s = record.get("s")
        if not isinstance(s, list) or not s:
            yield ("s", "missing" if s is None else "must be a non-empty list of similarities s_1..s_T")
        descriptions = record.get("descriptions")
        if descriptions is not None and not (isinstance(descriptions, list) and all(isinstance(text, str) for text in descriptions)):
            yield ("descriptions", "must be a list of strings, the model's description at each iteration")

    def set_problems(self, records: list[Record]) -> dict[int, Problem]:
        lengths = [len(as_list(r["s"])) for r in records]
        if not lengths:
            return {}
        expected = max(set(lengths), key=lengths.count)  # the most common T is taken as the set's T
        # One T per set, by choice: the released gc_score(n_iter=T) cuts longer chains to T,
        # drops chains shorter than T-1, and scores a chain of T-1 as GC@(T-1) (it compares
        # T with the similarity list that starts with the seed's 1.0), so a set mixing
        # lengths gets a headline that is no GC@T of anything
        return {
            row: ("s", f"has T={length} iterations but the other records have T={expected}: score one T per set (cut longer chains to their first {expected})")
            for row, length in enumerate(lengths)
            if length != expected
        }

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        s, non_numeric = stack([r["s"] for r in records])
        low, high = -1.0 - SIMILARITY_ROUNDING, 1.0 + SIMILARITY_ROUNDING
        checks: list[tuple[str, FieldCheck]] = [("s", lambda value: probability_list_problem(value, low=low, high=high))]
        problems = self._numeric_problems(records, checks, [non_numeric | outside(s, low, high)])
        s = np.clip(s, -1.0, 1.0)
        # the first description (of the seed image) where the record keeps the chain's texts
        first = [as_list(r["descriptions"])[0] if r.get("descriptions") else None for r in records]
        return {"s": s, "category": np.array([r["category"] for r in records], dtype=object), "description": np.array(first, dtype=object)}, problems

