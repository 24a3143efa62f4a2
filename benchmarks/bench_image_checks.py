"""What checking a data set's images costs beside decoding them: `check_image` (PIL's
lazy `open` and `verify()`, what the loaders run on every item) against a full decode to
RGB (what the runner's `open_image` does), on 1,000 images of three kinds written here.

Prints each kind's seconds for both and their ratio (decode / check): the loaders check
every image up front because the ratio is large, and decode only what a runner asks for.

    python benchmarks/bench_image_checks.py [--n 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from vlgate.evaluators.images import read_image
from vlgate.evaluators.loaders.common import check_image

KINDS = {"64 px PNG": (64, "png"), "512 px PNG": (512, "png"), "512 px JPEG": (512, "jpeg")}


def write_images(folder: Path, n: int, size: int, extension: str, seed: int = 0) -> list[Path]:
    """``n`` images of noise (incompressible: the worst case for a decoder) of ``size`` px."""
    rng = np.random.default_rng(seed)
    paths = []
    for index in range(n):
        path = folder / f"{index:05d}.{extension}"
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def seconds(action, paths: list[Path]) -> float:
    start = time.perf_counter()
    for path in paths:
        action(path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    print(f"{'images':<14} {'check (s)':>10} {'decode (s)':>11} {'decode / check':>15}")
    with tempfile.TemporaryDirectory() as scratch:
        for name, (size, extension) in KINDS.items():
            folder = Path(scratch) / name.replace(" ", "-")
            folder.mkdir()
            paths = write_images(folder, args.n, size, extension)
            seconds(lambda path: path.read_bytes(), paths)  # warm page cache for both
            checked = seconds(lambda path: check_image(path, "image"), paths)
            decoded = seconds(lambda path: read_image(path), paths)
            print(f"{name:<14} {checked:>10.3f} {decoded:>11.3f} {decoded / checked:>14.1f}x")


if __name__ == "__main__":
    main()
