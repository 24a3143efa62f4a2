"""Weight names as vLLM reads them, for checkpoints saved by transformers 5.

transformers 5 builds the CLIP and SigLIP vision towers without their ``vision_model``
level (its conversion mapping for ``CLIPVisionModel``, ``SiglipVisionModel`` and
``Siglip2VisionModel`` drops it on load) and, saving a LLaVA-style model, writes the outer
model's names back in the released layout but not the nested tower's: the file holds
``vision_tower.embeddings.*`` where released checkpoints, and vLLM's loaders, have
``vision_tower.vision_model.embeddings.*``. vLLM refuses such a checkpoint ("There is no
module or parameter named 'vision_tower.embeddings'"). This concerns every family whose
tower is one of those (LLaVA-1.5, LLaVA-NeXT, LLaVA-OneVision, PaliGemma, Gemma3, Aya
Vision), and so any fine-tune of them a team saves with transformers 5.

:func:`vllm_layout` gives the engine a copy with the level put back: the same tensors
byte for byte (only the safetensors headers' names change; the data sections are copied
verbatim), every other file copied as is, in the model cache under the checkpoint's
digest, made once and shared by every later load. Which level a tower drops is read from
transformers' own conversion mapping, so a tower transformers flattens in a later release
is mapped the same way. A checkpoint already in the released layout is served as it is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pydantic import JsonValue

from vlgate.evaluators.backends.base import BackendError

#: Where transformers' LLaVA-derived models keep the vision tower (top-level in the saved layout).
TOWER_ATTRIBUTES = ("vision_tower",)
#: The safetensors header: a little-endian u64 length, then that many bytes of JSON.
HEADER_LENGTH = struct.Struct("<Q")
COPY_CHUNK = 1 << 24


def dropped_level(model_type: str) -> str | None:
    """The level transformers leaves out of this vision tower's weight names on load
    (``vision_model`` for CLIP and SigLIP), from its conversion mapping; None for a tower it
    keeps whole, and for transformers 4, which kept every tower whole."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        from transformers.core_model_loading import PrefixChange
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    except ImportError:
        return None
    class_name = MODEL_MAPPING_NAMES.get(model_type)
    for transform in (get_checkpoint_conversion_mapping(class_name) if class_name else None) or ():
        if isinstance(transform, PrefixChange) and transform.prefix_to_remove and not transform.model_prefix:
            return str(transform.prefix_to_remove)
    return None


def weight_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.safetensors"))


def header(file: Path) -> dict[str, JsonValue]:
    with open(file, "rb") as handle:
        (length,) = HEADER_LENGTH.unpack(handle.read(HEADER_LENGTH.size))
        return json.loads(handle.read(length))


def renames(names: Iterable[str], level: str) -> dict[str, str]:
    """``vision_tower.X`` → ``vision_tower.<level>.X`` for every tower weight saved without the level."""
    pattern = re.compile(rf"^((?:model\.)?(?:{'|'.join(TOWER_ATTRIBUTES)}))\.(?!{re.escape(level)}\.)(.+)$")
    return {name: f"{match[1]}.{level}.{match[2]}" for name in names if (match := pattern.match(name))}


def planned_renames(path: Path) -> dict[str, str]:
    """The weight names of ``path`` vLLM would not find, and the names it looks for instead."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # the engine reports a missing or broken config itself
    vision = config.get("vision_config") if isinstance(config, dict) else None
    tower = str(vision.get("model_type", "")) if isinstance(vision, dict) else ""
    level = dropped_level(tower) if tower else None
    if level is None:
        return {}
    names = [name for file in weight_files(path) for name in header(file) if name != "__metadata__"]
    mapping = renames(names, level)
    if not mapping and not any(f".{level}." in f".{name}" for name in names):
        raise BackendError(
            f"checkpoint {path}: its {tower} vision tower is saved without the {level!r} level vLLM reads, "
            f"and vlgate finds no weights under {' or '.join(TOWER_ATTRIBUTES)} to map: vLLM cannot serve it"
        )
    return mapping


def rewrite_safetensors(source: Path, target: Path, mapping: dict[str, str]) -> None:
    """``source`` with its tensors renamed by ``mapping``: a new header, the data copied as bytes."""
    with open(source, "rb") as handle:
        (length,) = HEADER_LENGTH.unpack(handle.read(HEADER_LENGTH.size))
        entries = json.loads(handle.read(length))
        renamed = {mapping.get(name, name): value for name, value in entries.items()}
        text = json.dumps(renamed, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
        with open(target, "wb") as out:
            out.write(HEADER_LENGTH.pack(len(text)) + text)
            shutil.copyfileobj(handle, out, COPY_CHUNK)


def vllm_layout(path: Path, digest: str, cache_root: Path) -> Path:
    """The folder to give vLLM for the checkpoint at ``path``: ``path`` itself, or its copy
    in the released layout under ``cache_root`` (see the module docstring)."""
    mapping = planned_renames(path)
    if not mapping:
        return path
    target = cache_root / "vllm-layout" / digest.removeprefix("sha256:")[:16]
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for file in path.iterdir():
            if file.is_dir():
                continue
            if file.suffix == ".safetensors":
                rewrite_safetensors(file, staging / file.name, mapping)
            elif file.name.endswith(".safetensors.index.json"):
                index = json.loads(file.read_text(encoding="utf-8"))
                index["weight_map"] = {mapping.get(name, name): shard for name, shard in index.get("weight_map", {}).items()}
                (staging / file.name).write_text(json.dumps(index, indent=2), encoding="utf-8")
            else:
                shutil.copy2(file, staging / file.name)
        (staging / ".complete").write_text(json.dumps({"source": str(path), "digest": digest, "renamed": len(mapping)}))
        try:
            os.rename(staging, target)
        except OSError:  # another process made it first: theirs is the same bytes
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
