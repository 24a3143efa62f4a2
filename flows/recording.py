"""The MLflow side of the validation flow: the version's one validation run, what each
evaluator's output becomes there, the decision tags, and the champion's outputs read
back for the gate. Every write is retried while the tracking server is away.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from vlgate import tag_keys, tracking
from vlgate.decisions import Check, DecisionRecord, Judge, LookRecord, Outcome, Rule, decision_file, outcome_label
from vlgate.evaluators import registry
from vlgate.evaluators.output import RECORDS_FROM_CACHE, EvaluatorOutput
from vlgate.flows.context import ServiceContext
from vlgate.registry_hooks.claims import ClaimStore
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

    from vlgate.evaluators.running.suite import Suite


def where_it_runs() -> dict[str, str]:
    """The tags naming the Prefect flow run and the process a flow runs in (a worker's name,
    the host and the pid; "in process" outside a worker), for the run it logs to."""
    from prefect.runtime import flow_run

    worker = os.environ.get("PREFECT__WORKER_NAME") or "in process"
    return {tag_keys.FLOW_RUN: str(flow_run.id), tag_keys.EXECUTED_BY: f"{worker} on {socket.gethostname()} pid {os.getpid()}"}


def fingerprint_digest(records: Sequence[Mapping[str, object]]) -> str:
    return hashlib.sha256("\n".join(sorted(str(r.get("fingerprint")) for r in records)).encode()).hexdigest()[:16]


@task(name="log-look", retries=5, retry_delay_seconds=exponential_backoff(backoff_factor=2), retry_jitter_factor=0.5, cache_policy=NO_CACHE)
def log_look(run_id: str, outputs: Mapping[str, EvaluatorOutput]) -> None:
    """What a look measured, in one batched write: every evaluator's metrics and tags
    (:func:`log_measures`); retried while the tracking server is unreachable. Its records
    and tables are logged once, after the last look (:func:`log_outputs`)."""
    log_measures(ServiceContext.current().tracking, run_id, list(outputs.values()))


@task(name="log-outputs", retries=5, retry_delay_seconds=exponential_backoff(backoff_factor=2), retry_jitter_factor=0.5, cache_policy=NO_CACHE)
def log_outputs(run_id: str, outputs: Mapping[str, EvaluatorOutput]) -> None:
    """The look's records, tables and expectation results of every evaluator (the tables in
    one upload, replacing a look's before: :func:`output_tables`, :func:`log_artifacts`);
    retried while the tracking server is unreachable."""
    client = ServiceContext.current().tracking
    tracking.log_tables(client, run_id, {path: frame for output in outputs.values() for path, frame in output_tables(output).items()})
    for output in outputs.values():
        log_artifacts(client, run_id, output)


def log_measures(client: MlflowClient, run_id: str, outputs: Sequence[EvaluatorOutput]) -> None:
    """Set-level metrics ``EVALUATOR/METRIC``, how many records came from the shared record
    cache (``records_from_cache/EVALUATOR``), the fingerprints' digest and whether the
    expectations passed (tags: no compare-view axis), for every output in one batch (MLflow
    takes 1,000 metrics and 100 tags a batch). Each metric is logged at the step of the
    items it was computed on: a sequential validation's looks are its points in MLflow's
    charts, and the run's latest value is its last look's."""
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    metrics: list[Metric] = []
    tags: list[RunTag] = []
    for output in outputs:
        evaluator, step = output.evaluator, output.summary.n_items
        if output.metrics:
            top, _ = tracking.split_breakdowns(output.metrics)
            metrics += [Metric(key, value, now, step) for key, value in tracking.flatten_metrics(top, evaluator)]
        if output.error is None:
            metrics.append(Metric(tracking.mlflow_metric_name(f"{RECORDS_FROM_CACHE}/{evaluator}"), float(output.summary.from_cache), now, step))
        if output.records:
            tags.append(RunTag(tag_keys.fingerprints(evaluator), fingerprint_digest(output.records)))
        if output.expectations is not None:
            tags.append(RunTag(tag_keys.expectations(evaluator), tag_keys.EXPECTATIONS_PASSED if output.expectations["success"] else tag_keys.EXPECTATIONS_FAILED))
    while metrics or tags:  # MLflow's limits: 1,000 entities a batch, 100 of them tags
        client.log_batch(run_id, metrics=metrics[:900], tags=tags[:100])
        metrics, tags = metrics[900:], tags[100:]


def output_tables(output: EvaluatorOutput) -> dict[str, pd.DataFrame]:
    """An output's MLflow tables by artifact path: each breakdown
    (``tables/EVALUATOR.by_FIELD.json``: a row per group) and the per-sample table."""
    evaluator = output.evaluator
    tables: dict[str, pd.DataFrame] = {}
    if output.metrics:
        _, breakdowns = tracking.split_breakdowns(output.metrics)
        tables |= {f"tables/{evaluator}.{by}.json": tracking.breakdown_frame(by.removeprefix("by_"), groups) for by, groups in breakdowns.items()}
    if output.records and output.samples is not None:
        tables[f"tables/{evaluator}.json"] = output.samples
    return tables


def log_artifacts(client: MlflowClient, run_id: str, output: EvaluatorOutput) -> None:
    """The raw outputs, the summary and the GX result of an output (its tables:
    :func:`output_tables`)."""
    evaluator = output.evaluator
    if output.records and output.folder is not None:
        for path in sorted(output.folder.iterdir()):  # shards/ is the merged records' source: not logged twice
            if path.is_dir() and path.name != "shards":
                client.log_artifacts(run_id, str(path), artifact_path=f"evaluators/{evaluator}/{path.name}")
            elif path.is_file():
                client.log_artifact(run_id, str(path), artifact_path=f"evaluators/{evaluator}")
    entry = {k: v for k, v in output.summary.as_json().items() if k not in ("metrics", "error")}
    client.log_dict(run_id, {"entry": entry, "error": output.error}, f"evaluators/{evaluator}/run.json")
    if output.expectations is not None:
        client.log_dict(run_id, output.expectations, f"expectations/{evaluator}.json")


def claim_token(subject: VersionRef, claimed_at: str) -> str:
    """The run token of one claim's validation run (hashed: model names may hold quotes)."""
    return hashlib.sha256(f"{subject.model}\0{subject.version}\0{claimed_at}".encode()).hexdigest()[:32]


def ensure_validation_run(client: MlflowClient, claims: ClaimStore, subject: VersionRef) -> str:
    """The version's one validation run: the one the claim already names (a resumed flow),
    else one made for this claim, recorded in the claim before anything is logged to it.
    The run's token names the claim, so a flow that died between creating the run and
    recording it finds that run again instead of making a second."""
    claim = claims.get(subject)
    if claim is not None and claim.run_id:
        return claim.run_id
    experiment = tracking.experiment_id(client, tracking.validation_experiment(subject.model))
    token = claim_token(subject, claim.claimed_at.isoformat()) if claim is not None else None
    run_id = tracking.first_run_with_token(client, experiment, token) if token else None
    if run_id is None:
        tags = {tag_keys.KIND: tag_keys.RunKind.VALIDATION, tag_keys.MODEL: subject.model, tag_keys.VERSION: subject.version}
        run_id = tracking.create_run_once(client, experiment, str(subject), tags, token)
    claims.record_run(subject, run_id)
    client.set_model_version_tag(subject.model, subject.version, tag_keys.VALIDATION_RUN, run_id)
    return run_id


def link_validation_run(client: MlflowClient, subject: VersionRef, experiment: str, run_id: str) -> None:
    """The version's page in MLflow's UI names its registration run as its source; its
    description gets a link to the validation run (a line of its own, once, after what
    the training job wrote)."""
    line = f"{tracking.VALIDATION_LINK}[{run_id}](#/experiments/{experiment}/runs/{run_id})"
    description = client.get_model_version(subject.model, subject.version).description or ""
    if line not in description:
        client.update_model_version(subject.model, subject.version, description=f"{description.rstrip()}\n\n{line}".strip())


def write_decision_tags(client: MlflowClient, subject: VersionRef, run_id: str | None, decision: DecisionRecord) -> None:
    """The decision's tags on the version (and its run): ``vlgate.decision`` (promoted or
    rejected: fail closed), ``vlgate.outcome``, ``vlgate.reasons`` and the number of the
    record they show (``vlgate.decision_record``), always the latest judgement's; and its
    judged metrics as the version's headline tags (:func:`headline_metrics`, at the look
    they were measured at), replacing the last decision's."""
    _write_outcome_tags(client, subject, run_id, decision.outcome, decision.reasons, decision.sequence)
    if decision.checks:
        headline = headline_metrics(decision.checks, decision.look)
        stale = [key for key in client.get_model_version(subject.model, subject.version).tags if key.startswith(tag_keys.HEADLINE_METRIC_PREFIX) and key not in headline]
        for key in stale:
            client.delete_model_version_tag(subject.model, subject.version, key)
        for key, value in headline.items():
            client.set_model_version_tag(subject.model, subject.version, key, value)


def write_failure_tags(client: MlflowClient, subject: VersionRef, run_id: str | None, reason: str) -> None:
    """A validation that failed, on the version (and its run): could not judge, ``reason``
    its one reason; no decision record is made."""
    _write_outcome_tags(client, subject, run_id, Outcome.COULD_NOT_JUDGE, [reason], None)


def _write_outcome_tags(client: MlflowClient, subject: VersionRef, run_id: str | None, outcome: Outcome, reasons: list[str], record: int | None) -> None:
    label = outcome_label(outcome)
    tags = {tag_keys.DECISION: label, tag_keys.OUTCOME: outcome.value, tag_keys.REASONS: tracking.reasons_tag(reasons)}
    if record is not None:
        tags[tag_keys.DECISION_RECORD] = decision_file(record)
    for key, value in tags.items():
        client.set_model_version_tag(subject.model, subject.version, key, value)
        if run_id:
            client.set_tag(run_id, key, value)


def headline_metrics(checks: Sequence[Check], look: LookRecord | None = None) -> dict[str, str]:
    """The version's headline tags: each metric a floor, ceiling or comparison judged, over
    all items (per-category rules are in the record), as the candidate's value to four
    significant digits: ``vlgate.metric.lcm-mc/acc`` → ``0.8125`` (named as MLflow's metric is: ``genception/gc_at_3``).
    Measured at a look before the last (``look``), each value says so: ``1 (look 2 of 4)``,
    never read as one on the whole suite."""
    judged = (Rule.FLOOR, Rule.CEILING, Rule.REGRESSION, Rule.SUPERIORITY)
    prefix = tag_keys.HEADLINE_METRIC_PREFIX
    early = f" (look {look.index + 1} of {look.of})" if look is not None and look.index + 1 < look.of else ""
    return {f"{prefix}{tracking.mlflow_metric_name(check.metric)}": f"{check.candidate:.4g}{early}" for check in checks if check.rule in judged and check.category is None and check.candidate is not None}


def log_item_diffs(client: MlflowClient, model_name: str, run_id: str, candidate: dict[str, EvaluatorOutput], champion: dict[str, EvaluatorOutput] | None, champion_version: str | None) -> list[str]:
    """Each evaluator both versions ran under one protocol, compared item by item
    (``vlgate diff``'s comparison), logged to the run as an MLflow table
    ``item_diff/EVALUATOR-vs-vN.json`` (``mlflow.load_table`` reads it; one row per shared
    item and item score: ``score``, ``id``, ``category``, ``candidate``, ``champion``,
    ``change``), the champion's version and run as the run's tags. MLflow appends to a table
    that exists, and a table holds the two runs' fixed records: one already logged for that
    champion (a retried gate) is left as it is. Returns the files logged."""
    import pandas as pd

    from vlgate.evaluators.item_diff import compare_outputs

    if not champion or champion_version is None:
        return []
    champion_run = client.get_model_version(model_name, champion_version).tags.get(tag_keys.VALIDATION_RUN)
    existing = {entry.path for entry in client.list_artifacts(run_id, "item_diff")}
    logged = []
    diffs, _ = compare_outputs(candidate, champion)
    for evaluator, diff in diffs.items():
        artifact = f"item_diff/{evaluator}-vs-v{champion_version}.json"
        if artifact not in existing:
            rows = [comparison.items.assign(score=name) for name, comparison in diff.scores.items()]
            table = pd.concat(rows, ignore_index=True)[["score", "id", "category", "candidate", "champion", "change"]]
            client.log_table(run_id, data=table, artifact_file=artifact)
        logged.append(artifact)
    if logged:
        client.set_tag(run_id, tag_keys.ITEM_DIFF_CHAMPION, champion_version)
        if champion_run:
            client.set_tag(run_id, tag_keys.ITEM_DIFF_CHAMPION_RUN, champion_run)
    return logged


def version_outputs(client: MlflowClient, subject: VersionRef) -> dict[str, EvaluatorOutput]:
    """A version's outputs (metrics and records, each evaluator's parsed once), read back
    from its validation run; empty when it has none (every comparison then fails closed)."""
    run_id = client.get_model_version(subject.model, subject.version).tags.get(tag_keys.VALIDATION_RUN)
    return run_outputs(client, run_id) if run_id else {}


def judge_identity(request_id: str | None = None, person: str | None = None, verified: bool = False) -> Judge:
    """Who is judging: this process, its Prefect flow run (when one runs it) and its user, or
    the ``person`` who signs off (``verified``: an identity the deployment vouches for)."""
    import getpass

    from prefect.runtime import flow_run

    user = person
    if user is None:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # a container user without a passwd entry
            user = None
    return Judge(process=f"{socket.gethostname()} pid {os.getpid()}", flow_run_id=str(flow_run.id) if flow_run.id else None, user=user, request_id=request_id, verified=verified)


def run_outputs(client: MlflowClient, run_id: str) -> dict[str, EvaluatorOutput]:
    """Every evaluator's output as a validation run recorded it: its records and metrics,
    whether its expectations passed (the run's ``vlgate.expectations.*`` tags), and the
    evaluators that failed (``run.json``'s error), so that a run judged again is judged
    on what the flow judged."""
    import json

    tags = client.get_run(run_id).data.tags
    outputs: dict[str, EvaluatorOutput] = {}
    with tempfile.TemporaryDirectory() as scratch:
        try:
            local = Path(client.download_artifacts(run_id, "evaluators", scratch))
        except Exception:  # a run that logged no evaluator at all
            return outputs
        tracking.define_run_tasks(client, run_id, [p.name for p in local.iterdir() if p.is_dir()])
        for folder in sorted(p for p in local.iterdir() if p.is_dir() and p.name in registry.names()):
            error = json.loads((folder / "run.json").read_text()).get("error") if (folder / "run.json").is_file() else None
            if error:
                outputs[folder.name] = EvaluatorOutput.failed(folder.name, error)
            elif (folder / "metrics.json").is_file() and (folder / "records.jsonl").is_file():
                passed = tags.get(tag_keys.expectations(folder.name)) == tag_keys.EXPECTATIONS_PASSED
                output = EvaluatorOutput.from_folder(folder.name, folder, expectations_passed=passed)
                outputs[folder.name] = dataclasses.replace(output, folder=None)  # the download is temporary
    return outputs


#: MLflow's tag holding a run's description (the run page's "Description")
RUN_NOTE = "mlflow.note.content"


def run_note(record: DecisionRecord, items_saved: float | None, report_logged: bool, run: tuple[str, str] | None = None) -> str:
    """The validation run's description in MLflow's UI (markdown): the latest decision, its
    first reasons, the items a sequential design saved, and where the report is: with
    ``run`` (its experiment and run ids) a link that opens it in the run's artifact view."""
    judged = f"record {record.sequence}, {record.kind.value}" if record.sequence and record.kind else "not recorded"
    against = f"v{record.champion_before}" if record.champion_before else "no champion"
    lines = [f"**{record.outcome.value}** ({judged}) against {against}; champion after it: {'v' + record.champion_after if record.champion_after else 'none'}."]
    shown = record.reasons[:5]
    if shown and not record.promote:
        lines += ["", "Reasons:", *(f"- {tag_keys.cut(reason)}" for reason in shown)]
        if len(record.reasons) > len(shown):
            lines.append(f"- … {len(record.reasons) - len(shown)} more in `decisions/{record.sequence or 1:04d}.json`")
    if items_saved is not None:
        lines += ["", f"A sequential design saved {items_saved:.0%} of the item evaluations."]
    if report_logged:
        where = f"[report/report.html]({tracking.run_page_path(*run)}/artifactPath/report/report.html)" if run is not None else "`report/report.html`"
        lines += ["", f"The report: {where} (the run's artifacts)."]
    return "\n".join(lines)


def data_digest(data: str) -> str:
    """A data set's digest for MLflow's dataset inputs: its files' names and sizes (a folder
    or a file), or the reference itself where it is not a local path. 16 hex digits."""
    path = Path(data)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
    listing = [(str(p.relative_to(path) if path.is_dir() else p.name), p.stat().st_size) for p in files]
    return hashlib.sha256(repr(listing or data).encode()).hexdigest()[:16]


def log_version_model(client: MlflowClient, run_id: str, version: ModelVersion) -> None:
    """The logged model the version was registered from as the run's model input: MLflow's
    run page then lists the version under "Registered models" (through the logged model's
    ``mlflow.modelVersions``, written here where the store was reached without the server).
    A version registered from a bare artifact path has no logged model, and no such link."""
    from mlflow.entities import LoggedModelInput

    model_id = tracking.version_logged_model(version)
    if model_id is None:
        return
    tracking.name_registered_version(client, model_id, version.name, str(version.version))
    client.log_inputs(run_id, models=[LoggedModelInput(model_id)])


def log_suite_datasets(client: MlflowClient, run_id: str, suite: Suite, context: str = "validation") -> None:
    """Each evaluator's data set as an input of the run (the run page's "Datasets"), named
    ``EVALUATOR: FOLDER``, its source the data path, tagged with ``context`` (a validation,
    a drift check's reference or batch)."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    inputs = []
    for name, settings in suite.evaluators.items():
        data = str(settings.data)
        dataset = Dataset(name=f"{name}: {Path(data).name or data}", digest=data_digest(data), source_type="local", source=json.dumps({"uri": data}))
        inputs.append(DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)]))
    # MLflow's store looks a data set up by (experiment, name, digest) and inserts it when
    # missing: two versions of one model validated at once race to insert the same one, and
    # the loser is refused. Asked again, the store finds the winner's row.
    for attempt in range(DATASET_INSERT_ATTEMPTS):
        try:
            client.log_inputs(run_id, datasets=inputs)
            return
        except Exception as error:
            if attempt + 1 == DATASET_INSERT_ATTEMPTS or not lost_insert_race(error):
                raise


#: How many times a data set's input is logged when a concurrent insert of the same data set wins.
DATASET_INSERT_ATTEMPTS = 3

#: How SQLite, PostgreSQL and MySQL say an insert lost to a concurrent one of the same key.
_UNIQUE_VIOLATIONS = ("UNIQUE constraint failed", "duplicate key value violates unique constraint", "Duplicate entry")


def lost_insert_race(error: BaseException) -> bool:
    """Whether a tracking store refused a write because a concurrent one inserted the same
    unique key first (MLflow's REST answer carries the database's own message)."""
    return any(phrase in str(error) for phrase in _UNIQUE_VIOLATIONS)
