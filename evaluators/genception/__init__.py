"""GenCeption: how much of an image survives T rounds of description and regeneration
(GC@T, and GC_FID@T from the images' features).

Its metric math, record schema, prompts, protocols, suite settings, runner, report figures,
example records and definition live here.
"""

from vlgate.evaluators.genception.definition import DEFINITIONS

__all__ = ["DEFINITIONS"]
