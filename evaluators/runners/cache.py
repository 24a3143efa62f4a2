"""A content-addressed cache of records shared across versions, models and runs.

A record's ``fingerprint`` (``store.fingerprint``) already names everything its value
depends on: the model digests, the evaluator, the protocol as run, the parser version, the
item's content (image bytes included) and the settings. Two runs that would compute the
same fingerprint compute the same record, wherever they write it; so a record computed
once (for one version's output folder) is looked up by that key before it is computed
again: identical weights registered as a new version, a champion on the items a suite
gained, the reference batch of every drift check, a candidate equal to another model's
version. Lookup is by exact fingerprint only.

:class:`RecordCache` is the interface; :class:`FolderRecordCache` the embedded default (one
file per fingerprint under ``$VLGATE_HOME/record-cache``). The deployment's store (a table
of the state database, ``registry_hooks/record_cache.py``) implements the same interface
and is injected by the layers above: this package imports no other vlgate package.

An entry is trusted only after it is checked: its record's sha256 and its fingerprint must
match. A damaged entry is a miss, removed, and its record computed again: never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vlgate.evaluators.records import Record

#: the bound when none is configured (``vlgate.yaml`` ``record_cache.max_size``)
DEFAULT_MAX_BYTES = 20 * 1000**3
#: a bound check happens at least once per this many puts (and whenever the running estimate passes the bound)
CHECK_EVERY_PUTS = 256
#: eviction goes below the bound to this fraction of it, so that the next puts do not evict again at once
LOW_WATER = 0.9

_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")
#: the longest age ``parse_age`` takes: a hundred years, far beyond any record's use
MAX_AGE = timedelta(days=36500)


def parse_size(text: str | int) -> int:
    """A size such as ``20GB``, ``500MB``, ``1.5GiB`` or a plain byte count, in bytes (decimal units: GB = 10⁹)."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text}: a size is not negative")
        return text
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 20GB, 500MB, 2GiB, or bytes)")
    # exact arithmetic: a number of any length is a size, never a float's overflow
    return int(Fraction(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_age(text: str) -> timedelta:
    """An age such as ``30d``, ``12h``, ``2w``, ``90m`` or ``45s``, of at most :data:`MAX_AGE`
    (a cutoff further back than the calendar goes is refused, not an overflow)."""
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an age (a number and one of s, m, h, d, w: e.g. 30d)")
    seconds = Fraction(match.group(1)) * _AGE_UNITS[match.group(2)]
    if seconds > MAX_AGE.total_seconds():
        raise ValueError(f"{text.strip()!r} is longer than an age may be (at most {MAX_AGE.days}d)")
    return timedelta(seconds=float(seconds))


class CacheNotWritable(Exception):
    """A prune the store refused (a read-only folder): one line naming the folder and the entry."""


def record_text(record: Record) -> str:
    """A record as the cache stores it (and checksums it): compact JSON, its keys in the
    order the runner wrote them (a hit is written back as the run that computed it wrote it)."""
    return json.dumps(record, separators=(",", ":"), allow_nan=False)


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def checked_record(fingerprint: str, text: str, sha256: str) -> Record | None:
    """The record ``text`` holds when it is intact (its checksum and its own fingerprint match), else None."""
    if checksum(text) != sha256:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        return None
    return record


class CacheStats(BaseModel):
    """What a cache holds: entries, their bytes, and the oldest and newest last use (None when empty)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    location: str
    entries: int
    bytes: int
    oldest_use: datetime | None = None
    newest_use: datetime | None = None
    max_bytes: int | None = None


class RecordCache(ABC):
    """Records by exact fingerprint, shared by every run that reaches the same store. Safe
    for several processes at once: a put of a fingerprint already there keeps one valid
    entry; a damaged entry is a miss (and is removed)."""

    kind: str = "cache"
    #: the bound ``put`` keeps the cache under (least recently used evicted first); None: unbounded
    max_bytes: int | None = None

    @abstractmethod
    def get(self, fingerprint: str) -> Record | None:
        """The record stored under ``fingerprint``, checked, or None; a hit counts as a use (LRU)."""

    def get_many(self, fingerprints: Sequence[str]) -> dict[str, Record]:
        """The hits among ``fingerprints`` (one lookup each unless a store does better)."""
        found: dict[str, Record] = {}
        for key in fingerprints:
            record = self.get(key)
            if record is not None:
                found[key] = record
        return found

    @abstractmethod
    def put(self, records: Iterable[Record]) -> None:
        """Store computed records (each carries its ``fingerprint``), then keep within ``max_bytes``."""

    @abstractmethod
    def stats(self) -> CacheStats: ...

    @abstractmethod
    def prune(self, older_than: timedelta | None = None, max_bytes: int | None = None) -> int:
        """Remove entries last used longer than ``older_than`` ago, then the least recently
        used until at most ``max_bytes`` remain; the number of entries removed."""

    def close(self) -> None:
        """Release what the cache holds open (nothing by default)."""


class RecordCacheSettings(BaseModel):
    """Which record cache a run uses, as it crosses process boundaries (a Dask worker
    builds its cache from it): the kind, the bound, and the folder of the embedded one.
    The database is the one the process's own state database settings name
    (``VLGATE_STATE_DB``), never a URL carried here (it may hold a password)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["folder", "database", "off"]
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=0)
    folder: Path | None = None


class SizeBound:
    """A cache's size bound kept without rescanning the store at every put: an estimate of
    the store's size (a scan at the first put, plus what this process wrote since), checked
    again every ``check_every`` puts or as soon as it passes ``max_bytes``; then the store
    is measured and, over the bound, evicted down to :data:`LOW_WATER` of it. Other
    processes' writes since the last check can overshoot the bound by at most that much."""

    def __init__(self, max_bytes: int | None, check_every: int):
        self.max_bytes, self.check_every = max_bytes, check_every
        self._lock = threading.Lock()
        self._estimate: int | None = None
        self._puts_since_check = 0

    def account(self, written: int, shrink: Callable[[int], int]) -> None:
        """Count ``written`` bytes; when due, ``shrink(target)`` measures the store, evicts
        down to ``target`` if it is over the bound, and returns its size."""
        if self.max_bytes is None:
            return
        with self._lock:
            self._puts_since_check += 1
            if self._estimate is not None:
                self._estimate += written
                if self._estimate <= self.max_bytes and self._puts_since_check < self.check_every:
                    return
            self._puts_since_check = 0
            self._estimate = shrink(int(self.max_bytes * LOW_WATER))

    def forget(self) -> None:
        """The store changed outside the estimate (a prune): measured again at the next put."""
        with self._lock:
            self._estimate = None


class FolderRecordCache(RecordCache):
    """One JSON file per fingerprint under ``root`` (``ab/cdef….json``, named by the sha256
    of the fingerprint): ``{"fingerprint", "sha256", "record"}`` with the record as the
    text its checksum covers. Writes go to a temporary file renamed over the entry
    (``os.replace``: two processes writing one fingerprint leave one whole entry); a hit
    touches the file's mtime, which is its last use for LRU eviction (atime is unreliable
    on ``noatime`` mounts). The size bound is a :class:`SizeBound`: not rescanned at every put."""

    kind = "folder"

    def __init__(self, root: Path, max_bytes: int | None = DEFAULT_MAX_BYTES, check_every: int = CHECK_EVERY_PUTS):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.bound = SizeBound(max_bytes, check_every)

    def path(self, fingerprint: str) -> Path:
        name = hashlib.sha256(fingerprint.encode()).hexdigest()
        return self.root / name[:2] / f"{name[2:]}.json"

    def get(self, fingerprint: str) -> Record | None:
        path = self.path(fingerprint)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        record = None
        try:
            entry = json.loads(raw)
            if isinstance(entry, dict) and entry.get("fingerprint") == fingerprint and isinstance(entry.get("record"), str) and isinstance(entry.get("sha256"), str):
                record = checked_record(fingerprint, entry["record"], entry["sha256"])
        except ValueError:
            record = None
        if record is None:  # damaged: never used, and gone so that the recomputed record takes its place
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):  # evicted meanwhile by another process: the hit still stands
            os.utime(path)
        return record

    def put(self, records: Iterable[Record]) -> None:
        written = 0
        for record in records:
            fingerprint = record["fingerprint"]
            if not isinstance(fingerprint, str):
                continue
            path = self.path(fingerprint)
            if path.exists():  # the same fingerprint is the same record: the entry there stands
                continue
            text = record_text(record)
            data = json.dumps({"fingerprint": fingerprint, "sha256": checksum(text), "record": text}).encode()
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                with open(scratch, "wb") as handle:
                    handle.write(data)
                os.replace(scratch, path)
            finally:
                with contextlib.suppress(OSError):
                    scratch.unlink()
            written += len(data)
        if written:
            self.bound.account(written, self._shrink)

    def _shrink(self, target: int) -> int:
        """The folder's size, evicted down to ``target`` when over the bound."""
        entries = self._entries()
        total = sum(size for _, size, _ in entries)
        if self.max_bytes is not None and total > self.max_bytes:
            total -= self._evict(entries, target, total)[1]
        return total

    def _entries(self) -> list[tuple[Path, int, float]]:
        """(path, bytes, last use) of every entry (temporary files left out)."""
        found: list[tuple[Path, int, float]] = []
        if not self.root.is_dir():
            return found
        for folder in os.scandir(self.root):
            if not folder.is_dir(follow_symlinks=False):
                continue
            for item in os.scandir(folder.path):
                if item.name.endswith(".json") and not item.name.startswith("."):
                    with contextlib.suppress(OSError):
                        stat = item.stat(follow_symlinks=False)
                        found.append((Path(item.path), stat.st_size, stat.st_mtime))
        return found

    @staticmethod
    def _evict(entries: list[tuple[Path, int, float]], target: int, total: int, remove: Callable[[Path], int] | None = None) -> tuple[int, int]:
        """Remove the least recently used of ``entries`` until ``total`` is at most ``target``:
        (entries, bytes) removed. ``remove(path)``: 1 if it removed the entry (default: unlink,
        an entry already gone counting 0)."""
        removed = freed = 0
        for path, size, _ in sorted(entries, key=lambda entry: entry[2]):
            if total - freed <= target:
                break
            if remove is not None:
                removed += remove(path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
            freed += size
        return removed, freed

    def stats(self) -> CacheStats:
        entries = self._entries()
        uses = [used for _, _, used in entries]
        when = lambda stamp: datetime.fromtimestamp(stamp, timezone.utc)
        return CacheStats(
            kind=self.kind,
            location=str(self.root),
            entries=len(entries),
            bytes=sum(size for _, size, _ in entries),
            oldest_use=when(min(uses)) if uses else None,
            newest_use=when(max(uses)) if uses else None,
            max_bytes=self.max_bytes,
        )

    def prune(self, older_than: timedelta | None = None, max_bytes: int | None = None) -> int:
        entries = self._entries()
        removed = 0
        if older_than is not None:
            cutoff = time.time() - older_than.total_seconds()
            kept = []
            for entry in entries:
                if entry[2] < cutoff:
                    removed += self._remove_for_prune(entry[0])
                else:
                    kept.append(entry)
            entries = kept
        if max_bytes is not None:
            removed += self._evict(entries, max_bytes, sum(size for _, size, _ in entries), remove=self._remove_for_prune)[0]
        self._remove_stale_scratch()
        self.bound.forget()
        return removed

    def _remove_for_prune(self, path: Path) -> int:
        """1 when ``path`` was removed, 0 when another process removed it first;
        :class:`CacheNotWritable` when the folder refuses (the records before it stay removed)."""
        try:
            path.unlink()
        except FileNotFoundError:
            return 0
        except OSError as error:
            raise CacheNotWritable(f"record cache folder {self.root}: cannot remove {path.name}: {error.strerror or error} (prune needs write access to the folder)") from None
        return 1

    def _remove_stale_scratch(self, age_s: float = 3600) -> None:
        """Temporary files a killed writer left (an hour old: no write takes that long)."""
        if not self.root.is_dir():
            return
        cutoff = time.time() - age_s
        for scratch in self.root.glob("*/.*.tmp"):
            with contextlib.suppress(OSError):
                if scratch.stat().st_mtime < cutoff:
                    scratch.unlink()


def bytes_text(size: int) -> str:
    """A byte count as people read it (decimal units, as ``parse_size`` reads them)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
