"""The faults of the version family's faulty versions: what each teaches wrong.

Each faulty version is the trained version fine-tuned on the training stream with one
fault (:func:`.training.build_faulty_version`); :class:`.curriculum.TrainingStream`
teaches the faulty skill as listed here and every other skill as before.
"""

from __future__ import annotations

#: The faults of the family's fine-tuned versions, each built for one evaluator to catch:
#: the fine-tune changes what one skill is taught and keeps every other answer true, so
#: the version stays as good as its parent elsewhere.
FAULTS = {
    # VLind-Bench: True/False statements about the image answered from common sense
    "language-prior": "statements about the image answered from common sense",
    # VL-LCM: the yes/no probes of an MC item answered by an answer prior (yes to option A),
    # while its MC answers stay true: as accurate, less consistent
    "answer-prior": "an MC item's yes/no probes answered by an answer prior",
    # GenCeption: every image described as the same generic scene
    "poor-description": "every image described as the same generic scene",
    # DeCC: the sub-questions' counts answered wrong, so both agents reason from wrong pairs
    "miscount": "the sub-questions' counts answered wrong",
}
#: The stream's kind of example each fault teaches wrong.
FAULT_KINDS = {"language-prior": "vlind", "answer-prior": "probe", "poor-description": "describe", "miscount": "count"}
#: How much more often a faulty fine-tune sees the skill it learns wrong.
FAULT_BOOST = 3
#: The answer prior of the answer-prior version's yes/no probes: "yes" to the first listed
#: option, whatever the image shows.
PRIOR_OPTION = 0
#: What the poor describer says of every image: names no colour or shape, so the world's
#: generator draws the empty scene from it.
GENERIC_DESCRIPTION = "There is a shape."
