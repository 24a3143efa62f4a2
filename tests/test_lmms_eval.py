"""lmms-eval tasks as suite evaluators (docs/lmms-eval.md), held to lmms-eval's own run.

The same task on the same checkpoint, through lmms-eval's ``simple_evaluate`` with its own
Hugging Face LLaVA class (greedy, as its tasks ask) and through vlgate's suite: the same
filtered response for every doc and the same aggregate for every metric. Tasks: the world's
own (``evaluators/world/lmms_task.py``), POPE of the installed package on docs built in its
schema from the world's images, and a task of the test's own whose messages interleave text
and images (as MMMU's do). lmms-eval is part of .venv (``pip install -e .[lmms]``): these
tests fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlgate.evaluators import registry
from vlgate.evaluators.lmms.tasks import LmmsEvalSettings, load_task
from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite
from vlgate.evaluators.world.lmms_task import TASK as WORLD_TASK
from vlgate.evaluators.world.lmms_task import export_world_task

pytestmark = pytest.mark.world

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "evaluators" / "world" / "shipped"
#: partly trained: right on some docs, wrong on others, so the comparison sees both
CHECKPOINT = SHIPPED / "checkpoints" / "vlm-steps3000"
LIMIT = 10

_INTERLEAVED_UTILS = '''
def doc_to_visual(doc):
    return [doc["image"].convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["question"]


def doc_to_messages(doc, lmms_eval_specific_kwargs=None):
    return [{"role": "user", "content": [{"type": "text", "text": "Look."}, {"type": "image", "url": doc["image"].convert("RGB")}, {"type": "text", "text": doc["question"] + " Please answer yes or no."}]}]


def process_results(doc, results):
    return {"exact_match": float(results[0].strip().lower() == doc["answer"]), "needs_field": 0.0 if doc["answer"] else 1.0}


def not_a_number(results):
    return {"mean": sum(results) / len(results)}


def doc_to_text_with_a_hint(doc, lmms_eval_specific_kwargs=None):
    return doc["hint"] + " " + doc["question"]
'''


def _installed_task(folder: Path, name: str, installed: str, rows: list[dict], extra: str = "", split: str = "test") -> None:
    """A task of the installed package, its YAML included unchanged but for where its docs
    are: ``rows`` (images as files) in the task's own schema, as a parquet of Hugging Face's
    ``Image`` features."""
    import datasets
    import lmms_eval

    images = [column for column, value in rows[0].items() if isinstance(value, Path)]
    table = datasets.Dataset.from_dict({column: [({"bytes": row[column].read_bytes(), "path": None} if column in images else row[column]) for row in rows] for column in rows[0]})
    for column in images:
        table = table.cast_column(column, datasets.Image())
    table.to_parquet(str(folder / f"{name}.parquet"))
    config = Path(lmms_eval.__file__).parent / "tasks" / installed
    (folder / f"{name}.yaml").write_text(f"include: {config}\ntask: {name}\ndataset_path: parquet\ndataset_kwargs:\n  data_files:\n    {split}: {name}.parquet\n{extra}")


def _world_rows(world_data: Path, kind: str) -> list[dict]:
    folder = world_data / kind
    return [{**row, "image": folder / row["image"]} for row in map(json.loads, (folder / "items.jsonl").read_text().splitlines())]


def _real_tasks(folder: Path, world_data: Path) -> None:
    """AI2D, ScienceQA-IMG, MMMU val and MME of the installed package, on the world's
    multiple-choice and yes/no items written in each task's schema."""
    mc, yes_no = _world_rows(world_data, "mc"), _world_rows(world_data, "yesno")
    _installed_task(folder, "ai2d_world", "ai2d/ai2d.yaml", [{"question": r["question"], "options": r["options"], "answer": str(r["answer"]), "image": r["image"]} for r in mc])
    science = [{"hint": "", "question": r["question"], "choices": r["options"], "answer": r["answer"], "image": r["image"]} for r in mc]
    _installed_task(folder, "scienceqa_img_world", "scienceqa/scienceqa_img.yaml", science, extra="dataset_name: null\n")
    mmmu = "mmmu/mmmu_val.yaml"
    # open questions: MMMU parses their answers without drawing at random
    open_rows = [{"id": f"validation_Art_{n}", "question": f"<image 1> {r['question']}", "options": "[]", "answer": r["answer"], "question_type": "open", "image_1": r["image"]} for n, r in enumerate(yes_no)]
    _installed_task(folder, "mmmu_val_world", mmmu, open_rows, split="validation")
    mc_rows = [
        {"id": f"validation_Art_{n}", "question": f"<image 1> {r['question']}", "options": str(r["options"]), "answer": "ABCD"[r["answer"]], "question_type": "multiple-choice", "image_1": r["image"]}
        for n, r in enumerate(mc)
    ]
    _installed_task(folder, "mmmu_val_mc_world", mmmu, mc_rows, split="validation")
    # MME asks two questions of each image; the world's yes/no items in pairs stand for them
    _installed_task(
        folder,
        "mme_world",
        "mme/mme.yaml",
        [{"question_id": f"pair-{n // 2}", "question": f"{r['question']} Please answer yes or no.", "answer": r["answer"].capitalize(), "category": "existence", "image": r["image"]} for n, r in enumerate(yes_no)],
    )


def _interleaved_task(folder: Path, parquet: Path, name: str = "interleaved_world", aggregation: str = "mean", messages: str = "!function utils.doc_to_messages", text: str = "!function utils.doc_to_text") -> None:
    folder.mkdir(exist_ok=True)
    (folder / "utils.py").write_text(_INTERLEAVED_UTILS)  # a folder of its own: a task's utils.py sits beside its YAML
    (folder / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""\
            task: {name}
            dataset_path: parquet
            dataset_kwargs:
              data_files:
                test: {parquet}
            test_split: test
            output_type: generate_until
            doc_to_visual: !function utils.doc_to_visual
            doc_to_text: {text}
            doc_to_messages: {messages}
            doc_to_target: answer
            generation_kwargs:
              max_new_tokens: 6
            process_results: !function utils.process_results
            metric_list:
              - metric: exact_match
                aggregation: {aggregation}
                higher_is_better: true
            """
        )
    )


@pytest.fixture(scope="module", autouse=True)
def forget_the_tasks_evaluators() -> Iterator[None]:
    """The evaluators these suites define leave the registry with the module, as a new process would have it."""
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lmms-tasks")
    world_data = SHIPPED / "data"
    export_world_task(world_data, folder)  # the world's task and POPE on its items
    _real_tasks(folder, world_data)
    _interleaved_task(folder / "interleaved", folder / WORLD_TASK / "test.parquet")
    return folder


TASKS = (WORLD_TASK, "pope_world", "ai2d_world", "scienceqa_img_world", "mmmu_val_world", "mmmu_val_mc_world", "mme_world", "interleaved_world")
#: MMMU answers a multiple-choice response it cannot parse with a random option, drawn from
#: one stream per lmms-eval run and from a per-doc seed in vlgate's (docs/lmms-eval.md): the
#: responses agree, the draws by chance
DRAWS_AT_RANDOM = {"mmmu_val_mc_world"}


@pytest.fixture(scope="module")
def vlgate_run(task_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    suite = Suite.model_validate({"name": "lmms", "batch_size": 4, "evaluators": {task: {"kind": "lmms-eval", "task": task, "include_path": str(task_folder), "limit": LIMIT} for task in TASKS}})
    out = tmp_path_factory.mktemp("vlgate-run")
    summary = run_suite(str(CHECKPOINT), suite, out, RunOptions(progress=False))
    assert all("error" not in entry for entry in summary["evaluators"].values()), summary
    return {"records": {task: [json.loads(line) for line in (out / task / "records.jsonl").read_text().splitlines()] for task in TASKS}, "summary": summary, "out": out}


@pytest.fixture(scope="module")
def lmms_eval_run(task_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """lmms-eval's own run, in a child process (its model classes reset loguru and set up accelerate)."""
    script = tmp_path_factory.mktemp("reference") / "reference.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import json, sys
            from lmms_eval.evaluator import simple_evaluate
            from lmms_eval.tasks import TaskManager
            manager = TaskManager(include_path={str(task_folder)!r}, model_name="llava_hf")
            result = simple_evaluate(model="llava_hf", model_args="pretrained={CHECKPOINT},dtype=float32,device_map=cpu", tasks={list(TASKS)!r}, task_manager=manager,
                                     limit={LIMIT}, batch_size=1, device="cpu", log_samples=True, bootstrap_iters=0)
            samples = {{task: [{{"doc_id": s["doc_id"], "filter": s.get("filter"), "filtered_resps": s["filtered_resps"]}} for s in result["samples"][task]] for task in result["samples"]}}
            results = {{task: {{key: value for key, value in metrics.items() if isinstance(value, float) and "stderr" not in key}} for task, metrics in result["results"].items()}}
            print("RESULT " + json.dumps({{"samples": samples, "results": results}}))  # one line: MMMU's aggregation prints its table
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


@pytest.mark.parametrize("task", TASKS)
def test_every_doc_gets_the_filtered_response_and_every_metric_the_aggregate_of_lmms_evals_own_run(task: str, task_folder: Path, vlgate_run: dict, lmms_eval_run: dict) -> None:
    loaded = load_task(LmmsEvalSettings(kind="lmms-eval", task=task, include_path=str(task_folder), limit=LIMIT))
    scored = loaded.filters[0]  # the ensemble whose response process_results scores (AI2D's flexible-extract)
    records = vlgate_run["records"][task]
    theirs = {sample["doc_id"]: sample["filtered_resps"][0] for sample in lmms_eval_run["samples"][task] if sample["filter"] in (None, scored)}
    assert [record["doc_id"] for record in records] == list(range(LIMIT)) == sorted(theirs)
    assert {record["doc_id"]: record["filtered"][scored] for record in records} == theirs
    metrics = vlgate_run["summary"]["evaluators"][task]["metrics"]
    expected = {key.split(",")[0]: value for key, value in lmms_eval_run["results"][task].items() if key.endswith(f",{scored}")}
    assert expected and set(expected) <= set(metrics)
    if task in DRAWS_AT_RANDOM:
        assert all(record["results"]["mmmu_acc"]["parsed_pred"][0] in "ABCD" for record in records)
    else:
        assert {name: metrics[name] for name in expected} == expected
    assert {record["protocol"] for record in records} == {f"lmms-eval-0.7.3-1+task={loaded.digest[:12]}"}
    if task in (WORLD_TASK, "interleaved_world"):  # the world's prompt: the partly trained model gets some right and some wrong
        assert 0 < metrics["exact_match"] < 1


def test_a_tasks_metrics_are_evaluator_metrics_with_their_direction_and_linear_resampling_where_the_aggregation_is_a_mean(vlgate_run: dict) -> None:
    world = registry.get(WORLD_TASK)
    assert world.metric("exact_match").direction == "higher" and world.metric("yes_ratio") is not None
    assert world.resampled is not None and [score.column for score in world.item_scores] == ["exact_match", "yes_ratio"] and world.drift_score is None
    pope = registry.get("pope_world")
    assert pope.resampled is None  # POPE's aggregations are the task's own functions: the generic path
    # POPE's per-doc records hold the doc's 0/1 score: its docs lost and won, behind every metric that carries it
    (doc_score,) = pope.item_scores
    assert (doc_score.column, doc_score.direction, doc_score.metrics) == ("doc_score", "higher", ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio"))
    records = vlgate_run["records"]["pope_world"]
    frame = pope.per_sample(pope.schema.arrays(records)[0])
    assert frame["doc_score"].tolist() == [record["results"]["pope_accuracy"]["score"] for record in records]
    assert registry.metric("pope_world/pope_f1_score") is not None


def test_a_task_whose_per_doc_values_hold_no_score_is_not_compared_doc_by_doc_and_the_others_are(vlgate_run: dict) -> None:
    from vlgate.evaluators.item_diff import compare_outputs
    from vlgate.evaluators.output import EvaluatorOutput

    outputs = {name: EvaluatorOutput.from_folder(name, vlgate_run["out"] / name) for name in ("mmmu_val_world", "pope_world", WORLD_TASK)}
    diffs, skipped = compare_outputs(outputs, outputs)  # MMMU's per-doc values are its parsed answers
    assert skipped == {"mmmu_val_world": "mmmu_val_world has no per-item score to compare item by item"}
    assert {name: list(diff.scores) for name, diff in diffs.items()} == {"pope_world": ["doc_score"], WORLD_TASK: ["exact_match", "yes_ratio"]}
    assert diffs["pope_world"].summary()["doc_score"]["n_shared"] == LIMIT and diffs["pope_world"].summary()["doc_score"]["lost"] == 0


def test_a_task_that_does_not_exist_is_refused_in_one_line_when_the_suite_is_read(task_folder: Path, tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\nevaluators:\n  mine:\n    kind: lmms-eval\n    task: no_such_task\n    include_path: {task_folder}\n")
    with pytest.raises(ValueError, match=r"evaluators\.mine.*lmms-eval task 'no_such_task': no such task") as raised:
        Suite.from_file(suite)
    assert "\n" not in str(raised.value)


def test_a_task_whose_utils_cannot_be_imported_and_a_sampling_one_are_refused_naming_the_task(task_folder: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "utils.py").write_text("import no_such_module_anywhere\n")
    shutil.copy(task_folder / f"{WORLD_TASK}.yaml", broken / "broken_task.yaml")
    (broken / "broken_task.yaml").write_text((broken / "broken_task.yaml").read_text().replace(f"task: {WORLD_TASK}", "task: broken_task"))
    with pytest.raises(ValueError, match=r"evaluators\.b: lmms-eval task 'broken_task'"):
        Suite.model_validate({"name": "s", "evaluators": {"b": {"kind": "lmms-eval", "task": "broken_task", "include_path": str(broken)}}})
    with pytest.raises(ValueError, match=r"lmms-eval task 'world_yesno': generation_kwargs samples"):
        Suite.model_validate({"name": "s", "evaluators": {"w2": {"kind": "lmms-eval", "task": WORLD_TASK, "include_path": str(task_folder), "generation_kwargs": {"temperature": 0.7}}}})


def test_a_drift_metric_is_a_mean_of_the_task_whose_fall_is_drift_and_anything_else_is_refused(task_folder: Path) -> None:
    def entry(task: str, metric: str) -> dict:
        return {"name": "s", "evaluators": {"d": {"kind": "lmms-eval", "task": task, "include_path": str(task_folder), "drift_metric": metric}}}

    with pytest.raises(ValueError, match=r"evaluators\.d: lmms-eval task 'world_yesno': drift_metric 'no_such' is not one of its metrics \(exact_match, yes_ratio\)"):
        Suite.model_validate(entry(WORLD_TASK, "no_such"))
    with pytest.raises(ValueError, match=r"evaluators\.d: lmms-eval task 'pope_world': drift_metric 'pope_yes_ratio' is not lmms-eval's mean of per-doc numbers"):
        Suite.model_validate(entry("pope_world", "pope_yes_ratio"))
    Suite.model_validate(entry(WORLD_TASK, "yes_ratio"))
    drifting = registry.get("d")
    assert (drifting.drift_score.column, drifting.drift_score.metric) == ("yes_ratio", "yes_ratio") and [score.column for score in drifting.item_scores] == ["exact_match"]


def test_a_name_another_suite_gave_a_task_scored_otherwise_is_refused_and_a_tasks_drift_batches_may_share_it(task_folder: Path) -> None:
    """One process keeps one definition an entry name: a second suite that gives the name
    to a task scored otherwise (another metric list, or another drift metric) is refused
    when read, naming both, and the first definition stays; the world's drift batches, the
    same task's code on other docs, share the name."""
    from vlgate.evaluators.world.lmms_task import ABSENT_BATCH, REFERENCE_BATCH

    def suite(task: str, drift: str | None = None) -> dict:
        entry = {"kind": "lmms-eval", "task": task, "include_path": str(task_folder), "limit": 2} | ({"drift_metric": drift} if drift else {})
        return {"name": "s", "evaluators": {"shared": entry}}

    Suite.model_validate(suite(WORLD_TASK))
    refusal = r"evaluators\.shared: another suite read by this process gives 'shared' to lmms-eval task 'world_yesno', scored otherwise than lmms-eval task 'pope_world'"
    with pytest.raises(ValueError, match=refusal + ": give one of the entries another name"):
        Suite.model_validate(suite("pope_world"))
    assert registry.get("shared").scored_by[0] == "lmms-eval task 'world_yesno'" and [m.name for m in registry.get("shared").metrics][:2] == ["exact_match", "yes_ratio"]
    with pytest.raises(ValueError, match=r"scored otherwise than lmms-eval task 'world_yesno' with drift_metric 'yes_ratio'"):
        Suite.model_validate(suite(WORLD_TASK, "yes_ratio"))
    registry.unregister("shared")
    Suite.model_validate(suite(REFERENCE_BATCH, "yes_ratio"))
    Suite.model_validate(suite(ABSENT_BATCH, "yes_ratio"))  # the same code on other docs: alike
    assert registry.get("shared").scored_by[0] == "lmms-eval task 'world_yesno_absent' with drift_metric 'yes_ratio'"


def test_a_changed_task_is_a_changed_fingerprint(task_folder: Path, tmp_path: Path) -> None:
    same = LmmsEvalSettings(kind="lmms-eval", task=WORLD_TASK, include_path=str(task_folder))
    longer = LmmsEvalSettings(kind="lmms-eval", task=WORLD_TASK, include_path=str(task_folder), generation_kwargs={"max_new_tokens": 16})
    prompted = LmmsEvalSettings(kind="lmms-eval", task=WORLD_TASK, include_path=str(task_folder), lmms_eval_specific_kwargs={"post_prompt": " Answer."})
    digests = {load_task(settings).digest for settings in (same, longer, prompted)}
    assert len(digests) == 3 and load_task(same).digest == load_task(LmmsEvalSettings(kind="lmms-eval", task=WORLD_TASK, include_path=str(task_folder))).digest
    # the same task folder elsewhere is the same task; a data file changed under its name is another
    moved = tmp_path / "moved"
    shutil.copytree(task_folder, moved)
    assert load_task(LmmsEvalSettings(kind="lmms-eval", task="pope_world", include_path=str(moved))).digest == load_task(LmmsEvalSettings(kind="lmms-eval", task="pope_world", include_path=str(task_folder))).digest
    changed = tmp_path / "changed"
    shutil.copytree(task_folder, changed)
    shutil.copy(changed / "world_yesno" / "test.parquet", changed / "pope_world" / "test.parquet")  # another table under POPE's name
    assert load_task(LmmsEvalSettings(kind="lmms-eval", task="pope_world", include_path=str(changed))).digest != load_task(LmmsEvalSettings(kind="lmms-eval", task="pope_world", include_path=str(task_folder))).digest


def test_an_aggregation_that_is_not_a_number_fails_its_evaluator_as_bad_input_and_keeps_the_records(task_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    _interleaved_task(folder, task_folder / WORLD_TASK / "test.parquet", name="odd_aggregation", aggregation="!function utils.not_a_number")
    suite = Suite.model_validate({"name": "s", "evaluators": {"odd": {"kind": "lmms-eval", "task": "odd_aggregation", "include_path": str(folder), "limit": 2}}})
    summary = run_suite(str(CHECKPOINT), suite, tmp_path / "out", RunOptions(progress=False))
    entry = summary["evaluators"]["odd"]
    assert entry["bad_input"] is True and entry["error"].startswith("lmms-eval task 'odd_aggregation' (odd): the aggregation of 'exact_match' gives dict")
    assert len((tmp_path / "out" / "odd" / "records.jsonl").read_text().splitlines()) == 2


def test_a_doc_that_lacks_a_field_its_prompt_reads_is_refused_naming_the_task_the_doc_and_the_field(task_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "hint"
    _interleaved_task(folder, task_folder / WORLD_TASK / "test.parquet", name="needs_a_hint", messages="null", text="!function utils.doc_to_text_with_a_hint")
    with pytest.raises(ValueError, match=r"evaluators\.hint: lmms-eval task 'needs_a_hint', doc 0: the doc lacks the field 'hint', which the task reads"):
        Suite.model_validate({"name": "s", "evaluators": {"hint": {"kind": "lmms-eval", "task": "needs_a_hint", "include_path": str(folder), "limit": 2}}})


def test_vlgate_evaluate_on_a_suite_naming_no_such_task_is_one_line_and_exit_2(task_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vlgate.cli.main import main

    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\nevaluators:\n  mine:\n    kind: lmms-eval\n    task: no_such_task\n    include_path: {task_folder}\n")
    status = main(["evaluate", "--model", str(CHECKPOINT), "--suite", str(suite), "--out", str(tmp_path / "out"), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "evaluators.mine" in lines[0] and "lmms-eval task 'no_such_task': no such task" in lines[0]


@pytest.mark.service
@pytest.mark.timeout(1200)
def test_the_recipe_gates_one_model_on_pope_and_vl_lcm_together(tmp_path: Path) -> None:
    """docs/lmms-eval.md's recipe as a user runs it, the console scripts in the home the
    world's export writes. v1 (10,000 steps) holds both floors and becomes champion. v2,
    fine-tuned to answer by an answer prior, is as accurate as v1 on POPE but inconsistent,
    and is rejected on VL-LCM alone. v3 (3,000 steps) falls below VL-LCM's floor and behind
    v1 on it, and on POPE's 48 docs its drop is too uncertain to decide. ``vlgate gate`` judges v3 again from
    its run alone; ``vlgate diff`` and its report show the POPE docs it lost (the report
    with their images). Last, the champion's drift check on the world's task without
    answers (``drift_metric: yes_ratio``) finds the batch of questions about absent objects."""
    from vlgate.evaluators.world.lmms_task import POPE_TASK, RECIPE_MODEL

    home = tmp_path / "home"
    export_world_task(SHIPPED / "data", home)
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "VLGATE_STATE_DB", "PREFECT_API_URL")} | {"VLGATE_HOME": str(home), "OMP_NUM_THREADS": "1"}

    def vlgate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).with_name("vlgate")), *args], capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)

    def decision(*args: str) -> dict:
        done = vlgate(*args, "--json")
        assert done.stdout.strip(), done.stderr[-3000:]
        return json.loads(done.stdout)

    verdicts = {}
    for version, checkpoint in (("1", "vlm-steps10000"), ("2", "vlm-answer-prior"), ("3", "vlm-steps3000")):
        assert vlgate("register", RECIPE_MODEL, str(SHIPPED / "checkpoints" / checkpoint)).returncode == 0
        judged = decision("validate", RECIPE_MODEL, version)
        verdicts[version] = (judged["outcome"], {check["name"]: check["verdict"] for check in judged["checks"]})
    pope, lcm = f"{POPE_TASK}/pope_accuracy", "lcm-mc/lcm"
    rules = (f"{lcm} floor", f"{pope} floor", f"{lcm} vs champion", f"{pope} vs champion")
    assert {version: (outcome, tuple(checks[rule] for rule in rules)) for version, (outcome, checks) in verdicts.items()} == {
        "1": ("promoted", ("pass", "pass", "pass", "pass")),  # no champion yet: nothing to compare with
        "2": ("rejected", ("fail", "pass", "fail", "pass")),
        "3": ("rejected", ("fail", "pass", "fail", "inconclusive")),
    }
    assert all(checks[f"{POPE_TASK} expectations"] == "pass" for _, checks in verdicts.values())
    # judged again from the run: the policy names POPE's metric, which this process defines from the run's suite
    again = decision("gate", RECIPE_MODEL, "3")
    assert again["outcome"] == "rejected" and {check["name"]: check["verdict"] for check in again["checks"]} == verdicts["3"][1]
    # a process that has not read the suite defines the task from the suite the run logged
    (compared,) = [entry for entry in json.loads(vlgate("diff", RECIPE_MODEL, "3", "1", "--json").stdout)["evaluators"] if entry["evaluator"] == POPE_TASK]
    score = compared["scores"]["doc_score"]
    assert score["n_shared"] == 48 and score["lost"] == len(compared["lost"]) > 0 and score["won"] == len(compared["won"])
    assert all(set(item["fields"]) == {"prompt", "response"} and item["fields"]["prompt"]["candidate"].endswith("Please answer yes or no.") for item in compared["lost"])
    done = vlgate("report", RECIPE_MODEL, "3", "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "report" / "v3.html").read_text()
    section = page[page.index(f'data-lost-score="{POPE_TASK}/doc_score"') :]
    lost = re.findall(rf'data-lost-item="{POPE_TASK}/([^"]+)"', section)
    assert lost and all(doc.isdigit() for doc in lost)
    card = section[section.index(f'data-lost-item="{POPE_TASK}/{lost[0]}"') :]
    assert card.index("<img src=\"data:image/png;base64,") < card.index("</div>") and "Please answer yes or no." in card[: card.index("</table>")]
    # the champion's drift check on the world's task without answers: its share of "yes", which
    # needs no label, falls on a batch of questions about objects not in view
    done = vlgate("drift", RECIPE_MODEL, "--json")
    checked = json.loads(done.stdout)
    (check,) = checked["checks"]
    assert (checked["outcome"], checked["version"], check["metric"], check["drifted"]) == ("drifted", "1", f"{WORLD_TASK}/yes_ratio", True), done.stderr[-2000:]
    assert (check["n_reference"], check["n_current"]) == (48, 24) and check["mean_reference"] > 0.4 > 0.1 > check["mean_current"]


def test_a_metric_whose_aggregation_needs_its_docs_whole_is_shown_but_a_policy_naming_it_is_refused(task_folder: Path, vlgate_run: dict) -> None:
    from vlgate.gate.policy import GatePolicy

    mme = registry.get("mme_world")
    assert "fails without one of its docs (AssertionError: MME only supports pairwise evaluation)" in mme.metric("mme_perception_score").ungateable
    assert vlgate_run["summary"]["evaluators"]["mme_world"]["metrics"]["mme_perception_score"] is not None
    assert registry.get("pope_world").metric("pope_f1_score").ungateable == ""  # a ratio of counts resamples
    with pytest.raises(ValueError, match=r"floors\.mme_world/mme_perception_score: lmms-eval task 'mme_world': the aggregation of 'mme_perception_score' fails without one of its docs"):
        GatePolicy.model_validate({"floors": {"mme_world/mme_perception_score": 100.0}})
    GatePolicy.model_validate({"floors": {"pope_world/pope_f1_score": 0.1}, "regressions": {"ai2d_world/exact_match": {"max_drop": 0.05}}})


def test_answers_the_tasks_extraction_filter_cannot_read_are_counted_and_fail_the_expectations(task_folder: Path, tmp_path: Path) -> None:
    from vlgate.evaluators.records import parse_jsonl
    from vlgate.evaluators.scoring import per_sample_frame, validate
    from vlgate.flows.expectations import validate_evaluator_output

    folder = tmp_path / "strict"
    _interleaved_task(folder, task_folder / WORLD_TASK / "test.parquet", name="strict_world")
    config = folder / "strict_world.yaml"  # a regex the world's answers never match: every doc gets the filter's fallback
    config.write_text(config.read_text() + 'filter_list:\n  - name: strict\n    filter:\n      - function: regex\n        regex_pattern: "(certainly)"\n      - function: take_first\n')
    suite = Suite.model_validate({"name": "s", "evaluators": {"strict": {"kind": "lmms-eval", "task": "strict_world", "include_path": str(folder), "limit": 4}}})
    summary = run_suite(str(CHECKPOINT), suite, tmp_path / "out", RunOptions(progress=False))
    records = [json.loads(line) for line in (tmp_path / "out" / "strict" / "records.jsonl").read_text().splitlines()]
    assert [(record["filtered"]["strict"], record["unparsed"]) for record in records] == [("[invalid]", True)] * 4
    assert summary["evaluators"]["strict"]["metrics"]["n_unparsed"] == 4
    valid = validate("strict", parse_jsonl(json.dumps(record) for record in records))
    report = validate_evaluator_output("strict", per_sample_frame(valid), summary["evaluators"]["strict"]["metrics"], expected_rows=4)
    (failed,) = [result for result in report.results if not result["success"]]
    assert failed["column"] == "n_unparsed" and "cannot read" in failed["unusable"]


def test_the_model_check_holds_batched_generation_to_one_at_a_time_on_a_tasks_own_requests(task_folder: Path) -> None:
    from vlgate.evaluators.running.model_check import BATCHED_GENERATION, check_model

    suite = Suite.model_validate({"name": "s", "batch_size": 4, "evaluators": {"interleaved": {"kind": "lmms-eval", "task": "interleaved_world", "include_path": str(task_folder), "limit": 6}}})
    check = check_model(str(CHECKPOINT), suite, items=4)
    (generation,) = [path for path in check.paths if path.path == BATCHED_GENERATION]
    assert (generation.used, generation.exact, generation.compared) == (True, True, 4) and check.trusted


def test_loading_a_task_leaves_pillow_refusing_truncated_images(vlgate_run: dict) -> None:
    from PIL import ImageFile

    assert ImageFile.LOAD_TRUNCATED_IMAGES is False  # lmms-eval's import sets it; a truncated data-set image must stay an item's error


def test_vlgate_evaluate_exits_2_when_a_tasks_aggregation_cannot_be_gated_and_keeps_its_records(
    task_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from vlgate.cli.main import main

    monkeypatch.setenv("VLGATE_HOME", str(tmp_path / "home"))

    folder = tmp_path / "odd"
    _interleaved_task(folder, task_folder / WORLD_TASK / "test.parquet", name="odd_aggregation_cli", aggregation="!function utils.not_a_number")
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"name": "s", "evaluators": {"odd": {"kind": "lmms-eval", "task": "odd_aggregation_cli", "include_path": str(folder), "limit": 2}}}))
    status = main(["evaluate", "--model", str(CHECKPOINT), "--suite", str(suite), "--out", str(tmp_path / "out"), "--quiet"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vlgate evaluate:")]
    assert status == 2 and len(lines) == 1 and "the aggregation of 'exact_match' gives dict" in lines[0] and "records computed so far are kept" in lines[0]
    assert len((tmp_path / "out" / "odd" / "records.jsonl").read_text().splitlines()) == 2
