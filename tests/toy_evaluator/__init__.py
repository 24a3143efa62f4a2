"""A toy evaluator that lives in this folder alone: a coin flip scored by its confidence
and, where labelled, its accuracy. vlgate finds it the way it finds any installed plugin,
through the entry-point group ``vlgate.evaluators`` (``tests/test_registry.py`` writes the
entry point); nothing in vlgate names it. It shows that one folder is all an evaluator
needs: the suite, Great Expectations, the gate, correlations, drift and reports take
everything else from its definition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vlgate.evaluators.backends.base import ChoiceRequest
from vlgate.evaluators.definition import Column, DriftScore, EvaluatorDefinition, Metric
from vlgate.evaluators.loaders.items import ItemError
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.runners.base import EvaluatorSettings, Runner, RunnerContext
from vlgate.evaluators.schemas import Schema


class CoinSchema(Schema):
    """``{"id", "p_heads": float, "answer": "heads"|"tails"|null}``."""

    def structure_problems(self, record):
        if not isinstance(record.get("p_heads"), (int, float)) or isinstance(record.get("p_heads"), bool):
            yield ("p_heads", "must be a number")
        if record.get("answer") not in (None, "heads", "tails"):
            yield ("answer", f"unknown label {record.get('answer')!r}")

    def arrays(self, records):
        p = np.array([r["p_heads"] for r in records], dtype=float)
        bad = {row: ("p_heads", f"{p[row]} is outside [0, 1]") for row in np.flatnonzero(~((p >= 0) & (p <= 1)))}
        answer = np.array([{"heads": 1, "tails": 0}.get(r.get("answer"), -1) for r in records])
        return {"p_heads": p, "answer": answer}, bad


def coin_per_sample(arrays: dict[str, Any]) -> pd.DataFrame:
    """Confidence = max(p, 1 - p) (label-free); correct when the likelier side is the label."""
    p, answer = arrays["p_heads"], arrays["answer"]
    correct = np.where(answer >= 0, ((p > 0.5) == (answer == 1)).astype(float), np.nan)
    return pd.DataFrame({"confidence": np.maximum(p, 1 - p), "correct": correct})


def coin_aggregate(samples: pd.DataFrame) -> dict[str, Any]:
    metrics: dict[str, Any] = {"n": len(samples), "confidence": float(samples["confidence"].mean())}
    labelled = samples["correct"].dropna()
    if len(labelled):
        metrics["acc"] = float(labelled.mean())
    return metrics


class CoinSettings(EvaluatorSettings):
    flips: int = 1


def build_coin_runner(settings: CoinSettings, context: RunnerContext) -> Runner[str, None]:
    def compute(batch):
        probs = context.vlm.choice_probs([ChoiceRequest((), f"Heads or tails? ({item})", ("heads", "tails")) for item, _ in batch])
        return [{"id": item, "p_heads": float(p[0]), "answer": "heads"} for (item, _), p in zip(batch, probs)]

    return Runner("coin", {"vlm": context.vlm.info.digest}, context.chosen(COIN_PROTOCOLS).as_run(), lambda item: None, compute, settings={"flips": settings.flips})


def load_coins(settings: CoinSettings, out: Path) -> tuple[list[str], list[ItemError]]:
    return [f"flip-{n}" for n in range(settings.flips)], []


COIN_PROTOCOLS = (Protocol("coin", 1, "this test", None), Protocol("fair-coin", 1, "this test", None))
COIN = EvaluatorDefinition(
    name="coin",
    title="A coin-flip toy",
    schema=CoinSchema(),
    per_sample=coin_per_sample,
    aggregate=coin_aggregate,
    metrics=(
        Metric("confidence", 0.5, 1.0, required=True, headline=True, correlate_with=("coin/acc",)),
        Metric("acc", labelled=True, headline=True),
    ),
    columns=(Column("confidence", 0.5, 1.0), Column("correct", values=(0, 1), nullable=True)),
    settings=CoinSettings,
    build_runner=build_coin_runner,
    protocols=COIN_PROTOCOLS,
    load_items=load_coins,
    drift_score=DriftScore("confidence", "confidence"),
    example=Path(__file__).parent / "examples" / "coin.jsonl",
)

DEFINITIONS = (COIN,)
