"""What a named evaluation protocol is: for an evaluator, what is asked, with which
generation limits, following which benchmark's released evaluation code
(docs/metrics.md#protocols). Each evaluator's package lists its own (``protocols.py``).

A suite picks one per evaluator (``protocol: NAME``; the first listed is the default, the
benchmark authors' own code where there is one). What it fixes:

* the prompt text (a prompt set of the evaluator's ``prompts.py``);
* generation limits (``max_new_tokens`` per kind of generated answer; a suite may change
  one, and the protocol as run then says so: ``genception-1+description=96``); likewise an
  inclusion rule of the benchmark's scoring that a suite changes
  (``vlind-bench-1+style=cartoon+vote_threshold=3``);
* everything else that is the same under every protocol is stated once in the metric
  modules and docs/metrics.md: an unanswered question (a tie at the top of the options'
  probabilities, or an answer the benchmark's parser cannot read) is wrong, and is counted
  (``n_unanswered``).

The protocol as run is written into every record (``protocol``) and its fingerprint, logged
as the run's MLflow param ``protocol.EVALUATOR``, and checked by the gate: a rule that
compares a candidate with a champion measured under another protocol fails closed with
the two protocols named, so numbers from different protocols are never compared silently.
A record set that mixes protocols is refused when scored, naming the odd records.

``differences`` lists, per protocol, what vlgate still does differently from the code it
follows, on purpose; the README's "Protocols" section shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class Protocol(Generic[P]):
    """One named way to run an evaluator. ``follows`` names the released code it
    reproduces (repository and file); ``prompts`` is its prompt set; ``max_new_tokens`` its
    generation limits by kind; ``loader_options`` what it tells the data set's loader (how the
    released code reads its inputs); ``differences`` what vlgate still does otherwise, on purpose."""

    name: str
    version: int
    follows: str
    prompts: P
    max_new_tokens: Mapping[str, int] = field(default_factory=dict)
    differences: tuple[str, ...] = ()
    loader_options: Mapping[str, object] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``NAME-VERSION``: what records, fingerprints and MLflow carry."""
        return f"{self.name}-{self.version}"

    def limit(self, kind: str, override: int | None = None) -> int:
        """The generation limit of ``kind``, or the suite's ``override`` of it."""
        return override if override is not None else self.max_new_tokens[kind]

    def as_run(self, **overrides: int | str | None) -> str:
        """The protocol as run: its id, then every generation limit (or inclusion rule) the
        suite changed (``genception-1+description=96``), so a changed limit is a different
        protocol. None, or a limit's own value, is no change."""
        changed = {kind: value for kind, value in overrides.items() if value is not None and value != self.max_new_tokens.get(kind)}
        return self.id + "".join(f"+{kind}={value}" for kind, value in sorted(changed.items()))


class UnknownProtocolError(ValueError):
    pass


def choose(protocols: tuple[Protocol[P], ...], evaluator: str, name: str | None) -> Protocol[P]:
    """The protocol called ``name`` (None: the default, the first) among an evaluator's."""
    if name is None:
        return protocols[0]
    for protocol in protocols:
        if name in (protocol.name, protocol.id):
            return protocol
    known = ", ".join(protocol.name for protocol in protocols)
    raise UnknownProtocolError(f"{evaluator} has no protocol {name!r} (it has {known})")


#: The world's prompts: what the synthetic world's models are trained on, so the world's
#: suite runs every evaluator under it.
VLGATE = "vlgate"

VLGATE_DIFFERENCES = ("vlgate's own prompts, which the synthetic world's models are trained on: no benchmark's numbers to compare with",)
