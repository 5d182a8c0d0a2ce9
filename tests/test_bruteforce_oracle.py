"""Checks of the test oracle itself (tests/helpers.py), independent of qbnb_jax.

Random checks are one test per draw: each group's draws come in sequence from one seeded
generator, once per session (`draws`), as the loops these tests replaced drew them.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers import (
    BruteForce,
    _encode_targets,
    brute_force,
    candidate_splits,
    leaf_losses,
    partition_loss,
    random_problem,
    seed_of,
)

TASKS = [("classification", 2), ("classification", 4), ("regression", 1), ("regression", 3)]


def _close(a: float, b: float, task: str, scale: float = 1.0) -> bool:
    if task == "classification":
        return abs(a - b) <= 1e-9 * max(1.0, scale)
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b), scale)


def _all_tree_assignments(X: np.ndarray, depth: int) -> list[np.ndarray]:
    """Leaf index of every sample for every perfect tree of the given depth (deduplicated).

    Splits are listed straight from the definition: every feature, every midpoint of
    consecutive distinct values, and the two "everything on one side" thresholds -inf, +inf.
    """
    n, p = X.shape
    splits = []
    for f in range(p):
        v = np.unique(X[:, f])
        for thr in [-np.inf, *((v[:-1] + v[1:]) / 2.0), np.inf]:
            splits.append(X[:, f] <= thr)
    level = {np.zeros(n, dtype=np.int64).tobytes(): np.zeros(n, dtype=np.int64)}
    for d in range(1, depth + 1):
        sub = list(level.values())
        level = {}
        for go_left in splits:
            for left in sub:
                for right in sub:
                    leaf = np.where(go_left, left, 2 ** (d - 1) + right)
                    level.setdefault(leaf.tobytes(), leaf)
    return list(level.values())


def _enumerated_optimum(X, y, w, task, depth) -> float:
    return min(partition_loss(a, y, w, task) for a in _all_tree_assignments(X, depth))


def test_hand_examples():
    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = np.array([0, 1, 1, 0])  # XOR
    assert brute_force(X, y, task="classification", depth=0) == 2
    assert brute_force(X, y, task="classification", depth=1) == 2
    assert brute_force(X, y, task="classification", depth=2) == 0
    w = np.array([4.0, 5.0, 2.0, 0.0])
    assert brute_force(X, y, w, task="classification", depth=0) == 4
    assert brute_force(X, y, w, task="classification", depth=1) == 2  # split on x1
    assert brute_force(X, y, w, task="classification", depth=2) == 0
    # regression: y = 0, 0, 10, 12 ; one split at x0 gives SSE 0 + 2
    yr = np.array([0.0, 0.0, 10.0, 12.0])
    assert brute_force(X, yr, task="regression", depth=0) == pytest.approx(
        np.sum((yr - yr.mean()) ** 2)
    )
    assert brute_force(X, yr, task="regression", depth=1) == pytest.approx(2.0)
    assert brute_force(X, yr, task="regression", depth=2) == pytest.approx(0.0)
    # weighted mean: weights 1, 3 on targets 0, 4 -> mean 3, SSE 9 + 3 = 12
    assert brute_force(
        np.zeros((2, 1)), np.array([0.0, 4.0]), np.array([1.0, 3.0]), task="regression", depth=2
    ) == pytest.approx(12.0)
    # multi-output: the loss sums over columns
    Y2 = np.column_stack([yr, -2 * yr])
    assert brute_force(X, Y2, task="regression", depth=1) == pytest.approx(2.0 * 5)


def test_degenerate_inputs():
    X1 = np.array([[3.0]])
    assert brute_force(X1, np.array([7]), task="classification", depth=2) == 0
    assert brute_force(X1, np.array([1.5]), task="regression", depth=2) == 0
    X = np.ones((5, 2))
    y = np.array([0, 1, 1, 2, 1])
    for d in range(4):  # constant features: no split helps
        assert brute_force(X, y, task="classification", depth=d) == 2
    # all weights zero: nothing to fit
    assert brute_force(X, y, np.zeros(5), task="classification", depth=2) == 0


@functools.cache
def draws(group: str, count: int, *args) -> tuple:
    """The `count` draws of a test group, in sequence from one seeded generator."""
    return tuple(DRAWS[group](count, *args))


def _draw_leaf(count):
    rng = np.random.default_rng(1)
    for _ in range(count):
        n, m = int(rng.integers(1, 12)), int(rng.integers(1, 4))
        Y = rng.normal(size=(n, m)) * 100 + 1e6
        w = rng.uniform(0, 2, size=n)
        mask = rng.random(n) < 0.7
        yield Y, w, mask


@pytest.mark.parametrize("it", range(20))
def test_leaf_loss_two_pass_matches_definition(it):
    Y, w, mask = draws("leaf", 20)[it]
    got = leaf_losses(mask[None], Y, w, "regression")[0]
    ww = w[mask]
    mu = (ww[:, None] * Y[mask]).sum(0) / ww.sum() if mask.any() else 0.0
    want = np.sum(ww[:, None] * (Y[mask] - mu) ** 2)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def _draw_splits(count):
    rng = np.random.default_rng(2)
    for _ in range(count):
        yield random_problem(rng, "classification", int(rng.integers(1, 15)), 3)


@pytest.mark.parametrize("it", range(20))
def test_candidate_splits_cover_all_thresholds(it):
    P = draws("splits", 20)[it]
    G = candidate_splits(P.X)
    rows = {g.tobytes() for g in G}
    for f in range(P.p):
        for thr in np.concatenate([[-np.inf, np.inf], np.unique(P.X[:, f])]):
            go_left = P.X[:, f] <= thr
            assert go_left.tobytes() in rows or (~go_left).tobytes() in rows


def _draw_enumeration(count, task, k):
    rng = np.random.default_rng(seed_of(task, k))
    for it in range(count):
        depth = [1, 2, 3][it % 3]
        n = int(rng.integers(1, {1: 12, 2: 9, 3: 6}[depth]))
        p = int(rng.integers(1, {1: 4, 2: 3, 3: 3}[depth]))
        yield depth, random_problem(rng, task, n, p, k)


@pytest.mark.parametrize("it", range(30))
@pytest.mark.parametrize("task,k", TASKS)
def test_matches_full_enumeration(task, k, it):
    """The memoised recursion equals a minimum over every complete tree (30 problems per
    case, 120 in all)."""
    depth, P = draws("enumeration", 30, task, k)[it]
    got = brute_force(P.X, P.y, P.w, task=task, depth=depth)
    want = _enumerated_optimum(P.X, P.y, P.w, task, depth)
    assert _close(got, want, task), (it, got, want)


def _draw_invariances(count, task, k):
    rng = np.random.default_rng(1000 + seed_of(task, k))
    for _ in range(count):
        n, p = int(rng.integers(1, 25)), int(rng.integers(1, 4))
        P = random_problem(rng, task, n, p, k, weights="int")
        yield P, rng.permutation(n)


@pytest.mark.parametrize("it", range(40))
@pytest.mark.parametrize("task,k", TASKS)
def test_invariances(task, k, it):
    """Depth monotonicity, row order, zero-weight rows, monotone feature maps, integer
    weights == repeated rows (40 problems per case)."""
    P, perm = draws("invariances", 40, task, k)[it]
    n = P.n
    depth = 1 + it % 2
    bf = BruteForce(P.X, P.y, P.w, task)
    vals = [bf.best(d) for d in range(depth + 1)]
    scale = float(np.sum(P.w))
    assert all(vals[d + 1] <= vals[d] + 1e-9 * max(1.0, vals[d]) for d in range(depth))
    assert vals[0] == pytest.approx(
        leaf_losses(np.ones((1, n), bool), _encode_targets(P.y, task), P.w, task)[0],
        rel=1e-12,
        abs=1e-12,
    )
    opt = vals[depth]
    # permuted rows
    got = brute_force(P.X[perm], P.y[perm], P.w[perm], task=task, depth=depth)
    assert _close(got, opt, task, scale)
    # strictly increasing feature transforms
    Xt = np.column_stack([np.exp(P.X[:, 0] / 5.0), -1.0 / (1.0 + np.exp(-P.X[:, 1:]))])
    assert _close(brute_force(Xt, P.y, P.w, task=task, depth=depth), opt, task, scale)
    # integer weights == repeated rows, zero weights == absent rows
    rep = np.repeat(np.arange(n), P.w.astype(int))
    got = brute_force(P.X[rep], P.y[rep], None, task=task, depth=depth)
    assert _close(got, opt, task, scale), (it, got, opt)
    # scaling all weights scales the optimum
    got = brute_force(P.X, P.y, 2.5 * P.w, task=task, depth=depth)
    assert _close(got, 2.5 * opt, task, scale)


def _draw_stumps(count):
    rng = np.random.default_rng(3)
    for _ in range(count):
        n, p, m = int(rng.integers(2, 40)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
        yield random_problem(rng, "regression", n, p, m, weights="mixed")


@pytest.mark.parametrize("it", range(60))
def test_regression_stump_matches_sklearn(it):
    """CART's exhaustive split search is exact for squared error at depth 1 (60 problems)."""
    tree = pytest.importorskip("sklearn.tree")
    P = draws("stumps", 60)[it]
    if P.w.sum() == 0:
        pytest.skip("every weight is zero")
    sk = tree.DecisionTreeRegressor(max_depth=1, random_state=0).fit(
        P.X, P.y, sample_weight=P.w
    )
    sk_loss = partition_loss(sk.apply(P.X.astype(np.float32)), P.y, P.w, "regression")
    got = brute_force(P.X, P.y, P.w, task="regression", depth=1)
    assert got == pytest.approx(sk_loss, rel=1e-7, abs=1e-9), it


def _draw_greedy(count):
    rng = np.random.default_rng(4)
    for it in range(count):
        task, k = TASKS[it % 4]
        n, p = int(rng.integers(2, 40)), int(rng.integers(1, 4))
        yield random_problem(rng, task, n, p, k)


@pytest.mark.parametrize("it", range(40))
def test_greedy_trees_are_upper_bounds(it):
    """CART's greedy trees are never better than the brute-force optimum (40 problems)."""
    tree = pytest.importorskip("sklearn.tree")
    P = draws("greedy", 40)[it]
    task = P.task
    if P.w.sum() == 0:
        pytest.skip("every weight is zero")
    for depth in (2, 3) if P.n <= 15 else (2,):
        cls = (
            tree.DecisionTreeClassifier
            if task == "classification"
            else tree.DecisionTreeRegressor
        )
        sk = cls(max_depth=depth, random_state=0).fit(P.X, P.y, sample_weight=P.w)
        sk_loss = partition_loss(sk.apply(P.X.astype(np.float32)), P.y, P.w, task)
        got = brute_force(P.X, P.y, P.w, task=task, depth=depth)
        assert got <= sk_loss + 1e-9 * max(1.0, sk_loss), (it, depth)


DRAWS = {"leaf": _draw_leaf, "splits": _draw_splits, "enumeration": _draw_enumeration,
         "invariances": _draw_invariances, "stumps": _draw_stumps, "greedy": _draw_greedy}
