"""Where a model comes from and whether it may be loaded.

A model reference is one of:

- a local folder (``/models/llava`` or ``./vlgate-data/world/checkpoints/vlm-steps1000``);
- an MLflow artifact URI (``models:/NAME/VERSION``, ``models:/NAME@ALIAS``, ``runs:/RUN/PATH``,
  ``mlflow-artifacts:/...``), downloaded once into the cache;
- a Hugging Face Hub id (``org/name``), fetched with ``snapshot_download`` (which honours
  ``HF_HUB_OFFLINE=1`` and the local HF cache).

Untrusted checkpoints never run code: before anything is handed to ``from_pretrained``,
:func:`check_checkpoint` refuses folders whose config asks for remote code (``auto_map``)
and folders with pickled weights (``.bin``/``.pt``/``.pth``/``.ckpt``) that have no
safetensors copy of the same weights beside them (an unrelated ``.safetensors`` file does not count),
unless a :class:`LoadPolicy` says otherwise. The loaders then pass
``trust_remote_code=policy.trust_remote_code`` and ``use_safetensors=not policy.allow_pickle``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vlgate.evaluators.backends.base import BackendError
from vlgate.versions import VersionRef

MLFLOW_SCHEMES = ("models:/", "runs:/", "mlflow-artifacts:/")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
#: Files whose bytes define the model's behaviour: weights, configs, tokenizer and processor files.
DIGESTED_SUFFIXES = (".safetensors", ".json", ".model", ".txt", ".jinja") + PICKLE_SUFFIXES


class LoadPolicy(BaseModel):
    """What a checkpoint may do when loaded. The defaults are the safe ones; loosening them
    is an explicit, recorded choice (it is part of the run's parameters)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    trust_remote_code: bool = False
    allow_pickle: bool = False
    #: limits on rendering the checkpoint's chat template (``backends/chat_templates.py``):
    #: seconds per render, memory it may take, characters it may produce
    chat_template_timeout_s: float = Field(default=10.0, gt=0)
    chat_template_memory_mb: int = Field(default=512, ge=64)
    chat_template_max_chars: int = Field(default=1_000_000, ge=1)


def resolve_model(reference: str | Path, cache_dir: Path | None = None, policy: LoadPolicy = LoadPolicy()) -> Path:
    """A local folder holding the referenced model (downloaded into ``cache_dir`` if remote)."""
    text = str(reference)
    if text.startswith(MLFLOW_SCHEMES):
        import mlflow

        try:
            uri, identity = mlflow_identity(text)
        except Exception as error:  # mlflow raises several types for a missing model/version/alias
            raise BackendError(f"model {text!r}: not in the MLflow registry: {error}") from error
        target = (cache_dir or Path.cwd() / ".vlgate-model-cache") / hashlib.sha256(identity.encode()).hexdigest()[:16]
        if not (target / ".complete").is_file():
            target.mkdir(parents=True, exist_ok=True)
            try:
                local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(target)))
            except Exception as error:  # mlflow raises several types for a missing model/version
                raise BackendError(f"model {text!r}: could not download its artifacts from MLflow: {error}") from error
            (target / ".complete").write_text(str(local.relative_to(target)))
        return _checkpoint_root(target / (target / ".complete").read_text())
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise BackendError(f"model {text!r}: is a file; expected a checkpoint folder")
        return _checkpoint_root(path)
    if text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise BackendError(f"model {text!r}: no such folder, and not a Hugging Face id (org/name) or an MLflow URI")
    from huggingface_hub import snapshot_download

    ignore = None if policy.allow_pickle else [f"*{suffix}" for suffix in PICKLE_SUFFIXES]
    try:
        return Path(snapshot_download(text, cache_dir=cache_dir, ignore_patterns=ignore))
    except Exception as error:
        raise BackendError(f"model {text!r}: not found locally and could not be fetched from the Hugging Face Hub: {error}") from error


def mlflow_identity(uri: str) -> tuple[str, str]:
    """The URI to download and what identifies its bytes. ``models:/NAME/VERSION`` names a
    version that can be deleted and registered again with other weights, and
    ``models:/NAME@ALIAS`` one that moves: both resolve to the version (downloaded by
    number) identified by its source, run and creation time. Any other MLflow URI names
    immutable artifacts (run ids are never reused) and is its own identity."""
    if not uri.startswith("models:/"):
        return uri, uri
    from mlflow import MlflowClient
    from mlflow.store.artifact.utils.models import get_model_name_and_version

    client = MlflowClient()
    subject = VersionRef.of(*get_model_name_and_version(client, uri))
    found = client.get_model_version(subject.model, subject.version)
    return subject.uri, json.dumps([subject.model, subject.version, found.source, found.run_id, found.creation_timestamp])


def _checkpoint_root(path: Path) -> Path:
    """The folder with the config: an MLflow transformers flavour nests it (``model/`` or
    ``components/``); a plain folder is its own root."""
    if (path / "config.json").is_file() or (path / "model_index.json").is_file():
        return path
    candidates = sorted({p.parent for name in ("config.json", "model_index.json") for p in path.rglob(name)}, key=lambda p: len(p.parts))
    return candidates[0] if candidates else path


def check_checkpoint(path: Path, policy: LoadPolicy = LoadPolicy()) -> None:
    """Refuse a checkpoint that would run code or unpickle weights under ``policy``."""
    configs = [path / "config.json"] + sorted(path.glob("*/config.json"))
    for config_path in configs:
        if not config_path.is_file():
            continue
        try:
            config = json.loads(config_path.read_text())
        except ValueError as error:
            raise BackendError(f"checkpoint {path}: {config_path.name} is not valid JSON ({error})") from error
        if "auto_map" in config and not policy.trust_remote_code:
            raise BackendError(
                f"checkpoint {path}: {config_path.relative_to(path)} needs remote code (auto_map: {sorted(config['auto_map'])}); "
                "vlgate does not run a checkpoint's code unless the load policy sets trust_remote_code: true"
            )
    files = [p for p in path.rglob("*") if p.is_file()]
    pickles = [p for p in files if p.suffix in PICKLE_SUFFIXES and p.name != "training_args.bin"]
    unmatched = [p for p in pickles if not has_safetensors_copy(p)]
    if unmatched and not policy.allow_pickle:
        names = ", ".join(str(p.relative_to(path)) for p in unmatched[:3])
        raise BackendError(
            f"checkpoint {path}: weights are pickles only ({names}); loading a pickle can run arbitrary code. "
            "Convert to safetensors, or set allow_pickle: true in the load policy for a checkpoint you trust"
        )


def has_safetensors_copy(pickle: Path) -> bool:
    """Whether the weights in ``pickle`` also lie beside it as the safetensors file a loader
    takes instead: ``pytorch_model.bin`` → ``model.safetensors`` (shards by their index; also
    ``open_clip_pytorch_model.bin`` → ``open_clip_model.safetensors``),
    ``diffusion_pytorch_model.bin`` → ``diffusion_pytorch_model.safetensors``. Any other
    ``.safetensors`` file in the folder, an empty one included, does not stand in for them."""
    stems = {pickle.stem, pickle.stem.replace("pytorch_model", "model")}  # transformers renames, diffusers keeps
    candidates = [pickle.parent / f"{stem}.safetensors" for stem in stems]
    # a shard: the safetensors index names the shards the loader reads
    candidates += [pickle.parent / f"{stem.split('-')[0]}.safetensors.index.json" for stem in stems if "-of-" in stem]
    return any(candidate.is_file() and candidate.stat().st_size > 0 for candidate in candidates)


_DIGESTS: dict[tuple[str, int, int], str] = {}


def model_digest(path: Path) -> str:
    """sha256 over the (relative name, content) of every file that defines the model —
    the same weights give the same digest wherever they are stored."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in DIGESTED_SUFFIXES and p.name != "vlgate_checkpoint.json")
    stat = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    key = (str(path.resolve()), hash(tuple(stat)), len(stat))
    if key not in _DIGESTS:
        total = hashlib.sha256()
        for file in files:
            total.update(str(file.relative_to(path)).encode() + b"\0")
            with open(file, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    total.update(chunk)
        _DIGESTS[key] = "sha256:" + total.hexdigest()
    return _DIGESTS[key]
