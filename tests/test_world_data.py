"""Synthetic world data: rendered ground truth, formats, determinism."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vlgate.evaluators.scenes.scene import COLORS, Scene, Shape, cell_center, render
from vlgate.evaluators.world.datasets import SIZES, build_datasets


def read(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("world")
    return out, build_datasets(out, "small", seed=0)


def test_render_draws_each_shape_in_its_colour():
    scene = Scene((Shape("circle", "red", 0), Shape("triangle", "blue", 4), Shape("square", "green", 8)))
    image = render(scene, 96)
    for shape in scene.shapes:
        assert image.getpixel(cell_center(shape.cell, 96)) == COLORS[shape.color]
    assert image.getpixel((0, 0)) == (255, 255, 255)


def test_same_seed_same_bytes_other_seed_differs(tmp_path, world):
    out, _ = world
    again = build_datasets(tmp_path / "again", "small", seed=0)
    digest = lambda root: hashlib.sha256(b"".join(p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file())).hexdigest()
    assert digest(out) == digest(tmp_path / "again")
    build_datasets(tmp_path / "other", "small", seed=1)
    assert read(again["mc"]) != read(tmp_path / "other" / "mc" / "items.jsonl")


def test_sizes_and_formats(world):
    out, paths = world
    small = SIZES["small"]
    mc = read(paths["mc"])
    assert len(mc) == small.mc and {r["category"] for r in mc} == {"color", "shape", "count"}
    for r in mc:
        assert len(r["options"]) == 4 and len(set(r["options"])) == 4 and 0 <= r["answer"] < 4
        assert (out / "mc" / r["image"]).is_file()
    yesno = read(paths["yesno"])
    assert sum(r["answer"] == "yes" for r in yesno) == len(yesno) // 2  # balanced
    nb = read(paths["nb"])
    assert len(nb) == small.nb and {r["answer"] for r in nb} == {"c1", "c2"}
    vlind = read(paths["vlind"])
    assert len(vlind) == small.vlind and {r["concept"] for r in vlind} == {"color", "shape"}
    assert all(1 <= len(r["counterfactual_images"]) <= 3 for r in vlind)
    decc = read(paths["decc"])
    assert all(r["answer"] == ("yes" if int(r["sub_answers"][0]) > int(r["sub_answers"][1]) else "no") for r in decc)
    categories = sorted(p.name for p in paths["genception"].iterdir())
    assert categories == ["landscape", "multi", "single"]
    assert all(len(list((paths["genception"] / c).glob("*.png"))) == small.genception_per_category for c in categories)


def test_mc_answers_are_what_the_image_shows(world):
    out, paths = world
    for r in read(paths["mc"]):
        if r["category"] != "color":
            continue
        image = Image.open(out / "mc" / r["image"]).convert("RGB")
        colours = {COLORS[c] for c in COLORS}
        pixels = {image.getpixel((x, y)) for x in range(0, 64, 2) for y in range(0, 64, 2)} & colours
        assert pixels == {COLORS[r["options"][r["answer"]]]}, r["id"]


def test_nb_statements_alternate_across_images(world):
    out, paths = world
    for r in read(paths["nb"]):
        v1, v2 = (np.asarray(Image.open(out / "nb" / p)) for p in r["images"])
        assert not np.array_equal(v1, v2)
        # under c1 statement 1 names V1's attribute; under c2 statement 2 does
        first = r["statements"][0 if r["answer"] == "c1" else 1]
        second = r["statements"][1 if r["answer"] == "c1" else 0]
        assert first != second and first.startswith("There is a ")


def test_vlind_counterfactual_differs_from_fact(world):
    out, paths = world
    for r in read(paths["vlind"]):
        fact = np.asarray(Image.open(out / "vlind" / r["factual_image"]))
        for cf in r["counterfactual_images"]:
            assert not np.array_equal(fact, np.asarray(Image.open(out / "vlind" / cf)))
        assert r["true_statement"] != r["false_statement"]
        assert r["existent_noun"] in r["context"] and r["non_existent_noun"] not in r["context"]
