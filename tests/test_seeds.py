"""Seeded side searches (`_search/seeds.py`): the bounds a depth-2 search records for its
root thresholds, and the seeds a side that holds a solved subset takes from them, are
checked against brute-force values of every root threshold."""

import jax
import numpy as np
import pytest
from helpers import _encode_targets, candidate_splits, leaf_losses

from qbnb_jax import solve, solve_batch
from qbnb_jax._problem.data import make_problem
from qbnb_jax._search import deep_batch
from qbnb_jax._search.deep import LEFT, RIGHT, DeepSearch
from qbnb_jax._search.depth2 import solve_depth2, stack_tables
from qbnb_jax._search.search import Search
from qbnb_jax._search.seeds import SeedTuples, SideBounds, seed_batch
from qbnb_jax._search.state import SearchOptions

OPTIONS = SearchOptions.make(bound="w0", s=3).quiet()
TASKS = ["classification", "regression"]


def _data(task: str, n: int, p: int, seed: int):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 1)  # ties
    signal = (X[:, 0] > 0.2).astype(float) + (X[:, 1 % p] < -0.3)
    if task == "classification":
        y = np.where(rng.random(n) < 0.25, rng.integers(0, 3, n), signal.astype(int))
    else:
        y = np.stack([signal + rng.normal(scale=0.5, size=n),
                      2 * signal + rng.normal(scale=0.5, size=n)], axis=1)
    return X, y, rng.uniform(0.2, 2.0, n)


class RootValues:
    """Brute force: per root threshold (f1, t) of a problem, its two parts' best stump
    loss on each child feature, and the best tree's value."""

    def __init__(self, X, y, w, task: str, problem):
        self.problem = problem
        Y = _encode_targets(y, task)
        p = problem.p
        self.prefix, self.suffix = [], []
        splits = [candidate_splits(X[:, [f]]) for f in range(p)]
        for f1 in range(p):
            u = int(problem.n_thresholds[f1])
            left = np.zeros((u + 1, problem.n), dtype=bool)
            for t in range(u + 1):
                left[t, problem.perm[f1, : problem.cut_pos[f1, t]]] = True
            parts = []
            for side in (left, ~left):
                best = np.empty((u + 1, p))
                for f in range(p):
                    s = splits[f]
                    a = (side[:, None, :] & s[None]).reshape(-1, problem.n)
                    b = (side[:, None, :] & ~s[None]).reshape(-1, problem.n)
                    loss = leaf_losses(a, Y, w, task) + leaf_losses(b, Y, w, task)
                    best[:, f] = loss.reshape(u + 1, len(s)).min(axis=1)
                parts.append(best)
            self.prefix.append(parts[0])
            self.suffix.append(parts[1])

    def value(self, f1: int) -> np.ndarray:
        return self.prefix[f1].min(axis=1) + self.suffix[f1].min(axis=1)

    def thresholds_of(self, f1: int, count_lo: int, count_hi: int) -> np.ndarray:
        """Threshold indices of f1 whose left part holds count_lo..count_hi samples."""
        counts = self.problem.cut_pos[f1, : self.problem.n_thresholds[f1] + 1]
        return np.flatnonzero((counts >= count_lo) & (counts <= count_hi))


@pytest.fixture(autouse=True)
def _float64():
    """The library runs its searches under `jax.enable_x64` (`solve`); these tests call
    the depth-2 search directly."""
    with jax.enable_x64(True):
        yield


def _solved(problem, cutoff: float, seeds: SeedTuples | None = None):
    search = Search([problem], OPTIONS, cutoff=cutoff)
    exits = solve_depth2(search, seeds=seeds, record_exits=True)
    return search, exits.of_problems(np.array([problem.n]))[0]


def _check_bounds(bounds: SideBounds, truth: RootValues, tol: float) -> None:
    """Every recorded interval's bound is at most the value of each of its thresholds,
    and every swept cut's part floors are at most the parts' losses where they apply."""
    feature, count_lo = np.divmod(bounds.start, bounds.stride)
    count_hi = bounds.stop - feature * bounds.stride
    for f1, a, b, bound in zip(feature, count_lo, count_hi, bounds.bound):
        at = truth.thresholds_of(f1, a, b)
        assert np.all(truth.value(f1)[at] >= bound - tol)
    feature, count = np.divmod(bounds.cut, bounds.stride)
    for f1, c, prefix, suffix in zip(feature, count, bounds.prefix_floor, bounds.suffix_floor):
        counts = truth.problem.cut_pos[f1, : truth.problem.n_thresholds[f1] + 1]
        assert np.all(truth.prefix[f1][counts >= c] >= prefix - tol)
        assert np.all(truth.suffix[f1][counts <= c] >= suffix - tol)


@pytest.mark.parametrize("task", TASKS)
def test_recorded_bounds_hold_at_every_threshold(task):
    """A depth-2 search's recorded bounds are lower bounds of every root threshold they
    cover, whatever the cutoff (none, above the optimum, below it)."""
    X, y, w = _data(task, 70, 3, seed=1)
    problem = make_problem(X, y, task=task, sample_weight=w)
    truth = RootValues(X, y, w, task, problem)
    optimum = min(truth.value(f).min() for f in range(problem.p))
    tol = 1e-9 * max(1.0, optimum)
    covered = 0
    for cutoff in (np.inf, optimum * 1.05, optimum * 0.9):
        search, bounds = _solved(problem, cutoff)
        _check_bounds(bounds, truth, tol)
        covered += len(bounds.start)
        lower, upper, _ = search.outcome(0)
        if cutoff > optimum:
            assert upper == pytest.approx(optimum, rel=1e-9)
    assert covered > 0


def _nested(problem, f0: int, k_sub: int, k: int, which: int):
    left_sub, left = problem.rank[f0] < k_sub, problem.rank[f0] < k
    sub_mask, mask = (left_sub, left) if which == LEFT else (~left_sub, ~left)
    ids = np.flatnonzero(mask & (problem.weight > 0))
    return problem.compact(sub_mask), problem.compact(mask), sub_mask[ids], ids


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("which", [LEFT, RIGHT])
def test_seeds_keep_every_threshold_that_can_beat_the_cutoff(task, which):
    """From a solved subset's bounds, a side's seeds leave out only thresholds whose
    value is at least the side's cutoff, inherit only lower bounds, carry valid ends;
    and the seeded search finds the side's optimum (as the unseeded one does)."""
    X, y, w = _data(task, 90, 3, seed=2)
    parent = make_problem(X, y, task=task, sample_weight=w)
    k_sub, k = (54, 60) if which == LEFT else (36, 30)
    sub, side, in_subset, ids = _nested(parent, 0, k_sub, k, which)
    truth = RootValues(X[ids], np.asarray(y)[ids], w[ids], task, side)
    values = np.concatenate([truth.value(f) for f in range(side.p)])
    optimum = values.min()
    tol = 1e-9 * max(1.0, optimum)
    sub_optimum = _solved(sub, np.inf)[0].outcome(0)[1]
    tables = stack_tables([side])
    seeded_any = False
    for sub_cutoff in (np.inf, sub_optimum * 1.02):
        _, bounds = _solved(sub, sub_cutoff)
        for cutoff in (optimum * 1.01, np.quantile(values, 0.3), np.inf):
            seeds, inherited = seed_batch(np.array([0]), [bounds], [in_subset], [side.perm],
                                          tables.cut_pos, tables.n_thresholds,
                                          np.array([cutoff]))
            for f1 in range(side.p):
                u = int(side.n_thresholds[f1])
                inside = np.zeros(u + 1, dtype=bool)
                for lo, hi in zip(seeds.lo[seeds.root == f1], seeds.hi[seeds.root == f1]):
                    inside[lo : hi + 1] = True
                left_out = np.flatnonzero(~inside[1:u]) + 1
                assert np.all(truth.value(f1)[left_out] >= cutoff - tol)
                seeded_any |= len(left_out) > 0
            for f1, a, b, bound in zip(inherited.feature, inherited.count_lo,
                                       inherited.count_hi, inherited.bound):
                assert np.all(truth.value(f1)[truth.thresholds_of(f1, a, b)] >= bound - tol)
            for f1, lo, hi, ends in zip(seeds.root, seeds.lo, seeds.hi, seeds.ends):
                assert np.all(truth.prefix[f1][lo : hi + 1] >= ends[0] - tol)
                assert np.all(truth.suffix[f1][lo : hi + 1] >= ends[3] - tol)
                assert np.all(truth.suffix[f1][lo - 1] >= ends[1] - tol)
                assert np.all(truth.prefix[f1][hi + 1] >= ends[2] - tol)
            search = Search([side], OPTIONS, cutoff=cutoff)
            solve_depth2(search, tables, seeds=seeds)
            assert search.outcome(0)[1] == pytest.approx(optimum, rel=1e-9)
    assert seeded_any


def test_nested_bounds_picks_the_nearest_solved_subset():
    """A left side reads the solved left side of the largest smaller cut, a right side
    the right side of the smallest larger one; kept bounds stop at their budget."""
    X, y, w = _data("classification", 60, 2, seed=3)
    search = DeepSearch(make_problem(X, y, task="classification"), OPTIONS, depth=3)
    none = np.zeros(0, dtype=np.int64)
    bounds = SideBounds(none, none, np.zeros(0), 61, none, np.zeros((0, 2)), np.zeros((0, 2)))
    for k in (10, 30, 50):
        for which in (LEFT, RIGHT):
            search.keep_side_bounds((0, k, which), bounds)
    assert search.nested_bounds((0, 40, LEFT))[0] == (0, 30, LEFT)
    assert search.nested_bounds((0, 40, RIGHT))[0] == (0, 50, RIGHT)
    assert search.nested_bounds((0, 10, LEFT)) is None
    assert search.nested_bounds((0, 50, RIGHT)) is None
    assert search.nested_bounds((1, 40, LEFT)) is None
    search.side_bound_bytes = 1 << 40
    search.keep_side_bounds((0, 45, LEFT), bounds)
    assert search.nested_bounds((0, 48, LEFT))[0] == (0, 30, LEFT)


@pytest.mark.parametrize("task", TASKS)
def test_seeded_sides_give_the_same_tree_with_fewer_cut_elements(monkeypatch, task):
    """Depth 3 with seeded sides against every side searched from scratch: the same
    optimum, and fewer cut-elements (counted, not timed)."""
    X, y, w = _data(task, 1200, 4, seed=4)
    seeded = solve(X, y, task=task, depth=3, sample_weight=w)
    monkeypatch.setattr(deep_batch, "side_seeds", lambda *args: (None, None))
    plain = solve(X, y, task=task, depth=3, sample_weight=w)
    assert seeded.status == plain.status == "optimal"
    assert seeded.objective == pytest.approx(plain.objective, rel=1e-9)
    assert seeded.stats["cut_elements"] < plain.stats["cut_elements"]


def test_two_classes_are_not_seeded():
    """Two classes are not seeded, integer or fractional weights (a batch may solve
    their sides on its shared layout); more classes and regression are."""
    X, y, w = _data("classification", 50, 2, seed=5)
    two = np.asarray(y) % 2
    assert not deep_batch.seeds_apply(make_problem(X, two, task="classification"))
    assert not deep_batch.seeds_apply(make_problem(X, two, task="classification",
                                                   sample_weight=w))
    assert deep_batch.seeds_apply(make_problem(X, y, task="classification"))
    Xr, yr, _ = _data("regression", 50, 2, seed=5)
    assert deep_batch.seeds_apply(make_problem(Xr, yr, task="regression"))


@pytest.mark.parametrize("task", TASKS)
def test_a_batch_seeds_its_searches_as_alone(monkeypatch, task):
    """The searches of a depth-3 batch seed their sides as they do alone: the same
    trees and objectives (integer and fractional weights in one batch)."""
    from test_batch import assert_same

    calls = []
    real = deep_batch.seed_batch
    monkeypatch.setattr(deep_batch, "seed_batch", lambda *a: calls.append(1) or real(*a))
    X, y, w = _data(task, 40, 3, seed=6)
    rng = np.random.default_rng(6)
    W = np.stack([rng.integers(0, 3, len(w)).astype(float), w, np.ones(len(w))])
    batched = solve_batch(X, y, W, task=task, depth=3)
    assert calls, "sides were seeded"
    for i, weights in enumerate(W):
        alone = solve(X, y, task=task, depth=3, sample_weight=weights)
        assert_same(batched[i], alone, task, f"{task} problem {i}")
