"""Property-based tests: `solve` (and the estimators) against the brute force of
tests/helpers.py on problems drawn by hypothesis.

Each test draws n in 1..40 samples (1..16 at depth 3), p in {1, 2, 3} features whose
columns are small integer grids (many ties), rounded floats or constants, 2 or 3
classes or 1 or 2 targets, weights that are absent, small integers or fractions, with
zeros, and a bound among w0/w1/w2/l2. Shapes stay in a few buckets (n pads to 64, p, the
class/target count and the weight kind pick the kernels) so that JAX compiles little.

Checked for every example: status "optimal"; the objective equals the brute-force
optimum (exactly for integer-weight classification, else within 1e-9 relative plus
1e-12 of the problem's scale: the root loss); the lower bound is at most the optimum;
the gap is >= 0 and within the solver's documented pruning slack; the tree's depth is
at most the requested one and its own loss on the training data equals the objective.

The number of examples per test comes from the environment variable
`QBNB_HYPOTHESIS_EXAMPLES` (default 100, which keeps this module under half a minute on two
cores). For a long run:

    QBNB_HYPOTHESIS_EXAMPLES=10000 python -m pytest tests/test_properties.py

Depth 3 uses a quarter of the examples (the brute force is cubic in the splits) and is
skipped if `solve(depth=3)` raises ValueError "not supported". Float features are
rounded to 4 decimals and bounded by 1000, away from the midpoint-rounding corner case
of adjacent floats, which tests/test_robustness.py covers on its own.
Failing examples are saved in hypothesis' database (.hypothesis/, which hypothesis
git-ignores itself) and replayed first on the next run.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import _encode_targets, brute_force, leaf_losses, partition_loss, prediction_loss

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import (  # noqa: E402
    HealthCheck,
    given,
    settings,
    strategies as st,  # noqa: E402
)

from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor, solve  # noqa: E402

EXAMPLES = int(os.environ.get("QBNB_HYPOTHESIS_EXAMPLES", "100"))
BOUNDS = ("w0", "w1", "w2", "l2")
# The solver's pruning slack for float losses (docs/design.md, "Bounds and why they are
# valid"): LB > U + RTOL |U| + ATOL max(scale, 1). A returned gap may be up to that;
# twice leaves room for round-off.
RTOL, ATOL = 1e-9, 1e-12

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
SETTINGS_DEEP = settings(SETTINGS, max_examples=max(5, EXAMPLES // 4))


# --------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------


@st.composite
def feature_column(draw, n: int) -> np.ndarray:
    kind = draw(st.sampled_from(["grid", "grid", "float", "constant"]))
    if kind == "grid":  # small integer grid: many ties
        k = draw(st.integers(1, 5))
        values = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
        return np.asarray(values, dtype=np.float64)
    if kind == "float":
        elem = st.floats(
            -1e3, 1e3, allow_nan=False, allow_infinity=False, allow_subnormal=False
        ).map(lambda v: round(v, 4))
        return np.asarray(draw(st.lists(elem, min_size=n, max_size=n)), dtype=np.float64)
    return np.full(n, float(draw(st.integers(-3, 3))))


@st.composite
def sample_weights(draw, n: int) -> tuple[np.ndarray | None, bool]:
    """(weights or None, integral?): None, integers 0..3 or fractions, zeros included."""
    kind = draw(st.sampled_from(["none", "int", "float"]))
    if kind == "none":
        return None, True
    if kind == "int":
        w = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), float)
    else:
        elem = st.one_of(st.just(0.0), st.floats(0.01, 10.0).map(lambda v: round(v, 3)))
        w = np.asarray(draw(st.lists(elem, min_size=n, max_size=n)), float)
    if not np.any(w > 0):
        w[draw(st.integers(0, n - 1))] = 1.0
    integral = bool(np.all(w == np.round(w)))
    return w, integral


@st.composite
def problems(draw, task: str, max_n: int = 40):
    n = draw(st.integers(1, max_n))
    p = draw(st.sampled_from([1, 2, 3]))
    X = np.column_stack([draw(feature_column(n)) for _ in range(p)])
    if task == "classification":
        k = draw(st.sampled_from([2, 3]))
        codes = np.asarray(draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
        labels = np.array([-1, 4, 7])[:k]  # non-contiguous labels
        y = labels[codes]
    else:
        m = draw(st.sampled_from([1, 2]))
        integer = draw(st.booleans())
        if integer:  # tied targets
            elem = st.integers(-3, 3).map(float)
        else:
            elem = st.floats(-100, 100, allow_nan=False, allow_subnormal=False)
        y = np.asarray(draw(st.lists(elem, min_size=n * m, max_size=n * m))).reshape(n, m)
        if m == 1 and draw(st.booleans()):
            y = y[:, 0]
    w, integral = draw(sample_weights(n))
    bound = draw(st.sampled_from(BOUNDS))
    use_estimator = draw(st.booleans())
    return X, y, w, integral, bound, use_estimator


# --------------------------------------------------------------------------------------
# the check
# --------------------------------------------------------------------------------------


def root_loss(y, w, task) -> float:
    Y = _encode_targets(y, task)
    return float(leaf_losses(np.ones((1, len(w)), bool), Y, w, task)[0])


def mean_roundoff(y, w) -> float:
    """Absolute round-off of a float64 SSE when the true value is 0 (a pure leaf): the
    computed mean is off by ~eps max|y|, which adds W (eps max|y|)^2 (with a margin of 8
    on eps). Without it, a leaf holding one sample of target 3 and weight 6.266 has a
    brute-force SSE of 1.2e-30 while the solver returns exactly 0."""
    Y = np.asarray(y, dtype=np.float64).reshape(len(w), -1)[w > 0]
    return float(w.sum() * (8 * np.finfo(np.float64).eps * np.abs(Y).max()) ** 2)


def check(task: str, depth: int, X, y, w, integral: bool, bound: str, use_estimator: bool,
          route: str = "recursion"):
    n = X.shape[0]
    ww = np.ones(n) if w is None else w
    want = brute_force(X, y, w, task=task, depth=depth)
    exact = task == "classification" and integral
    scale = float(ww.sum()) if task == "classification" else root_loss(y, ww, task)
    # Objectives: both sides evaluate a tree in float64 (see test_robustness.py,
    # regression_tolerance); the solver may also stop within its pruning slack.
    tol = 0.0 if exact else RTOL * abs(want) + ATOL * scale
    if task == "regression":
        tol += mean_roundoff(y, ww)
    gap_tol = 0.0 if exact else 2 * (RTOL * abs(want) + ATOL * max(scale, 1.0))

    try:
        if use_estimator:
            Est = OptimalTreeClassifier if task == "classification" else OptimalTreeRegressor
            est = Est(max_depth=depth, bound=bound).fit(X, y, sample_weight=w)
            objective, lower, gap = est.objective_, est.lower_bound_, est.gap_
            status, tree, pred = est.status_, est.tree_, est.predict(X)
        else:
            res = solve(X, y, task=task, depth=depth, sample_weight=w, bound=bound, route=route)
            objective, lower, gap, status = res.objective, res.lower_bound, res.gap, res.status
            tree = res.tree
            pred = res.classes[tree.predict(X)] if task == "classification" else tree.predict(X)
    except ValueError as err:
        # Inputs whose optimum float64 cannot hold (e.g. targets differing by 1e-195, a
        # squared error of 1e-390) are refused by design (docs/design.md, "Numerical
        # safety"); any other error is a failure.
        if "float64" not in str(err):
            raise
        hypothesis.reject()

    ctx = (task, depth, bound, use_estimator, route, objective, want, lower, gap)
    assert status == "optimal", ctx
    if exact:
        assert objective == want, ctx
        assert lower == objective and gap == 0.0, ctx
    else:
        assert abs(objective - want) <= tol, ctx
        assert lower <= want + tol, ctx
        assert 0.0 <= gap <= gap_tol, ctx
    assert lower <= objective, ctx
    assert tree.max_depth <= depth, ctx
    own = partition_loss(tree.apply(X), y, ww, task)
    assert abs(own - objective) <= max(tol, 1e-12 * max(scale, 1e-300)), (ctx, own)
    if task == "regression":
        pred = np.asarray(pred).reshape(n, -1)
    got = prediction_loss(pred, y, ww, task)
    assert abs(got - objective) <= max(tol, 1e-9 * scale), (ctx, got)


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("task", ["classification", "regression"])
@SETTINGS
@given(data=st.data())
def test_matches_brute_force(task, depth, data):
    check(task, depth, *data.draw(problems(task), label="problem"))


def _depth3_supported() -> bool:
    try:
        solve(np.array([[0.0], [1.0]]), np.array([0, 1]), task="classification", depth=3)
    except ValueError as err:
        if "not supported" in str(err):
            return False
        raise
    return True


DEPTH3 = _depth3_supported()


@pytest.mark.skipif(not DEPTH3, reason="solve does not support depth 3")
@pytest.mark.parametrize("task", ["classification", "regression"])
@SETTINGS_DEEP
@given(data=st.data())
def test_matches_brute_force_depth3(task, data):
    check(task, 3, *data.draw(problems(task, max_n=16), label="problem"))


@pytest.mark.parametrize("task", ["classification", "regression"])
@SETTINGS_DEEP
@given(data=st.data())
def test_matches_brute_force_depth3_appendix(task, data):
    """The paper's appendix route (bound W0, the functional API only)."""
    X, y, w, integral, _, _ = data.draw(problems(task, max_n=16), label="problem")
    check(task, 3, X, y, w, integral, "w0", False, route="appendix")
