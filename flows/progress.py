"""What the flows publish about the long steps, for whoever watches them.

The validation flow and its evaluator tasks, and the drift flow, publish events
(:class:`Event`) on this process's bus: a validation's stages (started, each evaluator,
Great Expectations, MLflow, correlations, gate, decision, report, done) and each
evaluator's items as its runner completes a batch (``Runner.run``'s ``on_progress``). A
display (``cli/displays.py``) subscribes while it shows them. Nothing listens by default,
so publishing is a function call; a listener's error is logged and dropped: what the flows
compute never depends on a display. Tasks that run in other processes (a Dask cluster)
publish into their own process, where nothing listens.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

from vlgate.versions import VersionRef

log = logging.getLogger("vlgate.progress")

class Stage(StrEnum):
    """Where a flow is: a validation's stages, in the order the flow reaches them, then a
    drift check's own (scoring a batch, ``part`` "reference" or "new batch", then its tests)."""

    STARTED = "started"
    EVALUATING = "evaluating"
    ITEMS = "items"
    EXPECTATIONS = "expectations"
    RECORDING = "recording"
    CORRELATIONS = "correlations"
    GATE = "gate"
    DECIDED = "decided"
    REPORT = "report"
    DONE = "done"
    FAILED = "failed"
    SCORING = "scoring"
    TESTING = "testing"

@dataclass(frozen=True)
class Event:
    """``subject``: what runs (``subject()``: "world-vlm v2", "world-vlm v3 drift (incoming)");
    ``stage``: one of the stages above; for ``Stage.ITEMS``, ``done`` of ``total`` items of
    ``evaluator`` (``part``: which batch a drift check scores; ``shard`` of ``shards``);
    ``detail``: the decision (``Stage.DECIDED``, ``Stage.DONE``) or the error (``Stage.FAILED``)."""

    subject: str
    stage: Stage
    evaluator: str = ""
    part: str = ""
    done: int = 0
    total: int = 0
    shard: int = 0
    shards: int = 1
    detail: str = ""


Listener = Callable[[Event], None]
_listeners: list[Listener] = []
_listeners_lock = threading.Lock()


def subject(validated: VersionRef, drift_batch: str | None = None) -> str:
    """How a validation (or a drift check on ``drift_batch``) of a version is named."""
    return str(validated) + (f" drift ({drift_batch})" if drift_batch else "")


def publish(event: Event) -> None:
    """Hand ``event`` to every listener, in the caller's thread; a listener's error is logged."""
    with _listeners_lock:
        listeners = tuple(_listeners)
    for listener in listeners:
        try:
            listener(event)
        except Exception:  # a display must never fail the flow that it shows
            log.exception("progress listener failed on %s", event)


def stage(subject: str, name: Stage, detail: str = "", part: str = "", evaluator: str = "", shard: int = 0, shards: int = 1) -> None:
    """A flow reached a stage: ``detail`` the decision or the error, ``part`` the batch a drift
    check scores, ``evaluator`` (``shard`` of ``shards``) the evaluator it started."""
    publish(Event(subject, name, evaluator=evaluator, part=part, shard=shard, shards=shards, detail=detail))


def item_counter(subject: str, evaluator: str, part: str = "", shard: int = 0, shards: int = 1) -> Callable[[int, int], None]:
    """A runner's ``on_progress(done, total)`` that publishes ``Stage.ITEMS`` events."""
    return lambda done, total: publish(Event(subject, Stage.ITEMS, evaluator=evaluator, part=part, done=done, total=total, shard=shard, shards=shards))


def suite_counter(subject: str, part: str = "") -> Callable[[str, int, int], None]:
    """``run_suite``'s ``on_progress(evaluator, done, total)`` that publishes ``Stage.ITEMS`` events."""
    return lambda evaluator, done, total: publish(Event(subject, Stage.ITEMS, evaluator=evaluator, part=part, done=done, total=total))


def subscribe(listener: Listener) -> None:
    with _listeners_lock:
        _listeners.append(listener)


def unsubscribe(listener: Listener) -> None:
    with _listeners_lock:
        _listeners.remove(listener)


@contextmanager
def listening(listener: Listener) -> Iterator[Listener]:
    """``listener`` gets every event published (from any thread) while the block runs."""
    subscribe(listener)
    try:
        yield listener
    finally:
        unsubscribe(listener)
