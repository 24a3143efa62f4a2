"""Where MLflow is and whether it answers: the tracking URI (the user's, or the embedded
SQLite store under ``$VLGATE_HOME``), the client, and which faults are a server away."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate.home import vlgate_home

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: Every URI :func:`connect` itself exported: ``mlflow.set_tracking_uri`` also sets
#: ``MLFLOW_TRACKING_URI`` (for subprocesses, e.g. Dask workers, to inherit), and none of
#: those values may stand in for a user's setting when this process connects to another
#: home — not the last one only: code that saved and restored the variable around a
#: connection (a test's monkeypatch) puts back an older one.
_exported_uris: set[str] = set()


def tracking_uri(home: Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` (as the user or a parent process set it) or the embedded
    default: SQLite under ``$VLGATE_HOME/mlflow``."""
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured and configured not in _exported_uris:
        return configured
    folder = (home or vlgate_home()).resolve() / "mlflow"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder}/mlflow.db"


def embedded(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def transient(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from or during) is a server that did not
    answer: a refused or dropped connection, a timeout, or 5xx answers until the client's
    retries ran out. MLflow's REST client wraps these in an ``MlflowException`` whose
    context holds the original. Such a fault is retried later, never made a verdict."""
    import requests

    # not the builtin TimeoutError: Prefect's task and flow time limits raise subclasses of
    # it, and a task that ran out of time would be run again forever
    kinds: tuple[type[BaseException], ...] = (ConnectionError, requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.RetryError)
    try:
        import httpx

        kinds += (httpx.TransportError,)
    except ImportError:  # pragma: no cover - httpx is a dependency
        pass
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kinds):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class TrackingUnreachable(ConnectionError):
    """The tracking server did not answer at all (refused, timed out, unknown host)."""


def require_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Raise :class:`TrackingUnreachable` naming ``uri`` when an HTTP tracking server does not
    answer within ``timeout_s``. Operator commands check this first: MLflow's own client
    retries a refused connection with backoff for minutes before it gives up. Any HTTP
    answer counts as reachable (a proxy's 401 included); other schemes are not checked."""
    if not uri.startswith(("http://", "https://")):
        return
    import httpx

    try:
        httpx.get(f"{uri.rstrip('/')}/health", timeout=timeout_s)
    except httpx.TransportError as error:
        raise TrackingUnreachable(f"MLflow tracking server {uri} is unreachable ({type(error).__name__}: {error}); is it running, and is MLFLOW_TRACKING_URI right?") from None


def connect(home: Path | None = None) -> MlflowClient:
    """An ``MlflowClient`` on the configured tracking/registry store (also made the
    process default, so ``mlflow.artifacts`` and ``models:/`` URIs resolve against it)."""
    import mlflow
    from mlflow import MlflowClient

    uri = tracking_uri(home)
    users = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if not users or users in _exported_uris:
        _exported_uris.add(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)
