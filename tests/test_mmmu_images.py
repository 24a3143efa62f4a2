"""MMMU's multi-image questions: every image_N a row sets is loaded, in
number order, and which of them a request carries is the protocol's rule, as each released
harness has it:

* ``mmmu``: MMMU-Benchmark/MMMU ``mmmu/utils/data_utils.py::process_single_sample`` gives
  the model ``data['image_1']`` alone (its other branch, for options holding several
  ``<img='path'>`` tags, is a layout the Hub release does not use);
* ``lmms-eval``: EvolvingLMMs-Lab/lmms-eval ``lmms_eval/tasks/mmmu/utils.py::mmmu_doc_to_visual``
  finds ``<image \\d+>`` in ``construct_prompt(doc)`` (question and options), turns each into
  the field name ``image_N``, and keeps ``sorted(set(...))`` of them: each once, in number
  order, not in order of appearance;
* ``vlgate``: every image, in number order.

A single-image item's content hash, fingerprint and record are pinned to what the code gave
before multi-image questions were read, so no cached record is recomputed.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlgate.evaluators import protocols
from vlgate.evaluators.backends.base import BackendInfo, VisionLanguageBackend
from vlgate.evaluators.loaders import load_dataset
from vlgate.evaluators.loaders.items import McItem
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.store import RecordStore, fingerprint, item_digest
from vlgate.evaluators.scoring import validate
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts
from vlgate.evaluators.vl_lcm import protocols as lcm_protocols
from vlgate.evaluators.vl_lcm.runner import lcm_mc_runner

COLOURS = {(200, 0, 0): "red", (0, 200, 0): "green", (0, 0, 200): "blue"}
RED, GREEN, BLUE = (200, 0, 0), (0, 200, 0), (0, 0, 200)


def png(colour) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), colour).save(buffer, "PNG")
    return buffer.getvalue()


class Recorder(VisionLanguageBackend):
    """A stand-in VLM: every option equally likely; remembers which images each request carried (by colour)."""

    info = BackendInfo(name="recorder", model="recorder", digest="sha256:recorder")

    def __init__(self):
        self.sent: list[tuple[str, ...]] = []

    def choice_probs(self, requests):
        self.sent += [tuple(COLOURS[image.getpixel((0, 0))] for image in request.images) for request in requests]
        return [np.full(len(request.options), 1.0 / len(request.options)) for request in requests]

    def generate(self, requests):
        raise AssertionError("not used")


@pytest.fixture
def three(tmp_path):
    """image_1 red, image_2 green, image_3 blue."""
    paths = []
    for n, colour in enumerate((RED, GREEN, BLUE), 1):
        path = tmp_path / "images" / f"q_{n}.png"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(png(colour))
        paths.append(path)
    return paths


def item(paths, question, options=("a", "b")):
    return McItem("validation_Physics_9", paths[0], question, tuple(options), 0, "Physics", tuple(paths[1:]))


def sent_under(protocol_name, mc_item, tmp_path):
    protocol = protocols.choose(lcm_protocols.LCM_MC, "lcm-mc", protocol_name)
    vlm = Recorder()
    result = lcm_mc_runner(vlm, protocol).run([mc_item], RecordStore(tmp_path / f"{protocol_name}-{item_digest(mc_item)[:12]}.jsonl"), progress=False)
    assert not result.errors and len(vlm.sent) == len(mc_item.options) + 1
    assert len(set(vlm.sent)) == 1, vlm.sent  # the MC prompt and every yes/no probe carry the same images
    return vlm.sent[0]


# ---- loading ----


def test_a_json_row_with_three_images_keeps_them_all_in_number_order(tmp_path, three):
    rows = [
        {"id": "validation_Physics_9", "question": "Compare <image 1>, <image 2> and <image 3>.", "options": "['a', 'b']", "answer": "A",
         "image_3": "images/q_3.png", "image_1": "images/q_1.png", "image_2": "images/q_2.png", "image_4": None, "image_5": ""},
        {"id": "gap", "question": "Q <image 1> <image 3>", "options": "['a', 'b']", "answer": "A", "image_1": "images/q_1.png", "image_3": "images/q_3.png"},
        {"id": "both", "question": "Q", "options": "['a', 'b']", "answer": "A", "image": "images/q_1.png", "image_1": "images/q_2.png"},
        {"id": "missing_2", "question": "Q", "options": "['a', 'b']", "answer": "A", "image_1": "images/q_1.png", "image_2": "images/nowhere.png"},
    ]  # fmt: skip
    (tmp_path / "mmmu.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    dataset = load_dataset("lcm-mc", tmp_path / "mmmu.jsonl", "mmmu")
    assert dataset.items == [McItem("validation_Physics_9", three[0], "Compare <image 1>, <image 2> and <image 3>.", ("a", "b"), 0, "Physics", (three[1], three[2]))]
    assert dataset.items[0].images == tuple(three)
    assert [(error.item_id, error.field) for error in dataset.errors] == [("gap", "image_2"), ("both", "image_1"), ("missing_2", "image_2")]
    assert "without a gap" in dataset.errors[0].message and "not found" in dataset.errors[2].message


def test_a_parquet_row_with_images_embedded_keeps_them_all_in_number_order(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(home))
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("id", pa.string()), ("question", pa.string()), ("options", pa.string()), ("answer", pa.string()), ("question_type", pa.string())] + [(f"image_{n}", image) for n in range(1, 8)])
    rows = [
        {"id": "validation_Art_1", "question": "<image 2> or <image 1>?", "options": "['x', 'y']", "answer": "B", "question_type": "multiple-choice",
         "image_1": {"bytes": png(BLUE), "path": "a.png"}, "image_2": {"bytes": png(RED), "path": "b.png"}, "image_3": {"bytes": png(GREEN), "path": "c.png"}},
        {"id": "validation_Art_2", "question": "<image 1> <image 2>", "options": "['x', 'y']", "answer": "A", "question_type": "multiple-choice",
         "image_1": {"bytes": png(RED), "path": "a.png"}, "image_2": {"bytes": b"\x89PNG and nothing more", "path": "b.png"}},
    ]  # fmt: skip
    path = tmp_path / "MMMU" / "Art" / "validation-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema), path)
    dataset = load_dataset("lcm-mc", path, "mmmu")
    [loaded] = dataset.items
    assert (loaded.id, loaded.answer, loaded.category, len(loaded.images)) == ("validation_Art_1", 1, "Art", 3)
    colours = []
    for image_path in loaded.images:
        with Image.open(image_path) as opened:
            colours.append(COLOURS[opened.convert("RGB").getpixel((0, 0))])
    assert colours == ["blue", "red", "green"]  # image_1, image_2, image_3 as the row has them
    assert [(error.item_id, error.field) for error in dataset.errors] == [("validation_Art_2", "image_2")]


# ---- which images a request carries ----


def test_mmmu_sends_image_1_alone(tmp_path, three):
    assert sent_under("mmmu", item(three, "Compare <image 2> with <image 3>."), tmp_path) == ("red",)


@pytest.mark.parametrize(
    "question, options, expected",
    [
        # mmmu_doc_to_visual: sorted(set(["image_3", "image_1"])) == ["image_1", "image_3"]: number order, not appearance
        ("Is <image 3> a copy of <image 1>?", ("yes", "no"), ("red", "blue")),
        # an option's placeholder counts (construct_prompt's text holds the options); a repeat counts once; image_2 is not named
        ("Which one matches <image 1>? And <image 1> again.", ("<image 3>", "a square"), ("red", "blue")),
        ("Which one is <image 2>?", ("<image 2>", "<image 2> rotated"), ("green",)),
        # names none of its images: all of them (mmmu_doc_to_visual would send none: a listed difference)
        ("Which one is larger?", ("left", "right"), ("red", "green", "blue")),
        # <image 5> is not in the row: passed over (mmmu_doc_to_visual would fail on doc["image_5"] = None)
        ("<image 5> or <image 2>?", ("a", "b"), ("green",)),
    ],
)
def test_lmms_eval_sends_the_images_named_each_once_in_number_order(tmp_path, three, question, options, expected):
    assert sent_under("lmms-eval", item(three, question, options), tmp_path) == expected
    assert lcm_prompts.mmmu_lmms_eval_images(question, options, 3) == tuple(["red", "green", "blue"].index(colour) for colour in expected)


def test_vlgate_sends_every_image_in_number_order(tmp_path, three):
    assert sent_under("vlgate", item(three, "<image 3> then <image 1>"), tmp_path) == ("red", "green", "blue")


@pytest.mark.parametrize("protocol", [p.name for p in lcm_protocols.LCM_MC])
def test_a_single_image_item_carries_its_image_under_every_protocol(tmp_path, three, protocol):
    assert sent_under(protocol, McItem("q", three[1], "What is <image 2>?", ("a", "b"), 0), tmp_path) == ("green",)
    assert sent_under(protocol, McItem("q", three[2], "No placeholder.", ("a", "b"), 0), tmp_path) == ("blue",)


def test_a_bad_further_image_is_an_item_error_only_where_the_protocol_sends_it(tmp_path, three):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    mc_item = item([three[0], broken], "Compare <image 1> and <image 2>.")
    for name, errors in (("mmmu", []), ("lmms-eval", [("validation_Physics_9", "image_2")]), ("vlgate", [("validation_Physics_9", "image_2")])):
        protocol = protocols.choose(lcm_protocols.LCM_MC, "lcm-mc", name)
        result = lcm_mc_runner(Recorder(), protocol).run([mc_item], RecordStore(tmp_path / f"{name}.jsonl"), progress=False)
        assert [(error.item_id, error.field) for error in result.errors] == errors, name


# ---- what a single-image item had before stays as it was ----

#: a 2×2 PNG of (200, 30, 40), and what the code gave for this item before more_images existed
PINNED_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000002000000020802000000fdd49a730000001649444154789c633c21a7c1c0c0c0c4c0c0c0c0c000000d720112397285f20000000049454e44ae426082"
)
PINNED_DIGEST = "2c72c165c23cfb722b48d0aebb6a2747dfd7e5b1516a2f81055e2d6514712263"
PINNED_RECORD_FINGERPRINTS = {"mmmu": "fp:4b0712594f73d6fcab9e03ee087a451d", "lmms-eval": "fp:0578b9ccf297a531c979745f0b433592", "vlgate": "fp:c6626adff015cec3f98879b76cb95fdb"}


def _pinned_item(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(PINNED_PNG)
    return McItem("validation_Art_1", path, "<image 1> Which colour dominates?", ("red", "green", "blue"), 0, "Art")


def test_a_single_image_items_digest_and_fingerprint_are_unchanged(tmp_path):
    single = _pinned_item(tmp_path)
    assert item_digest(single) == PINNED_DIGEST
    assert fingerprint({"vlm": "vlm:abc"}, "lcm-mc", "mmmu-1", single) == "fp:cd577cce803dea2d6f6d98b3e9f4dd90"
    assert fingerprint({"vlm": "vlm:abc"}, "lcm-mc", "vlgate-1", single) == "fp:c0907172a8956ee4876ac713c2fd4656"
    # a second image is content: it changes the digest
    other = tmp_path / "b.png"
    other.write_bytes(png(GREEN))
    assert item_digest(McItem(single.id, single.image, single.question, single.options, 0, "Art", (other,))) != PINNED_DIGEST


@pytest.mark.parametrize("protocol", [p.name for p in lcm_protocols.LCM_MC])
def test_a_single_image_items_record_is_unchanged(tmp_path, protocol):
    single = _pinned_item(tmp_path)
    chosen = protocols.choose(lcm_protocols.LCM_MC, "lcm-mc", protocol)
    record = lcm_mc_runner(_Uniform(), chosen).run([single], RecordStore(tmp_path / "r.jsonl"), progress=False).records[0]
    third = 1.0 / 3
    assert record == {
        "id": "validation_Art_1", "p_mc": [third, third, third], "p_yes": [0.5, 0.5, 0.5], "answer": 0, "category": "Art",
        "question": "<image 1> Which colour dominates?", "options": ["red", "green", "blue"], "image": str(tmp_path / "a.png"),
        "protocol": f"{protocol}-1", "fingerprint": PINNED_RECORD_FINGERPRINTS[protocol],
    }  # fmt: skip


class _Uniform(Recorder):
    """The digest the pinned records were computed with (tests/test_protocols.py's Uniform)."""

    info = BackendInfo(name="uniform", model="uniform", digest="sha256:uniform")

    def choice_probs(self, requests):
        return [np.full(len(request.options), 1.0 / len(request.options)) for request in requests]


def test_a_multi_image_items_record_names_all_its_images(tmp_path, three):
    record = lcm_mc_runner(Recorder(), lcm_protocols.LCM_MC[0]).run([item(three, "<image 1>")], RecordStore(tmp_path / "r.jsonl"), progress=False).records[0]
    assert record["image"] == str(three[0]) and record["images"] == [str(path) for path in three]
    assert validate("lcm-mc", parse_jsonl([json.dumps(record)]))  # the set's schema takes the extra field
