"""The family matrix: tiny random-weight checkpoints of the open VLM families teams train,
built offline from transformers' own config and processor classes (``common.py`` says how,
and what they are judged against). Each group module lists its families in ``FAMILIES``."""

from __future__ import annotations

import importlib

from model_families.common import Family

#: The group modules, one per lineage of families.
GROUPS = ("qwen", "llava", "gemma")


def all_families() -> list[Family]:
    """Every family of every group module, in the groups' order."""
    found: list[Family] = []
    for group in GROUPS:
        try:
            module = importlib.import_module(f"model_families.{group}")
        except ModuleNotFoundError as error:
            if error.name != f"model_families.{group}":
                raise
            continue
        found.extend(module.FAMILIES)
    return found
