"""GenCeption's protocols (docs/metrics.md#protocols)."""

from __future__ import annotations

from vlgate.evaluators.genception import prompts
from vlgate.evaluators.protocols import VLGATE, VLGATE_DIFFERENCES, Protocol

GENCEPTION: tuple[Protocol[prompts.GenceptionPrompts], ...] = (
    Protocol(
        "genception",
        1,
        "EQTPartners/GenCeption genception/exp_llava.py, genception/evaluation.py",
        prompts.GENCEPTION,
        {"description": 512},
        differences=(
            "T must be the same for every record of a set (the released gc_score keeps chains of T-1 iterations and scores them as GC@(T-1))",
            "seed images are read from category folders (one folder, as the released --dataset, is the category named after it); "
            "hidden files (._x.jpg beside x.jpg on a copy from macOS) are passed over, where find_image_files tries to read them",
        ),
        # genception/file_utils.py find_image_files: {".jpg", ".png"}, the suffix compared in lower case
        loader_options={"image_suffixes": (".jpg", ".png")},
    ),
    Protocol(VLGATE, 1, "vlgate (GenCeption's prompts with 96-token descriptions, what the world's small VLM can write)", prompts.GENCEPTION, {"description": 96}, differences=VLGATE_DIFFERENCES),
)

