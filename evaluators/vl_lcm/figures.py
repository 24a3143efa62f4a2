"""VL-LCM's report section: the response distribution across versions (paper Fig. 2) and
the samples with the lowest P_LC (paper App. H), with what the model was asked and the
probabilities it gave."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import JsonValue

from vlgate.evaluators.figures import Section, SectionInputs, VersionsFigure
from vlgate.evaluators.schemas import as_list

#: Paper Fig. 2's colours: LCM blue, abstention orange, confidence green, overconfidence brown.
RESPONSE_COLOURS = {"lcm": "tab:blue", "abstention": "tab:orange", "confidence": "tab:green", "overconfidence": "tab:brown"}

LOW_P_LC_EXAMPLES = 5


def response_distribution_figure(table: pd.DataFrame, prefix: str = "lcm-mc", title: str = "") -> Figure:
    """Paper Fig. 2: per version (sorted by increasing LCM) the LCM score beside the
    abstention / confidence / overconfidence rates of its joint yes/no answers."""
    columns = [f"{prefix}/{name}" for name in RESPONSE_COLOURS]
    rows = table[[c for c in columns if c in table.columns]].dropna().sort_values(f"{prefix}/lcm")
    figure = Figure(figsize=(max(4.8, 1.3 * len(rows) + 2), 3.8))
    axes = figure.add_subplot()
    positions = np.arange(len(rows))
    width = 0.8 / len(RESPONSE_COLOURS)
    for n, (name, colour) in enumerate(RESPONSE_COLOURS.items()):
        column = f"{prefix}/{name}"
        if column in rows:
            axes.bar(positions + (n - 1.5) * width, rows[column].to_numpy(float), width, label=name, color=colour)
    axes.set_xticks(positions, [f"v{v}" for v in rows.index])
    axes.set_ylim(0, 1)
    axes.set_ylabel("score / rate")
    axes.set_title(title or f"{prefix}: LCM and the response distribution (sorted by LCM)")
    axes.legend(fontsize=8, ncols=4, loc="upper left")
    return figure


def _rows(value: JsonValue) -> list[list[JsonValue]]:
    """A validated record's 2×2 matrix as its rows."""
    return [as_list(row) for row in as_list(value)]


def _listed(value: JsonValue, default: list[JsonValue]) -> list[JsonValue]:
    """A record's list field, ``default`` where it is missing, empty or no list."""
    return value if isinstance(value, list) and value else default


def low_p_lc_examples(inputs: SectionInputs, count: int = LOW_P_LC_EXAMPLES) -> list[dict[str, JsonValue]]:
    """Paper App. H: the samples with the lowest P_LC, with what the model was asked and
    the probabilities it gave (MC-VQA records carry ``p_mc``, NaturalBench units the 2×2
    matrices)."""
    examples: list[dict[str, JsonValue]] = []
    for row in inputs.samples.nsmallest(count, "p_lc").itertuples():
        record = inputs.by_id.get(str(row.id), {})
        lines: list[JsonValue]
        if "p_mc" in record:
            p_mc, p_yes = as_list(record["p_mc"]), as_list(record["p_yes"])
            options = _listed(record.get("options"), [f"option {k}" for k in range(len(p_mc))])
            lines = [
                {"text": f"({chr(65 + k)}) {option}", "p_mc": p_mc[k], "p_yes": p_yes[k], "answer": record.get("answer") == k, "chosen": int(row.chosen) == k}
                for k, option in enumerate(options)
            ]
            images = [inputs.thumbnail(inputs.artifact(record.get("image")))]
            prompt = record.get("question", "")
        else:
            labels = ["T1", "T2"]
            p_yes_rows, p_image_rows = _rows(record["p_yes"]), _rows(record["p_image"])
            lines = [
                {"text": f"{labels[j]}: {text}", "p_yes": [p_yes_rows[i][j] for i in range(2)], "p_image": p_image_rows[j], "answer": False, "chosen": False}
                for j, text in enumerate(_listed(record.get("texts"), ["", ""]))
            ]
            images = [inputs.thumbnail(inputs.artifact(path)) for path in _listed(record.get("images", []), [])]
            # docs/metrics.md#lcm-nb: c1 = (V1,T1) and (V2,T2) are the "yes" pairs, c2 = (V1,T2) and (V2,T1)
            label = {"c1": "label c1: yes-pairs (V1,T1), (V2,T2)", "c2": "label c2: yes-pairs (V1,T2), (V2,T1)"}.get(str(record.get("answer")), "unlabelled")
            chosen_text = "; ".join(f"on V{i + 1}, P(T1) = {p_text[0]:.3f}" for i, p_text in enumerate(_rows(record["p_text"])[:2])) if "p_text" in record else ""
            prompt = f"{label} · {chosen_text}"
        examples.append({"id": row.id, "p_lc": float(row.p_lc), "prompt": prompt, "lines": lines, "images": [i for i in images if i]})
    return examples


def section(inputs: SectionInputs) -> Section:
    """An lcm-mc or lcm-nb section: the lowest-P_LC samples (the response distribution is a
    figure across versions, drawn once per model)."""
    return Section(examples=tuple(low_p_lc_examples(inputs)))


RESPONSE_DISTRIBUTION = VersionsFigure(
    "response-distribution", "LCM and the yes/no response distribution per version, sorted by LCM (paper Fig. 2)", response_distribution_figure
)
