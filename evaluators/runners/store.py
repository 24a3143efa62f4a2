"""Resumable per-sample results.

Every record a runner produces carries a ``fingerprint``: a hash of (model digest(s),
evaluator, prompt version, parser version, the data item's content including its image
bytes). :class:`RecordStore` appends records to a JSON Lines file as each batch
completes (flushed and fsync'd), and on start reads back what is there, so a run killed
at any moment (kill -9 included) resumes and recomputes at most the batch that was in
flight. A torn last line from a kill is ignored; a record whose fingerprint no longer
matches (other model, other prompt version, edited item) is not reused.

A store may be given a :class:`~vlgate.evaluators.runners.cache.RecordCache` shared across
versions and runs: what the file lacks is looked up there by exact fingerprint
(:meth:`RecordStore.take_from_cache`) and copied into the file, so that a version's output
folder stays complete on its own; what is computed is put there too. A cache that does not
answer is a miss (logged), never the run's failure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import JsonValue

from vlgate.evaluators.records import Record

if TYPE_CHECKING:
    from vlgate.evaluators.runners.cache import RecordCache

logger = logging.getLogger(__name__)

PARSER_VERSION = "parsers-1"


_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path, _cache: dict[tuple[str, int, int], str] = _FILE_DIGESTS) -> str:
    """sha256 of a file's bytes (memoised on path, size and mtime: images are hashed once)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _cache:
        _cache[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _cache[key]


def item_digest(item: object) -> str:
    """A content hash of a loader item: every field, with image paths replaced by the
    images' bytes' hashes (the same item moved to another folder keeps its digest). A field
    added to an item type later, marked ``metadata={"digest": "unless-default"}``, counts
    only where it differs from its default, so the items that existed before it keep their
    digests (and their records' fingerprints)."""

    def canonical(value: object) -> object:
        if isinstance(value, Path):
            try:
                return {"file_sha256": file_digest(value)}
            except OSError:  # reported by the runner when it opens the image; the key only has to be stable
                return {"unreadable": str(value)}
        if isinstance(value, (list, tuple)):
            return [canonical(v) for v in value]
        if isinstance(value, dict):
            return {str(k): canonical(v) for k, v in sorted(value.items())}
        return value

    def counted(f: dataclasses.Field[object]) -> bool:
        return f.metadata.get("digest") != "unless-default" or getattr(item, f.name) != f.default

    fields = {f.name: canonical(getattr(item, f.name)) for f in dataclasses.fields(item) if counted(f)} if dataclasses.is_dataclass(item) else canonical(item)
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint(models: Mapping[str, str], evaluator: str, protocol: str, item: object, settings: Mapping[str, JsonValue] | None = None) -> str:
    """The key a record is stored and reused under. ``models`` maps a role (vlm, llm,
    generator, encoder, decomposer) to its digest; ``protocol`` is the protocol as run
    (``Protocol.as_run``); ``settings`` holds anything else that changes the result (e.g.
    GenCeption's T)."""
    payload = {
        "models": dict(sorted(models.items())),
        "evaluator": evaluator,
        "protocol": protocol,
        "parsers": PARSER_VERSION,
        "item": item_digest(item),
        "settings": settings or {},
    }
    return "fp:" + hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def record_fingerprint(record: Mapping[str, JsonValue]) -> str:
    """The key a record carries (``Runner.run`` sets it: a string)."""
    key = record["fingerprint"]
    assert isinstance(key, str), "a record's fingerprint is a string"
    return key


class RecordStore:
    """Append-only JSON Lines of records keyed by fingerprint, backed by an optional shared ``cache``."""

    def __init__(self, path: Path, cache: RecordCache | None = None):
        self.path = Path(path)
        self.cache = cache
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.by_fingerprint: dict[str, Record] = {}
        self.torn_lines = 0
        if self.path.is_file():
            self._read_back()

    def _read_back(self) -> None:
        """Every complete record back; a damaged line (the one a kill cut short, or one
        a disk or a hand spoiled, wherever it is) is dropped alone, and the file is
        rewritten without it so that appends continue after good lines only."""
        raw = self.path.read_bytes()
        kept = []
        for line in raw.splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("unterminated")
                record = json.loads(line)
                fingerprint = record["fingerprint"]
            except (ValueError, KeyError, TypeError, RecursionError):
                self.torn_lines += bool(line.strip())
                continue
            self.by_fingerprint[fingerprint] = record
            kept.append(line)
        if sum(map(len, kept)) < len(raw):
            scratch = self.path.with_name(self.path.name + ".rewrite")
            with open(scratch, "wb") as handle:
                handle.writelines(kept)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(scratch, self.path)

    def get(self, key: str) -> Record | None:
        return self.by_fingerprint.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.by_fingerprint

    def take_from_cache(self, keys: Sequence[str]) -> int:
        """Copy the records of ``keys`` this file lacks and the cache holds into the file;
        how many were copied."""
        missing = [key for key in dict.fromkeys(keys) if key not in self.by_fingerprint]
        if self.cache is None or not missing:
            return 0
        try:
            found = self.cache.get_many(missing)
        except Exception as error:  # a cache that does not answer: the records are computed instead
            logger.warning("record cache (%s) did not answer; computing instead: %s: %s", self.cache.kind, type(error).__name__, error)
            return 0
        self._write(list(found.values()))
        return len(found)

    def append(self, records: Iterable[Record]) -> None:
        """Write one completed batch durably, and share it through the cache."""
        records = list(records)
        self._write(records)
        if self.cache is not None and records:
            try:
                self.cache.put(records)
            except Exception as error:  # the records are in the file: only other runs miss them
                logger.warning("record cache (%s) did not take %d records: %s: %s", self.cache.kind, len(records), type(error).__name__, error)

    def _write(self, records: list[Record]) -> None:
        if not records:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, allow_nan=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        for record in records:
            self.by_fingerprint[record_fingerprint(record)] = record
