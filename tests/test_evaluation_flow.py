"""The evaluation step's time limit: checked between batches, final (never retried)."""

import json

import pytest
from prefect.states import Failed

from vlgate.evaluators.lmms.tasks import TaskError
from vlgate.flows import evaluation
from vlgate.flows.evaluation import ShardTimedOut, retry_unless_timed_out, within_time_limit


@pytest.fixture
def clock(monkeypatch):
    """A monotonic clock the test moves by hand."""
    now = [100.0]
    monkeypatch.setattr(evaluation.time, "monotonic", lambda: now[0])
    return now


def test_the_limit_stops_a_shard_only_when_items_remain_past_it(clock):
    seen = []
    report = within_time_limit(10.0, lambda done, total: seen.append((done, total)))
    report(0, 4)
    clock[0] += 10.0  # exactly at the limit: not past it
    report(2, 4)
    clock[0] += 5.0  # 15 s: past it, but every item is done, so the results stand
    report(4, 4)
    with pytest.raises(ShardTimedOut, match=r"stopped after 15\.0 s .*task_timeout_s = 10\) with 1 of 4 items left"):
        report(3, 4)
    assert seen == [(0, 4), (2, 4), (4, 4), (3, 4)]  # progress is published before the check


def test_no_limit_never_stops(clock):
    report = within_time_limit(None, lambda done, total: None)
    clock[0] += 1e9
    report(0, 4)


def test_a_timed_out_shard_or_bad_task_input_is_not_retried_other_failures_are():
    assert retry_unless_timed_out(None, None, Failed(data=ShardTimedOut("past it"))) is False  # type: ignore[arg-type]
    assert retry_unless_timed_out(None, None, Failed(data=TimeoutError("prefect's own limit"))) is False  # type: ignore[arg-type]
    assert retry_unless_timed_out(None, None, Failed(data=OSError("a worker lost"))) is True  # type: ignore[arg-type]
    assert retry_unless_timed_out(None, None, Failed(data=TaskError("lmms-eval task 't', doc 3: ..."))) is False  # type: ignore[arg-type]


class _CountedModel:
    """Stands in for a loaded candidate model: counts loads (instances) and closes."""

    loaded: list["_CountedModel"] = []

    def __init__(self):
        self.closed = 0
        _CountedModel.loaded.append(self)

    def close(self):
        self.closed += 1


def test_a_held_candidate_is_loaded_once_per_thread_and_closed_when_the_last_holder_ends(monkeypatch, tmp_path):
    import threading

    from vlgate.evaluators.running import suite as suite_module

    monkeypatch.setattr(_CountedModel, "loaded", [])
    monkeypatch.setattr(suite_module, "load_vlm", lambda model, suite, cache_dir: _CountedModel())
    suite = suite_module.Suite(name="s", evaluators={})

    # outside a holder: every shard loads its own and closes it
    first, held = suite_module._shard_vlm("models:/m/1", suite, tmp_path)
    assert held is False and suite_module._shard_vlm("models:/m/1", suite, tmp_path)[0] is not first

    with suite_module.holding_models():
        one, held = suite_module._shard_vlm("models:/m/1", suite, tmp_path)
        assert held is True and suite_module._shard_vlm("models:/m/1", suite, tmp_path) == (one, True)
        other_version = suite_module._shard_vlm("models:/m/2", suite, tmp_path)[0]
        elsewhere = []
        thread = threading.Thread(target=lambda: elsewhere.append(suite_module._shard_vlm("models:/m/1", suite, tmp_path)[0]))
        thread.start()
        thread.join()
        assert elsewhere[0] is not one  # another thread never shares this thread's model
        with suite_module.holding_models():  # nested: the inner end releases nothing
            pass
        assert one.closed == 0
    assert [model.closed for model in (one, other_version, elsewhere[0])] == [1, 1, 1]
    assert len(_CountedModel.loaded) == 5  # two unheld, then one per (model, thread)


def _mc_data(folder, n=3):
    from PIL import Image

    (folder / "images").mkdir(parents=True)
    rows = []
    for index in range(n):
        Image.new("RGB", (4, 4), (index * 60, 0, 0)).save(folder / "images" / f"{index}.png")
        rows.append({"id": f"q{index}", "image": f"images/{index}.png", "question": "Which?", "options": ["a", "b"], "answer": index % 2})
    (folder / "items.jsonl").write_text("".join(f"{json.dumps(row)}\n" for row in rows))


def test_a_validation_reads_each_data_set_once_and_hands_every_caller_the_same_items(monkeypatch, tmp_path):
    from vlgate.evaluators.running import items as items_module
    from vlgate.evaluators.running.items import ItemIds, load_items, remembering_items
    from vlgate.evaluators.running.suite import Suite

    _mc_data(tmp_path / "mc")
    spec = Suite(name="s", evaluators={"lcm-mc": {"data": str(tmp_path / "mc"), "protocol": "vlgate"}}).evaluators["lcm-mc"]
    plain, plain_errors = load_items("lcm-mc", spec, tmp_path / "out")
    loads = []
    real = items_module.loaded_items
    monkeypatch.setattr(items_module, "loaded_items", lambda *args: loads.append(args[0]) or real(*args))

    load_items("lcm-mc", spec, tmp_path / "out")
    load_items("lcm-mc", spec, tmp_path / "out")
    assert len(loads) == 2  # outside a validation: read every time
    with remembering_items():
        first, errors = load_items("lcm-mc", spec, tmp_path / "out")
        first.append("a caller's own list")  # changes nothing remembered
        again, _ = load_items("lcm-mc", spec, tmp_path / "elsewhere")  # a built-in loader writes nothing: one load for any folder
        picked, _ = load_items("lcm-mc", spec, tmp_path / "out", ItemIds(ids={"lcm-mc": ("q2", "q0")}))
        with remembering_items():  # nested: the inner end forgets nothing
            pass
        load_items("lcm-mc", spec.model_copy(update={"limit": 2}), tmp_path / "out")  # another entry: its own load
        assert len(loads) == 4
    assert again == plain and errors == plain_errors == [] and [item.id for item in plain] == ["q0", "q1", "q2"]
    assert [item.id for item in picked] == ["q0", "q2"]  # a look's selection, in the data set's order
    load_items("lcm-mc", spec, tmp_path / "out")
    assert len(loads) == 5  # the validation over: read again
