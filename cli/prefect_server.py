"""A Prefect server on loopback for one vlgate process, started before anything else so it
comes up while the process imports its libraries.

With no ``PREFECT_API_URL``, Prefect itself starts a temporary server the moment the
first flow runs and waits for it (longer on a fresh database, which migrates its SQLite
schema first): all of it on the flow's critical path (benchmarks/RESULTS.md has the times).
:class:`LocalPrefectServer` starts the same kind of server (``prefect server start`` on
``$PREFECT_HOME/prefect.db``) at the top of a command instead, so the server's start
overlaps the command's own imports (Prefect, MLflow, Great Expectations, torch) on
another core.

A fresh ``VLGATE_HOME``'s database is seeded from an empty, already migrated one kept per
Prefect version in the user's cache (``$XDG_CACHE_HOME/vlgate``): the schema migrations
run once per machine and Prefect version, not once per home. The server still checks
the schema on start, so a seed that is somehow behind is migrated, never trusted blindly.
"""

from __future__ import annotations

import http.client
import importlib
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import TextIO

logger = logging.getLogger(__name__)

#: what every command that runs flows imports anyway; imported while the server starts
#: (module names only: nothing here is used). Not torch, transformers or Great Expectations:
#: a validation whose records and expectation results are all known needs none of them
LIBRARIES_TO_IMPORT_WHILE_WAITING = ("prefect", "mlflow", "mlflow.store.tracking.sqlalchemy_store", "matplotlib.pyplot")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _prefect_cli() -> str:
    return shutil.which("prefect", path=str(Path(sys.executable).parent)) or "prefect"


def seed_database_path() -> Path:
    """The empty, migrated Prefect database new homes start from (one per Prefect version)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "vlgate" / f"prefect-{installed_version('prefect')}.db"


def ensure_seed_database(log_file: TextIO) -> Path:
    """The seed database, migrated now (``prefect server database upgrade``) if this
    machine has none yet; written to a temporary name and renamed, so processes racing
    to create it never see half of one."""
    seed = seed_database_path()
    if seed.is_file():
        return seed
    seed.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=seed.parent) as scratch:
        database = Path(scratch) / "prefect.db"
        env = os.environ | {"PREFECT_HOME": scratch, "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{database}"}
        subprocess.run([_prefect_cli(), "server", "database", "upgrade", "-y"], env=env, stdout=log_file, stderr=subprocess.STDOUT, check=True)
        # Prefect keeps SQLite in WAL mode: fold any write-ahead log into the file, so the
        # seed is one self-contained file (Prefect's server turns WAL on again per connection)
        connection = sqlite3.connect(database)
        try:
            connection.execute("PRAGMA journal_mode = DELETE")
        finally:
            connection.close()
        os.replace(database, seed)
    return seed


class LocalPrefectServer:
    """``prefect server start`` on loopback for this process (its database under
    ``$PREFECT_HOME``), stopped with the process. ``services=False`` serves the API only,
    like Prefect's temporary server; the service needs the scheduler for drift crons (and
    gets the UI with it)."""

    def __init__(self, prefect_home: Path, services: bool):
        self.prefect_home = prefect_home
        self.services = services
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.log_path = prefect_home / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._start_error: BaseException | None = None
        self._starter = threading.Thread(target=self._launch, name="vlgate-prefect-server", daemon=True)

    @classmethod
    def start(cls, home: Path, *, services: bool = False) -> LocalPrefectServer | None:
        """Start one unless the user points Prefect at a server (``PREFECT_API_URL``) or
        Prefect is already imported (it reads the URL set here once, on import: such a
        process keeps Prefect's own temporary server)."""
        if os.environ.get("PREFECT_API_URL") or "prefect" in sys.modules:
            return None
        prefect_home = Path(os.environ.get("PREFECT_HOME") or home / "prefect")
        prefect_home.mkdir(parents=True, exist_ok=True)
        server = cls(prefect_home, services)
        os.environ["PREFECT_API_URL"] = server.url
        server._starter.start()
        return server

    def _launch(self) -> None:
        try:
            with open(self.log_path, "a") as log_file:
                database = self.prefect_home / "prefect.db"
                # a user's own database URL is theirs to migrate; only the default one is seeded
                if not database.exists() and not os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
                    shutil.copyfile(ensure_seed_database(log_file), database)
                command = [_prefect_cli(), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)]
                if not self.services:
                    command += ["--no-services", "--no-ui"]
                self.process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=os.environ | {"PREFECT_HOME": str(self.prefect_home)})
        except BaseException as error:  # reported by wait_ready, on the caller's thread
            self._start_error = error

    def wait_ready(self, timeout_s: float = 180) -> str:
        """Block until the API answers; its URL. Raises with the server's log named when
        it exits or does not answer in time. Once healthy, the server is also asked its API
        version, in the background: every Prefect client asks that first, and a new server is
        slow to answer it the first time (benchmarks/RESULTS.md has how slow); asked here,
        that happens on the server's core while this process goes on."""
        deadline = time.monotonic() + timeout_s
        self._starter.join(timeout_s)
        if self._start_error is not None or self.process is None:
            raise RuntimeError(f"the local Prefect server could not start: {self._start_error}; see {self.log_path}")
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the local Prefect server exited with {self.process.returncode}; see {self.log_path}")
            if self._answers():
                threading.Thread(target=self._answers, args=("/api/admin/version", 10), name="vlgate-prefect-warm-up", daemon=True).start()
                return self.url
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the local Prefect server did not answer on {self.url} within {timeout_s:.0f} s; see {self.log_path}")

    def _answers(self, path: str = "/api/health", timeout_s: float = 2) -> bool:
        """Whether the API answers 200 on ``path`` (its health check). Plain HTTP on loopback:
        no proxy from the environment, and no TLS context, whose CA bundle httpx would load at
        every poll (what that cost a cached validation: benchmarks/RESULTS.md)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            connection.request("GET", path)
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        """Terminate the server (killed after 10 s) and forget its URL."""
        self._starter.join(60)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if os.environ.get("PREFECT_API_URL") == self.url:
            del os.environ["PREFECT_API_URL"]


@contextmanager
def local_prefect_server(home: Path, *, services: bool = False, while_starting: Callable[[], None] | None = None) -> Iterator[LocalPrefectServer | None]:
    """A :class:`LocalPrefectServer` for the block (None where Prefect is configured or
    already imported), ready on entry: ``while_starting`` (the command's own checks, which
    may refuse it: then the server is stopped and the error raised) runs, then what the
    command will import anyway is imported, while the server starts on another core."""
    server = LocalPrefectServer.start(home, services=services)
    previous_handler = None
    if server is not None and threading.current_thread() is threading.main_thread():
        # `kill PID` (SIGTERM) would end this process without unwinding, leaving the server
        # running: turn it into an exit that runs the block's cleanup
        previous_handler = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        if while_starting is not None:
            while_starting()
        for module in LIBRARIES_TO_IMPORT_WHILE_WAITING:
            importlib.import_module(module)
        if server is not None:
            server.wait_ready()
        with _without_flow_heartbeats(server is not None and not services):
            yield server
    finally:
        if server is not None:
            _send_what_prefect_queued()
            server.stop()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


@contextmanager
def _without_flow_heartbeats(needless: bool) -> Iterator[None]:
    """Where ``needless``, no flow run heartbeats in this thread's context. A server without
    services reads none (finding crashed runs by their heartbeats is a service), and each
    flow's end waits up to a second for its heartbeat thread, which sleeps in one-second
    steps, on every `vlgate validate` (benchmarks/RESULTS.md)."""
    if not needless:
        yield
        return
    from prefect.settings import temporary_settings

    with temporary_settings(updates={"flows.heartbeat_frequency": None}):
        yield


def _send_what_prefect_queued(timeout_s: float = 5) -> None:
    """Let Prefect's background workers send the flow logs and events they still hold to
    the server before it stops; at exit they would find it gone ("Error logging to API").
    Best effort: a stuck worker costs at most ``timeout_s`` each."""
    if "prefect" not in sys.modules:  # refused before anything ran: nothing is queued
        return
    try:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        for worker in (APILogWorker, EventsWorker):
            worker.drain_all(timeout=timeout_s, at_exit=False)
    except Exception as error:  # the block's own outcome is what matters
        logger.debug("draining Prefect's workers failed: %s", error)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
