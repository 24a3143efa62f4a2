"""DeCC's record schema (docs/metrics.md#decc)."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pydantic import JsonValue

from vlgate.evaluators.decc.metrics import normalise_answer
from vlgate.evaluators.records import Record, is_number
from vlgate.evaluators.schemas import Arrays, Problem, Schema


def _answer_text_problem(value: JsonValue) -> str | None:
    if isinstance(value, str) or is_number(value):
        return None
    return f"must be a string answer, got {type(value).__name__}"


class DeccSchema(Schema):
    """docs/metrics.md#decc: ``{"id", "direct", "v1", "l1", "v2"?, "l2"?, "answer"?}``."""


    def structure_problems(self, record: Record) -> Iterator[Problem]:
        for name in ("direct", "v1", "l1"):
            if record.get(name) is None:
                yield (name, "missing")
            else:
                problem = _answer_text_problem(record[name])
                if problem:
                    yield (name, problem)
        for name in ("v2", "l2", "answer"):
            if record.get(name) is not None:
                problem = _answer_text_problem(record[name])
                if problem:
                    yield (name, problem)
        has_v2, has_l2 = record.get("v2") is not None, record.get("l2") is not None
        if has_v2 != has_l2:
            yield ("l2" if has_v2 else "v2", "the second round has both agents' answers or neither")

    def set_problems(self, records: list[Record]) -> dict[int, Problem]:
        problems: dict[int, Problem] = {}
        for row, r in enumerate(records):
            direct = normalise_answer(str(r["direct"]))
            first_round_disagrees = (normalise_answer(str(r["v1"])) == direct) != (normalise_answer(str(r["l1"])) == direct)
            if first_round_disagrees and r.get("v2") is None:
                problems[row] = ("v2", "required: the first round's agents disagree about the direct answer, so the second round must have run")
        return problems

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        column = lambda name: pd.Series([None if r.get(name) is None else str(r[name]) for r in records], dtype=object)
        return {name: column(name) for name in ("direct", "v1", "l1", "v2", "l2", "answer")}, {}

