"""How vlgate's names become MLflow's and back: experiments, metric names, breakdown
tables, the reasons tag, the line a version's description gets and where MLflow's UI
shows a run."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from vlgate import tag_keys
from vlgate.evaluators.metrics.common import Metrics, MetricValue, MetricValues

if TYPE_CHECKING:
    import pandas as pd

EXPERIMENT_PREFIX = "vlgate/"


def validation_experiment(model_name: str) -> str:
    return f"{EXPERIMENT_PREFIX}{model_name}"


_INVALID = re.compile(r"[^/\w.\- :]")


#: where ``mlflow ui`` serves by default: the UI of an embedded store, once it is started
MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000"


def run_page_path(experiment_id: str, run_id: str) -> str:
    """A run's page in MLflow's UI, relative to the UI's root (its router's hash path)."""
    return f"#/experiments/{experiment_id}/runs/{run_id}"


def run_page_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """A run's page in MLflow's UI: on the tracking server itself, or where ``mlflow ui``
    serves an embedded store (:data:`MLFLOW_UI_DEFAULT`)."""
    root = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else MLFLOW_UI_DEFAULT
    return f"{root}/{run_page_path(experiment_id, run_id)}"


def mlflow_metric_name(name: str) -> str:
    """``genception/gc@3`` → ``genception/gc_at_3``; MLflow accepts only ``[/\\w.\\- :]``."""
    return _INVALID.sub("_", name.replace("@", "_at_"))


#: the line vlgate adds to a registered version's description (flows/recording.py)
VALIDATION_LINK = "vlgate validation run: "


def registered_description(description: str | None) -> str:
    """A version's description as its registration wrote it, without vlgate's link line."""
    return "\n".join(line for line in (description or "").splitlines() if not line.startswith(VALIDATION_LINK)).strip()


def split_breakdowns(metrics: Metrics) -> tuple[Metrics, dict[str, dict[str, MetricValues]]]:
    """A metrics dict as its set-level metrics and its breakdowns (``by_<field>``: group →
    metrics): the first are MLflow metrics, the second MLflow tables (a run with every
    breakdown flattened carries hundreds of metrics)."""
    top: Metrics = {}
    breakdowns: dict[str, dict[str, MetricValues]] = {}
    for key, value in metrics.items():
        if key.startswith("by_") and isinstance(value, dict):
            breakdowns[key] = value
        else:
            top[key] = value
    return top, breakdowns


def breakdown_frame(field: str, groups: Mapping[str, Mapping[str, object]]) -> pd.DataFrame:
    """One breakdown as a table: a row per group (the field's value first), a column per metric."""
    import pandas as pd

    def cell(value: object) -> MetricValue:  # numbers (None where undefined); anything else is not a metric
        return value if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)) else None

    return pd.DataFrame([{field: str(group), **{key: cell(value) for key, value in values.items()}} for group, values in groups.items() if isinstance(values, dict)])


def flatten_metrics(metrics: Mapping[str, object], prefix: str) -> Iterator[tuple[str, float]]:
    """Every finite number in a metrics dict, nested keys joined by ``/``."""
    for key, value in metrics.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict):
            yield from flatten_metrics(value, name)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf"):
            yield mlflow_metric_name(name), float(value)


def logged_metric_name(name: str) -> str:
    """Back from MLflow's name to vlgate's (docs/metrics.md): ``genception/gc_at_3`` → ``genception/gc@3``."""
    return name.replace("_at_", "@")


def reasons_tag(reasons: list[str]) -> str:
    """One reason per line (a reason may itself contain "; ")."""
    text = "\n".join(reasons)
    return text if len(text) <= tag_keys.MAX_VALUE_CHARS else text[: tag_keys.MAX_VALUE_CHARS - 40] + " … (all reasons: the decision record)"
