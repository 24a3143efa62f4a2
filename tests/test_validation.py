"""Bad input: every rule of the record contract gives an error naming line, id and field."""

import json
import math

import pytest

from vlgate.cli.main import main
from vlgate.evaluators.records import InvalidRecordsError, parse_jsonl
from vlgate.evaluators.scoring import validate

GOOD_MC = {"id": "ok", "p_mc": [0.6, 0.4], "p_yes": [0.7, 0.2], "answer": 0}


def errors_for(evaluator, lines):
    with pytest.raises(InvalidRecordsError) as raised:
        validate(evaluator, parse_jsonl(line if isinstance(line, str) else json.dumps(line) for line in lines))
    return raised.value.errors


@pytest.mark.parametrize(
    "record, field, message",
    [
        ({"id": "r", "p_yes": [0.1, 0.2]}, "p_mc", "missing"),
        ({"id": "r", "p_mc": [0.5, 0.5]}, "p_yes", "missing"),
        ({"id": "r", "p_mc": [0.5, 0.3, 0.2], "p_yes": [0.1, 0.2]}, "p_yes", "K mismatch"),
        ({"id": "r", "p_mc": [0.5, 1.5], "p_yes": [0.1, 0.2]}, "p_mc", "entry 1 1.5 is outside [0, 1]"),
        ({"id": "r", "p_mc": [0.5, 0.5], "p_yes": [-0.1, 0.2]}, "p_yes", "entry 0 -0.1 is outside [0, 1]"),
        ({"id": "r", "p_mc": [0.5, 0.5], "p_yes": ["0.1", 0.2]}, "p_yes", "is not a number"),
        ({"id": "r", "p_mc": [0.5, 0.5], "p_yes": [0.1, 0.2], "answer": 2}, "answer", "unknown label 2"),
        ({"id": "r", "p_mc": [0.5, 0.5], "p_yes": [0.1, 0.2], "answer": "A"}, "answer", "unknown label 'A'"),
        ({"p_mc": [0.5, 0.5], "p_yes": [0.1, 0.2]}, "id", "missing"),
    ],
)
def test_lcm_mc_rules(record, field, message):
    errors = errors_for("lcm-mc", [GOOD_MC, record])
    assert len(errors) == 1
    error = errors[0]
    assert (error.line, error.field) == (2, field)
    assert message in error.message
    if "id" in record:
        assert error.record_id == "r" and "line 2 (id 'r'), field" in str(error)


def test_nan_probability_is_a_field_error():
    line = '{"id": "n", "p_mc": [NaN, 0.5], "p_yes": [0.1, 0.2]}'
    (error,) = errors_for("lcm-mc", [GOOD_MC, line])
    assert (error.line, error.record_id, error.field) == (2, "n", "p_mc") and "NaN" in error.message


def test_non_json_and_non_object_lines():
    errors = errors_for("lcm-mc", [GOOD_MC, "{not json", "[1, 2]", ""])
    assert [(e.line, e.field) for e in errors] == [(2, None), (3, None)]
    assert "not valid JSON" in errors[0].message and "expected a JSON object" in errors[1].message


def test_duplicate_ids():
    (error,) = errors_for("lcm-mc", [GOOD_MC, GOOD_MC])
    assert error.line == 2 and error.field == "id" and "first on line 1" in error.message


@pytest.mark.parametrize(
    "evaluator, record, field, message",
    [
        ("lcm-nb", {"id": 1, "p_yes": [[0.1, 0.2]], "p_text": [[0.5, 0.5], [0.5, 0.5]], "p_image": [[0.5, 0.5], [0.5, 0.5]]}, "p_yes", "2x2"),
        ("lcm-nb", {"id": 1, "p_yes": [[0.1, 0.2], [0.3, 2.0]], "p_text": [[0.5, 0.5], [0.5, 0.5]], "p_image": [[0.5, 0.5], [0.5, 0.5]]}, "p_yes", "row 1: entry 1 2.0 is outside"),
        ("lcm-nb", {"id": 1, "p_yes": [[0.1, 0.2], [0.3, 0.4]], "p_text": [[0.5, 0.5], [0.5, 0.5]], "p_image": [[0.5, 0.5], [0.5, 0.5]], "answer": "c3"}, "answer", "unknown label 'c3'"),
        # an unhashable label was a TypeError traceback (exit 1), not a line naming the field
        ("lcm-nb", {"id": 1, "p_yes": [[0.1, 0.2], [0.3, 0.4]], "p_text": [[0.5, 0.5], [0.5, 0.5]], "p_image": [[0.5, 0.5], [0.5, 0.5]], "answer": ["c1"]}, "answer", "unknown label ['c1']"),
        ("lcm-nb", {"id": 1, "p_yes": [[0.1, 0.2], [0.3, 0.4]], "p_text": [[0.5, 0.5], [0.5, 0.5]], "p_image": [[0.5, 0.5], [0.5, 0.5]], "answer": {"c": 1}}, "answer", "unknown label {'c': 1}"),
        ("vlind", {"id": 1, "concept": "c", "ck": [True], "vp": [True, False], "cb": [True, False], "lp": [[True, False]]}, "ck", "must be a pair"),
        ("vlind", {"id": 1, "concept": "c", "ck": [True, "yes"], "vp": [True, False], "cb": [True, False], "lp": [[True, False]]}, "ck", "true, false or null"),
        ("vlind", {"id": 1, "concept": "c", "ck": [True, False], "vp": [True, False], "cb": [True, False], "lp": []}, "lp", "non-empty"),
        ("vlind", {"id": 1, "ck": [True, False], "vp": [True, False], "cb": [True, False], "lp": [[True, False]]}, "concept", "missing"),
        ("genception", {"id": 1, "category": "a", "s": [0.5, 1.2, 0.1]}, "s", "entry 1 1.2 is outside [-1, 1]"),
        ("genception", {"id": 1, "category": "a"}, "s", "missing"),
        ("decc", {"id": 1, "direct": "A", "l1": "A"}, "v1", "missing"),
        ("decc", {"id": 1, "direct": "A", "v1": "A", "l1": "B"}, "v2", "second round must have run"),
        ("decc", {"id": 1, "direct": "A", "v1": "A", "l1": "B", "v2": "A"}, "l2", "both agents' answers"),
        ("decc", {"id": 1, "direct": "A", "v1": "A", "l1": "A", "answer": ["A"]}, "answer", "must be a string answer"),
    ],
)
def test_other_evaluator_rules(evaluator, record, field, message):
    (error,) = errors_for(evaluator, [record])
    assert error.field == field and message in error.message and error.line == 1 and error.record_id == 1


def test_genception_differing_t_is_flagged_on_the_odd_record():
    records = [{"id": i, "category": "a", "s": [0.5, 0.5, 0.5]} for i in range(3)] + [{"id": "odd", "category": "a", "s": [0.5, 0.5]}]
    (error,) = errors_for("genception", records)
    assert error.record_id == "odd" and "T=2" in error.message and "T=3" in error.message


def test_all_bad_records_reported_not_just_the_first():
    errors = errors_for("lcm-mc", [GOOD_MC, {"id": "a"}, "oops", {"id": "b", "p_mc": [2, 0], "p_yes": [0, 0]}])
    assert [e.line for e in errors] == [2, 3, 4]


def test_skip_invalid_keeps_the_rest():
    valid = validate("lcm-mc", parse_jsonl(json.dumps(r) for r in [GOOD_MC, {"id": "bad", "p_mc": [2, 0], "p_yes": [0, 0]}, {**GOOD_MC, "id": "ok2"}]), skip_invalid=True)
    assert [r["id"] for r in valid.records] == ["ok", "ok2"] and valid.lines == [1, 3]
    assert len(valid.errors) == 1 and valid.arrays["p_mc"].shape == (2, 2)


# ---- the CLI: exit status, one line per bad record, no traceback, --skip-invalid ----


def test_cli_reports_each_bad_record_and_exits_nonzero(write_records, capsys):
    path = write_records([GOOD_MC, {"id": "k", "p_mc": [0.5, 0.5], "p_yes": [0.1]}, "{oops", {"id": "z", "p_mc": [0.5, 0.5], "p_yes": [0.1, math.inf]}])
    assert main(["score", "lcm-mc", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 4  # three bad records + the summary
    assert "line 2 (id 'k'), field 'p_yes'" in lines[0]
    assert "line 3" in lines[1] and "not valid JSON" in lines[1]
    assert "line 4 (id 'z'), field 'p_yes'" in lines[2]
    assert lines[3].startswith(f"vlgate score: {path}: 3 invalid record(s)") and "Traceback" not in err


def test_cli_skip_invalid_scores_the_rest(write_records, capsys):
    path = write_records([GOOD_MC, {"id": "k", "p_mc": [0.5, 0.5], "p_yes": [0.1]}])
    assert main(["score", "lcm-mc", str(path), "--skip-invalid"]) == 0
    out, err = capsys.readouterr()
    metrics = json.loads(out)
    assert metrics["n"] == 1 and metrics["n_skipped"] == 1
    assert metrics["skipped"] == [{"line": 2, "id": "k", "field": "p_yes", "error": "has 1 entries but p_mc has 2 (K mismatch)"}]
    assert "skipped line 2 (id 'k')" in err


def test_cli_missing_file_is_one_line(capsys, tmp_path):
    assert main(["score", "decc", str(tmp_path / "nope.jsonl")]) == 2
    assert capsys.readouterr().err.strip().endswith("no such file")


def test_nested_lists_where_numbers_belong():
    (error,) = errors_for("lcm-mc", [GOOD_MC, {"id": "nest", "p_mc": [[0.5], [0.5]], "p_yes": [0.1, 0.2]}])
    assert error.field == "p_mc" and "is not a number" in error.message


def test_ragged_k_across_records_is_fine():
    valid = validate("lcm-mc", parse_jsonl(json.dumps(r) for r in [GOOD_MC, {"id": 2, "p_mc": [0.2, 0.3, 0.5], "p_yes": [0.1, 0.2, 0.9], "answer": 2}]))
    assert valid.arrays["p_mc"].shape == (2, 3) and valid.arrays["p_mc"][0, 2] == 0.0


def test_ragged_nested_similarities_are_a_field_error():
    records = [{"id": 1, "category": "a", "s": [[0.1, 0.2], [0.3]]}, {"id": 2, "category": "a", "s": [0.5, 0.5]}]
    (error,) = errors_for("genception", records)
    assert error.record_id == 1 and error.field == "s" and "is not a number" in error.message


def test_cli_skip_invalid_with_nothing_left(write_records, capsys):
    path = write_records([{"id": "k", "p_mc": [0.5, 0.5], "p_yes": [0.1]}])
    assert main(["score", "lcm-mc", str(path), "--skip-invalid"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n"] == 0 and metrics["n_skipped"] == 1 and "lcm" not in metrics


@pytest.mark.parametrize(
    "text",
    [
        '{"id": 1}\n{"id": 2}\n',  # the one-array fast path
        '{"id": 1}\n{"id": 2}',  # no final newline
        '{"id": 1}\r\n{"id": 2}\r\n',  # CRLF
        '{"id": 1}\n\n{"id": 2}\n',  # a blank line: line numbers must skip it
        '{"id": 1}, {"id": 2}\n{"id": 3}\n',  # two values on line 1: an error there, not two records
        '{"id": 1}\n{"id": 2, "p": NaN}\n',  # NaN: the fast parser refuses, the standard one reads it
        '{"id": 1}\n[1, 2]\n{"id": 3',  # not objects, unterminated
        "",
    ],
)
def test_reading_a_file_gives_what_parsing_it_line_by_line_gives(tmp_path, text):
    from vlgate.evaluators.records import read_jsonl

    path = tmp_path / "r.jsonl"
    path.write_bytes(text.encode())
    fast, slow = read_jsonl(path), parse_jsonl(text.encode().split(b"\n"))
    assert fast.lines == slow.lines and [e.line for e in fast.errors] == [e.line for e in slow.errors]
    assert json.dumps(fast.records, sort_keys=True) == json.dumps(slow.records, sort_keys=True)
    if text.startswith('{"id": 1}, {"id": 2}'):
        assert [e.line for e in fast.errors] == [1] and fast.lines == [2]


def test_one_record_with_a_huge_option_list_is_a_field_error_and_memory_stays_small(tmp_path):
    """One lcm-mc record of 50,000 options among 20,000 ordinary ones (a 2 MB file) made
    `vlgate score` ask for 7.45 GiB (every record padded to the widest) and die with a
    traceback: now that record is refused by name (K is at most 26), exit 2, and with
    --skip-invalid the rest are scored, in a process that stays small."""
    import subprocess
    import sys

    from vlgate.evaluators.vl_lcm.schema import MAX_OPTIONS

    path = tmp_path / "records.jsonl"
    with open(path, "w") as handle:
        for n in range(20_000):
            handle.write(json.dumps({"id": f"r{n}", "p_mc": [0.7, 0.2, 0.1], "p_yes": [0.8, 0.3, 0.1], "answer": n % 3}) + "\n")
        handle.write(json.dumps({"id": "huge", "p_mc": [1 / 50_000] * 50_000, "p_yes": [0.5] * 50_000}) + "\n")
    # the child reports its own peak: VmHWM, the high-water mark of its memory since exec
    # (getrusage's ru_maxrss keeps the forked test process's, and RUSAGE_CHILDREN every child's)
    reporting_peak = (
        "import sys; from vlgate.cli.main import main; status = main(sys.argv[1:]); "
        "print(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')) // 1024, file=sys.stderr); "
        "sys.exit(status)"
    )
    command = [sys.executable, "-c", reporting_peak, "score", "lcm-mc", str(path)]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"line 20001 (id 'huge'), field 'p_mc': has 50000 options; at most {MAX_OPTIONS}" in refused.stderr
    scored = subprocess.run([*command, "--skip-invalid"], capture_output=True, text=True, timeout=300)
    assert scored.returncode == 0, scored.stderr[-2000:]
    metrics = json.loads(scored.stdout)
    assert metrics["n"] == 20_000 and metrics["n_skipped"] == 1 and metrics["acc"] == pytest.approx(1 / 3, abs=1e-3)
    peak_mib = max(int(run.stderr.strip().splitlines()[-1]) for run in (refused, scored))
    assert peak_mib < 1024, f"a child scoring 2 MB of records peaked at {peak_mib:.0f} MiB"
