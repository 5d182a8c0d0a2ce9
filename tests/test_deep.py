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


def test_tiny_memory_budget_still_optimal(monkeypatch):
    """Kernel chunks of one row per call and frontier blocks of two tuples (the two
    memory knobs at their smallest) change nothing but speed."""
    import sys

    import qbnb_jax._depth2 as depth2
    import qbnb_jax._runner as runner

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from helpers import brute_force

    rng = np.random.default_rng(5)
    X = rng.integers(0, 6, size=(40, 3)).astype(float)
    y = rng.integers(0, 3, size=40)
    reference = solve(X, y, task="classification", depth=2).objective
    monkeypatch.setattr(runner, "CHUNK_ELEMENTS", 1)
    monkeypatch.setattr(depth2, "MAX_CAPACITY", 2)
    monkeypatch.setattr(depth2, "MAX_BLOCK_ELEMENTS", 1)
    for depth in (2, 3):
        res = solve(X, y, task="classification", depth=depth, initial_capacity=1)
        assert res.status == "optimal"
        assert res.objective == brute_force(X, y, None, task="classification", depth=depth)
        if depth == 2:
            assert res.objective == reference
            assert max(res.stats["capacity_history"]) == 2 < max(res.stats["frontier_sizes"])


def test_depth4_time_limit_returns_a_bracket():
    X, y = _noisy_problem(n=1500, p=4, seed=3)
    limit = 0.5
    start = time.perf_counter()
    res = solve(X, y, task="classification", depth=4, time_limit=limit)
    elapsed = time.perf_counter() - start
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective and res.tree.max_depth <= 4
    assert elapsed < limit * 1.1 + 3.0  # nested searches check the same clock
