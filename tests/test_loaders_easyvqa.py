"""The easy-vqa loader format on the real installed easy-VQA package (PyPI ``easy-vqa`` 1.0):
its test split item by item against the package's own API, hand-checked first rows, the
yes/no questions and their unlabelled pairing, per-row errors and auto-detection."""

import json
import shutil
from collections import Counter
from pathlib import Path

import easy_vqa
import pytest

from vlgate.evaluators.loaders import McItem, YesNoItem, load_dataset
from vlgate.evaluators.loaders.easyvqa import COLORS, OPTIONS, SHAPES, package_split
from vlgate.evaluators.vl_lcm.runner import LcmNbSettings, load_nb_units

TEST = package_split("test")


@pytest.fixture(scope="module")
def package_test():
    """The package's test split through its own API: (questions, answers, image ids, image paths)."""
    questions, answers, image_ids = easy_vqa.get_test_questions()
    return questions, answers, image_ids, easy_vqa.get_test_image_paths()


@pytest.fixture(scope="module")
def mc():
    return load_dataset("lcm-mc", TEST, "easy-vqa")


@pytest.fixture(scope="module")
def yes_no():
    return load_dataset("yes-no", TEST, "easy-vqa")


def answer_type(answer):
    """The type of a question from its answer alone (independent of the loader's rule, which reads the question)."""
    return "yes_no" if answer in ("yes", "no") else "shape" if answer in ("rectangle", "circle", "triangle") else "color"


def test_package_split_is_the_installed_data():
    assert TEST == Path(easy_vqa.__file__).parent / "data" / "test"
    assert (TEST / "questions.json").is_file() and (TEST / "images" / "0.png").is_file()
    assert package_split("train").name == "train"
    with pytest.raises(ValueError, match="'test' and 'train', not 'val'"):
        package_split("val")


def test_option_sets_are_the_packages_answers():
    assert sorted(answer for options in OPTIONS.values() for answer in options) == sorted(easy_vqa.get_answers())
    assert OPTIONS == {
        "shape": ("rectangle", "circle", "triangle"),
        "color": ("black", "gray", "red", "green", "blue", "yellow", "teal", "brown"),
        "yes_no": ("yes", "no"),
    }


def test_mc_test_split_counts_per_type(mc, package_test):
    questions, answers, _, _ = package_test
    assert (len(mc.items), mc.errors) == (len(questions), [])
    expected = Counter(answer_type(answer) for answer in answers)
    assert Counter(item.category for item in mc.items) == expected
    # as the package ships them (its README: 9,673 test questions, 7,136 of them yes/no)
    assert expected == {"yes_no": 7136, "color": 1280, "shape": 1257}
    assert mc.source == str(TEST / "questions.json")


def test_mc_items_match_the_packages_api_question_by_question(mc, package_test):
    questions, answers, image_ids, image_paths = package_test
    for index, (item, question, answer, image_id) in enumerate(zip(mc.items, questions, answers, image_ids)):
        assert (item.id, item.question, item.options[item.answer], item.image) == (f"test-{index}", question, answer, Path(image_paths[image_id]))
        assert item.options == OPTIONS[item.category] and item.more_images == ()
    assert all(item.image.is_file() for item in mc.items)
    assert len({item.image for item in mc.items}) == len(image_paths) == 1000


def test_first_mc_items_by_hand(mc):
    images = TEST / "images"
    assert mc.items[:4] == [
        McItem("test-0", images / "0.png", "what is the red shape?", SHAPES, 2, "shape"),
        McItem("test-1", images / "0.png", "what is the color of the triangle?", COLORS, 2, "color"),
        McItem("test-2", images / "0.png", "what is the color of the shape?", COLORS, 2, "color"),
        McItem("test-3", images / "0.png", "does the image contain a circle?", ("yes", "no"), 1, "yes_no"),
    ]
    assert (mc.items[2].options[2], mc.items[3].options[1]) == ("red", "no")
    last = mc.items[-1]
    assert (last.id, last.image.name) == ("test-9672", "999.png")


def test_yes_no_items_are_the_yes_no_questions(yes_no, package_test):
    questions, answers, image_ids, image_paths = package_test
    expected = [(f"test-{n}", q, a, Path(image_paths[i])) for n, (q, a, i) in enumerate(zip(questions, answers, image_ids)) if a in ("yes", "no")]
    assert [(item.id, item.question, item.answer, item.image) for item in yes_no.items] == expected
    assert (len(yes_no.items), yes_no.errors) == (7136, [])
    assert Counter(item.answer for item in yes_no.items) == {"yes": 3611, "no": 3525}
    assert yes_no.items[:2] == [
        YesNoItem("test-3", TEST / "images" / "0.png", "does the image contain a circle?", "no", "shape"),
        YesNoItem("test-4", TEST / "images" / "0.png", "is there not a black shape in the image?", "yes", "color"),
    ]
    assert Counter(item.category for item in yes_no.items) == {"color": 5201, "shape": 1935}


def test_yes_no_questions_pair_into_unlabelled_lcm_nb_units(tmp_path):
    units, errors = load_nb_units(LcmNbSettings(data=TEST, format="easy-vqa", pair_seed=0), tmp_path)
    pairing = json.loads((tmp_path / "lcm-nb" / "pairing.json").read_text())
    assert (len(units), errors, len(pairing["pairs"]), pairing["unpaired"]) == (3568, [], 3568, [])
    assert all(unit.answer is None and unit.images[0] != unit.images[1] for unit in units)
    assert sorted(i for unit in units for i in unit.id.split("+")) == sorted(item.id for item in load_dataset("yes-no", TEST).items)


def package_like(folder, rows, images=(0, 1)):
    """A folder laid out like the package's split: questions.json beside images/ID.png (copied from the test split)."""
    (folder / "images").mkdir(parents=True)
    for image_id in images:
        shutil.copy(TEST / "images" / f"{image_id}.png", folder / "images" / f"{image_id}.png")
    (folder / "questions.json").write_text(json.dumps(rows))
    return folder


def test_bad_rows_are_item_errors_naming_the_field(tmp_path):
    folder = package_like(
        tmp_path / "mine",
        [
            ["what color is the shape?", "red", 0],
            ["what color is the shape?", "purple", 0],  # no easy-VQA colour
            ["what shape is present?", "red", 1],  # a colour answering a shape question
            ["how big is the shape?", "small", 0],  # no easy-VQA question form
            ["is there a circle?", "yes", 7],  # no such image
            ["is there a circle?", "no", "1"],  # image id as a string
            ["is there a circle?", "no"],  # a list of two
            {"question": "is there a circle?", "answer": "no", "image_id": 0},  # an object among lists
            ["is there a circle?", "maybe", 1],
            ["", "no", 1],
            ["what shape is present?", None, 1],  # unlabelled
            ["is there a triangle?", "yes", 2],  # a truncated image
        ],
        images=(0, 1, 2),
    )
    truncated = folder / "images" / "2.png"
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = folder / "questions.json"
    for evaluator, kept in (("lcm-mc", ["mine-0", "mine-10"]), ("yes-no", [])):
        dataset = load_dataset(evaluator, folder, "easy-vqa")
        assert [item.id for item in dataset.items] == kept
        found = {(e.item_id, e.field): e for e in dataset.errors}
        expected = {("mine-4", "image_id"), ("mine-5", "image_id"), ("mine-6", None), ("mine-7", None), ("mine-8", "answer"), ("mine-9", "question"), ("mine-11", "image_id")}
        if evaluator == "lcm-mc":
            expected |= {("mine-1", "answer"), ("mine-2", "answer"), ("mine-3", "question")}
        else:  # shape and colour questions are no yes/no items, not errors; an unknown form still is
            expected |= {("mine-3", "question")}
        assert set(found) == expected
        assert found["mine-4", "image_id"].source == f"{data}[4]"
        assert found["mine-4", "image_id"].message == f"image file not found: {folder / 'images' / '7.png'}"
        assert found["mine-5", "image_id"].message == "expected a non-negative integer, got '1'"
        assert found["mine-6", None].message == "expected a [question, answer, image_id] list, got a list of 2"
        assert found["mine-7", None].message == "expected a [question, answer, image_id] list, got dict"
        assert found["mine-8", "answer"].message == "'maybe' is not an answer to a yes_no question (one of yes, no)"
        assert "cannot be read" in found["mine-11", "image_id"].message
        assert str(found["mine-3", "question"]).endswith("(id 'mine-3'), field 'question': not one of easy-VQA's question forms (what color/shape ..., is/does ...): 'how big is the shape?'")
    mc = load_dataset("lcm-mc", data, "easy-vqa")
    assert mc.items == [
        McItem("mine-0", folder / "images" / "0.png", "what color is the shape?", COLORS, 2, "color"),
        McItem("mine-10", folder / "images" / "1.png", "what shape is present?", SHAPES, None, "shape"),
    ]
    assert {(e.item_id, e.field): e.message for e in mc.errors}["mine-2", "answer"] == "'red' is not an answer to a shape question (one of rectangle, circle, triangle)"


def test_auto_detection_and_object_rows(tmp_path, mc, yes_no):
    assert load_dataset("lcm-mc", TEST).items == mc.items
    assert load_dataset("yes-no", TEST / "questions.json").items == yes_no.items
    # rows as objects (JSON Lines, ids as written) are the same format
    folder = package_like(tmp_path / "objects", [])
    (folder / "questions.json").unlink()
    rows = [{"id": "a", "question": "what shape is in the image?", "answer": "circle", "image_id": 1}, {"id": "b", "question": "is a red shape present?", "answer": "no", "image_id": 0}]
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert load_dataset("lcm-mc", folder).items == [
        McItem("a", folder / "images" / "1.png", "what shape is in the image?", SHAPES, 1, "shape"),
        McItem("b", folder / "images" / "0.png", "is a red shape present?", ("yes", "no"), 1, "yes_no"),
    ]
    assert load_dataset("yes-no", folder, "easy-vqa").items == [YesNoItem("b", folder / "images" / "0.png", "is a red shape present?", "no", "color")]


@pytest.mark.parametrize(
    "args, message",
    [
        (("lcm-mc", TEST.parent), r"no \.jsonl or \.json data file for lcm-mc \(its sub-folders test, train hold one: point at one of them\)"),
        (("decc", TEST, "easy-vqa"), "format 'easy-vqa' does not apply to evaluator 'decc'"),
    ],
)
def test_the_package_data_folder_and_other_evaluators_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        load_dataset(*args)
