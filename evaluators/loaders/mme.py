"""Category folders of seed images (``format="mme"``, and the local ``"vlgate"`` layout) →
:class:`GenceptionItem` for ``genception``.

GenCeption draws its seed images from MME, whose release keeps one folder per category, with
the images either directly in it or in an ``images/`` sub-folder (MME's ``questions_answer_YN``
text files and any other file are ignored)::

    ROOT/artwork/images/10002.jpg          ROOT/single/single-0000.png   (the synthetic world)
    ROOT/artwork/questions_answer_YN/...   ROOT/single/single-0001.png
    ROOT/count/000000006040.jpg            ROOT/multi/multi-0000.png

Read: every sub-folder of ROOT that holds ``.png``, ``.jpg`` or ``.jpeg`` files (suffix in any
case, hidden files skipped), directly or in ``images/``; category = the folder's name. Under the
``genception`` protocol ``image_suffixes`` is ``(".jpg", ".png")``, the released
``find_image_files``'s filter, so a ``.jpeg`` file is not a seed image there. A
folder holding none is not a category and is passed over (an ``eval_tool/`` folder, say).
Images directly in ROOT are the category named after ROOT: GenCeption's own example folder
(EQTPartners/GenCeption ``datasets/examples/*.jpg``, which its ``exp_llava.py --dataset``
reads as one set) is flat.
Item id = ``"{category}/{file stem}"`` (unique even when two categories reuse a file name);
items come in category order, then file-name order. An image that is not readable is one
error for that item, with the file as its source.

**lmms-eval's MME on the Hub** (``lmms-lab/MME``: ``data/test-0000K-of-00004-HASH.parquet``,
read by :mod:`.tables`; columns as lmms-eval's ``tasks/mme`` reads them): one row per
question, two questions (a "yes" and a "no" one) per image, so rows are grouped by
``question_id``, which names the image (``"code_reasoning/0020.png"``, lmms-eval's unit of
MME's pairwise scoring). Read: ``question_id``, ``category``, ``image`` (embedded);
``question`` and ``answer`` are not (GenCeption needs the seed image only). One item per
``question_id``: id ``"{category}/{file stem of question_id}"`` and the category as the
category folders give them, in the same order (category, then file name). Rows of one
``question_id`` must agree on category and image (the same bytes, or the same pixels);
otherwise, or when a field is missing or the image unreadable, that item is one error
naming the first row and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vlgate.evaluators.images import ImageTooLarge
from vlgate.evaluators.loaders.common import IMAGE_SUFFIXES, FieldProblem, Row, Rows, check_image, image_field, image_files, text
from vlgate.evaluators.loaders.items import GenceptionItem, ItemError, LoadedDataset
from vlgate.evaluators.loaders.tables import same_image


def category_images(folder: Path, suffixes: tuple[str, ...] = IMAGE_SUFFIXES) -> list[Path]:
    images = image_files(folder, suffixes)
    if (folder / "images").is_dir():
        images += image_files(folder / "images", suffixes)
    return images


def load_categories(root: Path, verify: bool = True, image_suffixes: tuple[str, ...] = IMAGE_SUFFIXES) -> LoadedDataset[GenceptionItem]:
    root = Path(root)
    suffixes = tuple(image_suffixes)
    if not root.is_dir():
        raise ValueError(f"{root}: GenCeption data is a folder of category folders, not a file")
    dataset: LoadedDataset[GenceptionItem] = LoadedDataset("genception", [], [], str(root))
    categories = [(folder, category_images(folder, suffixes)) for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))]
    # GenCeption's own example folder (datasets/examples/*.jpg) is flat: the folder is the category
    categories = [(root, image_files(root, suffixes)), *categories]
    categories = [(folder, images) for folder, images in categories if images]
    if not categories:
        kinds = "/".join(suffixes)
        raise ValueError(f"{root}: no category folder with {kinds} images (expected ROOT/CATEGORY/*.png or ROOT/CATEGORY/images/*.jpg)")
    seen: set[str] = set()
    for folder, images in categories:
        for image in images:
            item_id = f"{folder.name}/{image.stem}"
            try:
                if item_id in seen:  # same stem in CATEGORY/ and CATEGORY/images/, or x.png beside x.jpg
                    raise FieldProblem("image", f"duplicate id: another image of {folder} has the stem {image.stem!r}")
                check_image(image, "image", verify)
            except FieldProblem as problem:
                dataset.errors.append(ItemError(str(image), item_id, problem.field, problem.message))
                continue
            seen.add(item_id)
            dataset.items.append(GenceptionItem(item_id, folder.name, image))
    return dataset


def load_mme_table(rows: Rows, verify: bool = True) -> LoadedDataset[GenceptionItem]:
    """lmms-lab/MME's rows (see the module docstring) → one GenceptionItem per image."""
    dataset: LoadedDataset[GenceptionItem] = LoadedDataset("genception", [], list(rows.errors), str(rows.path))
    groups: dict[str, list[Row]] = {}
    for row in rows.rows:
        question_id = row.data.get("question_id")
        if not isinstance(question_id, str) or not question_id.strip():
            dataset.errors.append(ItemError(row.source, None, "question_id", "missing" if question_id is None else f"expected a non-empty string, got {question_id!r}"))
            continue
        groups.setdefault(question_id.strip(), []).append(row)
    found: list[tuple[tuple[str, str], GenceptionItem]] = []
    seen: dict[str, str] = {}
    for question_id, members in groups.items():
        first = members[0]
        stem = Path(question_id).stem
        item_id = None
        try:
            category = text(first.data, "category")
            item_id = f"{category}/{stem}"
            if item_id in seen:
                raise FieldProblem("question_id", f"duplicate id {item_id!r} (question_id {seen[item_id]!r} has the same category and file stem)")
            for other in members[1:]:
                if _category(other.data) != category:
                    raise FieldProblem("category", f"rows of question_id {question_id!r} disagree: {category!r} at {first.source}, {other.data.get('category')!r} at {other.source}")
                try:
                    same = same_image(first.data.get("image"), other.data.get("image"))
                except ImageTooLarge as error:
                    raise FieldProblem("image", f"rows of question_id {question_id!r} hold an image too large to compare ({error})") from None
                if not same:
                    raise FieldProblem("image", f"rows of question_id {question_id!r} hold different images ({first.source}, {other.source})")
            image = image_field(first.data, "image", rows.path.parent, verify)
        except FieldProblem as problem:
            dataset.errors.append(ItemError(first.source, item_id or question_id, problem.field, problem.message))
            continue
        seen[item_id] = question_id
        found.append(((category, Path(question_id).name), GenceptionItem(item_id, category, image)))
    dataset.items = [item for _, item in sorted(found, key=lambda entry: entry[0])]
    return dataset


def _category(row: Mapping[str, object]) -> str | None:
    value = row.get("category")
    return value.strip() if isinstance(value, str) else None
