"""Exact or refused: inputs at the edges of float64 and of the input types.

1. Weights and targets so small or large that the search's squared-error sums would
   underflow or overflow are rescaled internally by powers of two (exact), so the
   optimum and its bound come out in the caller's units; beyond the documented safe
   range they are refused with an error naming sample_weight or y, never answered with
   a wrong "optimal".
2. 64-bit integer features (and targets, weights) that float64 cannot represent exactly
   are refused; large integers that it can represent are split exactly.
3. Missing values, datetime columns and object-dtype weights get one-line errors that
   name them, the same from `solve` and from the estimators.

The optima here come from `helpers.brute_force` on unit-scale copies of the problems:
the optimum of weights (or targets) scaled by c is c (or c**2) times theirs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import brute_force

from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor, solve, solve_batch

pd = pytest.importorskip("pandas")


def regression_problem(n: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 2)), rng.normal(size=n)


def assert_scaled_optimum(res, want: float, root: float):
    """`res` is optimal for a problem whose optimum is `want` and root loss `root`, to
    the solver's tolerance (1e-9 of the optimum plus 1e-12 of the root loss), with a
    lower bound that brackets it."""
    tol = 1e-9 * want + 1e-12 * root
    assert res.status == "optimal"
    assert abs(res.objective - want) <= tol, (res.objective, want)
    assert res.lower_bound <= want * (1 + 1e-12), (res.lower_bound, want)
    assert res.gap <= 2 * tol, (res.gap, tol)


# --------------------------------------------------------------------------------------
# 1. weights and targets at the edges of float64
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e-155, 1e-170, 1e-250, 1e-300, 1e200, 1e250])
def test_uniformly_scaled_weights_keep_the_optimum(scale):
    """Uniform weights of 1e-170 made every |S1|^2 underflow: a tree far from the
    optimum came back as optimal, its lower bound equal to its objective. Rescaled
    by a power of two, the search is the unit-weight search: the same tree."""
    X, y = regression_problem()
    want = brute_force(X, y, task="regression", depth=2)
    root = float(np.sum((y - y.mean()) ** 2))
    res = solve(X, y, task="regression", depth=2, sample_weight=np.full(len(y), scale))
    assert_scaled_optimum(res, scale * want, scale * root)
    unit = solve(X, y, task="regression", depth=2)
    assert np.array_equal(res.tree.feature, unit.tree.feature)
    assert np.array_equal(res.tree.threshold, unit.tree.threshold, equal_nan=True)
    np.testing.assert_allclose(res.tree.value, unit.tree.value, rtol=1e-12)


@pytest.mark.parametrize("scale", [1e-140, 1e-60, 1e60, 1e140])
def test_scaled_targets_keep_the_optimum(scale):
    X, y = regression_problem(seed=1)
    want = brute_force(X, y, task="regression", depth=2)
    root = float(np.sum((y - y.mean()) ** 2))
    res = solve(X, y * scale, task="regression", depth=2)
    assert_scaled_optimum(res, scale**2 * want, scale**2 * root)


@pytest.mark.parametrize("route", ["recursion", "appendix"])
def test_depth_3_with_tiny_weights(route):
    """Depth 3 solves its subtrees on `Problem.compact` subsets, whose bounds must be
    in the same (rescaled) units as the root's."""
    X, y = regression_problem(n=12, seed=2)
    want = brute_force(X, y, task="regression", depth=3)
    root = float(np.sum((y - y.mean()) ** 2))
    res = solve(X, y, task="regression", depth=3, route=route,
                sample_weight=np.full(len(y), 1e-170))
    assert_scaled_optimum(res, 1e-170 * want, 1e-170 * root)


def test_solve_batch_with_tiny_weights():
    X, y = regression_problem()
    want = brute_force(X, y, task="regression", depth=2)
    root = float(np.sum((y - y.mean()) ** 2))
    scales = np.array([1.0, 1e-155, 1e-170])
    results = solve_batch(X, y, scales[:, None] * np.ones(len(y)), task="regression", depth=2)
    for scale, res in zip(scales, results):
        assert_scaled_optimum(res, scale * want, scale * root)


def test_tiny_weights_through_the_estimator():
    X, y = regression_problem()
    want = brute_force(X, y, task="regression", depth=2)
    reg = OptimalTreeRegressor(max_depth=2).fit(X, y, sample_weight=np.full(len(y), 1e-170))
    assert reg.status_ == "optimal"
    assert reg.objective_ == pytest.approx(1e-170 * want, rel=1e-9)


def test_light_samples_decide_the_optimum():
    """The heavy samples all have y = 0 and fit any leaf; the optimum is decided by
    samples 1e-9 times lighter, whose squared errors the search must keep."""
    X = np.arange(8.0)[:, None]
    y = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 5.0, 2.0, 6.0])
    w = np.array([1.0, 1.0, 1.0, 1.0, 1e-9, 1e-9, 1e-9, 1e-9])
    want = brute_force(X, y, w, task="regression", depth=1)
    res = solve(X, y, task="regression", depth=1, sample_weight=w)
    root = float(np.sum(w * (y - np.average(y, weights=w)) ** 2))
    assert_scaled_optimum(res, want, root)
    assert res.tree.threshold[0] == 4.5  # costs 9.7e-9; the cut at 3.5 costs 17e-9


def test_weights_lost_in_the_rounding_of_their_sum_are_refused():
    """With weights 1e-150 next to 1, a side's weight, a total less a prefix, came out
    as 0: the light samples' split was missed and a single leaf returned as optimal."""
    X = np.arange(8.0)[:, None]
    y = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 5.0, 2.0, 6.0])
    w = np.array([1.0, 1.0, 1.0, 1.0, 1e-150, 1e-150, 1e-150, 1e-150])
    with pytest.raises(ValueError, match=r"^sample_weight spans too many orders of magnitude "
                                         r"for float64 sums: the smallest positive weight, "
                                         r"1e-150, is lost in the rounding"):
        solve(X, y, task="regression", depth=1, sample_weight=w)


# name -> (task, y, weights, message)
OUT_OF_RANGE = {
    "weights 1e300": ("regression", None, 1e300, r"^sample_weight is too large"),
    "weights 1e-320": ("regression", None, 1e-320, r"^sample_weight is too small"),
    "targets 1e200": ("regression", 1e200, None, r"^y is too large for float64"),
    "targets 1e-170": ("regression", 1e-170, None, r"^y varies too little"),
    "class weights 1e-305": ("classification", None, 1e-305, r"^sample_weight is too small"),
    "class weights 1e303": ("classification", None, 1e303, r"^sample_weight is too large"),
}


@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_out_of_range_scales_are_refused_naming_the_cause(case):
    """Weights of 1e300 used to be refused with "y is too large"; beyond the safe range
    the error names the input at fault and says what to do, in one line."""
    task, y_scale, w_scale, match = OUT_OF_RANGE[case]
    X, y = regression_problem()
    if task == "classification":
        y = (y > 0).astype(int)
        w = np.full(len(y), w_scale) * np.linspace(0.5, 1.5, len(y))  # fractional weights
    else:
        y = y * (y_scale or 1.0)
        w = None if w_scale is None else np.full(len(y), w_scale)
    with pytest.raises(ValueError, match=match) as info:
        solve(X, y, task=task, depth=2, sample_weight=w)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------------------
# 2. integers beyond float64's precision
# --------------------------------------------------------------------------------------

INEXACT_FEATURES = {
    "int64 2**62 + 1": np.array([[2**62 + 1], [2**62]], dtype=np.int64),
    "uint64 near 2**64": np.array([[2**64 - 1], [2**64 - 2]], dtype=np.uint64),
    "negative int64": np.array([[-(2**62) - 1], [-(2**62)]], dtype=np.int64),
    "object Python ints": np.array([[2**62 + 1], [2**62]], dtype=object),
    "int beyond uint64": np.array([[2**70 + 1], [2**70]], dtype=object),
}


@pytest.mark.parametrize("case", list(INEXACT_FEATURES))
def test_integer_features_float64_cannot_hold_are_refused(case):
    """The two rows are separable (optimum 0), but float64 reads both as one value:
    a single leaf with objective 1 was returned as optimal."""
    X = INEXACT_FEATURES[case]
    y = np.array([1, 0])
    with pytest.raises(ValueError, match=r"^X holds the integer -?\d+ \(row 0, column 0\), "
                                         r"which float64 cannot represent exactly"):
        solve(X, y, task="classification", depth=1)
    with pytest.raises(ValueError, match=r"float64 cannot represent exactly"):
        OptimalTreeClassifier(max_depth=1).fit(X, y)


def test_integer_column_of_a_dataframe_is_named():
    """A frame of int64 and float columns converts to float64 without a word."""
    df = pd.DataFrame({"a": np.array([2**62 + 1, 2**62], dtype=np.int64), "b": [0.5, 1.5]})
    y = np.array([1, 0])
    match = r"^X column 'a' holds the integer 4611686018427387905 \(row 0\)"
    with pytest.raises(ValueError, match=match):
        solve(df, y, task="classification", depth=1)
    with pytest.raises(ValueError, match=match):
        OptimalTreeClassifier(max_depth=1).fit(df, y)


@pytest.mark.parametrize("dtype, values", [
    (np.int64, [2**62 + 2048, 2**62, 2**62 + 1024, -(2**62)]),
    (np.uint64, [2**64 - 2048, 2**64 - 4096, 2**63, 0]),
])
def test_large_integers_float64_can_hold_are_split_exactly(dtype, values):
    X = np.array(values, dtype=dtype)[:, None]
    y = np.array([1, 0, 1, 0])
    res = solve(X, y, task="classification", depth=2)
    assert res.status == "optimal" and res.objective == 0.0
    assert np.array_equal(res.classes[res.tree.predict(X)], y)
    for thr in res.tree.threshold[res.tree.feature >= 0]:
        thr = float(thr)  # a Python int compares exactly with a Python float
        below = [v for v in values if v <= thr]
        above = [v for v in values if v > thr]
        assert below and above


def test_integer_targets_and_weights_float64_cannot_hold_are_refused():
    X = np.arange(4.0)[:, None]
    y = np.array([2**60 + 1, 0, 1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match=r"^y holds the integer 1152921504606846977"):
        solve(X, y, task="regression", depth=1)
    with pytest.raises(ValueError, match=r"^y holds the integer 1152921504606846977"):
        OptimalTreeRegressor(max_depth=1).fit(X, y)
    w = np.array([2**60 + 1, 1, 1, 1], dtype=np.int64)
    with pytest.raises(ValueError, match=r"^sample_weight holds the integer"):
        solve(X, np.array([0, 1, 0, 1]), task="classification", sample_weight=w)
    with pytest.raises(ValueError, match=r"^sample_weight holds the integer"):
        OptimalTreeClassifier().fit(X, np.array([0, 1, 0, 1]), sample_weight=w)


# --------------------------------------------------------------------------------------
# 3. missing values, datetimes and weight types
# --------------------------------------------------------------------------------------

X6 = np.arange(12.0).reshape(6, 2)
Y6 = np.array([0, 0, 0, 1, 1, 1])

FRAMES_BAD = {
    "datetime column": (
        lambda: pd.DataFrame({"d": pd.date_range("2020-01-01", periods=6),
                              "b": np.arange(6.0)}),
        r"^X column 'd' has datetime dtype \(datetime64\[.*\]\); convert it to numbers\.$",
    ),
    "timezone-aware datetime column": (
        lambda: pd.DataFrame({"d": pd.date_range("2020-01-01", periods=6, tz="UTC")}),
        r"^X column 'd' has datetime dtype",
    ),
    "timedelta column": (
        lambda: pd.DataFrame({"t": pd.to_timedelta(np.arange(6), unit="s")}),
        r"^X column 't' has timedelta dtype",
    ),
    "timestamps in an object array": (
        lambda: np.array([[pd.Timestamp("2020-01-01"), 1.0]] * 6, dtype=object),
        r"^X holds a date or time .* at row 0, column 0; convert it to numbers\.$",
    ),
    "datetime64 array": (
        lambda: np.arange(6).astype("datetime64[D]").reshape(6, 1),
        r"^X has datetime dtype \(datetime64\[D\]\); convert it to numbers\.$",
    ),
}


@pytest.mark.parametrize("case", list(FRAMES_BAD))
def test_missing_values_and_dates_are_named(case):
    """`solve` said "float() argument must be ... not 'NAType'" and the estimator raised
    numpy's DTypePromotionError; both now name the value and its column alike. (Missing
    values in X are now read as NaN: tests/test_missing.py.)"""
    make, match = FRAMES_BAD[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=match) as solved:
            solve(make(), Y6, task="classification", depth=1)
    with pytest.raises(ValueError, match=match) as fitted:
        OptimalTreeClassifier(max_depth=1).fit(make(), Y6)
    assert type(solved.value) is ValueError and type(fitted.value) is ValueError
    assert str(solved.value) == str(fitted.value)


def test_missing_regression_targets_are_named():
    y = pd.Series(pd.array([0.5, 1.0, None, 2.0, 3.0, 4.0], dtype="Float64"))
    match = r"^y contains missing values \(pd\.NA\) at row 2\.$"
    with pytest.raises(ValueError, match=match):
        solve(X6, y.astype(object), task="regression", depth=1)
    with pytest.raises(ValueError, match=match):
        OptimalTreeRegressor(max_depth=1).fit(X6, y.astype(object))


def test_missing_label_pd_na_is_named():
    y = np.array([0, pd.NA, 0, 1, 1, 1], dtype=object)
    with pytest.raises(ValueError, match=r"^y contains a missing label \(pd\.NA at row 1\)"):
        solve(X6, y, task="classification", depth=1)


WEIGHTS = {
    "float": np.array([1.0, 2.0, 1.0, 1.0, 0.5, 1.0]),
    "object numbers": np.array([1, 2.0, 1, 1, 0.5, 1], dtype=object),
    "int": np.array([1, 2, 1, 1, 3, 1]),
    "bool": np.array([True, True, False, True, True, True]),
    "scalar": 2.0,
    "list": [1, 2, 1, 1, 0.5, 1],
    "pandas Series": pd.Series([1.0, 2.0, 1.0, 1.0, 0.5, 1.0]),
    "object with a string": np.array([1, "a", 1, 1, 1, 1], dtype=object),
    "object with None": np.array([1, None, 1, 1, 1, 1], dtype=object),
    "strings": np.array(["1"] * 6),
    "complex": np.ones(6) + 1j,
    "datetime64": np.arange(6).astype("datetime64[D]"),
}


@pytest.mark.parametrize("case", list(WEIGHTS))
def test_solve_and_estimator_accept_the_same_weights(case):
    """Object-dtype weights were accepted by `solve` and refused by the estimators;
    now both accept exactly the same inputs, and give the same objective."""
    w = WEIGHTS[case]

    def outcome(fit):
        try:
            return "accepted", fit()
        except ValueError as err:
            return "refused", str(err).split(";")[0]

    solved = outcome(lambda: solve(X6, Y6, task="classification", depth=1,
                                   sample_weight=w).objective)
    fitted = outcome(lambda: OptimalTreeClassifier(max_depth=1).fit(
        X6, Y6, sample_weight=w).objective_)
    assert solved[0] == fitted[0], (solved, fitted)
    if solved[0] == "accepted":
        assert solved[1] == fitted[1]
    else:
        assert solved[1].startswith("sample_weight") and solved == fitted
    expect_accepted = case in ("float", "object numbers", "int", "bool", "scalar", "list",
                               "pandas Series")
    assert (solved[0] == "accepted") == expect_accepted, solved
