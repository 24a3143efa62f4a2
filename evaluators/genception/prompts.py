"""GenCeption's prompts: P_Desc (paper Table 1) and the generation prompt P_Gen (§3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: GenCeption's P_Desc (paper Table 1), verbatim.
GENCEPTION_DESCRIBE = (
    "Please write a clear, precise, detailed, and concise description of all elements in the image. Focus on accurately "
    "depicting various aspects, including but not limited to the colors, shapes, positions, styles, texts and the "
    "relationships between different objects and subjects in the image. Your description should be thorough enough to "
    "guide a professional in recreating this image solely based on your textual representation. Remember, only include "
    "descriptive texts that directly pertain to the contents of the image. You must complete the description using less "
    "than 500 words."
)


def genception_generate(description: str) -> str:
    """P_Gen (paper §3): the text-to-image prompt built from the description Q_t."""
    return f"Generate an image that fully and precisely reflects this description: {description}"


@dataclass(frozen=True)
class GenceptionPrompts:
    """genception: P_Desc, and P_Gen built from a description."""

    describe: str
    generate: Callable[[str], str]


GENCEPTION = GenceptionPrompts(GENCEPTION_DESCRIBE, genception_generate)

