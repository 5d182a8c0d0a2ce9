"""`qbnb_jax.solve` against the independent brute force of tests/helpers.py.

Random problems are drawn in loops with fixed seeds. To keep JAX compilation bounded, the
number of positive-weight rows is drawn from a few sizes (`SIZES`) and features/classes
from a few combinations; zero-weight rows are added on top, so the total n still ranges
over 1..60 and zero weights are exercised throughout.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import (
    Problem,
    _encode_targets,
    brute_force,
    leaf_losses,
    partition_loss,
    prediction_loss,
    random_problem,
    random_weights,
    seed_of,
)

qbnb_jax = pytest.importorskip("qbnb_jax")
solve = qbnb_jax.solve

BOUNDS = ("w0", "w1", "w2", "l2")
SIZES = (1, 3, 7, 15, 31, 60)  # positive-weight rows
CLS_SHAPES = ((1, 2), (3, 3), (4, 5), (2, 4))  # (p, n_classes)
REG_SHAPES = ((2, 1), (3, 3), (4, 2))  # (p, n_targets)


# --------------------------------------------------------------------------------------
# problem generation
# --------------------------------------------------------------------------------------


def make_case(rng, task, n_pos, p, k, weights="mixed", n_zero=None) -> Problem:
    """`n_pos` positive-weight rows plus `n_zero` zero-weight rows (random if None),
    total <= 60. Classification: the zero-weight rows carry every label, so the label
    set (and the compiled shapes) stays fixed at `k` classes when there are enough of them."""
    if n_zero is None:
        n_zero = int(rng.integers(0, 60 - n_pos + 1)) if rng.random() < 0.5 else 0
    n_zero = min(n_zero, 60 - n_pos)
    P = random_problem(rng, task, n_pos + n_zero, p, k, weights=weights)
    if weights == "mixed":
        weights = str(rng.choice(["ones", "int", "float"]))
    w = random_weights(rng, n_pos, weights)
    w = np.where(w > 0, w, 1.0)  # exactly n_pos positive weights
    pos = rng.permutation(n_pos + n_zero)[:n_pos]
    P.w = np.zeros(n_pos + n_zero)
    P.w[pos] = w
    if task == "classification" and n_zero >= k:
        zero_rows = np.setdiff1d(np.arange(n_pos + n_zero), pos)[:k]
        labels = np.sort(np.unique(P.y))
        if labels.size < k:  # top up the label set with unused labels
            extra = np.setdiff1d(np.arange(-3, 12), labels)[: k - labels.size]
            labels = np.sort(np.concatenate([labels, extra]))
        P.y = P.y.copy()
        P.y[zero_rows] = labels[:k]
    return P


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------


def root_scale(P: Problem) -> float:
    """Loss of the single-leaf tree: the natural absolute scale of the objective."""
    Y = _encode_targets(P.y, P.task)
    return float(leaf_losses(np.ones((1, P.n), bool), Y, P.w, P.task)[0])


def integral(P: Problem) -> bool:
    return bool(np.all(P.w == np.round(P.w)))


def tolerance(P: Problem, value: float) -> float:
    """How far the objective may be from the brute-force optimum: 0 for integer-weight
    classification (exact counts), round-off for fractional weights, rel 1e-9 for regression."""
    if P.task == "classification":
        return 0.0 if integral(P) else 1e-12 * max(1.0, float(P.w.sum()))
    return 1e-9 * abs(value) + 1e-10 * max(1.0, root_scale(P))


def gap_tolerance(P: Problem, value: float) -> float:
    """The largest allowed `gap`: 0 for exact counts; otherwise pruning keeps a tolerance
    (DESIGN.md section 4: fractional weights follow the regression rule)."""
    if P.task == "classification" and integral(P):
        return 0.0
    scale = float(P.w.sum()) if P.task == "classification" else root_scale(P)
    return 1e-9 * abs(value) + 1e-10 * max(1.0, scale)


def node_membership(tree, X) -> np.ndarray:
    """(n_nodes, n) bool: which training rows reach each node, by routing from the root."""
    reach = np.zeros((tree.n_nodes, X.shape[0]), dtype=bool)
    reach[0] = True
    for node in range(tree.n_nodes):  # preorder
        f = tree.feature[node]
        if f < 0:
            continue
        left = X[:, f] <= tree.threshold[node]
        reach[tree.children_left[node]] = reach[node] & left
        reach[tree.children_right[node]] = reach[node] & ~left
    return reach


def check_result(res, P: Problem, depth: int, want: float, label: str = "") -> None:
    """Everything a result must satisfy, given the brute-force optimum `want`."""
    ctx = f"{label} depth={depth} n={P.n} p={P.p} task={P.task}"
    tol = tolerance(P, want)
    assert res.status == "optimal", ctx
    # the optimum
    if tol == 0.0:
        assert res.objective == want, (ctx, res.objective, want)
    else:
        assert abs(res.objective - want) <= tol, (ctx, res.objective, want)
    # bounds and gap
    gap_tol = gap_tolerance(P, want)
    assert res.lower_bound <= res.objective, ctx
    assert res.lower_bound <= want + tol, (ctx, "lower bound above the optimum", res.lower_bound)
    assert res.gap >= 0.0 and res.gap <= gap_tol, (ctx, res.gap, gap_tol)
    assert res.gap == pytest.approx(res.objective - res.lower_bound, rel=1e-9, abs=1e-12), ctx
    if gap_tol == 0.0:
        assert res.lower_bound == res.objective, ctx
    # the tree
    tree = res.tree
    tree.check()
    assert tree.max_depth <= depth, ctx
    assert tree.task == P.task
    leaves = tree.apply(P.X)
    assert np.all(tree.feature[leaves] < 0), ctx
    own = partition_loss(leaves, P.y, P.w, P.task)
    ptol = max(tol, 1e-12 * max(1.0, want))
    assert abs(own - res.objective) <= ptol, (ctx, "tree's own loss", own, res.objective)
    if P.task == "classification":
        assert res.classes is not None
        np.testing.assert_array_equal(res.classes, np.unique(P.y))
        pred = res.classes[tree.predict(P.X)]
        assert abs(prediction_loss(pred, P.y, P.w, P.task) - res.objective) <= ptol, ctx
    else:
        assert res.classes is None
        pred = tree.predict(P.X)
        got = prediction_loss(pred, P.y, P.w, P.task)
        assert abs(got - res.objective) <= max(tol, 1e-9 * max(1.0, want)), (ctx, got)
    # node values and weights, recomputed from the training data
    reach = node_membership(tree, P.X).astype(np.float64)
    node_w = reach @ P.w
    np.testing.assert_allclose(tree.weighted_n_node_samples, node_w, rtol=1e-12, atol=1e-12)
    if P.task == "classification":
        codes = np.searchsorted(res.classes, P.y)
        onehot = np.eye(len(res.classes))[codes]
        counts = reach @ (onehot * P.w[:, None])
        np.testing.assert_allclose(tree.value, counts, rtol=1e-12, atol=1e-12)
    else:
        Y = np.asarray(P.y, dtype=np.float64).reshape(P.n, -1)
        assert tree.value.shape[1] == Y.shape[1]
        has = node_w > 0
        means = (reach @ (Y * P.w[:, None]))[has] / node_w[has, None]
        np.testing.assert_allclose(
            tree.value[has], means, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(Y).max())
        )
    # stats
    for key in ("iterations", "frontier_sizes", "compile_seconds", "solve_seconds"):
        assert key in res.stats, key


def run_random(task, depth, shapes, n_problems, seed, bounds=BOUNDS, weights="mixed"):
    rng = np.random.default_rng(seed)
    for it in range(n_problems):
        p, k = shapes[it % len(shapes)]
        n_pos = int(SIZES[rng.integers(0, len(SIZES))])
        P = make_case(rng, task, n_pos, p, k, weights=weights)
        want = brute_force(P.X, P.y, P.w, task=task, depth=depth)
        for bound in bounds:
            res = solve(P.X, P.y, task=task, depth=depth, sample_weight=P.w, bound=bound)
            check_result(res, P, depth, want, label=f"it={it} seed={seed} bound={bound}")


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task,shapes", [("classification", CLS_SHAPES), ("regression", REG_SHAPES)]
)
def test_random_depth1(task, shapes):
    """100 problems per task."""
    run_random(task, 1, shapes, 100, seed_of("d1", task), bounds=("w1",))


def test_random_depth2_classification():
    """160 problems, each with every bound (640 solves)."""
    run_random("classification", 2, CLS_SHAPES, 160, seed_of("d2", "classification"))


def test_random_depth2_regression():
    """120 problems, each with every bound (480 solves)."""
    run_random("regression", 2, REG_SHAPES, 120, seed_of("d2", "regression"))


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_unit_weights_and_no_weights(task):
    """sample_weight=None is unit weights (20 problems)."""
    rng = np.random.default_rng(seed_of("unit", task))
    for it in range(20):
        p, k = (CLS_SHAPES if task == "classification" else REG_SHAPES)[it % 3]
        P = make_case(rng, task, int(SIZES[it % len(SIZES)]), p, k, weights="ones", n_zero=0)
        want = brute_force(P.X, P.y, None, task=task, depth=2)
        res = solve(P.X, P.y, task=task, depth=2)
        check_result(res, P, 2, want, label=f"it={it}")


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_integer_weights_equal_repeated_rows(task):
    """Integer weights give the optimum of the data with rows repeated (24 problems)."""
    rng = np.random.default_rng(seed_of("repeat", task))
    shapes = CLS_SHAPES if task == "classification" else REG_SHAPES
    pairs = [(3, 7), (7, 15), (15, 31), (31, 60)]  # (distinct rows, total weight)
    for it in range(24):
        n_pos, total = pairs[it % len(pairs)]
        p, k = shapes[it % len(shapes)]
        P = make_case(rng, task, n_pos, p, k, weights="ones", n_zero=0)
        # a random composition of `total` into n_pos positive integer parts
        cuts = np.sort(rng.choice(np.arange(1, total), size=n_pos - 1, replace=False))
        P.w = np.diff(np.concatenate([[0], cuts, [total]])).astype(np.float64)
        rep = np.repeat(np.arange(n_pos), P.w.astype(int))
        R = Problem(X=P.X[rep], y=P.y[rep], w=np.ones(total), task=task)
        for depth in (1, 2):
            want = brute_force(P.X, P.y, P.w, task=task, depth=depth)
            bound = BOUNDS[it % 4]
            a = solve(P.X, P.y, task=task, depth=depth, sample_weight=P.w, bound=bound)
            b = solve(R.X, R.y, task=task, depth=depth, bound=bound)
            check_result(a, P, depth, want, label=f"weighted it={it}")
            check_result(b, R, depth, want, label=f"repeated it={it}")
            assert abs(a.objective - b.objective) <= tolerance(P, want), (it, depth)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_forced_frontier_overflow(task):
    """initial_capacity=2 forces the frontier to grow; still optimal (20 problems x bounds)."""
    rng = np.random.default_rng(seed_of("overflow", task))
    shapes = CLS_SHAPES if task == "classification" else REG_SHAPES
    peak = 0
    for it in range(20):
        p, k = shapes[it % len(shapes)]
        if p == 1:
            p, k = shapes[1]
        P = make_case(rng, task, int(SIZES[3 + it % 3]), p, k)
        want = brute_force(P.X, P.y, P.w, task=task, depth=2)
        for bound in BOUNDS:
            res = solve(
                P.X, P.y, task=task, depth=2, sample_weight=P.w, bound=bound, initial_capacity=2
            )
            check_result(res, P, 2, want, label=f"overflow it={it} bound={bound}")
            peak = max(peak, max(res.stats["frontier_sizes"], default=0))
    assert peak > 2, "no problem overflowed the initial capacity: the test is vacuous"


@pytest.mark.parametrize("s", [2, 5])
def test_other_s(s):
    """The number of pieces per iteration does not change the optimum (16 problems)."""
    rng = np.random.default_rng(seed_of("s", s))
    for it in range(16):
        task = ("classification", "regression")[it % 2]
        p, k = (CLS_SHAPES if task == "classification" else REG_SHAPES)[1]
        P = make_case(rng, task, int(SIZES[2 + it % 4]), p, k)
        want = brute_force(P.X, P.y, P.w, task=task, depth=2)
        for bound in BOUNDS:
            res = solve(P.X, P.y, task=task, depth=2, sample_weight=P.w, bound=bound, s=s)
            check_result(res, P, 2, want, label=f"s={s} it={it} bound={bound}")


def test_edge_cases():
    # one sample
    for task, y in (("classification", np.array(["a"])), ("regression", np.array([2.5]))):
        for depth in (1, 2):
            res = solve(np.array([[1.0, 2.0]]), y, task=task, depth=depth)
            assert res.objective == 0.0 and res.status == "optimal"
            assert res.tree.max_depth == 0
    # constant features: the best tree is a leaf
    X = np.ones((9, 3))
    y = np.array([0, 1, 1, 2, 1, 0, 1, 2, 1])
    for depth in (1, 2):
        for bound in BOUNDS:
            res = solve(X, y, task="classification", depth=depth, bound=bound)
            assert res.objective == 4.0 and res.tree.max_depth == 0 and res.gap == 0
    # XOR needs depth 2; string labels keep their sorted order
    Xx = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]] * 3)
    yx = np.array(["no", "yes", "yes", "no"] * 3)
    assert solve(Xx, yx, task="classification", depth=1).objective == 6.0
    for bound in BOUNDS:
        res = solve(Xx, yx, task="classification", depth=2, bound=bound)
        assert res.objective == 0.0 and res.tree.max_depth == 2
        np.testing.assert_array_equal(res.classes, ["no", "yes"])
        np.testing.assert_array_equal(res.classes[res.tree.predict(Xx)], yx)
    # regression with a large offset and tiny spread (cancellation)
    rng = np.random.default_rng(0)
    Xr = rng.integers(0, 4, size=(31, 2)).astype(float)
    yr = 1e8 + Xr[:, 0] * 1e-3 + rng.normal(size=31) * 1e-4
    want = brute_force(Xr, yr, None, task="regression", depth=2)
    for bound in BOUNDS:
        res = solve(Xr, yr, task="regression", depth=2, bound=bound)
        check_result(res, Problem(Xr, yr, np.ones(31), "regression"), 2, want, f"offset {bound}")


def test_second_solve_compiles_nothing():
    """A repeated identical solve traces and compiles nothing new."""
    rng = np.random.default_rng(seed_of("compile"))
    events: list[str] = []

    def listener(event: str, duration: float, **kwargs) -> None:
        if event.startswith("/jax/core/compile/"):
            events.append(event)

    cases = [
        make_case(rng, "classification", 31, 3, 3, weights="int", n_zero=5),
        make_case(rng, "regression", 31, 3, 3, weights="float", n_zero=5),
    ]
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for P in cases:
            for bound in BOUNDS:
                kwargs = dict(task=P.task, depth=2, sample_weight=P.w, bound=bound)
                first = solve(P.X, P.y, **kwargs)
                events.clear()
                second = solve(P.X, P.y, **kwargs)
                assert events == [], (P.task, bound, events)
                assert second.objective == first.objective
                assert second.stats["compile_seconds"] <= 0.05, second.stats
        # the listener does see compilation (so the check above can fail)
        events.clear()
        jax.jit(lambda x: x * 3 + 1)(np.arange(7.0))
        assert any(e.endswith("backend_compile_duration") or "trace" in e for e in events), events
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize("route", ["recursion", "appendix"])
@pytest.mark.parametrize(
    "task,shapes", [("classification", CLS_SHAPES[:2]), ("regression", REG_SHAPES[:2])]
)
def test_random_depth3(task, shapes, route):
    """Depth 3 against the brute force (100 problems per task and route, n <= 20, p <= 3,
    every bound (the appendix route: W0, s = 2..4), weights with zeros, ties;
    multi-output regression via REG_SHAPES)."""
    rng = np.random.default_rng(seed_of("d3", task, route))
    for it in range(100):
        p, k = shapes[it % len(shapes)]
        n_pos = int((1, 3, 7, 15, 20)[rng.integers(0, 5)])
        P = make_case(rng, task, n_pos, p, k, n_zero=int(rng.integers(0, 21 - n_pos)))
        want = brute_force(P.X, P.y, P.w, task=task, depth=3)
        if route == "recursion":
            options = dict(bound=BOUNDS[it % 4])
        else:
            options = dict(route=route, s=2 + it % 3)
        res = solve(P.X, P.y, task=task, depth=3, sample_weight=P.w, **options)
        check_result(res, P, 3, want, label=f"d3 it={it} {options}")


@pytest.mark.parametrize("task,shape", [("classification", (2, 3)), ("regression", (2, 2))])
def test_random_depth4(task, shape):
    """Depth 4 against the brute force on tiny problems (n <= 9, p = 2)."""
    rng = np.random.default_rng(seed_of("d4", task))
    p, k = shape
    for it in range(4):
        n_pos = int((3, 6, 9)[it % 3])
        P = make_case(rng, task, n_pos, p, k, n_zero=int(rng.integers(0, 3)))
        want = brute_force(P.X, P.y, P.w, task=task, depth=4)
        res = solve(P.X, P.y, task=task, depth=4, sample_weight=P.w)
        check_result(res, P, 4, want, label=f"d4 it={it}")


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_random_depth5(task):
    """Depth 5 (the recursion applied three times) against the brute force, n <= 8."""
    rng = np.random.default_rng(seed_of("d5", task))
    for it in range(3):
        P = make_case(rng, task, int((4, 8)[it % 2]), 2, 3 if task == "classification" else 1,
                      n_zero=int(rng.integers(0, 3)))
        want = brute_force(P.X, P.y, P.w, task=task, depth=5)
        res = solve(P.X, P.y, task=task, depth=5, sample_weight=P.w)
        check_result(res, P, 5, want, label=f"d5 it={it}")



def test_blocked_full_sweep_matches_brute_force(monkeypatch):
    """The block-by-block sweep of large n, forced onto small problems."""
    import jax

    from qbnb_jax import _kernels, _runner

    monkeypatch.setattr(_kernels, "BLOCKED_FROM", 64)
    monkeypatch.setattr(_kernels, "FULL_BLOCK", 8)
    monkeypatch.setattr(_runner, "_COMPILED", {})
    jax.clear_caches()
    try:
        rng = np.random.default_rng(17)
        for it in range(12):
            task = "regression" if it % 2 else "classification"
            n, p = int(rng.integers(2, 50)), int(rng.integers(1, 4))
            X = np.round(rng.normal(size=(n, p)), 1)
            y = rng.normal(size=(n, 2)) if task == "regression" else rng.integers(0, 3, n)
            w = rng.random(n) + 0.1
            res = qbnb_jax.solve(X, y, task=task, depth=2, sample_weight=w)
            want = brute_force(X, y, w, task=task, depth=2)
            assert res.objective == pytest.approx(want, rel=1e-9, abs=1e-12), (it, n, p)
    finally:
        jax.clear_caches()


@pytest.mark.parametrize("depth", [2, 3])
def test_cut_elements_count_the_work_deterministically(depth):
    """`stats["cut_elements"]` (the benchmark's noise-free work measure) repeats exactly."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    first = qbnb_jax.solve(X, y, task="classification", depth=depth)
    second = qbnb_jax.solve(X, y, task="classification", depth=depth)
    assert first.stats["cut_elements"] > 0
    assert first.stats["cut_elements"] == second.stats["cut_elements"]
    assert first.stats["cut_elements"] >= first.stats["cut_evaluations"]
