"""Anytime solves (docs/design.md, "Anytime behaviour"): CART's first incumbent, the
deadline kept on a worker thread, bounds proved inside a deep iteration, `max_gap`.

Every stopped result is checked against the brute-force optimum: its lower bound at
most the optimum, the optimum at most its objective. No timings are asserted: stops at
chosen points come from a clock that ticks once per time check.
"""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest
from helpers import brute_force, partition_loss, random_problem, random_weights, seed_of

from qbnb_jax._device.runner import SearchStopped
from qbnb_jax._problem.data import make_problem
from qbnb_jax._search import deep, depth2, state
from qbnb_jax._search.anytime import cart_splits, run_until
from qbnb_jax._search.deep import DeepSearch
from qbnb_jax._search.depth2 import solve_depth2
from qbnb_jax._search.search import Search
from qbnb_jax._search.solve import _make_result, solve
from qbnb_jax._search.state import SearchOptions

CASES = [  # (task, k: classes or targets, weights)
    ("classification", 2, "int"),
    ("classification", 3, "float"),
    ("classification", 4, "ones"),
    ("regression", 1, "int"),
    ("regression", 2, "float"),
]


def draw(task, k, weights, seed, n=16, p=3):
    rng = np.random.default_rng(seed)
    P = random_problem(rng, task, n, p, k, weights=weights)
    w = random_weights(rng, n, weights)
    w[: n // 2] = np.where(w[: n // 2] > 0, w[: n // 2], 1.0)  # enough samples to split
    return P.X, P.y, w


def slack(task, weights, value, y, w) -> float:
    """Round-off allowed between the solver's and the brute force's losses."""
    if task == "classification" and weights != "float":
        return 0.0
    scale = float(w.sum()) if task == "classification" else float(
        (w[:, None] * (np.reshape(y, (len(y), -1)) ** 2)).sum())
    return 1e-9 * abs(value) + 1e-9 * max(1.0, scale)


def check_stopped(res, X, y, w, task, depth, want, tol):
    """A result of a stopped (or finished) solve: a valid tree and valid bounds."""
    assert res.status in ("optimal", "time_limit", "gap_limit")
    assert res.lower_bound <= want + tol, (res.lower_bound, want)
    assert want <= res.objective + tol, (want, res.objective)
    assert res.lower_bound <= res.objective
    res.tree.check()
    assert res.tree.max_depth <= depth
    own = partition_loss(res.tree.apply(X), y, w, task)
    assert own == pytest.approx(res.objective, rel=1e-9, abs=1e-9)
    if res.status == "optimal":
        assert abs(res.objective - want) <= tol


def cart_objective(X, y, w, task, depth) -> float:
    problem = make_problem(X, y, task=task, sample_weight=w)
    value, _ = cart_splits(problem, depth)
    return problem.true_loss(value)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("case", CASES)
def test_tiny_time_limit_returns_cart_or_better(case, depth):
    """A limit far below compiling: a tree no worse than CART's, bounds around the optimum."""
    task, k, weights = case
    for it in range(3):
        X, y, w = draw(task, k, weights, seed_of("tiny", task, k, weights, depth, it))
        want = brute_force(X, y, w, task=task, depth=depth)
        tol = slack(task, weights, want, y, w)
        res = solve(X, y, task=task, depth=depth, sample_weight=w, time_limit=1e-3)
        check_stopped(res, X, y, w, task, depth, want, tol)
        assert res.objective <= cart_objective(X, y, w, task, depth) + tol


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("case", CASES)
def test_anytime_path_is_exact(case, depth):
    """With time to spare, the worker thread, CART's start and the deep search's
    anytime order (middle cuts first, bounds inside iterations) find the optimum."""
    task, k, weights = case
    for it in range(3):
        X, y, w = draw(task, k, weights, seed_of("exact", task, k, weights, depth, it))
        want = brute_force(X, y, w, task=task, depth=depth)
        tol = slack(task, weights, want, y, w)
        res = solve(X, y, task=task, depth=depth, sample_weight=w, time_limit=600,
                    s=2 + it)
        assert res.status == "optimal"
        check_stopped(res, X, y, w, task, depth, want, tol)
        if depth == 3:  # the appendix route from CART's start
            res = solve(X, y, task=task, depth=3, sample_weight=w, time_limit=600,
                        route="appendix")
            assert res.status == "optimal"
            check_stopped(res, X, y, w, task, depth, want, tol)


class Ticks:
    """A clock that advances one second per reading: a solve with `time_limit=c` stops
    at its c-th time check, wherever that falls."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def stopped_deep(X, y, w, task, depth, checks, s=3, progress=None, **options):
    """An anytime search stopped at its `checks`-th time check, on this thread."""
    state.time = Ticks()  # (monkeypatched by the caller)
    problem = make_problem(X, y, task=task, sample_weight=w)
    options = SearchOptions.make(bound="w0", s=s, time_limit=checks, start=0.0, anytime=True,
                                 progress=progress, **options)
    with jax.enable_x64(True):
        if depth == 2:
            search = Search([problem], options)
            search.offer(*cart_splits(problem, depth))
            solve_depth2(search)
        else:
            search = DeepSearch(problem, options, depth=depth)
            search.offer(*cart_splits(problem, depth))
            search.solve_deep()
    return _make_result(search, depth)


def raised_inside(infos: list[dict]) -> int:
    """Progress reports inside an iteration (another of the same iteration follows)
    whose bound is above the one reported at the end of the iteration before."""
    raised, before = 0, 0.0
    for info, after in zip(infos, infos[1:] + [None]):
        if after is not None and after["iteration"] == info["iteration"]:
            raised += info["lower_bound"] > before
        else:
            before = info["lower_bound"]
    return raised


@pytest.mark.parametrize("case", CASES)
def test_depth3_stopped_anywhere_has_valid_bounds(case, monkeypatch):
    """Stopped at every time check in turn: bounds stay valid. And higher bounds are
    proved (and reported) inside iterations: in the first, once every tuple has a
    solved cut."""
    task, k, weights = case
    monkeypatch.setattr(state, "time", Ticks())
    rng = np.random.default_rng(seed_of("ticks", task, k, weights))
    monkeypatch.setattr(deep, "SIDE_GROUP", 2)  # several groups in an iteration
    inside = 0
    for it in range(2):
        X, _, w = draw(task, k, weights, seed_of("ticks", task, k, weights, it), n=20, p=3)
        # labels without structure: an optimum far from 0, many iterations
        y = rng.integers(0, k, 20) if task == "classification" else rng.normal(size=(20, k))
        want = brute_force(X, y, w, task=task, depth=3)
        tol = slack(task, weights, want, y, w)
        for checks in range(1, 80):
            res = stopped_deep(X, y, w, task, 3, checks, s=2 + it)
            check_stopped(res, X, y, w, task, 3, want, tol)
            if res.status == "optimal":
                break
        infos = []
        stopped_deep(X, y, w, task, 3, 10**9, s=2 + it, progress=infos.append)
        inside += raised_inside(infos)
    assert inside > 0


@pytest.mark.parametrize("case", CASES)
def test_depth2_stopped_between_blocks_has_valid_bounds(case, monkeypatch):
    """Blocks of one tuple: stopped at every time check in turn, bounds stay valid, and
    higher bounds are proved and reported between the blocks of an iteration."""
    task, k, weights = case
    monkeypatch.setattr(state, "time", Ticks())
    monkeypatch.setattr(depth2, "MAX_BLOCK_ELEMENTS", 1)  # one tuple per block
    rng = np.random.default_rng(seed_of("blocks", task, k, weights))
    inside = 0
    for it in range(2):
        X, _, w = draw(task, k, weights, seed_of("blocks", task, k, weights, it), n=60, p=4)
        y = rng.integers(0, k, 60) if task == "classification" else rng.normal(size=(60, k))
        want = brute_force(X, y, w, task=task, depth=2)
        tol = slack(task, weights, want, y, w)
        for checks in range(1, 80):
            res = stopped_deep(X, y, w, task, 2, checks, capacity=1)
            check_stopped(res, X, y, w, task, 2, want, tol)
            if res.status == "optimal":
                break
        infos = []
        stopped_deep(X, y, w, task, 2, 10**9, capacity=1, progress=infos.append)
        inside += raised_inside(infos)
        for max_gap in (0.0, 0.3):
            res = stopped_deep(X, y, w, task, 2, 10**9, capacity=1, max_gap=max_gap)
            check_stopped(res, X, y, w, task, 2, want, tol)
            assert res.gap <= max_gap * res.objective + tol
    assert inside > 0


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("depth", [2, 3])
def test_max_gap(case, depth):
    """A proved gap within max_gap (status "gap_limit"), or the optimum; max_gap=0 is
    the optimum."""
    task, k, weights = case
    for it in range(2):
        X, y, w = draw(task, k, weights, seed_of("gap", task, k, weights, depth, it))
        want = brute_force(X, y, w, task=task, depth=depth)
        tol = slack(task, weights, want, y, w)
        for max_gap in (0.0, 0.2, 1.0):
            res = solve(X, y, task=task, depth=depth, sample_weight=w, max_gap=max_gap)
            check_stopped(res, X, y, w, task, depth, want, tol)
            assert res.status in ("optimal", "gap_limit")
            assert res.status == "optimal" or res.gap > 0  # a gap of 0 is a proof
            assert res.gap <= max_gap * res.objective + tol
            if max_gap == 0.0:
                assert abs(res.objective - want) <= tol


def test_max_gap_one_stops_early():
    """Any tree is within a relative gap of 1: the search stops at its first check."""
    X, y, w = draw("classification", 3, "int", seed_of("gap1"), n=40, p=4)
    res = solve(X, y, task="classification", depth=2, sample_weight=w, max_gap=1.0)
    assert res.status == "gap_limit"
    assert res.stats["iterations"] == 0


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True])
def test_max_gap_must_be_a_fraction(bad):
    X, y, w = draw("classification", 2, "int", 0)
    with pytest.raises(ValueError, match="max_gap"):
        solve(X, y, task="classification", depth=2, max_gap=bad)


def test_run_until_returns_at_the_deadline_and_stops_the_worker():
    stop = threading.Event()
    ended = threading.Event()

    def work():
        try:
            while True:
                if stop.is_set():
                    raise SearchStopped  # as a kernel call would
                time.sleep(0.01)
        finally:
            ended.set()

    assert run_until(work, time.perf_counter() + 0.05, stop) is False
    assert stop.is_set()
    assert ended.wait(5)


def test_run_until_hands_back_errors_and_results():
    def fails():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        run_until(fails, time.perf_counter() + 5, threading.Event())
    done = []
    assert run_until(lambda: done.append(1), time.perf_counter() + 5, threading.Event())
    assert done == [1]


def test_estimator_max_gap():
    from qbnb_jax import OptimalTreeClassifier

    X, y, _ = draw("classification", 3, "ones", seed_of("est-gap"), n=40, p=4)
    clf = OptimalTreeClassifier(max_depth=2, max_gap=1.0).fit(X, y)
    assert clf.status_ == "gap_limit"
    assert clf.objective_ - clf.lower_bound_ <= clf.objective_
    with pytest.raises(ValueError, match="max_gap"):
        OptimalTreeClassifier(max_gap=2.0).fit(X, y)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("case", CASES)
def test_initial_tree(case, depth):
    """A user's tree is the first incumbent: an optimal one comes back (from a tiny
    limit too, and proved optimal without one); scikit-learn's trees are taken."""
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    task, k, weights = case
    X, y, w = draw(task, k, weights, seed_of("initial", task, k, weights, depth))
    X = np.round(X * 4) / 4  # float32-exact: scikit-learn routes as the solver does
    want = brute_force(X, y, w, task=task, depth=depth)
    tol = slack(task, weights, want, y, w)
    best = solve(X, y, task=task, depth=depth, sample_weight=w)
    res = solve(X, y, task=task, depth=depth, sample_weight=w, time_limit=1e-3,
                initial_tree=best)
    check_stopped(res, X, y, w, task, depth, want, tol)
    assert res.objective <= best.objective + tol
    res = solve(X, y, task=task, depth=depth, sample_weight=w, initial_tree=best.tree)
    assert res.status == "optimal" and abs(res.objective - want) <= tol
    cls = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
    cart = cls(max_depth=depth, random_state=0).fit(X, y, sample_weight=w)
    own = partition_loss(cart.apply(X), y, w, task)
    res = solve(X, y, task=task, depth=depth, sample_weight=w, time_limit=1e-3,
                initial_tree=cart)
    check_stopped(res, X, y, w, task, depth, want, tol)
    assert res.objective <= own + tol


def test_initial_tree_bad_input():
    X, y, _ = draw("classification", 2, "ones", seed_of("initial-bad"), n=40, p=3)
    deep3 = solve(X, y, task="classification", depth=3)
    with pytest.raises(ValueError, match="initial_tree"):
        solve(X, y, task="classification", depth=2, initial_tree=deep3.tree)
    with pytest.raises(ValueError, match="initial_tree"):
        solve(X[:, :1], y, task="classification", depth=3, initial_tree=deep3.tree)
    with pytest.raises(ValueError, match="initial_tree"):
        solve(X, y, task="classification", depth=2, initial_tree="a tree")
