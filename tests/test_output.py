"""What crosses the evaluation task boundary (evaluators/output.py): an evaluator's summary
entry keeps the JSON it had as a dict (the fields a run set, nothing more), and a shard's
result survives the JSON Prefect persists it as."""

import json

import numpy as np
import pytest
from pydantic import ValidationError

from vlgate.evaluators.output import EvaluatorOutput, EvaluatorSummary, ShardResult


def test_a_summary_entry_writes_the_fields_that_were_set_as_plain_json():
    finished = EvaluatorSummary(protocol="vlgate-1", metrics={"acc": np.float64(0.5), "n": np.int64(4), "by_category": {"red": {"n": np.int32(2)}}}, n_items=4, item_errors=["x"])
    assert finished.as_json() == {"protocol": "vlgate-1", "metrics": {"acc": 0.5, "n": 4, "by_category": {"red": {"n": 2}}}, "n_items": 4, "item_errors": ["x"]}
    assert type(finished.as_json()["metrics"]["n"]) is int  # not numpy's, not a string
    assert EvaluatorSummary.failed("RuntimeError: out of memory").as_json() == {"error": "RuntimeError: out of memory"}
    with pytest.raises(ValidationError, match="n_itmes"):
        EvaluatorSummary(n_itmes=3)  # a misspelt field is refused, not carried along


def test_the_expected_rows_are_the_items_loaded_and_not_loaded_or_the_records_without_a_count():
    records = [{"id": "a"}, {"id": "b"}]
    assert EvaluatorOutput("decc", records=records, summary=EvaluatorSummary(n_items=5, n_load_errors=2)).expected_rows == 7
    assert EvaluatorOutput("decc", records=records).expected_rows == 2


def test_a_shard_result_round_trips_through_prefect_s_json_serializer():
    from prefect.serializers import JSONSerializer

    result = ShardResult(
        shard=1, n_shards=2, fingerprints=["f1", "f2"], item_errors=[{"evaluator": "lcm-mc", "item": "q7", "field": "image", "reason": "unreadable"}],
        reused=1, computed=1, models={"vlm": {"reference": "ckpt", "digest": "sha256:0"}}, protocol="vlgate-1", worker="host:123",
    )
    serializer = JSONSerializer()
    assert serializer.loads(serializer.dumps(result)) == result
    assert json.loads(serializer.dumps(result))["data"]["fingerprints"] == ["f1", "f2"]
