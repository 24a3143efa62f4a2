"""The model check in the validation flow and on the command line: whether vlgate's fast
paths are exact on the candidate (``evaluators/running/model_check.py`` runs it).

The flow checks each model digest once (per engine and batch size): the result is kept in
``$VLGATE_HOME/model-checks`` under them, logged with every validation run of those weights as
``model_check.json``, and stamped on the run as the tag ``vlgate.model_check`` (``exact``,
or ``not exact: PATH, ...``), which the report shows beside the decision. The stamp does
not move the decision: a path that is not exact on a model is turned off by the backend
itself where it can be (shared prefixes), and the stamp says where it could not. The one
exception is the engine itself: a suite scored by vLLM is checked before any evaluator runs,
and weights vLLM does not score exactly are not evaluated at all (:func:`engine_problem`;
the version fails closed with that one line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from vlgate.evaluators.running.model_check import OTHER_ENGINE, ModelCheck

if TYPE_CHECKING:
    from vlgate.evaluators.running.suite import Suite

#: Items per evaluator the flow's check runs (a structural fault shows on the first item;
#: `vlgate check-model --items` runs more).
FLOW_CHECK_ITEMS = 2


def stamp(result: ModelCheck) -> str:
    """The run tag's value: ``exact``, or which used paths are not."""
    return "exact" if result.trusted else "not exact: " + ", ".join(path.path for path in result.untrusted())


def check_table(result: ModelCheck) -> Table:
    """One row per path: its largest difference from the plain path and whether vlgate uses it."""
    table = Table(title=f"{result.model} ({result.backend}, {result.digest[:19]}): {stamp(result)}")
    for column in ("path", "largest difference", "tolerance", "used by vlgate", "exact", "detail"):
        table.add_column(column)
    for path in result.paths:
        difference = "—" if path.largest_difference is None else f"{path.largest_difference:.2g}"
        exact = "—" if path.exact is None else ("yes" if path.exact else "[red]no[/red]")
        table.add_row(path.path, difference, f"{path.tolerance:g}", "yes" if path.used else "no", exact, path.detail)
    return table


def check_file(folder: Path, digest: str, backend: str, batch_size: int) -> Path:
    """Where the check of these weights on this engine and batch size is kept: what the
    fast paths are depends on all three."""
    return folder / f"{digest.replace(':', '-')}-{backend}-batch{batch_size}.json"


def cached_check(file: Path) -> ModelCheck | None:
    return ModelCheck.from_dict(json.loads(file.read_text())) if file.is_file() else None


def keep_check(file: Path, result: ModelCheck) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(result.to_dict(), indent=2))


def engine_problem(result: ModelCheck) -> str | None:
    """Why the suite's engine cannot score these weights, or None: another engine (vLLM)
    that is not exact on them would score another model, and, unlike a shared prefix, the
    backend cannot turn it off by itself."""
    engine = next((path for path in result.paths if path.path == OTHER_ENGINE and path.used), None)
    if engine is None or engine.exact is not False:
        return None
    return (
        f"the suite's engine does not score it as the transformers plain path does (largest difference {engine.largest_difference:.2g} "
        f"over {engine.compared} requests, tolerance {engine.tolerance:g}): its scores would not be this model's; score it with backend: transformers"
    )


def check_candidate(model_uri: str, suite: Suite, cache_dir: str, checks_folder: str) -> ModelCheck | None:
    """The candidate's check under ``suite``, made once per digest (the evaluators have
    downloaded its weights into ``cache_dir`` already); None for a suite served over HTTP,
    whose model vlgate cannot run itself."""
    from vlgate.evaluators.backends import kinds as backends
    from vlgate.evaluators.backends.loading import model_digest, resolve_model
    from vlgate.evaluators.running.model_check import check_model
    from vlgate.evaluators.running.suite import transformers_batch_size

    if not backends.get(suite.backend).local:
        return None
    digest = model_digest(resolve_model(model_uri, Path(cache_dir), suite.policy))
    file = check_file(Path(checks_folder), digest, suite.backend, transformers_batch_size(suite))
    found = cached_check(file)
    if found is not None:
        return found
    result = check_model(model_uri, suite, items=FLOW_CHECK_ITEMS, backend=suite.backend, cache_dir=Path(cache_dir))
    keep_check(file, result)
    return result
