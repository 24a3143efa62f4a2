"""The validation flow (SPEC §3, issue 5): a registered version is evaluated, its outputs
are validated, correlated with the model's earlier versions, logged to one MLflow run,
and gated.

    validate_model_version(model, version):
        run the suite's evaluators on the version        (subflow: shard tasks with retries and cached results, merged)
        check every evaluator's records and metrics      (Great Expectations)
        log everything to the version's validation run   (MLflow; retried while the server is away)
        correlate label-free with labelled metrics       (across all validated versions; P_LC vs champion)
        judge against the policy and the champion        (flows/gate.py), move `champion` if it passes
        publish the report                               (dashboards/: plots, HTML page, leaderboard; logged to the run)

A restarted flow resumes: the claim row keeps the MLflow run id (the same run is
continued), finished evaluators come back from Prefect's result cache, and an
interrupted evaluator recomputes only what its fingerprinted record store lacks.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.tasks import exponential_backoff

from vlgate.flows import tracking
from vlgate.flows.gate import EvaluatorResult, GatePolicy, decide, records_frame
from vlgate.flows.settings import ServiceConfig, prepare_environment
from vlgate.registry_hooks.claims import ClaimStore

#: Per-evaluator label-free metric → the labelled metrics it is correlated with across
#: versions (as the papers' tables do across models).
CORRELATED = {
    "lcm-mc/lcm": ["lcm-mc/acc", "lcm-mc/j_acc", "lcm-mc/f1"],
    "lcm-nb/lcm": ["lcm-nb/acc", "lcm-nb/g_acc", "lcm-nb/j_acc", "lcm-nb/f1"],
    "genception/gc@3": ["lcm-mc/acc"],
    "decc/reliable_rate/multi": ["decc/acc"],
}
#: Evaluators whose per-sample P_LC is correlated with the champion's on shared samples.
PER_SAMPLE_P_LC = ("lcm-mc", "lcm-nb")


class ValidationError(RuntimeError):
    """The flow cannot judge this version at all (no config, no such version)."""


# --- evaluation -----------------------------------------------------------------------


def _tree_state(path: Path) -> list[tuple[str, int, int]]:
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [(str(p.relative_to(path.parent)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def evaluator_cache_key(_context, parameters: dict[str, Any]) -> str:
    """A registered version never changes, so (model, version, evaluator, shard, suite file,
    the data files' names/sizes/times, vlgate's version, the output folder — results are
    files there) identifies a shard's result."""
    from vlgate import __version__
    from vlgate.evaluators.runners.suite import Suite

    suite_path = Path(parameters["suite_path"])
    spec = Suite.from_file(suite_path).evaluators.named()[parameters["evaluator"]]
    material = [
        parameters["model_name"],
        str(parameters["version"]),
        parameters["evaluator"],
        parameters["shard"],
        parameters["n_shards"],
        suite_path.read_bytes().hex(),
        _tree_state(spec.data),
        __version__,
        parameters["out"],
    ]
    return "vlgate-evaluate-" + hashlib.sha256(json.dumps(material).encode()).hexdigest()


@task(
    name="evaluate-shard",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
    retry_jitter_factor=0.5,
    cache_key_fn=evaluator_cache_key,
    persist_result=True,
    result_serializer="json",
)
def evaluate_shard(model_name: str, version: str, model_uri: str, suite_path: str, evaluator: str, shard: int, n_shards: int, out: str, cache_dir: str) -> dict[str, Any]:
    """One shard of one evaluator on one version; raises (so Prefect retries) when it
    fails. Records are written as they complete, so a retry picks up where it stopped."""
    from vlgate.evaluators.runners.suite import Suite, run_evaluator_shard

    return run_evaluator_shard(model_uri, Suite.from_file(suite_path), Path(out), evaluator, shard, n_shards, cache_dir=Path(cache_dir))


@task(name="merge-shards", retries=1)
def merge_evaluator(suite_path: str, evaluator: str, out: str, shards: list[dict[str, Any]]) -> dict[str, Any]:
    from vlgate.evaluators.runners.suite import Suite, merge_shards

    return merge_shards(Suite.from_file(suite_path), Path(out), evaluator, shards)


@flow(name="vlgate-evaluate")
def evaluate_version(model_name: str, version: str, suite_path: str, out: str, cache_dir: str, n_shards: int = 1) -> dict[str, dict[str, Any]]:
    """Every evaluator of the suite on the version, each split into ``n_shards`` tasks on
    this flow's task runner (threads, or a Dask cluster) and merged back into one result.
    An evaluator that still fails after its retries is an ``error`` entry."""
    from vlgate.evaluators.runners.suite import Suite

    model_uri = f"models:/{model_name}/{version}"
    merged = {}
    for name in Suite.from_file(suite_path).evaluators.named():
        shards = [evaluate_shard.submit(model_name, version, model_uri, suite_path, name, shard, n_shards, out, cache_dir) for shard in range(n_shards)]
        merged[name] = merge_evaluator.submit(suite_path, name, out, shards)
    entries: dict[str, dict[str, Any]] = {}
    for name, future in merged.items():
        try:
            entries[name] = future.result()
        except Exception as error:  # after its retries: recorded, judged as missing (fail closed)
            get_run_logger().warning("evaluator %s failed: %s", name, error)
            entries[name] = {"error": f"{type(error).__name__}: {error}"}
    return entries


def load_records(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@dataclass
class EvaluatorOutcome:
    """What the flow knows about one evaluator after running and checking it."""

    result: EvaluatorResult
    entry: dict[str, Any]
    expectations: dict[str, Any] | None = None


def check_evaluator(evaluator: str, entry: dict[str, Any], folder: Path) -> EvaluatorOutcome:
    """Great Expectations on the records and metrics: rows = the data set's items, ids
    unique, probabilities in range, the label-free metrics present. If the check itself
    cannot run, the evaluator's results are kept and its expectations count as failed."""
    from vlgate.evaluators.records import read_jsonl
    from vlgate.evaluators.schemas import validate
    from vlgate.evaluators.scoring import per_sample_frame

    records = load_records(folder / "records.jsonl")
    result = EvaluatorResult(metrics=entry["metrics"], records=records, expectations_passed=False)
    try:
        from vlgate.flows.expectations import validate_evaluator_output

        frame = per_sample_frame(validate(evaluator, read_jsonl(folder / "records.jsonl"), skip_invalid=True))
        report = validate_evaluator_output(evaluator, frame, entry["metrics"], expected_rows=entry["n_items"] + entry.get("n_load_errors", 0))
    except Exception as error:  # fail closed, keep what was computed
        return EvaluatorOutcome(result=result, entry=entry, expectations={"evaluator": evaluator, "success": False, "error": f"{type(error).__name__}: {error}"})
    result.expectations_passed = report.success
    return EvaluatorOutcome(result=result, entry=entry, expectations=report.as_dict())


# --- MLflow ---------------------------------------------------------------------------


def fingerprint_digest(records: list[dict[str, Any]]) -> str:
    return hashlib.sha256("\n".join(sorted(str(r.get("fingerprint")) for r in records)).encode()).hexdigest()[:16]


@task(name="log-evaluator", retries=5, retry_delay_seconds=exponential_backoff(backoff_factor=2), retry_jitter_factor=0.5)
def log_evaluator(run_id: str, evaluator: str, outcome: EvaluatorOutcome, folder: str) -> None:
    """Metrics ``EVALUATOR/METRIC``, the per-sample table, the raw outputs, the GX result
    and the fingerprints' digest; retried while the tracking server is unreachable."""
    from mlflow.entities import Metric

    from vlgate.evaluators.records import read_jsonl
    from vlgate.evaluators.schemas import validate
    from vlgate.evaluators.scoring import per_sample_frame

    client = tracking.connect()
    now = int(time.time() * 1000)
    result = outcome.result
    if result.metrics:
        metrics = [Metric(key, value, now, 0) for key, value in tracking.flatten_metrics(result.metrics, evaluator)]
        for start in range(0, len(metrics), 500):
            client.log_batch(run_id, metrics=metrics[start : start + 500])
    if result.records:
        client.log_param(run_id, f"{evaluator}/fingerprints", fingerprint_digest(result.records))
        frame = per_sample_frame(validate(evaluator, read_jsonl(Path(folder) / "records.jsonl"), skip_invalid=True))
        client.log_table(run_id, data=frame, artifact_file=f"tables/{evaluator}.json")
        for path in sorted(Path(folder).iterdir()):  # shards/ is the merged records' source: not logged twice
            if path.is_dir() and path.name != "shards":
                client.log_artifacts(run_id, str(path), artifact_path=f"evaluators/{evaluator}/{path.name}")
            elif path.is_file():
                client.log_artifact(run_id, str(path), artifact_path=f"evaluators/{evaluator}")
    client.log_dict(run_id, {"entry": {k: v for k, v in outcome.entry.items() if k != "metrics"}, "error": result.error}, f"evaluators/{evaluator}/run.json")
    if outcome.expectations is not None:
        client.log_dict(run_id, outcome.expectations, f"expectations/{evaluator}.json")
        client.set_tag(run_id, f"vlgate.expectations.{evaluator}", "passed" if outcome.expectations["success"] else "failed")


def ensure_validation_run(client, claims: ClaimStore, model_name: str, version: str) -> str:
    """The version's one validation run: the one the claim already names (a resumed flow),
    else one made for this claim, recorded in the claim before anything is logged to it.
    The run's token names the claim, so a flow that died between creating the run and
    recording it finds that run again instead of making a second."""
    claim = claims.get(model_name, version)
    if claim is not None and claim.run_id:
        return claim.run_id
    experiment = tracking.experiment_id(client, tracking.validation_experiment(model_name))
    token = claim_token(model_name, version, claim.claimed_at.isoformat()) if claim is not None else None
    run_id = tracking.first_run_with_token(client, experiment, token) if token else None
    if run_id is None:
        tags = {"vlgate.kind": "validation", "vlgate.model": model_name, "vlgate.version": str(version)}
        run_id = tracking.create_run_once(client, experiment, f"{model_name} v{version}", tags, token)
    claims.update(model_name, version, run_id=run_id)
    client.set_model_version_tag(model_name, version, tracking.TAG_RUN, run_id)
    return run_id


def claim_token(model_name: str, version: str, claimed_at: str) -> str:
    """The run token of one claim's validation run (hashed: model names may hold quotes)."""
    return hashlib.sha256(f"{model_name}\0{version}\0{claimed_at}".encode()).hexdigest()[:32]


# --- correlations ---------------------------------------------------------------------


def version_table(client, model_name: str, include_run: str | None = None):
    """One row per validated version of the model (its latest validation run), columns
    the logged metrics with their SPEC names (``genception/gc@3``)."""
    import pandas as pd

    rows = {version: {tracking.logged_metric_name(k): v for k, v in run.data.metrics.items()} for version, run in tracking.validation_runs(client, model_name, include_run).items()}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "version"
    return frame


def correlate_across_versions(table) -> dict[str, dict[str, Any]]:
    """Pearson/Spearman/Kendall of each label-free metric against its labelled metrics
    over the versions that have both (SPEC §2.6); ``n`` says how many."""
    from vlgate.evaluators.metrics.correlation import correlations

    result: dict[str, dict[str, Any]] = {}
    for x, ys in CORRELATED.items():
        for y in ys:
            if x not in table or y not in table:
                continue
            both = table[[x, y]].dropna()
            result[f"{x}~{y}"] = correlations(both[x].to_numpy(float), both[y].to_numpy(float)) if len(both) >= 3 else {"n": len(both)}
    return result


def correlate_with_champion(candidate: dict[str, EvaluatorOutcome], champion: dict[str, EvaluatorResult] | None) -> dict[str, dict[str, Any]]:
    """The candidate's per-sample P_LC against the champion's on their shared samples."""
    from vlgate.evaluators.metrics.correlation import paired_sample_correlations

    result: dict[str, dict[str, Any]] = {}
    for evaluator in PER_SAMPLE_P_LC:
        mine, theirs = candidate.get(evaluator), (champion or {}).get(evaluator)
        if mine is None or not mine.result.records or theirs is None or not theirs.records:
            continue
        frames = [records_frame(evaluator, mine.result.records), records_frame(evaluator, theirs.records)]
        result[f"{evaluator}/p_lc~champion"] = paired_sample_correlations(frames[0], frames[1], "p_lc")
    return result


def correlation_metrics(correlations: dict[str, dict[str, Any]]) -> dict[str, float]:
    out = {}
    for pair, values in correlations.items():
        x, _, y = pair.partition("~")
        for method in ("pearson", "spearman", "kendall"):
            if values.get(method) is not None:
                out[tracking.mlflow_metric_name(f"correlation/{x.replace('/', '.')}_vs_{y.replace('/', '.')}/{method}")] = float(values[method])
    return out


# --- gate -----------------------------------------------------------------------------


def log_metric_dict(client, run_id: str, metrics: dict[str, float]) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    if metrics:
        client.log_batch(run_id, metrics=[Metric(key, value, now, 0) for key, value in metrics.items()])


def write_decision_tags(client, model_name: str, version: str, run_id: str | None, label: str, reasons: list[str]) -> None:
    """``vlgate.decision`` and ``vlgate.reasons`` on the version (and its run): always written."""
    for key, value in {tracking.TAG_DECISION: label, tracking.TAG_REASONS: tracking.reasons_tag(reasons)}.items():
        client.set_model_version_tag(model_name, version, key, value)
        if run_id:
            client.set_tag(run_id, key, value)


def champion_results(client, model_name: str, exclude_version: str) -> tuple[str | None, dict[str, EvaluatorResult] | None]:
    """The champion's metrics and per-sample records, read back from its validation run."""
    version = tracking.champion_version(client, model_name)
    if version is None or version == str(exclude_version):
        return version, None
    run_id = client.get_model_version(model_name, version).tags.get(tracking.TAG_RUN)
    if not run_id:
        return version, {}
    results: dict[str, EvaluatorResult] = {}
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(client.download_artifacts(run_id, "evaluators", scratch))
        for folder in sorted(p for p in local.iterdir() if p.is_dir()):
            metrics_path, records_path = folder / "metrics.json", folder / "records.jsonl"
            if metrics_path.is_file() and records_path.is_file():
                results[folder.name] = EvaluatorResult(metrics=json.loads(metrics_path.read_text()), records=load_records(records_path))
    return version, results


@task(name="gate", retries=3, retry_delay_seconds=exponential_backoff(backoff_factor=2))
def judge_and_promote(model_name: str, version: str, run_id: str, policy_path: str, outcomes: dict[str, EvaluatorOutcome]) -> dict[str, Any]:
    """One gate decision per model at a time (so no candidate is judged against a champion
    that another candidate is replacing); tags always written, alias moved on promotion."""
    client = tracking.connect()
    claims = ClaimStore.for_home(prepare_environment())
    with claims.lock(f"gate:{model_name}"):
        champion_version, champion = champion_results(client, model_name, version)
        decision = decide(GatePolicy.from_file(policy_path), {name: o.result for name, o in outcomes.items()}, champion)
        per_sample = correlate_with_champion(outcomes, champion)
        payload = decision.as_dict() | {"champion_before": champion_version, "per_sample_correlations": per_sample}
        client.log_dict(run_id, payload, "decision.json")
        log_metric_dict(client, run_id, correlation_metrics(per_sample))
        label = "promoted" if decision.promote else "rejected"
        write_decision_tags(client, model_name, version, run_id, label, decision.reasons)
        if decision.promote:
            client.set_registered_model_alias(model_name, tracking.CHAMPION, version)
    return payload | {"decision": label}


# --- report ---------------------------------------------------------------------------


@task(name="report", retries=2, retry_delay_seconds=exponential_backoff(backoff_factor=2))
def publish_report(model_name: str, version: str) -> str:
    """The version's HTML report and plots (logged to its run under ``report/``) and the
    model's leaderboard, also kept under ``$VLGATE_HOME/reports/MODEL/``."""
    from vlgate.dashboards.report import write_reports

    written = write_reports(tracking.connect(), model_name, [version], prepare_environment() / "reports" / model_name)
    return str(written.versions[version])


# --- the flow -------------------------------------------------------------------------


@flow(name="vlgate-validate", log_prints=True)
def validate_model_version(model_name: str, version: str) -> dict[str, Any]:
    """Validate one registered version and gate it; the claim row must exist (the
    registry hooks create it) or is created here for a manual run."""
    home = prepare_environment()
    claims = ClaimStore.for_home(home)
    if claims.get(model_name, version) is None:
        claims.claim(model_name, version, via="manual")
    claims.update(model_name, version, state="running", renew=True)
    try:
        summary = _validate(home, claims, model_name, str(version))
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        claims.update(model_name, version, state="failed", detail=message)
        record_failure(model_name, str(version), claims, message)
        raise
    claims.update(model_name, version, state="done", detail=summary["decision"])
    return summary


def record_failure(model_name: str, version: str, claims: ClaimStore, message: str) -> None:
    """Fail closed, visibly: the version is tagged rejected with the error as its reason
    (best effort: the registry itself may be what failed)."""
    try:
        client = tracking.connect()
        claim = claims.get(model_name, version)
        run_id = claim.run_id if claim else None
        write_decision_tags(client, model_name, version, run_id, "rejected", [f"validation failed: {message} (fail closed)"])
        if run_id:
            client.set_terminated(run_id, "FAILED")
    except Exception as error:  # the flow's own exception is the one to surface
        get_run_logger().warning("could not record the failure of %s v%s in MLflow: %s", model_name, version, error)


def _validate(home: Path, claims: ClaimStore, model_name: str, version: str) -> dict[str, Any]:
    logger = get_run_logger()
    service_config = ServiceConfig.load(home)
    config = service_config.for_model(model_name)
    if config is None:
        raise ValidationError(f"registered model {model_name!r} has no suite and policy in {home / 'vlgate.yaml'} (models: or default:)")
    client = tracking.connect(home)
    client.get_model_version(model_name, version)  # fails clearly for a version that does not exist
    run_id = ensure_validation_run(client, claims, model_name, version)
    from mlflow.entities import Param

    from vlgate.evaluators.runners.suite import Suite

    suite = Suite.from_file(config.suite)
    if not client.get_run(run_id).data.params:  # a resumed run has them already; params cannot be overwritten
        params = {"suite": suite.name, "suite_path": str(config.suite), "policy_path": str(config.policy), "model_uri": f"models:/{model_name}/{version}"}
        client.log_batch(run_id, params=[Param(key, value) for key, value in params.items()])
        client.log_artifact(run_id, str(config.policy), artifact_path="config")
        client.log_artifact(run_id, str(config.suite), artifact_path="config")
    out = home / "validations" / model_name / version
    # evaluation runs as a subflow so that its task runner comes from vlgate.yaml, for a
    # run started here and for one a Prefect worker starts from the deployment alike
    evaluation = service_config.evaluation
    entries = evaluate_version.with_options(task_runner=evaluation.task_runner())(
        model_name, version, str(config.suite), str(out), str(home / "model-cache"), evaluation.shards
    )
    outcomes: dict[str, EvaluatorOutcome] = {}
    for name, entry in entries.items():
        if "error" in entry:
            outcome = EvaluatorOutcome(result=EvaluatorResult(error=entry["error"]), entry={})
        else:
            outcome = check_evaluator(name, entry, out / name)
        outcomes[name] = outcome
        log_evaluator(run_id, name, outcome, str(out / name))
    table = version_table(client, model_name, include_run=run_id)
    across = correlate_across_versions(table)
    client.log_dict(run_id, across, "correlations.json")
    log_metric_dict(client, run_id, correlation_metrics(across))
    decision = judge_and_promote(model_name, version, run_id, str(config.policy), outcomes)
    client.set_terminated(run_id, "FINISHED")
    logger.info("%s v%s: %s", model_name, version, decision["decision"])
    try:  # the decision stands without its report: a failure is recorded, not raised
        report = publish_report(model_name, version)
    except Exception as error:
        logger.warning("report of %s v%s failed: %s", model_name, version, error)
        client.set_tag(run_id, "vlgate.report", f"failed: {type(error).__name__}: {error}"[:5000])
        report = None
    return {"model": model_name, "version": version, "run_id": run_id, "decision": decision["decision"], "reasons": decision["reasons"], "correlations": across, "report": report}
