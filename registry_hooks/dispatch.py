"""From "a version exists" to "its validation flow runs", exactly once.

Both the webhook receiver and the poller call ``Dispatcher.offer``; the claim row
(``claims.py``) decides which call wins, and only the winner starts the flow. The flow
runs in this process's worker threads (``start=``: the flow function, which the caller in
``flows/`` passes, so this package never imports the flows) or as a run of the
``vlgate-validate`` Prefect deployment on the work pool's GPU workers (``deployment=``).

A validation whose process dies is run again (:meth:`Dispatcher.recover`, each poll): at
once when Prefect reports its flow run crashed (a worker saw its flow's process die), and
when its lease runs out without heartbeats (the worker died with it, and nobody told
Prefect). The next attempt resumes from the records and logs into the same MLflow run.
A flow run still queued for a worker, or a flow this process has yet to start, keeps its
claim alive instead. An attempt lost with its process counts as a crash; after
``max_crashes`` the claim is failed closed with the reason (``give_up`` records it on the
version). A flow run cancelled in Prefect is an operator's decision: the claim fails.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from vlgate import tracking
from vlgate.registry_hooks.claims import Claim, ClaimState, ClaimStore
from vlgate.text import shell_command, visible
from vlgate.versions import VersionError, VersionRef, model_name_problem

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from prefect.client.schemas.objects import FlowRun

log = logging.getLogger("vlgate.hooks")


def _every_model(_name: str) -> bool:
    return True


#: How many attempts of one version may be lost with their process before its claim is failed.
DEFAULT_MAX_CRASHES = 3
#: Prefect's state types of a flow run that waits for a worker (its validation is not lost)
QUEUED = frozenset({"SCHEDULED", "PENDING", "PAUSED"})


class FlowRunState(NamedTuple):
    type: str
    message: str


def flow_run_states(ids: list[str]) -> dict[str, FlowRunState]:
    """Prefect's state of each flow run (one API call); raises when Prefect does not answer."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    if not ids:
        return {}
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(i) for i in ids])))
    return {str(run.id): FlowRunState(run.state.type.value if run.state else "UNKNOWN", (run.state.message or "") if run.state else "") for run in runs}


def cancel_flow_run(flow_run_id: str, why: str) -> None:
    """Ask Prefect to cancel a flow run taken over (its worker kills the process if alive)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(UUID(flow_run_id), Cancelling(message=why), force=True)
    except Exception as error:  # best effort: the new attempt holds the claim either way
        log.warning("could not cancel flow run %s: %s", flow_run_id, error)


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
        max_crashes: int = DEFAULT_MAX_CRASHES,
        give_up: Callable[[VersionRef, str], None] | None = None,
    ):
        if start is None and deployment is None:
            raise ValueError("a Dispatcher needs the flow to start (start=) or a Prefect deployment to run (deployment=)")
        self.claims = claims
        self.configured = configured
        self.max_crashes = max_crashes
        self.give_up = give_up
        self.deployment = deployment
        self._start: Callable[[str, str], object] = start or self._run_deployment
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="vlgate-validate")
        self._lock = threading.Lock()
        self.futures: dict[VersionRef, Future[object]] = {}

    def offer(self, model_name: str, version: str, via: str, registered_at: str | None = None) -> bool:
        """Start validating the version unless it is already claimed or its model is not
        configured; True if this call claimed it. ``registered_at`` (the version's
        creation_timestamp) tells a re-created model's version from the old one's."""
        try:
            subject = VersionRef.of(model_name, version)
        except VersionError as error:  # names no version of the registry: nothing to claim
            log.warning("%s: not offered: %s", visible(model_name), error)
            return False
        problem = model_name_problem(model_name)
        if problem is not None:  # registered by another tool: vlgate could neither show nor quote it as written
            log.warning("model %r v%s: not offered: %s", visible(model_name), subject.version, problem)
            return False
        if not self.configured(model_name) or not self.claims.claim(subject, via, registered_at=registered_at):
            return False
        log.info("claimed %s via %s", subject, via)
        self._submit(subject)
        return True

    def recover(self) -> list[tuple[str, str]]:
        """Run again every validation that was lost, keep alive those still waiting; returns
        the versions this call sent again (see the module's docstring)."""
        live = self.claims.live()
        try:
            states = flow_run_states([c.flow_run_id for c in live if c.flow_run_id])
            prefect_answers = True
        except Exception as error:  # without Prefect's word a queued flow run looks lost: judge only what needs none
            log.warning("Prefect did not answer for the flow runs of %d claim(s): %s", len(live), error)
            states, prefect_answers = {}, False
        now = datetime.now(timezone.utc)
        resumed = []
        for claim in live:
            if claim.flow_run_id and not prefect_answers:
                continue
            state = states.get(claim.flow_run_id) if claim.flow_run_id else None
            loss = self._loss(claim, state, now)
            if loss is None:
                continue
            why, crashed = loss
            final = None
            if state is not None and state.type == "CANCELLED":
                final = f"{why}; {shell_command('vlgate', 'release', claim.model_name, claim.version)} runs it again"
            elif crashed and claim.crashes + 1 >= self.max_crashes:
                final = f"validation crashed {claim.crashes + 1} times, the limit (last: {why}); {shell_command('vlgate', 'release', claim.model_name, claim.version)} runs it again"
            if final is not None:  # failed closed, on record
                if self.claims.fail(claim.subject, final, attempt=claim.attempts):
                    log.error("%s: %s", claim.subject, final)
                    if self.give_up is not None:
                        self.give_up(claim.subject, final)
                continue
            if self.claims.take_over(claim.subject, claim.attempts, detail=f"attempt {claim.attempts + 1}: the last {why}", crashed=crashed):
                log.warning("%s: the last %s; validating it again", claim.subject, why)
                if claim.flow_run_id and state is not None and state.type == "RUNNING":
                    cancel_flow_run(claim.flow_run_id, f"taken over by attempt {claim.attempts + 1}: {why}")
                resumed.append((claim.model_name, claim.version))
                self._submit(claim.subject)
        return resumed

    def _loss(self, claim: Claim, state: FlowRunState | None, now: datetime) -> tuple[str, bool] | None:
        """Why the claim's validation is lost and whether its process died with it (a
        crash), or None while it is alive or waiting (its lease renewed where needed)."""
        flow_run = f"flow run {claim.flow_run_id}"
        if state is not None and state.type in ("CRASHED", "CANCELLED"):
            return f"{flow_run} {state.type.lower()} ({state.message or 'no message'})", state.type == "CRASHED"
        if claim.lease_expires >= now:
            return None
        if (state is not None and state.type in QUEUED) or (claim.state == ClaimState.CLAIMED and self._queued_here(claim)):
            self.claims.renew(claim.subject)  # waiting for a worker, or for one of this process's threads
            return None
        if claim.state == ClaimState.RUNNING:
            seen = f"; Prefect has it {state.type.lower()}" if state is not None else ""
            return f"flow stopped renewing its lease ({flow_run if claim.flow_run_id else 'in process'}, lease out at {claim.lease_expires:%H:%M:%S} UTC{seen})", True
        if claim.detail and claim.detail.startswith("retrying after"):
            return f"validation stopped by a transient fault ({claim.detail})", False
        return f"claim's lease ran out at {claim.lease_expires:%H:%M:%S} UTC before its flow started (the process holding it is gone)", False

    def _queued_here(self, claim: Claim) -> bool:
        """Whether this process holds the version's flow, not yet finished (waiting for a thread)."""
        with self._lock:
            future = self.futures.get(claim.subject)
        return future is not None and not future.done()

    def _submit(self, subject: VersionRef) -> None:
        future = self._pool.submit(self._guarded, subject)
        with self._lock:
            self.futures[subject] = future

    def _guarded(self, subject: VersionRef) -> object:
        try:
            return self._start(subject.model, subject.version)  # the flow's parameters
        except Exception:  # the flow records the failure in the claim and the version's tags
            log.exception("validation of %s failed", subject)
            raise

    def _run_deployment(self, model_name: str, version: str) -> FlowRun:
        from prefect.deployments import run_deployment

        assert self.deployment is not None, "only used when a deployment was given"
        flow_run = run_deployment(self.deployment, parameters={"model_name": model_name, "version": version}, timeout=0)
        assert not inspect.isawaitable(flow_run), "called from a thread without an event loop: Prefect runs it synchronously"
        self.claims.record_flow_run(VersionRef.of(model_name, version), str(flow_run.id))  # queued on the pool: Prefect now says how it goes
        return flow_run

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


def poll_once(client: MlflowClient, dispatcher: Dispatcher) -> list[tuple[str, str]]:
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
                self.dispatcher.recover()
            except Exception:  # a registry outage must not stop the poller; next round retries
                log.exception("poll failed")
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
