"""Log lines printed above a live view instead of through its frame."""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import IO

from rich.console import Console


def reroute_log_handlers(console: Console, terminal: AbstractSet[IO[str] | None]) -> list[Callable[[], None]]:
    """While the live view runs, a log handler that writes to the ``terminal`` streams
    (Prefect's console handler keeps the stderr it was configured with, and prints through
    a rich console of its own) is replaced on its logger by rich's ``RichHandler`` on the
    view's console, with its level, format and filters, so that its lines print above the
    view instead of through its frame; returns what puts the handlers back."""
    from rich.logging import RichHandler

    undo: list[Callable[[], None]] = []
    loggers = [logging.getLogger(), *(logger for logger in list(logging.Logger.manager.loggerDict.values()) if isinstance(logger, logging.Logger))]
    for logger in loggers:
        for handler in list(logger.handlers):
            inner = getattr(handler, "console", None)
            target = inner.file if isinstance(inner, Console) else getattr(handler, "stream", None)
            if target is None or target not in terminal:
                continue
            shown = RichHandler(handler.level, console, show_time=False, show_level=False, show_path=False)
            shown.setFormatter(handler.formatter)
            shown.filters = list(handler.filters)
            logger.removeHandler(handler)
            logger.addHandler(shown)
            undo.append(_swap_back(logger, shown, handler))
    return undo


def _swap_back(logger: logging.Logger, shown: logging.Handler, handler: logging.Handler) -> Callable[[], None]:
    def swap() -> None:
        logger.removeHandler(shown)
        logger.addHandler(handler)

    return swap
