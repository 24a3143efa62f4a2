"""Every MLflow tag vlgate writes, on runs and on registered model versions, and the
limit MLflow keeps of a value. Writers and readers name a tag through this module only,
so a key is spelled once and a reader finds what the writer wrote.

Values are strings (MLflow's); where a tag takes one of a few values, they are a
``StrEnum`` here.
"""

from __future__ import annotations

from enum import StrEnum

#: MLflow keeps at most 5000 characters of a tag value (runs and model versions alike);
#: a longer text (all of a decision's reasons) is whole in the run's artifacts.
MAX_VALUE_CHARS = 5000


class RunKind(StrEnum):
    """What a run in a model's experiment is (tag :data:`KIND`)."""

    REGISTRATION = "registration"
    VALIDATION = "validation"
    DRIFT = "drift"


# --- on an experiment vlgate makes (MLflow's own key: the UI's kind of experiment) -------
EXPERIMENT_KIND, EXPERIMENT_KIND_VALUE = "mlflow.experimentKind", "custom_model_development"

# --- on every run vlgate makes ---------------------------------------------------------
#: a :class:`RunKind`
KIND = "vlgate.kind"
MODEL = "vlgate.model"
VERSION = "vlgate.version"
#: names the one logical run a ``create_run`` call meant to make (``tracking.create_run_once``)
RUN_TOKEN = "vlgate.run_token"

# --- on a registration run -------------------------------------------------------------
CHECKPOINT_DIGEST = "vlgate.checkpoint_digest"

# --- on a validation run (and, where said, on the model version) -------------------------
#: on the version: its validation run's id
VALIDATION_RUN = "vlgate.validation_run_id"
#: on the version and its run: promoted or rejected (fail closed)
DECISION = "vlgate.decision"
#: on the version and its run: promoted, rejected or "could not judge" (something to judge
#: was missing, or the flow failed): what ``vlgate validate``'s exit status says
OUTCOME = "vlgate.outcome"
#: on the version and its run: the reasons, one a line, cut at :data:`MAX_VALUE_CHARS`
#: (the decision record has them all)
REASONS = "vlgate.reasons"
#: on the version and its run: the latest decision record's artifact path on the run
#: (``decisions/0002.json``); the earlier ones stay beside it
DECISION_RECORD = "vlgate.decision_record"
#: on the version: ``vlgate.metric.EVALUATOR/METRIC``, the candidate's value of each metric a
#: rule of the latest decision judged (its headline numbers, beside the decision, on the
#: registry's version page)
HEADLINE_METRIC_PREFIX = "vlgate.metric."
#: on the run: the champion its validation was first judged against (:data:`NO_CHAMPION`:
#: the model had none), set once; every later judgement compares with it unless today's
#: champion is asked for
BASELINE_CHAMPION = "vlgate.baseline_champion"
NO_CHAMPION = "none"
#: whether vlgate's fast paths are exact on the weights ("exact", "not exact: PATH, ...")
MODEL_CHECK = "vlgate.model_check"
#: the champion version, and its validation run, that ``item_diff/`` compares the run with
ITEM_DIFF_CHAMPION = "vlgate.item_diff.champion_version"
ITEM_DIFF_CHAMPION_RUN = "vlgate.item_diff.champion_run_id"
#: the Prefect flow run that ran (or last resumed) a validation or ran a drift check, and where: the worker's
#: name ("in process" when no worker started it), host and process id
FLOW_RUN = "vlgate.flow_run_id"
EXECUTED_BY = "vlgate.executed_by"
#: a sequential validation in brief, on the version and its run ("look 1 of 4 (25% of the
#: items): rejected; 75% of item evaluations saved"), and the look it stopped at on the run
#: ("1 of 4", counted as the text counts), which ``vlgate gate`` judges it at again
SEQUENTIAL = "vlgate.sequential"
LOOK = "vlgate.look"
SUITE_PATH = "vlgate.suite_path"
POLICY_PATH = "vlgate.policy_path"
#: ``report/report.html``, or ``failed: ...`` when the report could not be drawn
REPORT = "vlgate.report"
#: the values of :func:`expectations`; :func:`fingerprints` is the other per-evaluator tag
EXPECTATIONS_PASSED, EXPECTATIONS_FAILED = "passed", "failed"

# --- on a drift run --------------------------------------------------------------------
#: "true" or "false"
DRIFT = "vlgate.drift"
#: the batch suite checked
BATCH = "vlgate.batch"
#: the checks in brief, JSON ``[[metric, mean_current, drifted], ...]``, so that a report
#: reads a model's drift history from its run search alone instead of one drift.json
#: download per run (hourly checks: 8,760 a year); a run whose checks do not fit in one
#: tag has only drift.json
DRIFT_CHECKS = "vlgate.drift_checks"


def expectations(evaluator: str) -> str:
    """The validation run's tag saying whether ``evaluator``'s expectations passed."""
    return f"vlgate.expectations.{evaluator}"


def fingerprints(evaluator: str) -> str:
    """The validation run's tag holding a digest of ``evaluator``'s record fingerprints
    (which model, protocol and items its records came from)."""
    return f"vlgate.fingerprints.{evaluator}"


def runs_of_kind(kind: RunKind) -> str:
    """An MLflow run search filter for the runs of ``kind``."""
    return f"tags.`{KIND}` = '{kind}'"


def cut(value: str) -> str:
    """``value`` as MLflow keeps it: at most :data:`MAX_VALUE_CHARS` characters."""
    return value[:MAX_VALUE_CHARS]


def look_tag(index: int, of: int) -> str:
    """:data:`LOOK`'s value for the look at 0-based ``index`` of ``of``: ``"1 of 4"``."""
    return f"{index + 1} of {of}"


def look_index(value: str | None) -> int | None:
    """The 0-based look index a :data:`LOOK` value names: ``"1 of 4"``, or a bare 0-based
    index, as runs recorded before the tag counted from one carry it; ``None`` without one."""
    if not value:
        return None
    number, of, _ = value.partition(" of ")
    return int(number) - 1 if of else int(number)
