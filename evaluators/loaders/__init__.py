"""Data-set loaders: local files in, the items runners consume out.

- :func:`load_dataset` — one entry point for every evaluator and format (:mod:`.dataset`).
- :func:`pair_unlabelled` — NaturalBench-format units from separate image–question pairs,
  by seeded pairing that is returned for the record (:mod:`.pairing`);
  :func:`units_from_pairing` rebuilds the units of a recorded pairing.
- :func:`natconbench_units` — NatConBench-style units from ConBench-style items (:mod:`.natconbench`).

One module per format documents the files and fields it reads: :mod:`.local` (the project's
own, as the synthetic world writes it), :mod:`.mmmu`, :mod:`.naturalbench`,
:mod:`.vlind_bench`, :mod:`.mme`, :mod:`.aokvqa`, :mod:`.easyvqa`. :mod:`.tables` reads the Hugging Face
release layouts (parquet, ``save_to_disk`` arrow) into the same rows, embedded images
extracted once into ``$VLGATE_HOME/image-cache``.
"""

from vlgate.evaluators.loaders.dataset import EVALUATORS, FORMATS, detect_format, load_dataset
from vlgate.evaluators.loaders.items import (
    DeccItem,
    GenceptionItem,
    ItemError,
    ItemLoadError,
    LoadedDataset,
    McItem,
    NbUnit,
    VlindItem,
    open_image,
)
from vlgate.evaluators.loaders.natconbench import ConBenchItem, natconbench_units
from vlgate.evaluators.loaders.pairing import Pairing, YesNoItem, pair_unlabelled, units_from_pairing

__all__ = [
    "EVALUATORS",
    "FORMATS",
    "ConBenchItem",
    "DeccItem",
    "GenceptionItem",
    "ItemError",
    "ItemLoadError",
    "LoadedDataset",
    "McItem",
    "NbUnit",
    "Pairing",
    "VlindItem",
    "YesNoItem",
    "detect_format",
    "load_dataset",
    "natconbench_units",
    "open_image",
    "pair_unlabelled",
    "units_from_pairing",
]
