"""The prompt parts several evaluators share: MMMU's multiple-choice layout (VL-LCM App. C,
"MC with default prompt"), which lcm-mc, DeCC's reasoning step and the synthetic world's
training data all use, and the yes/no instruction. Each evaluator's own prompts live in its
package (``vl_lcm/prompts.py``, ``vlind/prompts.py``, ``genception/prompts.py``,
``decc/prompts.py``); which of them a run sends is its protocol, whose name and version go
into each record's fingerprint: change a template, bump its protocol's version, and cached
results are recomputed rather than silently mixed. The ``vlgate`` protocols' prompts are the
ones the synthetic world's models are trained on.
"""

from __future__ import annotations

from collections.abc import Sequence

OPTION_LETTERS = "ABCDEFGHIJ"

MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
YES_NO_INSTRUCTION = "Please answer yes or no."


def mc_prompt(question: str, options: Sequence[str]) -> str:
    """MMMU-style multiple choice: the question, lettered options, the letter instruction."""
    lines = [question] + [f"{OPTION_LETTERS[i]}. {option}" for i, option in enumerate(options)]
    return "\n".join(lines) + "\n" + MC_INSTRUCTION
