"""The synthetic world's description → image generator, as runtime code: GenCeption's Gen
for the world (``SceneRendererGenerator``). :func:`scene_from_description` reads a
description in the world's language (what :meth:`Scene.describe` writes, or free text that
names "<colour> <shape>" pairs) back into a :class:`Scene`; :func:`scenes.render` draws it.
Its "weights" are its code, digested by :func:`renderer_digest`.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import sys

from vlgate.evaluators.scenes.scene import BACKGROUND, COLORS, GRID, SHAPES, Scene, Shape, render

#: The sky behind the world's outdoor scenes (GenCeption's landscapes, VLind's first sky):
#: a description that mentions the sun or grass is drawn outdoors.
SKY = (200, 225, 255)

_NUMBER_WORDS = {"no": 0, "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


# --- description → scene -------------------------------------------------------------


def _shape_kind(word: str | None) -> str | None:
    """"circle" or "circles" → "circle"; anything else → None."""
    if word is None:
        return None
    singular = word[:-1] if word.endswith("s") and word[:-1] in SHAPES else word
    return singular if singular in SHAPES else None


def _count(word: str | None) -> int:
    """How many shapes a word before "<colour> <shape>" asks for ("two", "3", "no"); 1
    otherwise. Never more than the grid holds."""
    if word is None:
        return 1
    count = int(word) if word.isdigit() else _NUMBER_WORDS.get(word, 1)
    return min(count, GRID * GRID)


def scene_from_description(text: str) -> Scene:
    """The scene a description names, in the world's language.

    - Every "<colour> <shape>" mention, in order, becomes a shape in the next free grid
      cell (row-major), repeated when a count comes first ("two red circles", "no red
      circles"); at most GRID×GRID shapes, as a scene has cells.
    - "<colour> <shape> sun" and "<colour> sun" are the sun prop (a circle unless a shape
      is named), "<colour> grass" the grass prop; a bare "sun" or "grass" gets its
      common-sense colour. The first mention of each counts. Props put the scene outdoors
      (the world's sky as background).
    - Nothing recognisable gives the empty scene ("There is nothing.").

    :meth:`Scene.describe` lists shapes in cell order and drops the cells, so this is its
    inverse up to where the shapes sit: ``describe(parse(describe(s))) == describe(s)``
    always, and ``render(parse(describe(s))) == render(s)`` where ``s`` fills the first
    cells (or holds one shape and no props, which is drawn large whatever its cell).
    """
    words = re.findall(r"[a-z]+|\d+", text.lower())
    mentions: list[tuple[str, str]] = []
    props: dict[str, tuple[str, ...]] = {}
    index = 0
    while index < len(words):
        word = words[index]
        following = words[index + 1] if index + 1 < len(words) else None
        after_that = words[index + 2] if index + 2 < len(words) else None
        if word in COLORS and (kind := _shape_kind(following)) is not None:
            if after_that == "sun":
                props.setdefault("sun", ("sun", word, kind))
                index += 3
                continue
            mentions += [(kind, word)] * _count(words[index - 1] if index > 0 else None)
            index += 2
            continue
        if word in COLORS and following in ("sun", "grass"):
            props.setdefault(following, ("sun", word, "circle") if following == "sun" else ("grass", word))
            index += 2
            continue
        if word == "sun":
            props.setdefault("sun", ("sun", "yellow", "circle"))
        elif word == "grass":
            props.setdefault("grass", ("grass", "green"))
        index += 1
    shapes = tuple(Shape(kind, color, cell) for cell, (kind, color) in enumerate(mentions[: GRID * GRID]))
    return Scene(shapes, background=SKY if props else BACKGROUND, props=tuple(props.values()))


def renderer_digest() -> str:
    """What identifies the world's description → image generator: its "weights" are its
    code, so sha256 over the drawing module and the parser (with the constants it reads)."""
    parts = [inspect.getsource(sys.modules[render.__module__])] + [inspect.getsource(function) for function in (scene_from_description, _shape_kind, _count)]
    parts += [repr(SKY), repr(sorted(_NUMBER_WORDS.items()))]
    return "sha256:" + hashlib.sha256("\0".join(parts).encode()).hexdigest()


__all__ = ["SKY", "renderer_digest", "scene_from_description"]
