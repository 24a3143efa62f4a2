"""A VL-LCM item as the report's lost and won cards show it: an MC item's options, each
with its label, whether it is the answer, and the probabilities the model gave it; a
NaturalBench unit's two texts with P(yes) on each image. The same lines as the
lowest-P_LC cards (``figures.py``), read from one record."""

from __future__ import annotations

from pydantic import JsonValue

from vlgate.evaluators.definition import ItemLine
from vlgate.evaluators.records import Record


def _number(value: JsonValue) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _numbers(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def option_label(k: int) -> str:
    """The label of an item's k-th option (0-based), as the prompt gives it: (A), (B), …"""
    return f"({chr(65 + k)})"


def mc_item_lines(record: Record) -> list[ItemLine]:
    """An MC-VQA record's options, in order: ``(A) text``, the answer marked (``answer``
    is the 0-based index of the right option), with P_MC and P(yes) of each."""
    p_mc, p_yes = _numbers(record.get("p_mc")), _numbers(record.get("p_yes"))
    options = record.get("options")
    texts = [str(option) for option in options] if isinstance(options, list) and options else [f"option {k + 1}" for k in range(len(p_mc))]
    answer = record.get("answer")
    return [
        ItemLine(f"{option_label(k)} {text}", isinstance(answer, int) and not isinstance(answer, bool) and answer == k, (_number(p_mc[k]) if k < len(p_mc) else None, _number(p_yes[k]) if k < len(p_yes) else None))
        for k, text in enumerate(texts)
    ]


def nb_item_lines(record: Record) -> list[ItemLine]:
    """A NaturalBench unit's texts T1 and T2, each with P(yes) on image V1 and on V2
    (``p_yes[i][j]``: image i, text j)."""
    rows = [_numbers(row) for row in _numbers(record.get("p_yes"))]
    texts = record.get("texts")
    listed = [str(text) for text in texts] if isinstance(texts, list) else ["", ""]

    def p_yes(image: int, text: int) -> float | None:
        return _number(rows[image][text]) if image < len(rows) and text < len(rows[image]) else None

    return [ItemLine(f"T{j + 1}: {text}", False, (p_yes(0, j), p_yes(1, j))) for j, text in enumerate(listed)]
