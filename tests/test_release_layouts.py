"""Hugging Face release layouts (evaluators/loaders/tables.py): parquet and save_to_disk arrow
files written here with pyarrow, images embedded as PNG bytes, read back into the exact items
the JSON layouts give, images extracted once into VLGATE_HOME's content-addressed cache, and a
bad row one error naming its id and field while the others load."""

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlgate.evaluators.loaders import GenceptionItem, McItem, NbUnit, load_dataset, open_image
from vlgate.evaluators.loaders.tables import split_of, table_files

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def png(colour, size=(5, 3), **save):
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG", **save)
    return out.getvalue()


def cell(data, name="image.png"):
    return {"bytes": data, "path": name}


def cached(home, data, suffix=".png"):
    digest = hashlib.sha256(data).hexdigest()
    return home / "image-cache" / digest[:2] / f"{digest}{suffix}"


def pixels(path):
    with Image.open(path) as image:
        return image.convert("RGB").tobytes()


def pixels_of(data):
    return pixels(io.BytesIO(data))


def table(rows, columns):
    """A pyarrow table with ``columns`` (name → type), image columns typed as datasets' Image feature."""
    schema = pa.schema([(name, kind) for name, kind in columns.items()])
    return pa.Table.from_pylist([{name: row.get(name) for name in columns} for row in rows], schema=schema)


def write_parquet(path, rows, columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table(rows, columns), path)
    return path


def write_arrow_stream(path, rows, columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = table(rows, columns)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data, max_chunksize=2)  # several record batches, as datasets writes them
    return path


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(folder))
    return folder.resolve()


RED, GREEN, BLUE, WHITE, BLACK = png((200, 0, 0)), png((0, 200, 0)), png((0, 0, 200)), png((255, 255, 255)), png((0, 0, 0))
NOT_AN_IMAGE = b"\x89PNG but then nothing an image decoder could use"


# ---- NaturalBench (BaiqiL/NaturalBench: one row per unit) ----

NB_COLUMNS = {
    "Index": pa.int64(), "Image_0": IMAGE, "Image_1": IMAGE, "Question_0": pa.string(), "Image_0_Question_0": pa.string(),
    "Image_1_Question_0": pa.string(), "Question_1": pa.string(), "Image_0_Question_1": pa.string(), "Image_1_Question_1": pa.string(),
    "Question_Type": pa.string(), "Source": pa.string(),
}  # fmt: skip


def nb_row(index, image_0, image_1, answers, kind="yes_no", questions=("Is it red?", "Is it green?")):
    names = ("Image_0_Question_0", "Image_1_Question_0", "Image_0_Question_1", "Image_1_Question_1")
    return {"Index": index, "Image_0": image_0, "Image_1": image_1, "Question_0": questions[0], "Question_1": questions[1],
            "Question_Type": kind, "Source": "Flickr30K", **dict(zip(names, answers))}  # fmt: skip


def test_naturalbench_release_parquet(tmp_path, home):
    root = tmp_path / "NaturalBench"
    write_parquet(root / "data" / "train-00000-of-00002.parquet", [
        nb_row(0, cell(RED, "0_0.jpg"), cell(GREEN, "0_1.jpg"), ("Yes", "No", "No", "Yes")),
        nb_row(1, cell(GREEN), cell(RED), ("No", "Yes", "Yes", "No")),  # c2: V1 says yes to T2
        nb_row(2, cell(RED), cell(GREEN), ("A", "B", "B", "A"), "multiple_choice",
               ("What colour? Option: A:red; B:green;", "Which colour is absent? Option: A:green; B:red;")),
    ], NB_COLUMNS)  # fmt: skip
    shard_1 = write_parquet(root / "data" / "train-00001-of-00002.parquet", [
        nb_row(3, cell(BLUE), {"bytes": None, "path": None}, ("Yes", "No", "No", "Yes")),
        nb_row(4, cell(NOT_AN_IMAGE), cell(BLUE), ("Yes", "No", "No", "Yes")),
        nb_row(5, cell(BLUE), cell(WHITE), (None, None, None, None), questions=("Is it blue?", "Is it white?")),
    ], NB_COLUMNS)  # fmt: skip
    (root / "README.md").write_text("---\nlicense: apache-2.0\n---\n")

    dataset = load_dataset("lcm-nb", root)  # auto: a folder of parquet shards, NaturalBench's columns
    assert dataset.items == [
        NbUnit("0", (cached(home, RED), cached(home, GREEN)), ("Is it red?", "Is it green?"), "c1", None, "question"),
        NbUnit("1", (cached(home, GREEN), cached(home, RED)), ("Is it red?", "Is it green?"), "c2", None, "question"),
        NbUnit("2", (cached(home, RED), cached(home, GREEN)), ("What colour? Option: A:red; B:green;", "Which colour is absent? Option: A:green; B:red;"),
               "c1", None, "question", "multiple_choice", ("A", "B")),
        NbUnit("5", (cached(home, BLUE), cached(home, WHITE)), ("Is it blue?", "Is it white?"), None, None, "question"),
    ]  # fmt: skip
    assert [(e.source, e.item_id, e.field) for e in dataset.errors] == [
        (f"{shard_1}[0]", "3", "Image_1"),
        (f"{shard_1}[1]", "4", "Image_0"),
    ]
    assert dataset.errors[0].message == "no image bytes (and no path)"
    assert "not an image PIL can read" in dataset.errors[1].message
    assert dataset.source == str(root / "data" / "*.parquet")
    # the runner opens the extracted files: the pixels written are the pixels read
    unit = dataset.items[0]
    assert open_image(unit.images[0], unit.id, "images[0]").tobytes() == pixels_of(RED)
    assert pixels(unit.images[1]) == pixels_of(GREEN)
    # one file per distinct image, named by the sha256 of its bytes; undecodable bytes are not written
    assert sorted(p for p in (home / "image-cache").rglob("*") if p.is_file()) == sorted({cached(home, b) for b in (RED, GREEN, BLUE, WHITE)})
    assert all(hashlib.sha256(p.read_bytes()).hexdigest() == p.stem for p in (home / "image-cache").rglob("*.png"))


def test_a_second_load_reuses_the_cache_and_one_file_reads_alone(tmp_path, home):
    path = write_parquet(tmp_path / "nb.parquet", [nb_row(7, cell(RED), cell(GREEN), ("Yes", "No", "No", "Yes"))], NB_COLUMNS)
    first = load_dataset("lcm-nb", path, "naturalbench")
    stamps = {p: p.stat().st_mtime_ns for p in (home / "image-cache").rglob("*.png")}
    second = load_dataset("lcm-nb", path, "naturalbench", verify_images=False)
    assert first.items == second.items and first.source == str(path) and len(stamps) == 2
    assert {p: p.stat().st_mtime_ns for p in (home / "image-cache").rglob("*.png")} == stamps
    assert not list((home / "image-cache").rglob(".tmp-*"))


def test_an_image_cell_with_only_a_path_is_a_file_beside_the_table(tmp_path, home):
    Image.new("RGB", (5, 3), (0, 0, 200)).save(tmp_path / "v1.png")
    Image.new("RGB", (5, 3), (0, 200, 0)).save(tmp_path / "v2.png")
    rows = [nb_row(0, {"bytes": None, "path": "v1.png"}, {"bytes": None, "path": "v2.png"}, ("Yes", "No", "No", "Yes")),
            nb_row(1, {"bytes": None, "path": "gone.png"}, cell(RED), ("Yes", "No", "No", "Yes"))]  # fmt: skip
    dataset = load_dataset("lcm-nb", write_parquet(tmp_path / "nb.parquet", rows, NB_COLUMNS))
    assert [unit.images for unit in dataset.items] == [(tmp_path / "v1.png", tmp_path / "v2.png")]
    assert [(e.item_id, e.field) for e in dataset.errors] == [("1", "Image_0")] and "'gone.png' is not a file" in dataset.errors[0].message


# ---- NaturalBench, lmms-eval's variant (BaiqiL/NaturalBench-lmms-eval: one row per pair) ----

PAIR_COLUMNS = {"Index": pa.int64(), "Image": IMAGE, "Question": pa.string(), "Question_Type": pa.string(), "answer": pa.string()}


def pair_rows(unit, v1, v2, t1, t2, answers, kind="yes_no"):
    """lmms-eval's order: Index 4k..4k+3 = (V1,T1), (V2,T1), (V1,T2), (V2,T2)."""
    pairs = ((v1, t1), (v2, t1), (v1, t2), (v2, t2))
    return [{"Index": 4 * unit + m, "Image": cell(image), "Question": question, "Question_Type": kind, "answer": answer}
            for m, ((image, question), answer) in enumerate(zip(pairs, answers))]  # fmt: skip


def test_naturalbench_lmms_eval_pairs_regroup_into_units(tmp_path, home):
    red_again = png((200, 0, 0), compress_level=0)  # other bytes, the same pixels (re-encoded)
    assert red_again != RED
    rows = (
        pair_rows(0, RED, GREEN, "Is it red?", "Is it green?", ("Yes", "No", "No", "Yes"))
        + pair_rows(1, BLUE, WHITE, "Is it white?", "Is it blue?", ("No", "Yes", "Yes", "No"))[::-1]  # c2, rows in any order
        + [row for row in pair_rows(2, RED, GREEN, "Q1?", "Q2?", ("Yes", "No", "No", "Yes")) if row["Index"] != 10]
        + pair_rows(3, RED, GREEN, "Q1?", "Q2?", ("Yes", "No", "No", "Yes"))
        + pair_rows(4, RED, BLACK, "Is it red?", "Is it black?", ("Yes", "No", "No", "Yes"))
    )
    rows[-2]["Image"] = cell(red_again)  # Index 18, (V1,T2): V1 re-encoded, still V1
    rows[13]["Image"] = cell(BLUE)  # Index 14 (unit 3's (V1,T2)) shows another image than Index 12 (V1,T1)
    path = write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", rows, PAIR_COLUMNS)
    dataset = load_dataset("lcm-nb", tmp_path)  # auto → naturalbench-lmms-eval
    assert dataset.items == [
        NbUnit("0", (cached(home, RED), cached(home, GREEN)), ("Is it red?", "Is it green?"), "c1", None, "question"),
        NbUnit("1", (cached(home, BLUE), cached(home, WHITE)), ("Is it white?", "Is it blue?"), "c2", None, "question"),
        NbUnit("4", (cached(home, RED), cached(home, BLACK)), ("Is it red?", "Is it black?"), "c1", None, "question"),
    ]
    assert [(e.item_id, e.field) for e in dataset.errors] == [("2", "Index"), ("3", "Image")]
    assert dataset.errors[0].source == f"{path}[8,9,10]" and "Index 10 are missing" in dataset.errors[0].message
    assert dataset.errors[1].source == f"{path}[11,12,13,14]" and "V1" in dataset.errors[1].message
    assert load_dataset("lcm-nb", path, "naturalbench-lmms-eval").items == dataset.items


def test_lmms_eval_pairs_that_disagree_on_the_question(tmp_path, home):
    rows = pair_rows(0, RED, GREEN, "Is it red?", "Is it green?", ("Yes", "No", "No", "Yes"))
    rows[1]["Question"] = "Is it crimson?"
    rows += [{"Index": None, "Image": cell(RED), "Question": "x", "Question_Type": "yes_no", "answer": "Yes"}]
    dataset = load_dataset("lcm-nb", write_parquet(tmp_path / "pairs.parquet", rows, PAIR_COLUMNS), "naturalbench-lmms-eval")
    assert dataset.items == [] and [(e.item_id, e.field) for e in dataset.errors] == [(None, "Index"), ("0", "Question")]


# ---- MME (lmms-lab/MME: two questions per image) → GenCeption seeds ----

MME_COLUMNS = {"question_id": pa.string(), "image": IMAGE, "question": pa.string(), "answer": pa.string(), "category": pa.string()}


def mme_rows(question_id, category, image, other_image=None):
    return [
        {"question_id": question_id, "image": cell(image), "question": "Is this red? Please answer yes or no.", "answer": "Yes", "category": category},
        {"question_id": question_id, "image": cell(other_image or image), "question": "Is this blue? Please answer yes or no.", "answer": "No", "category": category},
    ]


def test_mme_parquet_gives_the_category_folders_items(tmp_path, home):
    jpeg = io.BytesIO()
    Image.new("RGB", (6, 4), (10, 120, 30)).save(jpeg, "JPEG")
    rows = (
        mme_rows("code_reasoning/0020.png", "code_reasoning", RED)
        + mme_rows("artwork/10002.jpg", "artwork", jpeg.getvalue())
        + mme_rows("OCR/0001.png", "OCR", GREEN)
        + mme_rows("artwork/10001.jpg", "artwork", BLUE)
        + mme_rows("count/000000006040.jpg", "count", NOT_AN_IMAGE)
        + mme_rows("color/000000001.jpg", "color", WHITE, BLACK)
    )
    root = tmp_path / "MME"
    first = write_parquet(root / "data" / "test-00000-of-00002-a25dbe3b44c4fda6.parquet", rows[:6], MME_COLUMNS)
    write_parquet(root / "data" / "test-00001-of-00002-7d22c7f1aba6fca4.parquet", rows[6:], MME_COLUMNS)
    dataset = load_dataset("genception", root)  # auto: parquet → lmms-eval's MME
    assert dataset.items == [
        GenceptionItem("OCR/0001", "OCR", cached(home, GREEN)),
        GenceptionItem("artwork/10001", "artwork", cached(home, BLUE)),
        GenceptionItem("artwork/10002", "artwork", cached(home, jpeg.getvalue(), ".jpg")),
        GenceptionItem("code_reasoning/0020", "code_reasoning", cached(home, RED)),
    ]
    assert [(e.item_id, e.field) for e in dataset.errors] == [("count/000000006040", "image"), ("color/000000001", "image")]
    assert dataset.errors[0].source.endswith("test-00001-of-00002-7d22c7f1aba6fca4.parquet[2]") and "hold different images" in dataset.errors[1].message
    assert pixels(dataset.items[2].image) == pixels_of(jpeg.getvalue())
    assert str(first).startswith(dataset.source[: -len("*.parquet")])
    # the same images as MME's category folders give the same ids and categories, in the same order
    folders = tmp_path / "folders"
    for item in dataset.items:
        target = folders / item.category / (item.id.split("/")[1] + item.image.suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.image.read_bytes())
    from_folders = load_dataset("genception", folders, "mme")
    assert [(i.id, i.category, pixels(i.image)) for i in from_folders.items] == [(i.id, i.category, pixels(i.image)) for i in dataset.items]
    with pytest.raises(ValueError, match="no category folder"):
        load_dataset("genception", root, "vlgate")  # the local format stays category folders
    with pytest.raises(ValueError, match="format mme"):
        load_dataset("genception", root / "data" / "*.parquet", "vlgate")


# ---- MMMU (MMMU/MMMU: a config per subject, several splits) ----

MMMU_COLUMNS = {
    "id": pa.string(), "question": pa.string(), "options": pa.string(), "explanation": pa.string(),
    **{f"image_{n}": IMAGE for n in range(1, 8)}, "img_type": pa.string(), "answer": pa.string(),
    "topic_difficulty": pa.string(), "question_type": pa.string(), "subfield": pa.string(),
}  # fmt: skip


def mmmu_row(item_id, question, options, answer, subfield="Fine Arts", **images):
    return {"id": item_id, "question": question, "options": options, "explanation": "", "img_type": "['Paintings']", "answer": answer,
            "topic_difficulty": "Easy", "question_type": "multiple-choice", "subfield": subfield, **{k: cell(v) if isinstance(v, bytes) else v for k, v in images.items()}}  # fmt: skip


def write_mmmu(root):
    art = [
        mmmu_row("validation_Art_1", "<image 1> Which colour dominates?", "['red', 'green', 'blue']", "A", image_1=RED),
        mmmu_row("validation_Art_2", "Which style is <image 1> ?", "['Baroque', 'Cubism']", "B", image_1={"bytes": None, "path": None}),
        mmmu_row("validation_Art_3", "Which one?", "['a', 'b'", "A", image_1=GREEN),
    ]
    physics = [
        mmmu_row("validation_Physics_1", "What is the net force on the block? <image 1>", "['2 N', '4 N', '6 N', '8 N']", "D", "Mechanics", image_1=BLUE),
        mmmu_row("validation_Physics_2", "Compare <image 1> and <image 2>.", "['same', 'different']", "A", "Optics", image_1=RED, image_2=GREEN),
        mmmu_row("validation_Physics_3", "How fast? <image 1>", "['1', '2']", "B", "Mechanics", image_1=NOT_AN_IMAGE),
    ]
    write_parquet(root / "Art" / "validation-00000-of-00001.parquet", art, MMMU_COLUMNS)
    write_parquet(root / "Physics" / "validation-00000-of-00001.parquet", physics, MMMU_COLUMNS)
    write_parquet(root / "Art" / "dev-00000-of-00001.parquet", [mmmu_row("dev_Art_1", "Q <image 1>", "['a', 'b']", "A", image_1=RED)], MMMU_COLUMNS)
    write_parquet(root / "Art" / "test-00000-of-00001.parquet", [mmmu_row("test_Art_1", "Q <image 1>", "['a', 'b']", "?", image_1=RED)], MMMU_COLUMNS)
    return root


def test_mmmu_release_one_split_by_pattern(tmp_path, home):
    root = write_mmmu(tmp_path / "MMMU")
    with pytest.raises(ValueError, match=r"3 splits \(dev, test, validation\); point data: at one split"):
        load_dataset("lcm-mc", root)
    dataset = load_dataset("lcm-mc", root / "*" / "validation-*.parquet")  # auto → mmmu
    assert dataset.items == [
        McItem("validation_Art_1", cached(home, RED), "<image 1> Which colour dominates?", ("red", "green", "blue"), 0, "Art"),
        McItem("validation_Physics_1", cached(home, BLUE), "What is the net force on the block? <image 1>", ("2 N", "4 N", "6 N", "8 N"), 3, "Physics"),
        McItem("validation_Physics_2", cached(home, RED), "Compare <image 1> and <image 2>.", ("same", "different"), 0, "Physics", (cached(home, GREEN),)),  # multi-image: tests/test_mmmu_images.py
    ]
    assert [(e.item_id, e.field) for e in dataset.errors] == [
        ("validation_Art_2", "image_1"),
        ("validation_Art_3", "options"),
        ("validation_Physics_3", "image_1"),
    ]
    assert dataset.errors[0].message == "no image bytes (and no path)" and "not a list" in dataset.errors[1].message
    assert dataset.errors[0].source == f"{root / 'Art' / 'validation-00000-of-00001.parquet'}[1]"
    assert "not an image PIL can read" in dataset.errors[2].message
    assert pixels(dataset.items[1].image) == pixels_of(BLUE)
    hidden = load_dataset("lcm-mc", root / "Art" / "test-00000-of-00001.parquet", "mmmu")
    assert [(i.id, i.answer, i.category) for i in hidden.items] == [("test_Art_1", None, "Art")]


# ---- datasets' save_to_disk (arrow IPC stream files + state.json) ----


def test_save_to_disk_folder_reads_like_the_parquet(tmp_path, home):
    rows = [mmmu_row("validation_Art_1", "<image 1> Which colour dominates?", "['red', 'green', 'blue']", "A", image_1=RED),
            mmmu_row("validation_Art_3", "Which one?", "['a', 'b'", "A", image_1=GREEN),
            mmmu_row("validation_Music_4", "Which instrument? <image 1>", "['lute', 'harp']", "B", "Instruments", image_1=GREEN)]  # fmt: skip
    saved = tmp_path / "mmmu_validation"
    write_arrow_stream(saved / "data-00000-of-00002.arrow", rows[:2], MMMU_COLUMNS)
    write_arrow_stream(saved / "data-00001-of-00002.arrow", rows[2:], MMMU_COLUMNS)
    write_arrow_stream(saved / "cache-0123456789abcdef.arrow", [mmmu_row("x_Art_9", "Q", "['a', 'b']", "A", image_1=RED)], MMMU_COLUMNS)
    state = {"_data_files": [{"filename": "data-00000-of-00002.arrow"}, {"filename": "data-00001-of-00002.arrow"}], "_split": "validation"}
    (saved / "state.json").write_text(json.dumps(state))
    (saved / "dataset_info.json").write_text(json.dumps({"features": {"image_1": {"_type": "Image"}}}))
    dataset = load_dataset("lcm-mc", saved)
    assert dataset.items == [
        McItem("validation_Art_1", cached(home, RED), "<image 1> Which colour dominates?", ("red", "green", "blue"), 0, "Art"),
        McItem("validation_Music_4", cached(home, GREEN), "Which instrument? <image 1>", ("lute", "harp"), 1, "Music"),
    ]
    assert [(e.source, e.item_id, e.field) for e in dataset.errors] == [(f"{saved / 'data-00000-of-00002.arrow'}[1]", "validation_Art_3", "options")]
    assert pixels(dataset.items[1].image) == pixels_of(GREEN)
    # without state.json every data file is read (datasets' cache-*.arrow never)
    (saved / "state.json").unlink()
    assert load_dataset("lcm-mc", saved, "mmmu").items == dataset.items
    # a saved DatasetDict names its splits
    (tmp_path / "dict").mkdir()
    (tmp_path / "dict" / "dataset_dict.json").write_text(json.dumps({"splits": ["dev", "validation"]}))
    with pytest.raises(ValueError, match="splits dev, validation; point data: at one split's folder"):
        load_dataset("lcm-mc", tmp_path / "dict")


def test_an_arrow_ipc_file_and_a_cut_cache_file(tmp_path, home):
    rows = [nb_row(0, cell(RED), cell(GREEN), ("Yes", "No", "No", "Yes"))]
    data = table(rows, NB_COLUMNS)
    with pa.ipc.new_file(str(tmp_path / "nb.arrow"), data.schema) as writer:  # the IPC file format, not datasets' stream
        writer.write_table(data)
    first = load_dataset("lcm-nb", tmp_path / "nb.arrow", "naturalbench")
    red = cached(home, RED)
    assert first.items[0].images == (red, cached(home, GREEN))
    red.write_bytes(RED[:20])  # a cache file cut short (disk full, say) is written again
    again = load_dataset("lcm-nb", tmp_path / "nb.arrow")
    assert again.items == first.items and again.errors == [] and red.read_bytes() == RED


# ---- what stays as it was, and what cannot be read at all ----


def test_the_local_file_wins_and_json_folders_load_as_before(tmp_path, home):
    Image.new("RGB", (4, 4), (1, 2, 3)).save(tmp_path / "a.png")
    (tmp_path / "items.jsonl").write_text(json.dumps({"id": "q", "image": "a.png", "question": "Q?", "options": ["x", "y"], "answer": 0}) + "\n")
    write_parquet(tmp_path / "other" / "train-00000-of-00001.parquet", [nb_row(0, cell(RED), cell(GREEN), ("Yes", "No", "No", "Yes"))], NB_COLUMNS)
    assert load_dataset("lcm-mc", tmp_path).items == [McItem("q", tmp_path / "a.png", "Q?", ("x", "y"), 0, None)]
    assert not (home / "image-cache").exists()


def test_unreadable_tables_and_empty_patterns_are_data_set_errors(tmp_path, home):
    (tmp_path / "train-00000-of-00001.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ValueError, match="not a readable parquet file"):
        load_dataset("lcm-nb", tmp_path)
    with pytest.raises(ValueError, match="matches no .parquet or .arrow file"):
        load_dataset("lcm-mc", tmp_path / "*" / "validation-*.parquet")


@pytest.mark.parametrize(
    "name, split",
    [
        ("MMMU/Art/validation-00000-of-00001.parquet", "validation"),
        ("MME/data/test-00002-of-00004-594798fd3f5b029c.parquet", "test"),
        ("NaturalBench/data/train-00000-of-00003.parquet", "train"),
        ("MME/default/test/0000.parquet", "test"),
        ("saved/train/data-00000-of-00001.arrow", "train"),
        ("saved/data-00000-of-00001.arrow", None),
        ("cache/natural_bench-train-00001-of-00003.arrow", "train"),
        ("cache/mme-test.arrow", "test"),
        ("mine/part-1.parquet", None),
    ],
)
def test_split_of_a_release_file(name, split):
    assert split_of(Path(name)) == split


def test_table_files_skip_hidden_folders_and_other_files(tmp_path):
    for name in ("data/train-00001-of-00002.parquet", "data/train-00000-of-00002.parquet", ".cache/huggingface/x.parquet", "README.md", "cache-1.arrow"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert table_files(tmp_path) == [tmp_path / "data" / "train-00000-of-00002.parquet", tmp_path / "data" / "train-00001-of-00002.parquet"]
    assert table_files(tmp_path / "README.md") == []


def test_released_texts_are_asked_byte_for_byte(tmp_path, home):
    from vlgate.evaluators import registry
    from vlgate.evaluators.vl_lcm.runner import lcm_mc_requests, lcm_nb_requests

    # NaturalBench holds questions that begin with a space; its authors' code and lmms-eval ask them as they are
    questions = (" Is the ball red?", "Is the ball green? ")
    write_parquet(tmp_path / "NaturalBench" / "data" / "train-00000-of-00001.parquet", [nb_row(0, cell(RED), cell(GREEN), ("Yes", "No", "No", "Yes"), questions=questions)], NB_COLUMNS)
    unit = load_dataset("lcm-nb", tmp_path / "NaturalBench").items[0]
    assert unit.texts == questions
    images = (Image.new("RGB", (4, 4)), Image.new("RGB", (4, 4), "white"))
    asked = [request.prompt for request in lcm_nb_requests(unit, images, registry.get("lcm-nb").protocol("naturalbench").prompts)]
    assert asked[:2] == [" Is the ball red?Please answer Yes or No.", "Is the ball green? Please answer Yes or No."]
    # MMMU's construct_prompt writes question and options as the release holds them
    write_parquet(tmp_path / "MMMU" / "Art" / "validation-00000-of-00001.parquet", [mmmu_row("validation_Art_1", " <image 1> Which? ", "[' red', 'green ']", "A", image_1=RED)], MMMU_COLUMNS)
    item = load_dataset("lcm-mc", tmp_path / "MMMU" / "*" / "validation-*.parquet").items[0]
    assert (item.question, item.options) == (" <image 1> Which? ", (" red", "green "))
    prompt = lcm_mc_requests(item, Image.new("RGB", (4, 4)), registry.get("lcm-mc").protocol("mmmu").prompts)[0].prompt
    assert prompt == " <image 1> Which? \n(A)  red\n(B) green \n\nAnswer with the option's letter from the given choices directly."
    # a text of whitespace only is still no text
    write_parquet(tmp_path / "blank" / "data" / "train-00000-of-00001.parquet", [nb_row(0, cell(RED), cell(GREEN), ("Yes", "No", "No", "Yes"), questions=("  ", "Is it?"))], NB_COLUMNS)
    assert [error.field for error in load_dataset("lcm-nb", tmp_path / "blank").errors] == ["Question_0"]
