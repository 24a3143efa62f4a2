"""VLind-Bench's four templates (its eval scripts: commonsense_TF for CK, simple_TF for VP,
detailed_TF with the context for CB, detailed_TF for LP), character for character the text of
klee972/VLind-Bench ``eval/gpt4o_eval.py``, so the ``vlind-bench`` protocol asks the same."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

TRUE_FALSE_INSTRUCTION = "Only respond in True or False."


def vlind_commonsense(statement: str) -> str:
    """CK (VLind-Bench commonsense_TF), asked with the factual image."""
    return f"Statement: {statement}\nBased on the common sense, is the given statement true or false? {TRUE_FALSE_INSTRUCTION}"


def vlind_object(noun: str) -> str:
    """VP (simple_TF with the benchmark's object statement), asked with the best counterfactual image."""
    return f"Statement: There is {noun} in the given image.\nBased on the image, is the given statement true or false? {TRUE_FALSE_INSTRUCTION}"


def vlind_context(context: str, statement: str) -> str:
    """CB (detailed_TF with the counterfactual context)."""
    return (
        f"Context: {context}\nStatement: {statement}\nBased on the context, is the given statement true or false? "
        f"Forget real-world common sense and just follow the information provided in the context. {TRUE_FALSE_INSTRUCTION}"
    )


def vlind_image(statement: str) -> str:
    """LP (detailed_TF), asked with each accepted counterfactual image."""
    return (
        f"Statement: {statement}\nBased on the image, is the given statement true or false? "
        f"Forget real-world common sense and just follow the information provided in the image. {TRUE_FALSE_INSTRUCTION}"
    )


@dataclass(frozen=True)
class VlindPrompts:
    """vlind: the four stages' templates."""

    commonsense: Callable[[str], str]
    object: Callable[[str], str]
    context: Callable[[str, str], str]
    image: Callable[[str], str]


#: VLind-Bench's templates as klee972/VLind-Bench eval/gpt4o_eval.py writes them: both vlind
#: protocols ask these (the world's models are trained on them)
VLIND_BENCH = VlindPrompts(vlind_commonsense, vlind_object, vlind_context, vlind_image)

