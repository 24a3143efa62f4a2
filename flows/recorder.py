"""Every MLflow write of one validation that the flow makes itself, in one owner: the run
made or continued and linked to its version, its set-up (the compare view's params, where
it runs, the configuration files, the plan, the data sets, the version's logged model),
the model check's stamp, a sequential validation's looks, the power plan, and its end (the
run finished, its description). The flow's steps that write on their own (``log_look`` and
``log_outputs``, retried tasks; the judgement, under the gate lock) take the recorder's
run id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import get_run_logger

from vlgate import tag_keys, tracking
from vlgate.decisions import DecisionRecord, LookSummary, SequentialRecord
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.flows.model_check import check_candidate, stamp
from vlgate.flows.plan import ValidationPlan
from vlgate.flows.recording import RUN_NOTE, ensure_validation_run, link_validation_run, log_suite_datasets, log_version_model, run_note, run_outputs, where_it_runs

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

    from vlgate.registry_hooks.claims import ClaimStore


@dataclass(frozen=True)
class ValidationRecorder:
    """One validation's run (``run_id`` in ``experiment_id``) and what the flow writes to it."""

    client: MlflowClient
    plan: ValidationPlan
    run_id: str
    experiment_id: str

    @classmethod
    def begin(cls, client: MlflowClient, claims: ClaimStore, plan: ValidationPlan, registered: ModelVersion) -> ValidationRecorder:
        """The version's validation run, made once (or continued: a resumed flow's), linked
        to the version, with where it runs; a new run also gets the compare view's axes as
        params (what differs between validations; paths and digests are tags), the
        configuration files and the plan as artifacts, the data sets and the version's
        logged model as inputs. Params cannot be overwritten: a resumed run keeps its own."""
        from mlflow.entities import Param, RunTag

        suite = plan.suite
        run_id = ensure_validation_run(client, claims, plan.subject)
        run = client.get_run(run_id)
        link_validation_run(client, plan.subject, run.info.experiment_id, run_id)  # also when a resumed flow made the run
        tags = where_it_runs()  # a resumed validation overwrites them: the last attempt's
        params: dict[str, str] = {}
        if not run.data.params:
            params = {"suite": suite.name, "backend": suite.backend, "evaluators": ",".join(suite.evaluators), "policy": plan.policy_path.name, "model_uri": plan.model_uri}
            params |= {f"protocol.{name}": protocol for name, protocol in suite.protocols().items()}
            tags |= {tag_keys.SUITE_PATH: str(plan.suite_path), tag_keys.POLICY_PATH: str(plan.policy_path)}
        client.log_batch(run_id, params=[Param(key, value) for key, value in params.items()], tags=[RunTag(key, value) for key, value in tags.items()])
        if params:
            client.log_artifact(run_id, str(plan.policy_path), artifact_path="config")
            client.log_artifact(run_id, str(plan.suite_path), artifact_path="config")
            client.log_dict(run_id, plan.as_logged(), "config/plan.json")
            log_suite_datasets(client, run_id, suite)
            log_version_model(client, run_id, registered)
        return cls(client, plan, run_id, run.info.experiment_id)

    def model_check(self, home: Path) -> None:
        """Stamp the run with whether vlgate's fast paths are exact on these weights
        (``flows/model_check.py``); a check that fails is stamped so and never stops the flow."""
        model_uri = self.plan.model_uri
        try:
            result = check_candidate(model_uri, self.plan.suite, str(home / "model-cache"), str(home / "model-checks"))
        except Exception as error:  # the numbers were computed already; the stamp says it is missing
            get_run_logger().warning("model check of %s failed: %s", model_uri, error)
            self.client.set_tag(self.run_id, tag_keys.MODEL_CHECK, tag_keys.cut(f"failed: {type(error).__name__}: {error}"))
            return
        if result is None:
            self.client.set_tag(self.run_id, tag_keys.MODEL_CHECK, "not checked: the model is served over HTTP")
            return
        self.client.log_dict(self.run_id, dict(result.to_dict()), "model_check.json")
        self.client.set_tag(self.run_id, tag_keys.MODEL_CHECK, stamp(result))

    def looks(self, looks: list[LookSummary], totals: dict[str, int]) -> SequentialRecord:
        """A sequential validation's looks on its run (``sequential.json``, the items evaluated
        and in all per evaluator and the share saved as metrics, the look it stopped at as a
        tag, which ``vlgate gate`` judges it at again) and in brief on the version. ``totals``:
        the suite's items per evaluator."""
        from mlflow.entities import Metric

        client, run_id = self.client, self.run_id
        record = SequentialRecord(looks=looks, items_evaluated=looks[-1].items, items_total={name: totals.get(name, n) for name, n in looks[-1].items.items()})
        stopped = record.stopped_at
        now = int(time.time() * 1000)
        metrics = [Metric("sequential/saved_fraction", record.saved_fraction, now, 0), Metric("sequential/stopped_at_look", stopped.index + 1, now, 0)]
        metrics += [Metric(f"sequential/items_evaluated/{name}", n, now, 0) for name, n in record.items_evaluated.items()]
        metrics += [Metric(f"sequential/items_total/{name}", n, now, 0) for name, n in record.items_total.items()]
        client.log_batch(run_id, metrics=metrics)
        client.log_dict(run_id, record.as_json(), "sequential.json")
        brief = f"look {stopped.index + 1} of {stopped.of} ({stopped.fraction:.0%} of the items): {looks[-1].outcome}; {record.saved_fraction:.0%} of item evaluations saved"
        client.set_tag(run_id, tag_keys.SEQUENTIAL, brief)
        client.set_tag(run_id, tag_keys.LOOK, tag_keys.look_tag(stopped.index, stopped.of))
        client.set_model_version_tag(self.plan.model, self.plan.version, tag_keys.SEQUENTIAL, brief)
        return record

    def power_plan(self, outputs: dict[str, EvaluatorOutput], champion_version: str | None, totals: dict[str, int]) -> None:
        """What each rule of the policy can decide on the suite (``vlgate plan``'s table,
        ``power.json`` on the run, shown in the report), its spreads measured on the champion
        the version was judged against, paired with this version; assumed without one. A plan
        that cannot be made is a warning: the decision stands without it."""
        from vlgate.gate.power import MeasuredOn, plan_power

        plan = self.plan
        try:
            champion = None
            if champion_version is not None and champion_version != plan.version:
                champion_run = self.client.get_model_version(plan.model, champion_version).tags.get(tag_keys.VALIDATION_RUN)
                champion = run_outputs(self.client, champion_run) if champion_run else None
            measured = MeasuredOn(champion_version if champion else None, champion) if champion is not None else None
            power = plan_power(plan.model, plan.policy, totals, measured, MeasuredOn(plan.version, outputs), resamples=min(plan.policy.resamples, 500))
            self.client.log_dict(self.run_id, power.model_dump(mode="json"), "power.json")
        except Exception as error:
            if tracking.transient(error):
                raise
            get_run_logger().warning("power plan of %s v%s failed: %s", plan.model, plan.version, error)

    def finished(self) -> None:
        self.client.set_terminated(self.run_id, "FINISHED")

    def report_failed(self, error: Exception) -> None:
        """The report could not be made: the run says why (the decision stands without it)."""
        self.client.set_tag(self.run_id, tag_keys.REPORT, tag_keys.cut(f"failed: {type(error).__name__}: {error}"))

    def described(self, decision: DecisionRecord, saved: float | None, report_logged: bool) -> None:
        """The run's description (MLflow's run page): the decision, what the looks saved, the report."""
        self.client.set_tag(self.run_id, RUN_NOTE, run_note(decision, saved, report_logged=report_logged, run=(self.experiment_id, self.run_id)))
