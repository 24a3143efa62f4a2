"""GenCeption runner (docs/metrics.md#genception; GenCeption paper §2.1–2.2, Algorithm 1).

Per seed image X⁽⁰⁾, for t = 1..T:

1. Q_t = F(P_Desc, X⁽ᵗ⁻¹⁾): the candidate VLM describes the previous image (Eq. 1,
   :data:`prompts.GENCEPTION_DESCRIBE`, greedy, bounded tokens);
2. X⁽ᵗ⁾ = Gen(P_Gen⁽ᵗ⁾): the image generator draws from "Generate an image that fully and
   precisely reflects this description: Q_t" (Eq. 2, :func:`prompts.genception_generate`),
   with a fixed seed (the paper sets temperature 0 to remove stochasticity);
3. s_t = cos(Enc(X⁽ᵗ⁾), Enc(X⁽⁰⁾)): always against the seed image, never the previous one
   (Algorithm 1, line 8).

A batch of items advances together: at step t all descriptions are one ``generate`` call,
then all generations one ``generate_images`` call, then one ``embed`` call.

What is kept, beside ``s``:

- every description (record field ``descriptions``: [Q_1..Q_T]) and every image
  (``artifacts_dir/ITEM_ID/t{t}.png``, paths in ``images``; an id that is not a safe folder
  name is sanitised and suffixed with its hash). ``artifacts_dir`` belongs to
  one candidate model's run: another candidate given the same folder overwrites them;
- every feature vector z⁽⁰⁾..z⁽ᵀ⁾, for GC_FID@T (Eq. 4), as a sidecar ``.npy`` ((T+1) × D,
  float64 as the encoders return them) named by the record's fingerprint under
  ``artifacts_dir/features/``, its path in the record field ``features``. A sidecar rather
  than a JSON list: a ViT-B feature is 768 floats, 3k numbers a record at T = 3, and
  records are logged and validated line by line; naming it by fingerprint means a rerun
  with another T or model never overwrites the vectors an earlier record points at.
  :func:`write_features` gathers them into the ``t0``…``tT`` + ``ids`` file that
  ``vlgate score genception --features`` reads;
- the seed features z⁽⁰⁾ depend only on the encoder and the image bytes, so they are cached
  on disk (:class:`SeedFeatureCache`: one ``.npy`` per (encoder digest, image sha256))
  and every candidate model evaluated with the same encoder reuses them; likewise each
  generated image and its features per (generator, encoder, prompt, seed)
  (:class:`GenerationCache`): the same description is drawn once, whoever wrote it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from pydantic import JsonValue

from vlgate.evaluators.backends import kinds as backends
from vlgate.evaluators.backends.base import GenerateRequest, ImageEncoder, ImageGenerator, VisionLanguageBackend
from vlgate.evaluators.backends.kinds import BackendOptions
from vlgate.evaluators.features import load_features
from vlgate.evaluators.genception import prompts, protocols
from vlgate.evaluators.genception.metrics import cosine_similarity
from vlgate.evaluators.genception.settings import GenceptionSettings
from vlgate.evaluators.images import read_image
from vlgate.evaluators.loaders.items import GenceptionItem, open_image
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.base import Runner, RunnerContext
from vlgate.evaluators.runners.store import file_digest

_UNSAFE_PATH_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")


def _atomic_save_npy(path: Path, array: np.ndarray) -> None:
    """Write then rename, so a killed run or a concurrent reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            np.save(stream, array, allow_pickle=False)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def item_folder_name(item_id: str) -> str:
    """An item id as a folder name. Ids come from data files and may hold slashes; an id
    that had to be changed gets a hash of itself appended, so two ids never share a folder."""
    name = _UNSAFE_PATH_CHARACTERS.sub("_", str(item_id)).strip("._")
    if name != str(item_id):
        name = f"{name or 'item'}-{hashlib.sha256(str(item_id).encode()).hexdigest()[:8]}"
    return name


class SeedFeatureCache:
    """Enc(X⁽⁰⁾) on disk, one ``.npy`` per (encoder digest, seed-image sha256): computed once
    per encoder and image, whichever candidate model asked first."""

    def __init__(self, folder: Path, encoder: ImageEncoder):
        self.encoder = encoder
        self.folder = Path(folder) / encoder.info.digest.replace(":", "-")[:64]

    def features(self, image_paths: Sequence[Path], images: Sequence[Image.Image]) -> np.ndarray:
        """(N, D) seed features; the cache's misses are embedded in one call and stored."""
        files = [self.folder / f"{file_digest(Path(path))}.npy" for path in image_paths]
        found: dict[int, np.ndarray] = {}
        for index, file in enumerate(files):
            try:
                found[index] = np.load(file, allow_pickle=False)
            except (OSError, ValueError):  # missing, or torn by a kill: recompute
                pass
        missing = [i for i in range(len(files)) if i not in found]
        if missing:
            computed = np.asarray(self.encoder.embed([images[i] for i in missing]), dtype=np.float64)
            for index, vector in zip(missing, computed):
                _atomic_save_npy(files[index], vector)
                found[index] = vector
        return np.stack([found[i] for i in range(len(files))])


class GenerationCache:
    """X⁽ᵗ⁾ and Enc(X⁽ᵗ⁾) on disk per (generator digest, P_Gen⁽ᵗ⁾, seed) and encoder digest.
    Generators here are seeded per prompt, so the same prompt draws the same image: when
    two candidates (or two items) write the same description, it is drawn and embedded
    once. With a diffusion generator this is most of a candidate's GenCeption cost."""

    def __init__(self, folder: Path, generator: ImageGenerator, encoder: ImageEncoder):
        self.generator, self.encoder = generator, encoder
        self.folder = Path(folder) / hashlib.sha256(f"{generator.info.digest}\0{encoder.info.digest}".encode()).hexdigest()[:32]

    def _key(self, prompt: str, seed: int) -> str:
        return hashlib.sha256(f"{prompt}\0{seed}".encode()).hexdigest()

    def draw(self, texts: Sequence[str], seed: int) -> tuple[list[Image.Image], np.ndarray]:
        """(images, (N, D) features) for the prompts; misses are generated and embedded in one
        call each. A generator that is not deterministic is called for every prompt, uncached."""
        if not self.generator.deterministic:
            return self._generate_and_embed(list(texts), seed)
        keys = [self._key(text, seed) for text in texts]
        found: dict[str, tuple[Image.Image, np.ndarray]] = {}
        for key in dict.fromkeys(keys):
            try:
                found[key] = (read_image(self.folder / f"{key}.png"), np.load(self.folder / f"{key}.npy", allow_pickle=False))
            except (OSError, ValueError):  # missing, torn by a kill, or over the pixel budget (ImageTooLarge): draw again
                pass
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            first_prompt = {key: text for key, text in zip(keys, texts)}
            drawn, features = self._generate_and_embed([first_prompt[key] for key in missing], seed)
            self.folder.mkdir(parents=True, exist_ok=True)
            for key, drawing, vector in zip(missing, drawn, features):
                handle, temporary = tempfile.mkstemp(dir=self.folder, suffix=".png.tmp")
                os.close(handle)
                drawing.save(temporary, format="PNG")
                os.replace(temporary, self.folder / f"{key}.png")
                _atomic_save_npy(self.folder / f"{key}.npy", vector)
                found[key] = (drawing, vector)
        return [found[key][0] for key in keys], np.stack([found[key][1] for key in keys])

    def _generate_and_embed(self, texts: list[str], seed: int) -> tuple[list[Image.Image], np.ndarray]:
        drawn = self.generator.generate_images(texts, seed=seed)
        if len(drawn) != len(texts):
            raise ValueError(f"image generator {self.generator.info.model} returned {len(drawn)} images for {len(texts)} prompts")
        drawn = [image.convert("RGB") for image in drawn]
        features = np.asarray(self.encoder.embed(drawn), dtype=np.float64)
        if features.ndim != 2 or len(features) != len(drawn):
            raise ValueError(f"encoder {self.encoder.info.model} returned features of shape {features.shape} for {len(drawn)} images")
        return drawn, features


@dataclass(frozen=True)
class GenceptionLoop:
    """How the describe-and-draw loop runs: T ``iterations``, the ``seed`` every drawing
    is made with, and the descriptions' token budget (``max_new_tokens``; None: the
    protocol's). What a record's numbers depend on besides the models and the protocol."""

    iterations: int = 3  # the T of GC@T that docs/metrics.md defaults to
    seed: int = 0
    max_new_tokens: int | None = None


def genception_runner(
    vlm: VisionLanguageBackend,
    generator: ImageGenerator,
    encoder: ImageEncoder,
    loop: GenceptionLoop = GenceptionLoop(),
    *,
    artifacts_dir: Path,
    feature_cache_dir: Path | None = None,
    protocol: Protocol[prompts.GenceptionPrompts] = protocols.GENCEPTION[0],
) -> Runner[GenceptionItem, Image.Image]:
    """The GenCeption runner. ``feature_cache_dir`` (default ``artifacts_dir/../feature-cache``)
    should be shared by every candidate evaluated with this encoder; ``loop.max_new_tokens``
    overrides the protocol's description length."""
    iterations, seed, max_new_tokens = loop.iterations, loop.seed, loop.max_new_tokens
    if iterations < 1:
        raise ValueError(f"GenCeption needs T >= 1 iterations, got {iterations}")
    artifacts_dir = Path(artifacts_dir)
    cache_root = feature_cache_dir if feature_cache_dir is not None else artifacts_dir.parent / "feature-cache"
    seed_cache = SeedFeatureCache(cache_root, encoder)
    generations = GenerationCache(Path(cache_root) / "generations", generator, encoder)
    description_tokens = protocol.limit("description", max_new_tokens)

    def compute(batch: list[tuple[GenceptionItem, Image.Image]]) -> list[Record]:
        items = [item for item, _ in batch]
        seed_features = seed_cache.features([item.image for item in items], [image for _, image in batch])
        features = [seed_features]
        descriptions: list[list[JsonValue]] = [[] for _ in items]
        image_paths: list[list[JsonValue]] = [[] for _ in items]
        similarities = np.zeros((len(items), iterations))
        previous = [image for _, image in batch]
        for t in range(1, iterations + 1):
            described = vlm.generate([GenerateRequest((image,), protocol.prompts.describe, description_tokens) for image in previous])
            generated, step_features = generations.draw([protocol.prompts.generate(text) for text in described], seed)
            features.append(step_features)
            # Algorithm 1 line 8: against z⁽⁰⁾; clipped because rounding can leave 1 + 1e-7
            similarities[:, t - 1] = np.clip(cosine_similarity(seed_features, features[-1]), -1.0, 1.0)
            for n, (item, text, image) in enumerate(zip(items, described, generated)):
                path = artifacts_dir / item_folder_name(item.id) / f"t{t}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                image.save(path, format="PNG")
                descriptions[n].append(text)
                image_paths[n].append(str(path))
            previous = generated
        records: list[Record] = []
        for n, item in enumerate(items):
            sidecar = artifacts_dir / "features" / f"{runner.key(item).removeprefix('fp:')}.npy"
            _atomic_save_npy(sidecar, np.stack([step[n] for step in features]))
            s: list[JsonValue] = [float(value) for value in similarities[n]]
            if not all(np.isfinite(similarities[n])):  # a zero feature vector has no direction: fail loudly, not NaN in the record
                raise ValueError(f"item {item.id}: cosine similarity undefined (zero feature vector)")
            records.append(
                {
                    "id": item.id,
                    "category": item.category,
                    "seed": str(item.image),
                    "s": s,
                    "descriptions": descriptions[n],
                    "images": image_paths[n],
                    "features": str(sidecar),
                }
            )
        return records

    runner = Runner(
        "genception",
        {"vlm": vlm.info.digest, "generator": generator.info.digest, "encoder": encoder.info.digest},
        protocol.as_run(description=max_new_tokens),
        lambda item: open_image(item.image, item.id, "image"),
        compute,
        settings={"iterations": iterations, "seed": seed},
    )
    return runner


def write_features(records: Sequence[Mapping[str, JsonValue]], path: Path, root: Path | None = None) -> Path:
    """The ``--features`` file of ``vlgate score genception``: arrays ``t0``…``tT`` (N×D, in
    record order) and ``ids``, from each record's sidecar (relative sidecar paths are
    resolved against ``root``)."""
    if not records:
        raise ValueError("no records to write features for")
    stacks = []
    for record in records:
        sidecar_path, s = record["features"], record["s"]
        if not isinstance(sidecar_path, str) or not isinstance(s, list):
            raise TypeError(f"record {record['id']}: expected the path of its features and the list s, got {type(sidecar_path).__name__} and {type(s).__name__}")
        sidecar = Path(sidecar_path)
        if root is not None and not sidecar.is_absolute():
            sidecar = Path(root) / sidecar
        vectors = np.load(sidecar, allow_pickle=False)
        if vectors.shape[0] != len(s) + 1:
            raise ValueError(f"record {record['id']}: {sidecar} holds {vectors.shape[0]} feature vectors, expected T+1 = {len(s) + 1}")
        stacks.append(vectors)
    if len({stack.shape for stack in stacks}) != 1:
        raise ValueError(f"records differ in T or feature size: {sorted({stack.shape for stack in stacks})}")
    arrays = {f"t{t}": np.stack([stack[t] for stack in stacks]) for t in range(stacks[0].shape[0])}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:  # a handle, so np.savez keeps the name as given (no added .npz)
        np.savez(handle, ids=np.array([str(record["id"]) for record in records]), **arrays)  # type: ignore[arg-type]  # numpy's stub checks **arrays against allow_pickle
    return path


def build_genception_runner(settings: GenceptionSettings, context: RunnerContext) -> Runner[GenceptionItem, Image.Image]:
    """The runner with its encoder and generator opened (loaded on first use, and owned:
    ``runner.close()`` releases them); seed features and drawings are cached beside the model cache, so every
    candidate evaluated on this machine reuses them."""
    options = BackendOptions(policy=context.policy, cache_dir=context.cache_dir)
    encoder: ImageEncoder = backends.IMAGE_ENCODERS[settings.encoder_kind].open(settings.encoder, options)
    try:
        generator: ImageGenerator = backends.image_generator(settings.generator).open(settings.generator, options)
    except BaseException:
        encoder.close()
        raise
    runner = genception_runner(
        context.vlm,
        generator,
        encoder,
        GenceptionLoop(iterations=settings.iterations, seed=settings.seed, max_new_tokens=settings.description_max_new_tokens),
        artifacts_dir=context.out / "genception" / "artifacts",
        feature_cache_dir=context.shared_cache / "genception",
        protocol=context.chosen(protocols.GENCEPTION),
    )
    runner.owned += [encoder, generator]
    return runner


def features_for_scoring(records: Sequence[Mapping[str, JsonValue]], folder: Path) -> list[np.ndarray] | None:
    """Every X_t's features, written as ``features.npz`` beside the records and read back
    aligned to them, so GC_FID@T comes with the run (docs/metrics.md#genception); FID needs two images."""
    if len(records) < 2:
        return None
    path = write_features(records, folder / "features.npz")
    return load_features(path, len(records), [record["id"] for record in records])
