"""Image encoders: GenCeption's Enc (docs/metrics.md#genception).

- :class:`VitClsEncoder` — the reference implementation's encoder: a ViT's CLS token,
  the last hidden state at position 0 (``AutoModel`` + ``AutoImageProcessor``).
- :class:`ClipImageEncoder` — CLIP image embeddings (``get_image_features``: the pooled
  vision output through the visual projection; ``CLIPModel.forward``'s ``image_embeds``
  are the same vectors divided by their norm, which cosines ignore and FID does not).

Both run batched under ``torch.no_grad`` in float32 (the features feed cosine
similarities and Fréchet distances, where half precision costs digits) and return float64
``(N, D)`` arrays. Loading goes through :func:`check_checkpoint` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

import numpy as np
from PIL import Image

from vlgate.evaluators.backends.base import MODEL_LOAD_LOCK, BackendError, BackendInfo, ImageEncoder, default_device
from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model

if TYPE_CHECKING:
    import torch
    from transformers import BaseImageProcessor, PreTrainedModel


@runtime_checkable
class ImageFeatureModel(Protocol):
    """A model with CLIP-style image embeddings (CLIP, SigLIP, ...)."""

    def get_image_features(self, *, pixel_values: torch.Tensor) -> object: ...


class _TransformersImageEncoder(ImageEncoder):
    """Shared loading and batching; subclasses say which features to read."""

    name = "image-encoder"
    features = ""
    #: extra from_pretrained arguments (the model class's own options)
    model_kwargs: dict[str, bool] = {}

    def __init__(self, model: PreTrainedModel, processor: BaseImageProcessor, info: BackendInfo, batch_size: int = 32):
        self.model: PreTrainedModel | None = model  # None once closed
        self.processor, self.info, self.batch_size = processor, info, batch_size
        self.device = next(model.parameters()).device

    @property
    def _model(self) -> PreTrainedModel:
        if self.model is None:
            raise BackendError(f"image encoder {self.info.model}: closed")
        return self.model

    @classmethod
    def load(cls, reference: str | Path, policy: LoadPolicy = LoadPolicy(), device: str | None = None, batch_size: int = 32, cache_dir: Path | None = None) -> Self:
        from transformers import AutoImageProcessor, AutoModel

        with MODEL_LOAD_LOCK:
            path = resolve_model(reference, cache_dir, policy)
            check_checkpoint(path, policy)
            device = device or default_device()
            common = {"trust_remote_code": policy.trust_remote_code}
            try:
                model = AutoModel.from_pretrained(path, use_safetensors=not policy.allow_pickle, **cls.model_kwargs, **common).to(device).eval()
                processor = AutoImageProcessor.from_pretrained(path, **common)
            except (OSError, ValueError, KeyError) as error:
                raise BackendError(f"model {reference}: transformers could not load it as an image encoder from {path}: {error}") from error
        cls._check_model(model, reference)
        info = BackendInfo(
            name=cls.name,
            model=str(reference),
            digest=model_digest(path),
            device=device,
            extra={"architecture": type(model).__name__, "features": cls.features, "path": str(path)},
        )
        return cls(model, processor, info, batch_size)

    @classmethod
    def _check_model(cls, model: PreTrainedModel, reference: str | Path) -> None:
        """Refuse a model this encoder cannot read features from."""

    def _features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dimension(self) -> int:
        """D, the length of one feature vector."""
        raise NotImplementedError

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        import torch

        batches = []
        for start in range(0, len(images), self.batch_size):
            chunk = [image.convert("RGB") for image in images[start : start + self.batch_size]]
            pixel_values = self.processor(images=chunk, return_tensors="pt")["pixel_values"].to(self.device)
            with torch.no_grad():
                batches.append(self._features(pixel_values).float().cpu().numpy().astype(np.float64))
        return np.concatenate(batches) if batches else np.zeros((0, self.dimension()), dtype=np.float64)

    def close(self) -> None:
        import torch

        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class VitClsEncoder(_TransformersImageEncoder):
    """CLS token of the last hidden state (GenCeption's reference encoder)."""

    name = "vit-cls"
    features = "last_hidden_state[:, 0]"
    # the CLS feature never goes through the pooler; without this a checkpoint saved without
    # one (GenCeption only needs the encoder) gets a randomly initialised pooler and a warning
    model_kwargs = {"add_pooling_layer": False}

    def _features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self._model(pixel_values=pixel_values).last_hidden_state[:, 0]

    def dimension(self) -> int:
        return int(self._model.config.hidden_size)


class ClipImageEncoder(_TransformersImageEncoder):
    """CLIP image embeddings (the projected pooled vision output), or any model with
    ``get_image_features``: SigLIP's are its vision tower's pooled output, unprojected."""

    name = "clip-image"
    features = "get_image_features"

    @classmethod
    def _check_model(cls, model: PreTrainedModel, reference: str | Path) -> None:
        if not hasattr(model, "get_image_features"):
            raise BackendError(f"model {reference}: {type(model).__name__} has no image embeddings (get_image_features); expected a CLIP-style model")

    def _features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        import torch

        model = self._model
        if not isinstance(model, ImageFeatureModel):  # _check_model refused such a model at load
            raise BackendError(f"model {self.info.model}: {type(model).__name__} has no image embeddings (get_image_features)")
        output = model.get_image_features(pixel_values=pixel_values)
        # transformers 5 returns the vision output with the projection as pooler_output; 4.x a tensor
        features = getattr(output, "pooler_output", output)
        if not isinstance(features, torch.Tensor):
            raise BackendError(f"model {self.info.model}: get_image_features returned {type(features).__name__}, not a tensor of embeddings")
        return features

    def dimension(self) -> int:
        """CLIP's projection width; SigLIP has no projection (its config has no
        ``projection_dim``), so its embeddings are as wide as its vision tower."""
        config = self._model.config
        projection_dim = getattr(config, "projection_dim", None)
        return int(projection_dim if projection_dim is not None else config.vision_config.hidden_size)
