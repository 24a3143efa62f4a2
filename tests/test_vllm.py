"""The real vLLM engine (CPU build) against the transformers backend on the shipped world,
the demo's own checkpoints (LLaVA, text heads zero-padded to the 32 dimensions vLLM's CPU
attention runs: ``checkpoints.pad_attention_heads``).

These tests run in the second environment, ``.venv-vllm`` (``make test`` builds it and runs
this module there; docs/vllm.md): vLLM's CPU build cannot share an environment with the
service stack. Elsewhere they skip, unless ``VLGATE_REQUIRE_VLLM=1`` (CI) makes that a failure.

One engine per checkpoint for the whole session (vLLM's start-up is the slow part), and
one ``vllm serve`` subprocess for the OpenAI-compatible backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from vllm_required import require_vllm, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

vllm_is_installed = require_vllm()

from vlgate.evaluators import prompts  # noqa: E402
from vlgate.evaluators.backends.base import BackendError, ChoiceRequest, GenerateRequest  # noqa: E402
from vlgate.evaluators.backends.loading import model_digest  # noqa: E402
from vlgate.evaluators.backends.vllm_offline import VllmBackend  # noqa: E402
from vlgate.evaluators.genception import prompts as genception_prompts  # noqa: E402
from vlgate.evaluators.scenes.scene import render  # noqa: E402
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts  # noqa: E402
from vlgate.evaluators.vlind import prompts as vlind_prompts  # noqa: E402
from vlgate.evaluators.world.datasets import mc_item, vlind_item, yesno_item  # noqa: E402

#: Option probabilities: vLLM (float32, its own CPU kernels) against transformers (float32).
#: Measured on the trained world checkpoint: at most a few 1e-6 apart.
PROBABILITY_TOLERANCE = 1e-4
LETTERS, YES_NO, TRUE_FALSE = ("A", "B", "C", "D"), ("Yes", "No"), ("True", "False")


@pytest.fixture(scope="session")
def trained_checkpoint(default_world):
    out, manifest = default_world
    return out / manifest["checkpoints"]["vlm"]["10000"]


def engine_settings(default_world) -> dict:
    out, _ = default_world
    return yaml.safe_load((out / "suite.yaml").read_text())["vllm"]


@pytest.fixture(scope="session")
def vllm_backend(default_world, trained_checkpoint):
    backend = VllmBackend.load(trained_checkpoint, **engine_settings(default_world))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def transformers_backend(trained_checkpoint):
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend.load(trained_checkpoint, device="cpu")  # float32
    yield backend
    backend.close()


def world_requests() -> dict[str, list[ChoiceRequest]]:
    """Requests in the evaluators' own prompt formats on the world's images, by option kind."""
    rng = np.random.default_rng(11)
    mc, yes_no, true_false, two_images = [], [], [], []
    for index in range(6):
        scene, row = mc_item(rng, index)
        image = render(scene, 64)
        mc.append(ChoiceRequest((image,), prompts.mc_prompt(row["question"], row["options"]), LETTERS[: len(row["options"])], shared_prefix=row["question"]))
        yes_no.append(ChoiceRequest((image,), lcm_prompts.yes_no_probe(row["question"], row["options"][index % len(row["options"])]), YES_NO, shared_prefix=row["question"]))
        scene, row = yesno_item(rng, index)
        yes_no.append(ChoiceRequest((render(scene, 64),), f"{row['question']} {prompts.YES_NO_INSTRUCTION}", YES_NO))
        factual, counterfactual, row = vlind_item(rng, index)
        true_false.append(ChoiceRequest((render(counterfactual[0], 64),), vlind_prompts.vlind_image(row["true_statement"]), TRUE_FALSE))
        true_false.append(ChoiceRequest((render(factual, 64),), vlind_prompts.vlind_commonsense(row["false_statement"]), TRUE_FALSE))
        two_images.append(ChoiceRequest((render(factual, 64), render(counterfactual[0], 64)), lcm_prompts.naturalbench_choose_image(row["true_statement"], "statement"), ("A", "B")))
    return {"mc": mc, "yes-no": yes_no, "true-false": true_false, "two-images": two_images}


def assert_same_probabilities(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    assert len(got) == len(expected)
    worst = 0.0
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(g, e, atol=PROBABILITY_TOLERANCE, rtol=0)
        worst = max(worst, float(np.abs(g - e).max()))
    return worst


@pytest.mark.parametrize("kind", ["mc", "yes-no", "true-false", "two-images"])
def test_vllm_option_probabilities_equal_transformers(vllm_backend, transformers_backend, kind):
    requests = world_requests()[kind]
    expected = transformers_backend.choice_probs(requests)
    assert_same_probabilities(vllm_backend.choice_probs(requests), expected)
    # the comparison has something to compare: the trained model is far from uniform on the
    # kinds it was trained on; on two images (never trained on) the images still move it
    assert max(float(p.max() - p.min()) for p in expected) > (1e-3 if kind == "two-images" else 0.05)


def test_check_model_compares_the_vllm_engine_with_the_plain_transformers_path(vllm_backend, transformers_backend):
    from vlgate.evaluators.running.model_check import OTHER_ENGINE, CheckRequests, check_transformers

    requests = CheckRequests(tuple(request for requests in world_requests().values() for request in requests), ())
    result = check_transformers(transformers_backend, requests, engine=vllm_backend)
    engine = {path.path: path for path in result.paths}[OTHER_ENGINE]
    assert engine.used and engine.exact is True and engine.compared == len(requests.choices) == 36
    assert engine.largest_difference <= 1e-5
    assert result.trusted


def test_vllm_asks_for_exactly_the_option_tokens(vllm_backend):
    assert vllm_backend.exact_option_logprobs
    assert vllm_backend.info.extra["option_logprobs"] == "exact (logprob_token_ids)"


def test_vllm_greedy_generation_equals_transformers(vllm_backend, transformers_backend):
    rng = np.random.default_rng(5)
    requests = []
    for index in range(4):
        scene, row = mc_item(rng, index)
        image = render(scene, 64)
        requests.append(GenerateRequest((image,), f"{row['question']} Answer in one word.", 4))
        requests.append(GenerateRequest((image,), genception_prompts.GENCEPTION_DESCRIBE, 12))
    expected = transformers_backend.generate(requests)
    assert vllm_backend.generate(requests) == expected
    assert any(text for text in expected)


def test_vllm_records_what_it_ran(vllm_backend, trained_checkpoint):
    assert vllm_backend.info.digest == model_digest(trained_checkpoint)
    assert vllm_backend.info.device == "cpu"
    assert vllm_backend.info.extra["dtype"] == "float32" and vllm_backend.info.extra["enable_prefix_caching"] == "True"


def test_vllm_refuses_an_architecture_it_cannot_run_here_naming_the_model(tmp_path):
    """vLLM's Kanana-V module imports timm, which this environment lacks: one line with the
    model and the reason, before any engine starts (or the config is even read further)."""
    folder = tmp_path / "kanana-v"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["KananaVForConditionalGeneration"], "model_type": "kanana-1.5-v"}))
    with pytest.raises(BackendError, match=r"^model .*kanana-v: vLLM .* cannot run its architecture KananaVForConditionalGeneration here: .*No module named 'timm'"):
        VllmBackend.load(folder, dtype="float32", gpu_memory_utilization=0.1)


def test_vllm_refuses_attention_heads_its_cpu_attention_cannot_compute_before_an_engine_starts(default_world):
    """The world's LLM agent (DeCC's, heads 16 wide): vLLM's CPU attention would start the
    engine and die at the first request; vlgate refuses it from its config, naming why."""
    out, manifest = default_world
    running = engine_processes()  # the module's shared engines, started by earlier tests
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"^model .*llm-agent: vLLM cannot score it exactly here: its attention heads are 16 wide, and vLLM's CPU attention computes heads 32, 64, .* wide only"):
        VllmBackend.load(out / "checkpoints" / "llm-agent", dtype="float32", gpu_memory_utilization=0.1)
    assert time.monotonic() - started < 30 and engine_processes() <= running  # no engine of its own was started


def engine_processes() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True) if child.is_running() and child.status() != psutil.STATUS_ZOMBIE}


def test_closing_the_backend_stops_its_engine(default_world):
    """The engine runs in child processes holding the weights and the KV cache; close()
    ends them, so the memory goes back when a runner finishes."""
    out, manifest = default_world
    before = engine_processes()
    backend = VllmBackend.load(out / manifest["checkpoints"]["vlm"]["0"], **engine_settings(default_world))
    started = engine_processes() - before
    assert started, "vLLM's engine core runs in its own process"
    backend.close()
    deadline = time.monotonic() + 30
    while engine_processes() & started and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not engine_processes() & started
    assert backend.llm is None


# -- vllm serve and the OpenAI-compatible backend ---------------------------------------------------


@pytest.fixture(scope="session")
def world_server(default_world, trained_checkpoint, tmp_path_factory):
    """``vllm serve`` of the trained world VLM with the world's engine settings, as the README
    says to serve a checkpoint transformers saved: the folder ``vlgate vllm-layout`` prints;
    yields the base URL."""
    settings = engine_settings(default_world)
    layout = subprocess.run(
        [str(Path(sys.executable).with_name("vlgate")), "vllm-layout", str(trained_checkpoint), "--cache", str(tmp_path_factory.mktemp("model-cache"))],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    arguments = [
        "--model", layout, "--served-model-name", "world-vlm",
        "--dtype", settings["dtype"], "--max-model-len", str(settings["max_model_len"]),
        "--gpu-memory-utilization", str(settings["gpu_memory_utilization"]),
        # the whole vocabulary's logprobs: the trained model puts A and B of a two-image
        # question (never trained on) below its top 20
        "--limit-mm-per-prompt", json.dumps(settings["limit_mm_per_prompt"]), "--max-logprobs", "-1",
    ]
    with vllm_server(arguments, tmp_path_factory.mktemp("vllm-serve") / "serve.log") as base_url:
        yield base_url


@pytest.fixture(scope="session")
def http_backend(world_server, trained_checkpoint):
    from transformers import AutoTokenizer

    from vlgate.evaluators.backends.openai_http import OpenAIHttpBackend

    backend = OpenAIHttpBackend(world_server, "world-vlm", top_logprobs=len(AutoTokenizer.from_pretrained(trained_checkpoint)))
    yield backend
    backend.close()


@pytest.mark.parametrize("kind", ["mc", "yes-no", "true-false", "two-images"])
def test_vllm_serve_option_probabilities_equal_transformers(http_backend, transformers_backend, kind):
    requests = world_requests()[kind]
    assert_same_probabilities(http_backend.choice_probs(requests), transformers_backend.choice_probs(requests))


def test_vllm_serve_greedy_generation_equals_transformers(http_backend, transformers_backend):
    rng = np.random.default_rng(5)
    requests = [GenerateRequest((render(mc_item(rng, index)[0], 64),), genception_prompts.GENCEPTION_DESCRIBE, 12) for index in range(4)]
    assert http_backend.generate(requests) == transformers_backend.generate(requests)


# -- a world suite on both backends -----------------------------------------------------------------


NUMERIC_TOLERANCE = {"lcm-mc": 1e-4, "lcm-nb": 1e-4, "decc": 1e-4}


def relative(value, root: Path):
    """Paths under a run's folder (GenCeption's image artifacts) relative to that folder."""
    if isinstance(value, str):
        return value.replace(str(root), "OUT")
    if isinstance(value, list):
        return [relative(v, root) for v in value]
    return value


def assert_same_records(got: Path, expected: Path, evaluator: str) -> None:
    got_records = [{k: relative(v, got) for k, v in json.loads(line).items()} for line in (got / evaluator / "records.jsonl").read_text().splitlines()]
    expected_records = [{k: relative(v, expected) for k, v in json.loads(line).items()} for line in (expected / evaluator / "records.jsonl").read_text().splitlines()]
    assert len(got_records) == len(expected_records) > 0
    for g, e in zip(got_records, expected_records):
        assert set(g) == set(e), evaluator
        for key in e:
            if key == "fingerprint":
                continue  # names the backend
            if isinstance(e[key], float) or (isinstance(e[key], list) and e[key] and isinstance(e[key][0], (float, list))):
                np.testing.assert_allclose(np.asarray(g[key], dtype=float), np.asarray(e[key], dtype=float), atol=NUMERIC_TOLERANCE.get(evaluator, 1e-4), err_msg=f"{evaluator} {e.get('id')} {key}")
            else:
                assert g[key] == e[key], f"{evaluator} {e.get('id')} {key}"


def test_the_demo_suite_on_vllm_gives_the_records_and_the_decision_of_transformers(default_world, tmp_path):
    """``vlgate evaluate --suite WORLD/suite-vllm.yaml`` (the console script, in its own
    process as a team would run it) writes valid records equal to those of the world's
    transformers suite, and the demo's gate decides the same on both: the answer-prior
    fine-tune is rejected against the trained champion, by VL-LCM's MC evaluator alone."""
    from vlgate.cli.demo import DEMO_POLICY
    from vlgate.evaluators import registry
    from vlgate.evaluators.output import EvaluatorOutput
    from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite
    from vlgate.gate.gates import decide
    from vlgate.gate.policy import GatePolicy

    out, manifest = default_world
    versions = {"champion": out / manifest["checkpoints"]["vlm"]["10000"], "candidate": out / manifest["checkpoints"]["vlm_faults"]["answer-prior"]}
    assert Suite.from_file(out / "suite-vllm.yaml").backend == "vllm"
    results: dict[str, dict[str, Path]] = {"vllm": {}, "transformers": {}}
    for role, checkpoint in versions.items():
        results["vllm"][role] = tmp_path / f"vllm-{role}"
        done = subprocess.run(
            [str(Path(sys.executable).with_name("vlgate")), "evaluate", "--model", str(checkpoint), "--suite", str(out / "suite-vllm.yaml"), "--out", str(results["vllm"][role]), "--quiet"],
            capture_output=True, text=True, timeout=900,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        results["transformers"][role] = tmp_path / f"transformers-{role}"
        run_suite(str(checkpoint), Suite.from_file(out / "suite.yaml"), results["transformers"][role], RunOptions(progress=False))
    for role in versions:
        summary = json.loads((results["vllm"][role] / "summary.json").read_text())
        assert summary["backend"]["name"] == "vllm"
        for evaluator in registry.names():
            assert "error" not in summary["evaluators"][evaluator], summary["evaluators"][evaluator]
            assert_same_records(results["vllm"][role], results["transformers"][role], evaluator)

    def outputs(folder: Path) -> dict[str, EvaluatorOutput]:
        return {name: EvaluatorOutput.from_folder(name, folder / name) for name in registry.names()}

    policy = GatePolicy.model_validate(yaml.safe_load(DEMO_POLICY))
    decisions = {backend: decide(policy, outputs(folders["candidate"]), outputs(folders["champion"])) for backend, folders in results.items()}
    for decision in decisions.values():
        assert decision.outcome == "rejected", decision.reasons
        # failed by lcm-mc alone (on this small world a comparison the fault did not change may be undecided, never failed)
        assert {(check.metric or "").split("/")[0] for check in decision.checks if check.verdict in ("fail", "could not judge")} == {"lcm-mc"}, decision.reasons
    assert [(check.name, check.verdict) for check in decisions["vllm"].checks] == [(check.name, check.verdict) for check in decisions["transformers"].checks]


def test_decc_runs_its_llm_agent_on_vllm_with_the_records_of_transformers(default_world, tmp_path, monkeypatch):
    """``llm_backend: vllm``: DeCC's LLM agent on vLLM while the candidate runs on
    transformers. The world's agent (heads 16 wide, which vLLM's CPU attention refuses) is
    padded to 32 as the world's VLMs are (the same function); its records equal those of the
    shipped agent on transformers, and the agent ran on vLLM's engine."""
    import shutil

    from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite
    from vlgate.evaluators.world.vllm_padding import pad_attention_heads

    out, manifest = default_world
    agent = tmp_path / "llm-agent"
    shutil.copytree(out / manifest["checkpoints"]["llm_agent"], agent)
    assert pad_attention_heads(agent)
    candidate = out / manifest["checkpoints"]["vlm"]["10000"]
    started: list[Path] = []  # what vLLM loads (the real engine: the spy only writes down the path)
    load = VllmBackend.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(VllmBackend, "load", classmethod(lambda cls, model, *args, **kwargs: started.append(Path(model)) or load(cls, model, *args, **kwargs)))
    results = {}
    for engine, llm in (("vllm", agent), ("transformers", out / manifest["checkpoints"]["llm_agent"])):
        suite = tmp_path / f"decc-{engine}.yaml"
        decc = {"data": str(out / "data" / "decc"), "llm": str(llm), "llm_backend": engine, "protocol": "vlgate"}
        suite.write_text(yaml.safe_dump({"name": f"decc-agent-on-{engine}", "batch_size": 8, "evaluators": {"decc": decc}, "vllm": engine_settings(default_world), "backend": "transformers"}))
        results[engine] = tmp_path / engine
        summary = run_suite(str(candidate), Suite.from_file(suite), results[engine], RunOptions(progress=False))
        assert "error" not in summary["evaluators"]["decc"], summary["evaluators"]["decc"]
    assert started == [agent]  # the agent, once; the candidate and the shipped agent on transformers
    assert_same_records(results["vllm"], results["transformers"], "decc")


def test_a_second_load_of_the_model_shares_the_engine_and_concurrent_calls_agree(default_world, trained_checkpoint, vllm_backend):
    """The validation flow runs evaluators as concurrent tasks, each loading the model: one
    engine serves them all (no second engine process), calls from two threads give what
    one thread gives, and closing one user leaves the engine to the other."""
    from concurrent.futures import ThreadPoolExecutor

    requests = world_requests()["mc"] + world_requests()["yes-no"]
    expected = vllm_backend.choice_probs(requests)
    before = engine_processes()
    second = VllmBackend.load(trained_checkpoint, **engine_settings(default_world))
    try:
        assert second.llm is vllm_backend.llm and engine_processes() == before
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda backend: backend.choice_probs(requests), [vllm_backend, second]))
        for got in results:
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)
    finally:
        second.close()
    assert vllm_backend.choice_probs(requests[:1])[0].sum() == pytest.approx(1.0)


def test_lmms_eval_tasks_on_vllm_give_the_filtered_responses_scores_and_aggregates_of_transformers(default_world, trained_checkpoint, tmp_path):
    """lmms-eval tasks on vLLM (lmms-eval installed in ``.venv-vllm`` without its declared
    dependencies: infra/vllm-cpu/lmms-requirements.txt): the world's own task and POPE of the
    installed package, on the world's docs in their schemas, give on vLLM the records of the
    transformers backend — each doc's prompt, response, filtered response and
    ``process_results`` — and the same aggregates."""
    from vlgate.evaluators.running.model_check import OTHER_ENGINE, check_model
    from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite
    from vlgate.evaluators.world.lmms_task import POPE_TASK, TASK, export_world_task

    out, _ = default_world
    tasks = tmp_path / "tasks"
    export_world_task(out / "data", tasks)
    entries = {task: {"kind": "lmms-eval", "task": task, "include_path": str(tasks), "limit": 16} for task in (TASK, POPE_TASK)}
    results, summaries = {}, {}
    for backend in ("vllm", "transformers"):
        suite = Suite.model_validate({"name": f"lmms-on-{backend}", "batch_size": 8, "backend": backend, "vllm": engine_settings(default_world), "evaluators": entries})
        results[backend] = tmp_path / backend
        summaries[backend] = run_suite(str(trained_checkpoint), suite, results[backend], RunOptions(progress=False))
    assert summaries["vllm"]["backend"]["name"] == "vllm"
    for task in (TASK, POPE_TASK):
        for summary in summaries.values():
            assert "error" not in summary["evaluators"][task], summary["evaluators"][task]
        assert_same_records(results["vllm"], results["transformers"], task)
        got, expected = summaries["vllm"]["evaluators"][task]["metrics"], summaries["transformers"]["evaluators"][task]["metrics"]
        assert got == expected and got
    # the world's model knows the world's yes/no questions: not a run of empty answers agreeing
    assert summaries["vllm"]["evaluators"][TASK]["metrics"]["exact_match"] > 0.8
    # what a validation on vLLM checks first: the engine's greedy texts on the tasks' own requests, held to transformers'
    check = check_model(str(trained_checkpoint), Suite.model_validate({"name": "lmms-on-vllm", "backend": "vllm", "vllm": engine_settings(default_world), "evaluators": entries}), items=4, backend="vllm")
    engine = {path.path: path for path in check.paths}[OTHER_ENGINE]
    assert (engine.used, engine.exact) == (True, True) and engine.compared >= 4 and check.trusted
