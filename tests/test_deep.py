"""Depth 3 specifics: anytime behaviour under a time limit, and repeatability.

No test here times anything (a busy machine must not fail a test): how soon a search
stops is checked by counting its work, with a limit that has passed before the first
check, so the count is the same on any machine under any load.
"""

import jax
import numpy as np
import pytest

from qbnb_jax import solve
from qbnb_jax._problem.data import make_problem
from qbnb_jax._search.deep import DeepSearch
from qbnb_jax._search.solve import _make_result
from qbnb_jax._search.state import SearchOptions


def _noisy_problem(n=3000, p=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0.3) ^ (rng.random(n) < 0.2)).astype(int)
    return X, y


def test_depth3_time_limit_returns_a_bracket():
    X, y = _noisy_problem()
    res = solve(X, y, task="classification", depth=3, time_limit=1.0)
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective
    assert np.isfinite(res.gap) and res.gap >= 0
    assert res.tree.max_depth <= 3
    # stopped early: the full solve takes 6 iterations and 2,837 subtree solves (a busy
    # machine only does fewer in the second)
    assert res.stats["iterations"] < 6 and res.stats["subproblems"] < 500, res.stats


def expired_deep(X, y, depth: int):
    """The search itself, on this thread, with a limit passed before it began (`solve`
    returns at its deadline and leaves its worker to stop at the same checks)."""
    options = SearchOptions.make(bound="w0", s=3, time_limit=1e-9)
    with jax.enable_x64(True):
        search = DeepSearch(make_problem(X, y, task="classification"), options, depth=depth)
        search.solve_deep()
    return _make_result(search, depth)


def check_stopped_at_once(res, depth: int, sides: int) -> None:
    """A search whose limit had passed before it began: a valid bracket from the greedy
    start alone, and no more work than that start (counted, not timed)."""
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective
    assert np.isfinite(res.gap) and res.gap >= 0
    assert res.tree.max_depth <= depth
    # the top search stops at its first check, before any iteration
    assert res.stats["iterations"] == 0 and res.stats["tuples_explored"] == 0
    # and so does every nested search, which checks the same clock: only the greedy
    # start's sides were solved (one that ran on would solve hundreds of subtrees)
    assert 1 <= res.stats["subproblems"] <= sides, res.stats["subproblems"]


def test_depth3_expired_limit_stops_nested_searches_at_once():
    """The limit is checked by every subtree solve, on the same clock: with a limit that
    has passed, the depth-2 side searches of the greedy start (all samples, and both
    sides of the greedy root) stop before their first iteration too, so they sweep
    only their greedy start (a sweep per problem and feature) and nothing else."""
    X, y = _noisy_problem()
    res = expired_deep(X, y, 3)
    check_stopped_at_once(res, 3, sides=3)
    p = X.shape[1]
    assert res.stats["rows_evaluated"] <= 3 * p, res.stats["rows_evaluated"]


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

    import qbnb_jax._device.runner as runner
    import qbnb_jax._search.depth2 as depth2

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from helpers import brute_force

    rng = np.random.default_rng(5)
    X = rng.integers(0, 6, size=(40, 3)).astype(float)
    y = rng.integers(0, 3, size=40)
    reference = solve(X, y, task="classification", depth=2).objective
    monkeypatch.setattr(runner, "CHUNK_ELEMENTS", 1)
    # blocks of at most 2 tuples: 36 // (p (s + 3)) + 1 = 3 rounds to 4, halved
    monkeypatch.setattr(depth2, "MAX_BLOCK_ELEMENTS", 36)
    for depth in (2, 3):
        res = solve(X, y, task="classification", depth=depth, initial_capacity=1)
        assert res.status == "optimal"
        assert res.objective == brute_force(X, y, None, task="classification", depth=depth)
        if depth == 2:
            assert res.objective == reference
            assert max(res.stats["capacity_history"]) == 2 < max(res.stats["frontier_sizes"])


def test_depth4_time_limit_returns_a_bracket():
    X, y = _noisy_problem(n=1500, p=4, seed=3)
    res = solve(X, y, task="classification", depth=4, time_limit=0.5)
    assert res.status == "time_limit"
    assert 0.0 <= res.lower_bound <= res.objective and res.tree.max_depth <= 4
    assert np.isfinite(res.gap) and res.gap >= 0
    # stopped early: the full solve needs more than 1,083 subtree solves (its
    # all-samples depth-3 side alone, solved with no cutoff, takes 1,083)
    assert res.stats["subproblems"] < 300, res.stats["subproblems"]


def test_depth4_expired_limit_stops_nested_searches_at_once():
    """Nested searches check the same clock: with a limit that has passed, the three
    depth-3 sides of the greedy start stop after their own greedy start (three depth-2
    sides each, which stop at once too): at most 3 + 3 * 3 subtree solves."""
    X, y = _noisy_problem(n=1500, p=4, seed=3)
    check_stopped_at_once(expired_deep(X, y, 4), 4, sides=12)


def test_float_side_cutoffs_margin_lets_stopped_sides_prune(monkeypatch):
    """Regression sides get cutoffs three tolerances above `U - floor`, so that a side
    stopped at its cutoff still rules out the pieces beside it (docs/design.md, "Side
    cutoffs and the tolerance"). Without the margin the same optimum is found with more
    work (counted, not timed); integer counts have no margin."""
    from qbnb_jax._search import deep

    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=len(X))
    with_margin = solve(X, y, task="regression", depth=3)
    monkeypatch.setattr(deep.DeepSearch, "cutoff_margin", lambda self: 0.0)
    without = solve(X, y, task="regression", depth=3)
    assert with_margin.status == without.status == "optimal"
    assert with_margin.objective == pytest.approx(without.objective, rel=1e-9)
    assert with_margin.stats["cut_elements"] < without.stats["cut_elements"]
    assert with_margin.stats["subproblems"] < without.stats["subproblems"]
    Xc, yc = _noisy_problem(n=200, p=3, seed=4)
    options = SearchOptions.make(bound="w0", s=3)
    search = DeepSearch(make_problem(Xc, yc, task="classification"), options, depth=3)
    search.offer(5.0, None)
    monkeypatch.undo()
    assert search.cutoff_margin() == 0.0


def _regression_problem(n=400, seed=11):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=n)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_solved_cuts_skip_and_tighten_the_later_cuts(monkeypatch, task):
    """Within an iteration a cut in a piece that the cuts solved so far already rule
    out is not solved, and the others take their side cutoffs from the solved cuts
    beside them (docs/design.md, "Depth 3 and deeper"). With every cut solved from the
    tuple's ends the same optimum takes more side solves (counted, not timed)."""
    from qbnb_jax._search import deep

    X, y = _regression_problem() if task == "regression" else _noisy_problem(n=600, p=4, seed=5)
    lean = solve(X, y, task=task, depth=3)
    monkeypatch.setattr(deep.DeepSearch, "cut_can_help", lambda self, *args: True)
    monkeypatch.setattr(deep.DeepSearch, "side_floors",
                        lambda self, ends, *args: (float(ends[0]), float(ends[3])))
    full = solve(X, y, task=task, depth=3)
    assert lean.status == full.status == "optimal"
    assert lean.objective == pytest.approx(full.objective, rel=1e-9)
    assert lean.stats["subproblems"] < full.stats["subproblems"]
    assert lean.stats["cut_elements"] < full.stats["cut_elements"]


def test_side_floors_and_skipped_cuts_read_only_solved_cuts():
    """A cut's floors are the largest bounds of P solved to its left and of S to its
    right, never below the tuple's ends, and nothing unsolved counts; under leaf limits
    sides are not monotone and the floors stay the ends'. A cut is skipped only where
    the piece around it, between solved cuts, cannot beat the incumbent."""
    import dataclasses

    from qbnb_jax._problem.leaf_limits import LeafLimits
    from qbnb_jax._search.frontier import RootFrontier, TupleCuts

    X, y = _noisy_problem(n=200, p=3, seed=4)
    problem = make_problem(X, y, task="classification")
    search = DeepSearch(problem, SearchOptions.make(bound="w0", s=3), depth=3)
    ends = np.array([1.0, 17.0, 12.0, 2.0])  # P_lo, S_lo, P_hi, S_hi
    prefix, suffix = np.array([5.0, 9.0, 11.0]), np.array([17.0, 17.0, 6.0])

    def known(*solved):
        return TupleCuts(np.array([10, 20, 30]), prefix, suffix, np.array(solved))

    assert search.side_floors(ends, known(True, False, True), 1) == (5.0, 6.0)
    assert search.side_floors(ends, known(True, False, True), 0) == (1.0, 6.0)
    assert search.side_floors(ends, known(True, False, True), 2) == (5.0, 2.0)
    assert search.side_floors(ends, known(False, False, False), 1) == (1.0, 2.0)
    limited = DeepSearch(dataclasses.replace(problem, leaf_limits=LeafLimits(5, 0.0)),
                         SearchOptions.make(bound="w0", s=3), depth=3)
    assert limited.side_floors(ends, known(True, False, True), 1) == (1.0, 2.0)

    frontier = RootFrontier(root=np.array([0]), lo=np.array([1]), hi=np.array([40]),
                            lower_bound=np.zeros(1), ends=ends[None])
    # each threshold holds a sample at least, so the slack terms P(b) + S(a) - W of
    # the pieces (0, 20) and (20, 41) are at most 9 + 17 - 20 and 12 + 17 - 21
    search.offer(22.0, None)  # the piece (0, 20) is bounded by P(0) + S(20) = 1 + 17
    middle = known(False, True, False)
    assert search.cut_can_help(frontier, 0, middle, 0)
    search.offer(18.0, None)  # now it cannot beat U; (20, 41) by P(20) + S(41) = 11
    assert not search.cut_can_help(frontier, 0, middle, 0)
    assert search.cut_can_help(frontier, 0, middle, 2)
    assert search.cut_can_help(frontier, 0, known(False, False, False), 1)
