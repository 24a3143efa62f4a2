"""The items the runners consume, one dataclass per evaluator.

Loaders (one module per format, local files only) turn a data set on disk into a
:class:`LoadedDataset`: the items that could be read, and one :class:`ItemError` per
item that could not (missing or corrupt image, missing field) — a bad item never stops
the others. Image fields hold paths; :func:`open_image` reads one (through
:func:`vlgate.evaluators.images.read_image`, within the pixel budget) and turns any failure,
an image over the budget included, into an :class:`ItemError` naming the item and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from PIL import Image, UnidentifiedImageError

from vlgate.evaluators.images import ImageTooLarge, read_image


@dataclass(frozen=True)
class McItem:
    """VL-LCM on multiple-choice VQA (docs/metrics.md#lcm-mc): an image, a question, K options.

    ``more_images`` are a multi-image question's further images (MMMU's ``image_2`` …
    ``image_7``, in number order; ``image`` is ``image_1``); which of :attr:`images` a request
    carries is the protocol's rule (``MultipleChoicePrompts.images``). It enters the item's
    content hash only when set (``digest: "unless-default"``, ``runners/store.item_digest``),
    so a single-image item keeps the fingerprint it had before multi-image questions were read."""

    id: str
    image: Path
    question: str
    options: tuple[str, ...]
    answer: int | None = None
    category: str | None = None
    more_images: tuple[Path, ...] = field(default=(), metadata={"digest": "unless-default"})

    @property
    def images(self) -> tuple[Path, ...]:
        """Every image of the item in number order: ``image``, then ``more_images``."""
        return (self.image, *self.more_images)


@dataclass(frozen=True)
class NbUnit:
    """VL-LCM on NaturalBench format (docs/metrics.md#lcm-nb): images (V1, V2), texts (T1, T2).
    ``text_kind`` is "question" (NaturalBench's yes/no questions) or "statement".

    ``question_type`` is NaturalBench's ``Question_Type``: "yes_no", or "multiple_choice"
    (each T_j carries its own options and is answered by a letter). ``options`` are the
    answers each (V_i, T_j) is asked over, the one playing "yes" first: None for yes_no
    (Yes/No), ("A", "B") for multiple_choice. Both are left out of the unit's content hash
    while they hold their defaults, so a yes_no unit's digest (and every record's
    fingerprint) is what it was before they existed (``runners/store.item_digest``)."""

    id: str
    images: tuple[Path, Path]
    texts: tuple[str, str]
    answer: str | None = None  # "c1" | "c2"
    category: str | None = None
    text_kind: str = "question"
    question_type: str = field(default="yes_no", metadata={"digest": "unless-default"})
    options: tuple[str, str] | None = field(default=None, metadata={"digest": "unless-default"})


@dataclass(frozen=True)
class VlindItem:
    """VLind-Bench (docs/metrics.md#vlind): s_cf is ``true_statement``, s_fact is ``false_statement``.
    ``best_image`` is the counterfactual image VP and CB ask about; ``counterfactual_images``
    are the accepted ones, one LP pair each. The benchmark's own files may name a best image
    that is not among the accepted ones (its evaluation scripts still use it for VP and CB);
    the local format's best image is the first of its list."""

    id: str
    concept: str
    context: str
    true_statement: str
    false_statement: str
    existent_noun: str
    non_existent_noun: str
    factual_image: Path
    best_image: Path
    counterfactual_images: tuple[Path, ...]


@dataclass(frozen=True)
class GenceptionItem:
    """GenCeption (docs/metrics.md#genception): one seed image X⁽⁰⁾ of a category."""

    id: str
    category: str
    image: Path


@dataclass(frozen=True)
class DeccItem:
    """DeCC (docs/metrics.md#decc): a question about an image, its options if multiple-choice,
    and optionally a reference decomposition (sub-questions) to use instead of the decomposer's."""

    id: str
    image: Path
    question: str
    options: tuple[str, ...] | None = None
    answer: str | None = None
    sub_questions: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ItemError:
    """One item that could not be loaded: where it came from and why."""

    source: str  # file (and line) or folder the item came from
    item_id: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.source + (f" (id {self.item_id!r})" if self.item_id is not None else "")
        return f"{where}, field {self.field!r}: {self.message}" if self.field else f"{where}: {self.message}"


class ItemLoadError(ValueError):
    def __init__(self, error: ItemError):
        super().__init__(str(error))
        self.error = error


T = TypeVar("T")


@dataclass
class LoadedDataset(Generic[T]):
    evaluator: str
    items: list[T]
    errors: list[ItemError] = field(default_factory=list)
    source: str = ""


def open_image(path: Path, item_id: str, field_name: str, source: str = "", *, budget: int | None = None) -> Image.Image:
    """Read an image as RGB; a missing, unreadable or corrupt file, or one whose header
    declares more pixels than ``budget`` (default: the suite's, ``images.pixel_budget``),
    raises :class:`ItemLoadError`. An image over the budget is refused before it is decoded."""
    try:
        return read_image(path, budget=budget)
    except FileNotFoundError:
        raise ItemLoadError(ItemError(source or str(path), item_id, field_name, f"image file not found: {path}")) from None
    except ImageTooLarge as error:
        raise ItemLoadError(ItemError(source or str(path), item_id, field_name, f"image {path} is too large to open: {error}")) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise ItemLoadError(ItemError(source or str(path), item_id, field_name, f"image {path} cannot be read ({error})")) from None
