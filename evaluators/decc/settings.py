"""DeCC's suite entry: its LLM agent, decomposer and where A-OKVQA's COCO images are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from vlgate.evaluators.runners.base import EvaluatorSettings


class DeccSettings(EvaluatorSettings):
    model_fields_with_paths = ("llm", "decomposer", "coco_dir")

    llm: str
    decomposer: str | None = Field(default=None, description="a VLM that writes sub-questions; default: the items' own, else the candidate")
    coco_dir: str | None = Field(
        default=None, description="A-OKVQA (format aokvqa): the COCO folder holding {split}2017/, as A-OKVQA's README sets it up ($COCO_DIR); default: beside the data file"
    )

    def loader_options(self) -> dict[str, Any]:
        return {"coco_dir": Path(self.coco_dir)} if self.coco_dir else {}
