"""The leaf-count bound (`_search/class_bound.py`) against its definition and the trees
it rules out, on small random problems with 3 to 6 classes and weights."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import PaperQuantities, random_problem

from qbnb_jax._problem.data import make_problem
from qbnb_jax._search import class_bound
from qbnb_jax._search.class_bound import leaf_count_bounds, narrow
from qbnb_jax._search.depth2 import stack_tables
from qbnb_jax._search.frontier import Frontier
from qbnb_jax._search.state import Incumbents


def case(seed: int, reweighted: bool = False):
    """A random problem of 3 to 6 classes with a root cut (drawn again until it has)."""
    rng = np.random.default_rng(seed)
    while True:
        k = int(rng.integers(3, 7))
        weights = "ones" if reweighted else ["ones", "int", "float"][seed % 3]
        pr = random_problem(rng, "classification", int(rng.integers(8, 40)),
                            int(rng.integers(1, 4)), k=k, weights=weights)
        if len(np.unique(pr.y[pr.w > 0])) < 3:
            continue
        problem = make_problem(pr.X, pr.y, task="classification", sample_weight=pr.w)
        if reweighted:  # zero-weight rows kept in the layout, as `solve_batch` has them
            problem = problem.reweighted(rng.integers(0, 3, size=(1, problem.n)))[0][0]
        if problem.n_thresholds.max() >= 2:
            return rng, problem


def side(problem, f0: int, t: int):
    """The prefix and suffix sets of root cut t of f0, as masks over the samples."""
    left = np.zeros(problem.n, dtype=bool)
    left[problem.perm[f0, : problem.cut_pos[f0, t]]] = True
    return left, ~left


def outside_top(problem, mask, leaves: int) -> float:
    sums = problem.stats[mask].astype(float).sum(axis=0)
    return float(sums.sum() - np.sort(sums)[-leaves:].sum())


@pytest.mark.parametrize("leaves", [2, 4])
@pytest.mark.parametrize("reweighted", [False, True])
@pytest.mark.parametrize("grid", [2, 5, 256])
@pytest.mark.parametrize("seed", range(6))
def test_grid_points_are_the_definition(seed, grid, reweighted, leaves, monkeypatch):
    monkeypatch.setattr(class_bound, "BLOCK_ENTRIES", [1, 50, 1 << 22][seed % 3])
    monkeypatch.setattr(class_bound, "GRID", grid)
    _, problem = case(seed, reweighted)
    bounds = leaf_count_bounds([problem], leaves)
    rows = np.arange(problem.p)
    points = bounds.points(rows)
    assert points[:, 0].tolist() == [0] * problem.p
    assert points[:, -1].tolist() == np.maximum(problem.n_thresholds, 1).tolist()
    for f in range(problem.p):
        for i, t in enumerate(points[f]):
            prefix, suffix = side(problem, f, int(t))
            assert bounds.prefix[f, i] == pytest.approx(outside_top(problem, prefix, leaves),
                                                        abs=1e-9)
            assert bounds.suffix[f, i] == pytest.approx(outside_top(problem, suffix, leaves),
                                                        abs=1e-9)
        for t in range(int(problem.n_thresholds[f]) + 1):
            below = int(bounds.point_at_or_below(np.array([f]), np.array([t]))[0])
            above = int(bounds.point_at_or_above(np.array([f]), np.array([t]))[0])
            assert points[f, below] <= t < (points[f, below + 1] if below < grid else t + 1)
            assert points[f, above] >= t and (above == 0 or points[f, above - 1] < t)


@pytest.mark.parametrize("seed", range(12))
def test_narrow_keeps_every_cut_that_can_win(seed, monkeypatch):
    """Every root cut whose best depth-2 tree beats U stays in its tuple, and the ends
    `narrow` raises or moves stay lower bounds of the stumps they stand for; with
    `shrink=False` the same tuples stay, unchanged."""
    monkeypatch.setattr(class_bound, "GRID", [3, 8, 256][seed % 3])
    rng, problem = case(seed, reweighted=seed % 4 == 3)
    p = problem.p
    u = problem.n_thresholds.astype(np.int64)
    literal = PaperQuantities(problem.X, problem.y,
                              problem.stats[np.arange(problem.n), problem.y])

    def best_stumps(mask):  # (p,): the best stump of the samples in `mask` on each feature
        return np.array([literal.ref_L1(mask, f) for f in range(p)])
    prefix = [np.array([best_stumps(side(problem, f, t)[0]) for t in range(u[f] + 1)])
              for f in range(p)]
    suffix = [np.array([best_stumps(side(problem, f, t)[1]) for t in range(u[f] + 1)])
              for f in range(p)]
    best = [prefix[f].min(axis=1) + suffix[f].min(axis=1) for f in range(p)]
    inner = np.concatenate([b[1:-1] for b in best])
    U = float(rng.choice(inner)) + rng.choice([0.0, 0.5])
    tables = stack_tables([problem])
    frontier = Frontier(
        problem=np.zeros(p, dtype=np.int64), root=np.arange(p), lo=np.ones(p, dtype=np.int64),
        hi=u - 1, left_features=np.ones((p, p), dtype=bool),
        right_features=np.ones((p, p), dtype=bool),
        ends=np.stack([np.stack([prefix[f][0], suffix[f][0], prefix[f][-1], suffix[f][-1]])
                       for f in range(p)]),
        lower_bound=np.zeros(p))
    frontier = frontier.take(frontier.lo <= frontier.hi)
    out = narrow(frontier, leaf_count_bounds([problem], 2), Incumbents([problem], U),
                 tables.slack_left)
    kept = {int(f): (int(a), int(b)) for f, a, b in zip(out.root, out.lo, out.hi)}
    for f in frontier.root:
        for t in range(1, u[f]):
            if best[f][t] < U:
                assert f in kept and kept[f][0] <= t <= kept[f][1], (f, t, best[f][t], U)
    for i, f in enumerate(out.root):
        lo, hi = out.lo[i], out.hi[i]
        p_lo, s_lo, p_hi, s_hi = out.ends[i]
        assert np.all(p_lo <= prefix[f][lo : hi + 1].min(axis=0) + 1e-9)
        assert np.all(s_hi <= suffix[f][lo : hi + 1].min(axis=0) + 1e-9)
        assert np.all(s_lo <= suffix[f][lo - 1] + 1e-9)
        assert np.all(p_hi <= prefix[f][hi + 1] + 1e-9)
    assert out.size <= frontier.size
    # unshrunk (depth 2): the same tuples kept, each as it was
    whole = narrow(frontier, leaf_count_bounds([problem], 2), Incumbents([problem], U),
                   tables.slack_left, shrink=False)
    np.testing.assert_array_equal(whole.root, out.root)
    was = np.searchsorted(frontier.root, whole.root)
    np.testing.assert_array_equal(whole.lo, frontier.lo[was])
    np.testing.assert_array_equal(whole.hi, frontier.hi[was])
    np.testing.assert_array_equal(whole.ends, frontier.ends[was])


@pytest.mark.parametrize("seed", range(4))
def test_a_problem_has_the_same_bounds_in_any_batch(seed, monkeypatch):
    """Bounds built for many problems at once (in blocks) equal each problem's alone,
    so a problem's search takes the same path in a batch as alone."""
    monkeypatch.setattr(class_bound, "BLOCK_ENTRIES", [1, 100, 1 << 22, 300][seed])
    rng = np.random.default_rng(seed)
    problems = []
    while len(problems) < 5:
        _, problem = case(int(rng.integers(1 << 30)), reweighted=bool(rng.integers(2)))
        if not problems or (problem.p, problem.n_channels) == (problems[0].p,
                                                                problems[0].n_channels):
            problems.append(problem)
    p = problems[0].p
    # incumbents: each problem's bounds are kept or not by its own alone
    limits = [float(rng.uniform(0, 1.2) * problem.weight.sum()) for problem in problems]
    for incumbents in (None, Incumbents(problems, np.array(limits))):
        together = leaf_count_bounds(problems, 2, incumbents)
        for q, problem in enumerate(problems):
            own = None if incumbents is None else Incumbents([problem], limits[q])
            alone = leaf_count_bounds([problem], 2, own)
            assert (together.first_row[q] >= 0) == (alone.first_row[0] >= 0)
            if alone.first_row[0] < 0:
                continue
            rows = slice(together.first_row[q], together.first_row[q] + p)
            np.testing.assert_array_equal(together.prefix[rows], alone.prefix)
            np.testing.assert_array_equal(together.suffix[rows], alone.suffix)


def test_depth3_roots_narrowed_against_the_brute_force(monkeypatch):
    """Depth 3 with more classes than a side's four leaves: the root tuples are
    narrowed by the bound (some cuts are ruled out in these draws), and every optimum
    is the brute force's."""
    from helpers import brute_force

    from qbnb_jax import solve
    from qbnb_jax._search import deep

    removed = []

    def counting(frontier, *args):
        out = narrow(frontier, *args)
        removed.append(int(np.sum(frontier.hi - frontier.lo + 1) - np.sum(out.hi - out.lo + 1)))
        return out

    monkeypatch.setattr(deep, "narrow", counting)
    rng = np.random.default_rng(7)
    for draw in range(12):
        P = random_problem(rng, "classification", int(rng.integers(10, 22)),
                           int(rng.integers(1, 4)), k=int(rng.integers(5, 9)),
                           weights=["ones", "int", "float"][draw % 3])
        want = brute_force(P.X, P.y, P.w, task="classification", depth=3)
        res = solve(P.X, P.y, task="classification", depth=3, sample_weight=P.w)
        assert res.status == "optimal"
        assert res.objective == pytest.approx(want, rel=1e-9, abs=1e-9), draw
    assert sum(removed) > 0


@pytest.mark.parametrize("depth", [2, 3])
def test_leaf_count_bound_switch(depth, monkeypatch):
    """`leaf_count_bound=False` leaves the bound out (no narrowing is asked for) and
    finds the same optimum, the brute force's; `solve_batch` takes the switch too, and
    a value that is not a bool is refused."""
    from helpers import brute_force

    from qbnb_jax import solve, solve_batch
    from qbnb_jax._search import deep, depth2

    calls = []

    def counting(frontier, *args, **kwargs):
        calls.append(1)
        return narrow(frontier, *args, **kwargs)

    monkeypatch.setattr(deep, "narrow", counting)
    monkeypatch.setattr(depth2, "narrow", counting)
    rng = np.random.default_rng(11)
    narrowed = 0  # the solves with the bound on narrow some tuples
    for draw in range(8):
        P = random_problem(rng, "classification", int(rng.integers(12, 22)),
                           int(rng.integers(1, 4)), k=int(rng.integers(5, 8)),
                           weights=["ones", "int", "float"][draw % 3])
        want = brute_force(P.X, P.y, P.w, task="classification", depth=depth)
        calls.clear()
        off = solve(P.X, P.y, task="classification", depth=depth, sample_weight=P.w,
                    leaf_count_bound=False)
        assert not calls
        assert off.status == "optimal"
        assert off.objective == pytest.approx(want, rel=1e-9, abs=1e-9), draw
        on = solve(P.X, P.y, task="classification", depth=depth, sample_weight=P.w)
        assert on.objective == off.objective
        narrowed += len(calls)
    assert narrowed > 0
    weights = np.stack([np.ones(len(P.y)), rng.integers(0, 3, len(P.y)).astype(float)])
    weights[1, 0] = 1.0
    calls.clear()
    batch = solve_batch(P.X, P.y, weights, task="classification", depth=depth,
                        leaf_count_bound=False)
    assert not calls
    for w, res in zip(weights, batch):
        assert res.objective == pytest.approx(
            brute_force(P.X, P.y, w, task="classification", depth=depth), rel=1e-9, abs=1e-9)
    with pytest.raises(ValueError, match="leaf_count_bound"):
        solve(P.X, P.y, task="classification", depth=depth, leaf_count_bound="no")
