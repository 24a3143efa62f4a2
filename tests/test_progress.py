"""Progress of the long steps: what the runners and flows publish (flows/progress.py), and
how the demo's displays (cli/displays.py) and make-world's phase lines
(cli/world_progress.py) show it."""

from __future__ import annotations

import io
import logging
import sys
import threading
import time

import pytest
from rich.console import Console

from vlgate.cli.displays import LiveProgress, PlainProgress, display
from vlgate.cli.world_progress import WorldBuildProgress
from vlgate.evaluators.loaders.items import ItemError, ItemLoadError
from vlgate.evaluators.runners.base import Runner
from vlgate.evaluators.runners.store import RecordStore
from vlgate.flows import progress
from vlgate.flows.progress import Event, Stage
from vlgate.versions import VersionRef


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def toy_runner(unreadable: str | None = None) -> Runner:
    def prepare(item):
        if item["id"] == unreadable:
            raise ItemLoadError(ItemError("toy", item["id"], "image", "unreadable"))
        return item["id"]

    return Runner("toy", {"vlm": "sha256:toy"}, "toy-1", prepare, lambda batch: [{"id": item["id"], "score": 1.0} for item, _ in batch])


def test_a_runner_reports_its_items_before_the_first_batch_and_after_each_and_its_records_do_not_change(tmp_path):
    items = [{"id": f"item-{n}"} for n in range(10)]
    toy_runner().run(items[:3], RecordStore(tmp_path / "told.jsonl"), batch_size=3, progress=False)  # 3 already recorded
    told: list[tuple[int, int]] = []
    result = toy_runner(unreadable="item-5").run(items, RecordStore(tmp_path / "told.jsonl"), batch_size=3, progress=False, on_progress=lambda *n: told.append(n))
    # reused first, then 3 + 3 + 1 items to do; the unreadable one counts as done (an item error)
    assert told == [(3, 10), (6, 10), (9, 10), (10, 10)]
    assert (result.reused, result.computed, len(result.errors)) == (3, 6, 1)

    toy_runner().run(items[:3], RecordStore(tmp_path / "quiet.jsonl"), batch_size=3, progress=False)
    quiet = toy_runner(unreadable="item-5").run(items, RecordStore(tmp_path / "quiet.jsonl"), batch_size=3, progress=False)
    assert quiet.records == result.records and (tmp_path / "quiet.jsonl").read_text() == (tmp_path / "told.jsonl").read_text()


def test_events_from_worker_threads_reach_every_listener_and_a_failing_listener_stops_nothing():
    heard: list[Event] = []
    lock = threading.Lock()

    def record(event: Event) -> None:
        with lock:
            heard.append(event)

    def broken(event: Event) -> None:
        raise RuntimeError("a display fell over")

    def publish_some(worker: int) -> None:
        count = progress.item_counter(f"m v{worker}", "lcm-mc")
        for done in range(50):
            count(done, 50)

    with progress.listening(broken), progress.listening(record):
        threads = [threading.Thread(target=publish_some, args=(worker,)) for worker in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    progress.stage("m v9", Stage.STARTED)  # nobody listens any more
    assert len(heard) == 200 and {event.subject for event in heard} == {"m v0", "m v1", "m v2", "m v3"}
    for worker in range(4):  # each worker's events in its own order
        assert [event.done for event in heard if event.subject == f"m v{worker}"] == list(range(50))


def fake_validation(clock: Clock, subject: str, decision: str, evaluators: dict[str, int], seconds_per_batch: float = 1.0) -> None:
    """What validate_model_version publishes, in its order, with 8-item batches."""
    progress.stage(subject, Stage.STARTED)
    for evaluator, total in evaluators.items():
        progress.stage(subject, Stage.EVALUATING, evaluator=evaluator)
        clock.now += 2.0  # the model loads
        count = progress.item_counter(subject, evaluator)
        for done in [*range(0, total, 8), total]:
            count(done, total)
            clock.now += seconds_per_batch
    for stage in (Stage.EXPECTATIONS, Stage.RECORDING, progress.Stage.CORRELATIONS, Stage.GATE):
        progress.stage(subject, stage)
        clock.now += 0.5
    progress.stage(subject, Stage.DECIDED, detail=decision)
    progress.stage(subject, progress.Stage.REPORT)
    clock.now += 1.0
    progress.stage(subject, Stage.DONE, detail=decision)


def test_without_a_terminal_each_milestone_is_one_plain_line():
    clock, out = Clock(), io.StringIO()
    with PlainProgress(Console(file=out, width=120), queued=["world-vlm v1", "world-vlm v2"], clock=clock) as shown:
        assert isinstance(shown, PlainProgress)
        fake_validation(clock, "world-vlm v1", "rejected", {"lcm-mc": 16, "vlind": 8})
        progress.stage("world-vlm v2", Stage.STARTED)
        progress.item_counter("world-vlm v2", "lcm-mc")(16, 16)  # every record already there
        progress.stage("world-vlm v2", Stage.FAILED, detail="RuntimeError: the registry went away")
    assert out.getvalue().splitlines() == [
        "  world-vlm v1: started",
        "  world-vlm v1: lcm-mc 16/16 items in 2.0 s (8.0 items/s)",
        "  world-vlm v1: vlind 8/8 items in 1.0 s (8.0 items/s)",
        "  world-vlm v1: checking outputs (Great Expectations)",
        "  world-vlm v1: logging to MLflow",
        "  world-vlm v1: correlating across versions",
        "  world-vlm v1: gate: rejected",
        "  world-vlm v1: writing the report",
        "  world-vlm v1: done in 12.0 s (rejected)",
        "  world-vlm v2: started",
        "  world-vlm v2: lcm-mc 16/16 items (all already recorded)",
        "  world-vlm v2: failed: RuntimeError: the registry went away",
    ]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_a_long_evaluator_gets_a_plain_line_every_interval_with_its_rate_and_time_left():
    clock, out = Clock(), io.StringIO()
    with PlainProgress(Console(file=out, width=120), clock=clock, every=30.0):
        count = progress.item_counter("m v1", "genception")
        count(8, 64)  # 8 reused
        for done in range(16, 65, 8):
            clock.now += 10.0
            count(done, 64)
    # a line 30 s after the first event, then 30 s after that: 0.8 items/s computed throughout
    assert out.getvalue().splitlines() == [
        "  m v1: genception 32/64 items, 0.8 items/s, about 40.0 s left",
        "  m v1: genception 56/64 items, 0.8 items/s, about 10.0 s left",
        "  m v1: genception 64/64 items in 1 min 10 s (0.8 items/s, 8 already recorded)",
    ]


def test_shards_of_an_evaluator_are_summed_and_a_drift_check_names_the_batch_it_scores():
    clock, out = Clock(), io.StringIO()
    with PlainProgress(Console(file=out, width=120), clock=clock):
        first, second = (progress.item_counter("m v1", "lcm-nb", shard=shard, shards=2) for shard in (0, 1))
        first(0, 5)
        clock.now += 1.0
        second(0, 5)  # the line waits for every shard
        clock.now += 4.0
        first(5, 5)
        second(5, 5)
        drift = progress.subject(VersionRef(model="m", version="1"), drift_batch="incoming")
        progress.stage(drift, Stage.STARTED)
        progress.stage(drift, progress.Stage.SCORING, part="reference")
        progress.suite_counter(drift, "reference")("decc", 4, 4)
        progress.stage(drift, progress.Stage.TESTING)
        clock.now += 2.0
        progress.stage(drift, Stage.DONE, detail="no drift")
    assert out.getvalue().splitlines() == [
        "  m v1: lcm-nb 10/10 items in 5.0 s (2.0 items/s)",
        "  m v1 drift (incoming): started",
        "  m v1 drift (incoming): scoring the reference",
        "  m v1 drift (incoming): reference decc 4/4 items (all already recorded)",
        "  m v1 drift (incoming): testing for drift",
        "  m v1 drift (incoming): done in 2.0 s (no drift)",
    ]


def rendered(view: LiveProgress) -> str:
    screen = Console(file=io.StringIO(), width=140, record=True, force_terminal=False)
    screen.print(view.render())
    return screen.export_text()


def test_on_a_terminal_the_live_view_shows_every_version_and_a_bar_per_running_evaluator():
    clock = Clock()
    terminal = Console(file=io.StringIO(), force_terminal=True, width=140)
    view = LiveProgress(terminal, queued=["world-vlm v1", "world-vlm v2", "world-vlm v3"], clock=clock)
    with progress.listening(view):  # the view's own Live is not started: its frames are rendered here
        fake_validation(clock, "world-vlm v1", "rejected", {"lcm-mc": 16})
        progress.stage("world-vlm v2", Stage.STARTED)
        progress.item_counter("world-vlm v2", "lcm-mc")(16, 16)
        count = progress.item_counter("world-vlm v2", "vlind")
        count(0, 48)
        for done in (16, 32):  # rich estimates the rate from the second batch on
            clock.now += 4.0
            count(done, 48)
    lines = [line.rstrip() for line in rendered(view).splitlines()]
    assert lines[0].split() == ["world-vlm", "v1", "rejected", "8.0", "s", "1", "evaluator,", "16", "items"]
    assert lines[1].split() == ["world-vlm", "v2", "evaluating", "vlind", "8.0", "s", "2", "evaluators,", "48", "items"]
    assert lines[2].split() == ["world-vlm", "v3", "queued"]
    # v1 is done: its bar is folded away; v2's two bars: finished (its time) and running (rate, time left)
    assert [line.split()[:3] for line in lines[3:]] == [["world-vlm", "v2", "lcm-mc"], ["world-vlm", "v2", "vlind"]]
    assert lines[3].split()[4:] == ["16/16", "00:00"] and lines[4].split()[4:] == ["32/48", "4.0", "items/s", "00:04"]

    with pytest.raises(KeyboardInterrupt), view:  # stopped halfway: what had not finished says so
        raise KeyboardInterrupt
    assert [line.split()[2] for line in rendered(view).splitlines()[:3]] == ["rejected", "interrupted", "not"]


def test_log_lines_from_the_flows_print_above_the_live_view_not_through_it():
    """Prefect's console handler keeps the stderr it was configured with: while the view
    runs, its records (and any other handler's on the terminal) go through the view's console."""
    logger = logging.getLogger("vlgate-test-progress")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s | %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    out = io.StringIO()
    try:
        with LiveProgress(Console(file=out, force_terminal=True, width=100, color_system=None)):
            logger.warning("Task run 'evaluate-shard' - [not markup]")
        assert logger.handlers == [handler]
    finally:
        logger.removeHandler(handler)
    assert "WARNING | Task run 'evaluate-shard' - [not markup]" in out.getvalue()


def test_the_live_view_is_for_terminals_only():
    assert isinstance(display(Console(file=io.StringIO(), force_terminal=True)), LiveProgress)
    assert isinstance(display(Console(file=io.StringIO())), PlainProgress)


def test_make_world_names_each_phase_with_its_time_and_each_checkpoint_as_it_is_saved(tmp_path):
    clock, lines = Clock(), []
    with WorldBuildProgress(tmp_path, write=lines.append, clock=clock, poll_s=0.01) as phases:
        phases("data", None)
        clock.now += 1.5
        phases("data", 1.5)
        phases("vlm", None)
        for steps in (0, 200):
            clock.now += 30.0
            card = tmp_path / "checkpoints" / f"vlm-steps{steps}" / "vlgate_checkpoint.json"
            card.parent.mkdir(parents=True)
            card.write_text("{}")
            deadline = time.monotonic() + 10
            while not any(f"vlm-steps{steps}" in line for line in lines) and time.monotonic() < deadline:  # the watcher's next look
                time.sleep(0.01)
        clock.now += 20.0
        (tmp_path / "checkpoints" / "vlm-steps2000").mkdir()
        (tmp_path / "checkpoints" / "vlm-steps2000" / "vlgate_checkpoint.json").write_text("{}")
        phases("vlm", 80.0)  # a checkpoint saved just before its phase ends is named then
        phases("vlm_language-prior", None)
    assert lines == [
        "make-world: data: the evaluation data sets …",
        "make-world: data done in 1.5 s (1.5 s in all)",
        "make-world: vlm: the VLM family (one training run, a checkpoint saved at each step count) …",
        "make-world:   saved checkpoints/vlm-steps0 (30.0 s into vlm)",
        "make-world:   saved checkpoints/vlm-steps200 (1 min 00 s into vlm)",
        "make-world:   saved checkpoints/vlm-steps2000 (1 min 20 s into vlm)",
        "make-world: vlm done in 1 min 20 s (1 min 22 s in all)",
        "make-world: vlm_language-prior: the language-prior version (the trained one fine-tuned with that fault) …",
    ]


# --- the real flows -------------------------------------------------------------------


@pytest.mark.world
@pytest.mark.service
def test_the_validation_and_drift_flows_publish_their_stages_and_every_evaluators_items(smoke_home, tiny_world, monkeypatch):
    import yaml

    from vlgate import tracking
    from vlgate.flows.drift import drift_check
    from vlgate.flows.validation import validate_model_version

    world, _ = tiny_world
    home = smoke_home
    monkeypatch.setenv("VLGATE_HOME", str(home))
    for name in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB"):
        monkeypatch.delenv(name, raising=False)
    for batch, limit in (("reference", 4), ("incoming", 6)):
        (home / batch).mkdir()
        (home / batch / "suite.yaml").write_text(yaml.safe_dump({"name": batch, "evaluators": {"lcm-mc": {"data": str(world / "data" / "mc"), "limit": limit, "protocol": "vlgate"}}}))
    drift = {"reference": str(home / "reference" / "suite.yaml"), "batch": str(home / "incoming" / "suite.yaml")}
    (home / "vlgate.yaml").write_text(yaml.safe_dump({"models": {"smoke": {"suite": "suite.yaml", "policy": "gate.yaml", "drift": drift}}}))
    tracking.register_checkpoint(tracking.connect(home), "smoke", world / "checkpoints" / "vlm-steps3", home=home)

    heard: list[Event] = []
    with progress.listening(heard.append):
        validate_model_version("smoke", "1")
        drift_check("smoke")
    validation = [(e.stage, e.evaluator, e.done, e.total, e.detail) for e in heard if e.subject == "smoke v1"]
    assert validation == [
        (Stage.STARTED, "", 0, 0, ""),
        (Stage.EVALUATING, "lcm-mc", 0, 0, ""),
        (Stage.ITEMS, "lcm-mc", 0, 4, ""),  # before the first batch (the suite's batch_size is 8)
        (Stage.ITEMS, "lcm-mc", 4, 4, ""),
        (Stage.EXPECTATIONS, "", 0, 0, ""),
        (Stage.RECORDING, "", 0, 0, ""),
        (progress.Stage.CORRELATIONS, "", 0, 0, ""),
        (Stage.GATE, "", 0, 0, ""),
        (Stage.DECIDED, "", 0, 0, "promoted"),
        (progress.Stage.REPORT, "", 0, 0, ""),
        (Stage.DONE, "", 0, 0, "promoted"),
    ]
    checked = [(e.stage, e.part, e.evaluator, e.done, e.total) for e in heard if e.subject == "smoke v1 drift (incoming)"]
    assert checked == [
        (Stage.STARTED, "", "", 0, 0),
        # the reference's 4 items are those the validation scored with the same weights: all
        # from the record cache; the new batch's first 4 too, its 2 others computed
        (progress.Stage.SCORING, "reference", "", 0, 0),
        (Stage.ITEMS, "reference", "lcm-mc", 4, 4),
        (progress.Stage.SCORING, "new batch", "", 0, 0),
        (Stage.ITEMS, "new batch", "lcm-mc", 4, 6),
        (Stage.ITEMS, "new batch", "lcm-mc", 6, 6),
        (progress.Stage.TESTING, "", "", 0, 0),
        (Stage.DONE, "", "", 0, 0),
    ]
    assert [e.detail for e in heard if e.stage == Stage.DONE][-1] == "could not check"  # lcm-mc has no drift score
    assert len(heard) == len(validation) + len(checked)
