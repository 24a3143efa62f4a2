"""Short-lived named locks in vlgate's state database: one gate decision per registered
model at a time, so two candidates judged concurrently cannot both compare against a stale
champion, whichever process or machine judges them. :class:`NamedLocks` is the production
:class:`~vlgate.registry_hooks.seams.NamedLockManager`; ``seams.py`` has the in-memory one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError

from vlgate.registry_hooks.state_db import StateDatabase, default_owner, locks_table, utc_now


class NamedLocks:
    """The named locks of vlgate's state database; ``clock`` is where a lease's expiry is read
    (the database's rows hold UTC times; fixed in tests)."""

    def __init__(self, db: StateDatabase, clock: Callable[[], datetime] = utc_now):
        self.engine = db.engine
        self.clock = clock

    @contextlib.contextmanager
    def hold(self, name: str, ttl_seconds: float = 600, wait_seconds: float = 900, poll_seconds: float = 0.2) -> Iterator[None]:
        """Hold the named lock; a holder that died is overtaken after ``ttl_seconds``."""
        owner = f"{default_owner()}:{time.monotonic_ns()}"
        deadline = time.monotonic() + wait_seconds
        while True:
            now = self.clock()
            try:
                with self.engine.begin() as connection:
                    connection.execute(locks_table.delete().where(locks_table.c.name == name, locks_table.c.expires < now))
                    connection.execute(locks_table.insert().values(name=name, owner=owner, expires=now + timedelta(seconds=ttl_seconds)))
                break
            except IntegrityError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lock {name!r} still held after {wait_seconds:.0f} s") from None
                time.sleep(poll_seconds)
        try:
            yield
        finally:
            with self.engine.begin() as connection:
                connection.execute(locks_table.delete().where(locks_table.c.name == name, locks_table.c.owner == owner))
