"""DeCC's protocol (docs/metrics.md#protocols): the paper released no evaluation code."""

from __future__ import annotations

from vlgate.evaluators.protocols import VLGATE, Protocol

DECC: tuple[Protocol[None], ...] = (
    Protocol(
        VLGATE,
        1,
        "vlgate (DeCC paper App. A's decomposition and reasoning prompts without their few-shot examples; the paper released no evaluation code)",
        None,
        {"answer": 16, "sub_answer": 8, "decomposition": 96},
        differences=("the few-shot examples of the paper's prompts are left out",),
    ),
)

