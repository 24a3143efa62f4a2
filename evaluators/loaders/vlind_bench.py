"""VLind-Bench's own release (``format="vlind-bench"``) → :class:`VlindItem` for ``vlind``.

Folder convention: the one the benchmark's release and evaluation scripts use (choice: rather
than invent one, a local copy of the Hugging Face data set loads as downloaded)::

    ROOT/data.json
    ROOT/images/counterfactual/{concept}/{context_id}_{context}/{image_id}.jpg
    ROOT/images/factual/{concept}/{context_id}_{factual_context}/0.jpg

``images/`` may be left out (``ROOT/counterfactual/...``, ``ROOT/factual/...``, the GitHub
README's layout). An image is ``.jpg``, else ``.png`` or ``.jpeg`` with the same stem. If the
folder named from the context text is not there (a file system may mangle long or unusual
names), the one folder under ``{concept}/`` whose name starts with ``{context_id}_`` is used.

``data.json`` is a list of instances. Fields read:

- ``concept``, ``context``, ``true_statement`` (s_cf), ``false_statement`` (s_fact),
  ``existent_noun``, ``non-existent_noun`` (``non_existent_noun`` also accepted);
- ``context_id`` and ``factual_context`` (for the folders; without ``factual_context`` the
  factual folder is found by its ``{context_id}_`` prefix alone);
- ``best_img_id``: the counterfactual image for VP and CB (``best_image``);
- ``aggregated_human_label_good_images``: ``{image_id: votes}``; the images with at least
  ``vote_threshold`` votes (2, the benchmark's default) are the accepted ones, used for LP
  (``counterfactual_images``, in image-id order).
- the id: ``id`` if present, else ``"{concept}-{context_id}"`` (the image folders are per
  concept, so a context id alone need not be unique).

Which instances and images count is the benchmark's (klee972/VLind-Bench ``eval/gpt4o_eval.py``
and ``eval/instructblip_eval.py`` ask the questions, ``eval/score_pipeline.py`` scores them):

- VP and CB ask about the best image whether or not it is accepted (the evaluation scripts
  read ``best_img_id`` alone); LP asks about the accepted images only, so a best image below
  the vote threshold is in VP and CB but not in LP.
- ``style`` (``score_pipeline.py``'s ``--style``) keeps the accepted images of one style: ids
  0-3 are photorealistic, 4-7 illustrations, 8-11 cartoons; ``all`` (the default) is ids 0-11,
  as there. An instance with accepted images but none of the style is left out, as the
  benchmark's scoring leaves it out (a selection, not an error); VP and CB still use its best
  image, whatever that image's style.
- An instance with no accepted image at all is one item error (the benchmark's scripts skip
  it silently; here it is reported, and scored by neither).

Errors for one instance (one ItemError each, naming the field): a missing field, no image with
enough votes, an image file that is not there (``best_img_id`` for the best image,
``aggregated_human_label_good_images['ID']`` for an accepted one).

Example instance::

    {"concept": "color", "context_id": 3, "context": "In this world, bananas are blue.",
     "factual_context": "Bananas are yellow.", "true_statement": "The banana is blue.",
     "false_statement": "The banana is yellow.", "existent_noun": "banana", "non-existent_noun": "car",
     "best_img_id": "0", "aggregated_human_label_good_images": {"0": 1, "2": 3, "5": 2}}

→ ``VlindItem(id="color-3", factual_image=.../factual/color/3_Bananas are yellow./0.jpg,
best_image=.../0.jpg, counterfactual_images=(.../2.jpg, .../5.jpg), ...)``: image 0 (one vote)
is asked about in VP and CB, images 2 and 5 in LP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from vlgate.evaluators.loaders.common import IMAGE_SUFFIXES, FieldProblem, Rows, check_image, load_rows, text
from vlgate.evaluators.loaders.items import LoadedDataset, VlindItem

DATA_FILE = "data.json"
DEFAULT_VOTE_THRESHOLD = 2
DEFAULT_STYLE = "all"
#: ``score_pipeline.py``'s ``--style``: the image ids each style keeps (twelve images per
#: context, four of each style, in this order; ``all`` is the twelve)
STYLES: dict[str, tuple[str, ...]] = {
    "photorealistic": ("0", "1", "2", "3"),
    "illustration": ("4", "5", "6", "7"),
    "cartoon": ("8", "9", "10", "11"),
    "all": tuple(str(i) for i in range(12)),
}


def images_root(data_file: Path) -> Path:
    root = data_file.parent
    return root / "images" if (root / "images").is_dir() else root


def instance_folder(kind_root: Path, concept: str, context_id: str, context: str | None, field: str) -> Path:
    """``{kind_root}/{concept}/{context_id}_{context}``, or the one folder starting ``{context_id}_``."""
    exact = kind_root / concept / f"{context_id}_{context}"
    if context is not None and exact.is_dir():
        return exact
    concept_folder = kind_root / concept
    candidates = sorted(p for p in concept_folder.iterdir() if p.is_dir() and p.name.startswith(f"{context_id}_")) if concept_folder.is_dir() else []
    if len(candidates) == 1:
        return candidates[0]
    why = "no folder" if not candidates else f"{len(candidates)} folders"
    expected = exact.name if context is not None else f"{context_id}_..."
    raise FieldProblem(field, f"{why} for context {context_id} under {concept_folder} (expected {expected!r})")


def image_in(folder: Path, image_id: str, field: str, verify: bool) -> Path:
    for suffix in (".jpg",) + tuple(s for s in IMAGE_SUFFIXES if s != ".jpg"):
        candidate = folder / f"{image_id}{suffix}"
        if candidate.is_file():
            return check_image(candidate, field, verify)
    raise FieldProblem(field, f"image file not found: {folder / (image_id + '.jpg')}")


def accepted_image_ids(votes: object, threshold: int) -> list[str]:
    if not isinstance(votes, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in votes.values()):
        raise FieldProblem("aggregated_human_label_good_images", f"expected {{image_id: votes}}, got {votes!r}")
    accepted = [str(image_id) for image_id, vote in votes.items() if vote >= threshold]
    return sorted(accepted, key=lambda i: (0, int(i), i) if i.isdigit() else (1, 0, i))


def instance_id(row: Mapping[str, object]) -> object:
    if row.get("id") is not None:
        return row["id"]
    if row.get("concept") is None or row.get("context_id") is None:
        return None
    return f"{row['concept']}-{row['context_id']}"


def _outside_style(row: Mapping[str, object], threshold: int, style: tuple[str, ...]) -> bool:
    """An instance with accepted images but none of ``style``: the benchmark's scoring leaves
    it out. (One with malformed votes or no accepted image at all is left to the parser,
    which reports it.)"""
    try:
        accepted = accepted_image_ids(row.get("aggregated_human_label_good_images"), threshold)
    except FieldProblem:
        return False
    return bool(accepted) and not any(image_id in style for image_id in accepted)


def load_vlind_bench(rows: Rows, verify: bool = True, vote_threshold: int = DEFAULT_VOTE_THRESHOLD, style: str = DEFAULT_STYLE) -> LoadedDataset[VlindItem]:
    """The instances of a VLind-Bench ``data.json``, with the benchmark's inclusion rules
    (module docstring): images with ``vote_threshold`` or more votes, of ``style``."""
    if style not in STYLES:
        raise ValueError(f"unknown VLind-Bench style {style!r}; expected one of {', '.join(STYLES)}")
    kept_ids = STYLES[style]
    root = images_root(rows.path)
    rows = dataclasses.replace(rows, rows=[row for row in rows.rows if not _outside_style(row.data, vote_threshold, kept_ids)])

    def parse(row: Mapping[str, object]) -> VlindItem:
        concept, context = text(row, "concept"), text(row, "context")
        noun_field = "non_existent_noun" if "non_existent_noun" in row else "non-existent_noun"
        statements = {name: text(row, name) for name in ("true_statement", "false_statement", "existent_noun")}
        non_existent = text(row, noun_field)
        if row.get("context_id") is None:
            raise FieldProblem("context_id", "missing")
        context_id = str(row["context_id"])
        if row.get("best_img_id") is None:
            raise FieldProblem("best_img_id", "missing")
        best_id = str(row["best_img_id"])
        if "aggregated_human_label_good_images" not in row:
            raise FieldProblem("aggregated_human_label_good_images", "missing")
        accepted = accepted_image_ids(row["aggregated_human_label_good_images"], vote_threshold)
        if not accepted:
            raise FieldProblem("aggregated_human_label_good_images", f"no counterfactual image has {vote_threshold} or more votes (the benchmark skips such instances)")
        considered = [image_id for image_id in accepted if image_id in kept_ids]  # not empty: _outside_style left the others out
        cf_folder = instance_folder(root / "counterfactual", concept, context_id, context, "context")
        best = image_in(cf_folder, best_id, "best_img_id", verify)  # VP and CB, accepted or not
        counterfactual = tuple(image_in(cf_folder, image_id, f"aggregated_human_label_good_images[{image_id!r}]", verify) for image_id in considered)
        factual_context = text(row, "factual_context", optional=True)  # names the folder; the id prefix finds it too
        factual = image_in(instance_folder(root / "factual", concept, context_id, factual_context, "factual_context"), "0", "factual_context", verify)
        return VlindItem(
            str(instance_id(row)), concept, context, statements["true_statement"], statements["false_statement"],
            statements["existent_noun"], non_existent, factual, best, counterfactual,
        )  # fmt: skip

    return load_rows("vlind", rows, parse, id_field="context_id", id_of=instance_id)


def looks_vlind_bench(row: Mapping[str, object]) -> bool:
    return "best_img_id" in row or "aggregated_human_label_good_images" in row or ("context_id" in row and "factual_image" not in row)
