"""Progress of the long steps, for whoever watches them: the flows publish what they do,
a display shows it.

The validation flow and its evaluator tasks, and the drift flow, publish events
(:class:`Event`) on this process's bus: a validation's stages (started, each evaluator,
Great Expectations, MLflow, correlations, gate, decision, report, done) and each
evaluator's items as its runner completes a batch (``Runner.run``'s ``on_progress``). A
display subscribes while it shows them (``vlgate demo``): on a terminal a live view (rich)
with one row per version and a bar per evaluator (items, rate, time left); anywhere else
(a pipe, CI, a log) one plain line per milestone. Nothing listens by default, so
publishing is a function call; a listener's error is logged and dropped: what the flows
compute never depends on a display. Tasks that run in other processes (a Dask cluster)
publish into their own process, where nothing listens.

``vlgate make-world`` reports its build phases through :class:`WorldBuildProgress`: a line
on stderr as each phase starts and ends (with its time), and one as each checkpoint is
saved (its ``vlgate_checkpoint.json`` written), printed with ``tqdm.write`` so that the
training bars below stay whole.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

log = logging.getLogger("vlgate.progress")

# --- what the flows publish ------------------------------------------------------------

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

#: what a stage is called where it is shown
STAGE_WORDS = {
    Stage.STARTED: "started",
    Stage.EXPECTATIONS: "checking outputs (Great Expectations)",
    Stage.RECORDING: "logging to MLflow",
    Stage.CORRELATIONS: "correlating across versions",
    Stage.GATE: "gate",
    Stage.REPORT: "writing the report",
    Stage.TESTING: "testing for drift",
}


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


def subject(model_name: str, version: str, drift_batch: str | None = None) -> str:
    """How a validation (or a drift check on ``drift_batch``) of a version is named."""
    return f"{model_name} v{version}" + (f" drift ({drift_batch})" if drift_batch else "")


def publish(event: Event) -> None:
    """Hand ``event`` to every listener, in the caller's thread; a listener's error is logged."""
    with _listeners_lock:
        listeners = tuple(_listeners)
    for listener in listeners:
        try:
            listener(event)
        except Exception:  # a display must never fail the flow that it shows
            log.exception("progress listener failed on %s", event)


def stage(subject: str, name: Stage, **fields: Any) -> None:
    publish(Event(subject, name, **fields))


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


# --- what a display keeps --------------------------------------------------------------


def duration(seconds: float) -> str:
    """12.3 s, 4 min 05 s."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


@dataclass
class _Subject:
    state: str = "queued"
    started: float | None = None
    finished: float | None = None
    outcome: str = ""
    failed: bool = False
    #: (part, evaluator, shard) → (done, total) items
    items: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)

    def elapsed(self, now: float) -> float | None:
        return None if self.started is None else (self.finished or now) - self.started

    def counts(self) -> str:
        """What this subject's evaluators did so far: 5 evaluators, 240 items."""
        if not self.items:
            return ""
        evaluators = len({evaluator for _, evaluator, _ in self.items})
        return f"{evaluators} evaluator{'s' if evaluators != 1 else ''}, {sum(done for done, _ in self.items.values())} items"


@dataclass
class _Count:
    """One evaluator's items on one subject (a bar; the shards summed)."""

    first_done: int
    started: float
    shards: dict[int, tuple[int, int]] = field(default_factory=dict)
    reported: float = 0.0
    finished: bool = False

    @property
    def done(self) -> int:
        return sum(done for done, _ in self.shards.values())

    @property
    def total(self) -> int:
        return sum(total for _, total in self.shards.values())


class _Board:
    """The state every display keeps, updated under a lock from the flows' threads."""

    def __init__(self, queued: Iterable[str], clock: Callable[[], float]):
        self.clock = clock
        self.lock = threading.RLock()
        self.subjects: dict[str, _Subject] = {name: _Subject() for name in queued}

    def apply(self, event: Event) -> _Subject:
        """The subject after ``event`` (its state, times and outcome)."""
        now = self.clock()
        if event.stage == Stage.STARTED:  # (again, for a flow run again after a failure)
            self.subjects[event.subject] = _Subject(started=now)
        entry = self.subjects.setdefault(event.subject, _Subject())
        if entry.started is None and event.stage != Stage.FAILED:
            entry.started = now
        if event.stage == Stage.ITEMS:
            entry.items[(event.part, event.evaluator, event.shard)] = (event.done, event.total)
            entry.state = " ".join(filter(None, ("scoring" if event.part else "evaluating", event.part, event.evaluator)))
        elif event.stage == Stage.EVALUATING:
            entry.state = f"evaluating {event.evaluator} (loading)"
        elif event.stage == Stage.SCORING:
            entry.state = f"scoring the {event.part}"
        elif event.stage == Stage.DECIDED:
            entry.state, entry.outcome = f"gate: {event.detail}", event.detail
        elif event.stage in (Stage.DONE, Stage.FAILED):
            entry.finished, entry.failed = now, event.stage == Stage.FAILED
            entry.outcome = event.detail or entry.outcome or "done"
            entry.state = f"failed: {event.detail}" if entry.failed else entry.outcome
        else:
            entry.state = STAGE_WORDS.get(event.stage, event.stage) + (f" ({entry.outcome})" if entry.outcome else "")
        return entry

    def queue(self, names: Iterable[str]) -> None:
        for name in names:
            self.subjects.setdefault(name, _Subject())

    def interrupt(self) -> None:
        """The display stops with subjects unfinished (an error, ^C): say so."""
        for entry in self.subjects.values():
            if entry.finished is None:
                entry.state = "interrupted" if entry.started is not None else "not started"


def _item_label(event: Event) -> str:
    shard = f" [{event.shard + 1}/{event.shards}]" if event.shards > 1 else ""
    return " ".join(filter(None, (event.part, event.evaluator))) + shard


class _Display:
    """A listener on the bus while its ``with`` block runs, keeping a :class:`_Board`."""

    def __init__(self, queued: Iterable[str], clock: Callable[[], float]):
        self.board = _Board(queued, clock)

    def __call__(self, event: Event) -> None:
        raise NotImplementedError

    def queue(self, subjects: Iterable[str]) -> None:
        """Subjects that will run (shown as queued until their first event)."""
        with self.board.lock:
            self.board.queue(subjects)

    def __enter__(self) -> Self:
        subscribe(self)
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        unsubscribe(self)
        if exc_type is not None:
            with self.board.lock:
                self.board.interrupt()


class PlainProgress(_Display):
    """One line per milestone: a subject's stages, each evaluator's items when it finishes
    (and every ``every`` seconds while it runs), the outcome; no control codes."""

    def __init__(self, console: Console, queued: Iterable[str] = (), every: float = 30.0, clock: Callable[[], float] = time.monotonic):
        super().__init__(queued, clock)
        self.console, self.every = console, every
        self.counts: dict[tuple[str, str, str], _Count] = {}

    def __call__(self, event: Event) -> None:
        with self.board.lock:
            entry = self.board.apply(event)
            line = self._items_line(event) if event.stage == Stage.ITEMS else self._stage_line(event, entry)
            if line:
                self.console.print(f"  {event.subject}: {line}", markup=False, highlight=False, soft_wrap=True)

    def _stage_line(self, event: Event, entry: _Subject) -> str | None:
        if event.stage in (Stage.EVALUATING, Stage.GATE):  # the items' line and the decision's say it
            return None
        if event.stage == Stage.SCORING:
            return f"scoring the {event.part}"
        if event.stage == Stage.DECIDED:
            return f"gate: {event.detail}"
        if event.stage == Stage.DONE:
            took = entry.elapsed(self.board.clock())
            return f"done in {duration(took or 0.0)}" + (f" ({event.detail})" if event.detail else "")
        if event.stage == Stage.FAILED:
            return f"failed: {event.detail}"
        return STAGE_WORDS.get(event.stage, event.stage)

    def _items_line(self, event: Event) -> str | None:
        now = self.board.clock()
        key = (event.subject, event.part, event.evaluator)
        count = self.counts.get(key)
        if count is None or (count.finished and event.done < count.done):  # new, or run again (a retried task)
            count = self.counts[key] = _Count(first_done=0, started=now, reported=now)
        if event.shard not in count.shards:
            count.first_done += event.done
        count.shards[event.shard] = (event.done, event.total)
        label = " ".join(filter(None, (event.part, event.evaluator)))
        done, total, computed = count.done, count.total, count.done - count.first_done
        if count.finished or len(count.shards) < event.shards:
            return None
        elapsed = now - count.started
        rate = computed / elapsed if elapsed > 0 else 0.0
        if done >= total:
            count.finished = True
            if total == 0:
                return f"{label}: no items"
            if computed == 0:
                return f"{label} {done}/{total} items (all already recorded)"
            reused = f", {count.first_done} already recorded" if count.first_done else ""
            return f"{label} {done}/{total} items in {duration(elapsed)} ({rate:.1f} items/s{reused})"
        if now - count.reported >= self.every and computed:
            count.reported = now
            return f"{label} {done}/{total} items, {rate:.1f} items/s, about {duration((total - done) / rate)} left"
        return None


class _RateColumn(ProgressColumn):
    """Items per second (rich's own speed estimate)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.1f} items/s" if speed else "", style="progress.data.speed")


class LiveProgress(_Display):
    """On a terminal: a live view (rich) of every subject's state and time, and a bar per
    evaluator (items done of all, rate, time left; elapsed once finished). A finished
    subject's bars are folded away; the last frame stays as the step's record."""

    def __init__(self, console: Console, queued: Iterable[str] = (), clock: Callable[[], float] = time.monotonic, refresh_per_second: float = 4):
        super().__init__(queued, clock)
        self.console = console
        self.bars = Progress(
            TextColumn("  {task.description}"),
            BarColumn(bar_width=28),
            MofNCompleteColumn(),
            _RateColumn(),
            TimeRemainingColumn(compact=True, elapsed_when_finished=True),
            console=console,
            get_time=clock,
        )
        self.tasks: dict[tuple[str, str, str, int], TaskID] = {}
        self._undo: list[Callable[[], None]] = []
        self.live = Live(console=console, get_renderable=self.render, refresh_per_second=refresh_per_second, transient=False)

    def __call__(self, event: Event) -> None:
        with self.board.lock:
            self.board.apply(event)
            if event.stage == Stage.ITEMS:
                key = (event.subject, event.part, event.evaluator, event.shard)
                task = self.tasks.get(key)
                if task is None:
                    task = self.tasks[key] = self.bars.add_task(escape(f"{event.subject}  {_item_label(event)}"), total=event.total, completed=event.done)
                # (also marks a bar whose items were all recorded as finished, and shows a subject's bars again when it runs again)
                self.bars.update(task, total=event.total, completed=event.done, visible=True)
            elif event.stage in (Stage.DONE, Stage.FAILED):
                for key, task in self.tasks.items():
                    if key[0] == event.subject:
                        self.bars.update(task, visible=False)

    def render(self) -> RenderableType:
        with self.board.lock:
            now = self.board.clock()
            table = Table.grid(padding=(0, 2))
            table.add_column()
            table.add_column()
            table.add_column(justify="right")
            table.add_column(style="dim")
            for name, entry in self.board.subjects.items():
                bad = entry.failed or entry.outcome in ("rejected", "drifted")
                style = ("red" if bad else "green") if entry.finished is not None else "dim" if entry.started is None else ""
                took = entry.elapsed(now)
                table.add_row(Text(name, style="bold"), Text(entry.state, style=style), duration(took) if took is not None else "", entry.counts())
            return Group(table, self.bars)

    def __enter__(self) -> Self:
        self._undo = _reroute_log_handlers(self.console, {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__})
        try:
            self.live.start()  # takes over sys.stdout and sys.stderr: what is printed goes above the view
        except BaseException:
            self._put_back_log_handlers()
            raise
        return super().__enter__()

    def __exit__(self, exc_type: object, *rest: object) -> None:
        super().__exit__(exc_type, *rest)
        self.live.stop()
        self._put_back_log_handlers()

    def _put_back_log_handlers(self) -> None:
        while self._undo:
            self._undo.pop()()


def _reroute_log_handlers(console: Console, terminal: set[Any]) -> list[Callable[[], None]]:
    """While the live view runs, a log handler that writes to the ``terminal`` streams
    (Prefect's console handler keeps the stderr it was configured with, and prints through
    a rich console of its own) is replaced on its logger by rich's ``RichHandler`` on the
    view's console, with its level, format and filters, so that its lines print above the
    view instead of through its frame; returns what puts the handlers back."""
    from rich.logging import RichHandler

    undo: list[Callable[[], None]] = []
    loggers = [logging.getLogger(), *(logger for logger in list(logging.Logger.manager.loggerDict.values()) if isinstance(logger, logging.Logger))]
    for logger in loggers:
        for handler in list(logger.handlers):
            inner = getattr(handler, "console", None)
            target = inner.file if isinstance(inner, Console) else getattr(handler, "stream", None)
            if target is None or target not in terminal:
                continue
            shown = RichHandler(handler.level, console, show_time=False, show_level=False, show_path=False)
            shown.setFormatter(handler.formatter)
            shown.filters = list(handler.filters)
            logger.removeHandler(handler)
            logger.addHandler(shown)
            undo.append(_swap_back(logger, shown, handler))
    return undo


def _swap_back(logger: logging.Logger, shown: logging.Handler, handler: logging.Handler) -> Callable[[], None]:
    def swap() -> None:
        logger.removeHandler(shown)
        logger.addHandler(handler)

    return swap


def display(console: Console, queued: Iterable[str] = ()) -> LiveProgress | PlainProgress:
    """The live view on a terminal, plain lines anywhere else (a pipe, CI, a log file);
    use as a context manager around the step that runs the flows."""
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveProgress(console, queued)
    return PlainProgress(console, queued)


# --- make-world ------------------------------------------------------------------------

#: make-world's phases (the manifest's ``seconds`` keys), as its progress names them
BUILD_PHASES = {
    "data": "the evaluation data sets",
    "vlm": "the VLM family (one training run, a checkpoint saved at each step count)",
    "llm": "DeCC's LLM agent",
    "vit": "GenCeption's ViT encoder",
    "clip": "CLIP (contrastive training)",
    "diffusion": "the diffusion pipeline",
}


def describe_phase(phase: str) -> str:
    if phase in BUILD_PHASES:
        return BUILD_PHASES[phase]
    if phase.startswith("vlm_"):  # vlm_FAULT: the family's trained version fine-tuned with one fault
        return f"the {phase.removeprefix('vlm_')} version (the trained one fine-tuned with that fault)"
    return phase


class WorldBuildProgress:
    """``build_world``'s ``on_phase(phase, seconds)``: a line as each phase starts (seconds
    None) and ends, and, while a phase runs, one per checkpoint saved under
    ``out/checkpoints`` (each VLM version of the family's one training run, as it is saved)."""

    CARD = "vlgate_checkpoint.json"

    def __init__(self, out: Path, write: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic, poll_s: float = 1.0):
        self.out, self.clock, self.poll_s = Path(out), clock, poll_s
        self.write = write or _tqdm_write
        self.lock = threading.Lock()
        self.phase: tuple[str, float] | None = None
        self.began: float | None = None
        self.saved: set[Path] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, phase: str, seconds: float | None) -> None:
        with self.lock:
            now = self.clock()
            if seconds is None:
                self.began = self.began if self.began is not None else now
                self.phase = (phase, now)
                self.write(f"make-world: {phase}: {describe_phase(phase)} …")
                return
            self._check_saved()
            self.phase = None
            self.write(f"make-world: {phase} done in {duration(seconds)} ({duration(now - (self.began or now))} in all)")

    def _check_saved(self) -> None:
        """Report the checkpoints saved since the last look (a phase is running)."""
        if self.phase is None:
            return
        for card in sorted(self.out.glob(f"checkpoints/*/{self.CARD}")):
            if card not in self.saved:
                self.saved.add(card)
                name, since = self.phase
                self.write(f"make-world:   saved {card.parent.relative_to(self.out).as_posix()} ({duration(self.clock() - since)} into {name})")

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self.lock:
                try:
                    self._check_saved()
                except OSError:  # a folder removed or written while listed: the next look
                    pass

    def __enter__(self) -> WorldBuildProgress:
        self._thread = threading.Thread(target=self._watch, name="vlgate-make-world-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _tqdm_write(line: str) -> None:
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)
