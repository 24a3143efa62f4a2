"""VLind-Bench: the pipeline scores of commonsense knowledge, visual perception,
commonsense bias and language prior.

Its metric math, record schema, prompts, protocols, suite settings, runner, report figures,
example records and definition live here.
"""

from vlgate.evaluators.vlind.definition import DEFINITIONS

__all__ = ["DEFINITIONS"]
