"""VLind-Bench runner (SPEC §2.3): the benchmark's four tests, answers generated and
parsed the way the benchmark parses them (first word that is exactly true/false).

Each test is a pair: the statement that should be judged True first, the one that
should be judged False second.
- CK: factual image, common-sense template; s_fact (``false_statement``) then s_cf.
- VP: the best (first) counterfactual image; the existent noun, then the non-existent.
- CB: the best counterfactual image with the context; s_cf then s_fact.
- LP: every accepted counterfactual image; s_cf then s_fact.
The generated texts are kept in the record (``responses``) for review.
"""

from __future__ import annotations

from typing import Any

from PIL import Image

from vlgate.evaluators import prompts, protocols
from vlgate.evaluators.backends.base import GenerateRequest, VisionLanguageBackend
from vlgate.evaluators.loaders.items import ItemError, ItemLoadError, VlindItem, open_image
from vlgate.evaluators.metrics.vlind import parse_true_false
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.runners.base import EvaluatorSettings, Runner, RunnerContext


def vlind_requests(
    item: VlindItem, factual: Image.Image, counterfactual: list[Image.Image], asked: prompts.VlindPrompts = prompts.VLIND_BENCH, max_new_tokens: int = 16
) -> list[tuple[str, GenerateRequest]]:
    """(test name, request) in record order: ck×2, vp×2, cb×2, then lp×2 per counterfactual image."""
    s_cf, s_fact, best = item.true_statement, item.false_statement, counterfactual[0]

    def ask(name: str, image: Image.Image, text: str) -> tuple[str, GenerateRequest]:
        return name, GenerateRequest((image,), text, max_new_tokens)

    requests = [
        ask("ck", factual, asked.commonsense(s_fact)),
        ask("ck", factual, asked.commonsense(s_cf)),
        ask("vp", best, asked.object(item.existent_noun)),
        ask("vp", best, asked.object(item.non_existent_noun)),
        ask("cb", best, asked.context(item.context, s_cf)),
        ask("cb", best, asked.context(item.context, s_fact)),
    ]
    for image in counterfactual:
        requests += [ask("lp", image, asked.image(s_cf)), ask("lp", image, asked.image(s_fact))]
    return requests


def vlind_runner(vlm: VisionLanguageBackend, protocol: Protocol[prompts.VlindPrompts] = protocols.VLIND[0]) -> Runner[VlindItem, tuple[Image.Image, list[Image.Image]]]:
    def prepare(item: VlindItem) -> tuple[Image.Image, list[Image.Image]]:
        if not item.counterfactual_images:
            raise ItemLoadError(ItemError(str(item.factual_image.parent), item.id, "counterfactual_images", "no counterfactual image"))
        factual = open_image(item.factual_image, item.id, "factual_image")
        counterfactual = [open_image(path, item.id, f"counterfactual_images[{i}]") for i, path in enumerate(item.counterfactual_images)]
        return factual, counterfactual

    def compute(batch: list[tuple[VlindItem, tuple[Image.Image, list[Image.Image]]]]) -> list[dict[str, Any]]:
        limit = protocol.limit("answer")
        per_item = [vlind_requests(item, factual, counterfactual, protocol.prompts, limit) for item, (factual, counterfactual) in batch]
        texts = iter(vlm.generate([request for requests in per_item for _, request in requests]))
        records = []
        for (item, _), requests in zip(batch, per_item):
            responses = [next(texts) for _ in requests]
            answers = [parse_true_false(text) for text in responses]
            record: dict[str, Any] = {"id": item.id, "concept": item.concept, "ck": answers[0:2], "vp": answers[2:4], "cb": answers[4:6]}
            record["lp"] = [answers[i : i + 2] for i in range(6, len(answers), 2)]
            record["responses"] = {name: [] for name in ("ck", "vp", "cb", "lp")}
            for (name, _), text in zip(requests, responses):
                record["responses"][name].append(text)
            records.append(record)
        return records

    return Runner("vlind", {"vlm": vlm.info.digest}, protocol.as_run(), prepare, compute)


def build_vlind_runner(settings: EvaluatorSettings, context: RunnerContext) -> Runner[VlindItem, tuple[Image.Image, list[Image.Image]]]:
    return vlind_runner(context.vlm, context.chosen(protocols.VLIND))
