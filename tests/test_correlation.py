"""Rank correlations (docs/metrics.md#correlations): the VL-LCM paper's Table 1 reproduced by `vlgate correlate --ranks`."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import DATA

from vlgate.cli.main import main
from vlgate.evaluators.metrics.common import f1_of_accuracies
from vlgate.evaluators.metrics.correlation import correlations, paired_sample_correlations, tie_broken_order


def read_table1():
    """The paper's Table 1 as printed: {data set: DataFrame of cells}, and its three coefficient rows."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in (DATA / "vl-lcm-table1.md").read_text().splitlines() if line.startswith("| ")]
    models = [r for r in rows if re.match(r"^[\d.]+/\d+$", r[1])]
    coefficients = {r[0].split("’")[0].lower(): [float(c) for c in r[1:7]] for r in rows if "’" in r[0]}
    tables = {name: pd.DataFrame([[r[0], *r[off : off + 4]] for r in models], columns=["model", "acc", "j_acc", "f1", "lcm"]) for name, off in (("coco", 1), ("voc2007", 5))}
    return tables, coefficients


def test_table1_f1_column_is_harmonic_mean_of_acc_and_j_acc():
    """The paper computed F1 from unrounded Acc and J-Acc, which it prints to 0.01 pp; so the
    printed F1 must lie in the F1 range those roundings allow (± half its own last digit)."""
    tables, _ = read_table1()
    exact_to_4_decimals = 0
    rows = [row for table in tables.values() for _, row in table.iterrows()]
    for row in rows:
        acc, j_acc, f1 = (float(row[c].split("/")[0]) for c in ("acc", "j_acc", "f1"))
        low = f1_of_accuracies((acc - 0.005) / 100, (j_acc - 0.005) / 100)
        high = f1_of_accuracies((acc + 0.005) / 100, (j_acc + 0.005) / 100)
        assert low - 5e-5 <= f1 <= high + 5e-5, row["model"]
        exact_to_4_decimals += round(f1_of_accuracies(acc / 100, j_acc / 100), 4) == f1
        # the arithmetic mean, by contrast, is far off wherever Acc and J-Acc differ
        if abs(acc - j_acc) > 20:
            assert not low - 5e-5 <= (acc + j_acc) / 200 <= high + 5e-5
    assert len(rows) == 22 and exact_to_4_decimals == 16


def test_f1_of_accuracies_by_hand_on_numbers_and_on_resampled_arrays():
    assert f1_of_accuracies(0.5, 1.0) == pytest.approx(2 / 3) and f1_of_accuracies(0.0, 0.0) == 0.0
    assert isinstance(f1_of_accuracies(0.5, 1.0), float)
    f1 = f1_of_accuracies(np.array([0.0, 0.5, np.nan, 0.25]), np.array([0.0, 1.0, 0.5, 0.75]))
    np.testing.assert_allclose(f1, [0.0, 2 / 3, np.nan, 0.375])


def test_table1_correlations_reproduced_by_cli(tmp_path, capsys):
    tables, printed = read_table1()
    got = {"pearson": [], "spearman": [], "kendall": []}
    for name in ("coco", "voc2007"):
        path = tmp_path / f"{name}.csv"
        tables[name].to_csv(path, index=False)
        assert main(["correlate", str(path), "--x", "lcm", "--y", "acc,j_acc,f1", "--ranks"]) == 0
        result = json.loads(capsys.readouterr().out)
        for y in ("acc", "j_acc", "f1"):
            assert result[y]["n"] == 11
            for method in got:
                got[method].append(round(result[y][method], 4))
    for method, values in got.items():
        assert values == pytest.approx(printed[method], abs=1e-9), method


def test_ranks_break_ties_among_equal_values():
    # x ties at 2.0; printed ranks say index 2 is ahead of index 1 → order [4, 2, 3, 1]
    order = tie_broken_order(np.array([3.0, 2.0, 2.0, 1.0]), np.array([1, 3, 2, 4]))
    np.testing.assert_array_equal(order, [4, 2, 3, 1])
    result = correlations(np.array([3.0, 2.0, 2.0, 1.0]), np.array([4.0, 3.0, 2.0, 1.0]), order, np.array([4, 3, 2, 1]))
    # one discordant pair of six → τ = (5 − 1)/6; d² = 0+1+1+0 → ρ = 1 − 6·2/(4·15)
    assert result["kendall"] == pytest.approx(4 / 6)
    assert result["spearman"] == pytest.approx(0.8)


def test_correlate_without_ranks_and_missing_cells(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("model,lcm,acc\nm1,0.1,10\nm2,0.2,30\nm3,0.3,20\nm4,,40\n")
    assert main(["correlate", str(path), "--x", "lcm", "--y", "acc"]) == 0
    result = json.loads(capsys.readouterr().out)["acc"]
    assert result["n"] == 3  # m4 has no lcm
    assert result["spearman"] == pytest.approx(0.5)
    assert result["kendall"] == pytest.approx(1 / 3)


def test_correlate_errors_are_one_line(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("model,lcm,acc\nm1,0.1/1,10/2\n")
    assert main(["correlate", str(path), "--x", "lcm", "--y", "acc"]) == 2
    assert "pass --ranks" in capsys.readouterr().err
    assert main(["correlate", str(path), "--x", "lcm", "--y", "nope", "--ranks"]) == 2
    err = capsys.readouterr().err
    assert "no column 'nope'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "content, says",
    [
        (b"", "empty"),
        (b"\n\n", "empty"),
        (b"model,lcm,acc\nm1,0.1\nm2,0.2,30\n", "line 2: 2 fields, the header has 3"),
        (b"model,lcm,acc\nm1,0.1,10,extra\n", "line 2: 4 fields, the header has 3"),
        (b'model,lcm,acc\nm1,0.1,"10\nm2,0.2,30\n', "unexpected end of data"),
        ("model,lcm,acc\nm1,0.1,10\n".encode("utf-16"), "not UTF-8"),
        (None, "is a folder"),
    ],
)
def test_correlate_refuses_tables_it_would_have_to_guess_about(tmp_path, capsys, content, says):
    """Ragged rows, unterminated quotes, UTF-16 exports, empty files and folders: one line
    naming the file (and the line), exit 2, nothing printed as a result."""
    path = tmp_path / "t.csv"
    path.mkdir() if content is None else path.write_bytes(content)
    assert main(["correlate", str(path), "--x", "lcm", "--y", "acc"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and says in captured.err and str(path) in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_correlate_reads_a_utf8_table_with_a_bom_and_spaces_after_commas(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_bytes("model, lcm, acc\nm1, 0.1, 10\nm2, 0.2, 30\nm3, 0.3, 20\n".encode("utf-8-sig"))
    assert main(["correlate", str(path), "--x", "lcm", "--y", "acc"]) == 0
    result = json.loads(capsys.readouterr().out)["acc"]
    assert result["n"] == 3 and result["spearman"] == pytest.approx(0.5)


def test_paired_sample_correlation_joins_on_id():
    candidate = pd.DataFrame({"id": ["a", "b", "c", "d"], "p_lc": [0.1, 0.2, 0.3, 0.9]})
    champion = pd.DataFrame({"id": ["d", "c", "b", "x"], "p_lc": [0.8, 0.5, 0.4, 0.0]})
    result = paired_sample_correlations(candidate, champion)
    assert result["n"] == 3 and result["spearman"] == pytest.approx(1.0) and result["kendall"] == pytest.approx(1.0)
