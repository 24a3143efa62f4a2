"""DeCC runner (docs/metrics.md#decc; DeCC paper §3 "Task Decomposition", "Consistency Comparison",
App. A few-shot prompts).

Per item (question Q about image I):

1. Direct answer A0: the candidate VLM answers Q with I.
2. Decomposition: the item's own ``sub_questions`` when it has them (a reference
   decomposition, used whole), else the decomposer (any VLM; ``decomposer or vlm``) writes
   "Pre-question N: ..." lines conditioned on I and Q (:data:`prompts.DECC_DECOMPOSE`),
   at most ``max_sub_questions`` of them kept (the paper lets the decomposer decide how many).
3. Sub-answers: the candidate VLM answers each sub-question with I.
4. Two agents reason over the sub-QA pairs and Q (:func:`reasoning_prompt`): the candidate
   VLM with I → v1 (A_V); a separate text-only LLM, without I → l1 (A_L).
5. Second iteration, only where the agents disagree about A0 (Cons_V ≠ Cons_L: the
   multi-agent rule needs it there and nowhere else, which is where its cost is saved,
   paper App. A.5): the decomposer writes additional sub-questions from I, Q and the
   first pairs (:data:`prompts.DECC_DECOMPOSE_AGAIN`); the candidate VLM answers them with
   I and the earlier pairs as context; both agents reason over all pairs → v2, l2.
   For yes/no (two-option) items Cons_V ≠ Cons_L is exactly v1 ≠ l1; with more options,
   v1 ≠ l1 with both differing from A0 gives R = 0 either way and runs no second round.

Answers, so that ``direct``, ``v1``, ``l1``, ``v2``, ``l2`` and ``answer`` compare under
:func:`metrics.decc.normalise_answer`:

- items with options are answered by :meth:`choice_probs` (argmax, one forward pass, no
  generation) and every answer is written as the chosen **option text** (``"yes"``,
  ``"red"``); a labelled ``answer`` given as an option letter is mapped to its text;
- yes/no options are asked the way the world's models were trained: A0 as
  "Q Please answer yes or no." (the VLM's yes/no items), the agents with
  ``checkpoints.reasoning_prompt_text``'s wording (the LLM agent's training format),
  scored over Yes/No; other options as MMMU-style letters (:func:`vlgate.evaluators.prompts.mc_prompt`);
- open questions are generated and reduced to a short answer (:func:`short_answer`).

Decompositions are the expensive, candidate-independent part: the decomposer's raw text
is cached as JSON under ``cache_dir`` per (decomposer digest, image bytes, prompt)
(:class:`DecompositionCache`; round 2's prompt holds the first-round pairs), so the first
decomposition runs once per item however many candidates are evaluated. Parsing (:func:`parse_sub_questions`) happens on reading, so it
can change without recomputation. When nothing parses, round 1 falls back to the main
question itself as the only sub-question (the decomposition degenerates to asking Q), and
round 2 falls back to re-asking the first sub-questions with the earlier pairs as context
(the paper's "conditioned on I and previous sub-QA pairs"); ``decomposition`` /
``decomposition_2`` in the record say which happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from pydantic import JsonValue

from vlgate.evaluators import prompts as shared_prompts
from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest, VisionLanguageBackend
from vlgate.evaluators.decc import prompts, protocols
from vlgate.evaluators.decc.metrics import normalise_answer
from vlgate.evaluators.decc.settings import DeccSettings
from vlgate.evaluators.loaders.items import DeccItem, open_image
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.base import Runner, RunnerContext
from vlgate.evaluators.runners.store import file_digest

#: DeCC has one protocol (``protocols.DECC``): its generation limits
PROTOCOL = protocols.DECC[0]
ANSWER_MAX_NEW_TOKENS = PROTOCOL.limit("answer")
SUB_ANSWER_MAX_NEW_TOKENS = PROTOCOL.limit("sub_answer")
DECOMPOSITION_MAX_NEW_TOKENS = PROTOCOL.limit("decomposition")
YES_NO = ("Yes", "No")

# "Pre-question 1: ...", "Additional Sub-question 2 - ...", "Sub-question 3) ...", "1. ...", "- ..."
_NAMED_LINE = re.compile(r"^\s*(?:[-*•]\s*)?(?:additional\s+)?(?:pre|sub)[\s-]*questions?\s*\d*\s*[:.)\-]\s*(?P<text>.+)$", re.IGNORECASE)
_LISTED_LINE = re.compile(r"^\s*(?:\d+\s*[.)]|[-*•])\s*(?P<text>.+\?)\s*$")
_QUESTION = re.compile(r"[^?.!\n]*\?")
_ANSWER_PREFIX = re.compile(r"^\s*(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:\-]?|a\s*:)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class AnswerFormat:
    """How an item is asked and answered: ``yes-no`` and ``letters`` by choice
    probabilities over ``labels`` (one per option), ``open`` by generation."""

    kind: str
    options: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    def answer(self, probabilities: np.ndarray) -> str:
        return self.options[int(np.argmax(probabilities))]


def answer_format(item: DeccItem) -> AnswerFormat:
    options = tuple(item.options or ())
    if not options:
        return AnswerFormat("open")
    normalised = [normalise_answer(option) for option in options]
    if sorted(normalised) == ["no", "yes"]:
        return AnswerFormat("yes-no", options, tuple("Yes" if n == "yes" else "No" for n in normalised))
    if len(options) > len(shared_prompts.OPTION_LETTERS):
        raise ValueError(f"item {item.id}: {len(options)} options, at most {len(shared_prompts.OPTION_LETTERS)} can be lettered")
    return AnswerFormat("letters", options, tuple(shared_prompts.OPTION_LETTERS[: len(options)]))


def main_question(item: DeccItem) -> str:
    """Q as the decomposer reads it: with its options, as in the paper's few-shot examples."""
    if not item.options:
        return item.question
    return f"{item.question} Options: " + ", ".join(f"{shared_prompts.OPTION_LETTERS[i]}: {option}" for i, option in enumerate(item.options))


def direct_prompt(item: DeccItem, answer_as: AnswerFormat) -> str:
    """A0's prompt: the world VLM's yes/no format, MMMU letters, or a short open answer."""
    if answer_as.kind == "yes-no":
        return f"{item.question} {shared_prompts.YES_NO_INSTRUCTION}"
    if answer_as.kind == "letters":
        return shared_prompts.mc_prompt(item.question, answer_as.options)
    return prompts.decc_sub_question(item.question)


def reasoning_prompt(pairs: str, item: DeccItem, answer_as: AnswerFormat) -> str:
    """What both agents read: the sub-QA pairs, then Q: :func:`prompts.decc_yes_no_reasoning`
    for yes/no items, else :func:`prompts.decc_reasoning`."""
    if answer_as.kind == "yes-no":
        return prompts.decc_yes_no_reasoning(pairs, item.question)
    return prompts.decc_reasoning(pairs, item.question, answer_as.options or None)


def short_answer(text: str) -> str:
    """A generated answer reduced to its first line, without an "Answer:" prefix, quotes or
    trailing punctuation (it is also what goes into the "Q: .. A: ..." pairs)."""
    line = next((line for line in text.splitlines() if line.strip()), "")
    line = _ANSWER_PREFIX.sub("", line.strip(), count=1)
    return line.strip().strip("\"'`").rstrip(".,;:!").strip()


def canonical_answer(answer: object, item: DeccItem) -> str | None:
    """A label in the runner's vocabulary: the option text for items with options (a label
    given as an option letter is mapped to its option), else the label as a string."""
    if answer is None:
        return None
    text = str(answer)
    if item.options:
        normalised = normalise_answer(text)
        for option in item.options:
            if normalise_answer(option) == normalised:
                return option
        letters = [letter.lower() for letter in shared_prompts.OPTION_LETTERS[: len(item.options)]]
        if normalised in letters:
            return item.options[letters.index(normalised)]
    return text


def parse_sub_questions(text: str, limit: int) -> list[str]:
    """The sub-questions of a decomposer's output, in order, without repeats, at most
    ``limit``: lines named "Pre-question N:" / "(Additional) Sub-question N:", else
    numbered or bulleted lines ending in "?", else any sentences ending in "?"."""

    def unique(found: list[str]) -> list[str]:
        seen, kept = set(), []
        for question in (q.strip() for q in found):
            key = normalise_answer(question)
            if key and key not in seen:
                seen.add(key)
                kept.append(question)
        return kept[:limit]

    lines = text.splitlines()
    for pattern in (_NAMED_LINE, _LISTED_LINE):
        found = unique([match.group("text") for match in map(pattern.match, lines) if match])
        if found:
            return found
    return unique(_QUESTION.findall(text))


def _atomic_write_json(path: Path, payload: Mapping[str, JsonValue]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".json.tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(payload, stream, indent=1)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class DecompositionCache:
    """The decomposer's raw outputs as JSON files under ``folder/decc-decompositions/
    DECOMPOSER-DIGEST/``, one per decomposition, shared by every candidate model.

    A file is named by the hash of everything the decomposer reads: its digest, the image's
    sha256, the prompt (the main question with its options; in round 2 also the candidate's
    first pairs) and the token budget. Keyed by content rather than item id, a changed
    prompt or item is never served a stale decomposition, and an item's labels (or an id)
    changing does not throw one away."""

    def __init__(self, folder: Path, decomposer: VisionLanguageBackend):
        self.decomposer = decomposer
        self.folder = Path(folder) / "decc-decompositions" / decomposer.info.digest.replace(":", "-")[:64]

    def path(self, item: DeccItem, prompt: str) -> Path:
        inputs = [self.decomposer.info.digest, file_digest(Path(item.image)), prompt, DECOMPOSITION_MAX_NEW_TOKENS]
        return self.folder / f"{hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:40]}.json"

    def texts(self, requests: list[tuple[DeccItem, Image.Image, str]]) -> list[str]:
        """Raw decomposer text per (item, image, prompt): cached ones read back, the misses
        generated in one call and written."""
        texts: dict[int, str] = {}
        for index, (item, _, prompt) in enumerate(requests):
            try:
                texts[index] = json.loads(self.path(item, prompt).read_text())["text"]
            except (OSError, ValueError, KeyError):  # missing, or torn by a kill: ask again
                pass
        missing = [i for i in range(len(requests)) if i not in texts]
        if missing:
            generated = self.decomposer.generate([GenerateRequest((requests[i][1],), requests[i][2], DECOMPOSITION_MAX_NEW_TOKENS) for i in missing])
            for index, text in zip(missing, generated):
                item, _, prompt = requests[index]
                _atomic_write_json(self.path(item, prompt), {"decomposer": self.decomposer.info.digest, "item": item.id, "prompt": prompt, "text": text})
                texts[index] = text
        return [texts[i] for i in range(len(requests))]


def answer_all(backend: VisionLanguageBackend, requests: Sequence[tuple[tuple[Image.Image, ...], str, AnswerFormat]]) -> list[str]:
    """Answers in the runner's vocabulary: one ``choice_probs`` call for the items with
    options, one ``generate`` call for the open ones."""
    answers: list[str | None] = [None] * len(requests)
    chosen = [i for i, (_, _, how) in enumerate(requests) if how.kind != "open"]
    if chosen:
        probabilities = backend.choice_probs([ChoiceRequest(requests[i][0], requests[i][1], requests[i][2].labels) for i in chosen])
        for index, probs in zip(chosen, probabilities):
            answers[index] = requests[index][2].answer(probs)
    generated = [i for i, (_, _, how) in enumerate(requests) if how.kind == "open"]
    if generated:
        texts = backend.generate([GenerateRequest(requests[i][0], requests[i][1], ANSWER_MAX_NEW_TOKENS) for i in generated])
        for index, text in zip(generated, texts):
            answers[index] = short_answer(text)
    return answers  # type: ignore[return-value]


def decc_runner(
    vlm: VisionLanguageBackend,
    llm: VisionLanguageBackend,
    decomposer: VisionLanguageBackend | None = None,
    *,
    cache_dir: Path,
    max_sub_questions: int = 4,
) -> Runner[DeccItem, Image.Image]:
    """The DeCC runner: ``vlm`` is the candidate, ``llm`` the text-only LLM agent,
    ``decomposer`` the VLM writing sub-questions (default: the candidate itself)."""
    if max_sub_questions < 1:
        raise ValueError(f"max_sub_questions must be >= 1, got {max_sub_questions}")
    decomposer = decomposer or vlm
    decompositions = DecompositionCache(cache_dir, decomposer)

    def sub_answers(asked: list[tuple[Image.Image, str, str]]) -> list[str]:
        """The candidate's short answers to (image, sub-question, earlier pairs)."""
        if not asked:
            return []
        texts = vlm.generate([GenerateRequest((image,), prompts.decc_sub_question(question, earlier), SUB_ANSWER_MAX_NEW_TOKENS) for image, question, earlier in asked])
        return [short_answer(text) for text in texts]

    def agents(rows: list[tuple[DeccItem, Image.Image, AnswerFormat, str]]) -> tuple[list[str], list[str]]:
        """(A_V, A_L) per (item, image, format, pairs): the VLM sees the image, the LLM does not."""
        texts = [reasoning_prompt(pairs, item, how) for item, _, how, pairs in rows]
        vlm_answers = answer_all(vlm, [((image,), text, how) for (_, image, how, _), text in zip(rows, texts)])
        llm_answers = answer_all(llm, [((), text, how) for (_, _, how, _), text in zip(rows, texts)])
        return vlm_answers, llm_answers

    def per_item(flat: list[str], counts: list[int]) -> list[list[str]]:
        out, start = [], 0
        for count in counts:
            out.append(flat[start : start + count])
            start += count
        return out

    def compute(batch: list[tuple[DeccItem, Image.Image]]) -> list[Record]:
        items = [item for item, _ in batch]
        images = [image for _, image in batch]
        formats = [answer_format(item) for item in items]
        direct = answer_all(vlm, [((image,), direct_prompt(item, how), how) for item, image, how in zip(items, images, formats)])

        # round 1: reference decompositions as given, the rest from the (cached) decomposer
        questions: list[list[str]] = [list(item.sub_questions or ()) for item in items]
        sources = ["reference" if questions[n] else "decomposer" for n in range(len(items))]
        asked = [n for n in range(len(items)) if not questions[n]]
        texts = decompositions.texts([(items[n], images[n], prompts.DECC_DECOMPOSE.format(question=main_question(items[n]))) for n in asked])
        for n, text in zip(asked, texts):
            questions[n] = parse_sub_questions(text, max_sub_questions)
            if not questions[n]:
                questions[n], sources[n] = [items[n].question], "fallback"
        answers = per_item(sub_answers([(images[n], q, "") for n in range(len(items)) for q in questions[n]]), [len(q) for q in questions])
        pairs = [prompts.decc_pairs(q, a) for q, a in zip(questions, answers)]
        v1, l1 = agents(list(zip(items, images, formats, pairs)))

        # round 2 where the agents disagree about A0 (Cons_V ≠ Cons_L)
        def agrees_with_direct(answer: str, n: int) -> bool:
            return normalise_answer(answer) == normalise_answer(direct[n])

        second = [n for n in range(len(items)) if agrees_with_direct(v1[n], n) != agrees_with_direct(l1[n], n)]
        questions2: dict[int, list[str]] = {}
        sources2: dict[int, str] = {}
        texts2 = decompositions.texts([(items[n], images[n], prompts.DECC_DECOMPOSE_AGAIN.format(question=main_question(items[n]), pairs=pairs[n])) for n in second])
        for n, text in zip(second, texts2):
            questions2[n], sources2[n] = parse_sub_questions(text, max_sub_questions), "decomposer"
            if not questions2[n]:
                questions2[n], sources2[n] = list(questions[n]), "fallback"
        flat2 = sub_answers([(images[n], q, pairs[n]) for n in second for q in questions2[n]])
        answers2 = dict(zip(second, per_item(flat2, [len(questions2[n]) for n in second])))
        v2, l2 = agents([(items[n], images[n], formats[n], prompts.decc_pairs(questions[n] + questions2[n], answers[n] + answers2[n])) for n in second])
        round2 = {n: (vlm_answer, llm_answer) for n, vlm_answer, llm_answer in zip(second, v2, l2)}

        records: list[Record] = []
        for n, item in enumerate(items):
            record: Record = {"id": item.id, "direct": direct[n], "v1": v1[n], "l1": l1[n]}
            if n in round2:
                record["v2"], record["l2"] = round2[n]
            label = canonical_answer(item.answer, item)
            if label is not None:
                record["answer"] = label
            record |= {"sub_questions": [*questions[n]], "sub_answers": [*answers[n]], "decomposition": sources[n], "round2": n in round2}
            if n in round2:
                record |= {"sub_questions_2": [*questions2[n]], "sub_answers_2": [*answers2[n]], "decomposition_2": sources2[n]}
            records.append(record)
        return records

    return Runner(
        "decc",
        {"vlm": vlm.info.digest, "llm": llm.info.digest, "decomposer": decomposer.info.digest},
        PROTOCOL.as_run(),
        lambda item: open_image(item.image, item.id, "image"),
        compute,
        settings={"max_sub_questions": max_sub_questions},
    )


def build_decc_runner(settings: DeccSettings, context: RunnerContext) -> Runner[DeccItem, Image.Image]:
    """The runner with its LLM agent and decomposer loaded (and owned); decompositions are
    cached beside the model cache and reused by every candidate."""
    llm = context.load_helper(settings.llm, settings.llm_backend)
    try:
        decomposer = context.load_helper(settings.decomposer, settings.llm_backend) if settings.decomposer else None
    except BaseException:
        llm.close()
        raise
    runner = decc_runner(context.vlm, llm, decomposer, cache_dir=context.shared_cache)
    runner.owned += [llm] + ([decomposer] if decomposer is not None else [])
    return runner
