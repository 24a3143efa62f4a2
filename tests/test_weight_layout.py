"""Checkpoints as transformers 5 saves them, in the layout vLLM reads: the vision tower's
``vision_model`` level put back, every tensor byte for byte, nothing else changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from model_families.llava import build_llava_15
from model_families.qwen import build_qwen2_vl
from safetensors import safe_open

from vlgate.cli.main import main
from vlgate.evaluators.backends.base import BackendError
from vlgate.evaluators.backends.loading import model_digest
from vlgate.evaluators.backends.weight_layout import dropped_level, header, planned_renames, vllm_layout


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return build_llava_15(tmp_path_factory.mktemp("llava-1.5"))


def tensors(folder: Path) -> dict[str, bytes]:
    found = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as handle:
            for name in handle.keys():
                found[name] = handle.get_tensor(name).numpy().tobytes()
    return found


def test_transformers_drops_the_level_of_clip_and_siglip_towers_only():
    assert dropped_level("clip_vision_model") == dropped_level("siglip_vision_model") == dropped_level("siglip2_vision_model") == "vision_model"
    assert dropped_level("pixtral") is None and dropped_level("idefics3_vision") is None and dropped_level("no-such-type") is None


def test_a_llava_checkpoint_saved_by_transformers_is_copied_with_the_released_names(llava, tmp_path):
    saved = tensors(llava)
    tower = sorted(name for name in saved if name.startswith("vision_tower."))
    assert tower and not any(name.startswith("vision_tower.vision_model.") for name in tower)  # what transformers 5 writes
    served = vllm_layout(llava, model_digest(llava), tmp_path)
    assert served.parent == tmp_path / "vllm-layout" and served.name == model_digest(llava).removeprefix("sha256:")[:16]
    copied = tensors(served)
    renamed = {name: name.replace("vision_tower.", "vision_tower.vision_model.", 1) if name in tower else name for name in saved}
    assert set(copied) == set(renamed.values())
    assert all(copied[renamed[name]] == data for name, data in saved.items())  # byte for byte
    header(next(served.glob("*.safetensors")))  # a valid header (8-byte aligned JSON)
    for file in llava.iterdir():
        if file.suffix != ".safetensors":
            assert (served / file.name).read_bytes() == file.read_bytes(), file.name
    # transformers reads the released layout too, and gives the same model
    from transformers import AutoModelForImageTextToText

    ids = torch.tensor([[1, 5, 9, 14, 20]])
    with torch.no_grad():
        logits = [AutoModelForImageTextToText.from_pretrained(folder).eval()(input_ids=ids).logits for folder in (llava, served)]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)


def test_the_copy_is_made_once_and_a_sharded_index_follows_the_names(tmp_path):
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    single = build_llava_15(tmp_path / "single")
    sharded = tmp_path / "sharded"
    AutoModelForImageTextToText.from_pretrained(single).save_pretrained(sharded, max_shard_size="20KB")
    for file in single.iterdir():  # the processor and tokenizer files
        if file.suffix != ".safetensors" and not (sharded / file.name).exists():
            (sharded / file.name).write_bytes(file.read_bytes())
    assert len(list(sharded.glob("*.safetensors"))) > 1
    served = vllm_layout(sharded, model_digest(sharded), tmp_path / "cache")
    index = json.loads((served / "model.safetensors.index.json").read_text())
    by_shard = {name: shard for shard in served.glob("*.safetensors") for name in header(shard) if name != "__metadata__"}
    assert index["weight_map"] == {name: shard.name for name, shard in by_shard.items()}
    assert any(name.startswith("vision_tower.vision_model.") for name in index["weight_map"])
    stamp = (served / ".complete").stat().st_mtime_ns
    assert vllm_layout(sharded, model_digest(sharded), tmp_path / "cache") == served and (served / ".complete").stat().st_mtime_ns == stamp


def test_a_checkpoint_vllm_reads_as_it_is_is_served_from_its_own_folder(tmp_path):
    torch.manual_seed(0)
    qwen = build_qwen2_vl(tmp_path / "qwen2-vl")
    assert planned_renames(qwen) == {}
    assert vllm_layout(qwen, model_digest(qwen), tmp_path / "cache") == qwen
    assert not (tmp_path / "cache").exists()


def test_a_flattened_tower_vlgate_cannot_place_is_one_line(llava, tmp_path):
    """A SigLIP/CLIP tower saved without its level under a name vlgate does not know."""
    folder = tmp_path / "odd"
    folder.mkdir()
    for file in llava.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    weights = folder / "model.safetensors"
    text = weights.read_bytes()
    length = int.from_bytes(text[:8], "little")
    names = json.loads(text[8 : 8 + length])
    odd = json.dumps({name.replace("vision_tower.", "image_encoder.", 1): value for name, value in names.items()}).encode()
    odd += b" " * (-len(odd) % 8)
    weights.write_bytes(len(odd).to_bytes(8, "little") + odd + text[8 + length :])
    with pytest.raises(BackendError, match=r"^checkpoint .*odd: its clip_vision_model vision tower is saved without the 'vision_model' level vLLM reads, .*vLLM cannot serve it$"):
        vllm_layout(folder, model_digest(folder), tmp_path / "cache")


def test_vllm_layout_prints_the_folder_to_serve(llava, tmp_path, capsys):
    assert main(["vllm-layout", str(llava), "--cache", str(tmp_path)]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.parent == tmp_path / "vllm-layout" and any(name.startswith("vision_tower.vision_model.") for name in header(printed / "model.safetensors"))
    assert main(["vllm-layout", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith(f"vlgate vllm-layout: model '{tmp_path / 'nowhere'}': no such folder")
