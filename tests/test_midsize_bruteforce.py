"""Mid-size problems against an independent enumeration of every depth-2 tree.

The small random problems of the other brute-force tests hold a few dozen rows at
most; the kernels and search change route with the size of a problem (lanes of
other widths from 2,048 padded samples, counts past int16 from 2**15 of weight,
classes past what a sample's class code holds, float weights of more than twelve
classes, the batched sweeps of many problems). Here `solve`, `solve_batch` and
`solve_many` run on problems of hundreds to a few thousand rows chosen to cross
those lines, and each objective is checked against `helpers.depth2_optimum`, which
enumerates every root split and every child stump. The slow tests draw many more, and
draw depth-3 problems of a few dozen rows against `helpers.depth3_optimum`.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BruteForce, depth2_optimum, depth3_optimum, random_problem, seed_of

from qbnb_jax import solve, solve_batch, solve_many


def _tolerance(reference: float) -> float:
    """Float sums in other orders than the enumeration's (docs/design.md, "Regression
    tolerance rule"); integer counts compare exactly."""
    return 1e-9 * max(abs(reference), 1.0)


def _feature(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.choice(["normal", "grid", "few", "rounded"])
    if kind == "normal":
        return rng.normal(size=n)
    if kind == "grid":
        return rng.integers(0, int(rng.integers(2, 40)), n).astype(np.float64)
    if kind == "few":
        return rng.choice(rng.normal(size=3), n)
    return np.round(rng.normal(size=n), 1)


def _data(rng: np.random.Generator, n: int, p: int, task: str, k: int):
    """Features of many kinds of ties; labels or targets with a depth-2 signal."""
    X = np.column_stack([_feature(rng, n) for _ in range(p)])
    signal = (X[:, 0] > 0).astype(int) + 2 * (X[:, -1] > np.median(X[:, -1]))
    if task == "classification":
        return X, np.where(rng.random(n) < 0.4, rng.integers(0, k, n), signal % k)
    Y = signal[:, None] * rng.normal(size=k) + rng.normal(size=(n, k))
    return X, (Y[:, 0] if k == 1 else Y)


def _weights(rng: np.random.Generator, n: int, kind: str) -> np.ndarray | None:
    if kind == "none":
        return None
    if kind == "int":
        return rng.integers(1, 5, n).astype(np.float64)
    if kind == "large":  # weighted counts past int16's range
        return rng.integers(1, 3000, n).astype(np.float64)
    if kind == "folds":
        w = (rng.random(n) < 0.7).astype(np.float64)
        w[0] = 1.0
        return w
    w = rng.uniform(0.01, 5.0, n)  # "frac": fractional, some zero
    w[rng.random(n) < 0.1] = 0.0
    w[0] = 1.0
    return w


def _check(result, X, y, w, task: str, depth: int = 2) -> None:
    """`result` optimal, its objective the enumeration's, over the rows of positive
    weight (the solver drops the others)."""
    keep = np.ones(len(X), dtype=bool) if w is None else w > 0
    oracle = depth2_optimum if depth == 2 else depth3_optimum
    reference = oracle(X[keep], y[keep], None if w is None else w[keep], task=task)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(reference, rel=0, abs=_tolerance(reference))


@pytest.mark.parametrize("depth, count, rows, features", [(2, 40, 12, 4), (3, 16, 8, 3)])
def test_enumeration_equals_the_recursive_brute_force(depth, count, rows, features):
    """The oracles themselves (`depth2_optimum`, `depth3_optimum`): equal to `BruteForce`
    on small problems of both tasks, with ties, constant features and zero, integer and
    fractional weights."""
    oracle = depth2_optimum if depth == 2 else depth3_optimum
    rng = np.random.default_rng(seed_of("midsize-oracle", depth))
    for it in range(count):
        task = "classification" if it % 2 == 0 else "regression"
        k = int(rng.integers(2, 5)) if task == "classification" else int(rng.integers(1, 3))
        P = random_problem(rng, task, int(rng.integers(1, rows)),
                           int(rng.integers(1, features)), k)
        want = BruteForce(P.X, P.y, P.w, task).best(depth)
        assert oracle(P.X, P.y, P.w, task=task) == pytest.approx(want, rel=1e-9, abs=1e-9)


SINGLE_CASES = [  # (task, n, p, classes or targets, weights)
    ("classification", 1200, 3, 40, "int"),  # more classes than a class code holds
    ("classification", 2100, 2, 5, "large"),  # narrow lanes' length, int32 counts
    ("classification", 1500, 3, 2, "frac"),
    ("classification", 900, 2, 13, "frac"),  # float weights past the float lanes
    ("classification", 1800, 2, 2, "large"),
    ("regression", 1200, 3, 3, "frac"),
    ("regression", 2500, 2, 1, "none"),  # exact weights: set sums read, not summed
    ("regression", 1000, 3, 2, "int"),
]


@pytest.mark.parametrize("task, n, p, k, weights", SINGLE_CASES)
def test_solve_mid_size(task, n, p, k, weights):
    rng = np.random.default_rng(seed_of("midsize-solve", task, n, p, k, weights))
    X, y = _data(rng, n, p, task, k)
    w = _weights(rng, n, weights)
    _check(solve(X, y, task=task, depth=2, sample_weight=w), X, y, w, task)


@pytest.mark.parametrize("task, k, weights", [("classification", 5, "folds"),
                                              ("classification", 2, "int"),
                                              ("regression", 2, "frac")])
def test_solve_batch_mid_size(task, k, weights):
    """40 weightings of one set (the lanes of a shared layout); four of them checked."""
    rng = np.random.default_rng(seed_of("midsize-batch", task, k, weights))
    n, problems = 500, 40
    X, y = _data(rng, n, 2, task, k)
    W = np.stack([_weights(rng, n, weights) for _ in range(problems)])
    results = solve_batch(X, y, W, task=task, depth=2)
    for q in rng.choice(problems, size=4, replace=False):
        _check(results[q], X, y, W[q], task)


@pytest.mark.parametrize("task, k", [("classification", 7), ("regression", 1)])
def test_solve_many_mid_size(task, k):
    """Sets of different sizes and widths, padded to one batch."""
    rng = np.random.default_rng(seed_of("midsize-many", task, k))
    datasets = []
    for n, p in ((300, 1), (700, 3), (1100, 2), (450, 2)):
        X, y = _data(rng, n, p, task, k)
        datasets.append((X, y, _weights(rng, n, "frac")))
    for result, (X, y, w) in zip(solve_many(datasets, task=task, depth=2), datasets):
        _check(result, X, y, w, task)


@pytest.mark.slow
@pytest.mark.parametrize("it", range(150))
def test_mid_size_random(it):
    """Random paths, sizes, classes (2 to 40), targets (1 to 3) and weights."""
    rng = np.random.default_rng(seed_of("midsize-random", it))
    task = str(rng.choice(["classification", "regression"]))
    k = (int(rng.choice([2, 3, 5, 8, 9, 12, 13, 20, 31, 32, 40])) if task == "classification"
         else int(rng.integers(1, 4)))
    n, p = int(rng.choice([150, 600, 1500, 3000])), int(rng.integers(1, 5))
    weights = str(rng.choice(["none", "int", "large", "folds", "frac"]))
    route = str(rng.choice(["solve", "batch"]))
    if route == "solve":
        X, y = _data(rng, n, p, task, k)
        w = _weights(rng, n, weights)
        _check(solve(X, y, task=task, depth=2, sample_weight=w), X, y, w, task)
        return
    n = min(n, 600)
    X, y = _data(rng, n, p, task, k)
    W = np.stack([_weights(rng, n, weights if weights != "none" else "folds")
                  for _ in range(int(rng.choice([3, 40])))])
    results = solve_batch(X, y, W, task=task, depth=2)
    q = int(rng.integers(len(W)))
    _check(results[q], X, y, W[q], task)


@pytest.mark.slow
@pytest.mark.parametrize("it", range(100))
def test_depth3_random(it):
    """Depth 3 on a few dozen rows: `solve` or `solve_batch`, classes 2 to 40, targets 1
    to 3, five weight kinds, against `helpers.depth3_optimum`."""
    rng = np.random.default_rng(seed_of("midsize-depth3", it))
    task = str(rng.choice(["classification", "regression"]))
    k = (int(rng.choice([2, 3, 5, 9, 13, 33, 40])) if task == "classification"
         else int(rng.integers(1, 4)))
    n, p = int(rng.integers(20, 49)), int(rng.integers(1, 4))
    weights = str(rng.choice(["none", "int", "large", "folds", "frac"]))
    X, y = _data(rng, n, p, task, k)
    if rng.random() < 0.5:
        w = _weights(rng, n, weights)
        result = solve(X, y, task=task, depth=3, sample_weight=w)
    else:
        W = np.stack([_weights(rng, n, weights if weights != "none" else "folds")
                      for _ in range(int(rng.choice([2, 12])))])
        q = int(rng.integers(len(W)))
        result, w = solve_batch(X, y, W, task=task, depth=3)[q], W[q]
    _check(result, X, y, w, task, depth=3)
