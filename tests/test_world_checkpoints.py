"""Synthetic world checkpoints: offline round trips, safetensors only, the make-world cache."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModel, AutoModelForImageTextToText, AutoProcessor

from vlgate.cli.main import main
from vlgate.evaluators import prompts
from vlgate.evaluators.world.architectures import IDEFICS3_SPECIAL_TOKENS, build_idefics3_vlm, build_vlm
from vlgate.evaluators.world.build import TrainingRecipe, build_world
from vlgate.evaluators.world.curriculum import reasoning_prompt_text
from vlgate.evaluators.world.tokenizer import build_tokenizer, chat_prompt, text_chat_prompt, world_tokenizer, world_vocabulary
from vlgate.evaluators.world.training import build_llm, build_vlm_versions, save_checkpoint
from vlgate.evaluators.world.vllm_padding import SERVED_HEAD_DIM, _rotary_positions, pad_attention_heads

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def world(tiny_world):
    return tiny_world


def test_tokenizer_is_word_level_and_lowercases():
    tokenizer = build_tokenizer(world_vocabulary(["What color is the circle?"]))
    ids = tokenizer("What COLOR is the circle?", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["what", "color", "is", "the", "circle", "?"]
    assert tokenizer.convert_tokens_to_ids("<unk>") not in ids


def test_vlm_round_trips_offline_with_identical_logits(world, monkeypatch):
    out, manifest = world
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = out / manifest["checkpoints"]["vlm"]["3"]
    assert (path / "model.safetensors").is_file() and not list(path.glob("*.bin"))
    model = AutoModelForImageTextToText.from_pretrained(path, use_safetensors=True).eval()
    processor = AutoProcessor.from_pretrained(path)
    row = json.loads((out / "data" / "mc" / "items.jsonl").read_text().splitlines()[0])
    prompt = chat_prompt(processor, prompts.mc_prompt(row["question"], row["options"]))
    assert prompt.startswith("USER: <image>\n") and prompt.endswith("ASSISTANT:")
    image = Image.open(out / "data" / "mc" / row["image"]).convert("RGB")
    inputs = processor(images=[image], text=[prompt], return_tensors="pt")
    with torch.no_grad():
        loaded = model(**inputs, logits_to_keep=1).logits
    # the same seed rebuilds the same weights, hence the same logits
    again = build_vlm_versions(world_tokenizer(out / "data", seed=0), out / "again", steps=(3,), seed=0)[3]
    assert pad_attention_heads(again)  # as the world's build does after training
    rebuilt_model = AutoModelForImageTextToText.from_pretrained(again).eval()
    with torch.no_grad():
        rebuilt = rebuilt_model(**inputs, logits_to_keep=1).logits
    torch.testing.assert_close(loaded, rebuilt)
    card = json.loads((path / "vlgate_checkpoint.json").read_text())
    assert card["train_steps"] == 3 and card["architecture"] == "LlavaForConditionalGeneration"


def test_padding_the_attention_heads_keeps_the_model_s_function(tmp_path):
    """The world's VLMs are served by vLLM with their text heads zero-padded from 16 to 32
    dimensions: every position's logits as before (float rounding apart), the padding all
    zeros, and a second pass changes nothing."""
    tokenizer = build_tokenizer(world_vocabulary(["Is there a red circle? Answer yes or no.", "Describe the image."]))
    model, processor = build_vlm(tokenizer, seed=3)
    folder = save_checkpoint(model, processor, tmp_path / "vlm", {})
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 48, 3), dtype=np.uint8))
    inputs = processor(images=[image, image], text=[chat_prompt(processor, "Is there a red circle? Answer yes or no."), chat_prompt(processor, "Describe the image.")], return_tensors="pt", padding=True)
    with torch.no_grad():
        before = model.eval()(**inputs).logits
    assert model.config.text_config.head_dim == 16
    assert pad_attention_heads(folder)
    padded = AutoModelForImageTextToText.from_pretrained(folder).eval()
    assert padded.config.text_config.head_dim == SERVED_HEAD_DIM
    with torch.no_grad():
        after = padded(**inputs).logits
    assert before.abs().max() > 0.1  # random weights: logits far from zero, so the comparison means something
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)
    attention = padded.model.language_model.layers[0].self_attn
    heads = attention.q_proj.weight.shape[0] // 32
    used = (torch.arange(heads)[:, None] * 32 + _rotary_positions(16, 32)[None, :]).reshape(-1)
    unused = torch.ones(heads * 32, dtype=torch.bool)
    unused[used] = False
    assert (attention.q_proj.weight[unused] == 0).all() and (attention.o_proj.weight[:, unused] == 0).all()
    assert (attention.q_proj.weight[used] != 0).any(axis=1).all()
    weights = (folder / "model.safetensors").read_bytes()
    assert not pad_attention_heads(folder) and (folder / "model.safetensors").read_bytes() == weights


def test_padding_a_text_only_agent_s_heads_keeps_its_function(tmp_path):
    """DeCC's LLM agent (a text-only Llama, heads 16 wide) padded for vLLM as the VLMs are:
    the same logits at every position, grouped key/value heads included."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    folder = tmp_path / "agent"
    model.save_pretrained(folder)
    tokens = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        before = model(tokens).logits
    assert pad_attention_heads(folder)
    padded = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert padded.config.head_dim == SERVED_HEAD_DIM and padded.model.layers[0].self_attn.k_proj.weight.shape[0] == 2 * SERVED_HEAD_DIM
    with torch.no_grad():
        after = padded(tokens).logits
    assert before.abs().max() > 0.05
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)
    assert not pad_attention_heads(folder)


def test_versions_share_initial_weights_and_differ_after_training(world):
    out, manifest = world
    untrained = AutoModelForImageTextToText.from_pretrained(out / manifest["checkpoints"]["vlm"]["0"])
    trained = AutoModelForImageTextToText.from_pretrained(out / manifest["checkpoints"]["vlm"]["3"])
    a, b = untrained.state_dict(), trained.state_dict()
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_vit_encoder_round_trips_offline(world, monkeypatch):
    out, manifest = world
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = out / manifest["checkpoints"]["vit_encoder"]
    model = AutoModel.from_pretrained(path, use_safetensors=True).eval()
    processor = AutoProcessor.from_pretrained(path)
    image = Image.open(next((out / "data" / "genception" / "single").glob("*.png"))).convert("RGB")
    with torch.no_grad():
        cls = model(**processor(images=image, return_tensors="pt")).last_hidden_state[:, 0]
    assert cls.shape == (1, 32) and torch.isfinite(cls).all()


def test_make_world_reuses_a_matching_world(world, capsys):
    out, manifest = world
    assert manifest["cached"] is False and set(manifest["data"]) == {"mc", "yesno", "nb", "vlind", "decc", "genception"}
    again = build_world(out, "small", seed=0, training=TrainingRecipe(vlm_steps=(0, 3), llm_steps=2, fault_steps=2))
    assert again["cached"] is True and again["seconds"] == manifest["seconds"]


def test_make_world_cli_writes_under_vlgate_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLGATE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("vlgate.evaluators.world.build.VLM_STEPS", (0,))
    monkeypatch.setattr("vlgate.evaluators.world.build.LLM_STEPS", 0)
    monkeypatch.setattr("vlgate.evaluators.world.build.FAULT_STEPS", 0)
    assert main(["make-world", "--json"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    world = tmp_path / "home" / "world"
    assert printed["world"] == str(world) and (world / "manifest.json").is_file()
    assert printed["files"] == json.loads((world / "manifest.json").read_text())["files"]
    # progress on stderr (stdout stays JSON): each phase as it starts and as it ends with its
    # time, in the manifest's order, and each checkpoint as it is saved
    lines = captured.err.splitlines()
    phases = [name for name in printed["seconds"] if name != "total"]
    assert [line.split(":")[1].strip() for line in lines if line.endswith(" …")] == phases
    assert [line.split()[1] for line in lines if " done in " in line] == phases
    saved = {line.split()[2] for line in lines if line.startswith("make-world:   saved ")}
    assert saved == {card.parent.relative_to(world).as_posix() for card in world.glob("checkpoints/*/vlgate_checkpoint.json")} and "checkpoints/vlm-steps0" in saved
    assert lines[-1].startswith(f"make-world: {world} trained in ")

    # without --json, a summary: what is there, and where the manifest of every file's hash is
    assert main(["make-world", "--quiet"]) == 0
    captured = capsys.readouterr()
    summary = captured.out.splitlines()
    assert captured.err == "" and len(summary) == 2 + len(printed["checkpoints"]) + 1
    assert summary[0] == f"world: {world} (small data sets, seed 0, llava)"
    assert summary[1] == f"  data sets: {', '.join(printed['data'])}"
    assert f"  checkpoints vlm: {', '.join(printed['checkpoints']['vlm'])}" in summary
    assert summary[-1] == f"  {len(printed['files']):,} files, each with its hash in {world / 'manifest.json'}"


def test_llm_agent_round_trips_and_shares_the_tokenizer(world, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, manifest = world
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = out / manifest["checkpoints"]["llm_agent"]
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    vlm_tokenizer = AutoProcessor.from_pretrained(out / manifest["checkpoints"]["vlm"]["0"]).tokenizer
    assert tokenizer.get_vocab() == vlm_tokenizer.get_vocab()
    text = reasoning_prompt_text(["How many red shapes are there?"], ["2"], "Are there more red shapes than blue shapes?")
    inputs = tokenizer([text_chat_prompt(tokenizer, text)], return_tensors="pt")
    assert tokenizer.unk_token_id not in inputs["input_ids"][0].tolist()
    with torch.no_grad():
        assert model(**inputs, logits_to_keep=1).logits.shape == (1, 1, len(tokenizer))


def test_trained_llm_agent_reasons_over_sub_answers(tmp_path):
    """300 steps on fresh reasoning items: held-out DeCC items of the world answered from
    their sub-answers far above the majority answer's rate (measured: 24/24 vs 16/24)."""
    from vlgate.evaluators.world.datasets import build_datasets

    data = build_datasets(tmp_path / "data", "small", seed=0)
    tokenizer = world_tokenizer(tmp_path / "data", seed=0)
    model_path = build_llm(tokenizer, tmp_path / "llm", steps=300, seed=0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    rows = [json.loads(line) for line in data["decc"].read_text().splitlines()]
    chats = [text_chat_prompt(tokenizer, reasoning_prompt_text(r["sub_questions"], r["sub_answers"], r["question"])) for r in rows]
    with torch.no_grad():
        logits = model(**tokenizer(chats, return_tensors="pt", padding=True), logits_to_keep=1).logits[:, -1, :]
    yes_no = [tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")]
    predicted = [("yes", "no")[int(torch.argmax(row[yes_no]))] for row in logits]
    accuracy = sum(p == r["answer"] for p, r in zip(predicted, rows)) / len(rows)
    majority = max(sum(r["answer"] == "yes" for r in rows), sum(r["answer"] == "no" for r in rows)) / len(rows)
    assert accuracy >= 0.9 > majority


@pytest.mark.timeout(900)
def test_trained_vlm_beats_chance_and_untrained_does_not(default_world, tmp_path):
    """On 400 MC and 400 yes/no items drawn with another seed than any training or world
    data (measured on these 400 + 400: untrained MC 74, yes/no 200; 10,000 steps MC 338
    (colour 134/134, shape 133/133, count 71/133), yes/no 381). Thresholds sit several
    binomial standard deviations from chance and below the measured values."""
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend
    from vlgate.evaluators.world.datasets import build_datasets
    from vlgate.evaluators.world.heldout import held_out_requests, hits_by_group

    out, manifest = default_world
    build_datasets(tmp_path / "held-out", "medium", seed=12345)
    rows = held_out_requests(tmp_path / "held-out")
    accuracy = {}
    for steps in ("0", "10000"):
        hits = hits_by_group(TransformersBackend.load(out / manifest["checkpoints"]["vlm"][steps], batch_size=64), rows)
        accuracy[steps] = {group: hit / total for group, (hit, total) in hits.items()}
    # chance: MC 0.25 (sd 0.022 on 400), yes/no 0.5 (sd 0.025)
    assert accuracy["10000"]["mc"] >= 0.75 and accuracy["10000"]["yesno"] >= 0.85, accuracy
    assert accuracy["0"]["mc"] <= 0.33 and accuracy["0"]["yesno"] <= 0.57, accuracy
    assert accuracy["10000"]["mc/color"] >= 0.95 and accuracy["10000"]["mc/shape"] >= 0.95, accuracy  # read off the image outright


def test_default_world_build_is_cached(default_world):
    out, manifest = default_world
    assert manifest["vlm_steps"] == [0, 3000, 10000] and manifest["fault_steps"] == 300
    again = build_world(out, "small", seed=0)
    assert again["cached"] is True
    assert set(manifest["checkpoints"]["vlm_faults"]) == {"language-prior", "answer-prior", "poor-description", "miscount"}
    for fault, folder in manifest["checkpoints"]["vlm_faults"].items():
        card = json.loads((out / folder / "vlgate_checkpoint.json").read_text())
        assert (card["fault"], card["fine_tuned_from"], card["train_steps"]) == (fault, "vlm-steps10000", 10300)


def test_the_same_seed_builds_the_same_weights_whatever_torch_threads_the_caller_set(tmp_path):
    import hashlib

    def weights(folder):
        return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.safetensors"))}

    before = torch.get_num_threads()
    built = {}
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            build_world(tmp_path / f"t{threads}", "small", seed=0, training=TrainingRecipe(vlm_steps=(0, 5), llm_steps=5, fault_steps=5))
            assert torch.get_num_threads() == threads  # the caller's setting is given back
            built[threads] = weights(tmp_path / f"t{threads}")
    finally:
        torch.set_num_threads(before)
    assert len(built[1]) == 12 and built[1] == built[3]  # 2 VLMs, 4 faulty ones, LLM, ViT, CLIP, 3 diffusion parts


def test_the_shipped_world_is_the_current_format_matches_its_hashes_and_loads_offline(monkeypatch):
    from vlgate.evaluators.backends.base import ChoiceRequest, GenerateRequest
    from vlgate.evaluators.backends.encoders import ClipImageEncoder, VitClsEncoder
    from vlgate.evaluators.backends.image_generators import DiffusersGenerator
    from vlgate.evaluators.backends.transformers_backend import TransformersBackend
    from vlgate.evaluators.world.build import BUILD_THREADS, FAULT_STEPS, LLM_STEPS, SHIPPED_WORLD, VLM_STEPS, WORLD_FORMAT, file_hashes, shipped_manifest

    manifest = shipped_manifest()
    # what `vlgate make-world` asks for by default is what ships
    assert (manifest["format"], manifest["size"], manifest["seed"], manifest["threads"]) == (WORLD_FORMAT, "small", 0, BUILD_THREADS)
    assert (manifest["vlm_steps"], manifest["llm_steps"], manifest["fault_steps"]) == (list(VLM_STEPS), LLM_STEPS, FAULT_STEPS)
    files = file_hashes(SHIPPED_WORLD)
    assert files == manifest["files"]
    assert sum((SHIPPED_WORLD / name).stat().st_size for name in files) < 50 * 2**20
    weights = [name for name in files if name.startswith("checkpoints/") and name.endswith((".safetensors", ".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    assert weights and all(name.endswith(".safetensors") for name in weights)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    checkpoints = manifest["checkpoints"]
    image = Image.open(next((SHIPPED_WORLD / "data" / "genception" / "single").glob("*.png"))).convert("RGB")
    request = ChoiceRequest((image,), "Is there a shape in the image?", ("Yes", "No"))
    for folder in [*checkpoints["vlm"].values(), *checkpoints["vlm_faults"].values()]:
        # heads as wide as vLLM's CPU attention runs (see test_vllm.py for the engine's numbers)
        assert json.loads((SHIPPED_WORLD / folder / "config.json").read_text())["text_config"]["head_dim"] == SERVED_HEAD_DIM
        vlm = TransformersBackend.load(SHIPPED_WORLD / folder)
        (probs,) = vlm.choice_probs([request])
        assert probs.shape == (2,) and abs(probs.sum() - 1) < 1e-6
        vlm.close()
    llm = TransformersBackend.load(SHIPPED_WORLD / checkpoints["llm_agent"])
    assert isinstance(llm.generate([GenerateRequest((), "How many red shapes are there?", 2)])[0], str)
    for encoder_class, name in ((VitClsEncoder, "vit_encoder"), (ClipImageEncoder, "clip")):
        features = encoder_class.load(SHIPPED_WORLD / checkpoints[name]).embed([image])
        assert features.shape[0] == 1 and np.isfinite(features).all()
    (drawn,) = DiffusersGenerator.load(SHIPPED_WORLD / checkpoints["diffusion"]).generate_images(["a red circle"], seed=0)
    assert drawn.size[0] > 0


def test_make_world_copies_the_shipped_world_and_refuses_a_damaged_one(tmp_path, monkeypatch):
    from vlgate.evaluators.world import build
    from vlgate.evaluators.world.build import DamagedWorldError, shipped_manifest

    manifest = build_world(tmp_path / "w", "small", seed=0)
    assert manifest["shipped"] is True and manifest["cached"] is False
    assert manifest["files"] == shipped_manifest()["files"]
    assert build_world(tmp_path / "w", "small", seed=0)["cached"] is True
    # a damaged copy is refused by name, not used
    weights = tmp_path / "w" / manifest["checkpoints"]["vlm"]["10000"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    monkeypatch.setattr(build, "SHIPPED_WORLD", tmp_path / "w")
    with pytest.raises(DamagedWorldError, match=r"1 files differ, e.g. checkpoints/vlm-steps10000/model.safetensors"):
        build.copy_shipped_world(tmp_path / "copy")


def test_the_medium_world_is_the_shipped_models_on_more_items_every_word_of_which_they_know(tmp_path):
    """The medium world copies the shipped weights (no training) and draws its data sets at
    the medium size; every word its models read (questions, options, contexts: everything
    but item ids and image paths) is in their vocabulary, so no prompt reaches them as <unk>."""
    import re

    from transformers import AutoTokenizer

    from vlgate.evaluators.world.build import shipped_manifest

    manifest = build_world(tmp_path / "w", "medium", seed=0)
    shipped = shipped_manifest()
    assert (manifest["size"], manifest["models"], manifest["shipped"], manifest["cached"]) == ("medium", "shipped", True, False)
    assert {k: v for k, v in manifest["files"].items() if k.startswith("checkpoints/")} == {k: v for k, v in shipped["files"].items() if k.startswith("checkpoints/")}
    counts = {name: len((tmp_path / "w" / path).read_text().splitlines()) for name, path in manifest["data"].items() if path.endswith(".jsonl")}
    assert counts == {"mc": 400, "yesno": 400, "nb": 200, "vlind": 120, "decc": 200}
    assert build_world(tmp_path / "w", "medium", seed=0)["cached"] is True

    vocabulary = set(AutoTokenizer.from_pretrained(tmp_path / "w" / manifest["checkpoints"]["vlm"]["10000"]).get_vocab())
    unknown = set()
    for path in (tmp_path / "w" / "data").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            read = {key: value for key, value in json.loads(line).items() if key != "id" and "image" not in key}
            unknown |= {word for word in re.findall(r"\w+|[^\w\s]", json.dumps(read).lower()) if word not in vocabulary}
    assert not unknown


def test_idefics3_world_vlm_expands_its_image_into_whole_special_tokens_and_round_trips(tmp_path, monkeypatch):
    """The Idefics3 VLM (the one vLLM serves on a CPU): every special token its processor
    looks up is one token of the world vocabulary (not <unk>, not split at '-'), the image
    becomes (32/8)²/2² = 4 image tokens between its markers, the LLaVA tokenizer is left
    as it was, and the saved folder loads offline with identical logits."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = build_tokenizer(world_vocabulary(["What color is the circle?"]))
    size = len(tokenizer)
    model, processor = build_idefics3_vlm(tokenizer)
    assert len(tokenizer) == size and len(processor.tokenizer) == size + len(IDEFICS3_SPECIAL_TOKENS)
    unknown = processor.tokenizer.convert_tokens_to_ids("<unk>")
    assert unknown not in processor.tokenizer.convert_tokens_to_ids(IDEFICS3_SPECIAL_TOKENS)
    image = Image.new("RGB", (64, 64), (200, 30, 30))
    inputs = processor(images=[image], text=[chat_prompt(processor, "What color is the circle?")], return_tensors="pt")
    tokens = processor.tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
    assert tokens[:9] == ["user", ":", "<fake_token_around_image>", "<global-img>", *["<image>"] * 4, "<fake_token_around_image>"]
    assert model.config.text_config.head_dim == 32 and model.config.vision_config.hidden_size // model.config.vision_config.num_attention_heads == 32
    path = save_checkpoint(model.eval(), processor, tmp_path / "idefics3", {"kind": "test"})
    loaded = AutoModelForImageTextToText.from_pretrained(path, use_safetensors=True).eval()
    again = AutoProcessor.from_pretrained(path)(images=[image], text=[chat_prompt(processor, "What color is the circle?")], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(loaded(**again).logits, model(**inputs).logits)
