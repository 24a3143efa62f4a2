"""From "a version exists" to "its validation flow runs", exactly once.

Both the webhook receiver and the poller call ``Dispatcher.offer``; the claim row
(``claims.py``) decides which call wins, and only the winner starts the flow. The flow
runs in this process's worker threads (``start=``: the flow function, which the caller in
``flows/`` passes, so this package never imports the flows) or as a run of the
``vlgate-validate`` Prefect deployment on the work pool's GPU workers (``deployment=``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from vlgate import tracking
from vlgate.registry_hooks.claims import ClaimStore

log = logging.getLogger("vlgate.hooks")


def _every_model(_name: str) -> bool:
    return True


class Dispatcher:
    """``configured``: the one rule for which registered models vlgate validates (the
    service's: a suite and policy in ``vlgate.yaml``); the webhook and the poller both
    offer through it, so a model without a configuration is never claimed (and never
    judged) on any path."""

    def __init__(
        self,
        claims: ClaimStore,
        workers: int = 1,
        deployment: str | None = None,
        start: Callable[[str, str], object] | None = None,
        configured: Callable[[str], bool] = _every_model,
    ):
        if start is None and deployment is None:
            raise ValueError("a Dispatcher needs the flow to start (start=) or a Prefect deployment to run (deployment=)")
        self.claims = claims
        self.configured = configured
        self.deployment = deployment
        self._start: Callable[[str, str], object] = start or self._run_deployment
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="vlgate-validate")
        self._lock = threading.Lock()
        self.futures: dict[tuple[str, str], Future] = {}

    def offer(self, model_name: str, version: str, via: str, registered_at: str | None = None) -> bool:
        """Start validating the version unless it is already claimed or its model is not
        configured; True if this call claimed it. ``registered_at`` (the version's
        creation_timestamp) tells a re-created model's version from the old one's."""
        version = str(version)
        if not self.configured(model_name) or not self.claims.claim(model_name, version, via, registered_at=registered_at):
            return False
        log.info("claimed %s v%s via %s", model_name, version, via)
        self._submit(model_name, version)
        return True

    def resume_expired(self) -> list[tuple[str, str]]:
        """Take over claims whose worker died (lease ran out) and run them again; the flow
        resumes in the run and records the claim names."""
        resumed = []
        for claim in self.claims.expired():
            if self.claims.take_over_expired(claim.model_name, claim.version):
                resumed.append((claim.model_name, claim.version))
                self._submit(claim.model_name, claim.version)
        return resumed

    def _submit(self, model_name: str, version: str) -> None:
        future = self._pool.submit(self._guarded, model_name, version)
        with self._lock:
            self.futures[(model_name, version)] = future

    def _guarded(self, model_name: str, version: str):
        try:
            return self._start(model_name, version)
        except Exception:  # the flow records the failure in the claim and the version's tags
            log.exception("validation of %s v%s failed", model_name, version)
            raise

    def _run_deployment(self, model_name: str, version: str):
        from prefect.deployments import run_deployment

        assert self.deployment is not None, "only used when a deployment was given"
        return run_deployment(self.deployment, parameters={"model_name": model_name, "version": version}, timeout=0)

    def wait(self, timeout: float | None = None) -> None:
        """Block until every flow started so far has finished (tests, ``serve --once``)."""
        with self._lock:
            futures = list(self.futures.values())
        for future in futures:
            try:
                future.result(timeout=timeout)
            except Exception:
                pass

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def poll_once(client, dispatcher: Dispatcher) -> list[tuple[str, str]]:
    """Offer every registered version of a configured model that has no claim yet (stores
    without webhooks, and whatever a webhook missed); returns the versions this call claimed."""
    claimed = []
    known = {(c.model_name, c.version): c.registered_at for c in dispatcher.claims.all()}
    for model in tracking.registered_models(client):
        if not dispatcher.configured(model.name):
            continue
        # oldest first: the champion evolves in registration order
        for version in tracking.model_versions(client, model.name):
            key = (model.name, str(version.version))
            registered_at = str(version.creation_timestamp)
            if key in known and known[key] == registered_at:
                continue
            # unclaimed, or claimed for an earlier registration (a deleted and re-created
            # model) or before registration times were kept (the claim adopts this one)
            if dispatcher.offer(*key, via="poller", registered_at=registered_at):
                claimed.append(key)
    return claimed


class Poller:
    """``poll_once`` every ``interval`` seconds in a background thread."""

    def __init__(self, home: Path, dispatcher: Dispatcher, interval: float):
        self.home, self.dispatcher, self.interval = home, dispatcher, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vlgate-poller", daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def _loop(self) -> None:
        from vlgate import tracking

        client = None
        while not self._stop.is_set():
            try:
                client = client or tracking.connect(self.home)
                poll_once(client, self.dispatcher)
                self.dispatcher.resume_expired()
            except Exception:  # a registry outage must not stop the poller; next round retries
                log.exception("poll failed")
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
