"""The transformers backend on the synthetic world's checkpoints: option probabilities equal
the model's own softmax, the shared-prefix path equals the whole-prompt path, load policy."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vlgate.evaluators import prompts
from vlgate.evaluators.backends.base import BackendError, ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.loading import LoadPolicy, model_digest, resolve_model
from vlgate.evaluators.backends.transformers_backend import TransformersBackend, option_token_ids
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts

pytestmark = pytest.mark.world


@pytest.fixture(scope="module")
def vlm(tiny_world):
    out, manifest = tiny_world
    return TransformersBackend.load(out / manifest["checkpoints"]["vlm"]["3"])


@pytest.fixture(scope="module")
def mc_row(tiny_world):
    out, _ = tiny_world
    row = json.loads((out / "data" / "mc" / "items.jsonl").read_text().splitlines()[0])
    return row, Image.open(out / "data" / "mc" / row["image"]).convert("RGB")


def test_option_token_ids_merge_spellings_and_refuse_shared_tokens(vlm):
    tokenizer = vlm.tokenizer
    # the world's tokenizer lower-cases: "A", "a", " A" are one token
    assert option_token_ids(tokenizer, ("A", "B")) == [[tokenizer.convert_tokens_to_ids("a")], [tokenizer.convert_tokens_to_ids("b")]]
    assert option_token_ids(tokenizer, ("Yes", "No"))[0] == [tokenizer.convert_tokens_to_ids("yes")]
    with pytest.raises(BackendError, match="share their first token"):
        option_token_ids(tokenizer, ("Yes", "yes"))


def test_choice_probs_are_the_models_softmax_renormalised_over_the_options(vlm, mc_row):
    row, image = mc_row
    prompt = prompts.mc_prompt(row["question"], row["options"])
    (probs,) = vlm.choice_probs([ChoiceRequest((image,), prompt, ("A", "B", "C", "D"))])
    text = vlm.chat_text(prompt, 1)
    inputs = vlm.processor(images=[image], text=[text], return_tensors="pt")
    with torch.no_grad():
        logits = vlm.model(**inputs).logits[0, -1]
    full = torch.softmax(logits, -1)
    letters = [vlm.tokenizer.convert_tokens_to_ids(c) for c in "abcd"]
    expected = (full[letters] / full[letters].sum()).numpy()
    np.testing.assert_allclose(probs, expected, rtol=1e-5)
    assert probs.sum() == pytest.approx(1.0)


def test_shared_prefix_gives_the_same_probabilities_as_whole_prompts(vlm, mc_row):
    row, image = mc_row
    probes = [ChoiceRequest((image,), lcm_prompts.yes_no_probe(row["question"], o), ("Yes", "No"), shared_prefix=row["question"]) for o in row["options"]]
    shared = np.array(vlm.choice_probs(probes))
    whole = np.array(vlm.choice_probs([ChoiceRequest(r.images, r.prompt, r.options) for r in probes]))
    np.testing.assert_allclose(shared, whole, atol=1e-6)
    # the probes differ only in the option: the model must not see them as one prompt
    assert len({tuple(np.round(p, 8)) for p in shared}) > 1


def test_batched_left_padding_gives_the_same_probabilities_as_one_by_one(vlm, tiny_world):
    out, _ = tiny_world
    rows = [json.loads(line) for line in (out / "data" / "yesno" / "items.jsonl").read_text().splitlines()[:5]]
    requests = [ChoiceRequest((Image.open(out / "data" / "yesno" / r["image"]).convert("RGB"),), f"{r['question']} {prompts.YES_NO_INSTRUCTION}" + " please" * i, ("Yes", "No")) for i, r in enumerate(rows)]
    together = np.array(vlm.choice_probs(requests))
    alone = np.array([vlm.choice_probs([request])[0] for request in requests])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_generate_returns_only_new_text(vlm, mc_row):
    _, image = mc_row
    (text,) = vlm.generate([GenerateRequest((image,), "Describe the image.", max_new_tokens=3)])
    assert isinstance(text, str) and 1 <= len(text.split()) <= 3 and "assistant" not in text


def test_text_only_llm_scores_and_refuses_images(tiny_world, mc_row):
    out, manifest = tiny_world
    llm = TransformersBackend.load(out / manifest["checkpoints"]["llm_agent"])
    assert not llm.has_vision
    (probs,) = llm.choice_probs([ChoiceRequest((), "Are there more red shapes than blue shapes? Please answer yes or no.", ("Yes", "No"))])
    assert probs.shape == (2,) and probs.sum() == pytest.approx(1.0)
    with pytest.raises(BackendError, match="text-only"):
        llm.choice_probs([ChoiceRequest((mc_row[1],), "Is there a circle?", ("Yes", "No"))])


def test_digest_identifies_weights_not_location(tiny_world, tmp_path):
    out, manifest = tiny_world
    source = out / manifest["checkpoints"]["vlm"]["3"]
    copy = tmp_path / "copy"
    copy.mkdir()
    for file in source.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    assert model_digest(copy) == model_digest(source) != model_digest(out / manifest["checkpoints"]["vlm"]["0"])


def _tiny_checkpoint_folder(tiny_world, tmp_path: Path) -> Path:
    out, manifest = tiny_world
    source = out / manifest["checkpoints"]["llm_agent"]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for file in source.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    return folder


def test_checkpoint_asking_for_remote_code_is_refused(tiny_world, tmp_path):
    folder = _tiny_checkpoint_folder(tiny_world, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BackendError, match="needs remote code"):
        TransformersBackend.load(folder)


def test_pickle_only_checkpoint_is_refused_unless_the_policy_allows_it(tiny_world, tmp_path):
    from safetensors.torch import load_file

    folder = _tiny_checkpoint_folder(tiny_world, tmp_path)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(BackendError, match="pickles only"):
        TransformersBackend.load(folder)
    loaded = TransformersBackend.load(folder, policy=LoadPolicy(allow_pickle=True))
    assert loaded.info.digest.startswith("sha256:")
    # an empty, unrelated safetensors file beside the pickle does not make it safe
    (folder / "adapter.safetensors").write_bytes(b"")
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(BackendError, match=r"pickles only \(pytorch_model.bin\)"):
        TransformersBackend.load(folder)


def test_the_checkpoint_check_matches_each_pickle_with_its_safetensors_copy(tmp_path):
    from vlgate.evaluators.backends.loading import check_checkpoint, has_safetensors_copy

    (tmp_path / "unet").mkdir()
    for name in ("pytorch_model.bin", "unet/diffusion_pytorch_model.bin", "pytorch_model-00001-of-00002.bin", "training_args.bin"):
        (tmp_path / name).write_bytes(b"pickle")
    assert not has_safetensors_copy(tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"weights")
    assert has_safetensors_copy(tmp_path / "pytorch_model.bin") and has_safetensors_copy(tmp_path / "unet" / "diffusion_pytorch_model.bin")
    with pytest.raises(BackendError, match=r"pickles only \(pytorch_model-00001-of-00002.bin\)"):
        check_checkpoint(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    check_checkpoint(tmp_path)  # every pickle has its safetensors copy; training_args.bin is never weights


def test_missing_reference_names_what_was_tried(tmp_path):
    with pytest.raises(BackendError, match="no such folder"):
        resolve_model(str(tmp_path / "nowhere"))


def test_model_loads_from_an_mlflow_run_artifact(tiny_world, tmp_path, mc_row):
    """A checkpoint logged to an MLflow run loads through its runs:/ URI, with the same outputs."""
    import mlflow

    out, manifest = tiny_world
    source = out / manifest["checkpoints"]["vlm"]["3"]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("loading", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment) as run:
        mlflow.log_artifacts(str(source), artifact_path="checkpoint")
    try:
        backend = TransformersBackend.load(f"runs:/{run.info.run_id}/checkpoint", cache_dir=tmp_path / "cache")
    finally:
        mlflow.set_tracking_uri(None)
    row, image = mc_row
    request = ChoiceRequest((image,), prompts.mc_prompt(row["question"], row["options"]), ("A", "B", "C", "D"))
    direct = TransformersBackend.load(source)
    np.testing.assert_allclose(backend.choice_probs([request])[0], direct.choice_probs([request])[0], rtol=1e-6)
    assert backend.info.digest == direct.info.digest
