"""GenCeption and DeCC runners on the synthetic world's tiny checkpoints (untrained: real
model code paths at test speed), with the real TransformersBackend, ViT CLS encoder and
scene renderer. Doubles only where a test needs a behaviour the tiny models lack: a
generator that returns the seed image (GenCeption's s = 1 invariant), a decomposer that
writes the world's reference decomposition, and an LLM agent that contradicts the real
one on chosen items (so that both DeCC rounds are exercised)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.base import BackendInfo, GenerateRequest, ImageEncoder, ImageGenerator, VisionLanguageBackend
from vlgate.evaluators.backends.encoders import VitClsEncoder
from vlgate.evaluators.backends.transformers_backend import TransformersBackend
from vlgate.evaluators.decc import prompts as decc_prompts
from vlgate.evaluators.decc.metrics import normalise_answer
from vlgate.evaluators.decc.runner import answer_format, canonical_answer, decc_runner, direct_prompt, parse_sub_questions, reasoning_prompt, short_answer
from vlgate.evaluators.genception.metrics import cosine_similarity
from vlgate.evaluators.genception.runner import GenceptionLoop, genception_runner, item_folder_name, write_features
from vlgate.evaluators.loaders.items import DeccItem, GenceptionItem
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.scenes.generator import SceneRendererGenerator
from vlgate.evaluators.scoring import score, score_file, validate
from vlgate.evaluators.world.architectures import build_vlm
from vlgate.evaluators.world.curriculum import reasoning_prompt_text
from vlgate.evaluators.world.datasets import build_datasets
from vlgate.evaluators.world.tokenizer import world_tokenizer
from vlgate.evaluators.world.training import build_llm, build_vit_encoder, save_checkpoint

pytestmark = pytest.mark.world

# -- the world: data, one tokenizer, two candidate VLMs (different seeds), the LLM agent, a ViT


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("gc-decc-world")
    build_datasets(root / "data", "small", seed=0)
    tokenizer = world_tokenizer(root / "data", seed=0)
    paths = {}
    for seed in (0, 1):
        model, processor = build_vlm(tokenizer, seed=seed)
        paths[f"vlm{seed}"] = save_checkpoint(model, processor, root / f"vlm-seed{seed}", {"kind": "vlm", "train_steps": 0, "seed": seed})
    paths["llm"] = build_llm(tokenizer, root / "llm", steps=0)
    paths["vit"] = build_vit_encoder(root / "vit")
    backends = {name: TransformersBackend.load(paths[name], device="cpu") for name in ("vlm0", "vlm1", "llm")}
    return root, paths, backends


class CountingEncoder(ImageEncoder):
    """Counts the images each embed call receives."""

    def __init__(self, inner: ImageEncoder):
        self.inner, self.info, self.calls = inner, inner.info, []

    def embed(self, images):
        self.calls.append(len(images))
        return self.inner.embed(images)


class EchoGenerator(ImageGenerator):
    """Returns the seed image of the n-th item for the n-th prompt: a perfect round trip."""

    info = BackendInfo("echo", "test", "sha256:echo")
    deterministic = False  # the image depends on the prompt's position, not its text

    def __init__(self, seed_images: Sequence[Path]):
        self.seed_images = [Image.open(path).convert("RGB") for path in seed_images]

    def generate_images(self, prompts, seed=0):
        assert len(prompts) == len(self.seed_images)
        return list(self.seed_images)


@pytest.fixture(scope="module")
def encoder(world):
    _, paths, _ = world
    return VitClsEncoder.load(paths["vit"], device="cpu")


@pytest.fixture(scope="module")
def generator():
    return SceneRendererGenerator()


@pytest.fixture(scope="module")
def seed_items(world):
    root, _, _ = world
    folder = root / "data" / "genception"
    return [GenceptionItem(path.stem, path.parent.name, path) for category in ("single", "multi", "landscape") for path in sorted((folder / category).glob("*.png"))[:1]]


def _validated(evaluator, records):
    valid = validate(evaluator, parse_jsonl(json.dumps(r) for r in records))
    assert not valid.errors
    return valid


# -- GenCeption


@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")  # FID of 3 images in 32 dimensions: singular covariances
def test_genception_records_keep_descriptions_images_and_features(world, encoder, generator, seed_items, tmp_path):
    _, _, backends = world
    runner = genception_runner(backends["vlm0"], generator, encoder, GenceptionLoop(3, max_new_tokens=12), artifacts_dir=tmp_path / "art", feature_cache_dir=tmp_path / "cache")
    assert runner.models == {"vlm": backends["vlm0"].info.digest, "generator": generator.info.digest, "encoder": encoder.info.digest}
    assert runner.settings["iterations"] == 3 and runner.settings["seed"] == 0
    result = runner.run(seed_items, RecordStore(tmp_path / "records.jsonl"), batch_size=2, progress=False)
    assert (result.computed, len(result.errors)) == (3, 0)
    valid = _validated("genception", result.records)
    assert set(score(valid)) >= {"gc@3", "s@1", "s@3"}
    for item, record in zip(seed_items, result.records):
        assert (record["id"], record["category"]) == (item.id, item.category)
        assert len(record["s"]) == len(record["descriptions"]) == len(record["images"]) == 3
        assert all(-1.0 <= s <= 1.0 for s in record["s"]) and all(isinstance(text, str) for text in record["descriptions"])
        assert record["images"] == [str(tmp_path / "art" / item.id / f"t{t}.png") for t in (1, 2, 3)]
        assert all(Path(path).is_file() for path in record["images"])
        vectors = np.load(record["features"])
        assert vectors.shape[0] == 4
        # the stored vectors are the ones s was computed from: s_t = cos(z_t, z_0), always to the seed
        np.testing.assert_allclose(cosine_similarity(np.repeat(vectors[:1], 3, axis=0), vectors[1:]), record["s"], atol=1e-9)
        np.testing.assert_allclose(vectors[0], encoder.embed([Image.open(item.image).convert("RGB")])[0], atol=1e-5)
    # write_features gives what `vlgate score genception --features` reads: fid@t and gc_fid@T
    features_path = write_features(result.records, tmp_path / "features.npz")
    metrics, _ = score_file("genception", tmp_path / "records.jsonl", features_path=features_path)
    assert {"fid@1", "fid@3", "gc_fid@3"} <= set(metrics) and metrics["gc_fid@3"] is not None


class RecordingBackend(VisionLanguageBackend):
    """The wrapped backend, keeping every generation request it was asked."""

    def __init__(self, inner: VisionLanguageBackend):
        self.inner, self.info, self.requests = inner, inner.info, []

    def choice_probs(self, requests):
        return self.inner.choice_probs(requests)

    def generate(self, requests):
        self.requests += list(requests)
        return self.inner.generate(requests)


def test_the_suites_iterations_and_description_length_reach_the_vlm(world, seed_items, tmp_path):
    from vlgate.evaluators.backends.loading import LoadPolicy
    from vlgate.evaluators.genception.runner import GenceptionSettings, build_genception_runner
    from vlgate.evaluators.runners.base import RunnerContext

    _, paths, backends = world
    vlm = RecordingBackend(backends["vlm0"])
    settings = GenceptionSettings(data=tmp_path, encoder=str(paths["vit"]), iterations=2, description_max_new_tokens=7)
    runner = build_genception_runner(settings, RunnerContext(vlm=vlm, out=tmp_path / "out", policy=LoadPolicy()))
    try:
        result = runner.run(seed_items[:1], RecordStore(tmp_path / "records.jsonl"), progress=False)
    finally:
        runner.close()
    assert len(result.records[0]["s"]) == 2
    assert [request.max_new_tokens for request in vlm.requests] == [7, 7]  # one description per iteration
    # a changed limit is a changed protocol: in every record and its fingerprint
    assert runner.protocol == "genception-1+description=7" and result.records[0]["protocol"] == "genception-1+description=7"
    unchanged = GenceptionSettings(data=tmp_path, encoder=str(paths["vit"]), description_max_new_tokens=512, protocol="genception")
    assert unchanged.protocol_overrides() == {"description": 512}
    from vlgate.evaluators import registry

    assert registry.get("genception").protocol(unchanged.protocol).as_run(**unchanged.protocol_overrides()) == "genception-1"  # the protocol's own limit
    assert registry.get("genception").protocol("vlgate").as_run(**unchanged.protocol_overrides()) == "vlgate-1+description=512"


def test_a_generator_returning_the_seed_gives_similarity_one_at_every_step(world, encoder, seed_items, tmp_path):
    _, _, backends = world
    runner = genception_runner(backends["vlm0"], EchoGenerator([item.image for item in seed_items]), encoder, GenceptionLoop(3, max_new_tokens=4), artifacts_dir=tmp_path / "art")
    result = runner.run(seed_items, RecordStore(tmp_path / "records.jsonl"), batch_size=len(seed_items), progress=False)
    for record in result.records:
        assert record["s"] == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)


def test_genception_rerun_reuses_records_and_seed_features_are_embedded_once_across_candidates(world, encoder, generator, seed_items, tmp_path):
    _, _, backends = world
    counting, cache, store_path = CountingEncoder(encoder), tmp_path / "feature-cache", tmp_path / "records.jsonl"

    def run(vlm, iterations, artifacts):
        runner = genception_runner(vlm, generator, counting, GenceptionLoop(iterations, max_new_tokens=8), artifacts_dir=tmp_path / artifacts, feature_cache_dir=cache)
        counting.calls.clear()
        return runner.run(seed_items, RecordStore(store_path), batch_size=len(seed_items), progress=False)

    n = len(seed_items)
    first = run(backends["vlm0"], 2, "vlm0")
    distinct_descriptions = {text for r in first.records for text in r["descriptions"]}
    # the seeds once, then each distinct description drawn and embedded once (a repeat is a cache hit)
    assert counting.calls[0] == n and sum(counting.calls[1:]) == len(distinct_descriptions) and len(counting.calls) <= 3
    assert len(list((cache).glob("sha256-*/*.npy"))) == n
    again = run(backends["vlm0"], 2, "vlm0")
    assert (again.computed, again.reused, counting.calls) == (0, n, [])
    assert again.records == first.records
    longer = run(backends["vlm0"], 3, "vlm0")  # another T is another fingerprint
    assert (longer.computed, longer.reused) == (n, 0) and all(len(r["s"]) == 3 for r in longer.records)
    # seeds and the first two steps' drawings come from the caches: at most the third step is new
    assert len(counting.calls) <= 1 and [r["s"][:2] for r in longer.records] == [r["s"] for r in first.records]
    other = run(backends["vlm1"], 2, "vlm1")  # a second candidate model, same encoder
    assert other.computed == n and len(counting.calls) <= 2 and all(size <= n for size in counting.calls)
    assert {r["fingerprint"] for r in other.records}.isdisjoint(r["fingerprint"] for r in first.records)
    # both candidates' t0 rows are the same cached seed features
    np.testing.assert_array_equal(np.load(first.records[0]["features"])[0], np.load(other.records[0]["features"])[0])


# -- DeCC


def _decc_rows(root: Path, count: int) -> list[dict]:
    return [json.loads(line) for line in (root / "data" / "decc" / "items.jsonl").read_text().splitlines()[:count]]


def _decc_items(root: Path, rows: list[dict], reference: bool) -> list[DeccItem]:
    folder = root / "data" / "decc"
    return [DeccItem(r["id"], folder / r["image"], r["question"], tuple(r["options"]), r["answer"], tuple(r["sub_questions"]) if reference else None) for r in rows]


class ContrarianAgent(VisionLanguageBackend):
    """The real LLM agent, with its option distribution reversed on the chosen questions."""

    def __init__(self, inner: VisionLanguageBackend, contradicted: set[str]):
        self.inner, self.info, self.contradicted = inner, inner.info, contradicted

    def choice_probs(self, requests):
        probabilities = self.inner.choice_probs(requests)
        return [p[::-1].copy() if any(q in r.prompt for q in self.contradicted) else p for p, r in zip(probabilities, requests)]

    def generate(self, requests):
        return self.inner.generate(requests)


class OracleDecomposer(VisionLanguageBackend):
    """Writes the world's reference decomposition ("How many X shapes are there?" per
    colour), and one additional sub-question in round 2; records every prompt."""

    info = BackendInfo("oracle-decomposer", "test", "sha256:oracle")

    def __init__(self):
        self.prompts: list[str] = []

    def choice_probs(self, requests):
        raise AssertionError("the decomposer only generates")

    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        texts = []
        for request in requests:
            assert len(request.images) == 1  # decompositions are conditioned on the image
            self.prompts.append(request.prompt)
            if "Additional Sub-question" in request.prompt:
                texts.append("Your return:\nAdditional Sub-question 1: What shapes are there?")
            else:
                question = request.prompt.split("Main Question: ")[1].split("?")[0]
                first, second = question.removeprefix("Are there more ").split(" shapes than ")
                texts.append(f"Pre-question 1: How many {first} shapes are there?\nPre-question 2: How many {second.removesuffix(' shapes')} shapes are there?")
        return texts

    def round1_calls(self) -> int:
        return sum("Pre-question N" in p for p in self.prompts)


def _check_rounds(records, items):
    """Round 2 ran exactly where the agents disagree about A0 — for these yes/no items,
    exactly where v1 != l1 — and the second-round answers are present exactly there."""
    for record, item in zip(records, items):
        disagree = normalise_answer(record["v1"]) != normalise_answer(record["l1"])
        cons_differ = (normalise_answer(record["v1"]) == normalise_answer(record["direct"])) != (normalise_answer(record["l1"]) == normalise_answer(record["direct"]))
        assert record["round2"] == disagree == cons_differ
        assert ("v2" in record) == ("l2" in record) == record["round2"]
        vocabulary = {normalise_answer(option) for option in item.options}
        for name in ("direct", "v1", "l1", "v2", "l2", "answer"):
            if name in record:
                assert normalise_answer(record[name]) in vocabulary, (name, record[name])


def test_decc_second_round_runs_exactly_where_the_agents_disagree(world, tmp_path):
    root, _, backends = world
    rows = _decc_rows(root, 6)
    items = _decc_items(root, rows, reference=True)
    llm = ContrarianAgent(backends["llm"], {rows[0]["question"], rows[3]["question"]})
    runner = decc_runner(backends["vlm0"], llm, cache_dir=tmp_path / "cache")
    # no decomposer given: the candidate decomposes
    assert runner.models == {"vlm": backends["vlm0"].info.digest, "llm": llm.info.digest, "decomposer": backends["vlm0"].info.digest}
    result = runner.run(items, RecordStore(tmp_path / "records.jsonl"), batch_size=4, progress=False)
    assert (result.computed, len(result.errors)) == (6, 0)
    valid = _validated("decc", result.records)
    _check_rounds(result.records, items)
    assert 0 < sum(r["round2"] for r in result.records) < len(items)  # both branches exercised
    for record, row in zip(result.records, rows):
        assert record["answer"] == row["answer"] and record["decomposition"] == "reference"
        assert record["sub_questions"] == row["sub_questions"] and len(record["sub_answers"]) == 2
        if record["round2"]:  # the untrained decomposer writes nothing parseable: the first sub-questions are asked again
            assert record["decomposition_2"] == "fallback" and record["sub_questions_2"] == row["sub_questions"]
    metrics = score(valid)
    assert metrics["n_round2"] == sum(r["round2"] for r in result.records) and "reliable_rate/multi" in metrics and "brier/multi" in metrics
    again = decc_runner(backends["vlm0"], llm, cache_dir=tmp_path / "cache").run(items, RecordStore(tmp_path / "records.jsonl"), progress=False)
    assert (again.computed, again.reused) == (0, 6)


def test_decompositions_are_cached_on_disk_and_reused_by_the_next_candidate(world, tmp_path):
    root, _, backends = world
    rows = _decc_rows(root, 4)
    items = _decc_items(root, rows, reference=False)
    llm = ContrarianAgent(backends["llm"], {rows[1]["question"]})
    decomposer, cache = OracleDecomposer(), tmp_path / "cache"

    first = decc_runner(backends["vlm0"], llm, decomposer, cache_dir=cache).run(items, RecordStore(tmp_path / "a.jsonl"), batch_size=4, progress=False)
    _validated("decc", first.records)
    _check_rounds(first.records, items)
    assert decomposer.round1_calls() == len(items)
    for record, row in zip(first.records, rows):
        assert record["decomposition"] == "decomposer" and record["sub_questions"] == row["sub_questions"]
        if record["round2"]:
            assert record["sub_questions_2"] == ["What shapes are there?"] and record["decomposition_2"] == "decomposer"
    assert any(r["round2"] for r in first.records)
    cached = sorted(cache.rglob("*.json"))
    assert len(cached) == len(items) + sum(r["round2"] for r in first.records)
    assert all("Pre-question 1" in json.loads(path.read_text())["text"] or "Additional" in json.loads(path.read_text())["text"] for path in cached)

    decomposer.prompts.clear()
    second = decc_runner(backends["vlm1"], llm, decomposer, cache_dir=cache).run(items, RecordStore(tmp_path / "b.jsonl"), batch_size=4, progress=False)
    assert second.computed == len(items) and decomposer.round1_calls() == 0
    assert [r["sub_questions"] for r in second.records] == [r["sub_questions"] for r in first.records]
    _check_rounds(second.records, items)

    decomposer.prompts.clear()  # the first candidate again, records gone: every decomposition is on disk
    decc_runner(backends["vlm0"], llm, decomposer, cache_dir=cache).run(items, RecordStore(tmp_path / "c.jsonl"), batch_size=4, progress=False)
    assert decomposer.prompts == []


def test_yes_no_prompts_are_the_formats_the_world_models_were_trained_on(world):
    root, _, _ = world
    row = _decc_rows(root, 1)[0]
    item = _decc_items(root, [row], reference=True)[0]
    how = answer_format(item)
    assert how.kind == "yes-no" and how.labels == ("Yes", "No")
    pairs = decc_prompts.decc_pairs(row["sub_questions"], row["sub_answers"])
    assert reasoning_prompt(pairs, item, how) == reasoning_prompt_text(row["sub_questions"], row["sub_answers"], row["question"])
    assert direct_prompt(item, how) == f"{row['question']} {prompts.YES_NO_INSTRUCTION}"


def test_sub_question_parsing_and_answer_normalisation():
    text = "Here you go.\nPre-question 1: Is there a dog?\nPre-Question 2 - What colour is it?\npre-question 3: Is there a dog?\nPre-question 4: Where?\nPre-question 5: Why?"
    assert parse_sub_questions(text, 3) == ["Is there a dog?", "What colour is it?", "Where?"]  # repeats dropped, at most 3
    assert parse_sub_questions("Your return:\nAdditional Sub-question 1: Is it red?", 4) == ["Is it red?"]
    assert parse_sub_questions("1. Is it big?\n2) Is it round?\nnot a question", 4) == ["Is it big?", "Is it round?"]
    assert parse_sub_questions("I would ask: is it big? and is it round?", 4) == ["I would ask: is it big?", "and is it round?"]
    assert parse_sub_questions(": : : red circle", 4) == []
    assert short_answer("Answer: 3.\nbecause...") == "3" and short_answer("  A: two  ") == "two" and short_answer("") == ""
    item = DeccItem("x", Path("x.png"), "What colour?", ("red", "blue", "green"), "B")
    assert canonical_answer("B", item) == "blue" and canonical_answer("Blue.", item) == "blue" and canonical_answer(None, item) is None
    assert item_folder_name("gc-001") == "gc-001" and item_folder_name("a/b") != item_folder_name("a_b")
    assert answer_format(item).labels == ("A", "B", "C") and answer_format(DeccItem("y", Path("y.png"), "How many?")).kind == "open"


def test_open_and_lettered_items_answer_in_the_option_vocabulary(world, tmp_path):
    """Items with letters go through choice_probs over A/B/C, open ones through generation."""
    root, _, backends = world
    row = _decc_rows(root, 1)[0]
    image = root / "data" / "decc" / row["image"]
    items = [
        DeccItem("lettered", image, "Which colour is there most of?", ("red", "blue", "green"), "C", ("How many red shapes are there?",)),
        DeccItem("open", image, "How many shapes are there?", None, "3", ("How many red shapes are there?",)),
    ]
    result = decc_runner(backends["vlm0"], backends["llm"], cache_dir=tmp_path).run(items, RecordStore(tmp_path / "r.jsonl"), progress=False)
    _validated("decc", result.records)
    lettered, open_ended = result.records
    assert lettered["answer"] == "green" and {lettered["direct"], lettered["v1"], lettered["l1"]} <= {"red", "blue", "green"}
    assert open_ended["answer"] == "3" and all(isinstance(open_ended[k], str) for k in ("direct", "v1", "l1"))
