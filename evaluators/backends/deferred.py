"""Models loaded when first used, not when named: a run whose records all come from the
record cache (docs/record-cache.md) loads none of them.

Every record's fingerprint holds the digests of the models behind it, the candidate's
and its helpers' (``Runner.models``), and a digest is the sha256 of the checkpoint's files
(``loading.model_digest``), which needs no load. So a local model is first *described*:
its folder resolved and checked against the load policy, as a load does first, and its
files hashed. It is loaded when something other than its ``info`` is first asked of it.

Exact by construction: the loaded model's digest must be the described one (the records
were looked up under it), else the load fails, naming both. A load that fails is not tried
again: every later use raises the same error, as an eager load would have failed once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from PIL import Image

from vlgate.evaluators.backends.base import BackendError, BackendInfo, ChoiceRequest, GenerateRequest, ImageEncoder, ImageGenerator, VisionLanguageBackend

#: ``info.device`` of a model described and not loaded
NOT_LOADED = "not loaded"


class Loadable(Protocol):
    info: BackendInfo

    def close(self) -> None: ...


Model = TypeVar("Model", bound=Loadable)


class Deferred(Generic[Model]):
    """A described model, loaded by ``load`` on first use (thread-safe); ``info`` is the
    described one until then, the loaded model's after."""

    _own = frozenset({"_described", "_load", "_model", "_error", "_lock", "_closed"})

    def __init__(self, described: BackendInfo, load: Callable[[], Model]):
        self._described, self._load = described, load
        self._model: Model | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def info(self) -> BackendInfo:
        model = self._model
        return model.info if model is not None else self._described

    @info.setter
    def info(self, value: BackendInfo) -> None:
        raise AttributeError("a deferred model's info is its description, then the loaded model's")

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def load_error(self) -> BaseException | None:
        """Why the load failed (None: it did not, or was not tried)."""
        return self._error

    def loaded_model(self) -> Model:
        """The loaded model, loaded now if it was not."""
        with self._lock:
            if self._model is not None:
                return self._model
            if self._error is not None:
                raise self._error
            if self._closed:
                raise BackendError(f"model {self._described.model}: closed")
            try:
                model = self._load()
            except BaseException as error:
                self._error = error
                raise
            if model.info.digest != self._described.digest:
                model.close()
                self._error = BackendError(f"model {self._described.model}: its files changed between describing and loading it (digest {self._described.digest}, then {model.info.digest}); evaluate it again")
                raise self._error
            self._model = model
            return model

    def close(self) -> None:
        with self._lock:
            model, self._model, self._closed = self._model, None, True
        if model is not None:
            model.close()

    def __getattr__(self, name: str) -> Any:
        """Anything else the loaded model has (``plain_copy``, ``tokenizer``, ...): loads it."""
        if name in Deferred._own or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.loaded_model(), name)


class DeferredBackend(Deferred[VisionLanguageBackend], VisionLanguageBackend):
    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        return self.loaded_model().choice_probs(requests)

    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        return self.loaded_model().generate(requests)


class DeferredEncoder(Deferred[ImageEncoder], ImageEncoder):
    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        return self.loaded_model().embed(images)


class DeferredGenerator(Deferred[ImageGenerator], ImageGenerator):
    @property
    def deterministic(self) -> bool:
        """The loaded generator's (the class default says nothing of it)."""
        return self.loaded_model().deterministic

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        raise AttributeError("a deferred generator's determinism is the loaded generator's")

    def generate_images(self, prompts: Sequence[str], seed: int = 0) -> list[Image.Image]:
        return self.loaded_model().generate_images(prompts, seed)
