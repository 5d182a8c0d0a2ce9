"""Depth 3 specifics: anytime behaviour under a time limit, and repeatability."""

import time

import numpy as np

from qbnb_jax import solve


def _noisy_problem(n=3000, p=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0.3) ^ (rng.random(n) < 0.2)).astype(int)
    return X, y


def test_depth3_time_limit_returns_a_bracket():
    X, y = _noisy_problem()
    limit = 1.0
    start = time.perf_counter()
    res = solve(X, y, task="classification", depth=3, time_limit=limit)
    elapsed = time.perf_counter() - start
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective
    assert np.isfinite(res.gap) and res.gap >= 0
    assert res.tree.max_depth <= 3
    # the limit is checked before every subtree solve; one depth-2 solve of this size
    # takes well under a second, so the overrun is bounded by that, not by the search
    assert elapsed < limit * 1.1 + 3.0


def test_depth3_regression_time_limit():
    X, y = _noisy_problem(n=2000, p=5, seed=1)
    target = X[:, 2] * 3 + y + np.sin(X[:, 3])
    res = solve(X, target, task="regression", depth=3, time_limit=0.5)
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective


def test_depth3_is_deterministic():
    X, y = _noisy_problem(n=300, p=3, seed=2)
    first = solve(X, y, task="classification", depth=3)
    second = solve(X, y, task="classification", depth=3)
    assert first.status == second.status == "optimal"
    assert first.objective == second.objective
    for name in ("feature", "threshold", "children_left", "children_right", "value"):
        np.testing.assert_array_equal(
            getattr(first.tree, name), getattr(second.tree, name), err_msg=name
        )
