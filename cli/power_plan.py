"""``vlgate plan MODEL``'s plan read from MLflow, and how it is shown (``gate/power.py`` computes it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vlgate.gate.power import ESTIMATE_ITSELF, MeasuredOn, plan_power
from vlgate.power_plan import PowerPlan
from vlgate.versions import VersionRef

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
    from rich.table import Table

    from vlgate.flows.settings import ModelConfig


def configured_power_plan(client: MlflowClient, model: str, config: ModelConfig) -> PowerPlan:
    """The plan of ``model`` under its configuration (``flows/settings.py``'s ModelConfig):
    its suite's items, its champion's records and those of the version validated last
    before the champion, read from MLflow. ValueError (the file and what is wrong) for a
    suite or policy that does not load or data that cannot be counted."""
    from vlgate import tracking
    from vlgate.evaluators.running.suite import count_items
    from vlgate.flows.recording import run_outputs, version_outputs
    from vlgate.flows.settings import read_model_config

    suite, policy = read_model_config(config)
    try:
        items = count_items(suite, policy.evaluators())
    except (OSError, ValueError) as error:
        raise ValueError(f"suite {config.suite}: {error}") from None
    champion_version = tracking.champion_version(client, model)
    champion = version_outputs(client, VersionRef(model=model, version=champion_version)) if champion_version else None
    baseline_version, baseline = None, None
    if champion_version is not None:  # the version validated last before the champion: the paired spread's other side
        runs = tracking.validation_runs(client, model)
        earlier = [int(v) for v in runs if v.isdigit() and int(v) < int(champion_version)]
        if earlier:
            baseline_version = str(max(earlier))
            baseline = run_outputs(client, runs[baseline_version].info.run_id)
    measured = MeasuredOn(champion_version, champion) if champion else None
    return plan_power(model, policy, items, measured, MeasuredOn(baseline_version, baseline) if baseline is not None else None)


def _shown(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def plan_table(plan: PowerPlan) -> Table:
    """The plan as a rich table, a row per rule (the warnings are printed under it)."""
    from rich import box
    from rich.table import Table

    based_on = f"champion v{plan.champion}" + (f", paired with v{plan.baseline}" if plan.baseline else "") if plan.champion else "no champion: spreads assumed"
    table = Table(title=f"{plan.model}: what each rule can decide ({plan.power:.0%} power, α = {plan.alpha:g}; {based_on})", box=box.SIMPLE_HEAD)
    for column in ("check", "items", "spread", "level", "margin", "detectable", "items needed", ""):
        table.add_column(column, justify="left" if column in ("check", "") else "right")
    for rule in plan.rules:
        level = "estimate" if rule.level == ESTIMATE_ITSELF else f"{rule.level:.3g}"
        needed = "—" if rule.items_needed is None else f"{rule.items_needed:,}"
        table.add_row(rule.check, "—" if rule.items is None else f"{rule.items:,}", _shown(rule.spread, 3), level, _shown(rule.margin), _shown(rule.detectable), needed, "[bold red]warning[/]" if rule.warning else "ok")
    return table
