"""VLind-Bench's record schema (docs/metrics.md#vlind)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import JsonValue

from vlgate.evaluators.records import Record, is_number, shown
from vlgate.evaluators.schemas import Arrays, Problem, Schema, as_list

ANSWER_CODES = {True: 1, False: 0, None: -1}


def _answer_pair_problem(value: JsonValue) -> str | None:
    if not isinstance(value, list) or len(value) != 2:
        return "must be a pair [answer to the true statement, answer to the false one]"
    if any(v not in (True, False, None) or is_number(v) for v in value):
        return f"{shown(value)}: each answer must be true, false or null"
    return None


class VlindSchema(Schema):
    """docs/metrics.md#vlind: ``{"id", "concept", "ck": [a, b], "vp": [a, b], "cb": [a, b], "lp": [[a, b], ...]}``."""


    def structure_problems(self, record: Record) -> Iterator[Problem]:
        concept = record.get("concept")
        if not isinstance(concept, str) or not concept:
            yield ("concept", "missing" if concept is None else "must be a non-empty string")
        for name in ("ck", "vp", "cb"):
            if name not in record:
                yield (name, "missing")
            else:
                problem = _answer_pair_problem(record[name])
                if problem:
                    yield (name, problem)
        lp = record.get("lp")
        if not isinstance(lp, list) or not lp:
            yield ("lp", "missing" if lp is None else "must be a non-empty list of pairs, one per counterfactual image")
        else:
            for index, pair in enumerate(lp):
                problem = _answer_pair_problem(pair)
                if problem:
                    yield ("lp", f"image {index}: {problem}")
                    break

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        code = lambda pair: [ANSWER_CODES[v] for v in pair]
        arrays: Arrays = {name: np.array([code(r[name]) for r in records], dtype=np.int8).reshape(-1, 2) for name in ("ck", "vp", "cb")}
        lp = [as_list(r["lp"]) for r in records]
        arrays["lp"] = np.array([code(pair) for pairs in lp for pair in pairs], dtype=np.int8).reshape(-1, 2)
        arrays["lp_instance"] = np.repeat(np.arange(len(records)), [len(pairs) for pairs in lp])
        return arrays, {}

