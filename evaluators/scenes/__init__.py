"""The synthetic world's scenes, low enough for every layer to draw them: coloured shapes on
a grid with known ground truth (``scene.py``) and a description read back into a scene
(``renderer.py``, the world's GenCeption generator's "weights"). The world's data sets and
models (``world/``) and the scene-renderer backend (``backends/image_generators.py``) both
import them; they import nothing of vlgate but each other."""
