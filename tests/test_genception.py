"""GenCeption GC@T and GC_FID@T (docs/metrics.md#genception, paper Eq. 3–4) against hand-computed values."""

import json

import numpy as np
import pytest

from vlgate.evaluators.genception import metrics as genception
from vlgate.evaluators.records import parse_jsonl
from vlgate.evaluators.scoring import score, score_file, validate


def test_gc_at_t_weights_later_iterations():
    # (1·.9 + 2·.6 + 3·.3) / (1+2+3) = 3.0 / 6
    np.testing.assert_allclose(genception.gc_at_t(np.array([[0.9, 0.6, 0.3]])), [0.5])
    # GC@1 is s^(1)
    np.testing.assert_allclose(genception.gc_at_t(np.array([[0.42]])), [0.42])


def test_frechet_distance_one_dimension_by_hand():
    # t0 = {0, 2}: μ 1, σ² 2;  t1 = {1, 5}: μ 3, σ² 8  →  (1−3)² + 2 + 8 − 2·sqrt(16) = 6
    assert genception.frechet_distance(np.array([[0.0], [2.0]]), np.array([[1.0], [5.0]])) == pytest.approx(6.0)


def test_frechet_distance_invariants():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(200, 6))
    assert genception.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-8)
    shifted = a + np.array([1.0, 0, 0, 0, 0, 0])
    assert genception.frechet_distance(a, shifted) == pytest.approx(1.0, abs=1e-6)  # same covariance: ‖Δμ‖²
    assert genception.frechet_distance(a[:1], a[:1]) is None


def test_gc_fid_weights():
    assert genception.gc_fid_at_t([6.0, 6.0, 12.0]) == pytest.approx((6 + 12 + 36) / 6)


def test_cosine_similarity():
    np.testing.assert_allclose(genception.cosine_similarity(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[0.0, 2.0], [2.0, 2.0]])), [0.0, 1.0])


RECORDS = [
    {"id": "a", "category": "art", "s": [0.9, 0.6, 0.3]},
    {"id": "b", "category": "art", "s": [0.5, 0.5, 0.5]},
    {"id": "c", "category": "scene", "s": [1.0, 1.0, 1.0]},
]


def test_set_metrics_and_categories():
    metrics = score(validate("genception", parse_jsonl(json.dumps(r) for r in RECORDS)))
    # the headline is the mean over categories (art 0.5, scene 1.0), the image mean beside it
    assert metrics["gc@3"] == pytest.approx((0.5 + 1.0) / 2)
    assert metrics["gc_image_mean@3"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert metrics["s@1"] == pytest.approx((0.9 + 0.5 + 1.0) / 3)
    assert metrics["s@3"] == pytest.approx((0.3 + 0.5 + 1.0) / 3)
    assert metrics["by_category"]["art"]["gc@3"] == pytest.approx(0.5)
    assert metrics["by_category"]["scene"]["gc@3"] == pytest.approx(1.0)


def test_features_add_fid_aligned_by_id(tmp_path, write_records):
    path = write_records(RECORDS)
    t0 = np.array([[0.0], [2.0], [4.0]])
    t1 = np.array([[1.0], [5.0], [4.0]])
    # file rows in a different order than the records, aligned through ids
    order = [2, 0, 1]
    np.savez(tmp_path / "f.npz", ids=np.array(["c", "a", "b"]), t0=t0[order], t1=t1[order], t2=t0[order], t3=t1[order])
    metrics, _ = score_file("genception", path, features_path=tmp_path / "f.npz")
    expected_fid1 = genception.frechet_distance(t0, t1)
    assert metrics["fid@1"] == pytest.approx(expected_fid1)
    assert metrics["fid@2"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["gc_fid@3"] == pytest.approx((1 * expected_fid1 + 0 + 3 * expected_fid1) / 6)
    # category "art" is records a, b: t0 {0, 2} vs t1 {1, 5} → 6 by hand
    assert metrics["by_category"]["art"]["fid@1"] == pytest.approx(6.0)
    assert metrics["by_category"]["scene"]["fid@1"] is None  # one image: no covariance


def test_fid_that_float64_cannot_hold_is_undefined_not_nan():
    """Features large enough for a covariance product to overflow (|x|⁴ past 1e308): None
    (the metric is undefined), never NaN or inf reaching the gate."""
    a = np.array([[0.0, 1.0], [2.0, 0.5], [4.0, 3.0]])
    assert genception.frechet_distance(a * 1e200, a) is None
    assert genception.frechet_distance(a * 1e70, a * 1e70) == pytest.approx(0.0, abs=1e-6)
    assert genception.fid_metrics([a, a * 1e200])["gc_fid@1"] is None


def test_features_too_large_for_fid_are_refused_naming_the_array(tmp_path, write_records):
    path = write_records(RECORDS)
    small = np.array([[0.0], [2.0], [4.0]])
    np.savez(tmp_path / "f.npz", t0=small, t1=small, t2=small * 1e200, t3=small)
    with pytest.raises(ValueError, match=r"array t2 holds values up to 4e\+200; FID needs \|x\| <= 1e\+75"):
        score_file("genception", path, features_path=tmp_path / "f.npz")


def test_features_with_wrong_iterations_rejected(tmp_path, write_records):
    path = write_records(RECORDS)
    np.savez(tmp_path / "f.npz", t0=np.zeros((3, 2)), t1=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="iterations"):
        score_file("genception", path, features_path=tmp_path / "f.npz")


# The released leaderboard (EQTPartners/GenCeption, leaderboard/leaderboard.json), ChatGPT-4V:
# GC@3 per MME category, and its "Mean" 0.351, "VisMean" 0.393 and "TextMean" 0.246.
CHATGPT_4V = {"Exist": 0.422, "Count": 0.404, "Posi": 0.408, "Col": 0.403, "Post": 0.324, "Cel": 0.332, "Sce": 0.393, "Lan": 0.353, "Art": 0.421, "Comm": 0.471}
CHATGPT_4V_TEXT = {"Code": 0.193, "Num": 0.240, "Tran": 0.157, "OCR": 0.393}


def _records_with_category_means(means: dict[str, float], sizes: dict[str, int]) -> list[dict]:
    """``sizes[c]`` images per category (default 1) whose GC@3 average to ``means[c]``:
    an even count alternates ±0.05 around it."""
    records = []
    for category, mean in means.items():
        n = sizes.get(category, 1)
        for i in range(n):
            spread = (0.05 if i % 2 else -0.05) if n % 2 == 0 else 0.0
            records.append({"id": f"{category}-{i}", "category": category, "s": [mean + spread] * 3})
    return records


def test_the_headline_is_the_leaderboards_mean_over_categories_whatever_their_sizes():
    categories = CHATGPT_4V | CHATGPT_4V_TEXT
    sizes = {"Exist": 60, "Count": 60, "Code": 2, "OCR": 40}  # MME's categories differ in size too
    records = _records_with_category_means(categories, sizes)
    metrics = score(validate("genception", parse_jsonl(json.dumps(r) for r in records)))
    assert round(metrics["gc@3"], 3) == 0.351  # the leaderboard's "Mean"
    assert metrics["gc@3"] == pytest.approx(sum(categories.values()) / 14)
    image_mean = sum(categories[r["category"]] for r in records) / len(records)
    assert metrics["gc_image_mean@3"] == pytest.approx(image_mean)
    assert metrics["gc_image_mean@3"] != pytest.approx(metrics["gc@3"], abs=1e-3)  # the sizes make them differ
    vision = score(validate("genception", parse_jsonl(json.dumps(r) for r in records if r["category"] in CHATGPT_4V)))
    text = score(validate("genception", parse_jsonl(json.dumps(r) for r in records if r["category"] in CHATGPT_4V_TEXT)))
    assert round(vision["gc@3"], 3) == 0.393  # "VisMean"
    assert round(text["gc@3"], 3) == 0.246  # "TextMean"
    for category, mean in categories.items():
        assert metrics["by_category"][category]["gc@3"] == pytest.approx(mean)  # one category: its image mean


def test_one_category_headline_is_the_image_mean():
    records = [{"id": str(i), "category": "art", "s": [0.1 * i, 0.2, 0.3]} for i in range(5)]
    metrics = score(validate("genception", parse_jsonl(json.dumps(r) for r in records)))
    assert metrics["gc@3"] == pytest.approx(metrics["gc_image_mean@3"])


def test_the_gates_statistic_on_the_per_sample_frame_is_the_headline():
    """The gate's paired bootstrap recomputes metrics from per-sample frames: the frame
    carries each image's category so that its gc@T is the same mean over categories."""
    from vlgate.evaluators import registry
    from vlgate.evaluators.scoring import per_sample_frame

    records = _records_with_category_means(CHATGPT_4V, {"Exist": 10, "Art": 4})
    valid = validate("genception", parse_jsonl(json.dumps(r) for r in records))
    frame = per_sample_frame(valid)
    assert list(frame.columns[:3]) == ["id", "category", "gc"]
    from_frame = registry.get("genception").aggregate(frame.drop(columns="id"))
    assert from_frame["gc@3"] == pytest.approx(score(valid)["gc@3"])
    assert from_frame["gc@3"] == pytest.approx(sum(CHATGPT_4V.values()) / len(CHATGPT_4V))


def test_a_similarity_past_one_by_rounding_alone_is_taken_as_one_and_further_out_refused():
    """The reference pipeline's cosine of an image's features with themselves gives
    1.0000000000000009 in float64: such a record scores as if it said 1.0."""
    from vlgate.evaluators.records import InvalidRecordsError

    def records(first: float) -> list[dict]:
        return [{"id": "a", "category": "c", "s": [first, 0.5]}, {"id": "b", "category": "c", "s": [0.9, -1.0000001]}]

    rounded = score(validate("genception", parse_jsonl(json.dumps(r) for r in records(1.0000000000000009))))
    exact = score(validate("genception", parse_jsonl(json.dumps(r) for r in [{**records(1.0)[0]}, {"id": "b", "category": "c", "s": [0.9, -1.0]}])))
    assert rounded == exact and rounded["gc@2"] == pytest.approx((1.0 * 1 + 0.5 * 2 + 0.9 * 1 - 1.0 * 2) / 3 / 2)
    with pytest.raises(InvalidRecordsError, match=r"field 's': entry 0 1.001"):
        validate("genception", parse_jsonl(json.dumps(r) for r in records(1.001)))
