"""Data loaders: the local format on the synthetic world, each public layout field by
field, per-item errors, auto-detection, seeded pairing and NatConBench units."""

import json
import random
import shutil
from pathlib import Path

import pytest
from PIL import Image

from vlgate.evaluators.loaders import (
    ConBenchItem,
    ItemLoadError,
    McItem,
    NbUnit,
    Pairing,
    YesNoItem,
    load_dataset,
    natconbench_units,
    open_image,
    pair_unlabelled,
    units_from_pairing,
)
from vlgate.evaluators.loaders.common import FieldProblem
from vlgate.evaluators.loaders.naturalbench import answer_from_pattern
from vlgate.evaluators.world.datasets import build_datasets


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def write_image(path, colour=(200, 30, 30), size=8):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (size, size), colour).save(path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("world")
    build_datasets(out, "small", 0)
    return out


# ---- the local format, on the synthetic world ----


@pytest.mark.parametrize("evaluator, count", [("lcm-mc", 48), ("lcm-nb", 48), ("vlind", 36), ("decc", 48), ("genception", 24), ("yes-no", 48)])
def test_world_loads_every_item(world, evaluator, count):
    dataset = load_dataset(evaluator, world)  # the world's root stands for its sub-folder
    assert (len(dataset.items), dataset.errors, dataset.evaluator) == (count, [], evaluator)


def test_world_mc_items_match_their_rows(world):
    dataset = load_dataset("lcm-mc", world / "mc", "vlgate")
    rows = read_jsonl(world / "mc" / "items.jsonl")
    assert dataset.source == str(world / "mc" / "items.jsonl")
    for item, row in zip(dataset.items, rows):
        assert item == McItem(row["id"], world / "mc" / row["image"], row["question"], tuple(row["options"]), row["answer"], row["category"])
    colour = next(item for item in dataset.items if item.category == "color")
    assert colour.options == ("red", "green", "blue", "yellow") and colour.question.startswith("What color is the ")
    assert {item.category for item in dataset.items} == {"color", "shape", "count"}


def test_world_nb_units_are_statements(world):
    units = load_dataset("lcm-nb", world / "nb" / "units.jsonl").items
    rows = read_jsonl(world / "nb" / "units.jsonl")
    for unit, row in zip(units, rows):
        assert unit == NbUnit(row["id"], tuple(world / "nb" / p for p in row["images"]), tuple(row["statements"]), row["answer"], row["category"], "statement")
    assert {unit.answer for unit in units} == {"c1", "c2"}
    assert units[0].texts[0].startswith("There is a ")


def test_world_vlind_decc_and_genception_fields(world):
    vlind = load_dataset("vlind", world / "vlind").items
    for item, row in zip(vlind, read_jsonl(world / "vlind" / "items.jsonl")):
        assert (item.id, item.concept, item.true_statement, item.false_statement, item.non_existent_noun) == (
            row["id"], row["concept"], row["true_statement"], row["false_statement"], row["non_existent_noun"],
        )  # fmt: skip
        assert item.factual_image == world / "vlind" / row["factual_image"]
        assert item.counterfactual_images == tuple(world / "vlind" / p for p in row["counterfactual_images"])
        assert item.best_image == item.counterfactual_images[0]  # the local format's best image is its first
    decc = load_dataset("decc", world / "decc").items
    first, row = decc[0], read_jsonl(world / "decc" / "items.jsonl")[0]
    assert (first.options, first.answer, first.sub_questions) == (("yes", "no"), row["answer"], tuple(row["sub_questions"]))
    assert first.answer in ("yes", "no") and first.sub_questions[0].startswith("How many ")
    genception = load_dataset("genception", world / "genception").items
    by_category = {c: [item.id for item in genception if item.category == c] for c in ("landscape", "multi", "single")}
    assert {c: len(ids) for c, ids in by_category.items()} == {"landscape": 8, "multi": 8, "single": 8}
    assert by_category["single"][0] == "single/single-0000"
    assert genception[0].image == world / "genception" / "landscape" / "landscape-0000.png"


def test_bad_items_are_reported_and_the_rest_load(tmp_path):
    build_datasets(tmp_path, "small", 0)
    mc = tmp_path / "mc"
    truncated = mc / "images" / "mc-0003.png"
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])  # header intact, data cut
    (mc / "images" / "mc-0007.png").write_bytes(b"this is not a PNG at all")
    (mc / "images" / "mc-0005.png").unlink()
    rows = read_jsonl(mc / "items.jsonl")
    del rows[10]["question"]
    rows[11]["answer"] = 7
    write_jsonl(mc / "items.jsonl", rows + ["{not json", json.dumps(rows[0])])
    dataset = load_dataset("lcm-mc", mc)
    assert len(dataset.items) == 48 - 5
    found = {(e.item_id, e.field): e for e in dataset.errors}
    assert sorted(found, key=str) == sorted(
        [("mc-0003", "image"), ("mc-0005", "image"), ("mc-0007", "image"), ("mc-0010", "question"), ("mc-0011", "answer"), (None, None), ("mc-0000", "id")], key=str
    )
    assert found["mc-0003", "image"].source == f"{mc / 'items.jsonl'}:4"
    assert "cannot be read" in found["mc-0003", "image"].message and "Truncated" in found["mc-0003", "image"].message
    assert "cannot be read" in found["mc-0007", "image"].message
    assert found["mc-0005", "image"].message == f"image file not found: {mc / 'images' / 'mc-0005.png'}"
    assert found[None, None].source.endswith("items.jsonl:49") and "not valid JSON" in found[None, None].message
    assert "duplicate id (first at" in found["mc-0000", "id"].message
    assert str(found["mc-0010", "question"]).endswith("(id 'mc-0010'), field 'question': missing")

    # without verification only existence is checked; the runner's open_image reports the rest
    unverified = load_dataset("lcm-mc", mc, verify_images=False)
    assert len(unverified.items) == 45
    broken = next(item for item in unverified.items if item.id == "mc-0003")
    with pytest.raises(ItemLoadError) as caught:
        open_image(broken.image, broken.id, "image")
    assert (caught.value.error.item_id, caught.value.error.field) == ("mc-0003", "image")


def test_bad_nb_and_vlind_images_name_the_list_entry(tmp_path):
    build_datasets(tmp_path, "small", 0)
    (tmp_path / "nb" / "images" / "nb-0002-v2.png").unlink()
    (tmp_path / "vlind" / "images" / "vlind-0001-cf0.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    nb = load_dataset("lcm-nb", tmp_path)
    assert len(nb.items) == 47 and [(e.item_id, e.field) for e in nb.errors] == [("nb-0002", "images[1]")]
    vlind = load_dataset("vlind", tmp_path)
    assert len(vlind.items) == 35 and [(e.item_id, e.field) for e in vlind.errors] == [("vlind-0001", "counterfactual_images[0]")]
    genception_image = tmp_path / "genception" / "multi" / "multi-0002.png"
    genception_image.write_bytes(genception_image.read_bytes()[:60])
    genception = load_dataset("genception", tmp_path / "genception", "mme")
    assert len(genception.items) == 23
    assert [(e.source, e.item_id, e.field) for e in genception.errors] == [(str(genception_image), "multi/multi-0002", "image")]


# ---- public layouts ----


def test_mmmu_rows(tmp_path):
    for name in ("q1.png", "q2.png", "q3a.png", "q3b.png", "q5.png", "q6.png"):
        write_image(tmp_path / "images" / name)
    rows = [
        {"id": "validation_Physics_1", "question": "<image 1> What is the net force on the block?", "options": "['2 N', '4 N', '6 N', '8 N']",
         "answer": "B", "image_1": "images/q1.png", "image_2": None, "subfield": "Mechanics"},
        {"id": "validation_Art_Theory_12", "question": "Refer to <image 1> , which style is it?", "options": ["Baroque", "Cubism"],
         "answer": "?", "image": "images/q2.png"},
        {"id": "q3", "question": "Compare <image 1> and <image 2>.", "options": ["same", "different"], "answer": "A",
         "image_1": "images/q3a.png", "image_2": "images/q3b.png"},
        {"id": "q4", "question": "What is shown?", "options": ["a", "b"], "answer": "A"},
        {"id": "q5", "question": "Open question <image 1>", "options": "[]", "answer": "42", "image_1": "images/q5.png"},
        {"id": "q6", "question": "Pick one", "options": ["a", "b", "c"], "answer": "D", "image": "images/q6.png", "category": "misc"},
    ]  # fmt: skip
    dataset = load_dataset("lcm-mc", write_jsonl(tmp_path / "mmmu_validation.jsonl", rows), "mmmu")
    assert dataset.items == [
        # the question as written, placeholders included: the released harnesses ask it so
        # the category is MMMU's breakdown, the subject (of the id), before the finer subfield
        McItem("validation_Physics_1", tmp_path / "images" / "q1.png", "<image 1> What is the net force on the block?", ("2 N", "4 N", "6 N", "8 N"), 1, "Physics"),
        McItem("validation_Art_Theory_12", tmp_path / "images" / "q2.png", "Refer to <image 1> , which style is it?", ("Baroque", "Cubism"), None, "Art_Theory"),
        # a multi-image question keeps every image, in number order (tests/test_mmmu_images.py)
        McItem("q3", tmp_path / "images" / "q3a.png", "Compare <image 1> and <image 2>.", ("same", "different"), 0, None, (tmp_path / "images" / "q3b.png",)),
    ]
    errors = {e.item_id: e for e in dataset.errors}
    assert (errors["q4"].field, errors["q5"].field, errors["q6"].field) == ("image_1", "options", "answer")
    assert "no image" in errors["q4"].message and "open questions" in errors["q5"].message
    assert errors["q4"].source == f"{tmp_path / 'mmmu_validation.jsonl'}:4"
    # the same rows as a JSON list load the same way (auto-detected), errors named by list index
    (tmp_path / "mmmu_validation.jsonl").unlink()
    (tmp_path / "mmmu.json").write_text(json.dumps(rows))
    again = load_dataset("lcm-mc", tmp_path)
    assert again.items == dataset.items and {e.source for e in again.errors if e.item_id == "q4"} == {f"{tmp_path / 'mmmu.json'}[3]"}


# (Image_0_Question_0, Image_0_Question_1, Image_1_Question_0, Image_1_Question_1) → answer, by hand:
# c1: V1 says yes to T1 and no to T2, V2 the opposite; c2: V1 says yes to T2, V2 yes to T1.
@pytest.mark.parametrize(
    "answers, expected",
    [
        (("Yes", "No", "No", "Yes"), "c1"),
        (("No", "Yes", "Yes", "No"), "c2"),
        (("yes", "no ", "NO", "Yes"), "c1"),
        ((None, None, None, None), None),
        (("", "", "", ""), None),
    ],
)
def test_naturalbench_answer_pattern(answers, expected):
    names = ("Image_0_Question_0", "Image_0_Question_1", "Image_1_Question_0", "Image_1_Question_1")
    assert answer_from_pattern(dict(zip(names, answers))) == expected


@pytest.mark.parametrize(
    "answers, field",
    [
        (("Yes", "Yes", "Yes", "Yes"), "Image_*_Question_*"),
        (("Yes", "No", "Yes", "No"), "Image_*_Question_*"),  # V1 and V2 agree: no adversarial pair
        (("Yes", "No", "No", "Maybe"), "Image_1_Question_1"),
        (("Yes", None, "No", "Yes"), "Image_0_Question_1"),
    ],
)
def test_naturalbench_invalid_pattern(answers, field):
    names = ("Image_0_Question_0", "Image_0_Question_1", "Image_1_Question_0", "Image_1_Question_1")
    with pytest.raises(FieldProblem) as caught:
        answer_from_pattern(dict(zip(names, answers)))
    assert caught.value.field == field


def test_naturalbench_rows(tmp_path):
    for n in range(4):
        write_image(tmp_path / "images" / f"{n}_0.jpg", (10, 10, 10)), write_image(tmp_path / "images" / f"{n}_1.jpg", (250, 250, 250))

    def row(index, answers, kind="yes_no"):
        return {"Index": index, "Source": "x", "Question_Type": kind, "Image_0": f"images/{index}_0.jpg", "Image_1": f"images/{index}_1.jpg",
                "Question_0": "Is it dark?", "Question_1": "Is it bright?",
                **dict(zip(("Image_0_Question_0", "Image_0_Question_1", "Image_1_Question_0", "Image_1_Question_1"), answers))}  # fmt: skip

    rows = [row(0, ("Yes", "No", "No", "Yes")), row(1, ("No", "Yes", "Yes", "No")), row(2, ("Yes", "Yes", "Yes", "Yes")), row(3, ("A", "B", "B", "A"), "multiple_choice")]
    dataset = load_dataset("lcm-nb", write_jsonl(tmp_path / "naturalbench.jsonl", rows))  # auto → naturalbench
    assert dataset.items == [
        NbUnit("0", (tmp_path / "images/0_0.jpg", tmp_path / "images/0_1.jpg"), ("Is it dark?", "Is it bright?"), "c1", None, "question"),
        NbUnit("1", (tmp_path / "images/1_0.jpg", tmp_path / "images/1_1.jpg"), ("Is it dark?", "Is it bright?"), "c2", None, "question"),
        # multiple_choice units are read too, "A" in "Yes"'s place (tests/test_naturalbench_mc.py)
        NbUnit("3", (tmp_path / "images/3_0.jpg", tmp_path / "images/3_1.jpg"), ("Is it dark?", "Is it bright?"), "c1", None, "question", "multiple_choice", ("A", "B")),
    ]
    assert [(e.item_id, e.field) for e in dataset.errors] == [("2", "Image_*_Question_*")]
    assert "not a NaturalBench pattern" in dataset.errors[0].message


def write_vlind_bench(root, instances):
    """VLind-Bench's release layout: data.json + images/{counterfactual,factual}/{concept}/{id}_{context}/."""
    (root).mkdir(parents=True, exist_ok=True)
    (root / "data.json").write_text(json.dumps(instances))
    return root


def vlind_instance(context_id, votes, best="0", concept="color"):
    return {
        "concept": concept, "context_id": context_id, "context": f"In this world, bananas are blue ({context_id}).",
        "factual_context": "Bananas are yellow.", "true_statement": "The banana is blue.", "false_statement": "The banana is yellow.",
        "existent_noun": "banana", "non-existent_noun": "car", "best_img_id": best, "aggregated_human_label_good_images": votes,
    }  # fmt: skip


def test_vlind_bench_release_layout(tmp_path):
    instances = [vlind_instance(3, {"0": 1, "2": 3, "10": 2, "5": 2}, best="2"), vlind_instance(4, {"0": 1, "1": 0}), vlind_instance(5, {"0": 2, "1": 3}, best="0")]
    root = write_vlind_bench(tmp_path / "VLind-Bench", instances)
    for instance in instances:
        folder = root / "images" / "counterfactual" / "color" / f"{instance['context_id']}_{instance['context']}"
        for image_id in instance["aggregated_human_label_good_images"]:
            write_image(folder / f"{image_id}.jpg")
        write_image(root / "images" / "factual" / "color" / f"{instance['context_id']}_Bananas are yellow." / "0.jpg")
    (root / "images" / "counterfactual" / "color" / f"5_{instances[2]['context']}" / "1.jpg").unlink()
    dataset = load_dataset("vlind", root)  # auto → vlind-bench (data.json)
    assert len(dataset.items) == 1
    item = dataset.items[0]
    cf = root / "images" / "counterfactual" / "color" / f"3_{instances[0]['context']}"
    assert item.id == "color-3" and (item.true_statement, item.false_statement) == ("The banana is blue.", "The banana is yellow.")
    assert (item.existent_noun, item.non_existent_noun, item.context) == ("banana", "car", instances[0]["context"])
    assert item.best_image == cf / "2.jpg"  # VP and CB
    assert item.counterfactual_images == (cf / "2.jpg", cf / "5.jpg", cf / "10.jpg")  # LP: the accepted images, by id
    assert item.factual_image == root / "images" / "factual" / "color" / "3_Bananas are yellow." / "0.jpg"
    errors = {e.item_id: e for e in dataset.errors}
    assert errors["color-4"].field == "aggregated_human_label_good_images" and "2 or more votes" in errors["color-4"].message
    assert errors["color-5"].field == "aggregated_human_label_good_images['1']" and "not found" in errors["color-5"].message
    assert errors["color-4"].source == f"{root / 'data.json'}[1]"


def test_vlind_bench_folder_fallbacks_and_a_missing_best_image(tmp_path):
    instances = [vlind_instance(7, {"0": 2}), vlind_instance(8, {"0": 2, "1": 1}, best="1")]
    root = write_vlind_bench(tmp_path, instances)
    write_image(root / "counterfactual" / "color" / "7_context renamed by the file system" / "0.png")  # no images/ level, .png
    write_image(root / "factual" / "color" / "7_Bananas are yellow." / "0.jpg")
    write_image(root / "counterfactual" / "color" / f"8_{instances[1]['context']}" / "0.jpg")  # 8's best image (1) is not there
    write_image(root / "factual" / "color" / "8_Bananas are yellow." / "0.jpg")
    dataset = load_dataset("vlind", root / "data.json", "vlind-bench")
    assert [item.counterfactual_images for item in dataset.items] == [(root / "counterfactual" / "color" / "7_context renamed by the file system" / "0.png",)]
    assert [(e.item_id, e.field) for e in dataset.errors] == [("color-8", "best_img_id")]
    assert "image file not found" in dataset.errors[0].message


def test_mme_category_folders(tmp_path):
    write_image(tmp_path / "artwork" / "images" / "10002.jpg")
    write_image(tmp_path / "artwork" / "images" / "10001.jpg")
    (tmp_path / "artwork" / "questions_answer_YN").mkdir()
    (tmp_path / "artwork" / "questions_answer_YN" / "10001.txt").write_text("Is this a painting?\tYes\n")
    write_image(tmp_path / "count" / "000000006040.PNG")
    (tmp_path / "count" / "000000006040.txt").write_text("How many?\t2\n")
    (tmp_path / "eval_tool").mkdir()
    (tmp_path / "eval_tool" / "calculation.py").write_text("")
    dataset = load_dataset("genception", tmp_path, "mme")
    assert [(item.id, item.category, item.image) for item in dataset.items] == [
        ("artwork/10001", "artwork", tmp_path / "artwork" / "images" / "10001.jpg"),
        ("artwork/10002", "artwork", tmp_path / "artwork" / "images" / "10002.jpg"),
        ("count/000000006040", "count", tmp_path / "count" / "000000006040.PNG"),
    ]
    assert dataset.errors == []


def test_aokvqa_rows(tmp_path):
    write_image(tmp_path / "images" / "000000299207.jpg")
    write_image(tmp_path / "val2017" / "000000000139.jpg")
    write_image(tmp_path / "mine" / "kitchen.png")
    rows = [
        {"split": "val", "image_id": 299207, "question_id": "22MexNkBPpdZGX6sxbxVBH", "question": "What is the man by the bags awaiting?",
         "choices": ["skateboarder", "train", "delivery", "cab"], "correct_choice_idx": 3, "direct_answers": ["cab"] * 10, "rationales": ["..."]},
        {"split": "val", "image_id": 139, "question_id": "q-coco", "question": "What room is this?", "choices": ["kitchen", "bath"], "correct_choice_idx": 0},
        {"split": "test", "image_id": 1, "image": "mine/kitchen.png", "question_id": "q-test", "question": "Which appliance?", "choices": ["oven", "fridge"]},
        {"split": "val", "image_id": 42, "question_id": "q-missing", "question": "Where?", "choices": ["a", "b"], "correct_choice_idx": 1},
        {"split": "val", "image_id": 299207, "question_id": "q-bad-index", "question": "Why?", "choices": ["a", "b"], "correct_choice_idx": 2},
    ]  # fmt: skip
    (tmp_path / "aokvqa_v1p0_val.json").write_text(json.dumps(rows))
    dataset = load_dataset("decc", tmp_path)  # auto → aokvqa
    assert [(i.id, i.image, i.question, i.options, i.answer, i.sub_questions) for i in dataset.items] == [
        ("22MexNkBPpdZGX6sxbxVBH", tmp_path / "images" / "000000299207.jpg", "What is the man by the bags awaiting?", ("skateboarder", "train", "delivery", "cab"), "cab", None),
        ("q-coco", tmp_path / "val2017" / "000000000139.jpg", "What room is this?", ("kitchen", "bath"), "kitchen", None),
        ("q-test", tmp_path / "mine" / "kitchen.png", "Which appliance?", ("oven", "fridge"), None, None),
    ]
    assert [(e.item_id, e.field) for e in dataset.errors] == [("q-missing", "image_id"), ("q-bad-index", "correct_choice_idx")]
    assert "000000000042.jpg" in dataset.errors[0].message


# ---- dispatch and auto-detection ----


def test_auto_detection_matches_explicit_formats(world, tmp_path):
    for evaluator in ("lcm-mc", "lcm-nb", "vlind", "decc", "yes-no", "genception"):
        assert load_dataset(evaluator, world).items == load_dataset(evaluator, world, "vlgate").items
    assert load_dataset("yesno", world / "yesno" / "items.jsonl").items[0].answer in ("yes", "no")
    # a folder with a single data file of another name is read; two files must be told apart
    shutil.copy(world / "mc" / "items.jsonl", tmp_path / "mine.jsonl")
    (tmp_path / "images").symlink_to(world / "mc" / "images")
    assert len(load_dataset("lcm-mc", tmp_path).items) == 48
    (tmp_path / "other.json").write_text("[]")
    with pytest.raises(ValueError, match="2 data files"):
        load_dataset("lcm-mc", tmp_path)
    write_jsonl(tmp_path / "odd" / "x.jsonl", [{"id": 1, "something": "else"}])
    with pytest.raises(ValueError, match="cannot tell the format"):
        load_dataset("lcm-mc", tmp_path / "odd")


@pytest.mark.parametrize(
    "args, message",
    [
        (("lcm-xx", "."), "unknown evaluator 'lcm-xx'"),
        (("lcm-mc", ".", "parquet"), "unknown format 'parquet'"),
        (("lcm-mc", ".", "naturalbench"), "format 'naturalbench' does not apply to evaluator 'lcm-mc'"),
        (("decc", "/no/such/folder"), "no such file or folder"),
    ],
)
def test_load_dataset_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        load_dataset(*args)


# ---- seeded pairing of unlabelled image–question pairs ----


def test_pairing_is_seeded_complete_and_recordable(world):
    pairs = load_dataset("yes-no", world).items
    units, pairing = pair_unlabelled(pairs, seed=7)
    assert len(units) == 24 and pairing.unpaired == () and pairing.seed == 7
    used = [i for pair in pairing.pairs for i in pair]
    assert sorted(used) == sorted(item.id for item in pairs)  # every item exactly once
    by_id = {item.id: item for item in pairs}
    for unit, (a, b) in zip(units, pairing.pairs):
        assert unit == NbUnit(f"{a}+{b}", (by_id[a].image, by_id[b].image), (by_id[a].question, by_id[b].question), None, "existence", "question")
    shuffled = list(pairs)
    random.Random(1).shuffle(shuffled)
    assert pair_unlabelled(shuffled, seed=7) == (units, pairing)  # input order does not matter
    other_units, other = pair_unlabelled(pairs, seed=8)
    assert other.pairs != pairing.pairs and len(other_units) == 24
    recorded = Pairing.from_dict(json.loads(json.dumps(pairing.as_dict())))
    assert recorded == pairing and units_from_pairing(shuffled, recorded) == units


def test_pairing_reports_leftovers_and_avoids_same_image_or_question(tmp_path):
    image = tmp_path / "a.png"
    items = [YesNoItem(f"y{n}", image if n < 2 else tmp_path / f"{n}.png", f"Is there a cat number {n}?") for n in range(5)]
    units, pairing = pair_unlabelled(items, seed=0)
    assert len(units) == 2 and len(pairing.unpaired) == 1
    assert sorted([i for pair in pairing.pairs for i in pair] + list(pairing.unpaired)) == [f"y{n}" for n in range(5)]
    assert ("y0", "y1") not in pairing.pairs and ("y1", "y0") not in pairing.pairs  # same image
    same_question = [YesNoItem("q1", tmp_path / "1.png", "Is it red?"), YesNoItem("q2", tmp_path / "2.png", "is it  RED?")]
    none_paired, leftover = pair_unlabelled(same_question, 0)
    assert none_paired == [] and sorted(leftover.unpaired) == ["q1", "q2"]  # crossing pairs would be the originals
    with pytest.raises(ValueError, match="duplicate item id"):
        pair_unlabelled([items[0], items[0]], 0)
    with pytest.raises(ValueError, match="not in the data"):
        units_from_pairing(items, Pairing(0, (("y0", "zz"),)))


# ---- NatConBench from ConBench-style items (VL-LCM App. B) ----


def test_natconbench_units_follow_appendix_b(tmp_path):
    img = lambda name: tmp_path / f"{name}.jpg"
    mc = [
        ConBenchItem("m1", img("1"), "What colour is the car?", "mc", "A", "color", ("red", "blue")),
        ConBenchItem("m2", img("2"), "What colour is the car?", "mc", "B", "color", ("red", "blue")),
        ConBenchItem("m3", img("3"), "What colour is the car?", "mc", "red", "color", ("red", "blue")),
        ConBenchItem("m4", img("4"), "What colour is the bus?", "mc", None, "color", ("red", "blue")),
    ]
    tf = [
        ConBenchItem("t1", img("5"), "Is there a dog?", "tf", "yes", "count"),
        ConBenchItem("t2", img("6"), "Are there two cats?", "tf", "Yes", "count"),
        ConBenchItem("t3", img("7"), "Is there a bird?", "tf", "no", "count"),
        ConBenchItem("t4", img("8"), "Is there a horse?", "tf", "yes", "position"),  # alone in its category
    ]
    units, pairing = natconbench_units(mc + tf, seed=3)
    assert len(units) == 2
    mc_unit = next(u for u in units if u.category == "color")
    tf_unit = next(u for u in units if u.category == "count")
    a, b = mc_unit.id.split("+")
    assert "m2" in (a, b) and {a, b} <= {"m1", "m2", "m3"}  # m1 and m3 share the answer "red": never a pair
    answer = {"m1": "red", "m2": "blue", "m3": "red"}
    assert mc_unit.texts == tuple(f'What colour is the car? Is the answer "{answer[i]}"?' for i in (a, b))
    assert mc_unit.images == (img(a[1]), img(b[1])) and (mc_unit.answer, mc_unit.text_kind) == ("c1", "question")
    assert set(tf_unit.texts) == {"Is there a dog?", "Are there two cats?"} and tf_unit.answer == "c1"
    assert tf_unit.images == tuple(img({"t1": "5", "t2": "6"}[i]) for i in tf_unit.id.split("+"))
    assert sorted(pairing.unpaired) == sorted({"m1", "m3"} - {a, b} | {"m4", "t3", "t4"})
    assert natconbench_units(list(reversed(mc + tf)), seed=3) == (units, pairing)
    from_mc, _ = natconbench_units([McItem("x1", img("x1"), "Which?", ("up", "down"), 0, "c"), McItem("x2", img("x2"), "Which?", ("up", "down"), 1, "c")], 0)
    assert sorted(from_mc[0].texts) == ['Which? Is the answer "down"?', 'Which? Is the answer "up"?']


def test_genceptions_own_flat_example_folder_is_one_category(tmp_path):
    """EQTPartners/GenCeption's datasets/examples/ holds its images directly (no category
    folders), and its exp_llava.py --dataset reads that folder as one set."""
    examples = tmp_path / "examples"
    write_image(examples / "000000061658.jpg")
    write_image(examples / "000000338560.jpg")
    write_image(examples / "count" / "1.png")  # a category folder beside them still is one
    dataset = load_dataset("genception", examples)
    assert [(item.id, item.category, item.image) for item in dataset.items] == [
        ("examples/000000061658", "examples", examples / "000000061658.jpg"),
        ("examples/000000338560", "examples", examples / "000000338560.jpg"),
        ("count/1", "count", examples / "count" / "1.png"),
    ]


def test_aokvqa_with_coco_in_its_own_folder_as_its_readme_sets_it_up(tmp_path):
    """A-OKVQA's README: the questions under $AOKVQA_DIR, COCO under $COCO_DIR/{split}2017/.
    The suite's decc entry names the COCO folder (relative to the suite); an unknown option
    for another format is refused."""
    import yaml

    from vlgate.evaluators.running.items import load_items
    from vlgate.evaluators.running.suite import Suite

    aokvqa, coco = tmp_path / "datasets" / "aokvqa", tmp_path / "datasets" / "coco"
    write_image(coco / "val2017" / "000000000139.jpg")
    aokvqa.mkdir(parents=True)
    rows = [{"split": "val", "image_id": 139, "question_id": "q1", "question": "What room is this?", "choices": ["kitchen", "bath"], "correct_choice_idx": 0}]
    (aokvqa / "aokvqa_v1p0_val.json").write_text(json.dumps(rows))
    assert [e.field for e in load_dataset("decc", aokvqa).errors] == ["image_id"]  # COCO is not beside the questions
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump({"name": "s", "evaluators": {"decc": {"data": "datasets/aokvqa", "llm": "llm", "coco_dir": "datasets/coco"}}}))
    spec = Suite.from_file(suite_file).evaluators["decc"]
    items, errors = load_items("decc", spec, tmp_path / "out")
    assert errors == [] and [(i.id, i.image, i.answer) for i in items] == [("q1", coco / "val2017" / "000000000139.jpg", "kitchen")]
    with pytest.raises(ValueError, match="coco_dir apply to the aokvqa format only"):
        load_dataset("decc", aokvqa, "vlgate", coco_dir=coco)
