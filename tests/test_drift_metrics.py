"""Drift statistics (ARCHITECTURE.md, what the service promises: drift): two-sample KS + mean drop on higher-is-better scores.

The samples are fixed grids whose KS statistic can be counted by hand: the statistic is
the largest gap between the two empirical CDFs, and where one sample lies entirely below
the other's smallest value for its first m points, that gap is at least m/n.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from vlgate.evaluators.metrics.drift import DriftResult, detect_drift

# 17 points 0.5, 0.53125, ..., 1.0 (step 1/32, exact in binary floating point); mean 0.75.
GRID = 0.5 + np.arange(17) / 32


def test_identical_samples_no_drift_ks_zero_p_one():
    result = detect_drift("lcm-mc/lcm", GRID, GRID.copy())
    assert result.drifted is False
    assert result.statistic == 0.0
    assert result.p_value == 1.0
    assert result.mean_drop == 0.0
    assert result.mannwhitney_p == pytest.approx(1.0)
    assert (result.n_reference, result.n_current) == (17, 17)
    assert "no drift" in result.reason and "unchanged" in result.reason


def test_shift_down_by_0_3_drifts_with_hand_computed_ks():
    current = GRID - 0.3  # 0.2, 0.23125, ..., 0.7
    result = detect_drift("lcm-mc/lcm", GRID, current)
    assert result.drifted is True
    assert result.mean_reference == pytest.approx(0.75, abs=1e-12)
    assert result.mean_current == pytest.approx(0.45, abs=1e-12)
    assert result.mean_drop == pytest.approx(0.3, abs=1e-12)
    # By hand: current values below the smallest reference value 0.5 are 0.2 + k/32 for
    # k = 0..9 (0.2 + 9.6/32 = 0.5), i.e. 10 of 17, so just below 0.5 the CDFs differ by
    # 10/17. Above 0.5 the two grids alternate (no ties: 0.3 is not a multiple of 1/32),
    # each reference point followed by a current one, so the gap never exceeds 10/17.
    assert result.statistic == pytest.approx(10 / 17, abs=1e-12)
    assert result.p_value < 0.01
    assert "drifted" in result.reason and "2*max_mean_drop" in result.reason


def test_ks_and_p_match_scipy_directly():
    current = GRID - 0.3
    result = detect_drift("m", GRID, current)
    expected = stats.ks_2samp(GRID, current)
    assert result.statistic == expected.statistic
    assert result.p_value == expected.pvalue
    mw = stats.mannwhitneyu(GRID, current, alternative="two-sided")
    assert result.mannwhitney_p == mw.pvalue


def test_shift_up_is_improvement_not_drift():
    result = detect_drift("m", GRID, GRID + 0.3)
    assert result.statistic == pytest.approx(10 / 17, abs=1e-12)  # same gap, mirrored
    assert result.p_value < 0.01  # the distributions do differ...
    assert result.mean_drop == pytest.approx(-0.3, abs=1e-12)
    assert result.drifted is False  # ...but higher is better
    assert "improvement" in result.reason


def test_ks_significant_and_moderate_drop_drifts():
    # 101 points 0.5 .. 1.0 step 0.005 (mean 0.75) against 101 copies of 0.6825, which lies
    # between grid points 0.68 (k=36) and 0.685: F_ref(0.6825) = 37/101, F_cur jumps to 1
    # there, so D = 64/101. Mean drop 0.0675 is in (max_mean_drop, 2*max_mean_drop].
    reference = 0.5 + np.arange(101) / 200
    current = np.full(101, 0.6825)
    result = detect_drift("m", reference, current)
    assert result.statistic == pytest.approx(64 / 101, abs=1e-12)
    assert result.mean_drop == pytest.approx(0.0675, abs=1e-12)
    assert result.p_value < 0.01
    assert result.drifted is True
    assert "distributions differ" in result.reason and "max_mean_drop=0.05" in result.reason


def test_ks_significant_but_small_drop_is_not_drift():
    # Same grid against 101 copies of 0.7475 (between 0.745, k=49, and 0.75): D = 51/101,
    # mean drop 0.0025 <= max_mean_drop.
    reference = 0.5 + np.arange(101) / 200
    result = detect_drift("m", reference, np.full(101, 0.7475))
    assert result.statistic == pytest.approx(51 / 101, abs=1e-12)
    assert result.p_value < 0.01
    assert result.mean_drop == pytest.approx(0.0025, abs=1e-12)
    assert result.drifted is False
    assert "fell only" in result.reason


def test_moderate_drop_without_significant_test_is_not_drift():
    # GRID − 0.08: current points below 0.5 are 0.42 + k/32 for k = 0, 1, 2 → D = 3/17.
    result = detect_drift("m", GRID, GRID - 0.08)
    assert result.statistic == pytest.approx(3 / 17, abs=1e-12)
    assert result.p_value >= 0.01
    assert result.mean_drop == pytest.approx(0.08, abs=1e-12)
    assert result.drifted is False
    assert "no drift" in result.reason


def test_large_drop_on_small_batch_drifts_without_significant_test():
    reference = [0.8, 0.85, 0.9, 0.95, 1.0]
    current = [0.68, 0.73, 0.78, 0.83, 0.88]  # reference − 0.12; 3 of 5 below 0.8 → D = 3/5
    result = detect_drift("m", reference, current)
    assert result.statistic == pytest.approx(3 / 5, abs=1e-12)
    assert result.p_value >= 0.01  # five points each are too few for the test
    assert result.mean_drop == pytest.approx(0.12, abs=1e-12)
    assert result.drifted is True  # 0.12 > 2 * 0.05
    assert "2*max_mean_drop" in result.reason


def test_nan_values_are_dropped_and_counted():
    reference = np.concatenate([GRID, [np.nan, np.nan]])
    current = [*(GRID - 0.3).tolist(), float("nan"), None]
    result = detect_drift("m", reference, current)
    clean = detect_drift("m", GRID, GRID - 0.3)
    assert (result.n_reference, result.n_current) == (17, 17)
    assert result.statistic == clean.statistic and result.p_value == clean.p_value
    assert result.mean_drop == pytest.approx(0.3, abs=1e-12)
    assert result.drifted is True


def test_too_few_samples_is_not_testable():
    result = detect_drift("m", [0.9, 0.8, np.nan, np.nan, 0.7], [0.1] * 10, min_samples=5)
    assert result.drifted is False  # fail-open, but says so
    assert (result.n_reference, result.n_current) == (3, 10)
    assert result.statistic is None and result.p_value is None and result.mannwhitney_p is None
    assert result.mean_reference is None and result.mean_current is None and result.mean_drop is None
    assert result.reason.startswith("not testable")
    assert "reference has 3 values after dropping 2 NaN" in result.reason
    assert "min_samples=5" in result.reason

    both = detect_drift("m", [], [0.5, np.nan])
    assert (both.n_reference, both.n_current) == (0, 1)
    assert "reference has 0 values" in both.reason and "current has 1 value after dropping 1 NaN" in both.reason


def test_thresholds_are_parameters():
    # The 0.0675 drop of the moderate case is drift at the default threshold, not at 0.1.
    reference = 0.5 + np.arange(101) / 200
    current = np.full(101, 0.6825)
    assert detect_drift("m", reference, current, max_mean_drop=0.1).drifted is False
    # With alpha so small the test cannot pass, only a drop > 2 * max_mean_drop drifts.
    assert detect_drift("m", reference, current, alpha=1e-300).drifted is False
    assert detect_drift("m", reference, current, alpha=1e-300, max_mean_drop=0.03).drifted is True


def test_as_dict_is_json_ready():
    result = detect_drift("decc/reliable_rate", GRID, GRID - 0.3)
    data = result.as_dict()
    assert isinstance(result, DriftResult)
    assert list(data) == [
        "metric", "n_reference", "n_current", "mean_reference", "mean_current", "mean_drop",
        "statistic", "p_value", "mannwhitney_p", "drifted", "reason", "p_adjusted",
    ]
    round_trip = json.loads(json.dumps(data))
    assert round_trip["metric"] == "decc/reliable_rate"
    assert round_trip["drifted"] is True
    assert math.isclose(round_trip["statistic"], 10 / 17)
    assert json.loads(json.dumps(detect_drift("m", [], []).as_dict()))["statistic"] is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"max_mean_drop": -0.1}, "max_mean_drop"),
        ({"min_samples": 0}, "min_samples"),
    ],
)
def test_bad_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        detect_drift("m", GRID, GRID, **kwargs)


def test_bad_values_raise():
    with pytest.raises(ValueError, match="infinite"):
        detect_drift("m", [*GRID, np.inf], GRID)
    with pytest.raises(ValueError, match="1-D"):
        detect_drift("m", np.ones((3, 3)), GRID)


def test_module_is_pure_math():
    """ARCHITECTURE.md, layers: metric math imports no model, MLflow or Prefect code."""
    import subprocess
    import sys

    code = (
        "import sys, vlgate.evaluators.metrics.drift; "
        "print(sorted(m for m in ('mlflow', 'prefect', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_scores_checked_together_are_holm_corrected_so_more_scores_do_not_mean_more_alarms():
    from vlgate.evaluators.metrics.drift import detect_drifts

    reference = np.linspace(0.4, 0.8, 200)
    moved = reference - 0.06  # KS p = 0.022 < alpha 0.05 and a drop of 0.06 > max_mean_drop 0.05: drift, alone
    p = stats.ks_2samp(reference, moved).pvalue
    assert 0.05 / 3 < p < 0.05
    alone = detect_drift("a/x", reference, moved, alpha=0.05, max_mean_drop=0.05)
    assert alone.drifted and alone.p_adjusted is None
    scores = {name: (reference, moved) for name in ("a/x", "b/x", "c/x")}
    together = detect_drifts(scores, alpha=0.05, max_mean_drop=0.05)
    assert [r.metric for r in together] == ["a/x", "b/x", "c/x"]
    assert [r.drifted for r in together] == [False] * 3 and [r.p_adjusted for r in together] == pytest.approx([3 * p] * 3)
    assert "Holm-adjusted p=" in together[0].reason and together[0].p_value == pytest.approx(p)
    # a drop past twice the threshold needs no test; one score alone is decided as detect_drift decides it
    scores["d/x"] = (reference, reference - 0.15)
    assert [r.drifted for r in detect_drifts(scores, alpha=0.05, max_mean_drop=0.05)] == [False, False, False, True]
    assert detect_drifts({"a/x": (reference, moved)}, alpha=0.05, max_mean_drop=0.05) == [alone]
    # untestable scores (too few samples) are not counted among the tests
    scores = {"a/x": (reference, moved), "tiny/x": ([0.5, 0.6], [0.1, 0.2])}
    assert [r.p_adjusted for r in detect_drifts(scores, alpha=0.05, max_mean_drop=0.05)] == [None, None]
