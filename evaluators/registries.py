"""One kind of named thing vlgate looks up by name: evaluators (``registry.py``), backends
and GenCeption's helper models (``backends/kinds.py``). A :class:`Registry` keeps its entries
in the order they were added and refuses a name twice; entries that cost an import (the
papers' packages, the installed packages' entry points) come from its ``sources``, resolved
the first time anything asks it, once per process, one thread resolving while the others
wait. Importing a module that holds a registry loads and runs nothing, as
lm-evaluation-harness's ``Registry`` resolves its lazy entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

Entry = TypeVar("Entry")


class Registry(Generic[Entry]):
    """Entries of one ``kind`` ("evaluator", "backend", ...) by name (``name_of``).

    ``entries``: those known when the registry is made; ``sources``: called once, on first
    use, for the rest (it may ask the registry what it holds so far); ``on_add``: a check
    every entry passes before it is added (raising refuses it); ``unknown``: the error a
    lookup of a name it does not hold raises, listing the names it does (``sorted_names``:
    alphabetically, else in their order)."""

    def __init__(
        self,
        kind: str,
        name_of: Callable[[Entry], str],
        *,
        entries: Iterable[Entry] = (),
        sources: Callable[[], Iterable[Entry]] | None = None,
        on_add: Callable[[Entry], None] | None = None,
        unknown: type[ValueError] = ValueError,
        sorted_names: bool = False,
    ):
        self.kind = kind
        self._name_of = name_of
        self._sources = sources
        self._on_add = on_add
        self._unknown = unknown
        self._sorted_names = sorted_names
        self._entries: dict[str, Entry] = {}
        self._resolved = threading.Event()
        self._lock = threading.RLock()
        self._resolving: int | None = None  # the thread resolving the sources now
        for entry in entries:
            self._put(entry)
        if sources is None:
            self._resolved.set()

    @property
    def is_resolved(self) -> bool:
        """Whether the sources were resolved (asking anything else of the registry resolves them)."""
        return self._resolved.is_set()

    def resolve(self) -> bool:
        """Resolve the sources now, unless done; whether this call resolved them."""
        if self._resolved.is_set() or self._resolving == threading.get_ident():
            return False
        with self._lock:
            if self._resolved.is_set():
                return False
            assert self._sources is not None
            self._resolving = threading.get_ident()
            before = dict(self._entries)
            try:
                for entry in self._sources():
                    self._put(entry)
                self._resolved.set()
            except BaseException:  # a source that failed (a plugin that cannot load): resolved again next time, from the start
                self._entries.clear()
                self._entries.update(before)
                raise
            finally:
                self._resolving = None
        return True

    def _all(self) -> dict[str, Entry]:
        self.resolve()
        return self._entries

    def _put(self, entry: Entry) -> Entry:
        name = self._name_of(entry)
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if self._on_add is not None:
            self._on_add(entry)
        self._entries[name] = entry
        return entry

    def add(self, entry: Entry) -> Entry:
        """Add ``entry`` after the others; its name must be new."""
        self._all()
        return self._put(entry)

    def replace(self, entry: Entry) -> Entry:
        """Add ``entry`` after the others in place of the one of its name, if any."""
        self._all().pop(self._name_of(entry), None)
        return self._put(entry)

    def remove(self, name: str) -> None:
        self._all().pop(name, None)

    def find(self, name: str) -> Entry | None:
        return self._all().get(name)

    def get(self, name: str) -> Entry:
        entries = self._all()
        try:
            return entries[name]
        except KeyError:
            listed = sorted(entries) if self._sorted_names else list(entries)
            raise self._unknown(f"unknown {self.kind} {name!r}; expected one of {', '.join(listed)}") from None

    __getitem__ = get

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._all()))

    def names(self) -> tuple[str, ...]:
        return tuple(self._all())

    def values(self) -> tuple[Entry, ...]:
        return tuple(self._all().values())

    @contextmanager
    def swapped(self, entry: Entry) -> Iterator[Entry]:
        """``entry`` in place of the one of its name for the block, which is put back after
        (a test's double of a model loader)."""
        name = self._name_of(entry)
        entries = self._all()
        before = entries.get(name)
        entries[name] = entry
        try:
            yield entry
        finally:
            if before is None:
                entries.pop(name, None)
            else:
                entries[name] = before
