"""The gate a policy judges with: the fixed-sample gate once on every item (``fixed.py``),
or the group-sequential gate at one look of its design (``sequential.py``). Both answer
:class:`Gate`; :func:`gate_for` chooses from the policy and the look, and :func:`decide`
is the one call the flows, ``vlgate gate`` and the tests judge through."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Protocol

from vlgate.decisions import GateVerdict
from vlgate.gate import fixed, sequential
from vlgate.gate.checks import Outputs
from vlgate.gate.policy import GatePolicy


class Gate(Protocol):
    def decide(self, candidate: Outputs, champion: Outputs | None, today: date | None = None) -> GateVerdict:
        """Judge a candidate's outputs against the champion's (None: the model has none yet);
        ``today`` (UTC by default) is the day waivers are checked against."""
        ...


@dataclass(frozen=True)
class FixedSampleGate:
    """Every item, judged once (``fixed.py``)."""

    policy: GatePolicy

    def decide(self, candidate: Outputs, champion: Outputs | None, today: date | None = None) -> GateVerdict:
        return fixed.decide_once(self.policy, candidate, champion, today)


@dataclass(frozen=True)
class SequentialGate:
    """One look (0-based) of the policy's ``sequential`` design, on that look's records (``sequential.py``)."""

    policy: GatePolicy
    look: int

    def decide(self, candidate: Outputs, champion: Outputs | None, today: date | None = None) -> GateVerdict:
        return sequential.decide_at_look(self.policy, candidate, champion, self.look, today)


def gate_for(policy: GatePolicy, look: int | None = None) -> Gate:
    """The sequential gate at ``look`` for a policy with a ``sequential`` design judged at a
    look; the fixed-sample gate otherwise."""
    if look is not None and policy.sequential is not None:
        return SequentialGate(policy, look)
    return FixedSampleGate(policy)


def decide(policy: GatePolicy, candidate: Outputs, champion: Outputs | None, today: date | None = None, look: int | None = None) -> GateVerdict:
    """Judge a candidate under ``policy`` (at ``look`` of its sequential design, where it has
    one): :func:`gate_for`'s gate."""
    return gate_for(policy, look).decide(candidate, champion, today)
