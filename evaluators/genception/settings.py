"""GenCeption's suite entry: its iterations, image generator and image encoder."""

from __future__ import annotations

from pydantic import Field, field_validator

from vlgate.evaluators.backends import kinds as backends
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
    encoder_kind: str = Field(default="vit", description="vit (the paper's CLS token) or clip (evaluators/backends/kinds.py)")
    seed: int = 0

    @field_validator("encoder_kind")
    @classmethod
    def _known_encoder(cls, value: str) -> str:
        if value not in backends.IMAGE_ENCODERS:
            raise ValueError(f"unknown image encoder {value!r}; expected one of {', '.join(backends.IMAGE_ENCODERS)}")
        return value

    def protocol_overrides(self) -> dict[str, int | None]:
        return {"description": self.description_max_new_tokens}
