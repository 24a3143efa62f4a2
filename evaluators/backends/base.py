"""The one interface every model backend implements (ARCHITECTURE.md).

A backend wraps one loaded model and answers four kinds of request, all batched:

- :meth:`VisionLanguageBackend.choice_probs` — for each (images, prompt) request, the
  next-token distribution after the chat template's assistant turn, restricted to the
  request's answer options (option letters, Yes/No, True/False) and renormalised over
  them. One forward pass, no generation. This is what every probability in docs/metrics.md is.
- :meth:`VisionLanguageBackend.generate` — greedy text, bounded tokens (VLind answers,
  GenCeption descriptions, DeCC decompositions and reasoning).
- :meth:`ImageEncoder.embed` — image features (GenCeption's Enc).
- :meth:`ImageGenerator.generate_images` — text to image (GenCeption's Gen).

Requests carry PIL images, never paths: loaders own file I/O and its errors.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

#: transformers/diffusers build models under a process-global meta-device context, so two
#: threads loading at once corrupt each other ("Cannot copy out of meta tensor"); the
#: service validates versions in worker threads, so every load holds this lock.
MODEL_LOAD_LOCK = threading.RLock()


@dataclass(frozen=True)
class ChoiceRequest:
    """Score ``options`` as the first token of the answer to ``prompt`` about ``images``.

    ``shared_prefix`` is an optional hint: the leading part of ``prompt`` that other
    requests in the same batch repeat (VL-LCM's K yes/no probes of one sample share the
    image and question); a backend may compute it once. Results must not depend on it.
    """

    images: tuple[Image.Image, ...]
    prompt: str
    options: tuple[str, ...]
    shared_prefix: str | None = None


@dataclass(frozen=True)
class ImageSlot:
    """Where the next of a request's images stands in its user turn (:attr:`GenerateRequest.turn`)."""


#: the one image slot every turn uses
IMAGE = ImageSlot()
#: one part of a user turn: a text, or the place of the request's next image
TurnPart = str | ImageSlot


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy text about ``images``. The user turn is the images, then ``prompt``, unless
    ``turn`` lays it out otherwise: texts and :data:`IMAGE` slots in order, one slot per
    image (an lmms-eval task's interleaved messages, as MMMU's are); ``prompt`` is then
    the turn's text parts joined, for what shows a request."""

    images: tuple[Image.Image, ...]
    prompt: str
    max_new_tokens: int = 32
    turn: tuple[TurnPart, ...] | None = None

    def __post_init__(self) -> None:
        if self.turn is not None and sum(part is IMAGE for part in self.turn) != len(self.images):
            raise ValueError(f"a user turn of {sum(part is IMAGE for part in self.turn)} image slots for {len(self.images)} images")

    @property
    def parts(self) -> tuple[TurnPart, ...]:
        """The user turn in order: ``turn``, else every image, then the prompt."""
        return self.turn if self.turn is not None else (*(IMAGE for _ in self.images), self.prompt)


@dataclass
class BackendInfo:
    """What a backend records about itself; ``digest`` identifies the weights (fingerprints)."""

    name: str
    model: str
    digest: str
    device: str = "cpu"
    extra: dict[str, str] = field(default_factory=dict)


class VisionLanguageBackend(ABC):
    """A VLM (or, with no images, a text-only LLM such as DeCC's LLM agent)."""

    info: BackendInfo

    @abstractmethod
    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        """One probability vector per request, over its options, summing to 1."""

    @abstractmethod
    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        """Greedy decoding; the generated text only (no prompt), stripped."""

    def close(self) -> None:
        """Release the model (GPU memory, server connections)."""


class ImageEncoder(ABC):
    info: BackendInfo

    @abstractmethod
    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        """An (N, D) float array of image features."""

    def close(self) -> None:
        """Release the model (GPU memory); nothing to release by default."""


class ImageGenerator(ABC):
    info: BackendInfo
    #: The same prompt and seed always give the same image, so results may be cached by
    #: prompt (GenCeption's GenerationCache). A sampling service that is not should say False.
    deterministic: bool = True

    @abstractmethod
    def generate_images(self, prompts: Sequence[str], seed: int = 0) -> list[Image.Image]:
        """One image per prompt; the same prompts and seed give the same images."""

    def close(self) -> None:
        """Release the model (GPU memory); nothing to release by default."""


def default_device() -> str:
    """CUDA when there is one, else the CPU (torch is imported here, not at module load)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class BackendError(RuntimeError):
    """A model could not be loaded or run; the message says which and why."""


def renormalise(probabilities: np.ndarray) -> np.ndarray:
    """Renormalise non-negative scores over the options; a zero total gives the uniform vector."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    total = probabilities.sum()
    if not np.isfinite(total) or total <= 0:
        return np.full(probabilities.shape, 1.0 / len(probabilities))
    return probabilities / total
