"""Showing the flows' progress (``flows/progress.py``'s events) while they run
(``vlgate demo``): on a terminal a live view (rich) with one row per version and a bar per
evaluator (items, rate, time left); anywhere else (a pipe, CI, a log) one plain line per
milestone. Both keep the same board of what each subject is doing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Self

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from vlgate.cli.terminal import data_text
from vlgate.cli.terminal_logs import reroute_log_handlers
from vlgate.flows.progress import Event, Stage, subscribe, unsubscribe

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
                # a subject's name and state (a failure's message) as written, escaped before the layout
                table.add_row(data_text(name, style="bold"), data_text(entry.state, style=style), duration(took) if took is not None else "", entry.counts())
            return Group(table, self.bars)

    def __enter__(self) -> Self:
        self._undo = reroute_log_handlers(self.console, {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__})
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


def display(console: Console, queued: Iterable[str] = ()) -> LiveProgress | PlainProgress:
    """The live view on a terminal, plain lines anywhere else (a pipe, CI, a log file);
    use as a context manager around the step that runs the flows."""
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveProgress(console, queued)
    return PlainProgress(console, queued)
