"""Category folders of seed images (``format="mme"``, and the local ``"vlgate"`` layout) →
:class:`GenceptionItem` for ``genception``.

GenCeption draws its seed images from MME, whose release keeps one folder per category, with
the images either directly in it or in an ``images/`` sub-folder (MME's ``questions_answer_YN``
text files and any other file are ignored)::

    ROOT/artwork/images/10002.jpg          ROOT/single/single-0000.png   (the synthetic world)
    ROOT/artwork/questions_answer_YN/...   ROOT/single/single-0001.png
    ROOT/count/000000006040.jpg            ROOT/multi/multi-0000.png

Read: every sub-folder of ROOT that holds ``.png``, ``.jpg`` or ``.jpeg`` files (suffix in any
case, hidden files skipped), directly or in ``images/``; category = the folder's name. A
folder holding none is not a category and is passed over (an ``eval_tool/`` folder, say).
Item id = ``"{category}/{file stem}"`` (unique even when two categories reuse a file name);
items come in category order, then file-name order. An image that is not readable is one
error for that item, with the file as its source.
"""

from __future__ import annotations

from pathlib import Path

from vlgate.evaluators.loaders.common import FieldProblem, check_image, image_files
from vlgate.evaluators.loaders.items import GenceptionItem, ItemError, LoadedDataset


def category_images(folder: Path) -> list[Path]:
    images = image_files(folder)
    if (folder / "images").is_dir():
        images += image_files(folder / "images")
    return images


def load_categories(root: Path, verify: bool = True) -> LoadedDataset[GenceptionItem]:
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: GenCeption data is a folder of category folders, not a file")
    dataset: LoadedDataset[GenceptionItem] = LoadedDataset("genception", [], [], str(root))
    categories = [(folder, category_images(folder)) for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))]
    categories = [(folder, images) for folder, images in categories if images]
    if not categories:
        raise ValueError(f"{root}: no category folder with .png/.jpg/.jpeg images (expected ROOT/CATEGORY/*.png or ROOT/CATEGORY/images/*.jpg)")
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
