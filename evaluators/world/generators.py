"""The image side of the synthetic world, as it is built: text → image, and image ↔ text.

- The world's description → image generator (the parser :func:`scene_from_description`
  and the renderer) is runtime code and lives in :mod:`.renderer`; it is re-exported here.
- :func:`build_clip_tokenizer` trains a real byte-level BPE (CLIP's format: ``vocab.json``
  + ``merges.txt``, ``</w>`` word ends) on the world's texts.
- :func:`build_clip` builds a tiny ``CLIPModel`` and trains it contrastively on rendered
  scenes and their descriptions: the world's CLIP image encoder for GenCeption.
- :func:`build_diffusion_pipeline` assembles a tiny ``StableDiffusionPipeline`` from
  configs (random weights), so that the diffusers backend is built, loaded and run the
  way a real text-to-image checkpoint is.

Everything is saved as safetensors folders that load with ``from_pretrained`` offline.
This is build-time code: only ``world/build.py`` and tests import it; runtime code
(backends, runners) imports :mod:`.renderer` and :mod:`.scenes`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vlgate.evaluators.genception.prompts import genception_generate
from vlgate.evaluators.scenes.renderer import SKY
from vlgate.evaluators.scenes.scene import COLORS, SHAPES, Scene, random_scene, render

if TYPE_CHECKING:
    import torch
    from transformers import CLIPModel, CLIPProcessor, CLIPTokenizer

CLIP_BOS, CLIP_EOS = "<|startoftext|>", "<|endoftext|>"
CLIP_MAX_LENGTH = 77
CLIP_IMAGE_SIZE = 32
#: Size the world's images are rendered at (datasets.WorldSize.image_size); processors resize.
RENDER_SIZE = 64



# --- the world's texts -------------------------------------------------------------------


def random_world_scene(rng: np.random.Generator, max_shapes: int = 3) -> Scene:
    """A scene like GenCeption's seed images: 1..max_shapes shapes, a quarter of them outdoors
    with grass and a sun of random colour and shape."""
    scene = random_scene(rng, int(rng.integers(1, max_shapes + 1)))
    if rng.random() < 0.25:
        grass = ("grass", str(rng.choice(list(COLORS))))
        sun = ("sun", str(rng.choice(list(COLORS))), str(rng.choice(SHAPES)))
        return Scene(scene.shapes, background=SKY, props=(grass, sun))
    return scene


def world_texts(seed: int = 0, count: int = 512) -> list[str]:
    """Descriptions of random scenes (empty to four shapes, some outdoors), each also inside
    GenCeption's generation prompt: the texts the world's text encoders read."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 15485863]))
    texts = [Scene(()).describe()]
    for _ in range(count):
        scene = random_world_scene(rng, max_shapes=4)
        texts += [scene.describe(), genception_generate(scene.describe())]
    return texts


# --- tokenizer -------------------------------------------------------------------------


def build_clip_tokenizer(texts: Sequence[str], out_dir: Path, vocab_size: int = 2048) -> CLIPTokenizer:
    """Train a byte-level BPE in CLIP's format on ``texts``, write ``vocab.json`` and
    ``merges.txt`` to ``out_dir`` and load them as a ``CLIPTokenizer`` (77 tokens).

    The training tokenizer copies the normaliser and pre-tokeniser of ``CLIPTokenizer``
    itself, so the merges are learnt on exactly the pieces CLIP will split text into. All
    256 byte symbols, with and without the ``</w>`` word end, are in the vocabulary (as in
    CLIP's own): any text tokenizes without an unknown token.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reference = CLIPTokenizer().backend_tokenizer
    backend = Tokenizer(models.BPE(unk_token=CLIP_EOS, continuing_subword_prefix="", end_of_word_suffix="</w>"))
    backend.normalizer, backend.pre_tokenizer = reference.normalizer, reference.pre_tokenizer
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[CLIP_BOS, CLIP_EOS], initial_alphabet=alphabet, end_of_word_suffix="</w>", show_progress=False)
    backend.train_from_iterator(list(texts), trainer)
    trained = json.loads(backend.to_str())["model"]
    merges = [" ".join(merge) if isinstance(merge, list) else merge for merge in trained["merges"]]
    # CLIP's layout: bytes, bytes + "</w>", merged tokens in merge order, then the two specials
    vocab: dict[str, int] = {}
    for token in alphabet + [symbol + "</w>" for symbol in alphabet] + [merge.replace(" ", "") for merge in merges] + [CLIP_BOS, CLIP_EOS]:
        vocab.setdefault(token, len(vocab))
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out_dir / "merges.txt").write_text("#version: 0.2\n" + "".join(merge + "\n" for merge in merges), encoding="utf-8")
    # transformers 5 reads the files when given as the first two positional arguments
    # (``vocab_file=``/``merges_file=`` keywords are ignored there and give an empty vocabulary)
    return CLIPTokenizer(str(out_dir / "vocab.json"), str(out_dir / "merges.txt"), model_max_length=CLIP_MAX_LENGTH)


# --- CLIP -----------------------------------------------------------------------------


def tiny_clip(tokenizer: CLIPTokenizer, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0) -> CLIPModel:
    """A random-weight CLIP with both towers, 32-pixel images in 8-pixel patches."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(seed)
    tower = {"hidden_size": hidden, "intermediate_size": hidden * 2, "num_hidden_layers": layers, "num_attention_heads": heads}
    config = CLIPConfig(
        text_config=tower
        | {
            "vocab_size": len(tokenizer),
            "max_position_embeddings": CLIP_MAX_LENGTH,
            "bos_token_id": tokenizer.bos_token_id,
            # the text tower pools at the first eos: it has to be the tokenizer's
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config=tower | {"image_size": CLIP_IMAGE_SIZE, "patch_size": 8},
        projection_dim=hidden,
    )
    return CLIPModel(config)


def clip_processor(tokenizer: CLIPTokenizer) -> CLIPProcessor:
    from transformers import CLIPImageProcessor, CLIPProcessor

    image_processor = CLIPImageProcessor(size={"shortest_edge": CLIP_IMAGE_SIZE}, crop_size={"height": CLIP_IMAGE_SIZE, "width": CLIP_IMAGE_SIZE})
    return CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)


def clip_batch(processor: CLIPProcessor, scenes: Sequence[Scene]) -> dict[str, torch.Tensor]:
    """Model inputs for rendered scenes paired with their descriptions."""
    return dict(processor(images=[render(s, RENDER_SIZE) for s in scenes], text=[s.describe() for s in scenes], return_tensors="pt", padding=True))


def held_out_scenes(seed: int, count: int = 64) -> list[Scene]:
    """Scenes with distinct descriptions (so retrieval has one right answer and chance is
    1/count), from a stream of their own; :func:`build_clip` never trains on these descriptions."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1299709]))
    scenes: dict[str, Scene] = {}
    while len(scenes) < count:
        scene = random_world_scene(rng)
        scenes.setdefault(scene.describe(), scene)
    return list(scenes.values())


def clip_retrieval_accuracy(model: CLIPModel, processor: CLIPProcessor, scenes: Sequence[Scene]) -> float:
    """Image → text retrieval: the fraction of images whose most similar description (among
    all the scenes' descriptions) is their own. Chance is 1/len(scenes)."""
    import torch

    with torch.no_grad():
        logits = model(**clip_batch(processor, scenes)).logits_per_image
    return float((logits.argmax(dim=1) == torch.arange(len(scenes))).float().mean())


def build_clip(out: Path, seed: int = 0, steps: int = 300, batch_size: int = 32, learning_rate: float = 2e-3) -> Path:
    """A tiny CLIP trained with the CLIP loss on freshly rendered scenes and their
    descriptions; saved with its processor (the world's BPE tokenizer) and a training card
    that records held-out image → text retrieval accuracy next to chance."""
    import torch

    from vlgate.evaluators.world.training import save_checkpoint, training_card

    out = Path(out)
    # vocab.json + merges.txt stay beside the tokenizer.json the processor saves
    tokenizer = build_clip_tokenizer(world_texts(seed), out)
    processor = clip_processor(tokenizer)
    model = tiny_clip(tokenizer, seed=seed)
    held_out = held_out_scenes(seed)
    unseen = {scene.describe() for scene in held_out}
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7368787]))

    def training_scenes() -> list[Scene]:
        scenes: list[Scene] = []
        while len(scenes) < batch_size:
            scene = random_world_scene(rng)
            if scene.describe() not in unseen:  # retrieval is then measured on descriptions never trained on
                scenes.append(scene)
        return scenes

    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    warmup = max(1, steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    losses, started = [], time.perf_counter()
    model.train()
    for _ in range(steps):
        loss = model(**clip_batch(processor, training_scenes()), return_loss=True).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    card = training_card("clip", "CLIPModel", steps, steps * batch_size, seed, losses, started) | {
        "retrieval_accuracy": round(clip_retrieval_accuracy(model, processor, held_out), 4),
        "retrieval_chance": round(1 / len(held_out), 4),
    }
    return save_checkpoint(model, processor, out, card)


# --- diffusion ---------------------------------------------------------------------------


def build_diffusion_pipeline(out: Path, seed: int = 0, sample_size: int = 16, text_hidden: int = 32) -> Path:
    """A tiny ``StableDiffusionPipeline`` from configs, random weights: UNet over
    ``sample_size``² latents, a VAE that halves the resolution (so images are
    2·``sample_size`` pixels), a CLIP text encoder over the world's BPE tokenizer, DDIM.

    The synthetic world generates with the scene renderer; this pipeline exists so the
    diffusers path (load, prompt → image, seeds, offline, safetensors) is built and tested
    the way a real text-to-image checkpoint is.
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    out = Path(out)
    started = time.perf_counter()
    tokenizer = build_clip_tokenizer(world_texts(seed), out / "tokenizer")  # where the pipeline saves it
    torch.manual_seed(seed)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=text_hidden,
            intermediate_size=text_hidden * 2,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=CLIP_MAX_LENGTH,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    unet = UNet2DConditionModel(
        sample_size=sample_size,
        in_channels=4,
        out_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=text_hidden,
        attention_head_dim=4,
        norm_num_groups=8,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 16),
        latent_channels=4,
        norm_num_groups=8,
        sample_size=sample_size * 2,
    )
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipeline = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipeline.save_pretrained(out, safe_serialization=True)  # type: ignore[attr-defined]  # diffusers' mixin, untyped
    card = {"kind": "text-to-image", "architecture": "StableDiffusionPipeline", "train_steps": 0, "seed": seed, "build_seconds": round(time.perf_counter() - started, 2)}
    (out / "vlgate_checkpoint.json").write_text(json.dumps(card, indent=2, sort_keys=True))
    return out
