"""Runners on the synthetic world's checkpoints: records that pass the contract, resumable
execution keyed by fingerprint, bad images as per-item errors."""

import json
from pathlib import Path

import numpy as np
import pytest

from vlgate.evaluators.backends.transformers_backend import TransformersBackend
from vlgate.evaluators.loaders.items import McItem, NbUnit, VlindItem
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.scoring import validate
from vlgate.evaluators.vl_lcm.runner import lcm_mc_runner, lcm_nb_runner
from vlgate.evaluators.vlind.runner import vlind_runner

pytestmark = pytest.mark.world


def _rows(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def world_items(tiny_world):
    out, _ = tiny_world
    data = out / "data"
    mc = [McItem(r["id"], data / "mc" / r["image"], r["question"], tuple(r["options"]), r["answer"], r["category"]) for r in _rows(data / "mc", "items.jsonl")[:6]]
    nb = [NbUnit(r["id"], tuple(data / "nb" / p for p in r["images"]), tuple(r["statements"]), r["answer"], r["category"], "statement") for r in _rows(data / "nb", "units.jsonl")[:3]]
    vlind = [
        VlindItem(
            r["id"], r["concept"], r["context"], r["true_statement"], r["false_statement"], r["existent_noun"], r["non_existent_noun"],
            data / "vlind" / r["factual_image"], data / "vlind" / r["counterfactual_images"][0], tuple(data / "vlind" / p for p in r["counterfactual_images"]),
        )
        for r in _rows(data / "vlind", "items.jsonl")[:3]
    ]
    return {"mc": mc, "nb": nb, "vlind": vlind}


@pytest.fixture(scope="module")
def vlms(tiny_world):
    out, manifest = tiny_world
    return {steps: TransformersBackend.load(out / path) for steps, path in manifest["checkpoints"]["vlm"].items()}


def _validated(evaluator, records):
    valid = validate(evaluator, parse_jsonl(json.dumps(r) for r in records))
    assert not valid.errors
    return valid


def test_lcm_mc_records_pass_the_contract_and_match_single_requests(vlms, world_items, tmp_path):
    items = world_items["mc"]
    result = lcm_mc_runner(vlms["3"]).run(items, RecordStore(tmp_path / "r.jsonl"), batch_size=4, progress=False)
    assert (result.computed, result.reused, len(result.errors)) == (6, 0, 0)
    _validated("lcm-mc", result.records)
    first = result.records[0]
    assert first["id"] == items[0].id and len(first["p_mc"]) == len(first["p_yes"]) == 4
    assert sum(first["p_mc"]) == pytest.approx(1.0)
    # batching and the shared prefix change nothing: a one-item run gives the same numbers
    alone = lcm_mc_runner(vlms["3"]).run(items[:1], RecordStore(tmp_path / "alone.jsonl"), batch_size=1, progress=False).records[0]
    np.testing.assert_allclose(alone["p_yes"], first["p_yes"], atol=1e-6)
    np.testing.assert_allclose(alone["p_mc"], first["p_mc"], atol=1e-6)


def test_rerun_reuses_records_and_another_model_recomputes(vlms, world_items, tmp_path):
    items, store_path = world_items["mc"], tmp_path / "records.jsonl"
    first = lcm_mc_runner(vlms["3"]).run(items, RecordStore(store_path), batch_size=4, progress=False)
    again = lcm_mc_runner(vlms["3"]).run(items, RecordStore(store_path), batch_size=4, progress=False)
    assert (again.computed, again.reused) == (0, 6) and again.records == first.records
    other = lcm_mc_runner(vlms["0"]).run(items, RecordStore(store_path), batch_size=4, progress=False)
    assert other.computed == 6 and {r["fingerprint"] for r in other.records}.isdisjoint(r["fingerprint"] for r in first.records)


def test_a_run_killed_mid_write_resumes_with_only_the_torn_batch_recomputed(vlms, world_items, tmp_path):
    items, store_path = world_items["mc"], tmp_path / "records.jsonl"
    lcm_mc_runner(vlms["3"]).run(items[:4], RecordStore(store_path), batch_size=2, progress=False)
    # what kill -9 leaves: two complete batches, then half a line of the third
    with open(store_path, "a") as handle:
        handle.write('{"id": "mc-0004", "p_mc": [0.1, ')
    store = RecordStore(store_path)
    assert store.torn_lines == 1 and len(store.by_fingerprint) == 4
    resumed = lcm_mc_runner(vlms["3"]).run(items, store, batch_size=2, progress=False)
    assert (resumed.reused, resumed.computed) == (4, 2)
    lines = store_path.read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["fingerprint"].startswith("fp:") for line in lines)


def test_corrupt_and_missing_images_are_item_errors(vlms, world_items, tmp_path):
    items = list(world_items["mc"][:3])
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    items[1] = McItem("broken", corrupt, "What color is the circle?", ("red", "green", "blue", "yellow"), 0)
    items.append(McItem("gone", tmp_path / "missing.png", "What color is the circle?", ("red", "green", "blue", "yellow"), 0))
    result = lcm_mc_runner(vlms["3"]).run(items, RecordStore(tmp_path / "r.jsonl"), batch_size=2, progress=False)
    assert [r["id"] for r in result.records] == [items[0].id, items[2].id]
    assert [(e.item_id, e.field) for e in result.errors] == [("broken", "image"), ("gone", "image")]
    assert "cannot be read" in result.errors[0].message and "not found" in result.errors[1].message


def test_lcm_nb_records_pass_the_contract(vlms, world_items, tmp_path):
    result = lcm_nb_runner(vlms["3"]).run(world_items["nb"], RecordStore(tmp_path / "nb.jsonl"), batch_size=2, progress=False)
    valid = _validated("lcm-nb", result.records)
    assert len(valid.records) == 3
    for record in result.records:
        for pair in record["p_text"] + record["p_image"]:
            assert sum(pair) == pytest.approx(1.0)


def test_vlind_records_hold_parsed_answers_and_the_generated_text(vlms, world_items, tmp_path):
    items = world_items["vlind"]
    result = vlind_runner(vlms["3"]).run(items, RecordStore(tmp_path / "v.jsonl"), batch_size=2, progress=False)
    _validated("vlind", result.records)
    for item, record in zip(items, result.records):
        assert len(record["lp"]) == len(item.counterfactual_images)
        assert len(record["responses"]["lp"]) == 2 * len(item.counterfactual_images)
        # parsing is the benchmark's: the first exact true/false word, else null
        expected = {"true": True, "false": False}
        first_word = next((w for w in record["responses"]["ck"][0].lower().replace(".", "").split() if w in expected), None)
        assert record["ck"][0] == (expected[first_word] if first_word else None)
