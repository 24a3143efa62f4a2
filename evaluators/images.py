"""The one way a data-set image is opened: its header read first, refused when it declares
more pixels than the budget, decoded only then.

A small PNG can declare a huge image (a 1-bit image of one colour compresses by thousands
to one), and decoding it allocates width × height bytes or more, which a model's processor
turns into floats (docs/service.md's limits table has the figures measured on one such
file). Pillow's own guard warns above
``Image.MAX_IMAGE_PIXELS`` (89,478,485) and refuses only above twice that, so such a file
passes it. ``Image.open`` is lazy: the size is known from the header before any pixel is
decoded, so :func:`read_image` compares it with a pixel budget and raises
:class:`ImageTooLarge` (width, height, budget) before ``load()``; the loaders' runners turn
that into the item's error (``loaders.items.open_image``), and the other items still run.

The budget is the suite's ``max_image_pixels`` (default :data:`DEFAULT_MAX_PIXELS`,
40,000,000: above an 8K UHD frame, 7680×4320, and far above the benchmarks' images; why, in
docs/service.md's limits table; at most Pillow's warning limit, so Pillow never warns about an image
the budget admits). The suite's runs set it for what they open with :func:`pixel_budget`;
code outside a suite (the report, a held-out set) gets the default.

Within the budget an image is decoded whole and handed over as it is: the released
harnesses give the model's processor the full image, and what the model receives is
exactly what was decoded, so memory stays proportional to it. A caller that knows the size
it needs (the report's pictures) passes ``fit``: a JPEG is then decoded at 1/2, 1/4 or 1/8
scale by Pillow's ``draft`` (the decoder never allocates the full size), and any other
format is reduced by an integer factor after decoding, never below ``fit``.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from PIL import Image

#: the default pixel budget (suite ``max_image_pixels``): see the module docstring
DEFAULT_MAX_PIXELS = 40_000_000
#: the largest budget a suite may set: Pillow's warning limit (it refuses at twice this)
LARGEST_BUDGET = 89_478_485

ImageSource = Path | str | bytes | IO[bytes]

_budget: contextvars.ContextVar[int] = contextvars.ContextVar("vlgate_max_image_pixels", default=DEFAULT_MAX_PIXELS)


class ImageTooLarge(ValueError):
    """An image whose header declares more pixels than the budget (or than Pillow's own
    decompression-bomb limit, ``size`` then None); nothing of it was decoded."""

    def __init__(self, size: tuple[int, int] | None, budget: int, detail: str = ""):
        self.size, self.budget = size, budget
        if size is not None:
            message = f"{size[0]}×{size[1]} = {size[0] * size[1]:,} pixels, over the pixel budget of {budget:,} (suite max_image_pixels)"
        else:
            message = f"over Pillow's decompression-bomb limit ({detail})"
        super().__init__(message)


def current_budget() -> int:
    """The pixel budget images are opened with here (:func:`pixel_budget`, else the default)."""
    return _budget.get()


@contextlib.contextmanager
def pixel_budget(pixels: int) -> Iterator[None]:
    """Images opened in this context (this thread or task) are refused above ``pixels``."""
    if pixels <= 0:
        raise ValueError(f"a pixel budget must be positive, got {pixels}")
    token = _budget.set(pixels)
    try:
        yield
    finally:
        _budget.reset(token)


def _source(source: ImageSource) -> Path | str | IO[bytes]:
    return io.BytesIO(source) if isinstance(source, bytes) else source


@contextlib.contextmanager
def opened_header(source: ImageSource) -> Iterator[Image.Image]:
    """``Image.open`` (lazy: the header only), Pillow's decompression-bomb refusal (or its
    warning, where warnings are errors) raised as :class:`ImageTooLarge`. For a header's
    format and size, or ``verify()``; :func:`read_image` decodes."""
    try:
        image = Image.open(_source(source))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageTooLarge(None, current_budget(), str(error)) from None
    with image:
        yield image


def check_size(size: tuple[int, int], budget: int | None = None) -> None:
    """:class:`ImageTooLarge` when ``size`` (width, height) has more pixels than ``budget``
    (default: :func:`current_budget`)."""
    limit = current_budget() if budget is None else budget
    if size[0] * size[1] > limit:
        raise ImageTooLarge((size[0], size[1]), limit)


def read_image(source: ImageSource, *, budget: int | None = None, mode: str | None = "RGB", fit: tuple[int, int] | None = None) -> Image.Image:
    """The image at ``source`` (a path, bytes or a binary file), decoded and converted to
    ``mode`` (None: as stored). Raises :class:`ImageTooLarge` when its header declares more
    than ``budget`` pixels (default: :func:`current_budget`), before decoding anything;
    Pillow's own errors (``UnidentifiedImageError``, ``OSError``, ...) otherwise pass through.

    ``fit``: the smallest (width, height) the caller needs; an image larger than twice that
    on both sides is decoded (JPEG: ``draft``) or reduced by an integer factor, never below
    it. Without ``fit`` the pixels are exactly ``Image.open(source).convert(mode)``'s."""
    with opened_header(source) as image:
        check_size(image.size, budget)
        try:
            if fit is not None and image.format == "JPEG":
                image.draft(mode if mode in ("RGB", "L") else None, fit)
            image.load()
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            raise ImageTooLarge(None, current_budget() if budget is None else budget, str(error)) from None
        decoded: Image.Image = image
        if fit is not None:
            factor = min(decoded.size[0] // max(1, fit[0]), decoded.size[1] // max(1, fit[1]))
            if factor >= 2:
                decoded = decoded.reduce(factor)
        if mode is not None and decoded.mode != mode:
            decoded = decoded.convert(mode)
        return decoded
