"""The gate's jackknife in O(n): every evaluator's ``resampled`` on
``LeaveOneOut`` weights gives each metric without each row in turn, as ``aggregate`` gives
it on the frame without that row (NaN where it is undefined); the paired score made so
equals the one made with the n × n weights written out; and the gate's paired scores,
shared by the rules of one judgement, are the numbers ``score_test.paired_score`` gives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from vlgate.evaluators import registry
from vlgate.evaluators.definition import DefinitionError, EvaluatorDefinition
from vlgate.evaluators.metrics.common import LeaveOneOut, weighted_mean
from vlgate.evaluators.metrics.score_test import PairedScore, Reweighting, paired_score
from vlgate.gate.checks import PairedScores, resampled_statistic, set_statistic
from vlgate.gate.policy import ResolvedMetric, resolve_metric

EVALUATORS = ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")
#: (items, share of them labelled or reaching a rare state): small frames, where leaving
#: one item out empties a label set, a category or a second round, and larger ones
SHAPES = [(2, 0.5), (3, 0.34), (7, 0.15), (25, 0.1), (25, 0.6), (40, 0.9)]


def _options(rng: np.random.Generator, n: int, k: int, tied: float) -> np.ndarray:
    """Option distributions over ``k``, a share ``tied`` of them uniform (an unanswered prompt)."""
    p = rng.dirichlet(np.ones(k), size=n)
    p[rng.random(n) < tied] = 1.0 / k
    return p


def _yes(rng: np.random.Generator, shape: tuple[int, ...], undecided: float) -> np.ndarray:
    p = rng.random(shape)
    p[rng.random(shape) < undecided] = 0.5
    return p


def _codes(rng: np.random.Generator, n: int, right: float) -> np.ndarray:
    """A test's answer pairs coded 1/0/−1, passing with about ``right``'s chance."""
    first = rng.choice(np.array([1, 0, -1], dtype=np.int8), size=n, p=[right, (1 - right) * 0.8, (1 - right) * 0.2])
    second = rng.choice(np.array([0, 1, -1], dtype=np.int8), size=n, p=[right, (1 - right) * 0.8, (1 - right) * 0.2])
    return np.stack([first, second], axis=1)


def random_arrays(evaluator: str, n: int, share: float, rng: np.random.Generator, categorised: bool = True) -> dict[str, object]:
    """Schema arrays of ``n`` random items of ``evaluator`` (what its schema hands
    ``per_sample``), about ``share`` of them labelled (lcm, decc), passing the pipeline's
    early tests (vlind), in a second DeCC round, or scored (GenCeption, whose categories
    include one of a single image)."""
    labelled = rng.random(n) < share
    labelled[rng.integers(n)] = True  # at least one label: the labelled metrics are defined on the whole frame
    if evaluator == "lcm-mc":
        return {"p_mc": _options(rng, n, 4, 0.1), "p_yes": _yes(rng, (n, 4), 0.05), "answer": np.where(labelled, rng.integers(0, 4, n), -1)}
    if evaluator == "lcm-nb":
        p_text, p_image = (_options(rng, 2 * n, 2, 0.1).reshape(n, 2, 2) for _ in range(2))
        return {"p_yes": _yes(rng, (n, 2, 2), 0.05), "p_text": p_text, "p_image": p_image, "answer": np.where(labelled, rng.integers(0, 2, n), -1)}
    if evaluator == "vlind":
        images = rng.integers(0, 3, n)
        return {"ck": _codes(rng, n, share), "vp": _codes(rng, n, share), "cb": _codes(rng, n, share), "lp": _codes(rng, int(images.sum()), 0.5), "lp_instance": np.repeat(np.arange(n), images)}
    if evaluator == "genception":
        similarities = rng.random((n, 3))
        similarities[(rng.random(n) > share) & (rng.random(n) < 0.3)] = np.nan  # unscored images
        categories = rng.choice(np.array(["animals", "vehicles", "food"], dtype=object), n)
        categories[rng.integers(n)] = "alone"
        return {"s": similarities, "category": categories if categorised else None, "description": np.full(n, None, dtype=object)}
    if evaluator == "decc":
        letters = np.array(list("ABC"), dtype=object)
        direct = rng.choice(letters, n)

        def reasoned(agreeing: float) -> np.ndarray:
            return np.where(rng.random(n) < agreeing, direct, rng.choice(letters, n))

        v1, l1 = reasoned(0.6), reasoned(0.6)
        second = (v1 != l1) | (rng.random(n) < share / 4)
        answer = np.where(labelled, reasoned(0.5), None)
        columns = {"direct": direct, "v1": v1, "l1": l1, "v2": np.where(second, reasoned(0.6), None), "l2": np.where(second, reasoned(0.6), None), "answer": answer}
        return {name: pd.Series(values, dtype=object) for name, values in columns.items()}
    raise ValueError(evaluator)


def random_frame(evaluator: str, n: int, share: float, seed: int, categorised: bool = True) -> pd.DataFrame:
    """A per-sample frame (no ``id``) by the evaluator's own ``per_sample``."""
    definition = registry.get(evaluator)
    return definition.per_sample(random_arrays(evaluator, n, share, np.random.default_rng(seed), categorised))


def directed(definition: EvaluatorDefinition, frame: pd.DataFrame) -> list[str]:
    """The metrics of ``resampled`` a gate rule can name (they all have a direction)."""
    assert definition.resampled is not None
    names = list(definition.resampled(frame, np.zeros((0, len(frame)))))
    assert names and all((spec := definition.metric(name)) is not None and spec.direction is not None for name in names)
    return names


def dropping_each_row(definition: EvaluatorDefinition, frame: pd.DataFrame, names: list[str]) -> dict[str, np.ndarray]:
    """Each metric by ``aggregate`` on the frame without each row in turn, NaN where undefined."""
    dropped = [definition.aggregate(frame.drop(index=frame.index[row])) for row in range(len(frame))]
    return {name: np.array([np.nan if (value := metrics.get(name)) is None else float(value) for metrics in dropped]) for name in names}


def assert_same_values(fast: np.ndarray, direct: np.ndarray, context: object) -> None:
    """Equal to 1e-12, NaN exactly where NaN."""
    fast, direct = np.asarray(fast, dtype=float), np.asarray(direct, dtype=float)
    assert fast.shape == direct.shape, context
    assert np.array_equal(np.isnan(fast), np.isnan(direct)), (context, fast, direct)
    assert np.allclose(fast[~np.isnan(fast)], direct[~np.isnan(direct)], rtol=0.0, atol=1e-12), (context, fast, direct)


@pytest.mark.parametrize("evaluator", EVALUATORS)
def test_every_directed_metric_left_one_out_in_one_pass_is_the_aggregate_without_that_row(evaluator):
    definition = registry.get(evaluator)
    assert definition.resampled is not None
    undefined = 0
    frames = [random_frame(evaluator, n, share, seed) for seed, (n, share) in enumerate(SHAPES)]
    if evaluator == "genception":  # without categories the headline is the mean over images
        frames += [random_frame(evaluator, n, share, 100 + seed, categorised=False) for seed, (n, share) in enumerate(SHAPES)]
    for number, frame in enumerate(frames):
        left_out = definition.resampled(frame, LeaveOneOut(len(frame)))
        names = directed(definition, frame)
        for name, direct in dropping_each_row(definition, frame, names).items():
            assert_same_values(left_out[name], direct, (evaluator, number, name))
            undefined += int(np.isnan(direct).sum())
    assert undefined > 0  # the frames reach the metrics' undefined cases (a label set, a category or a round emptied)


def test_leaving_out_the_only_labelled_item_or_a_categorys_only_image_is_what_aggregate_says():
    """The cases by hand: lcm-mc's accuracy is undefined without its only labelled item;
    GenCeption's headline without a category's only image is the mean over the others."""
    lcm = registry.get("lcm-mc")
    arrays = random_arrays("lcm-mc", 6, 0.0, np.random.default_rng(1))
    arrays["answer"] = np.array([-1, -1, 2, -1, -1, -1])
    frame = lcm.per_sample(arrays)
    assert lcm.resampled is not None
    acc = lcm.resampled(frame, LeaveOneOut(6))["acc"]
    assert np.isnan(acc[2]) and np.all(acc[[0, 1, 3, 4, 5]] == frame["correct"].iloc[2])
    assert "acc" not in lcm.aggregate(frame.drop(index=2))

    genception = registry.get("genception")
    frame = pd.DataFrame({"category": ["a", "a", "b", "c"], "gc": [0.2, 0.4, 0.9, 0.5], "s@1": [0.2, 0.4, 0.9, 0.5]})
    assert genception.resampled is not None
    headline = genception.resampled(frame, LeaveOneOut(4))["gc@1"]
    assert headline == pytest.approx([(0.4 + 0.9 + 0.5) / 3, (0.2 + 0.9 + 0.5) / 3, (0.3 + 0.5) / 2, (0.3 + 0.9) / 2], abs=1e-15)


def test_leave_one_out_weights_are_the_matrix_of_ones_without_its_diagonal():
    rng = np.random.default_rng(2)
    values, rows = rng.random(9), rng.random(9) < 0.5
    assert weighted_mean(values, LeaveOneOut(9), rows) == pytest.approx(weighted_mean(values, 1.0 - np.eye(9), rows), abs=1e-15, nan_ok=True)
    with pytest.raises(ValueError, match="over 8 samples applied to 9 values"):
        weighted_mean(values, LeaveOneOut(8))


def _versions(evaluator: str, n: int, share: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(candidate, champion) frames with ``id``: the candidate answers a third of the
    champion's items anew and lacks one; the champion holds one item more, and its rows are
    in another order."""
    champion = random_frame(evaluator, n, share, seed)
    redrawn = random_frame(evaluator, n, share, seed + 1000)
    anew = np.random.default_rng(seed).random(n) < 1 / 3
    candidate = pd.concat([champion[~anew], redrawn[anew]]).sort_index()
    ids = [f"item-{i}" for i in range(n)]
    candidate, champion = candidate.assign(id=ids), champion.assign(id=ids)
    return candidate.iloc[1:][["id", *candidate.columns[:-1]]], champion.iloc[::-1][["id", *champion.columns[:-1]]]


def arrays_only(reweighting: Reweighting) -> Callable[[pd.DataFrame, np.ndarray], np.ndarray]:
    """The same statistic as a plain function: ``leave_one_out`` writes the weights out for it."""

    def statistic(frame: pd.DataFrame, counts: np.ndarray) -> np.ndarray:
        return reweighting(frame, counts)

    return statistic


@pytest.mark.parametrize("evaluator", EVALUATORS)
def test_the_paired_score_is_the_same_through_leave_one_out_weights_and_the_matrix_written_out(evaluator):
    """``paired_score`` hands a :class:`Reweighting` ``LeaveOneOut(n)`` and a plain
    function of arrays the n × n weights in batches: the same pseudo-values."""
    compared = 0
    for seed, (n, share) in enumerate([(30, 0.5), (60, 0.2), (200, 0.8)]):
        candidate, champion = _versions(evaluator, n, share, seed)
        for name in directed(registry.get(evaluator), champion.drop(columns="id")):
            metric = resolve_metric(f"{evaluator}/{name}")
            reweighting = resampled_statistic(metric, candidate)
            assert isinstance(reweighting, Reweighting)
            linear = paired_score(candidate, champion, set_statistic(metric), reweighting, metric.value_range)
            written_out = paired_score(candidate, champion, set_statistic(metric), arrays_only(reweighting), metric.value_range)
            assert (linear.n_shared, linear.candidate, linear.champion, linear.difference) == (written_out.n_shared, written_out.candidate, written_out.champion, written_out.difference)
            assert linear.testable == written_out.testable, (evaluator, name)
            assert linear.pseudo_values == pytest.approx(written_out.pseudo_values, rel=0.0, abs=1e-9), (evaluator, name)
            assert (linear.low, linear.high) == pytest.approx((written_out.low, written_out.high), abs=1e-9)
            compared += linear.testable
    assert compared > 0


def _same_score(shared: PairedScore, alone: PairedScore) -> None:
    assert (shared.n_shared, shared.candidate, shared.champion, shared.difference, shared.low, shared.high) == (alone.n_shared, alone.candidate, alone.champion, alone.difference, alone.low, alone.high)
    assert np.array_equal(shared.pseudo_values, alone.pseudo_values)


@pytest.mark.parametrize("evaluator", EVALUATORS)
def test_the_gates_shared_paired_scores_are_score_test_s_numbers_and_made_in_one_pass_per_version(evaluator):
    """``PairedScores`` (every rule of a judgement) gives each metric exactly what
    ``score_test.paired_score`` gives with the metric's statistic and reweighting, on all
    items and on a category's; the evaluator's ``resampled`` runs once per version and
    set of items whatever the number of metrics asked."""
    definition = registry.get(evaluator)
    calls: list[int] = []

    def counted(frame: pd.DataFrame, counts: object) -> dict[str, np.ndarray]:
        calls.append(len(frame))
        assert definition.resampled is not None
        return definition.resampled(frame, counts)

    counting = replace(definition, resampled=counted)
    candidate, champion = _versions(evaluator, 50, 0.5, 3)
    some = frozenset(candidate["id"].iloc[::3])
    scores = PairedScores()
    names = directed(definition, champion.drop(columns="id"))
    for ids in (None, some):
        mine, theirs = (candidate, champion) if ids is None else (candidate[candidate["id"].isin(ids)], champion[champion["id"].isin(ids)])
        for name in names:
            metric = resolve_metric(f"{evaluator}/{name}")
            alone = paired_score(mine, theirs, set_statistic(metric), resampled_statistic(metric, mine), metric.value_range)
            _same_score(scores.score(ResolvedMetric(metric.qualified, counting, metric.spec), candidate, champion, ids), alone)
            assert scores.score(ResolvedMetric(metric.qualified, counting, metric.spec), candidate, champion, ids) is scores.score(metric, candidate, champion, ids)  # asked again: kept
    assert calls == [49, 49, len(some - {"item-0"}), len(some - {"item-0"})]


def test_without_resampled_the_gate_aggregates_each_leave_one_out_frame_once_for_every_metric():
    definition = registry.get("lcm-mc")
    aggregated: list[int] = []

    def counted(frame: pd.DataFrame) -> dict[str, float | int | None]:
        aggregated.append(len(frame))
        return definition.aggregate(frame)

    plain = replace(definition, resampled=None, aggregate=counted)
    candidate, champion = _versions("lcm-mc", 20, 0.6, 4)
    scores = PairedScores()
    for name in ("acc", "lcm", "f1"):
        metric = resolve_metric(f"lcm-mc/{name}")
        alone = paired_score(candidate, champion, set_statistic(metric), None, metric.value_range)
        _same_score(scores.score(ResolvedMetric(metric.qualified, plain, metric.spec), candidate, champion), alone)
    assert sorted(aggregated) == [18] * 38 + [19, 19]  # both versions whole, then without each of the 19 shared items


def test_a_resampled_that_takes_only_arrays_is_refused_when_registered():
    lcm = registry.get("lcm-mc")
    assert lcm.resampled is not None
    resampled = lcm.resampled

    def arrays_only(frame: pd.DataFrame, counts: object) -> dict[str, np.ndarray]:
        return resampled(frame, np.asarray(counts, dtype=float))

    with pytest.raises(DefinitionError, match="resampled does not take LeaveOneOut weights"):
        registry.register(replace(lcm, name="lcm-x", resampled=arrays_only))

    def off_by_one_left_out(frame: pd.DataFrame, counts: object) -> dict[str, np.ndarray]:
        metrics = resampled(frame, counts)
        return {**metrics, "lcm": metrics["lcm"] + 0.01} if isinstance(counts, LeaveOneOut) else metrics

    with pytest.raises(DefinitionError, match="resampled gives lcm on LeaveOneOut weights"):
        registry.register(replace(lcm, name="lcm-x", resampled=off_by_one_left_out))
    assert "lcm-x" not in registry.names()
