"""VL-LCM's record schemas: an lcm-mc item (docs/metrics.md#lcm-mc) and an lcm-nb unit
(docs/metrics.md#lcm-nb)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pydantic import JsonValue

from vlgate.evaluators.records import Record, probability_list_problem, probability_matrix_problem, shown
from vlgate.evaluators.schemas import Arrays, FieldCheck, Problem, Schema, as_list, ids_plainly_valid, option_indices, outside, probability_rows, stack

#: The most options one lcm-mc record may have: one letter each, A–Z, as every MC benchmark's
#: prompt letters them. Scoring holds the records as K-wide arrays, so one record with
#: 50,000 options among 20,000 ordinary ones would otherwise ask for gigabytes.
MAX_OPTIONS = 26


class LcmMcSchema(Schema):
    """One VL-LCM multiple-choice item: ``{"id", "p_mc": [K], "p_yes": [K], "answer": int|null, "category"?}``, 2 ≤ K ≤ :data:`MAX_OPTIONS`."""

    def plainly_valid(self, record: Record) -> bool:
        p_mc, p_yes, answer = record.get("p_mc"), record.get("p_yes"), record.get("answer")
        return (
            type(p_mc) is list
            and type(p_yes) is list
            and MAX_OPTIONS >= len(p_mc) == len(p_yes) >= 2
            and (answer is None or (type(answer) is int and 0 <= answer < len(p_mc)))
        )

    def structure_problems(self, record: Record) -> Iterator[Problem]:
        p_mc, p_yes = record.get("p_mc"), record.get("p_yes")
        if not isinstance(p_mc, list) or len(p_mc) < 2:
            yield ("p_mc", "missing" if p_mc is None else "must be a list of K >= 2 option probabilities")
            return
        if len(p_mc) > MAX_OPTIONS:
            yield ("p_mc", f"has {len(p_mc)} options; at most {MAX_OPTIONS} (one letter each, A-Z)")
            return
        if not isinstance(p_yes, list):
            yield ("p_yes", "missing" if p_yes is None else "must be a list of K probabilities")
            return
        if len(p_yes) != len(p_mc):
            yield ("p_yes", f"has {len(p_yes)} entries but p_mc has {len(p_mc)} (K mismatch)")
            return
        answer = record.get("answer")
        if answer is not None and (not isinstance(answer, int) or isinstance(answer, bool) or not 0 <= answer < len(p_mc)):
            yield ("answer", f"unknown label {shown(answer)}: expected an option index 0..{len(p_mc) - 1} or null")

    def columnar_arrays(self, table: pa.Table) -> Arrays | None:
        if not ids_plainly_valid(table):
            return None
        p_mc, p_yes = probability_rows(table, "p_mc"), probability_rows(table, "p_yes")
        if p_mc is None or p_yes is None or p_mc.shape != p_yes.shape or not 2 <= p_mc.shape[1] <= MAX_OPTIONS:
            return None
        answer = option_indices(table, "answer", p_mc.shape[1])
        return None if answer is None else {"p_mc": p_mc, "p_yes": p_yes, "answer": answer}

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        width = max((len(as_list(r["p_mc"])) for r in records), default=2)
        p_mc, p_mc_bad = stack([r["p_mc"] for r in records], width)
        p_yes, p_yes_bad = stack([r["p_yes"] for r in records], width)
        answer = np.array([r.get("answer") if r.get("answer") is not None else -1 for r in records], dtype=np.int64)
        checks: list[tuple[str, FieldCheck]] = [("p_mc", probability_list_problem), ("p_yes", probability_list_problem)]
        masks = [p_mc_bad | outside(p_mc, 0, 1), p_yes_bad | outside(p_yes, 0, 1)]
        return {"p_mc": p_mc, "p_yes": p_yes, "answer": answer}, self._numeric_problems(records, checks, masks)


NB_LABELS: dict[JsonValue, int] = {"c1": 0, "c2": 1}


class LcmNbSchema(Schema):
    """docs/metrics.md#lcm-nb: ``{"id", "p_yes": 2×2, "p_text": 2×2, "p_image": 2×2, "answer": "c1"|"c2"|null}``."""

    matrices = ("p_yes", "p_text", "p_image")

    def structure_problems(self, record: Record) -> Iterator[Problem]:
        for name in self.matrices:
            value = record.get(name)
            if value is None:
                yield (name, "missing")
            elif not (isinstance(value, list) and len(value) == 2 and all(isinstance(row, list) and len(row) == 2 for row in value)):
                yield (name, "must be a 2x2 nested list [[.., ..], [.., ..]]")
        answer = record.get("answer")
        if answer is not None and (not isinstance(answer, str) or answer not in NB_LABELS):
            yield ("answer", f"unknown label {shown(answer)}: expected 'c1', 'c2' or null")

    def arrays(self, records: list[Record]) -> tuple[Arrays, dict[int, Problem]]:
        arrays: Arrays = {}
        checks: list[tuple[str, FieldCheck]] = []
        masks: list[np.ndarray] = []
        for name in self.matrices:
            array, non_numeric = stack([r[name] for r in records])
            arrays[name] = array.reshape(len(records), 2, 2)
            checks.append((name, lambda value: probability_matrix_problem(value, 2, 2)))
            masks.append(non_numeric | outside(arrays[name], 0, 1))
        arrays["answer"] = np.array([NB_LABELS.get(r.get("answer"), -1) for r in records], dtype=np.int64)
        return arrays, self._numeric_problems(records, checks, masks)

