"""NaturalBench's multiple_choice units: loaded from the release's JSON and
parquet layouts and lmms-eval's pair rows, asked with the harnesses' MC suffix over the letters
A/B ("A" in "Yes"'s place), and pooled with the yes_no units into Q-/I-/G-Acc as the harnesses'
``get_scores`` pools them; yes_no units' prompts, digests and fingerprints stay as they were.

The reference behaviour, read from Baiqi-Li/NaturalBench ``naturalbench_vqa.py`` and
EvolvingLMMs-Lab/lmms-eval ``lmms_eval/tasks/naturalbench/utils.py``:

* ``SUFFIX_FOR_VQA["multiple_choice"]`` is "Please output the letter corresponding to the
  correct option."; the authors append it to the question with no separator, lmms-eval's
  ``naturalbench_doc_to_text`` with one space (as for the yes_no suffix).
* ``extract_answer(..., "multiple_choice")`` gives 1 for "A", 0 for "B" (for yes_no: 1 for
  "yes", 0 for "no"), and ``get_scores`` compares every unit of either type with the one
  pattern q0_i0 = 1, q0_i1 = 0, q1_i0 = 0, q1_i1 = 1: Q-Acc counts a question right when it is
  1 on its image and 0 on the other (of 2N), I-Acc an image right when its question is 1 and
  the other 0 (of 2N), G-Acc a unit with all four right (of N), Acc the four pairs (of 4N).
"""

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlgate.evaluators import protocols
from vlgate.evaluators.backends.base import BackendInfo, VisionLanguageBackend
from vlgate.evaluators.loaders import NbUnit, load_dataset
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.store import RecordStore, fingerprint, item_digest
from vlgate.evaluators.scoring import score, validate
from vlgate.evaluators.vl_lcm import protocols as lcm_protocols
from vlgate.evaluators.vl_lcm.runner import lcm_nb_requests, lcm_nb_runner

MC_SUFFIX = "Please output the letter corresponding to the correct option."
Q0 = "What colour is the car?\nOption: A:red; B:blue;"
Q1 = "What colour is the car?\nOption: A:blue; B:red;"
MC_ANSWERS = ("Image_0_Question_0", "Image_1_Question_0", "Image_0_Question_1", "Image_1_Question_1")  # q0_i0, q0_i1, q1_i0, q1_i1


def png(colour):
    out = io.BytesIO()
    Image.new("RGB", (4, 4), colour).save(out, "PNG")
    return out.getvalue()


def release_row(index, answers, kind="multiple_choice", images=("0.png", "1.png"), questions=(Q0, Q1)):
    """A BaiqiL/NaturalBench row; ``answers`` in get_scores' order q0_i0, q0_i1, q1_i0, q1_i1."""
    return {"Index": index, "Question_Type": kind, "Image_0": images[0], "Image_1": images[1], "Question_0": questions[0],
            "Question_1": questions[1], "Source": "x", **dict(zip(MC_ANSWERS, answers))}  # fmt: skip


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    monkeypatch.setenv("VLGATE_HOME", str(folder))
    return folder.resolve()


# ---- loading ----


def test_multiple_choice_rows_in_a_json_file_load_with_their_label(tmp_path):
    for name, colour in (("0.png", (200, 0, 0)), ("1.png", (0, 0, 200))):
        Image.new("RGB", (4, 4), colour).save(tmp_path / name)
    rows = [
        release_row(0, ("A", "B", "B", "A")),  # the harnesses' layout: c1
        release_row(1, ("b", " a", "A", "B")),  # c2 (any case, stripped)
        release_row(2, ("Yes", "No", "No", "Yes")),  # a multiple_choice unit answered Yes/No
        release_row(3, ("A", "B", "B", "A"), kind="yes_no"),  # a yes_no unit answered A/B
        release_row(4, ("A", "A", "B", "B")),  # not an alternating pattern
        release_row(5, ("A", "B", "B", "A"), kind="open_ended"),
        release_row(6, (None, None, None, None)),  # unlabelled
    ]
    path = tmp_path / "naturalbench.json"
    path.write_text(json.dumps(rows))
    dataset = load_dataset("lcm-nb", path)  # auto → naturalbench
    images = (tmp_path / "0.png", tmp_path / "1.png")
    mc = {"question_type": "multiple_choice", "options": ("A", "B")}
    assert dataset.items == [
        NbUnit("0", images, (Q0, Q1), "c1", None, "question", **mc),
        NbUnit("1", images, (Q0, Q1), "c2", None, "question", **mc),
        NbUnit("6", images, (Q0, Q1), None, None, "question", **mc),
    ]
    assert [(e.item_id, e.field) for e in dataset.errors] == [
        ("2", "Image_0_Question_0"),
        ("3", "Image_0_Question_0"),
        ("4", "Image_*_Question_*"),
        ("5", "Question_Type"),
    ]
    assert dataset.errors[0].message == "expected 'A' or 'B' (multiple_choice), got 'Yes'"
    assert dataset.errors[1].message == "expected 'Yes' or 'No', got 'A'"
    assert "must say A to exactly the question the other says B to" in dataset.errors[2].message
    assert "'open_ended'" in dataset.errors[3].message


IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def write_parquet(path, rows, columns):
    schema = pa.schema(list(columns.items()))
    pq.write_table(pa.Table.from_pylist([{name: row.get(name) for name in columns} for row in rows], schema=schema), path)
    return path


def test_multiple_choice_rows_in_the_release_parquet_and_in_lmms_eval_pairs(tmp_path, home):
    import hashlib

    red, blue = png((200, 0, 0)), png((0, 0, 200))
    cached = lambda data: home / "image-cache" / hashlib.sha256(data).hexdigest()[:2] / f"{hashlib.sha256(data).hexdigest()}.png"
    columns = {"Index": pa.int64(), "Image_0": IMAGE, "Image_1": IMAGE, "Question_0": pa.string(), "Question_1": pa.string(), "Question_Type": pa.string(),
               **{name: pa.string() for name in MC_ANSWERS}, "Source": pa.string()}  # fmt: skip
    cells = ({"bytes": red, "path": "0.jpg"}, {"bytes": blue, "path": "1.jpg"})
    rows = [release_row(0, ("A", "B", "B", "A"), images=cells), release_row(1, ("Yes", "No", "No", "Yes"), "yes_no", cells, ("Is it red?", "Is it blue?"))]
    dataset = load_dataset("lcm-nb", write_parquet(tmp_path / "train-00000-of-00001.parquet", rows, columns), "naturalbench")
    images = (cached(red), cached(blue))
    expected = [
        NbUnit("0", images, (Q0, Q1), "c1", None, "question", "multiple_choice", ("A", "B")),
        NbUnit("1", images, ("Is it red?", "Is it blue?"), "c1", None, "question"),
    ]
    assert dataset.items == expected and dataset.errors == []
    assert expected[1].question_type == "yes_no" and expected[1].options is None

    # lmms-eval's variant: one row per pair, Index 4k + m in the order q0_i0, q0_i1, q1_i0, q1_i1, "answer" A/B
    pair_columns = {"Index": pa.int64(), "Image": IMAGE, "Question": pa.string(), "Question_Type": pa.string(), "answer": pa.string()}
    pairs = [(red, Q0, "A"), (blue, Q0, "B"), (red, Q1, "B"), (blue, Q1, "A")]
    pair_rows = [{"Index": m, "Image": {"bytes": image, "path": None}, "Question": q, "Question_Type": "multiple_choice", "answer": a} for m, (image, q, a) in enumerate(pairs)]
    regrouped = load_dataset("lcm-nb", write_parquet(tmp_path / "test-00000-of-00001.parquet", pair_rows, pair_columns), "naturalbench-lmms-eval")
    assert regrouped.items == [expected[0]] and regrouped.errors == []


# ---- what is asked ----


def _prompts(protocol, unit):
    images = (Image.new("RGB", (4, 4)), Image.new("RGB", (4, 4), "white"))
    return lcm_nb_requests(unit, images, protocols.choose(lcm_protocols.LCM_NB, "lcm-nb", protocol).prompts)


MC_UNIT = NbUnit("u", (None, None), (Q0, Q1), "c1", None, "question", "multiple_choice", ("A", "B"))  # type: ignore[arg-type]
YN_UNIT = NbUnit("u", (None, None), ("Is the cat on the mat?", "Is the cat under the mat?"), "c1")  # type: ignore[arg-type]


def test_multiple_choice_prompts_are_the_harnesses_character_by_character():
    # naturalbench_vqa.py: item["Question_0"] + SUFFIX_FOR_VQA[item["Question_Type"]], no separator
    authors = _prompts("naturalbench", MC_UNIT)
    assert [r.prompt for r in authors[:4]] == [
        "What colour is the car?\nOption: A:red; B:blue;Please output the letter corresponding to the correct option.",
        "What colour is the car?\nOption: A:blue; B:red;Please output the letter corresponding to the correct option.",
    ] * 2  # y11, y12, y21, y22: (V1,T1), (V1,T2), (V2,T1), (V2,T2)
    # lmms-eval naturalbench_doc_to_text: question + " " + SUFFIX_FOR_VQA["multiple_choice"]
    lmms = _prompts("lmms-eval", MC_UNIT)
    assert lmms[0].prompt == "What colour is the car?\nOption: A:red; B:blue; Please output the letter corresponding to the correct option."
    assert lmms[3].prompt == "What colour is the car?\nOption: A:blue; B:red; Please output the letter corresponding to the correct option."
    # the options asked are the letters, "A" (the answer in "Yes"'s place) first: p_yes is P(A)
    for requests in (authors, lmms, _prompts("vlgate", MC_UNIT)):
        assert [r.options for r in requests] == [("A", "B")] * 8
        assert [len(r.images) for r in requests] == [1] * 6 + [2] * 2
    # VL-LCM's four MC tests: the same tests, asking for the question (image) whose answer is A
    assert authors[4].prompt == (
        "Which question has the answer A for this image?\nOption: A:What colour is the car?\nOption: A:red; B:blue;; "
        "B:What colour is the car?\nOption: A:blue; B:red;;Please output the letter corresponding to the correct option."
    )
    assert authors[4].prompt == authors[5].prompt
    assert authors[7].prompt == (
        "For which image is the answer to this question A: What colour is the car?\nOption: A:blue; B:red;\nOption: A:The first image; B:The second image;Please output the letter corresponding to the correct option."
    )
    assert lmms[6].prompt == (
        "For which image is the answer to this question A: What colour is the car?\nOption: A:red; B:blue;\nOption: A:The first image; B:The second image; Please output the letter corresponding to the correct option."
    )
    # vlgate's prompt set (the world has no multiple_choice units) joins as its yes/no prompt does: one space
    assert _prompts("vlgate", MC_UNIT)[0].prompt == "What colour is the car?\nOption: A:red; B:blue; Please output the letter corresponding to the correct option."


def test_yes_no_units_are_asked_exactly_as_before():
    # vlgate's prompts, what the synthetic world's models are trained on, byte for byte (the text vlgate has always sent)
    t1, t2 = YN_UNIT.texts
    suffix = "Please output the letter corresponding to the correct option."
    assert [(r.prompt, r.options) for r in _prompts("vlgate", YN_UNIT)] == [
        (f"{t1} Please answer Yes or No.", ("Yes", "No")),
        (f"{t2} Please answer Yes or No.", ("Yes", "No")),
        (f"{t1} Please answer Yes or No.", ("Yes", "No")),
        (f"{t2} Please answer Yes or No.", ("Yes", "No")),
        (f"Which question has the answer yes for this image?\nA. {t1}\nB. {t2}\n{suffix}", ("A", "B")),
        (f"Which question has the answer yes for this image?\nA. {t1}\nB. {t2}\n{suffix}", ("A", "B")),
        (f"For which image is the answer to this question yes: {t1}\nA. The first image\nB. The second image\n{suffix}", ("A", "B")),
        (f"For which image is the answer to this question yes: {t2}\nA. The first image\nB. The second image\n{suffix}", ("A", "B")),
    ]
    statement = NbUnit("s", (None, None), ("A cat sits.", "A dog sits."), "c1", None, "statement")  # type: ignore[arg-type]
    asked = [r.prompt for r in _prompts("vlgate", statement)]
    assert [asked[0], asked[3], asked[4]] == [
        "Is the following statement true for the image? A cat sits. Please answer Yes or No.",
        "Is the following statement true for the image? A dog sits. Please answer Yes or No.",
        f"Which statement is true for this image?\nA. A cat sits.\nB. A dog sits.\n{suffix}",
    ]
    assert _prompts("vlgate", statement)[7].prompt == f"For which image is this statement true: A dog sits.\nA. The first image\nB. The second image\n{suffix}"
    # and the protocols that ask them are the versions their records were made under
    assert [p.id for p in lcm_protocols.LCM_NB] == ["naturalbench-1", "lmms-eval-1", "vlgate-1"]
    assert all("not read yet" not in d for p in lcm_protocols.LCM_NB for d in p.differences)


def test_a_yes_no_units_digest_and_fingerprint_are_unchanged(tmp_path):
    (tmp_path / "v1.png").write_bytes(b"image-one")
    (tmp_path / "v2.png").write_bytes(b"image-two")
    unit = NbUnit("7", (tmp_path / "v1.png", tmp_path / "v2.png"), ("Is the dog asleep?", "Is the dog awake?"), "c1", None, "question")
    # computed before NbUnit had question_type and options
    assert item_digest(unit) == "b27902db13ced42cd1a9993fbc962a0f754e69c4a2d34b48a754a1dc66d09e23"
    assert fingerprint({"vlm": "sha256:x"}, "lcm-nb", "naturalbench-1", unit) == "fp:653ed697f24bbcb62e45a608c4c4f93f"
    # a multiple_choice unit with the same content is another item
    import dataclasses

    mc = dataclasses.replace(unit, question_type="multiple_choice", options=("A", "B"))
    assert item_digest(mc) != item_digest(unit)


# ---- scoring: pooled as get_scores pools them ----


class Scripted(VisionLanguageBackend):
    """Answers each (image, question) pair as scripted (P = 0.9 for the first option when the
    script says so, 0.1 otherwise); the MC tests get 0.7 / 0.3. Records what it was asked."""

    info = BackendInfo(name="scripted", model="scripted", digest="sha256:scripted")

    def __init__(self, script):
        self.script = script  # (image colour, prompt) → True when the first option (Yes / A) is the answer
        self.requests = []

    def choice_probs(self, requests):
        self.requests += requests
        out = []
        for request in requests:
            key = (request.images[0].getpixel((0, 0)), request.prompt)
            first = (0.9 if self.script[key] else 0.1) if len(request.images) == 1 and key in self.script else 0.7
            out.append(np.array([first, 1.0 - first]))
        return out

    def generate(self, requests):
        raise AssertionError("not used")


def test_a_mixed_set_scores_as_the_harnesses_get_scores(tmp_path):
    """Four units in the release's layout (every one c1, as get_scores assumes), two of each
    type. The model's answers in get_scores' terms (1 = Yes / A) and what get_scores makes of them:

    | unit | type | q0_i0 q0_i1 q1_i0 q1_i1 | question score | image score | group | binary |
    | 0 | yes_no | 1 0 0 1 | 2 | 2 | 1 | 4 |
    | 1 | multiple_choice | 1 1 0 1 | 1 (q1 only) | 1 (i0 only) | 0 | 3 |
    | 2 | multiple_choice | 1 0 0 1 | 2 | 2 | 1 | 4 |
    | 3 | yes_no | 1 1 1 1 | 0 | 0 | 0 | 2 |

    Q_Acc = 5 / 8, I_Acc = 5 / 8, G_Acc = 2 / 4, Acc = 13 / 16.
    """
    colours = [((200, 0, 0), (0, 0, 200)), ((0, 200, 0), (200, 200, 0)), ((0, 200, 200), (200, 0, 200)), ((90, 90, 90), (250, 250, 250))]
    units = []
    for n, (c0, c1) in enumerate(colours):
        paths = (tmp_path / f"{n}_0.png", tmp_path / f"{n}_1.png")
        Image.new("RGB", (4, 4), c0).save(paths[0])
        Image.new("RGB", (4, 4), c1).save(paths[1])
        mc = n in (1, 2)
        texts = (Q0, Q1) if mc else (f"Is unit {n} red?", f"Is unit {n} blue?")
        units.append(NbUnit(str(n), paths, texts, "c1", None, "question", *(("multiple_choice", ("A", "B")) if mc else ())))
    given = {0: (1, 0, 0, 1), 1: (1, 1, 0, 1), 2: (1, 0, 0, 1), 3: (1, 1, 1, 1)}  # q0_i0, q0_i1, q1_i0, q1_i1
    protocol = protocols.choose(lcm_protocols.LCM_NB, "lcm-nb", "naturalbench")
    script = {}
    for n, unit in enumerate(units):
        ask = protocol.prompts.multiple_choice if unit.question_type == "multiple_choice" else (lambda t: protocol.prompts.yes_no(t, "question"))
        for (question, image), answer in zip(((0, 0), (0, 1), (1, 0), (1, 1)), given[n]):
            script[(colours[n][image], ask(unit.texts[question]))] = bool(answer)
    backend = Scripted(script)
    result = lcm_nb_runner(backend, protocol).run(units, RecordStore(tmp_path / "nb.jsonl"), batch_size=3, progress=False)
    assert not result.errors and len(result.records) == 4
    assert [r.get("question_type") for r in result.records] == [None, "multiple_choice", "multiple_choice", None]
    assert [r.options for r in backend.requests[8:12]] == [("A", "B")] * 4 and [r.options for r in backend.requests[:4]] == [("Yes", "No")] * 4
    assert result.records[1]["p_yes"] == [[pytest.approx(0.9), pytest.approx(0.1)], [pytest.approx(0.9), pytest.approx(0.9)]]  # [i][j] = P(A | V_i, T_j)

    metrics = score(validate("lcm-nb", parse_jsonl(json.dumps(r) for r in result.records)))
    assert metrics["q_acc"] == pytest.approx(5 / 8)
    assert metrics["i_acc"] == pytest.approx(5 / 8)
    assert metrics["g_acc"] == pytest.approx(2 / 4)
    assert metrics["acc"] == pytest.approx(13 / 16)
    assert metrics["n"] == 4 and metrics["n_unanswered"] == 0
