"""VLind-Bench's suite entry."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vlgate.evaluators.loaders.vlind_bench import DEFAULT_STYLE, DEFAULT_VOTE_THRESHOLD
from vlgate.evaluators.runners.base import EvaluatorSettings


class VlindSettings(EvaluatorSettings):
    """The vlind entry of a suite. ``vote_threshold`` and ``style`` are the benchmark's
    inclusion rules (``eval/score_pipeline.py``'s ``--vote_thres`` and ``--style``) and apply
    to its own release format only (``format: vlind-bench``); the local format lists its
    images itself."""

    vote_threshold: int | None = Field(
        default=None, ge=0, description=f"an image counts (LP) with this many reviewers' votes or more; default: the benchmark's {DEFAULT_VOTE_THRESHOLD}"
    )
    style: Literal["all", "photorealistic", "illustration", "cartoon"] | None = Field(
        default=None, description=f"only the accepted images of one style (ids 0-3, 4-7, 8-11) count; default: {DEFAULT_STYLE!r}"
    )
    #: None: the protocol's (64 under ``vlind-bench``, as instructblip_eval.py generates; 16
    #: under ``vlgate``); another value changes the protocol as run (``vlind-bench-1+answer=4096``,
    #: gpt4o_eval.py's API limit)
    answer_max_new_tokens: int | None = Field(default=None, ge=1, le=8192)

    def loader_options(self) -> dict[str, object]:
        """The inclusion rules this entry sets, for the vlind-bench loader."""
        return {name: value for name, value in (("vote_threshold", self.vote_threshold), ("style", self.style)) if value is not None}

    def protocol_overrides(self) -> dict[str, int | str | None]:
        """A rule other than the benchmark's default names itself in the protocol as run."""
        return {
            "answer": self.answer_max_new_tokens,
            "vote_threshold": self.vote_threshold if self.vote_threshold not in (None, DEFAULT_VOTE_THRESHOLD) else None,
            "style": self.style if self.style not in (None, DEFAULT_STYLE) else None,
        }
