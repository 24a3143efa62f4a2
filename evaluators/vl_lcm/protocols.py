"""VL-LCM's protocols (docs/metrics.md#protocols): lcm-mc as MMMU's authors, lmms-eval and
vlgate ask it; lcm-nb as NaturalBench's authors, lmms-eval and vlgate ask it."""

from __future__ import annotations

from vlgate.evaluators.protocols import VLGATE, VLGATE_DIFFERENCES, Protocol
from vlgate.evaluators.vl_lcm import prompts

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
        differences=VLGATE_DIFFERENCES,
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
    Protocol(VLGATE, 1, "vlgate (NaturalBench's answer suffixes; VL-LCM paper §3.3's MC tests)", prompts.VLGATE_NATURALBENCH, differences=VLGATE_DIFFERENCES),
)

