"""VLind-Bench's protocols (docs/metrics.md#protocols): the benchmark's released scoring and
vlgate's."""

from __future__ import annotations

from vlgate.evaluators.protocols import VLGATE, VLGATE_DIFFERENCES, Protocol
from vlgate.evaluators.vlind import prompts

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
        differences=(*VLGATE_DIFFERENCES, *_VLIND_SCORING_DIFFERENCES),
    ),
)

