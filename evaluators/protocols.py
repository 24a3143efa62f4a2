"""Named evaluation protocols: for each evaluator, what is asked, with which generation
limits, following which benchmark's released evaluation code (docs/metrics.md#protocols).

A suite picks one per evaluator (``protocol: NAME``; the first listed is the default, the
benchmark authors' own code where there is one). What it fixes:

* the prompt text (a prompt set of ``evaluators/prompts.py``);
* generation limits (``max_new_tokens`` per kind of generated answer; a suite may change
  one, and the protocol as run then says so: ``genception-1+description=96``); likewise an
  inclusion rule of the benchmark's scoring that a suite changes
  (``vlind-bench-1+style=cartoon+vote_threshold=3``);
* everything else that is the same under every protocol is stated once in the metric
  modules and docs/metrics.md: an unanswered question (a tie at the top of the options'
  probabilities, or an answer the benchmark's parser cannot read) is wrong, and is counted
  (``n_unanswered``).

The protocol as run is written into every record (``protocol``) and its fingerprint, logged
as the run's MLflow param ``protocol.EVALUATOR``, and checked by the gate: a rule that
compares a candidate with a champion measured under another protocol fails closed with
the two protocols named, so numbers from different protocols are never compared silently.
A record set that mixes protocols is refused when scored, naming the odd records.

``differences`` lists, per protocol, what vlgate still does differently from the code it
follows, on purpose; the README's "Protocols" section shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from vlgate.evaluators import prompts

P = TypeVar("P")


@dataclass(frozen=True)
class Protocol(Generic[P]):
    """One named way to run an evaluator. ``follows`` names the released code it
    reproduces (repository and file); ``prompts`` is its prompt set; ``max_new_tokens`` its
    generation limits by kind; ``loader_options`` what it tells the data set's loader (how the
    released code reads its inputs); ``differences`` what vlgate still does otherwise, on purpose."""

    name: str
    version: int
    follows: str
    prompts: P
    max_new_tokens: Mapping[str, int] = field(default_factory=dict)
    differences: tuple[str, ...] = ()
    loader_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``NAME-VERSION``: what records, fingerprints and MLflow carry."""
        return f"{self.name}-{self.version}"

    def limit(self, kind: str, override: int | None = None) -> int:
        """The generation limit of ``kind``, or the suite's ``override`` of it."""
        return override if override is not None else self.max_new_tokens[kind]

    def as_run(self, **overrides: int | str | None) -> str:
        """The protocol as run: its id, then every generation limit (or inclusion rule) the
        suite changed (``genception-1+description=96``), so a changed limit is a different
        protocol. None, or a limit's own value, is no change."""
        changed = {kind: value for kind, value in overrides.items() if value is not None and value != self.max_new_tokens.get(kind)}
        return self.id + "".join(f"+{kind}={value}" for kind, value in sorted(changed.items()))


class UnknownProtocolError(ValueError):
    pass


def choose(protocols: tuple[Protocol[Any], ...], evaluator: str, name: str | None) -> Protocol[Any]:
    """The protocol called ``name`` (None: the default, the first) among an evaluator's."""
    if name is None:
        return protocols[0]
    for protocol in protocols:
        if name in (protocol.name, protocol.id):
            return protocol
    known = ", ".join(protocol.name for protocol in protocols)
    raise UnknownProtocolError(f"{evaluator} has no protocol {name!r} (it has {known})")


#: The world's prompts: what the synthetic world's models are trained on, so the world's
#: suite runs every evaluator under it.
VLGATE = "vlgate"

_VLGATE_DIFFERENCES = ("vlgate's own prompts, which the synthetic world's models are trained on: no benchmark's numbers to compare with",)

#: What every MMMU protocol does otherwise than the released harnesses, on purpose.
_MMMU_DIFFERENCES = (
    "answers are the first token's probabilities over the option letters, not parsed from generated text (the authors' "
    "code samples with 5 beams, 128 tokens); a tie is unanswered and wrong, where parse_multi_choice_response picks a "
    "random letter (seed 42), right with chance 1/K",
    "VL-LCM's K yes/no probes (paper App. C) are added: the question, then 'Is the answer \"OPTION\"? Please answer yes or no.'",
)

LCM_MC: tuple[Protocol[prompts.MultipleChoicePrompts], ...] = (
    Protocol(
        "mmmu",
        1,
        "MMMU-Benchmark/MMMU mmmu/utils/data_utils.py construct_prompt with configs/llava1.5.yaml, process_single_sample "
        "(image_1 alone, also for a multi-image question); utils/eval_utils.py (accuracy weighted by count)",
        prompts.MMMU_AUTHORS,
        differences=(
            *_MMMU_DIFFERENCES,
            "a question whose options hold several <img='path'> tags (a layout older than the Hub release, which writes "
            "<image N>) is asked with image_1 like any other; process_single_sample gives it no image and run_llava.py's "
            "engine a random letter",
        ),
    ),
    Protocol(
        "lmms-eval",
        1,
        "EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/mmmu/utils.py construct_prompt (mmmu_val's default kwargs), "
        "mmmu_doc_to_visual (the images the question's and options' <image N> name, each once, in number order)",
        prompts.MMMU_LMMS_EVAL,
        differences=(
            *_MMMU_DIFFERENCES,
            "a question whose text names none of its images is asked with all of them (mmmu_doc_to_visual sends none), and a "
            "placeholder naming an image the row lacks is passed over (mmmu_doc_to_visual fails on it)",
        ),
    ),
    Protocol(
        VLGATE,
        1,
        "vlgate (VL-LCM paper App. C: MMMU's MC instruction and its yes/no adaptation; every image of a multi-image question, in number order)",
        prompts.VLGATE_MULTIPLE_CHOICE,
        differences=_VLGATE_DIFFERENCES,
    ),
)

#: What every NaturalBench protocol does otherwise than the released harnesses, on purpose.
_NATURALBENCH_DIFFERENCES = (
    "answers are the first token's probabilities over the option tokens (Yes/No, A/B), not parsed from generated text; "
    "a tie is unanswered and wrong, as the harnesses' extract_answer returning -1 is",
    "the answer pattern is read from the data (c1 / c2) instead of assuming Yes, No, No, Yes (A, B, B, A) for (Q0,I0), (Q0,I1), (Q1,I0), (Q1,I1)",
    "multiple_choice units are pooled with the yes_no units as the harnesses pool them, 'A' in 'Yes''s place and 'B' in "
    "'No''s; their answers are the first token's probabilities over the letters A/B, where extract_answer takes the first "
    "whole word 'A' or 'B' in any case (so the article 'a' reads as A)",
    "VL-LCM's four MC tests (paper §3.3) are added, asked as NaturalBench multiple_choice questions; for a multiple_choice "
    "unit they ask for the question (image) whose answer is 'A' instead of 'yes'",
)

LCM_NB: tuple[Protocol[prompts.NaturalBenchPrompts], ...] = (
    Protocol(
        "naturalbench",
        1,
        "Baiqi-Li/NaturalBench naturalbench_vqa.py (question and SUFFIX_FOR_VQA concatenated; get_scores)",
        prompts.NATURALBENCH_AUTHORS,
        differences=_NATURALBENCH_DIFFERENCES,
    ),
    Protocol(
        "lmms-eval",
        1,
        "EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/naturalbench/utils.py (naturalbench_doc_to_text: question, a space, the suffix)",
        prompts.NATURALBENCH_LMMS_EVAL,
        differences=(*_NATURALBENCH_DIFFERENCES, "plain accuracy is reported too (lmms-eval's naturalbench_Acc is registered as naturalbench_ACC and never aggregated)"),
    ),
    Protocol(VLGATE, 1, "vlgate (NaturalBench's answer suffixes; VL-LCM paper §3.3's MC tests)", prompts.VLGATE_NATURALBENCH, differences=_VLGATE_DIFFERENCES),
)

#: What both VLind protocols do otherwise than score_pipeline.py, on purpose.
_VLIND_SCORING_DIFFERENCES = (
    "a pipeline score with nothing to average over (s_cb where no instance passed CK, s_lp where none passed CK, VP and CB; "
    "overall or per concept) is null, where score_pipeline.py reports 0",
    "an instance with no image at the vote threshold is reported as an item error (n_item_errors) where the released "
    "scripts skip it silently; neither scores it",
)

VLIND: tuple[Protocol[prompts.VlindPrompts], ...] = (
    Protocol(
        "vlind-bench",
        1,
        "klee972/VLind-Bench eval/gpt4o_eval.py (prompt types commonsense_TF, simple_TF, detailed_TF, detailed_TF for CK, VP, CB, LP; "
        "factual image 0 for CK, best_img_id for VP and CB, each image with enough votes for LP; infer_true_or_false), "
        "eval/instructblip_eval.py (greedy, max_new_tokens=64: the released script for an open-weights model), "
        "eval/score_pipeline.py (vote_thres 2, style, pipeline scores and raw accuracies)",
        prompts.VLIND_BENCH,
        {"answer": 64},
        differences=(
            "the image comes before the text in the user turn (every vlgate backend's layout), decoded and re-encoded by the "
            "backend; gpt4o_eval.py sends the text part first and the JPEG file as it is, instructblip_eval.py gives both to "
            "InstructBLIP's processor",
            "answers are cut at 64 new tokens, greedy, as instructblip_eval.py generates; gpt4o_eval.py asks its API for up to "
            "4096 tokens at temperature 0, so a model that writes True or False only after 64 tokens is unanswered here",
            "instructblip_eval.py's own prompts (the instruction first, 'Based on common sense', no 'Forget real-world common "
            "sense' sentence), which the paper used for InstructBLIP alone, are not offered",
            *_VLIND_SCORING_DIFFERENCES,
        ),
    ),
    Protocol(
        VLGATE,
        1,
        "vlgate (VLind-Bench's templates with 16-token answers)",
        prompts.VLIND_BENCH,
        {"answer": 16},
        differences=(*_VLGATE_DIFFERENCES, *_VLIND_SCORING_DIFFERENCES),
    ),
)

GENCEPTION: tuple[Protocol[prompts.GenceptionPrompts], ...] = (
    Protocol(
        "genception",
        1,
        "EQTPartners/GenCeption genception/exp_llava.py, genception/evaluation.py",
        prompts.GENCEPTION,
        {"description": 512},
        differences=(
            "T must be the same for every record of a set (the released gc_score keeps chains of T-1 iterations and scores them as GC@(T-1))",
            "seed images are read from category folders (one folder, as the released --dataset, is the category named after it); "
            "hidden files (._x.jpg beside x.jpg on a copy from macOS) are passed over, where find_image_files tries to read them",
        ),
        # genception/file_utils.py find_image_files: {".jpg", ".png"}, the suffix compared in lower case
        loader_options={"image_suffixes": (".jpg", ".png")},
    ),
    Protocol(VLGATE, 1, "vlgate (GenCeption's prompts with 96-token descriptions, what the world's small VLM can write)", prompts.GENCEPTION, {"description": 96}, differences=_VLGATE_DIFFERENCES),
)

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
