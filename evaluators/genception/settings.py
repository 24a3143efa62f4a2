"""GenCeption's suite entry: its iterations, image generator and image encoder."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vlgate.evaluators.runners.base import EvaluatorSettings


class GenceptionSettings(EvaluatorSettings):
    model_fields_with_paths = ("encoder", "generator")

    iterations: int = Field(default=3, ge=1)
    #: None: the protocol's (512 under ``genception``, as the released code generates; 96
    #: under ``vlgate``, what the world's small VLM can write); another value changes the
    #: protocol as run (``genception-1+description=256``)
    description_max_new_tokens: int | None = Field(default=None, ge=1, le=8192)
    generator: str = "scene-renderer"
    encoder: str
    encoder_kind: Literal["vit", "clip"] = "vit"
    seed: int = 0

    def protocol_overrides(self) -> dict[str, int | None]:
        return {"description": self.description_max_new_tokens}
