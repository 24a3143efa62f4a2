"""Rendered scenes of coloured shapes with known ground truth (the synthetic world).

A :class:`Scene` is a list of :class:`Shape` objects on a grid; :func:`render`
draws it with PIL. Everything is deterministic given the scene, and scenes are
drawn from a ``numpy.random.Generator`` so a seed fixes the whole world.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (240, 210, 40),
    "purple": (140, 60, 180),
    "orange": (245, 140, 30),
}
SHAPES = ("circle", "square", "triangle")
GRID = 3  # objects sit in the cells of a GRID x GRID layout, at most one per cell
BACKGROUND = (255, 255, 255)


@dataclass(frozen=True)
class Shape:
    kind: str
    color: str
    cell: int  # 0 .. GRID*GRID-1, row-major

    def describe(self) -> str:
        return f"a {self.color} {self.kind}"


@dataclass(frozen=True)
class Scene:
    shapes: tuple[Shape, ...]
    background: tuple[int, int, int] = BACKGROUND
    #: extra drawn elements for VLind scenes: ("sun", color, kind) and ("grass", color)
    props: tuple[tuple[str, ...], ...] = field(default=())

    def count(self, kind: str | None = None, color: str | None = None) -> int:
        return sum(1 for s in self.shapes if (kind is None or s.kind == kind) and (color is None or s.color == color))

    def has(self, kind: str, color: str) -> bool:
        return self.count(kind, color) > 0

    def describe(self) -> str:
        """A plain-language description, the ground truth a perfect describer would give."""
        parts = [s.describe() for s in sorted(self.shapes, key=lambda s: s.cell)]
        for prop in self.props:
            parts.append(f"a {prop[1]} {prop[0]}" if prop[0] == "grass" else f"a {prop[1]} {prop[2]} sun")
        return "There is " + (", ".join(parts) if parts else "nothing") + "."


def random_scene(rng: np.random.Generator, n_shapes: int, kinds: Sequence[str] = SHAPES, colors: Sequence[str] = tuple(COLORS)) -> Scene:
    cells = rng.choice(GRID * GRID, size=n_shapes, replace=False)
    return Scene(tuple(Shape(str(rng.choice(kinds)), str(rng.choice(colors)), int(cell)) for cell in cells))


def _cell_box(cell: int, size: int, margin: float = 0.18) -> tuple[float, float, float, float]:
    step = size / GRID
    row, col = divmod(cell, GRID)
    pad = step * margin
    return (col * step + pad, row * step + pad, (col + 1) * step - pad, (row + 1) * step - pad)


def _draw_shape(draw: ImageDraw.ImageDraw, kind: str, box: tuple[float, float, float, float], rgb: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse(box, fill=rgb)
    elif kind == "square":
        draw.rectangle(box, fill=rgb)
    elif kind == "triangle":
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=rgb)
    else:
        raise ValueError(f"unknown shape kind {kind!r}")


def render(scene: Scene, size: int = 64) -> Image.Image:
    """Draw the scene as an RGB image of ``size`` x ``size`` pixels."""
    image = Image.new("RGB", (size, size), scene.background)
    draw = ImageDraw.Draw(image)
    for prop in scene.props:
        if prop[0] == "grass":
            draw.rectangle((0, size * 0.75, size, size), fill=COLORS[prop[1]])
        elif prop[0] == "sun":
            _draw_shape(draw, prop[2], (size * 0.62, size * 0.06, size * 0.92, size * 0.36), COLORS[prop[1]])
    if len(scene.shapes) == 1 and not scene.props:
        # a lone shape is drawn large: at tiny vision-tower resolutions a one-cell
        # shape is ~5% of the pixels, too faint a signal to learn from quickly
        shape = scene.shapes[0]
        _draw_shape(draw, shape.kind, (size * 0.15, size * 0.15, size * 0.85, size * 0.85), COLORS[shape.color])
        return image
    for shape in scene.shapes:
        _draw_shape(draw, shape.kind, _cell_box(shape.cell, size), COLORS[shape.color])
    return image


def cell_center(cell: int, size: int) -> tuple[int, int]:
    """Pixel at the centre of a cell (inside any shape drawn there, triangles included)."""
    x0, y0, x1, y1 = _cell_box(cell, size)
    return int((x0 + x1) / 2), int(y0 + (y1 - y0) * 0.66)
