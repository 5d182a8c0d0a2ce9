"""Robustness: bad input, degenerate input, numerical safety, determinism, time limits.

1. Bad input raises a `ValueError` that names the problem, from `qbnb_jax.solve`, from
   the estimators' `fit` and from `qbnb_jax.load_tree`; the command line answers it with
   exit code 2 and one line on stderr. The error must come from validation, never from
   deep inside JAX (no frame of the traceback is in the `jax` package).
2. Degenerate but valid input (one sample, one class, constant features, constant
   targets) gives the single-leaf tree, as scikit-learn's trees do.
3. Regression with a large offset, a tiny variance or very unequal weights still finds
   the brute-force optimum (tests/helpers.py), up to a tolerance derived below.
4. The same input gives the same tree, in one process and in fresh processes.
5. `time_limit` stops the search within the limit plus one iteration.

Shapes are kept to n <= 64 (one padded bucket), p in {1, 2, 3}, 1-3 classes and 1-2
targets, shared with tests/test_properties.py, except for the time-limit problem.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import pathlib
import subprocess
import sys
import time
import warnings

import jax
import numpy as np
import pytest
from helpers import _encode_targets, brute_force, leaf_losses, partition_loss, random_problem
from sklearn.exceptions import ConvergenceWarning
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor, load_tree, save_tree, solve
from qbnb_jax._cli import main
from qbnb_jax._search.solve import SUPPORTED_DEPTHS

TOO_DEEP = max(SUPPORTED_DEPTHS) + 1  # the first depth `solve` does not accept

ROOT = pathlib.Path(__file__).resolve().parents[1]

# A tiny valid problem every bad-input case perturbs (n=6, p=2, two classes).
X6 = np.arange(12.0).reshape(6, 2)
Y6 = np.array([0, 0, 0, 1, 1, 1])
R6 = np.array([0.0, 0.5, 0.25, 3.0, 3.5, 3.25])


def no_jax_frames(excinfo) -> bool:
    """True when no frame of the exception's traceback lies inside the jax package."""
    return not any(
        f"{os.sep}jax{os.sep}" in str(entry.path) or f"{os.sep}jaxlib{os.sep}" in str(entry.path)
        for entry in excinfo.traceback
    )


def replace(arr, index, value):
    out = np.array(arr, dtype=np.float64)
    out[index] = value
    return out


# --------------------------------------------------------------------------------------
# 1. bad input: solve
# --------------------------------------------------------------------------------------

# name -> (keyword overrides for solve(X, y, task=..., ...), message pattern)
SOLVE_BAD = {
    "inf in X": ({"X": replace(X6, (0, 0), np.inf)}, r"X contains infinity.*row 0"),
    "-inf in X": ({"X": replace(X6, (5, 1), -np.inf)}, r"X contains infinity.*row 5"),
    "NaN in y (classification)": (
        {"y": np.array([0, np.nan, 0, 1, 1, 1])},
        r"y contains NaN",
    ),
    "inf label": ({"y": np.array([0, np.inf, 0, 1, 1, 1])}, r"y contains NaN or infinity"),
    "None label": (
        {"y": np.array(["a", None, "a", "b", "b", "b"], dtype=object)},
        r"y contains a missing label \(None at row 1\)",
    ),
    "NaN label in object y": (
        {"y": np.array([0, np.nan, 0, 1, 1, 1], dtype=object)},
        r"y contains a missing label \(NaN at row 1\)",
    ),
    "complex labels": ({"y": Y6 + 1j}, r"complex"),
    "2-D classification y": ({"y": np.column_stack([Y6, Y6])}, r"y must be 1-D"),
    "NaN in y (regression)": (
        {"task": "regression", "y": replace(R6, 1, np.nan)},
        r"y contains NaN or infinity",
    ),
    "inf in y (regression)": (
        {"task": "regression", "y": replace(R6, 1, np.inf)},
        r"y contains NaN or infinity",
    ),
    "string targets": ({"task": "regression", "y": np.array(["a"] * 6)}, r"must be numeric"),
    "targets overflow": (
        {"task": "regression", "y": np.array([0.0, 0, 0, 1, 1, 1]) * 1e200},
        r"too large for float64",
    ),
    "empty X": ({"X": np.zeros((0, 2)), "y": np.zeros(0, dtype=int)}, r"X is empty"),
    "X without features": ({"X": np.zeros((6, 0))}, r"0 features"),
    "X and y lengths differ": ({"y": Y6[:5]}, r"X has 6 samples but y has 5"),
    "X and y lengths differ (regression)": (
        {"task": "regression", "y": R6[:4]},
        r"X has 6 samples but y has 4",
    ),
    "1-D X": ({"X": np.arange(6.0)}, r"X must be 2-D.*reshape\(-1, 1\)"),
    "3-D X": ({"X": X6[:, :, None]}, r"X must be 2-D"),
    "scalar X": ({"X": 3.0}, r"X must be 2-D"),
    "string X": ({"X": X6.astype(str)}, r"X must be numeric"),
    "object X with a string": (
        {"X": np.array([[1, "b"]] * 6, dtype=object)},
        r"X must be numeric",
    ),
    "ragged X": ({"X": [[1.0, 2.0], [3.0]] * 3}, r"X could not be read as an array"),
    "complex X": ({"X": X6 + 1j}, r"real-valued"),
    "negative weight": ({"sample_weight": replace(np.ones(6), 3, -1.0)}, r"non-negative"),
    "NaN weight": ({"sample_weight": replace(np.ones(6), 3, np.nan)}, r"NaN or infinity"),
    "inf weight": ({"sample_weight": replace(np.ones(6), 3, np.inf)}, r"NaN or infinity"),
    "all-zero weights": ({"sample_weight": np.zeros(6)}, r"zero everywhere"),
    "weights sum to inf": ({"sample_weight": np.full(6, 1e308)}, r"sum to infinity"),
    "weights too short": ({"sample_weight": np.ones(5)}, r"shape \(6,\); got \(5,\)"),
    "weights 2-D": ({"sample_weight": np.ones((6, 1))}, r"shape \(6,\); got \(6, 1\)"),
    "string weights": ({"sample_weight": np.array(["1"] * 6)}, r"sample_weight must be numeric"),
    "unknown task": ({"task": "ranking"}, r"Unknown task 'ranking'"),
    "task None": ({"task": None}, r"Unknown task None"),
    "unknown bound": ({"bound": "w9"}, r"Unknown bound 'w9'"),
    "s=1": ({"s": 1}, r"s must be an integer from 2 to \d+; got 1"),
    "s=2.5": ({"s": 2.5}, r"s must be an integer from 2"),
    "s huge": ({"s": 10**6}, r"s must be an integer from 2 to \d+; got 1000000"),
    "s=True": ({"s": True}, r"s must be an integer"),
    "time_limit=-1": ({"time_limit": -1}, r"time_limit must be a positive number.*-1"),
    "time_limit=0": ({"time_limit": 0}, r"time_limit must be a positive number"),
    "time_limit=NaN": ({"time_limit": float("nan")}, r"time_limit must be a positive number"),
    "time_limit='1'": ({"time_limit": "1"}, r"time_limit must be a positive number"),
    "depth=0": ({"depth": 0}, r"depth=0 is not supported"),
    "depth too large": ({"depth": TOO_DEEP}, rf"depth={TOO_DEEP} is not supported"),
    "depth=-1": ({"depth": -1}, r"depth=-1 is not supported"),
    "depth=2.5": ({"depth": 2.5}, r"depth must be an integer; got 2.5"),
    "depth=2.0": ({"depth": 2.0}, r"depth must be an integer"),
    "depth=True": ({"depth": True}, r"depth must be an integer"),
    "depth='2'": ({"depth": "2"}, r"depth must be an integer"),
    "initial_capacity=0": ({"initial_capacity": 0}, r"initial_capacity"),
}


@pytest.mark.parametrize("case", list(SOLVE_BAD))
def test_solve_rejects_bad_input(case):
    overrides, match = SOLVE_BAD[case]
    kwargs = {"X": X6, "y": Y6, "task": "classification", **overrides}
    X, y = kwargs.pop("X"), kwargs.pop("y")
    if kwargs["task"] == "regression" and "y" not in overrides:
        y = R6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way to the error either
        with pytest.raises(ValueError, match=match) as info:
            solve(X, y, **kwargs)
    assert type(info.value) is ValueError, case
    assert no_jax_frames(info), case
    assert "\n" not in str(info.value), case


# --------------------------------------------------------------------------------------
# 1. bad input: estimators
# --------------------------------------------------------------------------------------

# name -> (X, y, sample_weight, params, message); y None means the default labels/targets.
ESTIMATOR_BAD = {
    "inf in X": (replace(X6, (2, 1), np.inf), None, None, {}, r"Input X contains infinity"),
    "NaN in y": (X6, "nan", None, {}, r"Input y contains NaN|Input contains NaN"),
    "empty X": (np.zeros((0, 2)), "empty", None, {}, r"0 sample\(s\)"),
    "X and y lengths differ": (X6, "short", None, {}, r"inconsistent numbers of samples"),
    "1-D X": (np.arange(6.0), None, None, {}, r"Expected 2D array, got 1D array"),
    "non-numeric strings in X": (
        np.array([["a", "b"]] * 6),
        None,
        None,
        {},
        r"could not convert string to float",
    ),
    "object X with a word": (
        np.array([[1, "b"]] * 6, dtype=object),
        None,
        None,
        {},
        r"could not convert string to float",
    ),
    "negative weight": (X6, None, replace(np.ones(6), 1, -1), {}, r"Negative values"),
    "NaN weight": (X6, None, replace(np.ones(6), 1, np.nan), {}, r"NaN or infinity"),
    "all-zero weights": (X6, None, np.zeros(6), {}, r"zero everywhere"),
    "weights too short": (X6, None, np.ones(5), {}, r"sample_weight.shape == \(5,\)"),
    "s=1": (X6, None, None, {"s": 1}, r"'s' parameter"),
    "time_limit=-1": (X6, None, None, {"time_limit": -1}, r"'time_limit' parameter"),
    "bound='w9'": (X6, None, None, {"bound": "w9"}, r"'bound' parameter"),
    "max_depth=0": (X6, None, None, {"max_depth": 0}, r"'max_depth' parameter"),
    "max_depth too large": (
        X6,
        None,
        None,
        {"max_depth": TOO_DEEP},
        r"'max_depth' parameter .* in the range \[1, 8\]",  # the solver's depths
    ),
    "max_depth=2.5": (X6, None, None, {"max_depth": 2.5}, r"'max_depth' parameter"),
}


@pytest.mark.parametrize("Est", [OptimalTreeClassifier, OptimalTreeRegressor])
@pytest.mark.parametrize("case", list(ESTIMATOR_BAD))
def test_estimator_fit_rejects_bad_input(Est, case):
    X, y, w, params, match = ESTIMATOR_BAD[case]
    base = Y6 if Est is OptimalTreeClassifier else R6
    y = {
        None: base,
        "nan": replace(base, 1, np.nan),
        "empty": base[:0],
        "short": base[:5],
    }[y]
    with pytest.raises(ValueError, match=match) as info:
        Est(**params).fit(X, y, sample_weight=w)
    assert no_jax_frames(info), case


def test_classifier_rejects_unsortable_and_infinite_labels():
    with pytest.raises(ValueError, match="cannot be sorted"):
        OptimalTreeClassifier().fit(X6, np.array(["a", None, "a", "b", "b", "b"], dtype=object))
    with pytest.raises(ValueError, match="infinity"):
        OptimalTreeClassifier().fit(X6, np.array([0, np.inf, 0, 1, 1, 1]))


def test_solve_rejects_continuous_labels():
    """Non-integer float labels are a regression target given as classes (every value
    its own class): refused, as scikit-learn's classifiers do; integral floats are
    classes."""
    import qbnb_jax

    y = np.array([0.0, 0.5, 1.0, 1.0, 2.0, 2.0])
    refusal = r"continuous .* 0.5 at row 1\): use task='regression'"
    for call in (lambda: qbnb_jax.solve(X6, y, task="classification"),
                 lambda: qbnb_jax.solve_batch(X6, y, np.ones((2, 6)), task="classification")):
        with pytest.raises(ValueError, match=refusal):
            call()
    assert qbnb_jax.solve(X6, np.round(y), task="classification").status == "optimal"


def test_estimator_accepts_infinite_time_limit():
    """`time_limit=inf` passes the estimator's constraint "(0, inf]": it means no limit."""
    clf = OptimalTreeClassifier(time_limit=float("inf")).fit(X6, Y6)
    assert clf.status_ == "optimal" and clf.objective_ == 0.0


# --------------------------------------------------------------------------------------
# 1. bad input: load_tree and the command line
# --------------------------------------------------------------------------------------


@pytest.fixture
def saved_tree(tmp_path):
    path = tmp_path / "tree.json"
    save_tree(OptimalTreeClassifier(max_depth=1).fit(X6, Y6), path)
    return path


@pytest.mark.parametrize(
    "text, match",
    [
        ("", r"not a valid JSON file"),
        ('{"format": "qbnb_jax.tree"', r"not a valid JSON file"),
        ("[1, 2]", r"not a qbnb_jax tree file"),
        ('{"format": "qbnb_jax.tree", "version": 1}', r"unknown task"),
        (
            '{"format": "qbnb_jax.tree", "version": 1, "task": "regression", "tree": []}',
            r"'tree'",
        ),
    ],
)
def test_load_tree_rejects_malformed_json(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        load_tree(path)
    assert str(path) in str(info.value)


def test_load_tree_rejects_broken_trees(saved_tree):
    data = json.loads(saved_tree.read_text())
    for mutate, match in [
        (lambda t: t["threshold"].__setitem__(0, None), "no finite threshold"),
        (lambda t: t["children_left"].__setitem__(1, 0), "Malformed tree"),
        (lambda t: t["feature"].__setitem__(0, -5), "negative split feature"),
        (lambda t: t["weighted_n_node_samples"].__setitem__(0, -1.0), "non-negative"),
    ]:
        bad = json.loads(json.dumps(data))
        mutate(bad["tree"])
        saved_tree.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            load_tree(saved_tree)


def write(path: pathlib.Path, text: str | bytes) -> str:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def cli_cases(tmp: pathlib.Path, tree: str) -> dict[str, tuple[list[str], str]]:
    ok = write(tmp / "ok.csv", "a,b,y,w\n1,2,0,1\n2,3,0,1\n3,4,1,2\n4,5,1,1\n")
    counter = itertools.count()

    def fit(text, *extra):
        path = write(tmp / f"data{next(counter)}.csv", text)
        return ["fit", path, "--target", "y", "-q", *extra]

    data = json.loads(tree)
    data["tree"]["feature"][0] = 10**30  # too large for the int32 node arrays
    huge = json.dumps(data)
    head = "a,b,y,w\n"
    good_rows = "2,3,0,1\n3,4,1,1\n"
    return {
        "inf in X": (fit(head + "inf,2,0,1\n" + good_rows), "non-finite value 'inf'"),
        "NaN in y": (fit(head + "1,2,NaN,1\n" + good_rows), "target column 'y'"),
        "missing y": (fit(head + "1,2,,1\n" + good_rows), "missing value"),
        "non-numeric X": (fit(head + "1,two,0,1\n" + good_rows), "non-numeric value 'two'"),
        "empty file": (fit(""), "empty"),
        "header only (empty X)": (fit(head), "no data rows"),
        "row lengths differ": (fit(head + "1,2,0\n" + good_rows), "fields"),
        "no feature column": (
            ["fit", write(tmp / "only.csv", "y\n0\n1\n"), "--target", "y", "-q"],
            "no feature columns",
        ),
        "negative weight": (
            fit(head + "1,2,0,-1\n" + good_rows, "--weight", "w"),
            "negative value",
        ),
        "NaN weight": (fit(head + "1,2,0,nan\n" + good_rows, "--weight", "w"), "non-finite"),
        "all-zero weights": (
            fit(head + "1,2,0,0\n2,3,1,0\n", "--weight", "w"),
            "zero everywhere",
        ),
        "non-numeric weight": (
            fit(head + "1,2,0,heavy\n" + good_rows, "--weight", "w"),
            "'heavy'",
        ),
        "unknown task": (["fit", ok, "--target", "y", "--task", "ranking"], "--task"),
        "unknown bound": (["fit", ok, "--target", "y", "--bound", "w9"], "--bound"),
        "time limit -1": (["fit", ok, "--target", "y", "--time-limit", "-1"], "--time-limit"),
        "time limit 0": (["fit", ok, "--target", "y", "--time-limit", "0"], "--time-limit"),
        "depth 0": (["fit", ok, "--target", "y", "--depth", "0"], "--depth"),
        "depth too large": (
            ["fit", ok, "--target", "y", "--depth", str(TOO_DEEP), "-q"],
            "--depth: must be from 1 to 8",
        ),
        "depth 2.5": (["fit", ok, "--target", "y", "--depth", "2.5"], "--depth"),
        "tree not JSON": (["export", write(tmp / "t1.json", "{oops")], "not a valid JSON"),
        "tree JSON list": (["export", write(tmp / "t2.json", "[]")], "not a qbnb_jax tree"),
        "tree binary": (["export", write(tmp / "t3.json", b"\xff\xfe\x00")], "not a UTF-8"),
        "tree huge index": (["export", write(tmp / "t4.json", huge)], "alformed tree"),
        "predict with a CSV as tree": (["predict", ok, ok], "not a valid JSON"),
    }


def test_cli_bad_input_exits_2_with_one_line(tmp_path, saved_tree, capsys):
    failures = []
    for case, (argv, needle) in cli_cases(tmp_path, saved_tree.read_text()).items():
        code = main(argv)
        err = capsys.readouterr().err
        if code != 2 or err.count("\n") != 1 or "Traceback" in err or needle not in err:
            failures.append((case, code, err))
    assert not failures, failures


# --------------------------------------------------------------------------------------
# 2. degenerate but valid input
# --------------------------------------------------------------------------------------


def check_trivial(est, sk, X, y, want: float, depth: int, sklearn_leaf: bool = True) -> None:
    """A single leaf with objective `want` (the brute force's), predicting like sklearn."""
    assert est.status_ == "optimal"
    assert est.get_n_leaves() == 1 and est.get_depth() == 0
    assert est.objective_ == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert est.lower_bound_ <= est.objective_ and est.gap_ >= 0
    sk_pred, pred = sk.predict(X), est.predict(X)
    if isinstance(est, OptimalTreeClassifier):
        np.testing.assert_array_equal(pred, sk_pred)
        np.testing.assert_allclose(est.predict_proba(X), sk.predict_proba(X), rtol=1e-12)
    else:
        np.testing.assert_allclose(pred, sk_pred, rtol=1e-12)
    if sklearn_leaf:
        assert sk.get_n_leaves() == 1  # scikit-learn agrees that the tree is a leaf


@pytest.mark.parametrize("depth", [1, 2])
def test_single_sample(depth):
    X = np.array([[0.5, -2.0]])
    clf = OptimalTreeClassifier(max_depth=depth).fit(X, ["only"])
    check_trivial(
        clf, DecisionTreeClassifier(max_depth=depth).fit(X, ["only"]), X, ["only"], 0.0, depth
    )
    reg = OptimalTreeRegressor(max_depth=depth).fit(X, [4.25])
    check_trivial(reg, DecisionTreeRegressor(max_depth=depth).fit(X, [4.25]), X, [4.25], 0.0, depth)
    assert reg.predict([[100.0, 100.0]])[0] == 4.25
    # one positive-weight sample among zero-weight ones
    X3 = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])
    res = solve(
        X3,
        np.array([0, 1, 1]),
        task="classification",
        depth=depth,
        sample_weight=np.array([0.0, 2.0, 0.0]),
    )
    assert res.objective == 0.0 and res.tree.n_leaves == 1 and res.status == "optimal"


@pytest.mark.parametrize("depth", [1, 2])
def test_single_class(depth):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(20, 2))
    y = np.array(["a"] * 20)
    w = rng.integers(0, 3, size=20).astype(float)
    w[0] = 1.0
    clf = OptimalTreeClassifier(max_depth=depth).fit(X, y, sample_weight=w)
    sk = DecisionTreeClassifier(max_depth=depth).fit(X, y, sample_weight=w)
    check_trivial(clf, sk, X, y, 0.0, depth)
    assert list(clf.classes_) == ["a"]
    res = solve(X, y, task="classification", depth=depth, bound="w2")
    assert res.objective == 0.0 and res.lower_bound == 0.0 and res.tree.n_leaves == 1


@pytest.mark.parametrize("depth", [1, 2])
def test_constant_features(depth):
    rng = np.random.default_rng(3)
    X = np.tile([[1.5, -3.0, 0.0]], (30, 1))
    y = rng.integers(0, 3, size=30)
    w = rng.uniform(0.5, 2.0, size=30)
    for weights in (None, w):
        want = brute_force(X, y, weights, task="classification", depth=depth)
        clf = OptimalTreeClassifier(max_depth=depth).fit(X, y, sample_weight=weights)
        sk = DecisionTreeClassifier(max_depth=depth).fit(X, y, sample_weight=weights)
        check_trivial(clf, sk, X, y, want, depth)
    Y = rng.normal(size=(30, 2))
    for weights in (None, w):
        for targets in (Y[:, 0], Y):
            want = brute_force(X, targets, weights, task="regression", depth=depth)
            reg = OptimalTreeRegressor(max_depth=depth).fit(X, targets, sample_weight=weights)
            sk = DecisionTreeRegressor(max_depth=depth).fit(X, targets, sample_weight=weights)
            check_trivial(reg, sk, X, targets, want, depth)


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("value", [0.1, 1 / 3, -7.25, 1e8 + 0.1, 1e-300])
def test_constant_targets(depth, value):
    """Constant targets, with fractional weights too: round-off in the weighted mean must
    not make some split look better than the single leaf."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(30, 3))
    y = np.full(30, value)
    for weights in (None, rng.uniform(0.1, 5.0, size=30)):
        reg = OptimalTreeRegressor(max_depth=depth).fit(X, y, sample_weight=weights)
        sk = DecisionTreeRegressor(max_depth=depth).fit(X, y, sample_weight=weights)
        # scikit-learn itself splits 1e8 + 0.1 with fractional weights (round-off in its
        # impurity); its predictions are still the constant.
        check_trivial(reg, sk, X, y, 0.0, depth, sklearn_leaf=value != 1e8 + 0.1)
        assert reg.objective_ == 0.0
        assert np.all(reg.predict(X) == value)
        res = solve(
            X, np.column_stack([y, -y]), task="regression", depth=depth, sample_weight=weights
        )
        assert res.objective == 0.0 and res.tree.n_leaves == 1
        np.testing.assert_array_equal(res.tree.value, [[value, -value]])


def test_identical_rows_with_different_labels():
    X = np.ones((4, 2))
    res = solve(
        X,
        np.array([0, 1, 1, 0]),
        task="classification",
        depth=2,
        sample_weight=np.array([1.0, 2.0, 0.5, 3.0]),
    )
    assert res.objective == pytest.approx(2.5) and res.tree.n_leaves == 1


# --------------------------------------------------------------------------------------
# 3. numerical safety
# --------------------------------------------------------------------------------------


def root_sse(X, y, w) -> float:
    Y = _encode_targets(y, "regression")
    w = np.ones(len(X)) if w is None else w
    return float(leaf_losses(np.ones((1, len(X)), bool), Y, w, "regression")[0])


def regression_tolerance(X, y, w, want: float) -> float:
    """How far the solver's objective may be from the brute force's.

    Both evaluate a given tree in float64 with two-pass means, so they agree to a few
    ulps of the root SSE (every leaf's centred sum of squares is at most the root's).
    The solver *chooses* among trees with one-pass sums S2 - |S1|^2/S0 of targets
    centred once, whose error is about n * eps * (root SSE) ~ 1e-14 of it for n <= 40;
    it prunes with a relative slack of 1e-9 |U| (docs/design.md, "Bounds and why they
    are valid"). Hence 1e-9 |optimum| + 1e-12 (root SSE): a bound relative to the
    problem's own scale (no `max(1, .)`: with y * 1e-8 the whole SSE is ~1e-16 and an
    absolute 1e-12 would accept any tree). Observed errors are below 1e-15 of the root
    SSE. One absolute term remains: when the optimum is a pure leaf (SSE 0), the float64
    mean is still off by ~eps max|y|, so a reference SSE of W (eps max|y|)^2 is
    round-off (8 eps for margin).
    """
    w = np.ones(len(X)) if w is None else w
    Y = np.asarray(y, dtype=np.float64).reshape(len(X), -1)[w > 0]
    roundoff = w.sum() * (8 * np.finfo(np.float64).eps * np.abs(Y).max()) ** 2
    return 1e-9 * abs(want) + 1e-12 * root_sse(X, y, w) + roundoff


def regression_cases():
    """(name, X, y, w): 6 base problems, each shifted, shrunk, grown and reweighted."""
    for seed in range(6):
        rng = np.random.default_rng(1000 + seed)
        p, m = ((1, 1), (2, 2), (3, 1), (2, 1), (3, 2), (1, 2))[seed]
        P = random_problem(rng, "regression", int(rng.integers(8, 41)), p, m, weights="ones")
        y = P.y
        yield f"offset-{seed}", P.X, y + 1e8, None
        yield f"tiny-{seed}", P.X, y * 1e-8, None
        yield f"tiny+offset-{seed}", P.X, y * 1e-8 + 3.0, None
        yield f"huge-{seed}", P.X, y * 1e8, None
        w = 10.0 ** rng.uniform(-6, 6, size=len(y))
        w[rng.random(len(y)) < 0.2] = 0.0
        w[0] = 1e6
        yield f"weights-{seed}", P.X, y, w
        yield f"weights+offset-{seed}", P.X, y + 1e8, w


@pytest.mark.parametrize("depth", [1, 2])
def test_regression_numerical_safety(depth):
    failures = []
    for name, X, y, w in regression_cases():
        want = brute_force(X, y, w, task="regression", depth=depth)
        res = solve(X, y, task="regression", depth=depth, sample_weight=w)
        tol = regression_tolerance(X, y, w, want)
        ww = np.ones(len(X)) if w is None else w
        own = partition_loss(res.tree.apply(X), y, ww, "regression")
        ok = (
            res.status == "optimal"
            and abs(res.objective - want) <= tol
            and abs(own - res.objective) <= tol
            and res.lower_bound <= want + tol
            and np.isfinite(res.tree.value).all()
        )
        if not ok:
            failures.append((name, res.objective, want, tol, res.lower_bound))
    assert not failures, failures


@pytest.mark.parametrize("depth", [1, 2])
def test_classification_unequal_weights(depth):
    """Weights 1e-6 .. 1e6: float class weights, compared at 1e-12 of the total weight
    (the solver prunes with that slack; its sums are exact to ~n eps of the total)."""
    failures = []
    for seed in range(6):
        rng = np.random.default_rng(2000 + seed)
        p, k = ((1, 2), (2, 3), (3, 2), (2, 2), (3, 3), (1, 3))[seed]
        P = random_problem(rng, "classification", int(rng.integers(8, 41)), p, k, weights="ones")
        w = 10.0 ** rng.uniform(-6, 6, size=P.n)
        want = brute_force(P.X, P.y, w, task="classification", depth=depth)
        res = solve(P.X, P.y, task="classification", depth=depth, sample_weight=w)
        tol = 1e-9 * want + 1e-12 * w.sum()
        if not (res.status == "optimal" and abs(res.objective - want) <= tol):
            failures.append((seed, res.objective, want, tol))
    assert not failures, failures


# --------------------------------------------------------------------------------------
# 4. determinism
# --------------------------------------------------------------------------------------

DETERMINISM_SCRIPT = r"""
import json, sys
import numpy as np
if sys.argv[1] not in sys.path:
    sys.path.insert(0, sys.argv[1])
from helpers import random_problem
from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor, solve

def problems():
    # ties on purpose: an integer grid, duplicated columns and rows, and fractional weights
    for seed, (task, p, k) in enumerate([("classification", 3, 3), ("regression", 3, 2),
                                          ("classification", 2, 2), ("regression", 1, 1)]):
        rng = np.random.default_rng(seed)
        P = random_problem(rng, task, 40, p, k, weights="float")
        X = np.column_stack([P.X, P.X[:, :1]])[:, :3]
        yield task, X, P.y, P.w

out = []
for task, X, y, w in problems():
    for depth in (1, 2):
        res = solve(X, y, task=task, depth=depth, sample_weight=w)
        Est = OptimalTreeClassifier if task == "classification" else OptimalTreeRegressor
        est = Est(max_depth=depth).fit(X, y, sample_weight=w)
        out.append({"solve": res.tree.to_dict(), "objective": repr(res.objective),
                    "estimator": est.tree_.to_dict(), "est_objective": repr(est.objective_)})
print(json.dumps(out))
"""


def run_determinism_script_in_process() -> list:
    namespace: dict = {}
    buf = io.StringIO()
    argv = sys.argv
    try:
        sys.argv = ["-", str(ROOT / "tests")]
        with contextlib.redirect_stdout(buf):
            exec(compile(DETERMINISM_SCRIPT, "<determinism>", "exec"), namespace)
    finally:
        sys.argv = argv
    return json.loads(buf.getvalue())


def test_same_tree_every_run_in_one_process():
    """Repeated identical calls return identical arrays (`to_dict` and objective repr)."""
    first = run_determinism_script_in_process()
    second = run_determinism_script_in_process()
    assert first == second
    assert len(first) == 8


def test_same_tree_in_fresh_processes():
    """Two fresh interpreters (sharing the tests' compilation cache) print the same trees
    as this process. Both start at once: each mostly waits on imports and cache reads."""
    env = dict(os.environ)
    cache = jax.config.jax_compilation_cache_dir
    if cache:
        env["QBNB_JAX_CACHE_DIR"] = str(cache)
    cmd = [sys.executable, "-c", DETERMINISM_SCRIPT, str(ROOT / "tests")]
    procs = [
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT)
        )
        for _ in range(2)
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        outs.append(json.loads(out))
    assert outs[0] == outs[1]
    assert outs[0] == run_determinism_script_in_process()


def test_tie_breaking_rule():
    """The tie-breaking rule observed (and relied on by users reading trees):

    - `solve` returns the first optimum in its search order: at depth 1 the lowest
      feature index, then the lowest threshold; at depth 2 the greedy tree when it is
      optimal, else the first strictly better tree found, root features in increasing
      order and children by lowest feature index. So a duplicated column (a later
      copy of an earlier feature) is never used in place of the original.
    - Identical problems give identical trees whatever the row order: the estimators
      merge identical (x, y) rows and sort rows before solving, so permuting rows (or
      repeating a row instead of weighting it) changes nothing, for regression too,
      where float sums depend on the order of the rows.
    """
    for seed in range(8):
        rng = np.random.default_rng(seed)
        X = rng.integers(0, 3, size=(40, 3)).astype(float)
        y = rng.integers(0, 3, size=40)
        Xd = np.column_stack([X[:, :1], X[:, :1], X[:, 1:2]])  # column 1 copies column 0
        for depth in (1, 2):
            tree = solve(Xd, y, task="classification", depth=depth).tree
            assert not np.any(tree.feature == 1), (seed, depth, tree.feature)
            yr = X @ [1.0, 2.0, 0.5] + 0.1 * rng.normal(size=40)
            tree = solve(Xd, yr, task="regression", depth=depth).tree
            assert not np.any(tree.feature == 1), (seed, depth, tree.feature)
        perm = rng.permutation(40)
        for Est, target in ((OptimalTreeClassifier, y), (OptimalTreeRegressor, yr)):
            a = Est().fit(X, target)
            b = Est().fit(X[perm], target[perm])
            assert a.tree_.to_dict() == b.tree_.to_dict(), (seed, Est.__name__)
            assert a.objective_ == b.objective_


# --------------------------------------------------------------------------------------
# 5. time limit
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_problem():
    """n=20000, p=12 uniform features, pure-noise labels: pruning has nothing to hold
    on to, so a full solve takes many iterations."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(20000, 12))
    y = rng.integers(0, 2, size=20000)
    return X, y


@pytest.fixture(scope="module")
def short_limit(slow_problem):
    """`(full solve, limit)`: the unlimited solve of `slow_problem`, and a tenth of its
    warm time on this machine as the limit, so that a limited solve stops early on a
    fast machine (or a GPU) as on a slow one."""
    X, y = slow_problem
    kwargs = dict(task="classification", depth=2, bound="w0", s=2)
    solve(X, y, **kwargs)  # compiles
    start = time.perf_counter()
    full = solve(X, y, **kwargs)
    return full, (time.perf_counter() - start) / 10


def timed_solve(X, y, limit, **kwargs):
    """`solve` with a time limit, and the progress reports' `(iteration, elapsed)`."""
    reports: list[tuple[int, float]] = []
    res = solve(X, y, time_limit=limit,
                progress=lambda info: reports.append((info["iteration"], info["elapsed"])),
                **kwargs)
    return res, reports


def test_time_limit_stops_within_one_iteration(slow_problem, short_limit):
    """The search checks its clock before each iteration, so no iteration starts after
    the limit; the caller returns at the limit, mid-iteration or not (docs/design.md,
    "Anytime behaviour"), and what it reports are iterations begun before it. This
    holds however busy the machine is, unlike a bound on the wall time."""
    X, y = slow_problem
    full, limit = short_limit
    res, reports = timed_solve(X, y, limit, task="classification", depth=2, bound="w0", s=2)
    assert res.status == "time_limit"
    assert np.isfinite(res.gap) and res.gap >= 0
    assert res.lower_bound <= res.objective
    assert res.gap == pytest.approx(res.objective - res.lower_bound)
    # Zero iterations is allowed: presorting, the greedy tree and a first compile can
    # use up the limit on their own, and the search then stops before iterating.
    assert all(iteration <= res.stats["iterations"] for iteration, _ in reports), reports
    reported = sorted({iteration for iteration, _ in reports})
    assert reported == list(range(1, len(reported) + 1)), reports  # in order
    assert res.stats["iterations"] <= len(reported) + 1, reports  # one unfinished at most
    assert res.stats["iterations"] < full.stats["iterations"]  # it did stop early
    # the tree is a real depth-2 tree whose objective is its training loss
    pred = res.classes[res.tree.predict(X)]
    assert res.objective == np.sum(pred != y)


def test_estimator_time_limit(slow_problem, short_limit):
    X, y = slow_problem
    clf = OptimalTreeClassifier(time_limit=short_limit[1], bound="w0", s=2)
    with pytest.warns(ConvergenceWarning, match="time_limit"):
        clf.fit(X, y)
    assert clf.status_ == "time_limit"
    assert np.isfinite(clf.gap_) and clf.gap_ >= 0
    assert clf.lower_bound_ <= clf.objective_
    assert clf.objective_ == np.sum(clf.predict(X) != y)
    # the regressor, on a small problem with a limit that expires before the first check
    reg = OptimalTreeRegressor(time_limit=1e-9)
    with pytest.warns(ConvergenceWarning):
        reg.fit(X6, R6)
    assert reg.status_ == "time_limit" and reg.lower_bound_ <= reg.objective_


# --------------------------------------------------------------------------------------
# Regressions: bounds before the first iteration, thresholds between extreme values
# --------------------------------------------------------------------------------------


def test_lower_bound_is_finite_before_the_first_iteration():
    """A limit that expires before the first iteration still brackets the optimum:
    losses are never negative, so 0 is a valid lower bound (it was -inf, gap inf)."""
    for task, y in (("classification", Y6), ("regression", R6)):
        res = solve(X6, y, task=task, depth=2, time_limit=1e-9)
        assert res.status == "time_limit"
        assert res.lower_bound >= 0.0 and np.isfinite(res.gap), (task, res)


@pytest.mark.parametrize(
    "lo, hi",
    [(1.0 + 2.0**-52, 1.0 + 2.0**-51), (1e308, 1.7e308), (-1.7e308, -1e308), (0.0, 5e-324)],
    ids=["adjacent floats", "huge", "huge negative", "subnormal"],
)
@pytest.mark.parametrize("depth", [1, 2])
def test_thresholds_separate_extreme_values(lo, hi, depth):
    """(lo + hi) / 2 rounds onto hi for adjacent floats and overflows for huge values;
    either way `x <= t` would no longer separate lo from hi and the split would be lost."""
    X = np.array([[lo], [lo], [hi], [hi]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        res = solve(X, np.array([0, 0, 1, 1]), task="classification", depth=depth)
    assert res.objective == 0.0, res.tree.threshold
    assert lo <= res.tree.threshold[0] < hi
