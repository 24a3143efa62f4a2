"""Dashboards: plots on known data, the report and leaderboard built from a real
embedded MLflow store, and both pages opened in headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
import pytest
import yaml

from vlgate import tag_keys
from vlgate.dashboards import plots
from vlgate.decisions import DecisionKind, Rule
from vlgate.evaluators import registry
from vlgate.evaluators.decc.figures import decc_matrix, decc_matrix_figure
from vlgate.evaluators.genception.figures import ImageChain, genception_chain_figure, genception_curves_figure
from vlgate.evaluators.metrics.drift import detect_drift
from vlgate.evaluators.records import parse_jsonl, read_jsonl
from vlgate.evaluators.scoring import per_sample_frame, score, validate
from vlgate.evaluators.vl_lcm.definition import EXAMPLES as VL_LCM_EXAMPLES
from vlgate.evaluators.vl_lcm.figures import response_distribution_figure
from vlgate.evaluators.vlind.figures import vlind_funnel_figure
from vlgate.flows.context import ServiceContext
from vlgate.versions import VersionRef

pytestmark = pytest.mark.service

ARTEFACTS = Path(__file__).resolve().parent / "artefacts"


def legend_texts(figure) -> list[str]:
    return [text.get_text() for text in figure.axes[0].get_legend().get_texts()]


# --- plots on known data ----------------------------------------------------------------


def test_correlation_figure_on_paper_table1_shows_the_papers_coefficients():
    table = pd.read_csv(VL_LCM_EXAMPLES / "vl-lcm-table1-coco.csv", dtype=str)
    figure = plots.correlation_figure(table, "lcm", ["acc", "j_acc", "f1"], ranks=True)
    # VL-LCM paper Table 1, COCO: Pearson / Spearman / Kendall of LCM with Acc, J-Acc, F1
    assert legend_texts(figure) == [
        "acc: r=.8265 ρ=.8909 τ=.7091 (n=11)",
        "j_acc: r=.8079 ρ=.8727 τ=.7091 (n=11)",
        "f1: r=.9615 ρ=.9545 τ=.8545 (n=11)",
    ]
    points = figure.axes[0].collections[2].get_offsets()  # the f1 scatter: (LCM, F1) per model
    assert points[0].tolist() == pytest.approx([0.4579, 0.5310])
    assert plots.png(figure)[:8] == b"\x89PNG\r\n\x1a\n"


def test_response_distribution_sorts_versions_by_lcm_and_draws_the_four_rates():
    table = pd.DataFrame(
        {"lcm-mc/lcm": [0.5, 0.2, 0.4], "lcm-mc/abstention": [0.1, 0.3, 0.2], "lcm-mc/confidence": [0.8, 0.2, 0.5], "lcm-mc/overconfidence": [0.1, 0.5, 0.3]},
        index=["1", "2", "3"],
    )
    axes = response_distribution_figure(table).axes[0]
    assert [label.get_text() for label in axes.get_xticklabels()] == ["v2", "v3", "v1"]
    heights = {container.get_label(): [bar.get_height() for bar in container] for container in axes.containers}
    assert heights == {"lcm": [0.2, 0.4, 0.5], "abstention": [0.3, 0.2, 0.1], "confidence": [0.2, 0.5, 0.8], "overconfidence": [0.5, 0.3, 0.1]}


def test_vlind_funnel_counts_instances_passing_each_stage_per_concept():
    valid = validate("vlind", read_jsonl(registry.get("vlind").example))
    frame = per_sample_frame(valid)
    concepts = valid.column("concept")
    axes = vlind_funnel_figure(frame, concepts).axes[0]
    heights = {container.get_label(): [bar.get_height() for bar in container] for container in axes.containers}
    names = [label.get_text() for label in axes.get_xticklabels()]
    for n, concept in enumerate(names):
        rows = frame[np.asarray(concepts) == concept]
        assert heights["CK"][n] == rows["ck"].sum()
        assert heights["CK∧VP"][n] == (rows["ck"] & rows["vp"]).sum()
        assert heights["CK∧VP∧CB"][n] == (rows["ck"] & rows["vp"] & rows["cb"]).sum()
        assert heights["LP (all)"][n] == pytest.approx(rows["lp"].sum())
    assert sorted(names) == names and set(names) == set(concepts)


def test_genception_curves_start_at_one_and_the_mean_line_is_the_mean_of_s_t():
    frame = per_sample_frame(validate("genception", read_jsonl(registry.get("genception").example)))
    mean_line = genception_curves_figure(frame).axes[0].lines[-1]
    assert mean_line.get_xdata().tolist() == [0, 1, 2, 3]
    assert mean_line.get_ydata().tolist() == pytest.approx([1.0, frame["s@1"].mean(), frame["s@2"].mean(), frame["s@3"].mean()])


def test_genception_chain_grid_has_seed_and_each_iteration_titled_with_s(tmp_path):
    from PIL import Image

    seed = tmp_path / "seed.png"
    Image.new("RGB", (16, 16), (200, 10, 10)).save(seed)
    chain = ImageChain(id="gc-7", gc=0.5, seed=seed, images=[seed, None], s=[0.61, 0.42])
    figure = genception_chain_figure([chain])
    titles = [axes.get_title() for axes in figure.axes]
    assert titles == ["gc-7\nseed (GC=0.500)", "X1: s=0.610", "X2: s=0.420"]
    assert len(figure.axes[0].images) == 1 and len(figure.axes[2].images) == 0  # a missing image says so


def test_a_file_that_is_not_an_image_is_left_out_of_the_report_not_fatal(tmp_path):
    from PIL import Image

    from vlgate.dashboards.pictures import thumbnail

    seed, text, truncated = tmp_path / "seed.png", tmp_path / "notes.png", tmp_path / "cut.png"
    Image.new("RGB", (16, 16), (200, 10, 10)).save(seed)
    text.write_text("not a picture")
    truncated.write_bytes(seed.read_bytes()[:40])
    assert thumbnail(text) is None and thumbnail(truncated) is None and thumbnail(seed).startswith("data:image/png;base64,")
    chain = ImageChain(id="gc-8", gc=0.5, seed=seed, images=[text, truncated], s=[0.6, 0.4])
    figure = genception_chain_figure([chain])
    assert [len(axes.images) for axes in figure.axes] == [1, 0, 0]
    assert [text.get_text() for axes in figure.axes[1:] for text in axes.texts] == ["unreadable", "unreadable"]


def test_decc_matrix_counts_reliable_against_correct():
    frame = per_sample_frame(validate("decc", read_jsonl(registry.get("decc").example)))
    matrix = decc_matrix(frame)
    reliable, correct = frame["multi"].astype(bool), frame["correct"].astype(bool)
    assert matrix.loc["reliable", "correct"] == (reliable & correct).sum()
    assert matrix.loc["unreliable", "wrong"] == (~reliable & ~correct).sum()
    assert matrix.to_numpy().sum() == len(frame)
    texts = [t.get_text() for t in decc_matrix_figure(frame).axes[0].texts]
    assert texts == [str(v) for v in matrix.to_numpy().ravel()]


def test_drift_history_marks_only_the_drifted_checks():
    times = pd.to_datetime(["2026-11-01", "2026-11-02", "2026-11-03"], utc=True)
    history = pd.DataFrame({"time": times, "metric": "lcm-nb/lcm", "value": [0.6, 0.59, 0.4], "drifted": [False, False, True]})
    axes = plots.drift_history_figure(history).axes[0]
    assert axes.lines[0].get_ydata().tolist() == [0.6, 0.59, 0.4]
    assert axes.collections[0].get_offsets()[:, 1].tolist() == [0.4]
    assert "drift detected" in [t.get_text() for t in axes.get_legend().get_texts()]
    # the time axis reads as the report's table: UTC, to the minute (to the second within a day)
    formatter = axes.xaxis.get_major_formatter()
    assert formatter(mdates.date2num(times[1].to_pydatetime())) == "2026-11-02 00:00" and axes.get_xlabel() == "time (UTC)"
    minutes = pd.to_datetime(["2026-11-01 22:18:05", "2026-11-01 22:19:40"], utc=True)
    axes = plots.drift_history_figure(history.iloc[:2].assign(time=minutes)).axes[0]
    assert axes.xaxis.get_major_formatter()(mdates.date2num(minutes[0].to_pydatetime())) == "22:18:05" and axes.get_xlabel() == "time (UTC, 2026-11-01)"


# --- the report and leaderboard from a real embedded MLflow store -----------------------


def _sharpen(p: np.ndarray, power: float) -> np.ndarray:
    p = np.asarray(p, dtype=float) ** power
    return p / p.sum(axis=-1, keepdims=True)


def _squash(p: np.ndarray, power: float) -> np.ndarray:
    """Yes-probabilities moved away from (power > 1) or towards (power < 1) one half."""
    logit = np.log(np.asarray(p) / (1 - np.asarray(p)))
    return 1 / (1 + np.exp(-logit * power))


def version_records(power: float) -> dict[str, list[dict]]:
    """Example records, with VL-LCM's probabilities sharpened by ``power`` so versions differ."""
    records = {name: [json.loads(line) for line in registry.get(name).example.read_text().splitlines()] for name in ("lcm-mc", "lcm-nb", "vlind", "genception", "decc")}
    for record in records["lcm-mc"]:
        record["p_mc"] = _sharpen(record["p_mc"], power).tolist()
        record["p_yes"] = _squash(record["p_yes"], power).tolist()
        record["question"] = f"What is shown in {record['id']}?"
        record["options"] = ["red", "green", "blue", "grey"][: len(record["p_mc"])]
        record["protocol"] = "vlgate-1"  # the other examples' records name no protocol
    return records


def log_validation(client, home: Path, claims, model: str, records: dict[str, list[dict]], policy: Path) -> str:
    """One version registered and validated through the validation flow's own steps
    (expectations, logging, correlations, gate) on records given here instead of a model."""
    from vlgate import tracking
    from vlgate.evaluators.output import EvaluatorSummary
    from vlgate.flows import correlations, evaluation, judgement, recording
    from vlgate.gate.policy import GatePolicy

    experiment = tracking.experiment_id(client, f"{model} (registrations)", home)
    run = client.create_run(experiment)
    validations = tracking.experiment_id(client, tracking.validation_experiment(model), home)
    logged_model = client.create_logged_model(validations, name="checkpoint", source_run_id=run.info.run_id)  # as register_checkpoint registers
    registered = client.create_model_version(model, f"models:/{logged_model.model_id}", run_id=run.info.run_id, model_id=logged_model.model_id)
    version = registered.version
    claims.claim(VersionRef(model=model, version=str(version)), via="manual")
    run_id = recording.ensure_validation_run(client, claims, VersionRef(model=model, version=version))
    outcomes = {}
    for name, rows in records.items():
        folder = home / "validations" / model / str(version) / name
        folder.mkdir(parents=True)
        if name == "lcm-mc":  # each item's picture, logged with the records as a worker's are
            from PIL import Image

            (folder / "images").mkdir()
            for n, row in enumerate(rows):
                row["image"] = str(folder / "images" / f"{row['id']}.png")
                Image.new("RGB", (24, 24), (40 * n % 256, 90, 160)).save(row["image"])
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        metrics = score(validate(name, parse_jsonl(json.dumps(r) for r in rows)))
        (folder / "metrics.json").write_text(json.dumps(metrics))
        outcomes[name] = evaluation.check_evaluator(name, EvaluatorSummary(metrics=metrics, n_items=len(rows)), folder)
        recording.log_look.fn(run_id, {name: outcomes[name]})
        recording.log_outputs.fn(run_id, {name: outcomes[name]})
    correlations.log_correlations_across_versions(client, run_id, correlations.version_table(client, model, include_run=run_id))
    request = judgement.JudgementRequest(VersionRef(model=model, version=version), run_id, GatePolicy.from_file(policy), policy, kind=DecisionKind.VALIDATION)
    decision = judgement.judge(ServiceContext.open(), request, outcomes, record=True)
    # the run page's data sets and description, as the validation flow writes them
    from vlgate.evaluators.running.suite import Suite

    suite = Suite.model_validate({"name": "shapes", "evaluators": {"lcm-mc": {"data": str(home / "validations" / model / str(version) / "lcm-mc")}}})
    recording.log_suite_datasets(client, run_id, suite)
    recording.log_version_model(client, run_id, registered)
    client.set_tag(run_id, recording.RUN_NOTE, recording.run_note(decision, None, report_logged=False))
    client.set_terminated(run_id, "FINISHED")
    return str(version)


@pytest.fixture(scope="module")
def validated_store(tmp_path_factory):
    """Four versions of ``shapes`` in an embedded store: v1 and v2 promoted in turn, v3
    rejected (worse LCM), v4 rejected on a floor; plus two drift checks of the champion."""
    from vlgate import tracking
    from vlgate.flows import drift
    from vlgate.registry_hooks.claims import ClaimStore

    home = tmp_path_factory.mktemp("dash") / "home"
    home.mkdir()
    saved = {k: os.environ.get(k) for k in ("VLGATE_HOME", "MLFLOW_TRACKING_URI", "VLGATE_STATE_DB")}
    os.environ["VLGATE_HOME"] = str(home)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("VLGATE_STATE_DB", None)
    try:
        policy = home / "gate.yaml"
        policy.write_text(yaml.safe_dump({"required": ["lcm-mc", "decc"], "floors": {"lcm-mc/lcm": 0.25}, "regressions": {"lcm-mc/lcm": {"max_drop": 0.02}}, "resamples": 300}))
        client = tracking.connect(home)
        client.create_registered_model("shapes")
        claims = ClaimStore.for_home(home)
        for power in (1.0, 2.0, 1.5, 0.2):
            log_validation(client, home, claims, "shapes", version_records(power), policy)
        reference = np.linspace(0.4, 0.8, 40)
        for shift in (0.0, 0.3):
            result = detect_drift("lcm-nb/lcm", reference, reference - shift, alpha=0.05, max_mean_drop=0.05)
            drift.log_drift_run(client, VersionRef(model="shapes", version="2"), drift.BatchChecked("batch.yaml", {}, [result]), home)
        yield client, home
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def reports(validated_store, tmp_path_factory):
    from vlgate.dashboards.report import write_reports

    client, _ = validated_store
    out = tmp_path_factory.mktemp("reports")
    return client, write_reports(client, "shapes", None, out)


def test_store_holds_the_expected_decisions(validated_store):
    from vlgate import tracking

    client, _ = validated_store
    decisions = {str(v.version): v.tags[tag_keys.DECISION] for v in client.search_model_versions("name='shapes'")}
    assert decisions == {"1": "promoted", "2": "promoted", "3": "rejected", "4": "rejected"}
    assert tracking.champion_version(client, "shapes") == "2"


def data_values(page: str) -> dict[str, float]:
    return {name: float(value) for name, value in re.findall(r'data-metric="([^"]+)" data-value="([^"]+)"', page) if value not in ("None", "nan")}


def test_version_report_puts_the_decision_first_and_shows_the_logged_numbers(reports):
    from vlgate import tracking

    client, written = reports
    page = written.versions["3"].read_text()
    version = client.get_model_version("shapes", "3")
    assert page.index('id="decision"') < page.index('id="reasons"') < page.index('id="evaluator-')
    assert re.search(r'id="decision" class="decision rejected">REJECTED<', page)
    for reason in version.tags[tag_keys.REASONS].split("\n"):
        assert f"<li>{html.escape(reason)}</li>" in page
    assert "lcm-mc/lcm vs champion" in version.tags[tag_keys.REASONS]
    run_id = version.tags[tag_keys.VALIDATION_RUN]
    logged = {tracking.logged_metric_name(k): v for k, v in client.get_run(run_id).data.metrics.items()}
    # the breakdowns are logged as MLflow tables (a row per group), not as hundreds of metrics
    for table in client.list_artifacts(run_id, "tables"):
        evaluator, _, by = Path(table.path).stem.partition(".")
        if by.startswith("by_"):
            content = json.loads(Path(client.download_artifacts(run_id, table.path, str(Path(tempfile.mkdtemp())))).read_text())
            for row in content["data"]:
                cells = dict(zip(content["columns"], row))
                group = cells.pop(by.removeprefix("by_"))
                logged |= {f"{evaluator}/{by}/{group}/{name}": value for name, value in cells.items() if value is not None and value == value}
    shown = data_values(page)
    assert not any(k.startswith("correlation") for k in logged)  # the correlations are tables of the run, not its metrics
    assert shown.keys() == logged.keys() and len(shown) > 40 and any("/by_" in k for k in shown)
    # a breakdown's table cells are written as JSON numbers: metrics are exact
    assert [(k, v, shown[k]) for k, v in logged.items() if shown[k] != (pytest.approx(v, abs=1e-10) if "/by_" in k else pytest.approx(v, rel=1e-12))] == []
    for section in ("evaluator-lcm-mc", "evaluator-lcm-nb", "evaluator-vlind", "evaluator-genception", "evaluator-decc", "correlations", "expectations", "drift"):
        assert f'id="{section}"' in page
    for figure in ("lcm-mc-response-distribution", "vlind-funnel", "genception-curves", "genception-chains", "decc-matrix", "correlation-lcm-mc-lcm", "drift-history"):
        assert f'id="figure-{figure}"' in page
    assert page.count('data-expectations="') == 5 and 'data-expectations="lcm-mc">passed<' in page
    assert page.count('data-protocol="') == 1 and '<code data-protocol="lcm-mc">vlgate-1</code>' in page  # what the records name
    # the records of VLind, GenCeption, DeCC and NaturalBench are the same for every version here: warned, not blocked
    warnings = page[page.index('id="warnings"') : page.index("</ul>", page.index('id="warnings"'))]
    assert "vlind/s_ck is 0.833333 in each of v1, v2, v3: identical across the last 3 versions" in warnings
    assert "lcm-mc/lcm is" not in warnings  # it differs between versions
    # the decision records, the latest the one shown: here the validation's one
    history = page[page.index('id="decision-history"') : page.index("</table>", page.index('id="decision-history"'))]
    rows = re.findall(r'<tr data-record="\d+"><td class="num">(\d+)</td><td>([^<]+)</td>', history)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", history)
    assert rows == [("1", "validation")] and cells[4:7] == ['<span class="decision inconclusive">inconclusive</span>', "v2", "v2"]  # outcome (not decided: neutral, not red), against, champion after
    # who judged, and whether that is an authenticated identity; the policy by its digest, the path beside it
    record = tracking.decision_history(client, run_id)[-1]
    assert record.judged_by is not None and not record.judged_by.verified and record.policy_digest
    judged_by = re.search(r'data-judged-by="1">(.*?)</td>', history, re.S).group(1)
    assert judged_by.startswith(html.escape(record.judged_by.user or record.judged_by.process)) and "(not verified)" in judged_by
    assert re.search(rf'data-policy-digest="1"[^>]*>{record.policy_digest[:12]}</code>', history)
    assert 'id="decision-history" open' in page  # the records are in view, not folded away
    # the run's own page in MLflow's UI, where `mlflow ui` serves this embedded store
    experiment = client.get_run(run_id).info.experiment_id
    assert f'<a id="run-page" href="http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run_id}"' in page
    # the reasons lead with what did not pass, each check in full; what held is counted; every reason is kept below
    summary = re.findall(r"<li>(.*?)</li>", page[page.index('id="reasons"') : page.index("</ul>", page.index('id="reasons"'))])
    assert summary == [html.escape(line) for line in record.summary] and summary[0].startswith("lcm-mc/lcm vs champion: inconclusive, ")
    assert summary[1:] == ["5 evaluators ran", "expectations passed on 5 evaluators", "1 floor held"]


def test_low_lcm_examples_are_the_lowest_p_lc_samples_with_their_prompts(reports):
    client, written = reports
    page = written.versions["3"].read_text()
    frame = per_sample_frame(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in version_records(1.5)["lcm-mc"])))
    lowest = frame.nsmallest(5, "p_lc")
    section = page[page.index('id="low-lcm-lcm-mc"') : page.index('id="evaluator-lcm-nb"')]
    shown = re.findall(r'data-p-lc="([^"]+)">([^<]+)<', section)
    assert [i for i, _ in shown] == lowest["id"].tolist()
    assert [float(v) for _, v in shown] == pytest.approx(lowest["p_lc"].round(4).tolist(), abs=1e-9)
    assert f"What is shown in {lowest['id'].iloc[0]}?" in section


def test_a_version_judged_against_the_champion_shows_the_items_it_lost_as_vlgate_diff_counts_them(reports, capsys):
    from vlgate.cli.main import main

    _, written = reports
    first, page = written.versions["1"].read_text(), written.versions["3"].read_text()
    assert 'id="against-the-champion"' in first and "Not judged against a champion" in first and 'id="against-champion-' not in first
    assert "<h2>Against the champion v2</h2>" in page  # v3 was judged against v2
    # p_lc by hand: v3's VL-LCM probabilities are sharpened by 1.5, v2's by 2
    mine, theirs = (per_sample_frame(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in version_records(power)["lcm-mc"]))) for power in (1.5, 2.0))
    change = (mine.set_index("id")["p_lc"] - theirs.set_index("id")["p_lc"]).sort_values(kind="stable")
    lost = {f"lcm-mc/{score}": int(n) for score, n in re.findall(r'data-lost="lcm-mc/([^"]+)">(\d+)<', page)}
    assert lost["lcm-mc/p_lc"] == int((change < 0).sum()) > 0
    section = page[page.index('id="against-champion-lcm-mc"') : page.index('id="evaluator-lcm-nb"')]
    # the check that used them stands beside the counts, and the first items lost are the largest drops
    assert "lcm-mc/lcm vs champion" in section
    # sharpening keeps every argmax: nothing is lost on correct, so the items listed are
    # the largest P_LC drops
    assert lost["lcm-mc/correct"] == 0 and "First items lost on p_lc (largest drop first)" in section
    # the score behind the lcm check that held v3 back (inconclusive) is marked with it
    assert re.findall(r'data-behind="lcm-mc/([^"]+)"', section) == ["p_lc"]
    # not decided is neither a pass nor a failure: neutral wherever the check is shown, and
    # so is the score behind it alone
    assert re.findall(r'<span class="([a-z]+)" data-behind="lcm-mc/p_lc">', section) == ["undecided"]
    assert re.findall(r'<td class="([a-z]+)" data-verdict="lcm-mc/lcm vs champion">([a-z ]+)<', page) == [("undecided", "inconclusive")]
    assert re.findall(r'<span class="([a-z]+)" data-verdict="lcm-mc/lcm vs champion">', page) == ["undecided"]
    assert re.findall(r'data-lost-item="lcm-mc/([^"]+)"', section) == change.index[:5].tolist()
    # and the first items won beside them, the largest rise first, as vlgate diff lists them
    assert main(["diff", "shapes", "3", "2", "--evaluator", "lcm-mc", "--score", "p_lc", "--limit", "5", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["evaluators"]
    won = re.findall(r'data-won-item="lcm-mc/([^"]+)"', section)
    assert won == [item["id"] for item in listed["won"]] == change[change > 0].sort_values(ascending=False, kind="stable").index[:5].tolist() and won

    # the counts are vlgate diff's, score by score and evaluator by evaluator
    assert main(["diff", "shapes", "3", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    for diff in printed["evaluators"]:
        shown = {score: int(n) for score, n in re.findall(rf'data-lost="{diff["evaluator"]}/([^"]+)">(\d+)<', page)}
        assert shown == {score: entry["lost"] for score, entry in diff["scores"].items()}, diff["evaluator"]
    # the leaderboard's "why" of a rejected version leads here
    board = written.leaderboard.read_text()
    assert re.search(r'<tr data-version="3">.*?<a href="v3.html#against-the-champion">', board, re.S)


def test_the_items_lost_are_shown_with_their_pictures_and_both_versions_answers(reports, capsys):
    from vlgate.cli.main import main

    _, written = reports
    page = written.versions["4"].read_text()  # v4 (probabilities squashed towards one half) against v2
    section = page[page.index('id="against-champion-lcm-mc"') : page.index('id="evaluator-lcm-nb"')]
    listed = re.findall(r'data-lost-item="lcm-mc/([^"]+)"', section)
    assert main(["diff", "shapes", "4", "2", "--evaluator", "lcm-mc", "--score", "p_lc", "--limit", "5", "--json"]) == 0
    [diff] = json.loads(capsys.readouterr().out)["evaluators"]
    assert listed == [item["id"] for item in diff["lost"]] and listed
    first = section[section.index(f'data-lost-item="lcm-mc/{listed[0]}"') :]
    first = first[: first.index("</table>")]
    assert first.count('<img src="data:image/png;base64,') == 1
    assert f"<td>question</td><td>What is shown in {listed[0]}?</td><td>What is shown in {listed[0]}?</td>" in section
    # the options as a table, labelled as the prompt labels them, the answer marked, both versions' numbers rounded
    fields = diff["lost"][0]["fields"]
    options, answer = fields["options"]["candidate"], fields["answer"]["candidate"]
    table = first[first.index(f'data-item-lines="lcm-mc/{listed[0]}"') :]
    lines = re.findall(r'<tr class="(answer)?"><td>(.*?)</td>(.*?)</tr>', table)
    assert [(bool(marked), text) for marked, text, _ in lines] == [(k == answer, html.escape(f"({chr(65 + k)}) {option}") + (" ✓" if k == answer else "")) for k, option in enumerate(options)]
    numbers = [re.findall(r'<td class="num">([^<]*)</td>', cells) for *_, cells in lines]
    assert numbers == [[f"{fields[name][version][k]:.4f}" for name in ("p_mc", "p_yes") for version in ("candidate", "champion")] for k in range(len(options))]
    # none of those fields is shown raw beside it: no JSON, no 0-based index
    rows = section[section.index(f'data-lost-item="lcm-mc/{listed[0]}"') :]
    rows = rows[: rows.index("</div>\n  </div>")]
    assert not re.search(r"<td>(options|answer|p_mc|p_yes)</td>", rows) and "<td>question</td>" in rows


def test_against_the_champion_lists_the_items_behind_the_failing_check_first():
    """Hand-built: a version rejected by ``lcm-mc/lcm`` whose ``correct`` lost 2 items and won
    2 (the demo's v5). The report lists P_LC's lost items first, marked with the check,
    then ``correct``'s; P_LC leads the counts too."""
    from test_item_comparison import lcm_mc_diff

    from vlgate.dashboards.collect import ValidationReportData
    from vlgate.dashboards.report import against_champion
    from vlgate.decisions import Check, CheckKey, DecisionRecord, Outcome, Rule, Verdict
    from vlgate.evaluators.output import EvaluatorOutput

    def check(metric: str, verdict: Verdict) -> Check:
        return Check.of(CheckKey(Rule.REGRESSION, metric), verdict, "")

    checks = [check("lcm-mc/acc", Verdict.PASS), check("lcm-mc/lcm", Verdict.FAIL)]
    gate = DecisionRecord(outcome=Outcome.REJECTED, policy_path="gate.yaml", checks=checks, champion_before="3")
    data = ValidationReportData(
        model="m", version="5", run_id=None, decision="rejected", reasons=[], champion="3", source="", description="", gate=gate,
        evaluators={"lcm-mc": EvaluatorOutput("lcm-mc")}, judged_against="3", item_diffs={"lcm-mc": lcm_mc_diff(correct_lost=2, correct_won=2)},
    )  # fmt: skip
    against = against_champion(data, "lcm-mc")
    assert [(listed["score"], listed["behind"], [item["id"] for item in listed["items"]]) for listed in against["lists"]] == [
        ("p_lc", ["lcm-mc/lcm vs champion"], ["h", "i"]),
        ("correct", [], ["a", "b"]),
    ]
    assert [row["score"] for row in against["scores"]] == ["p_lc", "correct", "reliable"] and against["listed"]["score"] == "p_lc"


def test_diff_shows_a_question_s_escape_sequences_as_escapes_and_json_keeps_them(validated_store, capsys):
    """A downloaded benchmark's question holding a clipboard write (OSC 52) and a screen
    clear: ``vlgate diff`` prints them escaped; ``--json`` gives the exact text back."""
    from vlgate.cli.main import main
    from vlgate.registry_hooks.claims import ClaimStore

    client, home = validated_store
    client.create_registered_model("escapes")
    question = "What is \x1b]52;c;aGVsbG8=\x07 shown\x1b[2J in \u202eit?"
    for power in (1.0, 2.0):
        records = version_records(power)
        for record in records["lcm-mc"]:
            record["question"] = question
        log_validation(client, home, ClaimStore.for_home(home), "escapes", records, home / "gate.yaml")
    capsys.readouterr()
    assert main(["diff", "escapes", "2", "1", "--evaluator", "lcm-mc", "--score", "p_lc", "--limit", "100"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "question: What is \\x1b]52;c;aGVsbG8=\\x07 shown\\x1b[2J in \\u202eit?" in out
    assert main(["diff", "escapes", "2", "1", "--evaluator", "lcm-mc", "--score", "p_lc", "--limit", "100", "--json"]) == 0
    [diff] = json.loads(capsys.readouterr().out)["evaluators"]
    assert {item["fields"]["question"]["candidate"] for item in diff["lost"] + diff["won"]} == {question}


def test_versions_asked_under_other_protocols_or_evaluated_on_other_suites_are_not_compared(validated_store, tmp_path, capsys):
    from vlgate.cli.main import main
    from vlgate.dashboards.report import write_reports
    from vlgate.registry_hooks.claims import ClaimStore

    client, home = validated_store
    client.create_registered_model("mixed")
    asked_otherwise = version_records(1.5)
    for record in asked_otherwise["lcm-mc"]:
        record["protocol"] = "lmms-eval"
    for records in (version_records(1.0), asked_otherwise):
        log_validation(client, home, ClaimStore.for_home(home), "mixed", records, home / "gate.yaml")
    capsys.readouterr()
    assert main(["diff", "mixed", "2", "1", "--evaluator", "lcm-mc"]) == 2
    assert "mixed v2 asked lcm-mc under protocol lmms-eval, v1 under vlgate-1: their items are not comparable" in capsys.readouterr().err
    assert main(["diff", "mixed", "2", "1", "--evaluator", "decc"]) == 0  # the evaluators asked alike still compare
    page = write_reports(client, "mixed", ["2"], tmp_path, log_to_mlflow=False).versions["2"].read_text()
    assert "not compared item by item: not comparable: asked under protocol lmms-eval, the champion under vlgate-1" in page
    assert 'data-lost="decc/multi"' in page and 'data-lost="lcm-mc/' not in page

    for version, suite in (("1", "mc-2025"), ("2", "mc-2026")):
        client.log_param(client.get_model_version("mixed", version).tags[tag_keys.VALIDATION_RUN], "suite", suite)
    capsys.readouterr()
    assert main(["diff", "mixed", "2", "1", "--evaluator", "decc"]) == 2
    assert "mixed v2 was evaluated on the suite mc-2026, v1 on mc-2025: their items are not comparable" in capsys.readouterr().err


def test_a_report_shows_images_from_the_runs_artifacts_and_the_models_data_only(tmp_path):
    """A record is data from a worker: the report followed any path it named and embedded
    the file in a page logged for everyone who can read the run. Now only the run's
    downloaded artifacts and the model's data folders are opened."""
    from PIL import Image

    from vlgate.dashboards.collect import artifact_path
    from vlgate.dashboards.pictures import section_inputs, thumbnail
    from vlgate.evaluators.output import EvaluatorOutput
    from vlgate.evaluators.vl_lcm.figures import low_p_lc_examples

    def image(path: Path, colour: tuple[int, int, int]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), colour).save(path)
        return path

    artifacts, data = tmp_path / "run" / "lcm-mc", tmp_path / "data"
    logged = image(artifacts / "images" / "x.png", (255, 0, 0))
    in_data = image(data / "images" / "y.png", (0, 255, 0))
    secret = image(tmp_path / "private" / "z.png", (0, 0, 255))
    (data / "images" / "link.png").symlink_to(secret)
    roots = (data,)
    assert artifact_path(artifacts, "lcm-mc", "/worker/out/lcm-mc/images/x.png", roots) == logged
    assert artifact_path(artifacts, "lcm-mc", str(in_data), roots) == in_data
    assert artifact_path(artifacts, "lcm-mc", str(secret), roots) is None  # exists, but outside every root
    assert artifact_path(artifacts, "lcm-mc", "/worker/out/lcm-mc/../../private/z.png", roots) is None  # climbs out of the artifacts
    assert artifact_path(artifacts, "lcm-mc", str(data / "images" / "link.png"), roots) is None  # a link out of the data
    assert artifact_path(artifacts, "lcm-mc", str(in_data), ()) is None  # no data folders configured: artifacts only

    records = [
        {"id": name, "p_mc": [0.6, 0.4], "p_yes": [0.3, 0.6], "answer": 0, "image": str(path)}
        for name, path in (("data", in_data), ("secret", secret))
    ]
    frame = per_sample_frame(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records)))
    output = EvaluatorOutput("lcm-mc", records=records, samples=frame, folder=artifacts)
    shown = {example["id"]: example["images"] for example in low_p_lc_examples(section_inputs(output, roots))}
    assert shown == {"data": [thumbnail(in_data)], "secret": []}


def test_correlations_in_the_report_are_the_logged_ones(reports):
    client, written = reports
    from vlgate.flows.correlations import CORRELATIONS_ACROSS_VERSIONS, CORRELATIONS_WITH_CHAMPION

    run_id = client.get_model_version("shapes", "4").tags["vlgate.validation_run_id"]
    tables = [client.load_table(client.get_run(run_id).info.experiment_id, CORRELATIONS_ACROSS_VERSIONS, run_ids=[run_id])]
    tables.append(client.load_table(client.get_run(run_id).info.experiment_id, CORRELATIONS_WITH_CHAMPION, run_ids=[run_id]))
    logged = {f"{row.x}~{row.y}/{method}": getattr(row, method) for table in tables for row in table.itertuples() for method in ("pearson", "spearman", "kendall")}
    page = written.versions["4"].read_text()
    for pair in ("lcm-mc/lcm vs lcm-mc/f1", "lcm-mc/p_lc vs champion"):
        x, y = pair.split(" vs ")
        row = re.search(rf"<td>{pair}</td><td class=\"num\">([^<]+)</td><td class=\"num\">([^<]+)</td><td class=\"num\">([^<]+)</td>", page)
        key = f"{x}~{y}"
        assert row, pair
        for shown, method in zip(row.groups(), ("pearson", "spearman", "kendall")):
            assert float(shown) == pytest.approx(logged[f"{key}/{method}"], abs=5e-5)
    # every version has the same accuracy: the coefficient is undefined, shown as such, not as 0
    assert re.search(r"<td>lcm-mc/lcm vs lcm-mc/acc</td><td class=\"num\">–</td>", page)
    # the figures are drawn from the rows the table was computed from: their legends' coefficients and versions are the table's
    table = {row[0]: row[1:] for row in re.findall(r"<tr><td>([^<]+ vs [^<]+)</td><td class=\"num\">([^<]+)</td><td class=\"num\">([^<]+)</td><td class=\"num\">([^<]+)</td><td class=\"num\">([^<]+)</td></tr>", page)}
    figures = {name: json.loads(values) for name, values in re.findall(r"<figure id=\"figure-(correlation-[^\"]+)\" data-coefficients='([^']+)'>", page)}
    assert figures and "correlation-lcm-mc-lcm" in figures
    compared = 0
    for name, by_y in figures.items():
        for y, shown in by_y.items():
            x = next(pair.split(" vs ")[0] for pair in table if pair.endswith(f" vs {y}") and pair.split(" vs ")[0].replace("/", "-") == name.removeprefix("correlation-"))
            pearson, spearman, kendall, n = table[f"{x} vs {y}"]
            assert shown["n"] == int(n) == len(shown["versions"]) == 4  # v4's table: the four versions validated by then
            for method, cell in (("pearson", pearson), ("spearman", spearman), ("kendall", kendall)):
                assert (shown[method] is None) == (cell == "–")
                if shown[method] is not None:
                    key = f"{x}~{y}/{method}"
                    assert shown[method] == pytest.approx(logged[key], rel=1e-12) and float(cell) == pytest.approx(shown[method], abs=5e-5)
            compared += 1
    assert compared >= 3
    # v2's page was validated with two versions: too few for a coefficient, so no figure, whatever the model has now
    earlier = written.versions["2"].read_text()
    assert "figure-correlation-" not in earlier and re.search(r"<td>lcm-mc/lcm vs lcm-mc/f1</td>(<td class=\"num\">–</td>){3}<td class=\"num\">2</td>", earlier)


def test_leaderboard_lists_every_version_with_decision_champion_and_metrics(reports):
    from vlgate.dashboards.collect import leaderboard

    client, written = reports
    page = written.leaderboard.read_text()
    board = leaderboard(client, "shapes")
    assert board["decision"].to_dict() == {"1": "promoted", "2": "promoted", "3": "rejected", "4": "rejected"}
    assert board["champion"].to_dict() == {"1": False, "2": True, "3": False, "4": False}
    rows = re.findall(r'<tr data-version="(\d+)">(.*?)</tr>', page, flags=re.S)
    assert [v for v, _ in rows] == ["1", "2", "3", "4"]
    for version, row in rows:
        assert f'href="v{version}.html"' in row
        assert ('class="champion"' in row) == (version == "2")
    # the champion's timeline, from the decision records: v1 until v2's promotion, v2 since
    spells = re.findall(r'<tr data-spell="(\d+)"><td>v\d+</td><td>([^<]+)</td><td>([^<]+)</td>', page)
    assert [(version, until) for version, _, until in spells] == [("1", spells[1][1]), ("2", "holds it")] and 'id="moved-outside"' not in page
    # every evaluator's headline metrics, grouped per evaluator, each number the logged one
    from vlgate.dashboards.leaderboard_rows import leaderboard_metrics

    headline = leaderboard_metrics([str(c) for c in board.columns])
    assert {m.split("/")[0] for m in headline} == {"lcm-mc", "lcm-nb", "vlind", "genception", "decc"}
    cells = re.findall(r'<tr data-version="(\d+)" data-evaluator="([^"]+)">(.*?)</tr>', page, flags=re.S)
    shown = {(version, metric) for version, evaluator, row in cells for metric in re.findall(r'data-metric="([^"]+)"', row) if metric.startswith(f"{evaluator}/")}
    assert shown == {(version, metric) for version in ("1", "2", "3", "4") for metric in headline}
    for version, _, row in cells:
        for metric, value in data_values(row).items():
            assert value == pytest.approx(board.loc[version, metric], rel=1e-12)
    assert 'data-metric="lcm-mc/lcm"' in page and 'id="figure-drift-history"' in page
    # the champion's latest drift check drifted: said on its row, and at the top of its report
    drifts = dict(re.findall(r'<td data-drift="(\d+)">(.*?)</td>', page, flags=re.S))
    assert drifts["2"].startswith('<span class="fail" title="lcm-nb/lcm">drifted</span>') and drifts["1"] == drifts["3"] == ""
    report = written.versions["2"].read_text()
    assert report.index('id="drift-status" data-drifted="lcm-nb/lcm"') < report.index('id="reasons"') and 'id="drift-status"' not in written.versions["3"].read_text()
    # "why": a promotion says what held, from its latest record; a rejection its first check that did not pass
    why = dict(re.findall(r'data-why="(\d+)" title="[^"]*">(.*?)</td>', page, flags=re.S))
    assert why["2"] == '<a href="v2.html#reasons">5 evaluators ran; expectations passed on 5 evaluators; 1 floor held; 1 comparison with the champion passed</a>'
    assert "comparison with the champion not made: no champion yet" in why["1"]
    assert re.fullmatch(r'<a href="v4.html#against-the-champion">lcm-mc/lcm vs champion: fail, [^<]+</a>( \(\+\d+ more\))?', why["4"])


def test_reports_are_logged_to_the_validation_runs(reports):
    client, _ = reports
    run_id = client.get_model_version("shapes", "2").tags["vlgate.validation_run_id"]
    logged = {a.path for a in client.list_artifacts(run_id, "report")}
    assert {"report/report.html", "report/leaderboard.html", "report/plots"} <= logged
    plots_logged = {Path(a.path).name for a in client.list_artifacts(run_id, "report/plots")}
    assert {"vlind-funnel.png", "genception-curves.png", "decc-matrix.png"} <= plots_logged
    assert client.get_run(run_id).data.tags["vlgate.report"] == "report/report.html"


def test_vlgate_report_regenerates_from_mlflow(validated_store, tmp_path, capsys):
    from vlgate.cli.main import main

    assert main(["report", "shapes", "3", "--out", str(tmp_path), "--no-log"]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "v3.html").is_file() and (tmp_path / "leaderboard.html").is_file()
    assert str(tmp_path / "v3.html") in printed and not (tmp_path / "v1.html").exists()


# --- in a real browser ------------------------------------------------------------------


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(chromium() is None and not os.environ.get("VLGATE_REQUIRE_CHROMIUM"), reason="Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)")
def test_report_and_leaderboard_render_in_headless_chromium(reports):
    from playwright.sync_api import sync_playwright

    _, written = reports
    assert chromium(), "VLGATE_REQUIRE_CHROMIUM is set but Debian's chromium is not installed"
    ARTEFACTS.mkdir(exist_ok=True)
    # network off: the pages must be self-contained
    arguments = ["--no-sandbox", "--headless", "--disable-gpu", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=arguments)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            for path, shot in ((written.versions["3"], "report-v3.png"), (written.leaderboard, "leaderboard.png")):
                requests = []
                page.on("request", lambda request, seen=requests: seen.append(request.url))
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                images = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.alt])")
                assert images and all(complete and width > 0 for complete, width, _ in images), [alt for c, w, alt in images if not (c and w > 0)]
                assert all(url.startswith(("file:", "data:")) for url in requests)
                page.screenshot(path=str(ARTEFACTS / shot), full_page=False)
                if path.name == "leaderboard.html":
                    assert page.locator('#leaderboard tr[data-version="2"] .champion').is_visible()
                    assert page.locator('#leaderboard tr[data-version="3"] .decision').inner_text() == "rejected"
                    # every evaluator's headline column is in the window's width: nothing hidden behind a scroll bar
                    headers = page.eval_on_selector_all("table.group th[title]", "ths => ths.map(th => { const b = th.getBoundingClientRect(); return [th.title, b.left, b.right, b.width]; })")
                    assert {title.split("/")[0] for title, *_ in headers} == {"lcm-mc", "lcm-nb", "vlind", "genception", "decc"}
                    assert all(left >= 0 and right <= 1200 and width > 0 for _, left, right, width in headers), headers
                    page.screenshot(path=str(ARTEFACTS / "leaderboard-full.png"), full_page=True)
                else:
                    decision = page.locator("#decision")
                    assert decision.is_visible() and decision.inner_text() == "REJECTED"
                    box = decision.bounding_box()
                    assert box["y"] + box["height"] <= 900  # above the fold
                    assert page.locator("#reasons li").first.is_visible()
                    # what it lost against the champion: the counts, the items, their thumbnails
                    against = page.locator("#against-champion-lcm-mc")
                    against.scroll_into_view_if_needed()
                    assert against.is_visible() and int(page.locator('[data-lost="lcm-mc/p_lc"]').inner_text()) > 0
                    thumbnails = page.eval_on_selector_all('[data-lost-item^="lcm-mc/"] img', "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
                    assert len(thumbnails) == 5 and all(complete and width > 0 for complete, width in thumbnails)
                    page.screenshot(path=str(ARTEFACTS / "report-v3-against-champion.png"), full_page=False)
            # the leaderboard's "why" of the rejected v3 opens its comparison with the champion
            page.goto(written.leaderboard.as_uri())
            page.locator('#leaderboard tr[data-version="3"] td.why a').click()
            page.wait_for_load_state("load")
            assert page.url.endswith("v3.html#against-the-champion") and page.locator("#against-the-champion h2").is_visible()
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.skipif(chromium() is None and not os.environ.get("VLGATE_REQUIRE_CHROMIUM"), reason="Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)")
def test_mlflow_s_own_pages_show_the_decision_its_data_sets_and_the_headline_numbers(validated_store):
    """A real ``mlflow server`` on the store, its UI in headless Chromium: the validation
    run's page has the decision as its description, the suite's data sets as inputs and the
    version among its registered models (not "No description", "Datasets: None" and
    "Registered models: None"), and the version's page shows the decision and
    its headline metrics."""
    import subprocess
    import sys

    import httpx
    from playwright.sync_api import sync_playwright

    from vlgate.cli.processes import free_port

    client, home = validated_store
    assert chromium(), "VLGATE_REQUIRE_CHROMIUM is set but Debian's chromium is not installed"
    version = client.get_model_version("shapes", "3")
    run = client.get_run(version.tags[tag_keys.VALIDATION_RUN])
    headline = {k: v for k, v in version.tags.items() if k.startswith(tag_keys.HEADLINE_METRIC_PREFIX)}
    assert headline == {"vlgate.metric.lcm-mc/lcm": f"{run.data.metrics['lcm-mc/lcm']:.4g}"}
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", client.tracking_uri, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        ARTEFACTS.mkdir(exist_ok=True)
        # the server on loopback only: anything else the page asks for goes to a dead proxy
        arguments = ["--no-sandbox", "--headless", "--disable-gpu", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=127.0.0.1", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=arguments)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}")
                description = run.data.tags["mlflow.note.content"].splitlines()[0].replace("**", "")
                page.get_by_text(description.split(";")[0], exact=False).first.wait_for(timeout=60_000)
                body = page.inner_text("body")
                assert "No description" not in body
                dataset = run.inputs.dataset_inputs[0].dataset.name
                assert dataset.startswith("lcm-mc: ") and dataset in body, body[:3000]
                # the version it validated, under "Registered models", links to the version's page
                registered = page.locator('a[href*="models/shapes/versions/3"]').first
                registered.wait_for(timeout=60_000)
                assert "shapes" in registered.inner_text() and "v3" in registered.inner_text()
                page.screenshot(path=str(ARTEFACTS / "mlflow-run-page.png"), full_page=True)
                # the charts open on the evaluators' metrics: no section of correlations (a table of the run) heads them
                page.get_by_text("Model metrics").first.click()
                page.get_by_text("lcm-mc", exact=True).first.wait_for(timeout=60_000)
                sections = page.inner_text("body")
                assert "correlation" not in sections and sections.index("lcm-mc") < sections.index("records_from_cache"), sections[:3000]
                page.goto(f"{url}/#/models/shapes/versions/3")
                page.get_by_text("vlgate.metric.lcm-mc/lcm").first.wait_for(timeout=60_000)
                body = page.inner_text("body")
                assert headline["vlgate.metric.lcm-mc/lcm"] in body and "rejected" in body
                page.screenshot(path=str(ARTEFACTS / "mlflow-version-page.png"), full_page=True)
            finally:
                browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_a_decision_summary_counts_what_held_and_lists_each_check_that_did_not_pass():
    from datetime import date

    from vlgate.decisions import Check, CheckKey, Verdict, Waiver, summarize_checks

    def check(rule: Rule, metric: str, verdict: Verdict, **numbers: object) -> Check:
        return Check.of(CheckKey(rule, metric), verdict, f"detail of {metric}", **numbers)

    waiver = Waiver(check="vlind/s_lp floor", by="ana", reason="known dip", until=date(2027, 1, 31))
    checks = [
        check(Rule.RAN, "lcm-mc", Verdict.PASS), check(Rule.RAN, "vlind", Verdict.PASS),
        check(Rule.EXPECTATIONS, "lcm-mc", Verdict.PASS), check(Rule.EXPECTATIONS, "vlind", Verdict.COULD_NOT_JUDGE),
        check(Rule.FLOOR, "lcm-mc/lcm", Verdict.PASS, candidate=0.8, limit=0.7), check(Rule.FLOOR, "vlind/s_lp", Verdict.WAIVED, candidate=0.6, limit=0.7, waiver=waiver),
        check(Rule.REGRESSION, "lcm-mc/lcm", Verdict.INCONCLUSIVE, candidate=0.8, champion=0.81, interval=(-0.04, 0.02)),
        check(Rule.REGRESSION, "lcm-mc/acc", Verdict.PASS, candidate=0.8, champion=0.79, interval=(-0.01, 0.03)),
        check(Rule.REGRESSION, "vlind/s_lp", Verdict.FAIL, candidate=0.6, champion=0.8, interval=(-0.3, -0.1)),
    ]  # fmt: skip
    assert summarize_checks(checks) == [
        "vlind expectations: could not judge, detail of vlind",
        "vlind/s_lp vs champion: fail, detail of vlind/s_lp",
        "lcm-mc/lcm vs champion: inconclusive, detail of lcm-mc/lcm",
        "vlind/s_lp floor: waived by ana until 2027-01-31 (known dip)",
        "2 evaluators ran",
        "expectations passed on 1 evaluator",
        "1 floor held",
        "1 comparison with the champion passed",
    ]
    # with no champion a comparison passes without numbers: said as not made
    assert summarize_checks([check(Rule.REGRESSION, "lcm-mc/lcm", Verdict.PASS), check(Rule.REGRESSION, "decc/reliable_rate", Verdict.PASS)]) == ["2 comparisons with the champion not made: no champion yet"]


def test_a_power_warning_of_a_comparison_that_had_no_champion_is_not_shown_as_a_failure():
    from vlgate.dashboards.collect import ValidationReportData
    from vlgate.dashboards.pictures import ModelFigures
    from vlgate.dashboards.report import render_version_report
    from vlgate.power_plan import PowerPlan, RulePower

    rules = [
        RulePower(check="lcm-mc/lcm floor", rule=Rule.FLOOR, items=48, spread=0.3, spread_from="assumed", level=0.05, warning="lcm-mc/lcm floor 0.9: too close"),
        RulePower(check="lcm-mc/lcm vs champion", rule=Rule.REGRESSION, items=48, spread=0.3, spread_from="assumed", level=0.05, warning="lcm-mc/lcm vs champion (max_drop 0.01): too small"),
    ]
    empty = pd.DataFrame(columns=["time", "version", "metric", "value", "drifted", "run_id", "batch"])

    def warnings(judged_against: str | None) -> dict[str, str]:
        data = ValidationReportData(model="m", version="2", run_id="r", decision="promoted", reasons=[], champion="2", source=None, description="")
        data.power, data.judged_against = PowerPlan(model="m", champion=judged_against, baseline=None, alpha=0.05, power=0.8, rules=rules), judged_against
        page = render_version_report(data, ModelFigures([], {}, None), empty, "sqlite:///x.db").html
        return {check: shown_as for shown_as, check in re.findall(r'<li class="(\w+)" data-power-warning="([^"]+)"', page)}

    assert warnings(None) == {"lcm-mc/lcm floor": "fail", "lcm-mc/lcm vs champion": "undecided"}
    assert warnings("1") == {"lcm-mc/lcm floor": "fail", "lcm-mc/lcm vs champion": "fail"}


def test_an_item_reads_as_labelled_lines_and_its_other_fields_as_rounded_text():
    from vlgate.evaluators.definition import ItemLine
    from vlgate.evaluators.item_diff import field_text
    from vlgate.evaluators.vl_lcm.items import mc_item_lines, nb_item_lines

    mc = {"options": ["1", "2", "3"], "answer": 1, "p_mc": [0.1, 0.7, 0.2], "p_yes": [0.05, 0.9, 0.3]}
    assert mc_item_lines(mc) == [ItemLine("(A) 1", False, (0.1, 0.05)), ItemLine("(B) 2", True, (0.7, 0.9)), ItemLine("(C) 3", False, (0.2, 0.3))]
    assert [line.answer for line in mc_item_lines(mc | {"answer": None})] == [False] * 3  # unlabelled: nothing marked
    nb = {"texts": ["a red square", "a blue circle"], "p_yes": [[0.91, 0.12], [0.2, 0.83]]}
    assert nb_item_lines(nb) == [ItemLine("T1: a red square", False, (0.91, 0.2)), ItemLine("T2: a blue circle", False, (0.12, 0.83))]
    assert field_text([[0.123456789, 0.5], [1.0, 0.98765]]) == "[[0.123, 0.5], [1, 0.988]]"
    assert field_text(["cat", "dog"]) == "cat · dog" and field_text({"a": 1}) == '{"a": 1}' and field_text("x" * 200, 10) == "x" * 9 + "…"


def test_a_run_s_description_links_its_report_in_mlflow_s_artifact_view_and_its_page_is_found_on_any_server():
    from vlgate import tracking
    from vlgate.decisions import DecisionRecord, Outcome
    from vlgate.flows.recording import run_note

    record = DecisionRecord(outcome=Outcome.PROMOTED, sequence=1, kind=DecisionKind.VALIDATION)
    assert run_note(record, None, report_logged=True, run=("7", "abc")).splitlines()[-1] == "The report: [report/report.html](#/experiments/7/runs/abc/artifactPath/report/report.html) (the run's artifacts)."
    assert run_note(record, None, report_logged=True).splitlines()[-1] == "The report: `report/report.html` (the run's artifacts)."
    assert tracking.run_page_url("https://mlflow.example.org/", "7", "abc") == "https://mlflow.example.org/#/experiments/7/runs/abc"
    assert tracking.run_page_url("sqlite:////tmp/x/mlflow.db", "7", "abc") == "http://127.0.0.1:5000/#/experiments/7/runs/abc"


def test_a_version_measured_at_an_early_look_is_marked_in_the_leaderboard_and_in_the_correlations():
    from vlgate.dashboards.leaderboard_rows import early_measures
    from vlgate.dashboards.pictures import correlation_figures, early_versions

    board = pd.DataFrame(
        {
            "lcm-mc/lcm": [0.6, 0.7, 0.8, 1.0], "lcm-mc/acc": [0.5, 0.6, 0.8, 0.9],
            "sequential/items_evaluated/lcm-mc": [np.nan, 400, 400, 100], "sequential/items_total/lcm-mc": [np.nan, 400, 400, 400],
            "sequential/stopped_at_look": [np.nan, 4, 4, 1],
        },
        index=pd.Index(["1", "2", "3", "4"], name="version"),
    )  # fmt: skip
    assert early_measures(board.loc["4"]) == {"lcm-mc": {"n": 100, "total": 400, "look": 1}} and early_measures(board.loc["2"]) == early_measures(board.loc["1"]) == {}
    assert early_versions(board) == {"4"}
    figures = {figure.name: figure for figure in correlation_figures(board[["lcm-mc/lcm", "lcm-mc/acc"]], early_versions(board))}
    plain = {figure.name: figure for figure in correlation_figures(board[["lcm-mc/lcm", "lcm-mc/acc"]])}
    (name,) = figures
    assert figures[name].caption.endswith("; * v4 measured at an early look, on fewer items than the others") and "*" not in plain[name].caption
    assert all(shown["early"] == ["4"] for shown in figures[name].data.values())
