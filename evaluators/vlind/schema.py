"""VLind-Bench's record schema (docs/metrics.md#vlind)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vlgate.evaluators.records import is_number, shown
from vlgate.evaluators.schemas import Schema

ANSWER_CODES = {True: 1, False: 0, None: -1}


def _answer_pair_problem(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) != 2:
        return "must be a pair [answer to the true statement, answer to the false one]"
    if any(v not in (True, False, None) or is_number(v) for v in value):
        return f"{shown(value)}: each answer must be true, false or null"
    return None


class VlindSchema(Schema):
    """docs/metrics.md#vlind: ``{"id", "concept", "ck": [a, b], "vp": [a, b], "cb": [a, b], "lp": [[a, b], ...]}``."""


    def structure_problems(self, record):
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

    def arrays(self, records):
        code = lambda pair: [ANSWER_CODES[v] for v in pair]
        arrays: dict[str, np.ndarray] = {name: np.array([code(r[name]) for r in records], dtype=np.int8).reshape(-1, 2) for name in ("ck", "vp", "cb")}
        arrays["lp"] = np.array([code(pair) for r in records for pair in r["lp"]], dtype=np.int8).reshape(-1, 2)
        arrays["lp_instance"] = np.repeat(np.arange(len(records)), [len(r["lp"]) for r in records])
        return arrays, {}

