"""Every prompt the runners send, in one place. Which of them a run sends is its
evaluator's protocol (``evaluators/protocols.py``), whose name and version go into each
record's fingerprint: change a template, bump its protocol's version, and cached results
are recomputed rather than silently mixed.

The ``vlgate`` protocol's prompts (the functions below without a benchmark in their name's
docstring) are the ones the synthetic world's models are trained on. Sources: MMMU's MC instruction (VL-LCM App. C, "MC with default prompt") and its yes/no
adaptation; NaturalBench's answer suffixes (its example.py ``SUFFIX_FOR_VQA``);
VLind-Bench's four templates (its eval scripts: commonsense_TF for CK, simple_TF for VP,
detailed_TF with the context for CB, detailed_TF for LP; character for character the text of
klee972/VLind-Bench ``eval/gpt4o_eval.py``, so the ``vlind-bench`` protocol asks the same);
GenCeption's P_Desc (paper
Table 1) and generation prompt (§3); DeCC's decomposition and reasoning prompts (paper
App. A, shortened to the instruction without the few-shot examples).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

OPTION_LETTERS = "ABCDEFGHIJ"

MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
YES_NO_INSTRUCTION = "Please answer yes or no."
NATURALBENCH_YES_NO_SUFFIX = "Please answer Yes or No."
NATURALBENCH_MC_SUFFIX = "Please output the letter corresponding to the correct option."
TRUE_FALSE_INSTRUCTION = "Only respond in True or False."


def mc_prompt(question: str, options: Sequence[str]) -> str:
    """MMMU-style multiple choice: the question, lettered options, the letter instruction."""
    lines = [question] + [f"{OPTION_LETTERS[i]}. {option}" for i, option in enumerate(options)]
    return "\n".join(lines) + "\n" + MC_INSTRUCTION


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


DECC_DECOMPOSE = (
    "Given an image and an associated main question, design pre-questions that focus on important contextual information "
    "in the image useful for answering the main question. Pre-questions should provide clues to answer the main question. "
    "Each pre-question should be short and easy to understand.\nMain Question: {question}\n"
    "Write each as 'Pre-question N: ...' on its own line."
)

DECC_DECOMPOSE_AGAIN = (
    "You will be given an image and an associated main question, and some sub-question-answer pairs. These sub-questions "
    "might not be sufficient to answer the main question due to lack of detail or conflicting answers. Design additional "
    "sub-questions that focus on important contextual information in the image useful for answering the main question.\n"
    "Main Question: {question}\nSub-questions and answers: {pairs}\n"
    "Write each as 'Additional Sub-question N: ...' on its own line."
)


def decc_sub_question(sub_question: str, earlier_pairs: str = "") -> str:
    """A sub-question answered by the candidate VLM (with the earlier pairs in round 2)."""
    context = f"Sub-questions and answers so far: {earlier_pairs}\n" if earlier_pairs else ""
    return f"{context}{sub_question} Answer with a word or a number."


def decc_pairs(sub_questions: list[str], sub_answers: list[str]) -> str:
    return " ".join(f"Q: {q} A: {a}." for q, a in zip(sub_questions, sub_answers))


def decc_yes_no_reasoning(pairs: str, question: str) -> str:
    """What both agents read for a yes/no question: the sub-QA pairs, the question and the
    yes/no instruction (the synthetic world's LLM agent is trained on exactly this)."""
    return f"Sub-questions and answers: {pairs} Question: {question} {YES_NO_INSTRUCTION}"


def decc_reasoning(pairs: str, question: str, options: tuple[str, ...] | None) -> str:
    """What both agents read: the sub-QA pairs, then the original question (and options)."""
    if options:
        return f"Sub-questions and answers: {pairs} Question: {mc_prompt(question, options)}"
    return f"Sub-questions and answers: {pairs} Question: {question} Answer with a word or a number."


# ---------------------------------------------------------------------------
# Prompt sets: what one protocol of an evaluator asks (``evaluators/protocols.py``)


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


@dataclass(frozen=True)
class VlindPrompts:
    """vlind: the four stages' templates."""

    commonsense: Callable[[str], str]
    object: Callable[[str], str]
    context: Callable[[str, str], str]
    image: Callable[[str], str]


@dataclass(frozen=True)
class GenceptionPrompts:
    """genception: P_Desc, and P_Gen built from a description."""

    describe: str
    generate: Callable[[str], str]


VLGATE_MULTIPLE_CHOICE = MultipleChoicePrompts(mc_prompt, yes_no_probe)
MMMU_AUTHORS = MultipleChoicePrompts(mmmu_authors_prompt, yes_no_probe, mmmu_authors_images)
MMMU_LMMS_EVAL = MultipleChoicePrompts(mmmu_lmms_eval_prompt, yes_no_probe, mmmu_lmms_eval_images)
VLGATE_NATURALBENCH = NaturalBenchPrompts(naturalbench_yes_no, naturalbench_choose_text, naturalbench_choose_image, naturalbench_multiple_choice)
NATURALBENCH_AUTHORS = naturalbench_released("")
NATURALBENCH_LMMS_EVAL = naturalbench_released(" ")
#: VLind-Bench's templates as klee972/VLind-Bench eval/gpt4o_eval.py writes them: both vlind
#: protocols ask these (the world's models are trained on them)
VLIND_BENCH = VlindPrompts(vlind_commonsense, vlind_object, vlind_context, vlind_image)
GENCEPTION = GenceptionPrompts(GENCEPTION_DESCRIBE, genception_generate)
