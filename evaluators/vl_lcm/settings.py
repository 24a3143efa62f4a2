"""VL-LCM's suite entries: lcm-mc takes the common settings, lcm-nb adds how units are built."""

from __future__ import annotations

from pydantic import Field

from vlgate.evaluators.runners.base import EvaluatorSettings


class LcmNbSettings(EvaluatorSettings):
    pair_seed: int | None = Field(default=None, description="build units by seeded random pairing of image-question pairs (unlabelled data)")
