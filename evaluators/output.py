"""What one evaluator produced for one model version, as the validation flow hands it on.

Two names, one for each side of a boundary:

* the **summary** (:class:`EvaluatorSummary`): the entry a run returns across the Prefect
  task boundary and writes to ``summary.json`` — metrics, counts, the models it used, or
  the error that stopped it;
* the **output** (:class:`EvaluatorOutput`): the summary plus the records parsed and
  validated once into their per-sample frame, and the Great Expectations verdict. Great
  Expectations, MLflow logging, the gate, the correlations and the report all read it;
  none of them re-reads the records file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, GetPydanticSchema, JsonValue
from typing_extensions import TypedDict, Unpack

from vlgate.evaluators.metrics.common import Metrics
from vlgate.evaluators.records import ParsedLines, Record, read_jsonl
from vlgate.values import replaced


class ItemErrorFields(TypedDict):
    """An ``ItemError`` (``loaders/items.py``) as the JSON object a shard hands on."""

    source: str
    item_id: str | None
    field: str | None
    message: str


# The fields below are typed for the code that reads them, and validated and serialised by
# pydantic as the plain JSON objects they were before they were typed (a dict of str keys,
# any values: a NumPy number in the metrics stays one until ``as_json``), so what a run
# wrote crosses the boundary unchanged.
_AS_JSON_OBJECT = GetPydanticSchema(lambda _type, handler: handler(dict[str, Any]))
_AS_JSON_OBJECTS = GetPydanticSchema(lambda _type, handler: handler(list[dict[str, Any]]))
_Metrics = Annotated[Metrics, _AS_JSON_OBJECT]
#: role → what identifies the model (a runner's digest; a reference and a digest)
_Models = Annotated[Mapping[str, JsonValue], _AS_JSON_OBJECT]


#: the metrics a validation run logs per evaluator (``records_from_cache/EVALUATOR``): its
#: records taken from the shared record cache (``runners/cache.py``). Not under the
#: evaluator's own ``EVALUATOR/`` names: those are measurements of the model, equal for
#: equal weights, and this count is not
RECORDS_FROM_CACHE = "records_from_cache"


class SummaryJson(TypedDict, total=False):
    """An :class:`EvaluatorSummary` as JSON (``EvaluatorSummary.as_json``): the fields that were set."""

    protocol: str | None
    metrics: Metrics | None
    n_items: int
    n_load_errors: int
    reused: int
    computed: int
    from_cache: int
    item_errors: list[str]
    models: dict[str, JsonValue]
    shard_workers: list[str] | None
    error: str | None


class EvaluatorSummary(BaseModel):
    """One evaluator's entry in a run's summary (``summary.json``, a validation run's
    ``evaluators/EVALUATOR/run.json``): what it ran and counted, or only the ``error`` that
    stopped it. It crosses process and task boundaries (Prefect persists it as JSON), and
    its JSON holds the fields that were set (:meth:`as_json`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: str | None = None
    metrics: _Metrics | None = None
    #: the data set's items that loaded, and those that did not (missing or corrupt images)
    n_items: int = 0
    n_load_errors: int = 0
    #: records found in the store and records computed by this run
    reused: int = 0
    computed: int = 0
    #: records copied from the shared record cache (``runners/cache.py``): computed once, for another version, model or run
    from_cache: int = 0
    item_errors: list[str] = Field(default_factory=list)
    #: the models the evaluator ran (role → reference and digest)
    models: _Models = Field(default_factory=dict)
    #: the worker of each shard, in shard order (sharded runs)
    shard_workers: list[str] | None = None
    error: str | None = None
    #: the error is the input's (a task that cannot be run as written), not a fault to retry
    bad_input: bool = False

    @classmethod
    def failed(cls, error: str, bad_input: bool = False) -> EvaluatorSummary:
        return cls(error=error, bad_input=True) if bad_input else cls(error=error)

    def counted_since(self, earlier: EvaluatorSummary | None) -> EvaluatorSummary:
        """This look's summary with its record counts made the validation's so far. A later
        look finds the records of the looks before in its own store (``reused``), so what
        those took from the shared cache and computed is carried over from ``earlier`` (the
        look before's summary, itself counted so) and ``reused`` keeps only the records of an
        earlier attempt of the flow; the records in all stay the same."""
        if earlier is None or self.error is not None or earlier.error is not None:
            return self
        from_cache, computed = earlier.from_cache + self.from_cache, earlier.computed + self.computed
        reused = max(self.reused + self.from_cache + self.computed - from_cache - computed, 0)
        return replaced(self, from_cache=from_cache, computed=computed, reused=reused)

    def as_json(self) -> SummaryJson:
        """The fields that were set, as JSON values (a NumPy number in the metrics as the
        Python number it holds)."""
        plain: SummaryJson = json.loads(json.dumps(self.model_dump(exclude_unset=True), default=_plain))
        return plain


def _plain(value: object) -> JsonValue:
    return value.item() if hasattr(value, "item") else str(value)


class ShardResult(BaseModel):
    """What one evaluator shard hands to the merge across a task boundary: its records'
    fingerprints in item order, its item errors, counts, and where it ran."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shard: int
    n_shards: int
    fingerprints: list[str]
    #: ``ItemError`` fields, one dict per item that could not be evaluated
    item_errors: Annotated[list[ItemErrorFields], _AS_JSON_OBJECTS]
    reused: int
    computed: int
    models: _Models
    protocol: str
    worker: str
    from_cache: int = 0


class VerdictFields(TypedDict, total=False):
    """The fields of an :class:`EvaluatorOutput` that ``from_folder`` takes as they are."""

    error: str | None
    expectations: dict[str, JsonValue] | None
    expectations_passed: bool


class OutputFields(VerdictFields, total=False):
    """The fields of an :class:`EvaluatorOutput` that ``from_records`` and ``from_parsed`` take as they are."""

    summary: EvaluatorSummary
    folder: Path | None


@dataclass
class EvaluatorOutput:
    """One evaluator's output on one version: its metrics, its raw records (with the
    fields only people read: prompts, options, image paths), the per-sample frame of the
    valid ones (``id`` first), the folder its files are in, and the verdicts on it.

    ``error`` says why there is nothing to judge; ``expectations`` is the Great
    Expectations report (``ExpectationReport.as_dict()``), and ``expectations_passed``
    its verdict (False also when the check itself could not run)."""

    evaluator: str
    metrics: Metrics | None = None
    records: list[Record] = field(default_factory=list)
    samples: pd.DataFrame | None = None
    summary: EvaluatorSummary = field(default_factory=EvaluatorSummary)
    folder: Path | None = None
    error: str | None = None
    expectations: dict[str, JsonValue] | None = None
    expectations_passed: bool = True

    @property
    def expected_rows(self) -> int:
        """The data set's item count (loaded or not): what a complete run has rows for."""
        loaded = self.summary.n_items if "n_items" in self.summary.model_fields_set else len(self.records)
        return loaded + self.summary.n_load_errors

    @property
    def protocol(self) -> JsonValue:
        """The protocol the records were measured under (the evaluator's ``protocols.py``): the
        most common, as validation keeps it; None when they name none (records from before
        protocols, or from elsewhere). A string, unless a record that validation refused says otherwise."""
        named = [record.get("protocol") for record in self.records]
        return max(set(named), key=named.count) if named else None

    @classmethod
    def failed(cls, evaluator: str, error: str) -> EvaluatorOutput:
        return cls(evaluator, error=error, summary=EvaluatorSummary.failed(error))

    @classmethod
    def from_records(cls, evaluator: str, records: Sequence[Record], metrics: Metrics | None = None, **fields: Unpack[OutputFields]) -> EvaluatorOutput:
        """Records already in memory, validated once (see ``from_parsed``)."""
        parsed = ParsedLines(records=list(records), lines=list(range(1, len(records) + 1)))
        return cls.from_parsed(evaluator, parsed, metrics, **fields)

    @classmethod
    def from_parsed(cls, evaluator: str, parsed: ParsedLines, metrics: Metrics | None = None, **fields: Unpack[OutputFields]) -> EvaluatorOutput:
        """Parsed records validated once into the per-sample frame; invalid ones are left
        out of ``samples`` (the expectations count rows, so a dropped record is caught there).
        An evaluator this vlgate does not know (an old run's) keeps its records, without samples."""
        from vlgate.evaluators import registry  # the registry and scoring: when records are parsed, not when the type is imported
        from vlgate.evaluators.scoring import per_sample_frame, validate

        known = evaluator in registry.names()
        samples = per_sample_frame(validate(evaluator, parsed, skip_invalid=True)) if parsed.records and known else None
        return cls(evaluator, metrics=metrics, records=parsed.records, samples=samples, **fields)

    @classmethod
    def from_folder(cls, evaluator: str, folder: Path, summary: EvaluatorSummary | None = None, **fields: Unpack[VerdictFields]) -> EvaluatorOutput:
        """The output in an evaluator's folder (``records.jsonl``, ``metrics.json``), as a
        run wrote it or as it was downloaded from MLflow; metrics from ``summary`` when given."""
        folder = Path(folder)
        records_path = folder / "records.jsonl"
        parsed = read_jsonl(records_path) if records_path.is_file() else ParsedLines()
        summary = summary or EvaluatorSummary()
        metrics = summary.metrics
        if metrics is None and (folder / "metrics.json").is_file():
            metrics = json.loads((folder / "metrics.json").read_text())  # as the run wrote them (scoring.score)
        return cls.from_parsed(evaluator, parsed, metrics, summary=summary, folder=folder, **fields)
