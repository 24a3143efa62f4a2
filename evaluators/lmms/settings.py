"""An lmms-eval task's suite entry (``kind: lmms-eval``, docs/lmms-eval.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, JsonValue

from vlgate.evaluators.runners.base import EvaluatorSettings

#: the ``kind`` that makes a suite entry an lmms-eval task
KIND = "lmms-eval"


class LmmsEvalSettings(EvaluatorSettings):
    """``task``: a task of the installed lmms-eval, or one found under ``include_path`` (the
    team's own task folder in lmms-eval's format); the overrides lmms-eval itself accepts.
    The entry's name in the suite is the evaluator's name, and its metrics are
    ``NAME/METRIC``. ``data`` is not read: a task's docs come from its own ``dataset_path``."""

    model_fields_with_paths = ("include_path",)

    kind: Literal["lmms-eval"]
    task: str = Field(min_length=1)
    include_path: str | None = Field(default=None, description="a folder of task YAMLs in lmms-eval's format, searched besides the installed tasks")
    data: Path = Path(".")
    lmms_eval_specific_kwargs: dict[str, JsonValue] | None = Field(default=None, description="merged over the task's own lmms_eval_specific_kwargs.default, as lmms-eval merges them")
    generation_kwargs: dict[str, JsonValue] | None = Field(default=None, description="merged over the task's own generation_kwargs; greedy only")
