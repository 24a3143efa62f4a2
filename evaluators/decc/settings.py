"""DeCC's suite entry: its LLM agent, decomposer and where A-OKVQA's COCO images are."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.runners.base import EvaluatorSettings


class DeccSettings(EvaluatorSettings):
    model_fields_with_paths = ("llm", "decomposer", "coco_dir")

    llm: str
    llm_backend: str = Field(default="transformers", description="the backend the LLM agent and the decomposer run on (transformers, vllm or openai, as the suite's backend:)")
    decomposer: str | None = Field(default=None, description="a VLM that writes sub-questions; default: the items' own, else the candidate")
    coco_dir: str | None = Field(
        default=None, description="A-OKVQA (format aokvqa): the COCO folder holding {split}2017/, as A-OKVQA's README sets it up ($COCO_DIR); default: beside the data file"
    )

    @field_validator("llm_backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        backends.get(value)  # UnknownBackendError (a ValueError) names the known ones
        return value

    def loader_options(self) -> dict[str, object]:
        return {"coco_dir": Path(self.coco_dir)} if self.coco_dir else {}
