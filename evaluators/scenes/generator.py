"""The synthetic world's GenCeption generator, registered as the image-generator kind
``scene-renderer`` (``pyproject.toml``'s entry point ``vlgate.image_generators``, read by
``backends/kinds.py``, which never imports this module): it reads the scene a description
names (:func:`~vlgate.evaluators.scenes.renderer.scene_from_description`) and draws it.
Deterministic, instant, and exact: a perfect description regenerates the seed image, so
GenCeption's score measures the describer alone."""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from vlgate.evaluators.backends.base import BackendInfo, ImageGenerator
from vlgate.evaluators.backends.kinds import BackendOptions, HelperKind
from vlgate.evaluators.scenes.renderer import renderer_digest, scene_from_description
from vlgate.evaluators.scenes.scene import render


class SceneRendererGenerator(ImageGenerator):
    """Description → scene → rendered image, ``image_size`` pixels square. ``seed`` is
    accepted and ignored: the renderer has no randomness."""

    def __init__(self, image_size: int = 64) -> None:
        self.image_size = image_size
        self.info = BackendInfo(name="scene-renderer", model="vlgate.evaluators.scenes.scene.render", digest=renderer_digest(), extra={"image_size": str(image_size)})

    def generate_images(self, prompts: Sequence[str], seed: int = 0) -> list[Image.Image]:
        return [render(scene_from_description(prompt), self.image_size) for prompt in prompts]


def _scene_renderer(_model: str, _options: BackendOptions) -> ImageGenerator:
    return SceneRendererGenerator()


#: the kind a suite names with ``generator: scene-renderer`` (it needs no model)
SCENE_RENDERER: HelperKind[ImageGenerator] = HelperKind("scene-renderer", _scene_renderer, needs_model=False)
