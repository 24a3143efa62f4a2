"""MLflow: where vlgate reads registered versions and writes validation runs, tags and the
``champion`` alias.

Layout (what MLflow's compare view shows): one experiment per registered model,
``vlgate/MODEL``, one validation run per version (``MODEL v3``), metrics
``EVALUATOR/METRIC``, tags ``vlgate.model`` / ``vlgate.version`` / ``vlgate.decision``.
MLflow refuses ``@`` in metric names, so ``gc@3`` is logged as ``gc_at_3``
(``mlflow_metric_name``); nothing else is renamed.

One module per job: ``server`` (where MLflow is, the client, which faults are transient),
``paging`` (searches read to their last page), ``naming`` (vlgate's names as MLflow's),
``runs`` (experiments, runs made exactly once), ``registration`` (registering a
checkpoint, the champion), ``decisions`` (a run's decision records, appended only). Their public names are this package's, so callers write
``tracking.connect()``.
"""

from vlgate.tracking.decisions import baseline_of, decision_history, file_digest, latest_decision, log_decision, next_decision_number, version_histories
from vlgate.tracking.naming import (
    EXPERIMENT_PREFIX,
    VALIDATION_LINK,
    breakdown_frame,
    flatten_metrics,
    logged_metric_name,
    mlflow_metric_name,
    reasons_tag,
    registered_description,
    run_page_path,
    run_page_url,
    split_breakdowns,
    validation_experiment,
)
from vlgate.tracking.paging import RUNS_PAGE, model_versions, pages, registered_models, search_all_runs, version_number
from vlgate.tracking.registration import (
    CHAMPION,
    CheckpointError,
    champion_version,
    check_uploadable,
    links_leaving,
    model_name_problem,
    name_registered_version,
    register_checkpoint,
    version_logged_model,
    wait_for_version,
)
from vlgate.tracking.runs import create_run_once, define_run_tasks, experiment_id, first_run_with_token, log_tables, validation_runs
from vlgate.tracking.server import TrackingUnreachable, connect, embedded, require_reachable, tracking_uri, transient

__all__ = [
    "CHAMPION",
    "EXPERIMENT_PREFIX",
    "RUNS_PAGE",
    "VALIDATION_LINK",
    "CheckpointError",
    "define_run_tasks",
    "TrackingUnreachable",
    "baseline_of",
    "breakdown_frame",
    "champion_version",
    "check_uploadable",
    "connect",
    "create_run_once",
    "decision_history",
    "file_digest",
    "embedded",
    "experiment_id",
    "first_run_with_token",
    "latest_decision",
    "log_decision",
    "next_decision_number",
    "log_tables",
    "flatten_metrics",
    "links_leaving",
    "logged_metric_name",
    "mlflow_metric_name",
    "model_name_problem",
    "model_versions",
    "name_registered_version",
    "pages",
    "reasons_tag",
    "register_checkpoint",
    "registered_description",
    "run_page_path",
    "run_page_url",
    "registered_models",
    "require_reachable",
    "search_all_runs",
    "split_breakdowns",
    "tracking_uri",
    "transient",
    "validation_experiment",
    "validation_runs",
    "version_histories",
    "version_number",
    "version_logged_model",
    "wait_for_version",
]
