"""DeCC: whether a VLM's direct answer survives decomposition into sub-questions and
reasoning over their answers by the VLM and an LLM agent (answer reliability).

Its metric math, record schema, prompts, protocols, suite settings, runner, report figures,
example records and definition live here.
"""

from vlgate.evaluators.decc.definition import DEFINITIONS

__all__ = ["DEFINITIONS"]
