"""VLind-Bench runner (docs/metrics.md#vlind): the benchmark's four tests, answers generated and
parsed the way the benchmark parses them (first word that is exactly true/false).

Each test is a pair: the statement that should be judged True first, the one that
should be judged False second.
- CK: factual image, common-sense template; s_fact (``false_statement``) then s_cf.
- VP: the best counterfactual image (``best_image``); the existent noun, then the non-existent.
- CB: the best counterfactual image with the context; s_cf then s_fact.
- LP: every accepted counterfactual image (``counterfactual_images``); s_cf then s_fact.
The generated texts are kept in the record (``responses``) for review.

The suite's entry may change the benchmark's inclusion rules for its own release format
(``vote_threshold``, ``style``: :mod:`vlgate.evaluators.loaders.vlind_bench`); a changed rule is
part of the protocol as run (``vlind-bench-1+vote_threshold=3``), so its numbers are never
compared with the default's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from PIL import Image
from pydantic import JsonValue

from vlgate.evaluators.backends.base import GenerateRequest, VisionLanguageBackend
from vlgate.evaluators.loaders.items import ItemError, ItemLoadError, VlindItem, open_image
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.base import Runner, RunnerContext
from vlgate.evaluators.vlind import prompts, protocols
from vlgate.evaluators.vlind.metrics import parse_true_false
from vlgate.evaluators.vlind.settings import VlindSettings

#: What a runner opens per item: the factual image, the best counterfactual image (VP, CB)
#: and the accepted counterfactual images (LP)
VlindImages = tuple[Image.Image, Image.Image, list[Image.Image]]


def vlind_requests(
    item: VlindItem, factual: Image.Image, best: Image.Image, counterfactual: list[Image.Image], asked: prompts.VlindPrompts = prompts.VLIND_BENCH, max_new_tokens: int = 64
) -> list[tuple[str, GenerateRequest]]:
    """(test name, request) in record order: ck×2, vp×2, cb×2, then lp×2 per accepted counterfactual image."""
    s_cf, s_fact = item.true_statement, item.false_statement

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


def vlind_runner(
    vlm: VisionLanguageBackend, protocol: Protocol[prompts.VlindPrompts] = protocols.VLIND[0], overrides: Mapping[str, int | str | None] | None = None
) -> Runner[VlindItem, VlindImages]:
    """``overrides``: the suite's changes to the protocol (``VlindSettings.protocol_overrides``),
    which the records' ``protocol`` names."""

    def prepare(item: VlindItem) -> VlindImages:
        if not item.counterfactual_images:
            raise ItemLoadError(ItemError(str(item.factual_image.parent), item.id, "counterfactual_images", "no counterfactual image"))
        factual = open_image(item.factual_image, item.id, "factual_image")
        opened: dict[Path, Image.Image] = {}
        counterfactual = []
        for i, path in enumerate(item.counterfactual_images):
            opened[path] = open_image(path, item.id, f"counterfactual_images[{i}]")
            counterfactual.append(opened[path])
        best = opened[item.best_image] if item.best_image in opened else open_image(item.best_image, item.id, "best_image")
        return factual, best, counterfactual

    def compute(batch: list[tuple[VlindItem, VlindImages]]) -> list[Record]:
        answer_limit = (overrides or {}).get("answer")
        limit = protocol.limit("answer", answer_limit if isinstance(answer_limit, int) else None)
        per_item = [vlind_requests(item, factual, best, counterfactual, protocol.prompts, limit) for item, (factual, best, counterfactual) in batch]
        texts = iter(vlm.generate([request for requests in per_item for _, request in requests]))
        records: list[Record] = []
        for (item, _), requests in zip(batch, per_item):
            responses = [next(texts) for _ in requests]
            answers: list[JsonValue] = [parse_true_false(text) for text in responses]
            record: Record = {"id": item.id, "concept": item.concept, "ck": answers[0:2], "vp": answers[2:4], "cb": answers[4:6]}
            record["lp"] = [answers[i : i + 2] for i in range(6, len(answers), 2)]
            by_question: dict[str, list[JsonValue]] = {name: [] for name in ("ck", "vp", "cb", "lp")}
            for (name, _), text in zip(requests, responses):
                by_question[name].append(text)
            record["responses"] = {name: texts for name, texts in by_question.items()}
            records.append(record)
        return records

    return Runner("vlind", {"vlm": vlm.info.digest}, protocol.as_run(**(overrides or {})), prepare, compute)


def build_vlind_runner(settings: VlindSettings, context: RunnerContext) -> Runner[VlindItem, VlindImages]:
    return vlind_runner(context.vlm, context.chosen(protocols.VLIND), settings.protocol_overrides())
