"""The synthetic world's image side: the BPE tokenizer, the tiny CLIP, the
tiny diffusion pipeline, the description parser, and the generator and encoder backends."""

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoProcessor, CLIPModel, CLIPTokenizer

from vlgate.evaluators.backends.base import BackendError
from vlgate.evaluators.backends.encoders import ClipImageEncoder, VitClsEncoder
from vlgate.evaluators.backends.image_generators import DiffusersGenerator, DiffusionSettings, truncate_prompt
from vlgate.evaluators.backends.loading import LoadPolicy, model_digest
from vlgate.evaluators.genception.prompts import genception_generate
from vlgate.evaluators.scenes import renderer
from vlgate.evaluators.scenes.generator import SceneRendererGenerator
from vlgate.evaluators.scenes.scene import BACKGROUND, COLORS, GRID, SHAPES, Scene, Shape, random_scene, render
from vlgate.evaluators.world import generators as gen
from vlgate.evaluators.world.datasets import GENCEPTION_CATEGORIES
from vlgate.evaluators.world.training import build_vit_encoder

pytestmark = pytest.mark.world

CLIP_TEST_STEPS = 150


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Training and generation here are tiny: one thread is faster than two fighting over a busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    return gen.build_clip(tmp_path_factory.mktemp("clip"), seed=0, steps=CLIP_TEST_STEPS)


@pytest.fixture(scope="module")
def diffusion_path(tmp_path_factory):
    return gen.build_diffusion_pipeline(tmp_path_factory.mktemp("sd"), seed=0)


@pytest.fixture(scope="module")
def vit_path(tmp_path_factory):
    return build_vit_encoder(tmp_path_factory.mktemp("vit"))


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert("RGB"), dtype=np.int16)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- tokenizer -----------------------------------------------------------------------------


def test_bpe_tokenizer_distinguishes_prompts_and_round_trips(tmp_path):
    tokenizer = gen.build_clip_tokenizer(gen.world_texts(0), tmp_path / "bpe")
    assert (tmp_path / "bpe" / "vocab.json").is_file() and (tmp_path / "bpe" / "merges.txt").read_text().startswith("#version")
    prompts = ["There is a red circle.", "There is a blue circle.", "There is a red square, a green triangle.", genception_generate("There is nothing.")]
    encoded = [tokenizer(p)["input_ids"] for p in prompts]
    assert len({tuple(ids) for ids in encoded}) == len(prompts)
    # the world's words are whole tokens: "There is a red circle." is bos + 6 + eos
    assert tokenizer.convert_ids_to_tokens(encoded[0]) == ["<|startoftext|>", "there</w>", "is</w>", "a</w>", "red</w>", "circle</w>", ".</w>", "<|endoftext|>"]
    # an empty vocabulary (what a mis-loaded tokenizer has) maps every piece of every prompt to one id
    empty = CLIPTokenizer()
    assert {token for p in prompts for token in empty(p)["input_ids"][1:-1]} == {empty.unk_token_id}
    # words it never saw fall back to byte symbols, never the unknown token (which is CLIP's eos)
    unseen = tokenizer("zebra ünïcode 🦓")["input_ids"]
    assert tokenizer.eos_token_id not in unseen[:-1] and len(unseen) > 4
    assert tokenizer.model_max_length == 77
    assert len(tokenizer(" ".join(["red circle"] * 100), truncation=True)["input_ids"]) == 77
    tokenizer.save_pretrained(tmp_path / "saved")
    for folder in (tmp_path / "saved", tmp_path / "bpe"):  # tokenizer.json, or the bare vocab + merges
        reloaded = CLIPTokenizer.from_pretrained(folder)
        assert [reloaded(p)["input_ids"] for p in prompts] == encoded


# --- CLIP ----------------------------------------------------------------------------------


def test_clip_round_trips_offline_with_the_same_logits(clip_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert (clip_path / "model.safetensors").is_file() and not list(clip_path.glob("*.bin"))
    model = CLIPModel.from_pretrained(clip_path, use_safetensors=True).eval()
    processor = AutoProcessor.from_pretrained(clip_path)
    assert isinstance(processor.tokenizer, CLIPTokenizer) and processor.tokenizer.model_max_length == 77
    card = json.loads((clip_path / "vlgate_checkpoint.json").read_text())
    assert card["architecture"] == "CLIPModel" and card["train_steps"] == CLIP_TEST_STEPS
    # the card's accuracy was measured on the model in memory before saving: the reloaded one scores the same
    held_out = gen.held_out_scenes(0)
    assert round(gen.clip_retrieval_accuracy(model, processor, held_out), 4) == card["retrieval_accuracy"]
    inputs = gen.clip_batch(processor, held_out[:4])
    with torch.no_grad():
        first = model(**inputs).logits_per_image
        second = CLIPModel.from_pretrained(clip_path).eval()(**inputs).logits_per_image
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_trained_clip_retrieves_held_out_descriptions_far_above_chance(clip_path, tmp_path):
    """64 held-out scenes whose descriptions the training never saw. Measured (batch 32):
    150 steps → 0.56 (seeds 1 and 2: 0.56, 0.27); 300 steps, the default → 0.66 (0.73,
    0.77); untrained → 0.016, which is chance (1/64)."""
    card = json.loads((clip_path / "vlgate_checkpoint.json").read_text())
    assert card["retrieval_chance"] == round(1 / 64, 4)
    assert card["retrieval_accuracy"] >= 0.2
    untrained = json.loads((gen.build_clip(tmp_path / "untrained", seed=0, steps=0) / "vlgate_checkpoint.json").read_text())
    assert untrained["retrieval_accuracy"] <= 0.1


# --- diffusion -----------------------------------------------------------------------------


def test_diffusion_pipeline_round_trips_offline(diffusion_path, monkeypatch):
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not list(diffusion_path.rglob("*.bin"))
    pipeline = StableDiffusionPipeline.from_pretrained(diffusion_path, use_safetensors=True)
    assert isinstance(pipeline.unet, UNet2DConditionModel) and isinstance(pipeline.vae, AutoencoderKL)
    assert isinstance(pipeline.text_encoder, CLIPTextModel) and isinstance(pipeline.scheduler, DDIMScheduler)
    assert pipeline.safety_checker is None and pipeline.tokenizer.model_max_length == 77
    assert pipeline.unet.config.cross_attention_dim == pipeline.text_encoder.config.hidden_size
    ids = [pipeline.tokenizer(p)["input_ids"] for p in ("There is a red circle.", "There is a blue square.")]
    assert ids[0] != ids[1]
    image = pipeline("There is a red circle.", num_inference_steps=2, guidance_scale=1.0, generator=torch.Generator().manual_seed(0)).images[0]
    assert image.size == (32, 32)


def test_diffusers_generator_is_seeded_and_reads_the_prompt(diffusion_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    generator = DiffusersGenerator.load(diffusion_path, settings=DiffusionSettings(num_inference_steps=2))
    assert generator.info.digest == model_digest(diffusion_path) and generator.info.extra["dtype"] == "float32"
    prompts = [genception_generate("There is a red circle."), genception_generate("There is a blue square, a green triangle.")]
    first, again = generator.generate_images(prompts, seed=0), generator.generate_images(prompts, seed=0)
    assert [image.size for image in first] == [(32, 32), (32, 32)] and all(image.mode == "RGB" for image in first)
    assert all(np.array_equal(pixels(a), pixels(b)) for a, b in zip(first, again))
    assert not np.array_equal(pixels(first[0]), pixels(first[1]))  # different prompts
    assert not np.array_equal(pixels(first[0]), pixels(generator.generate_images(prompts[:1], seed=1)[0]))  # different seed
    # a prompt's image does not depend on the batch it ran in
    assert np.array_equal(pixels(first[1]), pixels(generator.generate_images(prompts[1:], seed=0)[0]))


def test_guidance_off_halves_the_unet_batch_and_long_prompts_are_cut(diffusion_path):
    generator = DiffusersGenerator.load(diffusion_path, settings=DiffusionSettings(num_inference_steps=2))
    batches: list[int] = []
    hook = generator.pipeline.unet.register_forward_pre_hook(
        lambda module, args, kwargs: batches.append((args[0] if args else kwargs["sample"]).shape[0]), with_kwargs=True
    )
    try:
        generator.generate_images(["There is a red circle."] * 3)
        generator.guidance_scale = 7.5
        generator.generate_images(["There is a red circle."] * 3)
    finally:
        hook.remove()
    assert batches == [3, 3, 6, 6]  # 2 steps each; classifier-free guidance doubles the batch
    tokenizer = generator.pipeline.tokenizer
    long_prompt = genception_generate(" ".join(["a red circle, a blue square"] * 40))
    cut = truncate_prompt(tokenizer, long_prompt)
    assert len(tokenizer(cut)["input_ids"]) == 77 and truncate_prompt(tokenizer, "There is a red circle.") == "There is a red circle."
    assert generator.generate_images([long_prompt])[0].size == (32, 32)


# --- description → scene -------------------------------------------------------------------


def test_parser_inverts_describe_on_random_scenes():
    rng = np.random.default_rng(0)
    scenes = [gen.random_world_scene(rng, max_shapes=GRID * GRID) for _ in range(200)] + [make(rng) for make in GENCEPTION_CATEGORIES.values() for _ in range(20)]
    scenes.append(Scene(()))
    for scene in scenes:
        parsed = renderer.scene_from_description(scene.describe())
        assert parsed.describe() == scene.describe()
        assert sorted((s.kind, s.color) for s in parsed.shapes) == sorted((s.kind, s.color) for s in scene.shapes)
        assert parsed.props == scene.props


def test_parser_redraws_scenes_pixel_for_pixel_when_their_shapes_fill_the_first_cells():
    """describe() drops the cells, so that is where the parser puts shapes: in the first
    cells, in the order named. Scenes laid out that way, lone shapes (drawn large in any
    cell) and the world's landscapes with the shape in cell 0 come back exactly."""
    rng = np.random.default_rng(1)
    scenes = []
    for _ in range(100):
        n = int(rng.integers(0, GRID * GRID + 1))
        scenes.append(Scene(tuple(Shape(str(rng.choice(SHAPES)), str(rng.choice(list(COLORS))), cell) for cell in range(n))))
    scenes += [random_scene(rng, 1) for _ in range(20)]
    landscape = GENCEPTION_CATEGORIES["landscape"](rng)
    scenes.append(Scene((Shape(landscape.shapes[0].kind, landscape.shapes[0].color, 0),), landscape.background, landscape.props))
    for scene in scenes:
        assert np.array_equal(pixels(render(renderer.scene_from_description(scene.describe()))), pixels(render(scene))), scene.describe()
    # a shape elsewhere moves to the first free cell: same description, different pixels
    moved = Scene((Shape("circle", "red", 0), Shape("square", "blue", 8)))
    assert renderer.scene_from_description(moved.describe()).shapes[1].cell == 1


def test_parser_reads_free_text():
    scene = renderer.scene_from_description("I see two red circles and a Blue Triangle, under a yellow circle sun, above green grass.")
    assert [(s.kind, s.color, s.cell) for s in scene.shapes] == [("circle", "red", 0), ("circle", "red", 1), ("triangle", "blue", 2)]
    assert scene.props == (("sun", "yellow", "circle"), ("grass", "green")) and scene.background == renderer.SKY
    assert renderer.scene_from_description("The sun shines on the grass.").props == (("sun", "yellow", "circle"), ("grass", "green"))
    assert renderer.scene_from_description("a purple sun and a green square sun").props == (("sun", "purple", "circle"),)
    assert len(renderer.scene_from_description("a red square " * 12).shapes) == GRID * GRID
    assert len(renderer.scene_from_description("99999999999 red squares").shapes) == GRID * GRID
    assert renderer.scene_from_description("There are no red circles, 3 green squares.").shapes == tuple(Shape("square", "green", cell) for cell in range(3))
    empty = renderer.scene_from_description("A cat sleeps on a mat.")
    assert empty == Scene(()) and empty.background == BACKGROUND


def test_scene_renderer_generator_draws_the_parsed_scene():
    generator = SceneRendererGenerator(image_size=64)
    assert generator.info.name == "scene-renderer" and generator.info.digest.startswith("sha256:")
    assert SceneRendererGenerator(image_size=32).info.digest == generator.info.digest
    rng = np.random.default_rng(2)
    scenes = [GENCEPTION_CATEGORIES["single"](rng), GENCEPTION_CATEGORIES["multi"](rng), GENCEPTION_CATEGORIES["landscape"](rng)]
    prompts = [genception_generate(s.describe()) for s in scenes]
    images = generator.generate_images(prompts, seed=0)
    for image, scene in zip(images, scenes):
        assert image.size == (64, 64)
        assert np.array_equal(pixels(image), pixels(render(renderer.scene_from_description(scene.describe()), 64)))
    assert np.array_equal(pixels(images[0]), pixels(render(scenes[0], 64)))  # a lone shape comes back exactly
    assert all(np.array_equal(pixels(a), pixels(b)) for a, b in zip(images, generator.generate_images(prompts, seed=7)))


# --- encoders --------------------------------------------------------------------------------


def encoder_images() -> list[Image.Image]:
    rng = np.random.default_rng(3)
    first, second = render(random_scene(rng, 2)), render(random_scene(rng, 3))
    return [first, second, first.copy()]


@pytest.mark.parametrize("kind", ["vit", "clip"])
def test_image_encoders_give_features_per_image(kind, vit_path, clip_path):
    path = vit_path if kind == "vit" else clip_path
    encoder = (VitClsEncoder if kind == "vit" else ClipImageEncoder).load(path)
    images = encoder_images()
    features = encoder.embed(images)
    dimension = 32 if kind == "vit" else 64
    assert features.shape == (3, dimension) and features.dtype == np.float64
    assert cosine(features[0], features[2]) == pytest.approx(1.0, abs=1e-9)
    assert cosine(features[0], features[1]) < 0.999
    assert encoder.info.digest == model_digest(path) and encoder.embed([]).shape == (0, dimension)
    # batching does not change a feature
    encoder.batch_size = 1
    np.testing.assert_allclose(encoder.embed(images), features, rtol=1e-5, atol=1e-6)


def test_clip_encoder_reads_image_embeds(clip_path):
    """The projected image features, unnormalised: forward's image_embeds are them over their norm."""
    encoder = ClipImageEncoder.load(clip_path)
    model, processor = CLIPModel.from_pretrained(clip_path).eval(), AutoProcessor.from_pretrained(clip_path)
    images = encoder_images()
    inputs = processor(images=images, text=["There is a red circle."] * 3, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model(**inputs).image_embeds.numpy()
    features = encoder.embed(images)
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    assert not np.allclose(norms, 1.0)
    np.testing.assert_allclose(features / norms, expected, rtol=1e-5, atol=1e-6)


def test_encoders_refuse_pickles_and_remote_code(vit_path, tmp_path):
    from transformers import AutoModel

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((vit_path / "config.json").read_text())
    torch.save(AutoModel.from_pretrained(vit_path).state_dict(), pickled / "pytorch_model.bin")
    for encoder in (VitClsEncoder, ClipImageEncoder):
        with pytest.raises(BackendError, match="pickles only"):
            encoder.load(pickled)
    remote = tmp_path / "remote"
    remote.mkdir()
    for file in vit_path.iterdir():
        (remote / file.name).write_bytes(file.read_bytes())
    config = json.loads((remote / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModel": "modeling_evil.EvilModel"}}))
    with pytest.raises(BackendError, match="remote code"):
        VitClsEncoder.load(remote)
    # a CLIP encoder refuses a model without image embeddings
    with pytest.raises(BackendError, match="get_image_features"):
        ClipImageEncoder.load(vit_path)
    # the refusal is the policy's: allowing pickles loads the same weights from the .bin
    (pickled / "preprocessor_config.json").write_text((vit_path / "preprocessor_config.json").read_text())
    from_pickle = VitClsEncoder.load(pickled, policy=LoadPolicy(allow_pickle=True)).embed(encoder_images())
    np.testing.assert_allclose(from_pickle, VitClsEncoder.load(vit_path).embed(encoder_images()), rtol=1e-6, atol=1e-6)


def test_diffusers_generator_refuses_pickles_and_code(diffusion_path, tmp_path):
    import shutil

    unsafe = tmp_path / "sd-remote"
    shutil.copytree(diffusion_path, unsafe)
    config = json.loads((unsafe / "unet" / "config.json").read_text())
    (unsafe / "unet" / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModel": "evil.Model"}}))
    with pytest.raises(BackendError, match="remote code"):
        DiffusersGenerator.load(unsafe)
    custom = tmp_path / "sd-custom"
    shutil.copytree(diffusion_path, custom)
    index = json.loads((custom / "model_index.json").read_text())
    (custom / "model_index.json").write_text(json.dumps(index | {"unet": ["my_unet", "MyUNet"]}))
    (custom / "my_unet.py").write_text("raise SystemExit('ran')\n")
    with pytest.raises(BackendError, match="code shipped with it"):
        DiffusersGenerator.load(custom)
    pickled = tmp_path / "sd-pickled"
    shutil.copytree(diffusion_path, pickled)
    for weights in pickled.rglob("*.safetensors"):
        weights.rename(weights.with_suffix(".bin"))
    with pytest.raises(BackendError, match="pickles only"):
        DiffusersGenerator.load(pickled)


def test_a_stock_stable_diffusion_layout_with_its_safety_checker_loads_under_the_default_policy(diffusion_path, tmp_path):
    """Stable Diffusion 1.x/2.x name their safety checker by diffusers' own pipeline module
    (``["stable_diffusion", "StableDiffusionSafetyChecker"]``): that is diffusers' code, so the
    default policy loads it, with no need to switch the remote-code guard off for the suite.
    A name outside diffusers' pipelines (an installed module such as ``json``) is still refused."""
    from diffusers import DiffusionPipeline
    from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
    from transformers import CLIPConfig, CLIPImageProcessor

    torch.manual_seed(0)
    tiny = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    checker = StableDiffusionSafetyChecker(CLIPConfig(text_config=tiny, vision_config=tiny | {"image_size": 32, "patch_size": 16}, projection_dim=8))
    stock = DiffusionPipeline.from_pretrained(
        diffusion_path, safety_checker=checker, feature_extractor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    )
    stock.save_pretrained(tmp_path / "sd-stock", safe_serialization=True)
    index = json.loads((tmp_path / "sd-stock" / "model_index.json").read_text())
    assert index["safety_checker"] == ["stable_diffusion", "StableDiffusionSafetyChecker"]
    loaded = DiffusersGenerator.load(tmp_path / "sd-stock", device="cpu", settings=DiffusionSettings(num_inference_steps=2))
    assert type(loaded.pipeline.safety_checker).__name__ == "StableDiffusionSafetyChecker"
    assert loaded.generate_images(["a red circle"], seed=0)[0].size == (32, 32)  # the pipeline's own size, through its safety checker

    named = tmp_path / "sd-json"
    shutil.copytree(tmp_path / "sd-stock", named)
    (named / "model_index.json").write_text(json.dumps(index | {"safety_checker": ["json", "JSONDecoder"]}))
    with pytest.raises(BackendError, match="code shipped with it"):
        DiffusersGenerator.load(named)
