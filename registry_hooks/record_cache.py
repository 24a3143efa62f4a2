"""The record cache in the state database (``vlgate_record_cache``, migration 0005): the
deployment's store, reached by every worker (the flow's process, each Dask worker, the
drift flow) through the PostgreSQL the stack already runs, with the embedded SQLite state
database for tests and single machines. It implements the evaluators' ``RecordCache``
(``evaluators/runners/cache.py``), which cannot import this package: the layers above
build it here (:func:`open_record_cache`) and hand it to the runs.

Why the state database and not MLflow's artifact store: a lookup is one indexed
primary-key read per batch of fingerprints, where an artifact store would answer one
HTTP request (or an S3 object GET) per fingerprint and cannot update a last-use time
without rewriting the object; ``INSERT … ON CONFLICT DO NOTHING`` makes two workers
storing one fingerprint keep one row; and eviction is one ``ORDER BY used_at`` query
(docs/record-cache.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.cache import (
    CHECK_EVERY_PUTS,
    DEFAULT_MAX_BYTES,
    CacheStats,
    FolderRecordCache,
    RecordCache,
    RecordCacheSettings,
    SizeBound,
    checked_record,
    checksum,
    record_text,
)
from vlgate.home import vlgate_home
from vlgate.registry_hooks.state_db import StateDatabase, aware, record_cache_table, utc_now

#: fingerprints per IN (...) query
_CHUNK = 500


class DatabaseRecordCache(RecordCache):
    """Records in the state database's ``vlgate_record_cache`` table: the record's text,
    its sha256 (checked at every hit: a row that does not match is deleted and missed),
    its size, and when it was made and last used. A put is ``INSERT … ON CONFLICT DO
    NOTHING`` (the first writer's row stands); the bound is checked with one ``SUM`` at a
    process's first put, every ``CHECK_EVERY_PUTS`` puts, and whenever the running
    estimate passes it, evicting the least recently used rows."""

    kind = "database"

    def __init__(self, database: StateDatabase, max_bytes: int | None = DEFAULT_MAX_BYTES, check_every: int = CHECK_EVERY_PUTS):
        self.database = database
        self.engine = database.engine
        self.max_bytes = max_bytes
        self.bound = SizeBound(max_bytes, check_every)

    def get(self, fingerprint: str) -> Record | None:
        return self.get_many([fingerprint]).get(fingerprint)

    def get_many(self, fingerprints: Sequence[str]) -> dict[str, Record]:
        table = record_cache_table
        found: dict[str, Record] = {}
        damaged: list[str] = []
        keys = list(dict.fromkeys(fingerprints))
        with self.engine.connect() as connection:
            for start in range(0, len(keys), _CHUNK):
                rows = connection.execute(sa.select(table.c.fingerprint, table.c.record, table.c.sha256).where(table.c.fingerprint.in_(keys[start : start + _CHUNK])))
                for key, text, sha256 in rows:
                    record = checked_record(key, text, sha256)
                    if record is None:
                        damaged.append(key)
                    else:
                        found[key] = record
        if found or damaged:
            with self.engine.begin() as connection:
                hits, now = list(found), utc_now()
                for start in range(0, len(hits), _CHUNK):
                    connection.execute(sa.update(table).where(table.c.fingerprint.in_(hits[start : start + _CHUNK])).values(used_at=now))
                if damaged:
                    connection.execute(sa.delete(table).where(table.c.fingerprint.in_(damaged)))
        return found

    def _insert(self) -> sa.Insert:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(record_cache_table).on_conflict_do_nothing(index_elements=["fingerprint"])
        if self.engine.dialect.name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            return sqlite_insert(record_cache_table).on_conflict_do_nothing(index_elements=["fingerprint"])
        raise NotImplementedError(f"the record cache needs PostgreSQL or SQLite, not {self.engine.dialect.name}")

    def put(self, records: Iterable[Record]) -> None:
        now, rows, written = utc_now(), list[dict[str, object]](), 0
        for record in records:
            key = record["fingerprint"]
            if isinstance(key, str):
                text = record_text(record)
                size = len(text.encode())
                rows.append({"fingerprint": key, "record": text, "sha256": checksum(text), "bytes": size, "created_at": now, "used_at": now})
                written += size
        if not rows:
            return
        with self.engine.begin() as connection:
            connection.execute(self._insert(), rows)
        self.bound.account(written, self._shrink)

    def _total(self, connection: sa.Connection) -> int:
        return int(connection.execute(sa.select(sa.func.coalesce(sa.func.sum(record_cache_table.c.bytes), 0))).scalar_one())

    def _shrink(self, target: int) -> int:
        """The table's size, evicted down to ``target`` when over the bound."""
        with self.engine.begin() as connection:
            total = self._total(connection)
            if self.max_bytes is not None and total > self.max_bytes:
                total -= self._evict(connection, target, total)[1]
        return total

    @staticmethod
    def _evict(connection: sa.Connection, target: int, total: int) -> tuple[int, int]:
        """Delete the least recently used rows until ``total`` is at most ``target``: (rows, bytes) removed."""
        table = record_cache_table
        doomed: list[str] = []
        freed = 0
        for key, size in connection.execute(sa.select(table.c.fingerprint, table.c.bytes).order_by(table.c.used_at, table.c.fingerprint)):
            if total - freed <= target:
                break
            doomed.append(key)
            freed += size
        removed = 0
        for start in range(0, len(doomed), _CHUNK):
            removed += connection.execute(sa.delete(table).where(table.c.fingerprint.in_(doomed[start : start + _CHUNK]))).rowcount
        return removed, freed

    def stats(self) -> CacheStats:
        table = record_cache_table
        with self.engine.connect() as connection:
            entries, size, oldest, newest = connection.execute(
                sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(table.c.bytes), 0), sa.func.min(table.c.used_at), sa.func.max(table.c.used_at))
            ).one()
        return CacheStats(
            kind=self.kind,
            location=self.engine.url.render_as_string(hide_password=True),
            entries=int(entries),
            bytes=int(size),
            oldest_use=aware(oldest) if oldest is not None else None,
            newest_use=aware(newest) if newest is not None else None,
            max_bytes=self.max_bytes,
        )

    def prune(self, older_than: timedelta | None = None, max_bytes: int | None = None) -> int:
        table = record_cache_table
        removed = 0
        with self.engine.begin() as connection:
            if older_than is not None:
                removed += connection.execute(sa.delete(table).where(table.c.used_at < utc_now() - older_than)).rowcount
            if max_bytes is not None:
                removed += self._evict(connection, max_bytes, self._total(connection))[0]
        self.bound.forget()
        return removed


_opened: dict[tuple[str, str, int | None], RecordCache] = {}
_opened_lock = threading.Lock()


def open_record_cache(settings: RecordCacheSettings, home: Path | None = None) -> RecordCache | None:
    """The cache ``settings`` name, opened once per process (a worker's shards share it):
    None when off; the folder (default ``$VLGATE_HOME/record-cache``); or the state database
    this process's settings name (``VLGATE_STATE_DB``, else ``$VLGATE_HOME/state.db``)."""
    if settings.kind == "off":
        return None
    home = home or vlgate_home()
    where = str(settings.folder or home / "record-cache") if settings.kind == "folder" else StateDatabase.url_for_home(home)
    key = (settings.kind, where, settings.max_bytes)
    with _opened_lock:
        if key not in _opened:
            _opened[key] = FolderRecordCache(Path(where), settings.max_bytes) if settings.kind == "folder" else DatabaseRecordCache(StateDatabase(where), settings.max_bytes)
        return _opened[key]
