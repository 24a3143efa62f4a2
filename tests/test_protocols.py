"""Named protocols: chosen per evaluator in the suite, carried
by every record and its fingerprint, refused when mixed in one set, and never compared
across by the gate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vlgate.config import ConfigError
from vlgate.evaluators import protocols, registry
from vlgate.evaluators.backends.base import BackendInfo, VisionLanguageBackend
from vlgate.evaluators.loaders.items import McItem
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.running.suite import Suite
from vlgate.evaluators.schemas import InvalidRecordsError
from vlgate.evaluators.scoring import score, score_file, validate
from vlgate.evaluators.vl_lcm import protocols as lcm_protocols
from vlgate.evaluators.vl_lcm.runner import lcm_mc_runner
from vlgate.gate.gates import decide
from vlgate.gate.policy import GatePolicy


class Uniform(VisionLanguageBackend):
    """Every option equally likely: what a backend that lost the option tokens returns."""

    info = BackendInfo(name="uniform", model="uniform", digest="sha256:uniform")

    def __init__(self):
        self.prompts: list[str] = []

    def choice_probs(self, requests):
        self.prompts += [request.prompt for request in requests]
        return [np.full(len(request.options), 1.0 / len(request.options)) for request in requests]

    def generate(self, requests):
        raise AssertionError("not used")


def _suite(tmp_path, entries: dict) -> Suite:
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps({"name": "s", "evaluators": entries}))  # JSON is YAML
    return Suite.from_file(path)


def test_every_evaluator_has_a_default_protocol_and_names_what_it_follows():
    for definition in registry.definitions():
        default = definition.protocol()
        assert default is definition.protocols[0] and default.follows
        assert [p.id for p in definition.protocols] == [f"{p.name}-{p.version}" for p in definition.protocols]
        assert len({p.name for p in definition.protocols}) == len(definition.protocols)
        assert definition.protocol("vlgate").name == "vlgate"  # the world's prompts, for every evaluator


def test_a_suite_names_a_protocol_per_evaluator_and_an_unknown_one_is_refused(tmp_path):
    data = tmp_path / "mc"
    suite = _suite(tmp_path, {"lcm-mc": {"data": str(data), "protocol": "vlgate"}, "genception": {"data": str(data), "encoder": "e", "description_max_new_tokens": 96}})
    assert suite.protocols() == {"lcm-mc": "vlgate-1", "genception": "genception-1+description=96"}
    assert _suite(tmp_path, {"genception": {"data": str(data), "encoder": "e", "protocol": "vlgate"}}).protocols() == {"genception": "vlgate-1"}
    with pytest.raises(ConfigError) as refused:
        _suite(tmp_path, {"lcm-mc": {"data": str(data), "protocol": "lmms"}})
    message = str(refused.value)
    assert "evaluators.lcm-mc.protocol" in message and "lcm-mc has no protocol 'lmms'" in message and "vlgate" in message



def test_the_genception_protocol_reads_seed_images_as_the_released_find_image_files(tmp_path):
    from PIL import Image

    from vlgate.evaluators.running.items import load_items

    seeds = tmp_path / "seeds"
    (seeds / "animals").mkdir(parents=True)
    for name in ("a.jpg", "b.png", "c.jpeg", "D.JPG", "e.PNG", "f.gif", ".g.jpg"):
        Image.new("RGB", (4, 4), "red").save(seeds / "animals" / name, "PNG")

    def ids(protocol: str) -> list[str]:
        suite = _suite(tmp_path, {"genception": {"data": str(seeds), "encoder": "e", "protocol": protocol}})
        items, errors = load_items("genception", suite.evaluators["genception"], tmp_path / "out")
        assert errors == []
        return [item.id for item in items]

    # genception/file_utils.py: {".jpg", ".png"} compared in lower case, so c.jpeg is not a seed image
    assert ids("genception") == ["animals/D", "animals/a", "animals/b", "animals/e"]
    assert ids("vlgate") == ["animals/D", "animals/a", "animals/b", "animals/c", "animals/e"]

def test_records_carry_the_protocol_and_a_protocol_change_is_a_new_fingerprint(tmp_path):
    from PIL import Image

    image = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(image)
    item = McItem("q1", image, "What is it?", ("a cat", "a dog"), 0)
    other = protocols.Protocol("other", 1, "this test", lcm_protocols.LCM_MC[0].prompts)
    runs = {}
    for protocol in (lcm_protocols.LCM_MC[0], other):
        runner = lcm_mc_runner(Uniform(), protocol)
        result = runner.run([item], RecordStore(tmp_path / f"{protocol.name}.jsonl"), progress=False)
        runs[protocol.name] = result.records[0]
    assert runs["mmmu"]["protocol"] == "mmmu-1" and runs["other"]["protocol"] == "other-1"
    assert runs["mmmu"]["fingerprint"] != runs["other"]["fingerprint"]
    # and the uniform answers are unanswered questions, counted and wrong
    metrics = score(validate("lcm-mc", parse_jsonl([json.dumps(runs["mmmu"])])))
    assert metrics["n_unanswered"] == 1 and metrics["acc"] == 0.0


def _records(protocol_of) -> list[dict]:
    return [{"id": f"s{n}", "p_mc": [0.8, 0.2], "p_yes": [0.8, 0.2], "answer": 0, **({"protocol": protocol_of(n)} if protocol_of(n) else {})} for n in range(5)]


@pytest.mark.parametrize(
    "protocol_of, odd, says",
    [
        (lambda n: "lmms-eval-1" if n == 3 else "mmmu-1", ["s3"], "was measured under protocol 'lmms-eval-1' but the other records under protocol 'mmmu-1'"),
        (lambda n: None if n == 0 else "mmmu-1", ["s0"], "was measured under no protocol but the other records under protocol 'mmmu-1'"),
        (lambda n: 7 if n == 1 else "mmmu-1", ["s1"], "must be a string, got int"),
    ],
)
def test_a_set_mixing_protocols_names_the_odd_records_on_both_paths(tmp_path, protocol_of, odd, says):
    records = _records(protocol_of)
    with pytest.raises(InvalidRecordsError) as refused:
        validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records))
    assert [error.record_id for error in refused.value.errors] == odd and says in str(refused.value)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(InvalidRecordsError) as from_file:  # the column-by-column fast path declines it
        score_file("lcm-mc", path)
    assert [error.record_id for error in from_file.value.errors] == odd
    # one protocol throughout (or none at all) is fine, on both paths
    for same in (lambda n: "mmmu-1", lambda n: None):
        path.write_text("".join(json.dumps(r) + "\n" for r in _records(same)))
        assert score_file("lcm-mc", path)[0]["n"] == 5


def _output(protocol: str | None, p: float) -> EvaluatorOutput:
    records = [{"id": f"s{n}", "p_mc": [p, 1 - p], "p_yes": [p, 1 - p], "answer": 0, **({"protocol": protocol} if protocol else {})} for n in range(30)]
    return EvaluatorOutput.from_records("lcm-mc", records, score(validate("lcm-mc", parse_jsonl(json.dumps(r) for r in records))))


POLICY = GatePolicy(required=["lcm-mc"], floors={"lcm-mc/acc": 0.5}, regressions={"lcm-mc/lcm": {"max_drop": 0.02}}, resamples=300)


@pytest.mark.parametrize("champion_protocol, named", [("lmms-eval-1", "protocol lmms-eval-1"), (None, "no protocol")])
def test_the_gate_never_compares_numbers_from_different_protocols(champion_protocol, named):
    candidate = {"lcm-mc": _output("mmmu-1", 0.9)}
    decision = decide(POLICY, candidate, {"lcm-mc": _output(champion_protocol, 0.9)})
    (check,) = [c for c in decision.checks if c.name == "lcm-mc/lcm vs champion"]
    assert not check.passed and check.verdict == "could not judge"
    assert f"the candidate's lcm-mc records were measured under protocol mmmu-1, the champion's under {named}" in check.detail
    assert decision.outcome == "could not judge" and not decision.promote
    # the same protocol on both sides is compared: identical answers on 30 items, judged
    # (inconclusive: no change on 30 items does not yet show a drop within the margin)
    (same,) = [c for c in decide(POLICY, candidate, {"lcm-mc": _output("mmmu-1", 0.9)}).checks if c.name == "lcm-mc/lcm vs champion"]
    assert same.verdict == "inconclusive" and same.n_shared == 30 and same.samples_needed is not None


def _nb_prompts(protocol: str, unit_texts=("Is the cat on the mat?", "Is the cat under the mat?"), kind="question") -> list[str]:
    from PIL import Image

    from vlgate.evaluators.loaders.items import NbUnit
    from vlgate.evaluators.vl_lcm.runner import lcm_nb_requests

    images = (Image.new("RGB", (4, 4)), Image.new("RGB", (4, 4), "white"))
    unit = NbUnit("u", (None, None), unit_texts, "c1", None, kind)  # type: ignore[arg-type]
    return [request.prompt for request in lcm_nb_requests(unit, images, registry.get("lcm-nb").protocol(protocol).prompts)]


def test_naturalbench_prompts_are_the_released_harnesses_character_by_character():
    # Baiqi-Li/NaturalBench naturalbench_vqa.py: item["Question_0"] + SUFFIX_FOR_VQA["yes_no"], no separator
    authors = _nb_prompts("naturalbench")
    assert authors[:4] == ["Is the cat on the mat?Please answer Yes or No.", "Is the cat under the mat?Please answer Yes or No."] * 2  # y11, y12, y21, y22
    # VL-LCM's MC tests in NaturalBench's multiple_choice layout ("...?\nOption: A:...; B:...;") and suffix
    assert authors[4] == "Which question has the answer yes for this image?\nOption: A:Is the cat on the mat?; B:Is the cat under the mat?;Please output the letter corresponding to the correct option."
    assert authors[6] == "For which image is the answer to this question yes: Is the cat on the mat?\nOption: A:The first image; B:The second image;Please output the letter corresponding to the correct option."
    # lmms-eval's naturalbench_doc_to_text: question + " " + suffix
    lmms = _nb_prompts("lmms-eval")
    assert lmms[0] == "Is the cat on the mat? Please answer Yes or No."
    assert lmms[5] == "Which question has the answer yes for this image?\nOption: A:Is the cat on the mat?; B:Is the cat under the mat?; Please output the letter corresponding to the correct option."
    # vlgate's (the world's) stays as the world was trained on it
    assert _nb_prompts("vlgate")[0] == "Is the cat on the mat? Please answer Yes or No."
    assert _nb_prompts("vlgate")[4] == "Which question has the answer yes for this image?\nA. Is the cat on the mat?\nB. Is the cat under the mat?\nPlease output the letter corresponding to the correct option."
    # statements (vlgate's own units) are asked about as questions
    assert _nb_prompts("naturalbench", ("A cat sits.", "A dog sits."), "statement")[0] == "Is the following statement true for the image? A cat sits.Please answer Yes or No."
    assert registry.get("lcm-nb").protocol().name == "naturalbench"  # the authors' code is the default


def test_the_readme_names_every_protocol_and_what_it_follows():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("### Protocols") :]
    section = section[: section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    current = None
    documented: set[tuple[str, str]] = set()
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        current = cells[0] or current
        documented.add((current, cells[1].strip("`")))
    for definition in registry.definitions():
        for protocol in definition.protocols:
            assert (definition.name, protocol.name) in documented or (protocol.name == "vlgate" and ("every evaluator", "vlgate") in documented), (definition.name, protocol.name)


def _mc_prompts(protocol: str) -> list[str]:
    from PIL import Image

    from vlgate.evaluators.vl_lcm.runner import lcm_mc_requests

    item = McItem("q", None, "Which of the following is shown in <image 1>?", ("a cat", "a dog", "a <image 2> bird"), 0)  # type: ignore[arg-type]
    return [request.prompt for request in lcm_mc_requests(item, Image.new("RGB", (4, 4)), registry.get("lcm-mc").protocol(protocol).prompts)]


def test_mmmu_prompts_are_the_released_harnesses_character_by_character():
    # MMMU-Benchmark/MMMU construct_prompt + configs/llava1.5.yaml (its YAML folds to "{}\n{}\nAnswer ..."), options "(A) text\n"
    authors = _mc_prompts("mmmu")
    assert authors[0] == (
        "Which of the following is shown in <image 1>?\n(A) a cat\n(B) a dog\n(C) a <image 2> bird\n\nAnswer with the option's letter from the given choices directly."
    )
    # lmms-eval mmmu_val: f"{question}\n{A. text lines}\n\n{mc_prompt}", placeholders kept (interleaved_format false)
    assert _mc_prompts("lmms-eval")[0] == (
        "Which of the following is shown in <image 1>?\nA. a cat\nB. a dog\nC. a <image 2> bird\n\nAnswer with the option's letter from the given choices directly."
    )
    # vlgate's: no blank line before the instruction (what the world is trained on)
    assert _mc_prompts("vlgate")[0] == "Which of the following is shown in <image 1>?\nA. a cat\nB. a dog\nC. a <image 2> bird\nAnswer with the option's letter from the given choices directly."
    # VL-LCM's yes/no probes are the same under every protocol, and every prompt starts with the question (the shared prefix)
    assert authors[1:] == ['Which of the following is shown in <image 1>?\nIs the answer "a cat"? Please answer yes or no.', *authors[2:]]
    assert authors[3] == 'Which of the following is shown in <image 1>?\nIs the answer "a <image 2> bird"? Please answer yes or no.'
    assert registry.get("lcm-mc").protocol().name == "mmmu"


def test_per_sample_correlation_with_the_champion_only_within_one_protocol():
    from vlgate.flows.correlations import correlate_with_champion

    candidate = {"lcm-mc": _output("mmmu-1", 0.9)}
    varied = _output("mmmu-1", 0.9)
    varied.samples = varied.samples.assign(p_lc=np.linspace(0.1, 0.9, len(varied.samples)))
    candidate["lcm-mc"].samples = candidate["lcm-mc"].samples.assign(p_lc=np.linspace(0.2, 1.0, len(varied.samples)))
    same = correlate_with_champion(candidate, {"lcm-mc": varied})
    assert same["lcm-mc/p_lc~champion"]["pearson"] == pytest.approx(1.0)
    other = _output("lmms-eval-1", 0.9)
    other.samples = varied.samples
    assert correlate_with_champion(candidate, {"lcm-mc": other}) == {}
