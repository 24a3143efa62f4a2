"""What one vlgate process works with, built once where the work enters (a command, the
service, a flow run) and handed down: the home prepared and, each made on first use, its
``vlgate.yaml`` read and validated once, the MLflow client, the validation claims, the
named locks and the notification outbox of the home's state database. A flow run is an
entry of its own: it reads the configuration as it stands when it starts, so that the
service's next validation takes an edited ``vlgate.yaml``.

A flow makes its context current for its run (:meth:`ServiceContext.active`): its tasks,
in the flow's threads, take that one (:meth:`ServiceContext.current`); a task in a
process of its own (a Dask worker) opens its own from the environment the flow's process
handed it, as the flow did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from vlgate import tracking
from vlgate.flows.settings import ServiceConfig, prepare_environment

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from vlgate.registry_hooks.claims import ClaimStore
    from vlgate.registry_hooks.seams import NamedLockManager, NotificationOutbox

_CURRENT: ContextVar[ServiceContext | None] = ContextVar("vlgate_service_context", default=None)


@dataclass(frozen=True)
class ServiceContext:
    """The home; its configuration and the stores under it, each made on first use (a
    command that needs no configuration never reads it, nor fails on it)."""

    home: Path

    @classmethod
    def open(cls, home: Path | None = None) -> ServiceContext:
        """The context of ``home`` (``$VLGATE_HOME``), its environment prepared for Prefect and
        the libraries (``prepare_environment``)."""
        return cls(prepare_environment(home))

    @classmethod
    def current(cls) -> ServiceContext:
        """The context the running flow made current, else one opened now."""
        return _CURRENT.get() or cls.open()

    @contextmanager
    def active(self) -> Iterator[ServiceContext]:
        """This context as :meth:`current` for the block (a flow run and its tasks)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    @cached_property
    def config(self) -> ServiceConfig:
        """``vlgate.yaml``, read and validated once (refused, naming the file and field, when read)."""
        return ServiceConfig.load(self.home)

    @cached_property
    def tracking(self) -> MlflowClient:
        """The client of the home's MLflow (also the process's default: ``tracking.connect``)."""
        return tracking.connect(self.home)

    @cached_property
    def claims(self) -> ClaimStore:
        from vlgate.registry_hooks.claims import ClaimStore

        return ClaimStore.for_home(self.home, lease_seconds=self.config.lease_s)

    @cached_property
    def locks(self) -> NamedLockManager:
        from vlgate.registry_hooks.locks import NamedLocks
        from vlgate.registry_hooks.state_db import StateDatabase

        return NamedLocks(StateDatabase.for_home(self.home))

    @cached_property
    def outbox(self) -> NotificationOutbox:
        from vlgate.registry_hooks.outbox import Outbox
        from vlgate.registry_hooks.state_db import StateDatabase

        return Outbox(StateDatabase.for_home(self.home))
