"""The synthetic world's scenes, low enough for every layer to draw them: coloured shapes on
a grid with known ground truth (``scene.py``) and a description read back into a scene
(``renderer.py``, the world's GenCeption generator's "weights"), and that generator itself
(``generator.py``), registered as the image-generator kind ``scene-renderer`` by entry
point: ``backends/`` never imports this package. The world's data sets and models
(``world/``) import it; ``scene.py`` and ``renderer.py`` import nothing of vlgate but each other."""
