"""The one image opener (evaluators/images.py): a header that declares more pixels than the
budget is refused before anything is decoded, as the item's error naming the item and the
size; an image within the budget opens exactly as Pillow opens it; the budget is the suite's
``max_image_pixels``, checked when the suite is read."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from PIL import Image

from vlgate.config import ConfigError
from vlgate.evaluators import images
from vlgate.evaluators.figures import readable_image
from vlgate.evaluators.images import DEFAULT_MAX_PIXELS, ImageTooLarge, pixel_budget, read_image
from vlgate.evaluators.loaders import ItemLoadError, load_dataset, open_image
from vlgate.evaluators.loaders.common import EmbeddedImage
from vlgate.evaluators.loaders.tables import same_image

# the bomb's 144,000,000 pixels are over Pillow's warning limit: Pillow warns as it reads the header
pytestmark = pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")

SHIPPED = Path(__file__).resolve().parents[1] / "evaluators" / "world" / "shipped"
BOMB_SIDE = 12000


def write_bomb(path: Path, side: int = BOMB_SIDE) -> Path:
    """A 1-bit PNG of one colour declaring side×side pixels: about 17 KB on disk for 12000²."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("1", (side, side)).save(path, optimize=True)
    return path


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    return write_bomb(tmp_path_factory.mktemp("bomb") / "bomb.png")


def test_the_bomb_is_small_on_disk_and_under_pillows_own_hard_limit(bomb):
    assert bomb.stat().st_size < 64_000
    assert BOMB_SIDE * BOMB_SIDE < 2 * Image.MAX_IMAGE_PIXELS  # Pillow would only warn and decode it


def test_an_image_over_the_budget_is_an_item_error_naming_the_item_field_and_size(bomb, monkeypatch):
    decoded = []
    monkeypatch.setattr(Image.Image, "load", lambda self: decoded.append(self) or None)
    monkeypatch.setattr(Image.core, "new", lambda *args: decoded.append(args))  # no pixel buffer of any kind is made
    with pytest.raises(ItemLoadError) as raised:
        open_image(bomb, "mc-0003", "image", "items.jsonl:4")
    error = raised.value.error
    assert (error.source, error.item_id, error.field) == ("items.jsonl:4", "mc-0003", "image")
    assert "12000×12000 = 144,000,000 pixels" in error.message and f"{DEFAULT_MAX_PIXELS:,}" in error.message
    assert "'mc-0003'" in str(error) and decoded == []


def test_refusing_a_bomb_decodes_nothing_measured_in_a_child_process(bomb):
    """The child's peak resident memory grows by far less than the 144 MB that even the
    bomb's mode-1 decode would take (the RGB copy a model is given: 576 MB)."""
    probe = (
        "import resource, sys\n"
        "from vlgate.evaluators.loaders import ItemLoadError, open_image\n"
        "from PIL import Image\n"
        "Image.new('RGB', (8, 8)).convert('L')\n"  # Pillow's decoders warmed up, as after any image
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    open_image(sys.argv[1], 'bomb', 'image')\n"
        "except ItemLoadError as error:\n"
        "    print('refused', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    answer = subprocess.run([sys.executable, "-W", "ignore", "-c", probe, str(bomb)], capture_output=True, text=True, check=True, timeout=120).stdout.split()
    assert answer[0] == "refused"
    assert int(answer[1]) < 16 * 1024  # KiB


def test_pillows_own_bomb_error_and_warning_are_the_same_refusal(tmp_path, monkeypatch):
    path = tmp_path / "a.png"
    Image.new("RGB", (100, 100)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 4_000)  # 10,000 pixels: over twice Pillow's limit
    with pytest.raises(ImageTooLarge, match="decompression-bomb limit") as raised:
        read_image(path)
    assert raised.value.size is None
    with pytest.raises(ItemLoadError, match="too large to open"):
        open_image(path, "x", "image")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 6_000)  # over Pillow's limit, under twice it: a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with pytest.raises(ImageTooLarge, match="10000 pixels"):
            read_image(path)


@pytest.mark.parametrize("mode, suffix", [("RGB", ".png"), ("RGBA", ".png"), ("P", ".png"), ("L", ".png"), ("1", ".png"), ("RGB", ".jpg"), ("L", ".jpg"), ("CMYK", ".jpg")])
def test_an_image_within_the_budget_opens_exactly_as_pillow_opens_it(tmp_path, mode, suffix):
    path = tmp_path / f"image{suffix}"
    source = Image.effect_noise((67, 41), 64).convert(mode) if mode != "1" else Image.effect_noise((67, 41), 64).convert("1")
    source.save(path)
    with Image.open(path) as plain:
        expected = plain.convert("RGB")
    got = read_image(path)
    assert (got.mode, got.size, got.tobytes()) == ("RGB", expected.size, expected.tobytes())
    opened = open_image(path, "ok", "image")
    assert opened.tobytes() == expected.tobytes()
    assert read_image(path.read_bytes()).tobytes() == expected.tobytes()  # bytes, as a release table embeds them


def test_the_budget_is_inclusive_and_set_per_context(tmp_path):
    path = tmp_path / "a.png"
    Image.new("RGB", (100, 50)).save(path)
    assert read_image(path, budget=5_000).size == (100, 50)
    with pytest.raises(ImageTooLarge, match="100×50 = 5,000 pixels, over the pixel budget of 4,999"):
        read_image(path, budget=4_999)
    assert images.current_budget() == DEFAULT_MAX_PIXELS
    with pixel_budget(4_999):
        assert images.current_budget() == 4_999
        with pytest.raises(ItemLoadError, match="over the pixel budget of 4,999"):
            open_image(path, "x", "image")
    assert images.current_budget() == DEFAULT_MAX_PIXELS
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive"), pixel_budget(bad):
            pass


def test_a_large_jpeg_read_to_fit_is_decoded_at_a_reduced_scale(tmp_path):
    path = tmp_path / "large.jpg"
    Image.new("RGB", (4000, 3000), (200, 30, 30)).save(path)
    drafted = read_image(path, fit=(500, 500))
    assert drafted.size == (1000, 750)  # 1/4 scale by the decoder: the smallest at least 500 on both sides
    assert drafted.getpixel((10, 10)) == pytest.approx((200, 30, 30), abs=3)
    png = tmp_path / "large.png"
    Image.new("RGB", (2400, 1200), (10, 200, 30)).save(png)
    assert read_image(png, fit=(500, 500)).size == (1200, 600)  # reduced by 2 after decoding, never below fit
    assert read_image(png).size == (2400, 1200)  # without fit nothing is reduced


def test_the_report_leaves_out_a_picture_over_the_budget_and_reads_large_ones_reduced(bomb, tmp_path):
    assert readable_image(bomb) is None
    path = tmp_path / "large.jpg"
    Image.new("RGB", (8192, 4096)).save(path)
    assert readable_image(path).size == (2048, 1024)


def test_loaders_read_headers_only_and_a_table_compares_images_within_the_budget(bomb, tmp_path):
    folder = tmp_path / "mc"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "bomb.png").write_bytes(bomb.read_bytes())
    (folder / "items.jsonl").write_text(json.dumps({"id": "b", "image": "images/bomb.png", "question": "q?", "options": ["a", "b"], "answer": 0}) + "\n")
    dataset = load_dataset("lcm-mc", folder)  # verify() reads the chunks, decodes no pixel
    assert [item.id for item in dataset.items] == ["b"] and dataset.errors == []
    first, second = tmp_path / "first.png", tmp_path / "second.png"
    Image.new("RGB", (20, 20), (1, 2, 3)).save(first, compress_level=1)
    Image.new("RGB", (20, 20), (1, 2, 3)).save(second, compress_level=9)
    assert same_image(EmbeddedImage(first), EmbeddedImage(second))
    with pixel_budget(399), pytest.raises(ImageTooLarge):
        same_image(EmbeddedImage(first), EmbeddedImage(second))


# ---- the suite's setting ----


def _suite_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: s\n{extra}evaluators:\n  lcm-mc: {{data: {SHIPPED / 'data' / 'mc'}}}\n")
    return path


def test_the_budget_is_read_from_the_suite_with_a_default():
    from vlgate.evaluators.running.suite import Suite

    assert Suite.model_validate({"name": "s", "evaluators": {}}).max_image_pixels == DEFAULT_MAX_PIXELS == 40_000_000


def test_the_suite_budget_is_read_from_its_file(tmp_path):
    from vlgate.evaluators.running.suite import Suite

    assert Suite.from_file(_suite_file(tmp_path, "max_image_pixels: 1000000\n")).max_image_pixels == 1_000_000


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "89478486", "many"])
def test_a_budget_that_is_not_a_positive_whole_number_of_pixels_is_refused_naming_the_key(tmp_path, value):
    from vlgate.evaluators.running.suite import Suite

    with pytest.raises(ConfigError, match="max_image_pixels"):
        Suite.from_file(_suite_file(tmp_path, f"max_image_pixels: {value}\n"))


def test_a_bad_budget_stops_vlgate_evaluate_with_status_2(tmp_path, capsys):
    from vlgate.cli.main import main

    suite = _suite_file(tmp_path, "max_image_pixels: 0\n")
    assert main(["evaluate", "--model", "x", "--suite", str(suite), "--out", str(tmp_path / "out")]) == 2
    assert "max_image_pixels" in capsys.readouterr().err


@pytest.mark.world
def test_evaluate_with_a_bomb_among_normal_items_scores_the_others_and_names_the_bomb(tmp_path, capsys):
    """Eight lcm-mc items of the shipped world, the fourth's image replaced by the bomb: the
    seven others are scored, the bomb is the one item error, and the suite's budget is the
    one applied (the world's 64×64 images are 4,096 pixels: a budget of exactly that passes them)."""
    from vlgate.cli.main import main

    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    rows = [json.loads(line) for line in (SHIPPED / "data" / "mc" / "items.jsonl").read_text().splitlines()[:8]]
    for row in rows:
        (data / row["image"]).write_bytes((SHIPPED / "data" / "mc" / row["image"]).read_bytes())
    write_bomb(data / rows[3]["image"])
    (data / "items.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: bomb\nmax_image_pixels: 4096\nevaluators:\n  lcm-mc: {{data: {data}, protocol: vlgate}}\n")
    out = tmp_path / "out"
    assert main(["evaluate", "--model", str(SHIPPED / "checkpoints" / "vlm-steps10000"), "--suite", str(suite), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    metrics = json.loads((out / "lcm-mc" / "metrics.json").read_text())
    assert (metrics["n"], metrics["n_item_errors"]) == (7, 1)
    records = [json.loads(line) for line in (out / "lcm-mc" / "records.jsonl").read_text().splitlines()]
    assert [record["id"] for record in records] == [row["id"] for row in rows if row is not rows[3]]
    (error,) = [json.loads(line) for line in (out / "lcm-mc" / "errors.jsonl").read_text().splitlines()]
    assert (error["id"], error["field"]) == (rows[3]["id"], "image")
    assert "12000×12000 = 144,000,000 pixels, over the pixel budget of 4,096" in error["message"]
    summary = json.loads((out / "summary.json").read_text())["evaluators"]["lcm-mc"]
    assert summary["computed"] + summary.get("from_cache", 0) == 7 and any(  # another test may have scored some of these items with this model: the record cache has them
        rows[3]["id"] in line and "12000×12000" in line for line in summary["item_errors"])
