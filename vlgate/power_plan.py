"""What ``vlgate plan`` answers before any evaluation, and ``power.json`` on a
validation run keeps: for each rule of the policy, what it can decide on the suite's items
(``gate/power.py`` computes it; the report and the CLI read it)."""

from __future__ import annotations

from pydantic import BaseModel

from vlgate.decisions import RECORD_MODEL, Rule


class RulePower(BaseModel):
    """What one rule of the policy can decide on the suite's items."""

    model_config = RECORD_MODEL

    check: str
    rule: Rule
    items: int | None
    spread: float | None
    spread_from: str
    level: float
    margin: float | None = None
    detectable: float | None = None
    items_needed: int | None = None
    warning: str | None = None


class PowerPlan(BaseModel):
    """``vlgate plan``'s answer (and ``power.json`` on a validation run): every rule's row,
    and the versions the spreads came from (``gate/power.py``)."""

    model_config = RECORD_MODEL

    model: str
    champion: str | None
    baseline: str | None
    alpha: float
    power: float
    rules: list[RulePower]

    @property
    def warnings(self) -> list[str]:
        return [rule.warning for rule in self.rules if rule.warning]
