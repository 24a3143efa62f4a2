"""DeCC's decomposition and reasoning prompts (paper App. A, shortened to the instruction
without the few-shot examples)."""

from __future__ import annotations

from vlgate.evaluators.prompts import YES_NO_INSTRUCTION, mc_prompt

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

