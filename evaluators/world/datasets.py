"""Synthetic data sets for all five evaluators, built from rendered scenes.

``build_datasets(out, size, seed)`` writes, under ``out``:

| folder | file | one JSON object per line |
| --- | --- | --- |
| ``mc/`` | ``items.jsonl`` | ``{"id", "image", "question", "options": [4], "answer": int, "category"}`` |
| ``yesno/`` | ``items.jsonl`` | ``{"id", "image", "question", "answer": "yes"|"no", "category"}`` |
| ``nb/`` | ``units.jsonl`` | ``{"id", "images": [V1, V2], "statements": [T1, T2], "answer": "c1"|"c2", "category"}`` |
| ``vlind/`` | ``items.jsonl`` | ``{"id", "concept", "context", "true_statement", "false_statement", "existent_noun", "non_existent_noun", "factual_image", "counterfactual_images": [...]}`` |
| ``decc/`` | ``items.jsonl`` | ``{"id", "image", "question", "options", "answer", "sub_questions", "sub_answers"}`` |
| ``genception/`` | ``CATEGORY/*.png`` | seed images in category folders (MME style) |

Image paths are relative to the data set's folder. As in VLind-Bench's files,
``true_statement`` is s_cf (true in the counterfactual world) and
``false_statement`` is s_fact. Same seed, same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from vlgate.evaluators.scenes.scene import COLORS, SHAPES, Scene, Shape, random_scene, render

if TYPE_CHECKING:
    from PIL import Image


@dataclass(frozen=True)
class WorldSize:
    mc: int
    yesno: int
    nb: int
    vlind: int
    decc: int
    genception_per_category: int
    image_size: int = 64


SIZES = {
    "small": WorldSize(mc=48, yesno=48, nb=48, vlind=36, decc=48, genception_per_category=8),
    "medium": WorldSize(mc=400, yesno=400, nb=200, vlind=120, decc=200, genception_per_category=30),
}


class McRow(TypedDict):
    """An MC item's fields (``mc/items.jsonl`` adds ``id`` and ``image``)."""

    question: str
    options: list[str]
    answer: int
    category: str


class YesNoRow(TypedDict):
    """A yes/no item's fields (``yesno/items.jsonl`` adds ``id`` and ``image``)."""

    question: str
    answer: str
    category: str


class NbRow(TypedDict):
    """A NaturalBench unit's fields (``nb/units.jsonl`` adds ``id`` and ``images``)."""

    statements: list[str]
    answer: str
    category: str


class VlindRow(TypedDict):
    """A VLind item's fields (``vlind/items.jsonl`` adds ``id`` and the image paths)."""

    concept: str
    context: str
    true_statement: str
    false_statement: str
    existent_noun: str
    non_existent_noun: str


class DeccRow(TypedDict):
    """A DeCC item's fields (``decc/items.jsonl`` adds ``id`` and ``image``)."""

    question: str
    options: list[str]
    answer: str
    sub_questions: list[str]
    sub_answers: list[str]


class _Writer:
    """Writes one data set's images and JSONL rows under its folder."""

    def __init__(self, root: Path, image_size: int) -> None:
        self.root, self.image_size = root, image_size
        (root / "images").mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, object]] = []

    def image(self, name: str, scene: Scene) -> str:
        relative = f"images/{name}.png"
        render(scene, self.image_size).save(self.root / relative, format="PNG")
        return relative

    def save(self, filename: str) -> Path:
        path = self.root / filename
        with open(path, "w", encoding="utf-8") as handle:
            for row in self.rows:
                handle.write(json.dumps(row) + "\n")
        return path


#: MC options in a fixed order per question type, as in benchmarks with a fixed answer set.
#: Why not shuffled: a tiny VLM trained for CPU-minutes does not learn to point from the
#: image's colour to the letter of the option that names it, while with a fixed order it
#: reads colour and shape off the image early in training (the measurement: docs/world.md,
#: "How the training recipe was chosen").
MC_OPTIONS = {"color": ("red", "green", "blue", "yellow"), "shape": ("circle", "square", "triangle", "star"), "count": ("1", "2", "3", "4")}


def mc_item(rng: np.random.Generator, index: int) -> tuple[Scene, McRow]:
    """One four-option question about colour, shape or count, with the scene that answers it."""
    category = ("color", "shape", "count")[index % 3]
    options = list(MC_OPTIONS[category])
    if category == "count":
        kind = str(rng.choice(SHAPES))
        n = int(rng.integers(1, 5))
        others = [k for k in SHAPES if k != kind]
        cells = rng.choice(9, size=n + int(rng.integers(0, 3)), replace=False)
        shapes = [Shape(kind if i < n else str(rng.choice(others)), str(rng.choice(list(COLORS))), int(c)) for i, c in enumerate(cells)]
        return Scene(tuple(shapes)), {"question": f"How many {kind}s are there in the image?", "options": options, "answer": n - 1, "category": category}
    scene = random_scene(rng, 1, colors=MC_OPTIONS["color"])
    target = scene.shapes[0]
    if category == "color":
        return scene, {"question": f"What color is the {target.kind}?", "options": options, "answer": options.index(target.color), "category": category}
    return scene, {"question": f"Which shape is {target.color}?", "options": options, "answer": options.index(target.kind), "category": category}


def yesno_item(rng: np.random.Generator, index: int) -> tuple[Scene, YesNoRow]:
    """"Is there a {color} {shape}?" about a scene of one or two shapes, balanced yes/no;
    a "no" asks for a colour-and-kind pair that is not in the scene."""
    scene = random_scene(rng, 1 if rng.random() < 0.7 else 2)
    if index % 2 == 0:
        asked = scene.shapes[int(rng.integers(len(scene.shapes)))]
        kind, color = asked.kind, asked.color
    else:
        while True:
            kind, color = str(rng.choice(SHAPES)), str(rng.choice(list(COLORS)))
            if not scene.has(kind, color):
                break
    answer = "yes" if scene.has(kind, color) else "no"
    return scene, {"question": f"Is there a {color} {kind} in the image?", "answer": answer, "category": "existence"}


def nb_unit(rng: np.random.Generator, index: int) -> tuple[tuple[Scene, Scene], NbRow]:
    """Two one-shape images differing in colour (or shape) and two statements with alternating answers."""
    cell = int(rng.integers(9))
    if index % 2 == 0:
        kind = str(rng.choice(SHAPES))
        c1, c2 = (str(c) for c in rng.choice(list(COLORS), size=2, replace=False))
        scenes = (Scene((Shape(kind, c1, cell),)), Scene((Shape(kind, c2, cell),)))
        statements = [f"There is a {c1} {kind}.", f"There is a {c2} {kind}."]
        category = "attribute"
    else:
        color = str(rng.choice(list(COLORS)))
        k1, k2 = (str(k) for k in rng.choice(SHAPES, size=2, replace=False))
        scenes = (Scene((Shape(k1, color, cell),)), Scene((Shape(k2, color, cell),)))
        statements = [f"There is a {color} {k1}.", f"There is a {color} {k2}."]
        category = "object"
    if rng.random() < 0.5:  # c2: swap the statements so V1–T2 and V2–T1 are the true pairs
        statements.reverse()
        return scenes, {"statements": statements, "answer": "c2", "category": category}
    return scenes, {"statements": statements, "answer": "c1", "category": category}


#: VLind concepts: a thing with a common-sense attribute that a counterfactual world changes.
VLIND_FACTS = (
    # concept, noun, factual attribute, counterfactual choices, how to draw
    ("color", "sun", "yellow", ("green", "blue", "purple"), "sun_color"),
    ("color", "grass", "green", ("red", "blue", "purple"), "grass_color"),
    ("shape", "sun", "circle", ("square", "triangle"), "sun_shape"),
)


SKIES = ((200, 225, 255), (225, 235, 250), (255, 235, 205))  # counterfactual images differ in their sky


def _vlind_scene(draw: str, attribute: str, sky: tuple[int, int, int] = SKIES[0]) -> Scene:
    if draw == "sun_color":
        return Scene((), background=sky, props=(("sun", attribute, "circle"),))
    if draw == "grass_color":
        return Scene((), background=sky, props=(("grass", attribute),))
    return Scene((), background=sky, props=(("sun", "yellow", attribute),))


def vlind_item(rng: np.random.Generator, index: int) -> tuple[Scene, list[Scene], VlindRow]:
    concept, noun, fact, counterfactuals, draw = VLIND_FACTS[index % len(VLIND_FACTS)]
    cf = str(rng.choice(counterfactuals))
    word = lambda attribute: f"{attribute}" if concept == "color" else {"circle": "round", "square": "square", "triangle": "triangular"}[attribute]
    n_images = int(rng.integers(1, len(SKIES) + 1))
    absent = str(rng.choice([n for n in ("umbrella", "car", "tree", "house") if n != noun]))
    row: VlindRow = {
        "concept": concept,
        "context": f"In this world, the {noun} is {word(cf)}. Everyone has always seen the {noun} this way.",
        "true_statement": f"The {noun} is {word(cf)}.",
        "false_statement": f"The {noun} is {word(fact)}.",
        "existent_noun": noun,
        "non_existent_noun": absent,
    }
    return _vlind_scene(draw, fact), [_vlind_scene(draw, cf, SKIES[i]) for i in range(n_images)], row


def decc_item(rng: np.random.Generator, index: int) -> tuple[Scene, DeccRow]:
    """"Are there more {c1} shapes than {c2} shapes?": the answer follows from two counts."""
    c1, c2 = (str(c) for c in rng.choice(list(COLORS), size=2, replace=False))
    n1, n2 = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    if n1 == n2 and index % 2 == 0:
        n1 += 1
    cells = rng.choice(9, size=n1 + n2, replace=False)
    shapes = [Shape(str(rng.choice(SHAPES)), c1 if i < n1 else c2, int(cell)) for i, cell in enumerate(cells)]
    return Scene(tuple(shapes)), {
        "question": f"Are there more {c1} shapes than {c2} shapes?",
        "options": ["yes", "no"],
        "answer": "yes" if n1 > n2 else "no",
        "sub_questions": [f"How many {c1} shapes are there?", f"How many {c2} shapes are there?"],
        "sub_answers": [str(n1), str(n2)],
    }


GENCEPTION_CATEGORIES: dict[str, Callable[[np.random.Generator], Scene]] = {
    "single": lambda rng: random_scene(rng, 1),
    "multi": lambda rng: random_scene(rng, 3),
    "landscape": lambda rng: Scene(random_scene(rng, 1).shapes, background=(200, 225, 255), props=(("grass", "green"), ("sun", "yellow", "circle"))),
}


def build_datasets(out: str | Path, size: str = "small", seed: int = 0) -> dict[str, Path]:
    """Write every synthetic data set under ``out``; returns the main file (or folder) of each."""
    if size not in SIZES:
        raise ValueError(f"unknown world size {size!r}; expected one of {', '.join(SIZES)}")
    sizes, out = SIZES[size], Path(out)
    # one child generator per data set, so growing one set never changes another
    rngs = dict(zip(("mc", "yesno", "nb", "vlind", "decc", "genception"), (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(6))))
    paths: dict[str, Path] = {}
    row: Mapping[str, object]  # each data set's fields (its TypedDict)

    for name, count, make in (("mc", sizes.mc, mc_item), ("yesno", sizes.yesno, yesno_item), ("decc", sizes.decc, decc_item)):
        writer = _Writer(out / name, sizes.image_size)
        for index in range(count):
            scene, row = make(rngs[name], index)
            item_id = f"{name}-{index:04d}"
            writer.rows.append({"id": item_id, "image": writer.image(item_id, scene), **row})
        paths[name] = writer.save("items.jsonl")

    writer = _Writer(out / "nb", sizes.image_size)
    for index in range(sizes.nb):
        (v1, v2), row = nb_unit(rngs["nb"], index)
        unit_id = f"nb-{index:04d}"
        writer.rows.append({"id": unit_id, "images": [writer.image(f"{unit_id}-v1", v1), writer.image(f"{unit_id}-v2", v2)], **row})
    paths["nb"] = writer.save("units.jsonl")

    writer = _Writer(out / "vlind", sizes.image_size)
    for index in range(sizes.vlind):
        factual, counterfactual, row = vlind_item(rngs["vlind"], index)
        item_id = f"vlind-{index:04d}"
        images = [writer.image(f"{item_id}-cf{i}", scene) for i, scene in enumerate(counterfactual)]
        writer.rows.append({"id": item_id, **row, "factual_image": writer.image(f"{item_id}-fact", factual), "counterfactual_images": images})
    paths["vlind"] = writer.save("items.jsonl")

    root = out / "genception"
    for category, draw_scene in GENCEPTION_CATEGORIES.items():
        (root / category).mkdir(parents=True, exist_ok=True)
        for index in range(sizes.genception_per_category):
            render(draw_scene(rngs["genception"]), sizes.image_size).save(root / category / f"{category}-{index:04d}.png", format="PNG")
    paths["genception"] = root
    return paths


def _corrupt(image: Image.Image, rng: np.random.Generator, strength: float) -> Image.Image:
    """The shifted batch of the drift demo: images washed out towards grey with pixel noise,
    as from a camera or pipeline change."""
    from PIL import Image

    array = np.asarray(image, dtype=np.float32)
    grey = np.full_like(array, 128.0)
    noisy = (1 - strength) * array + strength * grey + rng.normal(0, 60 * strength, array.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


DRIFT_SUITE = """\
# A new unlabelled batch for the scheduled drift check: label-free evaluators only.
name: {name}
batch_size: 8
evaluators:
  lcm-nb: {{data: yesno, pair_seed: {seed}, protocol: vlgate}}
  genception: {{data: genception, iterations: 2, generator: scene-renderer, encoder: {encoder}, protocol: vlgate}}
  decc: {{data: decc, llm: {llm}, protocol: vlgate}}
"""


def build_unlabelled_batch(out: str | Path, checkpoints: Path, n: int = 32, seed: int = 1, corruption: float = 0.0) -> Path:
    """An unlabelled batch (yes/no questions, GenCeption seeds, DeCC questions; no answers)
    from the world's distribution, or shifted by ``corruption`` in [0, 1]; returns the
    drift suite written beside it."""
    out = Path(out)
    rng, noise = np.random.default_rng(seed), np.random.default_rng(seed + 10_000)
    size = SIZES["small"].image_size

    def save(writer: _Writer, name: str, scene: Scene) -> str:
        relative = f"images/{name}.png"
        image = render(scene, size)
        (_corrupt(image, noise, corruption) if corruption > 0 else image).save(writer.root / relative, format="PNG")
        return relative

    row: Mapping[str, object]  # each data set's fields (its TypedDict), then without the answers
    for name, make in (("yesno", yesno_item), ("decc", decc_item)):
        writer = _Writer(out / name, size)
        for index in range(n):
            scene, row = make(rng, index)
            row = {k: v for k, v in row.items() if k not in ("answer", "sub_answers")}
            item_id = f"batch-{name}-{index:04d}"
            writer.rows.append({"id": item_id, "image": save(writer, item_id, scene), **row})
        writer.save("items.jsonl")
    writer = _Writer(out / "genception" / "single", size)
    for index in range(max(2, n // 4)):
        save(writer, f"seed-{index:04d}", GENCEPTION_CATEGORIES["single"](rng))
    for image in (out / "genception" / "single" / "images").iterdir():
        image.rename(out / "genception" / "single" / image.name)
    (out / "genception" / "single" / "images").rmdir()
    suite = out / "suite.yaml"
    suite.write_text(DRIFT_SUITE.format(name=out.name, seed=seed, encoder=checkpoints / "vit-encoder", llm=checkpoints / "llm-agent"))
    return suite
