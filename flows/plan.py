"""What one validation runs on, read once when its flow starts: the model's suite and gate
policy from ``vlgate.yaml``, loaded, checked against each other, and handed to every step
and task as one :class:`ValidationPlan` (logged with the run as ``config/plan.json``). What
the early check validated is then what every later step reads, even if the files change
while the flow runs; and a result's cache key comes from the suite's content, so editing a
comment in the suite file recomputes nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, JsonValue

from vlgate.evaluators.running.items import ItemIds, ItemSelection
from vlgate.evaluators.running.suite import Suite
from vlgate.flows.settings import ModelConfig, read_model_config
from vlgate.gate.policy import GatePolicy
from vlgate.values import replaced
from vlgate.versions import VersionRef


class ValidationPlan(BaseModel):
    """One version's validation: which version, and the suite and policy it is judged with,
    as loaded when the flow started (with the files they came from, for the record)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: str
    suite: Suite
    policy: GatePolicy
    suite_path: Path
    policy_path: Path
    #: the look being evaluated (an index into the policy's ``sequential.looks``); None:
    #: every item, in the data set's order
    look: int | None = None
    #: exactly these items instead (the champion on the candidate's items it lacks: :meth:`for_champion`)
    only_items: ItemIds | None = None

    @classmethod
    def read(cls, config: ModelConfig, subject: VersionRef) -> ValidationPlan:
        """The plan of ``subject`` under its configuration (:func:`read_model_config`)."""
        suite, policy = read_model_config(config)
        return cls(model=subject.model, version=subject.version, suite=suite, policy=policy, suite_path=config.suite, policy_path=config.policy)

    @property
    def subject(self) -> VersionRef:
        """The version validated."""
        return VersionRef(model=self.model, version=self.version)

    def at_look(self, look: int | None) -> ValidationPlan:
        return replaced(self, look=look)

    @property
    def looks(self) -> list[float]:
        """The fractions of the items judged at each look ([1.0]: one look at every item)."""
        return self.policy.sequential.looks if self.policy.sequential is not None else [1.0]

    def looks_to_run(self, complete: bool = False) -> list[int | None]:
        """The looks a validation runs until one settles: [None] (every item, judged once)
        without a sequential policy; each look's index with one; the last look alone when
        ``complete`` (every item, judged as at the last look)."""
        if self.policy.sequential is None:
            return [None]
        indices: list[int | None] = list(range(len(self.policy.sequential.looks)))
        return indices[-1:] if complete else indices

    def for_champion(self, version: str, missing: ItemIds) -> ValidationPlan:
        """The champion ``version`` on exactly the ``missing`` items of this plan's suite
        (the evaluators that lack none left out), under the same suite and protocols."""
        evaluators = {name: spec for name, spec in self.suite.evaluators.items() if missing.ids.get(name)}
        return replaced(self, version=version, suite=self.suite.model_copy(update={"evaluators": evaluators}), look=None, only_items=missing)

    @property
    def items(self) -> ItemSelection | ItemIds | None:
        """The items of this plan's look (None: every item, in the data set's order)."""
        if self.only_items is not None:
            return self.only_items
        sequential = self.policy.sequential
        if self.look is None or sequential is None:
            return None
        return ItemSelection(seed=sequential.order_seed, fraction=sequential.looks[self.look])

    @property
    def model_uri(self) -> str:
        return f"models:/{self.model}/{self.version}"

    def suite_digest(self) -> str:
        """sha256 of the suite's content as loaded (resolved paths and defaults included), not of its file's bytes."""
        return hashlib.sha256(self.suite.model_dump_json().encode()).hexdigest()

    def evaluator_digest(self, evaluator: str) -> str:
        """sha256 of what one evaluator's results depend on in the suite: the suite-wide
        settings (backend, batch size, load policy, engine options) and its own entry, so that
        changing another evaluator's entry or the suite's name recomputes nothing of it."""
        shared = self.suite.model_dump(mode="json", exclude={"evaluators", "name", "champion_items"})
        own = self.suite.evaluators[evaluator].model_dump(mode="json")
        return hashlib.sha256(json.dumps({"suite": shared, evaluator: own}, sort_keys=True).encode()).hexdigest()

    def as_logged(self) -> dict[str, JsonValue]:
        """The plan as ``config/plan.json`` holds it."""
        return self.model_dump(mode="json") | {"suite_digest": self.suite_digest()}
