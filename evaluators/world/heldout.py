"""Held-out accuracy of a world VLM on the world's MC and yes/no items: the check
that a trained version reads the image and an untrained one does not."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.base import ChoiceRequest, VisionLanguageBackend
from vlgate.evaluators.loaders.items import open_image


def held_out_requests(data: Path) -> list[tuple[str, ChoiceRequest, int]]:
    """(group, request, index of the right option) for every MC item ("mc/CATEGORY") and
    yes/no item ("yesno") of a built world's data folder, in the evaluators' prompt formats."""
    rows = []
    for row in map(json.loads, (data / "mc" / "items.jsonl").read_text().splitlines()):
        image = open_image(data / "mc" / row["image"], row["id"], "image")
        letters = tuple(prompts.OPTION_LETTERS[: len(row["options"])])
        rows.append((f"mc/{row['category']}", ChoiceRequest((image,), prompts.mc_prompt(row["question"], row["options"]), letters), row["answer"]))
    for row in map(json.loads, (data / "yesno" / "items.jsonl").read_text().splitlines()):
        image = open_image(data / "yesno" / row["image"], row["id"], "image")
        request = ChoiceRequest((image,), f"{row['question']} {prompts.YES_NO_INSTRUCTION}", ("Yes", "No"))
        rows.append(("yesno", request, 0 if row["answer"] == "yes" else 1))
    return rows


def hits_by_group(backend: VisionLanguageBackend, rows: list[tuple[str, ChoiceRequest, int]]) -> dict[str, tuple[int, int]]:
    """(right, total) per group and per family ("mc", "yesno"); argmax of the option probabilities."""
    probabilities = backend.choice_probs([request for _, request, _ in rows])
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (group, _, right), probs in zip(rows, probabilities):
        for key in dict.fromkeys((group, group.split("/")[0])):
            hits[key][0] += int(np.argmax(probs) == right)
            hits[key][1] += 1
    return {key: (hit, total) for key, (hit, total) in sorted(hits.items())}
