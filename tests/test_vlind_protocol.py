"""VLind-Bench's authors' evaluation protocol: the
default ``vlind-bench`` follows klee972/VLind-Bench ``eval/`` (its prompts, generation limit,
parser and inclusion rules); ``vlgate`` keeps the world's 16-token answers. The expected
strings below were written by hand from ``eval/gpt4o_eval.py``'s ``prompt`` and ``ctx_prompt``
with ``prompt_type = 'commonsense_TF-simple_TF-detailed_TF-detailed_TF'`` (pt_a..pt_d for
CK, VP, CB, LP) and ``obj_det_statement_template``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlgate.config import ConfigError
from vlgate.evaluators import registry
from vlgate.evaluators.backends.base import BackendInfo, GenerateRequest, VisionLanguageBackend
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.running.items import load_items
from vlgate.evaluators.running.suite import Suite
from vlgate.evaluators.scoring import score, validate
from vlgate.evaluators.vlind import protocols as vlind_protocols
from vlgate.evaluators.vlind.runner import VlindSettings, vlind_runner

# ---- the authors' text, by hand -------------------------------------------------------

CONTEXT = "In this world, bananas are blue."
S_CF, S_FACT = "The banana is blue.", "The banana is yellow."  # data.json's true_statement, false_statement

CK_FACT = "Statement: The banana is yellow.\nBased on the common sense, is the given statement true or false? Only respond in True or False."
CK_CF = "Statement: The banana is blue.\nBased on the common sense, is the given statement true or false? Only respond in True or False."
VP_EXIST = "Statement: There is banana in the given image.\nBased on the image, is the given statement true or false? Only respond in True or False."
VP_NIL = "Statement: There is car in the given image.\nBased on the image, is the given statement true or false? Only respond in True or False."
CB_CF = (
    "Context: In this world, bananas are blue.\nStatement: The banana is blue.\nBased on the context, is the given statement true or false? "
    "Forget real-world common sense and just follow the information provided in the context. Only respond in True or False."
)
CB_FACT = (
    "Context: In this world, bananas are blue.\nStatement: The banana is yellow.\nBased on the context, is the given statement true or false? "
    "Forget real-world common sense and just follow the information provided in the context. Only respond in True or False."
)
LP_CF = (
    "Statement: The banana is blue.\nBased on the image, is the given statement true or false? "
    "Forget real-world common sense and just follow the information provided in the image. Only respond in True or False."
)
LP_FACT = (
    "Statement: The banana is yellow.\nBased on the image, is the given statement true or false? "
    "Forget real-world common sense and just follow the information provided in the image. Only respond in True or False."
)


# ---- a VLind-Bench release on disk, each image a colour that names it -----------------

FACTUAL_COLOUR = (255, 255, 255)


def colour(image_id: str) -> tuple[int, int, int]:
    return (10 * int(image_id) + 5, 0, 0)


def instance(context_id: int, votes: dict[str, int], best: str, concept: str = "color") -> dict:
    return {
        "concept": concept, "context_id": context_id, "context": CONTEXT, "factual_context": "Bananas are yellow.",
        "true_statement": S_CF, "false_statement": S_FACT, "existent_noun": "banana", "non-existent_noun": "car",
        "best_img_id": best, "aggregated_human_label_good_images": votes,
    }  # fmt: skip


def release(root: Path, instances: list[dict]) -> Path:
    """data.json and every image its instances name (PNG, so the colours survive)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.json").write_text(json.dumps(instances))
    for entry in instances:
        folder = root / "images" / "counterfactual" / entry["concept"] / f"{entry['context_id']}_{entry['context']}"
        folder.mkdir(parents=True, exist_ok=True)
        for image_id in {*entry["aggregated_human_label_good_images"], entry["best_img_id"]}:
            Image.new("RGB", (4, 4), colour(image_id)).save(folder / f"{image_id}.png")
        factual = root / "images" / "factual" / entry["concept"] / f"{entry['context_id']}_{entry['factual_context']}"
        factual.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), FACTUAL_COLOUR).save(factual / "0.png")
    return root


class Scripted(VisionLanguageBackend):
    """Answers every pair right ("True." then "False"), and remembers what it was asked."""

    info = BackendInfo(name="scripted", model="scripted", digest="sha256:scripted")

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    def choice_probs(self, requests):
        raise AssertionError("not used")

    def generate(self, requests):
        self.requests += list(requests)
        return ["True." if n % 2 == 0 else "False" for n in range(len(requests))]


def shown(request: GenerateRequest) -> str:
    """Which image a request showed: "factual" or the counterfactual image's id."""
    (image,) = request.images
    pixel = image.getpixel((0, 0))
    return "factual" if pixel == FACTUAL_COLOUR else str((pixel[0] - 5) // 10)


def settings(root: Path, **rules) -> VlindSettings:
    return VlindSettings(data=root, format="vlind-bench", **rules)


# ---- the default protocol is the authors' ---------------------------------------------


def test_the_default_vlind_protocol_is_the_authors_and_vlgate_stays_for_the_world():
    definition = registry.get("vlind")
    default = definition.protocol()
    assert default is vlind_protocols.VLIND[0] and default.id == "vlind-bench-1"
    assert default.follows.startswith("klee972/VLind-Bench ") and all(f in default.follows for f in ("eval/gpt4o_eval.py", "eval/instructblip_eval.py", "eval/score_pipeline.py"))
    assert default.max_new_tokens == {"answer": 64}  # instructblip_eval.py: do_sample=False, num_beams=1, max_new_tokens=64
    assert default.differences and all(isinstance(d, str) and d for d in default.differences)
    world = definition.protocol("vlgate")
    assert world.id == "vlgate-1" and world.max_new_tokens == {"answer": 16} and world.prompts is default.prompts


def test_the_world_suite_names_vlgate_for_vlind():
    from vlgate.evaluators.world.build import WORLD_SUITE

    (line,) = [line for line in WORLD_SUITE.splitlines() if line.strip().startswith("vlind:")]
    assert "protocol: vlgate" in line


def _asked(protocol_name: str | None, tmp_path: Path) -> list[GenerateRequest]:
    root = release(tmp_path / "release", [instance(3, {"0": 1, "2": 3, "5": 2}, best="0")])
    items, errors = load_items("vlind", settings(root), tmp_path / "out")
    assert not errors
    backend = Scripted()
    runner = vlind_runner(backend, registry.get("vlind").protocol(protocol_name))
    runner.run(items, RecordStore(tmp_path / f"{protocol_name}.jsonl"), progress=False)
    return backend.requests


def test_prompts_images_and_generation_limit_are_the_authors_character_by_character(tmp_path):
    asked = _asked(None, tmp_path)
    # gpt4o_eval.py: a1/a2 (CK, factual image 0.jpg), b1/b2 (VP, best_img_id), c1/c2 (CB, best_img_id), d1/d2 per accepted image
    assert [request.prompt for request in asked] == [CK_FACT, CK_CF, VP_EXIST, VP_NIL, CB_CF, CB_FACT, LP_CF, LP_FACT, LP_CF, LP_FACT]
    assert [shown(request) for request in asked] == ["factual"] * 2 + ["0"] * 4 + ["2", "2", "5", "5"]
    assert {request.max_new_tokens for request in asked} == {64}
    # vlgate asks the same text (the world is trained on it) with 16-token answers
    world = _asked("vlgate", tmp_path)
    assert [request.prompt for request in world] == [request.prompt for request in asked]
    assert {request.max_new_tokens for request in world} == {16}


# ---- the protocol as run: records, fingerprints, the suite ----------------------------


def test_records_carry_the_protocol_and_a_protocol_or_rule_change_is_a_new_fingerprint(tmp_path):
    root = release(tmp_path / "release", [instance(3, {"0": 2, "1": 3}, best="1")])
    items, _ = load_items("vlind", settings(root), tmp_path / "out")
    runs = {}
    for name, protocol, overrides in (
        ("default", vlind_protocols.VLIND[0], None),
        ("vlgate", registry.get("vlind").protocol("vlgate"), None),
        ("threshold", vlind_protocols.VLIND[0], {"vote_threshold": 3}),
    ):
        result = vlind_runner(Scripted(), protocol, overrides).run(items, RecordStore(tmp_path / f"{name}.jsonl"), progress=False)
        runs[name] = result.records[0]
    assert {name: record["protocol"] for name, record in runs.items()} == {"default": "vlind-bench-1", "vlgate": "vlgate-1", "threshold": "vlind-bench-1+vote_threshold=3"}
    assert len({record["fingerprint"] for record in runs.values()}) == 3
    metrics = score(validate("vlind", parse_jsonl([json.dumps(runs["default"])])))
    assert (metrics["s_ck"], metrics["s_vp"], metrics["s_cb"], metrics["s_lp"], metrics["n_unanswered"]) == (1.0, 1.0, 1.0, 1.0, 0)


def _suite(tmp_path: Path, entry: dict) -> Suite:
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps({"name": "s", "evaluators": {"vlind": entry}}))  # JSON is YAML
    return Suite.from_file(path)


def test_the_suite_sets_the_inclusion_rules_and_the_protocol_as_run_names_a_changed_one(tmp_path):
    data = str(tmp_path / "release")
    assert _suite(tmp_path, {"data": data}).protocols() == {"vlind": "vlind-bench-1"}
    assert _suite(tmp_path, {"data": data, "vote_threshold": 2, "style": "all"}).protocols() == {"vlind": "vlind-bench-1"}  # the defaults, said aloud
    assert _suite(tmp_path, {"data": data, "vote_threshold": 3, "style": "cartoon"}).protocols() == {"vlind": "vlind-bench-1+style=cartoon+vote_threshold=3"}
    assert _suite(tmp_path, {"data": data, "protocol": "vlgate"}).protocols() == {"vlind": "vlgate-1"}
    with pytest.raises(ConfigError) as refused:
        _suite(tmp_path, {"data": data, "style": "sketch"})
    assert "evaluators.vlind.style" in str(refused.value)


def test_the_suite_sets_the_answer_length_and_the_protocol_as_run_names_it(tmp_path):
    """gpt4o_eval.py lets the API write up to 4096 tokens where instructblip_eval.py stops at
    64: the suite chooses, and a changed limit is another protocol as run."""
    data = str(tmp_path / "release")
    assert _suite(tmp_path, {"data": data, "answer_max_new_tokens": 64}).protocols() == {"vlind": "vlind-bench-1"}  # the default, said aloud
    spec = _suite(tmp_path, {"data": data, "answer_max_new_tokens": 4096}).evaluators["vlind"]
    assert _suite(tmp_path, {"data": data, "answer_max_new_tokens": 4096}).protocols() == {"vlind": "vlind-bench-1+answer=4096"}
    root = release(tmp_path / "release", [instance(3, {"0": 2}, best="0")])
    items, _ = load_items("vlind", settings(root), tmp_path / "out")
    backend = Scripted()
    result = vlind_runner(backend, vlind_protocols.VLIND[0], spec.protocol_overrides()).run(items, RecordStore(tmp_path / "long.jsonl"), progress=False)
    assert {request.max_new_tokens for request in backend.requests} == {4096}
    assert result.records[0]["protocol"] == "vlind-bench-1+answer=4096"


# ---- inclusion: the best image, the vote threshold, the style -------------------------


def test_a_best_image_below_the_vote_threshold_is_asked_about_in_vp_and_cb_but_not_lp(tmp_path):
    # instance 3: best image 0 has one vote (not accepted); images 2 and 5 are accepted
    root = release(tmp_path / "release", [instance(3, {"0": 1, "2": 3, "5": 2}, best="0")])
    (item,), errors = load_items("vlind", settings(root), tmp_path / "out")
    folder = root / "images" / "counterfactual" / "color" / f"3_{CONTEXT}"
    assert not errors and item.best_image == folder / "0.png" and item.counterfactual_images == (folder / "2.png", folder / "5.png")
    backend = Scripted()
    (record,) = vlind_runner(backend).run([item], RecordStore(tmp_path / "r.jsonl"), progress=False).records
    assert len(record["lp"]) == 2 and [shown(r) for r in backend.requests[2:6]] == ["0"] * 4


def test_the_vote_threshold_comes_from_the_suite(tmp_path):
    root = release(tmp_path / "release", [instance(3, {"0": 1, "2": 3, "5": 2}, best="2"), instance(4, {"0": 2, "1": 2}, best="0")])
    folder = root / "images" / "counterfactual" / "color" / f"3_{CONTEXT}"
    # the benchmark's default, 2
    items, errors = load_items("vlind", settings(root), tmp_path / "out")
    assert [item.id for item in items] == ["color-3", "color-4"] and not errors
    assert items[0].counterfactual_images == (folder / "2.png", folder / "5.png")
    # 3: only image 2 of instance 3; instance 4 has no image with 3 votes, an item error naming the field
    items, errors = load_items("vlind", settings(root, vote_threshold=3), tmp_path / "out")
    assert [(item.id, item.counterfactual_images) for item in items] == [("color-3", (folder / "2.png",))]
    assert [(e.item_id, e.field) for e in errors] == [("color-4", "aggregated_human_label_good_images")] and "3 or more votes" in errors[0].message
    # 1: image 0 too
    items, _ = load_items("vlind", settings(root, vote_threshold=1), tmp_path / "out")
    assert items[0].counterfactual_images == (folder / "0.png", folder / "2.png", folder / "5.png")
    # through the suite and the registry (load_items names the entry's rules)
    suite = _suite(tmp_path, {"data": str(root), "vote_threshold": 3})
    items, errors = load_items("vlind", suite.evaluators["vlind"], tmp_path / "out")
    assert [item.id for item in items] == ["color-3"] and [e.item_id for e in errors] == ["color-4"]


def test_the_style_filter_keeps_one_styles_images_and_leaves_out_instances_without_one(tmp_path):
    # ids 0-3 photorealistic, 4-7 illustration, 8-11 cartoon (score_pipeline.py --style)
    root = release(
        tmp_path / "release",
        [instance(3, {"1": 2, "5": 3, "9": 2, "10": 3}, best="1"), instance(4, {"2": 3, "6": 2}, best="2"), instance(5, {"0": 1}, best="0")],
    )
    folder = root / "images" / "counterfactual" / "color" / f"3_{CONTEXT}"
    items, errors = load_items("vlind", settings(root, style="cartoon"), tmp_path / "out")
    # instance 3 keeps its cartoons for LP and its (photorealistic) best image for VP and CB; instance 4 has no
    # cartoon and is left out, not an error; instance 5 has no accepted image at all, an error whatever the style
    assert [(item.id, item.best_image, item.counterfactual_images) for item in items] == [("color-3", folder / "1.png", (folder / "9.png", folder / "10.png"))]
    assert [(e.item_id, e.field) for e in errors] == [("color-5", "aggregated_human_label_good_images")]
    items, _ = load_items("vlind", settings(root, style="illustration"), tmp_path / "out")
    assert [(item.id, len(item.counterfactual_images)) for item in items] == [("color-3", 1), ("color-4", 1)]
    items, _ = load_items("vlind", settings(root), tmp_path / "out")  # all
    assert [(item.id, len(item.counterfactual_images)) for item in items] == [("color-3", 4), ("color-4", 2)]


def test_the_inclusion_rules_are_refused_for_the_local_format(tmp_path):
    local = tmp_path / "items.jsonl"
    image = tmp_path / "x.png"
    Image.new("RGB", (4, 4)).save(image)
    row = {"id": "v1", "concept": "color", "context": CONTEXT, "true_statement": S_CF, "false_statement": S_FACT, "existent_noun": "banana",
           "non_existent_noun": "car", "factual_image": "x.png", "counterfactual_images": ["x.png"]}  # fmt: skip
    local.write_text(json.dumps(row) + "\n")
    (item,), _ = load_items("vlind", VlindSettings(data=local), tmp_path / "out")
    assert item.best_image == item.counterfactual_images[0] == image
    with pytest.raises(ValueError, match="vote_threshold apply to the vlind-bench format only; this vlind data is in the vlgate format"):
        load_items("vlind", VlindSettings(data=local, vote_threshold=3), tmp_path / "out")


# ---- aggregation: a per-concept score over nothing is null ----------------------------


def test_a_per_concept_score_with_nothing_to_average_is_null_where_the_benchmark_prints_0():
    T, F = True, False
    records = [
        # concept x: no instance passes CK, so S_CB (over CK) and S_LP (over CK∧VP∧CB) have nothing to average
        {"id": "a", "concept": "x", "ck": [F, F], "vp": [T, F], "cb": [T, F], "lp": [[T, F]]},
        # concept y: passes CK and VP, fails CB, so S_LP has nothing to average
        {"id": "b", "concept": "y", "ck": [T, F], "vp": [T, F], "cb": [F, F], "lp": [[T, F]]},
        {"id": "c", "concept": "z", "ck": [T, F], "vp": [T, F], "cb": [T, F], "lp": [[T, F], [F, F]]},
    ]
    metrics = score(validate("vlind", parse_jsonl(json.dumps(r) for r in records)))
    by_concept = metrics["by_concept"]
    assert by_concept["x"]["s_ck"] == 0.0 and by_concept["x"]["s_cb"] is None and by_concept["x"]["s_lp"] is None
    assert by_concept["x"]["acc_cb"] == 1.0 and by_concept["x"]["acc_lp"] == 1.0  # raw accuracies are over N
    assert by_concept["y"]["s_cb"] == 0.0 and by_concept["y"]["s_lp"] is None
    assert by_concept["z"]["s_lp"] == pytest.approx(0.5)
    # overall, as score_pipeline.py: s_cb = c_pass / a_pass = 1/2, s_lp = d_pass_macro / bc_pass = 0.5 / 1
    assert metrics["s_cb"] == pytest.approx(0.5) and metrics["s_lp"] == pytest.approx(0.5)
    assert metrics["acc_lp"] == pytest.approx((1 + 1 + 0.5) / 3) and np.isclose(metrics["acc_cb"], 2 / 3)
