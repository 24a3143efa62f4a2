"""The evaluator registry: one definition per evaluator, from which scoring, the suite's
runners, Great Expectations, the gate, correlations, drift and reports are derived."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from vlgate.evaluators import registry
from vlgate.evaluators.backends.base import BackendInfo, VisionLanguageBackend
from vlgate.evaluators.definition import Column, DefinitionError, DriftScore, Metric
from vlgate.evaluators.output import EvaluatorOutput, EvaluatorSummary
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.base import Runner, RunnerContext
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.scoring import score, validate
from vlgate.versions import VersionRef


class ConstantBackend(VisionLanguageBackend):
    """A test double: P(option 0) = ``p`` for every request."""

    def __init__(self, p: float):
        self.p = p
        self.info = BackendInfo(name="constant", model="constant", digest=f"sha256:{p}")

    def choice_probs(self, requests):
        return [np.array([self.p, 1 - self.p]) for _ in requests]

    def generate(self, requests):
        raise AssertionError("not used")


@pytest.fixture
def coin(tmp_path_factory, monkeypatch):
    """The toy evaluator of ``tests/toy_evaluator/``, installed as any plugin is: an entry
    point in a distribution's metadata, found on the path."""
    site = tmp_path_factory.mktemp("site")
    metadata = site / "toy_evaluator-0.1.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-evaluator\nVersion: 0.1\n")
    (metadata / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\ncoin = toy_evaluator:DEFINITIONS\n")
    monkeypatch.syspath_prepend(str(site))
    assert registry.register_plugins() == ["coin"]
    try:
        yield registry.get("coin")
    finally:
        registry.unregister("coin")


def _coin_records(p: list[float]) -> list[dict]:
    return [{"id": f"c{n}", "p_heads": value, "answer": "heads"} for n, value in enumerate(p)]


def test_a_toy_evaluator_added_through_the_registry_alone_runs_scores_checks_gates_correlates_and_reports(coin, tmp_path):
    from vlgate.dashboards.collect import ValidationReportData
    from vlgate.dashboards.leaderboard_rows import leaderboard_metrics
    from vlgate.dashboards.pictures import model_figures
    from vlgate.dashboards.report import render_version_report
    from vlgate.evaluators.running.items import load_items
    from vlgate.evaluators.running.suite import Suite, finish_evaluator, make_runner
    from vlgate.flows.correlations import correlate_across_versions
    from vlgate.flows.expectations import validate_evaluator_output
    from vlgate.gate.gates import decide
    from vlgate.gate.policy import GatePolicy

    # the suite accepts its entry with its own settings model, and builds its runner
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump({"name": "toy", "evaluators": {"coin": {"data": ".", "flips": 4}}}))
    suite = Suite.from_file(suite_file)
    assert isinstance(suite.evaluators["coin"], coin.settings) and suite.evaluators["coin"].flips == 4
    items, _ = load_items("coin", suite.evaluators["coin"], tmp_path)
    runner = make_runner("coin", suite.evaluators["coin"], ConstantBackend(0.8), tmp_path, suite)
    result = runner.run(items, RecordStore(tmp_path / "coin" / "records.jsonl"))
    metrics = finish_evaluator(result, tmp_path)
    # scored: 4 records at p = 0.8, all "heads": confidence 0.8, all correct
    assert metrics["n"] == 4 and metrics["confidence"] == pytest.approx(0.8) and metrics["acc"] == 1.0
    assert json.loads((tmp_path / "coin" / "metrics.json").read_text())["confidence"] == pytest.approx(0.8)

    # expectation-checked: the registry's column range and required metric become GX expectations
    output = EvaluatorOutput.from_folder("coin", tmp_path / "coin", EvaluatorSummary(metrics=metrics, n_items=4))
    assert validate_evaluator_output("coin", output.samples, metrics, 4).success
    broken = validate_evaluator_output("coin", output.samples, {k: v for k, v in metrics.items() if k != "confidence"}, 4)
    assert not broken.success and any("metric 'confidence' is missing" in line for line in broken.failures())

    # gated: a floor and a regression rule on its metric, judged against a champion
    policy = GatePolicy(required=["coin"], floors={"coin/confidence": 0.7}, regressions={"coin/confidence": {"max_drop": 0.01}}, resamples=200)
    champion = EvaluatorOutput.from_records("coin", _coin_records([0.9] * 20), score(validate("coin", parse_jsonl(json.dumps(r) for r in _coin_records([0.9] * 20)))))
    worse = EvaluatorOutput.from_records("coin", _coin_records([0.8] * 20), score(validate("coin", parse_jsonl(json.dumps(r) for r in _coin_records([0.8] * 20)))))
    decision = decide(policy, {"coin": worse}, {"coin": champion})
    assert not decision.promote
    assert [c.name for c in decision.checks if not c.passed] == ["coin/confidence vs champion"]
    assert decide(policy, {"coin": champion}, {"coin": worse}).promote

    # correlated across versions with the labelled metric its definition names
    table = pd.DataFrame({"coin/confidence": [0.6, 0.7, 0.8, 0.9], "coin/acc": [0.5, 0.6, 0.8, 0.9]}, index=["1", "2", "3", "4"])
    found = correlate_across_versions(table)
    assert set(found) == {"coin/confidence~coin/acc"} and found["coin/confidence~coin/acc"]["spearman"] == pytest.approx(1.0)

    # reported: its section with its metrics, and its headline metrics on the leaderboard
    board = table.assign(decision="promoted", champion=False, run_id=None, reasons="")
    data = ValidationReportData(model="toy", version="4", run_id="r", decision="promoted", reasons=["ok"], champion="4", source="s", description="")
    data.evaluators["coin"] = output
    html = render_version_report(data, model_figures(board, pd.DataFrame()), pd.DataFrame(), "sqlite:///x").html
    assert 'id="evaluator-coin"' in html and 'data-metric="coin/confidence"' in html
    assert "figure-correlation-coin-confidence" in html
    assert leaderboard_metrics(list(table.columns)) == ["coin/confidence", "coin/acc"]

    # and drift reads its per-sample score by name
    assert registry.get("coin").drift_score == DriftScore("confidence", "confidence")


def test_an_unknown_evaluator_in_a_suite_or_a_policy_is_refused_by_name(tmp_path):
    from vlgate.evaluators.running.suite import Suite
    from vlgate.gate.policy import GatePolicy

    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump({"name": "x", "evaluators": {"coin": {"data": "."}}}))
    with pytest.raises(ValueError, match="evaluators.coin: Extra inputs are not permitted"):
        Suite.from_file(suite_file)
    with pytest.raises(ValueError, match="not EVALUATOR/METRIC"):
        GatePolicy(floors={"coin/confidence": 0.5})


def test_a_policy_naming_a_metric_that_does_not_exist_is_refused_when_loaded():
    from vlgate.gate.policy import GatePolicy

    with pytest.raises(ValueError, match="lcm-mc has no metric 'accuracy'"):
        GatePolicy(floors={"lcm-mc/accuracy": 0.5})
    with pytest.raises(ValueError, match="cannot be compared with the champion"):
        GatePolicy(regressions={"lcm-mc/n_labelled": {"max_drop": 1}})
    assert GatePolicy(floors={"genception/gc@5": 0.5, "decc/reliable_rate/multi": 0.2}).floors


def test_metric_templates_match_every_setting_and_name_their_direction():
    assert registry.metric("genception/gc@5").name == "gc@{T}"
    assert registry.metric("genception/gc_fid@12").direction == "lower"
    assert registry.metric("genception/fid@2").direction == "lower"
    assert registry.metric("decc/brier/vlm2").direction == "lower"
    assert registry.metric("lcm-mc/lcm").direction == "higher"
    assert registry.metric("genception/gc@x") is None and registry.metric("nope/lcm") is None
    assert registry.get("genception").metric("gc@{T}") is None  # a template is not a concrete name
    (gc,) = [m for m in registry.get("genception").metrics if m.name == "gc@{T}"]
    assert gc.resolve({"T": 5}) == "gc@5"


def test_the_built_in_evaluators_come_from_the_papers_packages_in_order_with_their_own_examples():
    import importlib

    assert registry.names() == ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")
    for definition in registry.definitions():
        package = importlib.import_module(definition.build_runner.__module__.rsplit(".", 1)[0])
        assert package.__name__ in registry.BUILT_IN and definition in package.DEFINITIONS
        assert definition.example.parent == Path(package.__file__).parent / "examples" and definition.example.is_file()


def test_a_definition_that_names_a_metric_its_functions_do_not_return_is_refused_when_registered():
    vlind = registry.get("vlind")
    without_s_ck = replace(vlind, name="vlind-without-s_ck", metrics=tuple(m for m in vlind.metrics if m.name != "s_ck"))
    with pytest.raises(DefinitionError, match="its functions return the metric 's_ck', which it does not declare"):
        registry.register(without_s_ck)
    with_extra = replace(vlind, name="vlind-with-extra", metrics=(*vlind.metrics, Metric("s_xx")))
    with pytest.raises(DefinitionError, match="declares the metric 's_xx' but its functions do not return it"):
        registry.register(with_extra)
    assert "vlind-without-s_ck" not in registry.names() and "vlind-with-extra" not in registry.names()


def test_a_definition_whose_columns_or_resampling_disagree_with_its_functions_is_refused():
    lcm = registry.get("lcm-mc")
    with pytest.raises(DefinitionError, match="per_sample's column 'n_yes' is not declared"):
        registry.register(replace(lcm, name="lcm-x", columns=tuple(c for c in lcm.columns if c.name != "n_yes")))
    with pytest.raises(DefinitionError, match="the declared per_sample's column 'p_xx' is missing"):
        registry.register(replace(lcm, name="lcm-x", columns=(*lcm.columns, Column("p_xx"))))

    def shifted(frame, counts):  # the lcm of each resample, off by 0.01
        return {**lcm.resampled(frame, counts), "lcm": lcm.resampled(frame, counts)["lcm"] + 0.01}

    with pytest.raises(DefinitionError, match="resampled gives lcm = .* on the records weighted once, aggregate"):
        registry.register(replace(lcm, name="lcm-x", resampled=shifted))
    with pytest.raises(DefinitionError, match="resampled's metric 'acc' is not declared|the declared resampled's metric 'acc' is missing"):
        registry.register(replace(lcm, name="lcm-x", resampled=lambda frame, counts: {k: v for k, v in lcm.resampled(frame, counts).items() if k != "acc"}))
    assert "lcm-x" not in registry.names()


def test_a_plugin_entry_point_that_cannot_be_loaded_is_named(tmp_path, monkeypatch):
    metadata = tmp_path / "broken_plugin-0.1.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (metadata / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\nbroken = no_such_module:DEFINITIONS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DefinitionError, match="entry point 'broken' \\(no_such_module:DEFINITIONS\\) of group 'vlgate.evaluators' cannot be loaded"):
        registry.register_plugins()


@pytest.mark.parametrize("evaluator", ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"])
def test_every_evaluator_section_draws_from_its_example_records(evaluator, tmp_path):
    from matplotlib.figure import Figure

    from vlgate.dashboards.pictures import section_inputs
    from vlgate.evaluators.scoring import per_sample_frame

    definition = registry.get(evaluator)
    records = [json.loads(line) for line in definition.example.read_text().splitlines()]
    output = EvaluatorOutput(evaluator, records=records, samples=per_sample_frame(validate(evaluator, parse_jsonl(json.dumps(r) for r in records))), folder=tmp_path)
    section = definition.report_section(section_inputs(output))
    assert section.figures or section.examples
    for figure in section.figures:
        drawn = figure.draw()
        assert isinstance(drawn, Figure) and drawn.axes, figure.name
    if evaluator.startswith("lcm"):  # the five lowest P_LC, lowest first
        assert [e["id"] for e in section.examples] == output.samples.nsmallest(5, "p_lc")["id"].tolist()


# --- GenCeption at iterations: 5 ---------------------------------------------------------------


def _genception_records(offset: float) -> list[dict]:
    rng = np.random.default_rng(7)
    return [
        {"id": f"g{n}", "category": "shapes", "s": list(np.clip(rng.uniform(0.3, 0.9, 5) + offset, -1, 1))}
        for n in range(60)  # enough images for a shift of 0.1 on every one to show (the score test's range is ±2 here)
    ]


@pytest.mark.service
def test_genception_at_five_iterations_is_logged_gated_and_correlated_as_gc_at_5(tmp_path, monkeypatch):
    from vlgate import tracking
    from vlgate.evaluators.running.suite import Suite
    from vlgate.flows import recording
    from vlgate.flows.correlations import correlate_across_versions, version_table
    from vlgate.flows.expectations import validate_evaluator_output
    from vlgate.gate.gates import decide
    from vlgate.gate.policy import GatePolicy
    from vlgate.registry_hooks.claims import ClaimStore

    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump({"name": "g5", "evaluators": {"genception": {"data": ".", "encoder": "enc", "iterations": 5}}}))
    settings = Suite.from_file(suite_file).evaluators["genception"]
    assert settings.iterations == 5

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("VLGATE_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("VLGATE_STATE_DB", raising=False)
    client = tracking.connect(home)
    client.create_registered_model("g5")
    claims = ClaimStore.for_home(home)
    outputs = {}
    for version, (offset, acc) in enumerate([(-0.3, 0.4), (-0.1, 0.6), (0.0, 0.7), (0.1, 0.9)], start=1):
        run = client.create_run(tracking.experiment_id(client, "g5 (registrations)", home))
        client.create_model_version("g5", f"{run.info.artifact_uri}/checkpoint", run_id=run.info.run_id)
        claims.claim(VersionRef(model="g5", version=str(version)), via="manual")
        run_id = recording.ensure_validation_run(client, claims, VersionRef(model="g5", version=version))
        records = _genception_records(offset)
        metrics = score(validate("genception", parse_jsonl(json.dumps(r) for r in records)))
        assert "gc@5" in metrics and "gc@3" not in metrics
        output = EvaluatorOutput.from_records("genception", records, metrics, summary=EvaluatorSummary(metrics=metrics, n_items=len(records)))
        report = validate_evaluator_output("genception", output.samples, metrics, len(records))
        assert report.success and any(r["column"] == "gc@5" and r["expectation"] == "ExpectColumnValuesToNotBeNull" for r in report.results)
        recording.log_look.fn(run_id, {output.evaluator: output})
        recording.log_outputs.fn(run_id, {output.evaluator: output})
        client.log_metric(run_id, "lcm-mc/acc", acc)
        client.set_terminated(run_id, "FINISHED")
        outputs[version] = output

    # logged under MLflow's name and read back under vlgate's
    table = version_table(client, "g5")
    assert "genception/gc@5" in table.columns
    assert table.loc["4", "genception/gc@5"] == pytest.approx(outputs[4].metrics["gc@5"])
    # correlated with the labelled metric the registry pairs it with
    found = correlate_across_versions(table)
    assert found["genception/gc@5~lcm-mc/acc"]["n"] == 4 and found["genception/gc@5~lcm-mc/acc"]["spearman"] == pytest.approx(1.0)
    # gated: floors and regressions on gc@5 (v1 is 0.3 lower on every sample than v3)
    policy = GatePolicy(required=["genception"], floors={"genception/gc@5": 0.2}, regressions={"genception/gc@5": {"max_drop": 0.05}}, resamples=200)
    decision = decide(policy, {"genception": outputs[1]}, {"genception": outputs[3]})
    assert [c.name for c in decision.checks if not c.passed] == ["genception/gc@5 vs champion"]
    assert decide(policy, {"genception": outputs[4]}, {"genception": outputs[3]}).promote


# --- helper models have owned lifetimes -----------------------------------------------------


def test_a_runner_closes_the_helper_models_it_loaded_last_first_and_once():
    closed = []

    class Helper:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    runner = Runner("coin", {}, "v", lambda item: None, lambda batch: [], owned=[Helper("encoder"), Helper("generator")])
    runner.close()
    runner.close()
    assert closed == ["generator", "encoder"]


@pytest.mark.world
def test_genception_and_decc_runners_own_and_release_their_helper_models(tmp_path):
    from vlgate.evaluators.backends.deferred import DeferredBackend, DeferredEncoder
    from vlgate.evaluators.backends.encoders import VitClsEncoder
    from vlgate.evaluators.backends.loading import LoadPolicy
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend
    from vlgate.evaluators.scenes.generator import SceneRendererGenerator
    from vlgate.evaluators.world.build import SHIPPED_WORLD, shipped_manifest

    checkpoints = shipped_manifest()["checkpoints"]
    context = RunnerContext(vlm=ConstantBackend(0.5), out=tmp_path, policy=LoadPolicy())
    genception = registry.get("genception")
    runner = genception.build_runner(genception.settings(data=tmp_path, encoder=str(SHIPPED_WORLD / checkpoints["vit_encoder"])), context)
    encoder, generator = runner.owned
    # the encoder is named by its digest and loaded when a record is computed (backends/deferred.py)
    assert isinstance(encoder, DeferredEncoder) and not encoder.loaded and isinstance(generator, SceneRendererGenerator)
    loaded = encoder.loaded_model()
    assert isinstance(loaded, VitClsEncoder) and loaded.model is not None
    runner.close()
    assert loaded.model is None and runner.owned == []
    decc = registry.get("decc")
    runner = decc.build_runner(decc.settings(data=tmp_path, llm=str(SHIPPED_WORLD / checkpoints["llm_agent"])), context)
    (llm,) = runner.owned
    assert isinstance(llm, DeferredBackend) and not llm.loaded
    agent = llm.loaded_model()
    assert isinstance(agent, TransformersBackend) and agent.model is not None
    runner.close()
    assert agent.model is None


def test_a_headline_metric_identical_across_the_last_versions_is_a_warning():
    import pandas as pd

    from vlgate.flows.correlations import identical_across_versions

    table = pd.DataFrame(
        {
            "genception/gc@3": [0.5, 0.6682, 0.6682, 0.6682],  # the same in v2..v4
            "lcm-mc/lcm": [0.4, 0.5, 0.6, 0.7],
            "lcm-mc/n_reliable": [3, 3, 3, 3],  # a count: not a headline, never a warning
            "vlind/s_ck": [0.8, 0.8, None, 0.8],  # v3 has none: not three identical values
        },
        index=pd.Index(["1", "2", "3", "10"], name="version"),  # by number: 10 comes after 3
    )
    [warning] = identical_across_versions(table, "10")
    assert warning.startswith("genception/gc@3 is 0.6682 in each of v2, v3, v10: identical across the last 3 versions")
    assert identical_across_versions(table, "3") == []  # v1..v3: 0.5, 0.6682, 0.6682
    assert identical_across_versions(table.loc[["2", "3"]], "3") == []  # fewer than three versions
    assert identical_across_versions(table, "7") == []  # a version not in the table
    assert [w.split(" is ")[0] for w in identical_across_versions(table, "2", last=2)] == ["vlind/s_ck"]  # v1, v2: 0.8 twice


def test_a_headline_metric_pinned_at_its_best_bound_is_saturation_said_once():
    """VLind's s_ck = 1 (its best possible value) in v3, v4 and v5 is saturation, not a
    blind evaluator: no "identical" warning, and one saturation note, on v5, the first
    version whose last three reach it. A value identical inside the range, or at the worst
    bound, is still the warning on every version."""
    import pandas as pd

    from vlgate.flows.correlations import identical_across_versions, identical_runs

    table = pd.DataFrame(
        {
            "vlind/s_ck": [0.9, 0.95, 1.0, 1.0, 1.0, 1.0],  # higher is better, at most 1
            "genception/gc_fid@3": [5.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # lower is better, at least 0
            "vlind/s_vp": [0.7] * 6,  # inside the range
            "lcm-mc/lcm": [0.0, 0.1, 0.0, 0.0, 0.0, 0.0],  # at the worst bound
        },
        index=pd.Index(["1", "2", "3", "4", "5", "6"], name="version"),
    )
    runs = {version: [(run.metric, run.saturated, run.started) for run in identical_runs(table, version)] for version in ("3", "4", "5", "6")}
    assert runs == {
        "3": [("vlind/s_vp", False, True)],
        "4": [("genception/gc_fid@3", True, True), ("vlind/s_vp", False, False)],
        "5": [("vlind/s_ck", True, True), ("genception/gc_fid@3", True, False), ("vlind/s_vp", False, False), ("lcm-mc/lcm", False, True)],
        "6": [("vlind/s_ck", True, False), ("genception/gc_fid@3", True, False), ("vlind/s_vp", False, False), ("lcm-mc/lcm", False, False)],
    }
    flagged = {version: [warning.split(" ", 1)[0] for warning in identical_across_versions(table, version)] for version in ("4", "5", "6")}
    assert flagged == {"4": ["genception/gc_fid@3", "vlind/s_vp"], "5": ["vlind/s_ck", "vlind/s_vp", "lcm-mc/lcm"], "6": ["vlind/s_vp", "lcm-mc/lcm"]}
    assert ["saturated" in warning for warning in identical_across_versions(table, "5")] == [True, False, False]


# --- the gate's one-pass bootstrap: ``resampled`` equals ``aggregate`` on every resample ---


def _example_frame(evaluator: str, unlabel_every: int | None = None) -> pd.DataFrame:
    """The evaluator's example records as a per-sample frame (``id`` dropped); with
    ``unlabel_every=k`` every k-th record loses its label (a partly labelled set)."""
    from vlgate.evaluators.scoring import per_sample_frame

    records = [json.loads(line) for line in registry.get(evaluator).example.read_text().splitlines()]
    if unlabel_every:
        records = [{k: v for k, v in r.items() if not (k == "answer" and n % unlabel_every == 0)} for n, r in enumerate(records)]
    return per_sample_frame(validate(evaluator, parse_jsonl(json.dumps(r) for r in records))).drop(columns="id")


@pytest.mark.parametrize(("evaluator", "unlabel_every"), [(e, None) for e in ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")] + [("lcm-mc", 3), ("lcm-nb", 3), ("decc", 3)])
def test_resampled_metrics_equal_the_aggregate_of_each_resample(evaluator, unlabel_every):
    """For every metric ``resampled`` gives, on 40 random draws (rows drawn 0, 1 or more
    times, some draws leaving whole categories, labels or second rounds out) and on the
    identity draw: the value the evaluator's own ``aggregate`` gives for the frame with each
    row repeated as often as drawn (None → NaN)."""
    definition = registry.get(evaluator)
    frame = _example_frame(evaluator, unlabel_every)
    n = len(frame)
    rng = np.random.default_rng(7)
    draws = [rng.integers(0, n, size=n) for _ in range(30)] + [rng.integers(0, max(1, n // 6), size=n) for _ in range(10)] + [np.arange(n)]
    counts = np.stack([np.bincount(draw, minlength=n) for draw in draws]).astype(float)
    resampled = definition.resampled(frame, counts)
    assert resampled, evaluator
    for row, draw in enumerate(draws):
        expected = definition.aggregate(frame.iloc[np.sort(draw)].reset_index(drop=True))
        for metric, values in resampled.items():
            value = expected.get(metric)
            assert values[row] == pytest.approx(np.nan if value is None else value, abs=1e-12, nan_ok=True), (evaluator, metric, row)


@pytest.mark.parametrize("evaluator", ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"])
def test_resampled_covers_every_metric_a_regression_rule_can_name(evaluator):
    """Every metric of ``aggregate`` with a direction (what the gate bootstraps) is in
    ``resampled``, so no gate rule falls back to aggregating resample by resample."""
    definition = registry.get(evaluator)
    frame = _example_frame(evaluator)
    directional = {name for name, value in definition.aggregate(frame).items() if (spec := definition.metric(name)) is not None and spec.direction is not None}
    assert directional and directional <= set(definition.resampled(frame, np.zeros((0, len(frame)))))


def test_the_registry_resolves_its_sources_on_first_use_and_checks_each_definition_once_where_asked(capsys):
    """The built-in packages come first, in order, whatever asked first; ``check_definitions``
    runs each self-check once; a definition that disagrees with itself is named, and ``vlgate
    check`` (as ``vlgate serve`` before it starts) refuses it in one line, exit 2."""
    from dataclasses import replace

    from vlgate.cli.main import main

    assert registry.names()[:5] == ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")
    registry._CHECKED.clear()
    assert registry.check_definitions()[:5] == ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"]
    assert set(registry._CHECKED) >= {"lcm-mc", "lcm-nb", "vlind", "genception", "decc"}
    assert main(["check", "--json"]) == 0 and json.loads(capsys.readouterr().out)["checked"][:5] == ["lcm-mc", "lcm-nb", "vlind", "genception", "decc"]

    lcm = registry.get("lcm-mc")
    broken = replace(lcm, name="lcm-broken", columns=tuple(c for c in lcm.columns if c.name != "n_yes"))
    registry.EVALUATORS.add(broken)  # as a plugin found on first use is added: unchecked
    try:
        with pytest.raises(DefinitionError, match="evaluator 'lcm-broken': .*n_yes"):
            registry.check_definitions()
        assert main(["check"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("vlgate check: evaluator 'lcm-broken'")
    finally:
        registry.unregister("lcm-broken")
