"""What vlgate writes to a terminal, made safe to show data in: a benchmark's question or a
model's answer may hold escape sequences (a clipboard write, a cleared screen) or bidi
overrides, and every terminal line that shows such text shows them as escapes instead
(``vlgate/text.py``'s :func:`~vlgate.text.visible`).

Two choke points: :func:`visible_stdout`, around a command's text answer (everything it
``print``\\s), and :class:`VisibleConsole`, every rich console vlgate prints through (its
rendered text; rich's own styles and cursor moves are untouched). Data shown in a rich
table is given as :func:`data_text`: not read as rich markup, and escaped before the table
is laid out, so its columns stay aligned. ``--json`` is written as it is: ``json.dumps``
escapes control characters itself.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, TextIO, TypedDict, Unpack

from rich.console import Console, ConsoleOptions, HighlighterType, JustifyMethod, OverflowMethod, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from vlgate.text import UNSAFE, visible


class VisibleStream(io.TextIOBase):
    """``stream`` with what is written to it escaped by :func:`visible`, newlines kept. It
    says it is no terminal, so a plain rich console writing here adds no styles for it to
    escape; :func:`terminal_console` writes past it."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(visible(text, keep="\n"))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]  # the wrapped stream's
        return getattr(self.stream, "encoding", None) or "utf-8"


@contextmanager
def visible_stdout() -> Iterator[None]:
    """``sys.stdout`` as a :class:`VisibleStream` while the block prints a text answer."""
    saved = sys.stdout
    sys.stdout = VisibleStream(saved)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = saved


class VisibleConsole(Console):
    """A rich console whose rendered text has its control characters escaped
    (:func:`visible`, newlines kept): a string as it becomes text (before a table measures
    it), and every segment rendered (a ``Text`` built elsewhere); the segments rich itself
    marks as control (cursor moves of a live view) pass as they are."""

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        return super().render_str(
            visible(text, keep="\n"), style=style, justify=justify, overflow=overflow, emoji=emoji, markup=markup, highlight=highlight, highlighter=highlighter
        )

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not UNSAFE.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text, keep="\n"), segment.style)


class ConsoleSettings(TypedDict, total=False):
    """The ``rich.console.Console`` arguments a command's console is made with."""

    file: IO[str] | None
    width: int | None
    height: int | None
    force_terminal: bool | None
    record: bool
    stderr: bool
    highlight: bool
    soft_wrap: bool


def terminal_console(**options: Unpack[ConsoleSettings]) -> VisibleConsole:
    """The console a command prints rich output through: a :class:`VisibleConsole` on
    stdout (the stream under :func:`visible_stdout`'s, so rich still styles a terminal)."""
    if "file" not in options and isinstance(sys.stdout, VisibleStream):
        options["file"] = sys.stdout.stream
    return VisibleConsole(**options)


def data_text(value: object, keep: str = "", style: str = "") -> Text:
    """A value from data as a rich cell: shown as written (no markup), control characters
    escaped; ``keep="\\n"`` for a cell of several lines."""
    return Text(visible(str(value), keep=keep), style=style)
