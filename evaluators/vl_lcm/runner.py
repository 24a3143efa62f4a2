"""VL-LCM runners: multiple-choice VQA (docs/metrics.md#lcm-mc) and NaturalBench format (#lcm-nb).

MC: per sample one MC prompt (option letters) and K yes/no probes, one per option. All
K+1 prompts repeat the image(s) and the question (a multi-image question's images are
those its protocol selects: ``MultipleChoicePrompts.images``), so they are sent with that as their
shared prefix and a backend that can computes it once (the full VL-LCM then costs little
more than the MC accuracy alone: benchmarks/bench_scoring.py).

NaturalBench: per unit the four yes/no tests (V_i, T_j) with NaturalBench's suffix, the
two text-choice tests (one image, choose T1 or T2) and the two image-choice tests (one
text, both images, choose the first or the second). A multiple_choice unit's four
(V_i, T_j) tests are its A/B questions with NaturalBench's MC suffix, "A" in "Yes"'s place.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image
from pydantic import JsonValue

from vlgate.evaluators import prompts as shared_prompts
from vlgate.evaluators.backends.base import ChoiceRequest, VisionLanguageBackend
from vlgate.evaluators.loaders.items import ItemError, McItem, NbUnit, open_image
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.base import EvaluatorSettings, Runner, RunnerContext
from vlgate.evaluators.vl_lcm import prompts, protocols
from vlgate.evaluators.vl_lcm.settings import LcmNbSettings

YES_NO = ("Yes", "No")
TWO_LETTERS = ("A", "B")


def lcm_mc_requests(item: McItem, images: Image.Image | tuple[Image.Image, ...], asked: prompts.MultipleChoicePrompts = prompts.VLGATE_MULTIPLE_CHOICE) -> list[ChoiceRequest]:
    """The MC prompt first, then the K yes/no probes in option order, as the protocol's
    prompt set ``asked`` words them. ``images`` are the ones the protocol selected
    (:func:`lcm_mc_images`; one image stands for itself alone). All K+1 repeat the images
    and the question; the question is their shared prefix where every prompt starts with it."""
    sent = (images,) if isinstance(images, Image.Image) else tuple(images)
    letters = tuple(shared_prompts.OPTION_LETTERS[: len(item.options)])
    texts = [asked.multiple_choice(item.question, item.options)] + [asked.yes_no_probe(item.question, option) for option in item.options]
    shared = item.question if all(text.startswith(item.question) for text in texts) else None
    return [ChoiceRequest(sent, texts[0], letters, shared_prefix=shared)] + [ChoiceRequest(sent, text, YES_NO, shared_prefix=shared) for text in texts[1:]]


def lcm_mc_images(item: McItem, asked: prompts.MultipleChoicePrompts = prompts.VLGATE_MULTIPLE_CHOICE) -> tuple[Image.Image, ...]:
    """The item's images the protocol's rule (``asked.images``) selects, opened, in the
    rule's order; a bad one is the item's error, named by its field (``image``, or MMMU's
    ``image_N`` for a further image)."""
    paths = item.images
    return tuple(open_image(paths[n], item.id, "image" if n == 0 else f"image_{n + 1}") for n in asked.images(item.question, item.options, len(paths)))


def lcm_mc_runner(vlm: VisionLanguageBackend, protocol: Protocol[prompts.MultipleChoicePrompts] = protocols.LCM_MC[0]) -> Runner[McItem, tuple[Image.Image, ...]]:
    def compute(batch: list[tuple[McItem, tuple[Image.Image, ...]]]) -> list[Record]:
        requests = [request for item, images in batch for request in lcm_mc_requests(item, images, protocol.prompts)]
        probabilities = iter(vlm.choice_probs(requests))
        records: list[Record] = []
        for item, _ in batch:
            p_mc = next(probabilities)
            p_yes: list[JsonValue] = [float(next(probabilities)[0]) for _ in item.options]
            record: Record = {
                "id": item.id,
                "p_mc": [float(p) for p in p_mc],
                "p_yes": p_yes,
                "answer": item.answer,
                "category": item.category,
                "question": item.question,
                "options": list(item.options),
                "image": str(item.image),  # for the report's review of low-LCM samples
            }
            if item.more_images:  # a multi-image question: all its images, in number order (which were sent is the protocol's rule)
                record["images"] = [str(path) for path in item.images]
            records.append(record)
        return records

    return Runner("lcm-mc", {"vlm": vlm.info.digest}, protocol.as_run(), lambda item: lcm_mc_images(item, protocol.prompts), compute)


def lcm_nb_requests(unit: NbUnit, images: tuple[Image.Image, Image.Image], asked: prompts.NaturalBenchPrompts = prompts.VLGATE_NATURALBENCH) -> list[ChoiceRequest]:
    """y11, y12, y21, y22, then a (V1), b (V2), then u (T1), w (T2), as the protocol's prompt set ``asked`` words them.

    A multiple_choice unit (``unit.question_type``) is asked (V_i, T_j) as its MC question
    with NaturalBench's MC suffix (``asked.multiple_choice``), over its option letters
    (``unit.options``, "A" first: "A" plays "yes", so y_ij = P(A)); its four VL-LCM MC tests
    are the same tests, their stem asking for the question (image) whose answer is "A"."""
    if unit.question_type == "multiple_choice":
        kind, answers = "multiple_choice", unit.options or TWO_LETTERS
        requests = [ChoiceRequest((images[i],), asked.multiple_choice(unit.texts[j]), answers) for i in range(2) for j in range(2)]
    else:
        kind = unit.text_kind
        requests = [ChoiceRequest((images[i],), asked.yes_no(unit.texts[j], kind), YES_NO) for i in range(2) for j in range(2)]
    requests += [ChoiceRequest((images[i],), asked.choose_text(unit.texts, kind), TWO_LETTERS) for i in range(2)]
    requests += [ChoiceRequest(images, asked.choose_image(unit.texts[j], kind), TWO_LETTERS) for j in range(2)]
    return requests


def lcm_nb_runner(vlm: VisionLanguageBackend, protocol: Protocol[prompts.NaturalBenchPrompts] = protocols.LCM_NB[0]) -> Runner[NbUnit, tuple[Image.Image, Image.Image]]:
    def prepare(unit: NbUnit) -> tuple[Image.Image, Image.Image]:
        return (open_image(unit.images[0], unit.id, "images[0]"), open_image(unit.images[1], unit.id, "images[1]"))

    def compute(batch: list[tuple[NbUnit, tuple[Image.Image, Image.Image]]]) -> list[Record]:
        requests = [request for unit, images in batch for request in lcm_nb_requests(unit, images, protocol.prompts)]
        probabilities = vlm.choice_probs(requests)
        records: list[Record] = []
        for n, (unit, _) in enumerate(batch):
            p: list[list[JsonValue]] = [[float(x) for x in probs] for probs in probabilities[8 * n : 8 * n + 8]]
            records.append(
                {
                    "id": unit.id,
                    "p_yes": [[p[0][0], p[1][0]], [p[2][0], p[3][0]]],
                    "p_text": [p[4], p[5]],
                    "p_image": [p[6], p[7]],
                    "answer": unit.answer,
                    "category": unit.category,
                    "texts": list(unit.texts),
                    "images": [str(path) for path in unit.images],
                    **({"question_type": unit.question_type} if unit.question_type != "yes_no" else {}),
                }
            )
        return records

    return Runner("lcm-nb", {"vlm": vlm.info.digest}, protocol.as_run(), prepare, compute)


def build_lcm_mc_runner(settings: EvaluatorSettings, context: RunnerContext) -> Runner[McItem, tuple[Image.Image, ...]]:
    return lcm_mc_runner(context.vlm, context.chosen(protocols.LCM_MC))


def build_lcm_nb_runner(settings: LcmNbSettings, context: RunnerContext) -> Runner[NbUnit, tuple[Image.Image, Image.Image]]:
    return lcm_nb_runner(context.vlm, context.chosen(protocols.LCM_NB))


def load_nb_units(settings: LcmNbSettings, out: Path) -> tuple[list[NbUnit], list[ItemError]]:
    """The units to run (and the loader's per-item errors). With ``pair_seed``, units are
    built by seeded pairing of unlabelled image-question pairs; the pairing is written
    beside the records (``pairing.json``) so every version is scored on the same units
    (docs/metrics.md#lcm-nb)."""
    from vlgate.evaluators.loaders import load_dataset, pair_unlabelled

    if settings.pair_seed is None:
        dataset = load_dataset("lcm-nb", settings.data, settings.format)
        return dataset.items[: settings.limit], dataset.errors
    pairs = load_dataset("yes-no", settings.data, settings.format)
    units, pairing = pair_unlabelled(pairs.items, settings.pair_seed)
    (out / "lcm-nb").mkdir(parents=True, exist_ok=True)
    (out / "lcm-nb" / "pairing.json").write_text(json.dumps(pairing.as_dict(), indent=2))
    return units[: settings.limit], pairs.errors
