"""VL-LCM (logical consistency on sufficient and necessary conditions): lcm-mc and lcm-nb.

Its metric math (``metrics_mc.py``, ``metrics_nb.py``), record schemas, prompts, protocols,
suite settings, runner, report figures, example records and definitions live here.
"""

from vlgate.evaluators.vl_lcm.definition import DEFINITIONS

__all__ = ["DEFINITIONS"]
