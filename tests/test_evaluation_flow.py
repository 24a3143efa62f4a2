"""The evaluation step's time limit: checked between batches, final (never retried)."""

import pytest
from prefect.states import Failed

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


def test_a_timed_out_shard_is_not_retried_other_failures_are():
    assert retry_unless_timed_out(None, None, Failed(data=ShardTimedOut("past it"))) is False  # type: ignore[arg-type]
    assert retry_unless_timed_out(None, None, Failed(data=TimeoutError("prefect's own limit"))) is False  # type: ignore[arg-type]
    assert retry_unless_timed_out(None, None, Failed(data=OSError("a worker lost"))) is True  # type: ignore[arg-type]


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
