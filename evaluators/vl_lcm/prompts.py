"""VL-LCM's prompts: the multiple-choice question and its yes/no probe of each option
(App. C), as vlgate, MMMU's authors and lmms-eval write them, and NaturalBench's yes/no
and multiple-choice tests (§3.3), as vlgate, NaturalBench's authors and lmms-eval write
them. Which of them a run sends is its protocol (``protocols.py``), whose name and version
go into each record's fingerprint: change a template, bump its protocol's version.
Sources: MMMU's MC instruction (VL-LCM App. C, "MC with default prompt") and its yes/no
adaptation; NaturalBench's answer suffixes (its example.py ``SUFFIX_FOR_VQA``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vlgate.evaluators.prompts import MC_INSTRUCTION, OPTION_LETTERS, YES_NO_INSTRUCTION, mc_prompt

NATURALBENCH_YES_NO_SUFFIX = "Please answer Yes or No."


NATURALBENCH_MC_SUFFIX = "Please output the letter corresponding to the correct option."


def mmmu_authors_prompt(question: str, options: Sequence[str]) -> str:
    """MMMU's MC prompt as the authors' ``mmmu/utils/data_utils.py::construct_prompt`` builds it
    with ``configs/llava1.5.yaml``: the question, each option as ``(A) text`` on its own
    line, a blank line, the instruction. ``<image N>`` placeholders stay as written."""
    lettered = "".join(f"({OPTION_LETTERS[i]}) {option}\n" for i, option in enumerate(options))
    return f"{question}\n{lettered}\n{MC_INSTRUCTION}"


def mmmu_lmms_eval_prompt(question: str, options: Sequence[str]) -> str:
    """MMMU's MC prompt as lmms-eval's ``tasks/mmmu/utils.py::construct_prompt`` builds it
    (``mmmu_val``'s default kwargs): the question, ``A. text`` lines, a blank line, the
    instruction; placeholders stay as written (``interleaved_format: false``)."""
    lettered = "\n".join(f"{OPTION_LETTERS[i]}. {option}" for i, option in enumerate(options))
    return f"{question}\n{lettered}\n\n{MC_INSTRUCTION}"


#: MMMU's image placeholders as lmms-eval's ``mmmu_doc_to_visual`` finds them
MMMU_IMAGE_PLACEHOLDER = re.compile(r"<image (\d+)>")


def every_image(question: str, options: Sequence[str], n_images: int) -> tuple[int, ...]:
    """Which of an item's images (0-based, in number order) a request carries: all of them."""
    return tuple(range(n_images))


def mmmu_authors_images(question: str, options: Sequence[str], n_images: int) -> tuple[int, ...]:
    """The authors' harness (``mmmu/utils/data_utils.py::process_single_sample``): ``image_1``
    alone, whatever the question names. (Its other branch, options holding several
    ``<img='path'>`` tags, gives no image and a random letter; the Hub release writes
    ``<image N>``, which that pattern never matches, so vlgate has no such items.)"""
    return (0,)


def mmmu_lmms_eval_images(question: str, options: Sequence[str], n_images: int) -> tuple[int, ...]:
    """lmms-eval (``tasks/mmmu/utils.py::mmmu_doc_to_visual``): every image named by an
    ``<image N>`` placeholder of the question or the options, each once, in NUMBER order
    (it sorts the names ``image_N``), not in order of appearance. Where the text names none
    of the item's images, all of them (lmms-eval would send none); a placeholder naming an
    image the item lacks is passed over (lmms-eval would fail on it)."""
    named = {int(n) for text in (question, *options) for n in MMMU_IMAGE_PLACEHOLDER.findall(text)}
    chosen = tuple(n - 1 for n in sorted(named) if 1 <= n <= n_images)
    return chosen or every_image(question, options, n_images)


def yes_no_probe(question: str, option: str) -> str:
    """VL-LCM's yes/no test of one option (the MC prompt adapted, App. C): the question,
    then whether this option is its answer."""
    return f"{question}\nIs the answer \"{option}\"? {YES_NO_INSTRUCTION}"


def naturalbench_yes_no(text: str, text_kind: str) -> str:
    """NaturalBench's own yes/no format: the question and its suffix. A statement is asked
    about as a question."""
    if text_kind == "statement":
        text = f"Is the following statement true for the image? {text}"
    return f"{text} {NATURALBENCH_YES_NO_SUFFIX}"


def naturalbench_multiple_choice(question: str) -> str:
    """A NaturalBench multiple_choice question (its options written in it) and the MC suffix,
    joined as ``naturalbench_yes_no`` joins the yes/no suffix."""
    return f"{question} {NATURALBENCH_MC_SUFFIX}"


def _choose_text_ask(text_kind: str) -> str:
    """The stem of VL-LCM's text-choice test. ``text_kind`` "multiple_choice" is a
    NaturalBench multiple_choice unit's question, whose answer playing "yes" is "A"."""
    if text_kind == "multiple_choice":
        return "Which question has the answer A for this image?"
    return "Which question has the answer yes for this image?" if text_kind == "question" else "Which statement is true for this image?"


def _choose_image_ask(text: str, text_kind: str) -> str:
    """The stem of VL-LCM's image-choice test (``text_kind`` as in :func:`_choose_text_ask`)."""
    if text_kind == "multiple_choice":
        return f"For which image is the answer to this question A: {text}"
    return f"For which image is the answer to this question yes: {text}" if text_kind == "question" else f"For which image is this statement true: {text}"


def naturalbench_choose_text(texts: tuple[str, str], text_kind: str) -> str:
    """MC test on one image choosing between T1 and T2 (VL-LCM tests (a), (b))."""
    return f"{_choose_text_ask(text_kind)}\nA. {texts[0]}\nB. {texts[1]}\n{NATURALBENCH_MC_SUFFIX}"


def naturalbench_choose_image(text: str, text_kind: str) -> str:
    """MC test on one text choosing between V1 and V2, both given (tests (c), (d))."""
    return f"{_choose_image_ask(text, text_kind)}\nA. The first image\nB. The second image\n{NATURALBENCH_MC_SUFFIX}"


def _naturalbench_question(text: str, text_kind: str) -> str:
    """A statement asked about as a yes/no question (vlgate's units may hold statements;
    NaturalBench's hold questions, which pass unchanged)."""
    return f"Is the following statement true for the image? {text}" if text_kind == "statement" else text


def _naturalbench_options(ask: str, options: tuple[str, str]) -> str:
    """An MC question in NaturalBench's own layout (its multiple_choice questions:
    ``"<stem>?\nOption: A:<opt>; B:<opt>;"``)."""
    return f"{ask}\nOption: A:{options[0]}; B:{options[1]};"


def _naturalbench_choose_text_question(texts: tuple[str, str], text_kind: str) -> str:
    return _naturalbench_options(_choose_text_ask(text_kind), texts)


def _naturalbench_choose_image_question(text: str, text_kind: str) -> str:
    return _naturalbench_options(_choose_image_ask(text, text_kind), ("The first image", "The second image"))


def naturalbench_released(separator: str) -> NaturalBenchPrompts:
    """NaturalBench's prompts as a released harness builds them: the question, ``separator``,
    then the question type's suffix (``SUFFIX_FOR_VQA``). The authors' ``naturalbench_vqa.py``
    concatenates with no separator (``"Is the cat on the mat?Please answer Yes or No."``),
    lmms-eval's ``naturalbench_doc_to_text`` with one space. A multiple_choice unit's question
    (its options already written in it) is joined the same way to the MC suffix
    (``"…B:no;Please output the letter corresponding to the correct option."``). VL-LCM's MC
    tests (§3.3) are asked as NaturalBench's own multiple_choice questions, with that suffix."""
    return NaturalBenchPrompts(
        yes_no=lambda text, kind: _naturalbench_question(text, kind) + separator + NATURALBENCH_YES_NO_SUFFIX,
        multiple_choice=lambda question: question + separator + NATURALBENCH_MC_SUFFIX,
        choose_text=lambda texts, kind: _naturalbench_choose_text_question(texts, kind) + separator + NATURALBENCH_MC_SUFFIX,
        choose_image=lambda text, kind: _naturalbench_choose_image_question(text, kind) + separator + NATURALBENCH_MC_SUFFIX,
    )


@dataclass(frozen=True)
class MultipleChoicePrompts:
    """lcm-mc: the MC prompt over lettered options, VL-LCM's yes/no probe of one option, and
    which of a multi-image item's images every one of its requests carries: ``images(question,
    options, n_images)`` gives 0-based indices into the item's images in number order
    (``McItem.images``). A single-image item carries its image under every rule."""

    multiple_choice: Callable[[str, Sequence[str]], str]
    yes_no_probe: Callable[[str, str], str]
    images: Callable[[str, Sequence[str], int], tuple[int, ...]] = every_image


@dataclass(frozen=True)
class NaturalBenchPrompts:
    """lcm-nb: the yes/no test of (V_i, T_j), and the two kinds of MC test of VL-LCM §3.3;
    ``multiple_choice`` asks (V_i, T_j) of a NaturalBench multiple_choice unit, whose MC tests
    get ``"multiple_choice"`` as their text kind."""

    yes_no: Callable[[str, str], str]
    choose_text: Callable[[tuple[str, str], str], str]
    choose_image: Callable[[str, str], str]
    multiple_choice: Callable[[str], str]


VLGATE_MULTIPLE_CHOICE = MultipleChoicePrompts(mc_prompt, yes_no_probe)


MMMU_AUTHORS = MultipleChoicePrompts(mmmu_authors_prompt, yes_no_probe, mmmu_authors_images)


MMMU_LMMS_EVAL = MultipleChoicePrompts(mmmu_lmms_eval_prompt, yes_no_probe, mmmu_lmms_eval_images)


VLGATE_NATURALBENCH = NaturalBenchPrompts(naturalbench_yes_no, naturalbench_choose_text, naturalbench_choose_image, naturalbench_multiple_choice)


NATURALBENCH_AUTHORS = naturalbench_released("")


NATURALBENCH_LMMS_EVAL = naturalbench_released(" ")

