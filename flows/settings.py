"""The service's configuration: ``$VLGATE_HOME/vlgate.yaml`` (paths relative to the file).

::

    models:
      demo-vlm:
        suite: world/suite.yaml          # evaluators and data every version is validated on
        policy: gate.yaml                # the promotion gate (gate/policy.py)
        drift:                           # unlabelled batches: label-free evaluators only
          reference: drift/reference/suite.yaml
          batch: drift/incoming/suite.yaml
          cron: "0 */6 * * *"
    default:                             # for registered models not listed above (optional)
      suite: ...
      policy: ...
    poll_interval_s: 30
    webhook: {host: 127.0.0.1, port: 8765, secret_env: VLGATE_WEBHOOK_SECRET}   # the variable holding its secret
    workers: 1                           # validation flows at once; 0 = one per configured model
    lease_s: 90                          # a running flow renews its claim every lease_s / 3; lost once it runs out
    max_crashes: 3                       # attempts lost with their process before the version fails closed
    evaluation:                          # how one flow runs its evaluators (flows/validation.py)
      runner: threads                    # or dask: a Dask cluster (prefect-dask)
      workers: 1                         # threads at once, or the local Dask cluster's worker processes
      address: null                      # dask: an existing scheduler, e.g. tcp://dask-scheduler:8786
      shards: 1                          # each evaluator's items split into this many tasks
    record_cache:                        # records shared across versions and runs by fingerprint (docs/record-cache.md)
      kind: auto                         # folder ($VLGATE_HOME/record-cache), database (the state database), off;
                                         #   auto: database when VLGATE_STATE_DB is PostgreSQL (the stack), else folder
      max_size: 20GB                     # least recently used records evicted beyond it
    notify:                              # where decisions, drift and failures are told (docs/notifications.md);
      channels:                          #   a model's own notify: replaces this one for it
        - {kind: webhook, name: ci, url: "https://ci.example.com/vlgate", secret_env: VLGATE_NOTIFY_SECRET}
        - {kind: apprise, name: team-chat, url_env: VLGATE_SLACK_URL, events: [decision-rejected, drift-found]}

A registered model with no entry and no default is not validated: the poller says so
once and leaves it alone (vlgate cannot guess which data a model should be judged on).

Where state lives: MLflow at ``MLFLOW_TRACKING_URI`` (default: SQLite and an artifact
folder under ``$VLGATE_HOME/mlflow``), vlgate's claims at ``VLGATE_STATE_DB`` (default
``$VLGATE_HOME/state.db``), Prefect at ``PREFECT_API_URL`` (default: a server on
loopback that the command starts and stops, ``cli/prefect_server.py``, its database
under ``$VLGATE_HOME/prefect``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vlgate.config import CONFIG_MODEL, load_yaml_model
from vlgate.home import vlgate_home
from vlgate.registry_hooks.claims import DEFAULT_LEASE_S
from vlgate.registry_hooks.dispatch import DEFAULT_MAX_CRASHES
from vlgate.registry_hooks.notifications import ENV_NAME, ChannelConfig, NotifyConfig
from vlgate.text import visible
from vlgate.values import replaced
from vlgate.versions import model_name_problem

if TYPE_CHECKING:
    from prefect.task_runners import TaskRunner

    from vlgate.evaluators.runners.cache import RecordCacheSettings
    from vlgate.evaluators.running.suite import Suite
    from vlgate.gate.policy import GatePolicy

CONFIG_FILE = "vlgate.yaml"


class DriftConfig(BaseModel):
    model_config = CONFIG_MODEL

    reference: Path = Field(description="drift suite of the reference batch (the distribution the champion was accepted on)")
    batch: Path = Field(description="drift suite of the new batch; its data folder is refreshed by a pipeline")
    cron: str = "0 */6 * * *"
    alpha: float = Field(default=0.01, gt=0, lt=1, description="two-sample test level")
    max_mean_drop: float = Field(default=0.05, ge=0, description="largest tolerated drop of a per-sample mean")

    @field_validator("cron")
    @classmethod
    def cron_is_a_schedule(cls, value: str) -> str:
        """Five cron fields, checked when the file is read (a cron Prefect refuses crashed the
        service when it scheduled it). Checked with cronsim, which Prefect's own stack
        installs: importing Prefect here, before ``vlgate serve`` starts its Prefect server,
        would make Prefect start a temporary server without the scheduler instead."""
        from datetime import datetime

        from cronsim import CronSim, CronSimError

        try:
            CronSim(value, datetime(2000, 1, 1))
        except CronSimError as error:
            raise ValueError(f"{value!r} is not a cron schedule ({error}; five fields: minute hour day month weekday)") from None
        return value


class ModelConfig(BaseModel):
    model_config = CONFIG_MODEL

    suite: Path
    policy: Path
    drift: DriftConfig | None = None
    #: where this model's notifications go; unset: the file's ``notify:``
    notify: NotifyConfig | None = None


#: the variable holding the webhook's shared secret unless vlgate.yaml names another
DEFAULT_WEBHOOK_SECRET_ENV = "VLGATE_WEBHOOK_SECRET"


class WebhookConfig(BaseModel):
    model_config = CONFIG_MODEL | ConfigDict(hide_input_in_errors=True)  # a refused secret_env may be the secret

    host: str = "127.0.0.1"
    port: int = 8765
    #: the environment variable holding the webhook's shared secret (never the secret itself):
    #: a leaked secret is rotated by naming another variable, or giving this one a new value,
    #: and restarting vlgate serve, which uses it and has MLflow's webhook signed with it
    secret_env: str = DEFAULT_WEBHOOK_SECRET_ENV
    max_age_s: float = Field(default=300, gt=0, le=7 * 24 * 3600, description="older X-MLflow-Timestamp values are refused (at most a week)")
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="larger request bodies are refused (413) before they are read")

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, value: str) -> str:
        if not ENV_NAME.fullmatch(value):  # the value is not repeated: it may be the secret itself
            raise ValueError("secret_env must name the environment variable holding the webhook secret (upper case, digits, _), not hold the secret itself")
        return value

    def secret(self) -> str:
        """The shared secret, from the environment variable ``secret_env`` ("" when unset)."""
        return os.environ.get(self.secret_env, "")


class EvaluationConfig(BaseModel):
    """How a validation flow runs its evaluator tasks. One thread by default: on one GPU
    (or a small CPU machine) evaluators only compete. On a cluster, ``runner: dask`` fans
    the tasks out and ``shards`` splits each evaluator's items across them."""

    model_config = CONFIG_MODEL

    runner: Literal["threads", "dask"] = "threads"
    workers: int = Field(default=1, ge=1)
    address: str | None = Field(default=None, description="dask: scheduler address; unset = a local cluster of `workers` processes")
    shards: int = Field(default=1, ge=1)
    task_timeout_s: float = Field(
        default=6 * 3600, gt=0, description="one evaluator shard's time limit, checked between batches; past it the evaluator failed (not retried)"
    )

    def task_runner(self) -> TaskRunner[Any]:  # Any: Prefect's runners are generic in their future types, which its own flow options do not accept
        """The Prefect task runner this configuration names."""
        if self.runner == "dask":
            from prefect_dask import DaskTaskRunner

            if self.address:
                return DaskTaskRunner(address=self.address)
            # one thread per worker process: each process holds its own copy of the models
            return DaskTaskRunner(cluster_kwargs={"n_workers": self.workers, "threads_per_worker": 1, "processes": True, "dashboard_address": None})
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=self.workers)


#: the record cache's kind where ``vlgate.yaml`` leaves it ``auto`` (folder, database, off):
#: e.g. ``off`` for a test session, whose tests count what they compute
RECORD_CACHE_ENV = "VLGATE_RECORD_CACHE"


class RecordCacheConfig(BaseModel):
    """The shared record cache (``evaluators/runners/cache.py``, docs/record-cache.md): which
    store, and its bound. ``auto`` is ``$VLGATE_RECORD_CACHE`` when set, else the state
    database's table when that database is PostgreSQL (the stack: every worker reaches it)
    and the folder under ``VLGATE_HOME`` otherwise (one machine)."""

    model_config = CONFIG_MODEL

    kind: Literal["auto", "folder", "database", "off"] = "auto"
    max_size: str = Field(default="20GB", description="the cache's bound (e.g. 20GB, 500MB): least recently used records are evicted beyond it")

    @field_validator("max_size", mode="before")
    @classmethod
    def _a_size(cls, value: object) -> object:
        from vlgate.evaluators.runners.cache import parse_size

        parse_size(value if isinstance(value, (str, int)) else str(value))  # ValueError names what a size looks like
        return str(value)

    def settings(self, home: Path | None = None) -> RecordCacheSettings:
        """The cache a run uses, resolved (``auto`` decided) for ``home``: what crosses to the workers."""
        from vlgate.evaluators.runners.cache import RecordCacheSettings, parse_size
        from vlgate.registry_hooks.state_db import StateDatabase

        home = (home or vlgate_home()).resolve()
        kind = self.kind
        if kind == "auto":
            chosen = os.environ.get(RECORD_CACHE_ENV) or ("database" if StateDatabase.url_for_home(home).startswith("postgresql") else "folder")
            if chosen not in ("folder", "database", "off"):
                raise ValueError(f"{RECORD_CACHE_ENV}={chosen!r}: folder, database or off")
            kind = "folder" if chosen == "folder" else "database" if chosen == "database" else "off"
        assert kind != "auto"
        return RecordCacheSettings(kind=kind, max_bytes=parse_size(self.max_size), folder=home / "record-cache" if kind == "folder" else None)


class ServiceConfig(BaseModel):
    model_config = CONFIG_MODEL | ConfigDict(hide_input_in_errors=True)

    models: dict[str, ModelConfig] = Field(default_factory=dict)
    default: ModelConfig | None = None
    poll_interval_s: float = Field(default=30, gt=0)
    webhook: WebhookConfig = WebhookConfig()
    workers: int = Field(default=1, ge=0, description="validation flows at once; 0 = one per configured model")
    registry_wait_s: float = Field(default=120, gt=0, description="how long a flow waits (doubling) for the registry to serve its version")
    retry_after_s: float = Field(
        default=60, gt=0, description="first wait before a validation stopped by an unreachable server runs again; doubles per attempt, up to 30 min"
    )
    lease_s: float = Field(
        default=DEFAULT_LEASE_S, ge=10, description="a running validation renews its claim every third of this; one whose process died unseen is run again once it runs out"
    )
    max_crashes: int = Field(default=DEFAULT_MAX_CRASHES, ge=1, description="attempts of one version lost with their process before it is failed closed")
    evaluation: EvaluationConfig = EvaluationConfig()
    #: where notifications go, for every model without its own ``notify:`` (docs/notifications.md)
    notify: NotifyConfig = NotifyConfig()
    #: records shared by fingerprint across versions, models and runs (docs/record-cache.md)
    record_cache: RecordCacheConfig = RecordCacheConfig()

    @field_validator("models")
    @classmethod
    def _model_names(cls, models: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        """A model is configured under a name the registry and vlgate take (vlgate/versions.py)."""
        for name in models:
            problem = model_name_problem(name)
            if problem is not None:
                raise ValueError(f"model {visible(name)!r}: {problem}")
        return models

    @model_validator(mode="after")
    def _one_channel_per_name(self) -> ServiceConfig:
        """A channel name means one channel across the file: the outbox keeps rows by name."""
        seen: dict[str, ChannelConfig] = {}
        sections = [("notify", self.notify), *((f"models.{name}.notify", m.notify) for name, m in self.models.items() if m.notify is not None)]
        for section, config in [*sections, *([("default.notify", self.default.notify)] if self.default and self.default.notify else [])]:
            for n, channel in enumerate(config.channels):
                if seen.setdefault(channel.name, channel) != channel:
                    raise ValueError(f"{section}.channels.{n}: the name {channel.name!r} is another channel elsewhere in the file; give it its own name")
        return self

    def notify_channels(self, model_name: str) -> list[ChannelConfig]:
        """The channels ``model_name``'s notifications go to (its own ``notify:``, else the file's)."""
        config = self.for_model(model_name)
        return list((config.notify if config is not None and config.notify is not None else self.notify).channels)

    def all_channels(self) -> list[ChannelConfig]:
        """Every channel of the file, once each: what a deliverer sends to."""
        found = {c.name: c for c in self.notify.channels}
        for config in [*self.models.values(), *([self.default] if self.default else [])]:
            found.update({c.name: c for c in (config.notify.channels if config.notify else [])})
        return list(found.values())

    @classmethod
    def load(cls, home: Path | None = None) -> ServiceConfig:
        path = (home or vlgate_home()) / CONFIG_FILE
        if not path.is_file():
            return cls()
        return load_yaml_model(cls, path, "service config").relative_to(path.parent)

    def relative_to(self, base: Path) -> ServiceConfig:
        def fix(config: ModelConfig | None) -> ModelConfig | None:
            if config is None:
                return None
            update: dict[str, Any] = {"suite": base / config.suite, "policy": base / config.policy}
            if config.drift is not None:
                update["drift"] = replaced(config.drift, reference=base / config.drift.reference, batch=base / config.drift.batch)
            return replaced(config, **update)

        return replaced(self, models={name: fix(c) for name, c in self.models.items()}, default=fix(self.default))

    def for_model(self, model_name: str) -> ModelConfig | None:
        return self.models.get(model_name, self.default)


def not_configured(home: Path, model_name: str, config: ServiceConfig) -> str | None:
    """Why ``model_name`` cannot be validated from ``home``'s configuration ``config``, or
    None (one rule for the CLI, the flow, the webhook and the poller)."""
    if config.for_model(model_name) is None:
        return f"registered model {model_name!r} has no suite and policy in {home / CONFIG_FILE} (models: or default:)"
    return None


def model_problem(home: Path, model_name: str, config: ServiceConfig) -> str | None:
    """Why ``model_name`` cannot be validated under ``home``'s configuration ``config``,
    checked before anything is evaluated: not configured, a suite or policy that does not
    load, or a policy that judges evaluators the suite does not run. None when it can be."""
    model_config = config.for_model(model_name)
    if model_config is None:
        return not_configured(home, model_name, config)
    return config_problem(model_config)


def read_model_config(config: ModelConfig) -> tuple[Suite, GatePolicy]:
    """A model's suite and policy loaded and checked against each other; ValueError with the
    one line that says what is wrong (naming the file and the field)."""
    from vlgate.evaluators.running.suite import Suite  # the registry and its runners: not for every importer
    from vlgate.gate.policy import GatePolicy

    suite = Suite.from_file(config.suite)
    policy = GatePolicy.from_file(config.policy)
    try:
        policy.check_suite(suite.evaluators, f"suite {config.suite}")
    except ValueError as error:
        raise ValueError(f"gate policy {config.policy}: {error}") from None
    return suite, policy


def config_problem(config: ModelConfig) -> str | None:
    """A model's suite and policy loaded and checked against each other, or the one line
    that says what is wrong (naming the file and the field)."""
    try:
        read_model_config(config)
    except ValueError as error:
        return str(error)
    return None


def drift_problem(config: ModelConfig) -> str | None:
    """A model's drift suites loaded, or the one line that says what is wrong: a scheduled
    check on a suite that does not load would fail at every run."""
    from vlgate.evaluators.running.suite import Suite

    if config.drift is None:
        return None
    for role, suite in (("reference", config.drift.reference), ("batch", config.drift.batch)):
        try:
            Suite.from_file(suite)
        except ValueError as error:
            return f"drift {role} suite: {error}"
    return None


def report_image_roots(config: ServiceConfig, model_name: str) -> tuple[Path, ...]:
    """The folders a report may show images from besides the run's own artifacts: the data
    of the suite the model is configured with (its records name images there: MC items,
    GenCeption seeds), and the home's cache of images extracted from release tables
    (parquet, arrow). Only the cache when the model's configuration does not load."""
    from vlgate.evaluators.loaders.tables import image_cache_dir
    from vlgate.evaluators.running.suite import Suite

    model_config = config.for_model(model_name)
    if model_config is None:
        return (image_cache_dir(),)
    try:
        suite = Suite.from_file(model_config.suite)
    except ValueError:
        return (image_cache_dir(),)
    return suite_image_roots(suite)


def suite_image_roots(suite: Suite) -> tuple[Path, ...]:
    """The image cache and the folders of ``suite``'s data (:func:`report_image_roots`)."""
    from vlgate.evaluators.loaders.tables import image_cache_dir

    # a data path may be a glob of one split's tables (MMMU/*/validation-*.parquet): its first fixed folder
    folders = {next((parent for parent in (spec.data, *spec.data.parents) if parent.is_dir()), spec.data) for spec in suite.evaluators.values()}
    return (image_cache_dir(), *sorted(folders))


def prepare_environment(home: Path | None = None) -> Path:
    """Point Prefect's local state into ``VLGATE_HOME`` (unless the user configured Prefect)
    before Prefect is imported; returns the resolved home."""
    home = (home or vlgate_home()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # the ephemeral API server migrates its SQLite database on start: on a busy small
    # machine that can take longer than Prefect's default 20 s
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # results of evaluator tasks are kept so a restarted flow does not redo finished evaluators
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(home / "prefect" / "results"))
    # a service's log is for decisions and errors: no telemetry, no download/loading bars
    for name, value in {
        "GX_ANALYTICS_ENABLED": "False",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        # MLflow's own handler prints INFO ("Creating initial MLflow database tables...") into vlgate's output
        "MLFLOW_LOGGING_LEVEL": "WARNING",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TQDM_DISABLE": "1",
    }.items():
        os.environ.setdefault(name, value)
    return home
