"""Batched solves equal one-by-one solves: bootstrap weights, folds, different datasets."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import brute_force

import qbnb_jax
from qbnb_jax._constants import BOUNDS
from qbnb_jax._problem.data import make_problem


def same_tree(a, b) -> bool:
    ta, tb = a.tree, b.tree
    return (
        np.array_equal(ta.feature, tb.feature)
        and np.array_equal(ta.threshold, tb.threshold, equal_nan=True)
        and np.array_equal(ta.children_left, tb.children_left)
        and np.array_equal(ta.value, tb.value)
        and np.array_equal(ta.weighted_n_node_samples, tb.weighted_n_node_samples)
    )


def assert_same(batched, alone, task, ctx, same_bound=True):
    """The same tree and objective, bit for bit (float sums included), and with
    `same_bound` the same proved bound (the search's own sums: `solve_many` pads stat
    channels, which changes how a two-class problem's losses are formed)."""
    assert batched.objective == alone.objective, ctx
    if same_bound:
        assert batched.lower_bound == alone.lower_bound, ctx
    if task == "classification":
        assert np.array_equal(batched.classes, alone.classes), ctx
    assert same_tree(batched, alone), ctx
    assert batched.status == alone.status == "optimal", ctx


def random_data(rng, task, n, p):
    X = np.round(rng.normal(size=(n, p)), 1)  # ties
    if rng.random() < 0.3:
        X[:, rng.integers(p)] = 1.0  # a constant feature
    if task == "classification":
        y = rng.integers(0, rng.integers(2, 5), size=n)
    else:
        y = rng.normal(size=(n, int(rng.integers(1, 3))))
    return X, y


def weight_rows(rng, n, P):
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float)  # bootstrap
    W[0] = rng.random(n) < 0.6  # a fold
    W[1] = rng.random(n) * (rng.random(n) < 0.8)  # fractional, with zeros
    W[:, rng.integers(n)] += 1  # no row all zero
    return W


@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("depth", [1, 2])
def test_batch_equals_one_by_one(task, depth):
    rng = np.random.default_rng(11 + depth)
    for it in range(6):
        n, p = int(rng.integers(2, 40)), int(rng.integers(1, 5))
        X, y = random_data(rng, task, n, p)
        W = weight_rows(rng, n, 5)
        if it % 2:
            W = np.round(W[2:])  # integer weights only: exact counts in the batch
        results = qbnb_jax.solve_batch(X, y, W, task=task, depth=depth)
        assert len(results) == len(W)
        for i, (w, res) in enumerate(zip(W, results)):
            alone = qbnb_jax.solve(X, y, task=task, depth=depth, sample_weight=w)
            ctx = f"it={it} i={i} n={n} p={p}"
            assert_same(res, alone, task, ctx)
            keep = w > 0
            want = brute_force(X[keep], y[keep], w[keep], task=task, depth=depth)
            assert res.objective == pytest.approx(want, rel=1e-9, abs=1e-9), ctx


@pytest.mark.parametrize("bound", BOUNDS)
def test_batch_every_bound_is_optimal(bound):
    rng = np.random.default_rng(5)
    X, y = random_data(rng, "classification", 30, 3)
    W = np.round(weight_rows(rng, 30, 4))
    W[:, 0] += 1
    for w, res in zip(W, qbnb_jax.solve_batch(X, y, W, task="classification", bound=bound)):
        keep = w > 0
        want = brute_force(X[keep], y[keep], w[keep], task="classification", depth=2)
        assert res.objective == want


def test_cross_validation_folds_depth3():
    rng = np.random.default_rng(3)
    X, y = random_data(rng, "classification", 24, 3)
    folds = np.arange(24) % 3
    W = np.stack([(folds != k).astype(float) for k in range(3)])
    for w, res in zip(W, qbnb_jax.solve_batch(X, y, W, task="classification", depth=3)):
        alone = qbnb_jax.solve(X, y, task="classification", depth=3, sample_weight=w)
        assert_same(res, alone, "classification", "depth 3")


@pytest.mark.usefixtures("sequential_plan")  # its paths are that plan's
@pytest.mark.parametrize(("task", "kind"), [("regression", 1), ("regression", 2),
                                          ("classification", 2), ("classification", 3),
                                          ("classification", 5)])
def test_float_sums_share_the_layout_bit_for_bit(task, kind, monkeypatch):
    """Regression (`kind` targets) and fractional class weights (`kind` classes) run on
    the shared layout, each problem swept on its own positive samples, and return
    solve()'s trees, objectives and bounds bit for bit: windows, ties, zero-weight rows
    and integer rows (counts) among fractional ones."""
    import qbnb_jax._search.batch as batch_module

    rng = np.random.default_rng(kind + 10 * (task == "regression"))
    n, p = 240, 4
    X = np.round(rng.normal(size=(n, p)), 1)
    if task == "regression":
        y = np.where(X[:, :1] > 0.2, 1.5, -0.5) + rng.normal(size=(n, kind))
    else:
        y = (np.digitize(X[:, 0] + 0.6 * X[:, 1] + 0.5 * rng.normal(size=n),
                         np.linspace(-1, 1, kind - 1)) + 7) * 3  # labels, not codes
    W = rng.multinomial(n, np.full(n, 1 / n), size=6).astype(float)
    W[:4] *= np.round(rng.uniform(0.5, 2.0, size=(4, n)), 3)  # fractional
    W[4] = rng.random(n) < 0.8  # a fold
    made = []
    monkeypatch.setattr(batch_module, "make_problem",
                        lambda *a, **k: made.append(k) or make_problem(*a, **k))
    for depth in (1, 2):
        made.clear()
        results = qbnb_jax.solve_batch(X, y, W, task=task, depth=depth)
        assert len(made) == 1, "one presorted layout for the whole batch"
        for i, (w, res) in enumerate(zip(W, results)):
            alone = qbnb_jax.solve(X, y, task=task, depth=depth, sample_weight=w)
            assert_same(res, alone, task, f"depth={depth} i={i}")


@pytest.mark.usefixtures("sequential_plan")  # its paths are that plan's
@pytest.mark.parametrize("targets", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_regression_lanes_equal_one_by_one(targets, monkeypatch):
    """Regression batches of GRID_MIN_PROBLEMS or more keep the shared layout and sweep
    in `sweep_grid`'s lanes (`_sse_grid`): still solve()'s trees, objectives and bounds
    bit for bit (fractional weights, folds, bootstrap counts, ties)."""
    import qbnb_jax._device.runner as runner_module

    rng = np.random.default_rng(20 + targets)
    n, p, P = 90, 3, runner_module.GRID_MIN_PROBLEMS + 2
    X = np.round(rng.normal(size=(n, p)), 1)
    y = np.where(X[:, :1] > 0.2, 1.5, -0.5) + rng.normal(size=(n, targets))
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float)
    W[:10] *= np.round(rng.uniform(0.5, 2.0, size=(10, n)), 3)  # fractional
    W[10] = rng.random(n) < 0.8  # a fold
    calls = []
    real = runner_module.KernelRunner._run_grid
    monkeypatch.setattr(runner_module.KernelRunner, "_run_grid",
                        lambda self, *a: calls.append(1) or real(self, *a))
    results = qbnb_jax.solve_batch(X, y, W, task="regression", depth=2)
    assert calls, "the batch swept in sweep_grid's lanes"
    # each kind of weights, in a block that holds both kinds (`root_totals`): alone,
    # each problem compiles for its own length, so not all of them are solved again
    for i in (0, 5, 9, 10, 11, 17, 24, P - 1):
        alone = qbnb_jax.solve(X, y, task="regression", depth=2, sample_weight=W[i])
        assert_same(results[i], alone, "regression", f"i={i}")


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_float_batches_in_two_halves_equal_one_by_one(task, monkeypatch):
    """Large float batches run as two concurrent halves (here from 6 problems), each
    result still solve()'s."""
    import qbnb_jax._search.batch as batch_module

    monkeypatch.setattr(batch_module, "SPLIT_FROM", 3)
    monkeypatch.setattr(batch_module, "THREADS", 2)
    rng = np.random.default_rng(4)
    X, y = random_data(rng, task, 60, 3)
    W = rng.multinomial(60, np.full(60, 1 / 60), size=6) * rng.uniform(0.5, 2.0, (6, 60))
    results = qbnb_jax.solve_batch(X, y, W, task=task)
    for i, (w, res) in enumerate(zip(W, results)):
        assert_same(res, qbnb_jax.solve(X, y, task=task, sample_weight=w), task, f"i={i}")


@pytest.mark.parametrize("n_classes", [3, 5])
def test_many_class_counts_sweep_their_own_samples(n_classes, monkeypatch):
    """Bootstrap counts of several classes sweep each problem's positive samples alone
    (`positive_layouts`), and still return solve()'s trees and objectives."""
    import qbnb_jax._search.batch as batch_module

    rng = np.random.default_rng(n_classes)
    n, p, P = 200, 4, max(batch_module.OWN_LAYOUTS_FROM, 9)
    X = np.round(rng.normal(size=(n, p)), 1)
    y = np.digitize(X[:, 0] - 0.7 * X[:, 2] + 0.5 * rng.normal(size=n),
                    np.linspace(-1, 1, n_classes - 1))
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float)
    W[0] = rng.random(n) < 0.7  # a fold
    calls = []
    real = batch_module.positive_layouts
    monkeypatch.setattr(batch_module, "positive_layouts",
                        lambda *a: calls.append(1) or real(*a))
    for depth in (1, 2):
        results = qbnb_jax.solve_batch(X, y, W, task="classification", depth=depth)
        for i, (w, res) in enumerate(zip(W, results)):
            alone = qbnb_jax.solve(X, y, task="classification", depth=depth, sample_weight=w)
            assert_same(res, alone, "classification", f"depth={depth} i={i}")
    assert calls, "the batch swept its problems' own samples"


@pytest.mark.usefixtures("sequential_plan")  # its paths are that plan's
@pytest.mark.parametrize("n_classes", [3, 5])
def test_few_class_counts_sweep_in_grid_lanes(n_classes, monkeypatch):
    """Bootstrap counts of a few classes keep the shared layout and sweep in
    `sweep_grid`'s lanes (`_class_grid`), and still return solve()'s trees and
    objectives."""
    from qbnb_jax._device.runner import GRID_MIN_PROBLEMS, KernelRunner

    rng = np.random.default_rng(n_classes + 10)
    n, p, P = 80, 3, GRID_MIN_PROBLEMS
    X = np.round(rng.normal(size=(n, p)), 1)
    y = np.digitize(X[:, 0] - 0.7 * X[:, 2] + 0.5 * rng.normal(size=n),
                    np.linspace(-1, 1, n_classes - 1))
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float)
    calls = []
    real = KernelRunner._run_grid
    monkeypatch.setattr(KernelRunner, "_run_grid",
                        lambda self, *a: calls.append(1) or real(self, *a))
    results = qbnb_jax.solve_batch(X, y, W, task="classification", depth=2)
    assert calls, "the batch swept in the grid's lanes"
    for i, (w, res) in enumerate(zip(W, results)):
        alone = qbnb_jax.solve(X, y, task="classification", depth=2, sample_weight=w)
        assert_same(res, alone, "classification", f"i={i}")


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_solve_many_pads_different_problems(task):
    rng = np.random.default_rng(7)
    datasets = []
    for n, p in [(5, 1), (37, 4), (12, 2), (60, 3), (41, 2)]:
        X, y = random_data(rng, task, n, p)
        if task == "regression":
            y = y[:, :1] if n % 2 else y  # different numbers of targets
        if n == 12:
            datasets.append((X, y, rng.random(n) + 0.5))  # fractional weights
        elif n == 41:
            datasets.append((X, y, rng.integers(0, 3, n)))  # counts with zeros
        else:
            datasets.append((X, y))
    for depth in (1, 2, 3):
        results = qbnb_jax.solve_many(datasets, task=task, depth=depth)
        for d, res in zip(datasets, results):
            alone = qbnb_jax.solve(d[0], d[1], task=task, depth=depth,
                                   sample_weight=d[2] if len(d) == 3 else None)
            assert_same(res, alone, task, f"n={len(d[0])}")
            assert res.n_features == d[0].shape[1]


def test_batch_time_limit_keeps_valid_bounds():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 8))
    y = rng.integers(0, 2, 3000)
    W = rng.multinomial(3000, np.full(3000, 1 / 3000), size=3)
    results = qbnb_jax.solve_batch(X, y, W, task="classification", time_limit=1e-3)
    for r in results:
        assert r.status in ("time_limit", "optimal")
        assert 0 <= r.lower_bound <= r.objective


@pytest.mark.parametrize(
    "weights, message",
    [
        (np.ones(10), "shape"),
        (np.ones((2, 9)), "shape"),
        (np.ones((0, 10)), "shape"),
        (np.stack([np.ones(10), np.zeros(10)]), "zero everywhere"),
        (np.stack([np.ones(10), -np.ones(10)]), "non-negative"),
        (np.full((1, 10), np.nan), "NaN"),
        ([["a"] * 10], "numeric"),
    ],
)
def test_bad_weights_name_the_problem(weights, message):
    X = np.arange(20.0).reshape(10, 2)
    y = np.arange(10) % 2
    with pytest.raises(ValueError, match=message):
        qbnb_jax.solve_batch(X, y, weights, task="classification")


def test_regression_weightings_in_scaled_units_and_refused_as_solve():
    """Regression weightings set up together (`scaling.sse_setup`): rows whose sums
    need scaled units (tiny or huge weights, large targets) give solve()'s trees bit
    for bit, and the first weighting float64 cannot hold raises solve()'s error."""
    rng = np.random.default_rng(7)
    n = 60
    X = np.round(rng.normal(size=(n, 2)), 1)
    y = 1e100 * (np.where(X[:, 0] > 0, 2.0, 0.0) + rng.normal(size=n))
    W = rng.multinomial(n, np.full(n, 1 / n), size=4).astype(float)
    W[1] *= 2.0**-1000
    W[2] *= 2.0**290
    for depth in (1, 2):
        for w, res in zip(W, qbnb_jax.solve_batch(X, y, W, task="regression", depth=depth)):
            assert_same(res, qbnb_jax.solve(X, y, task="regression", depth=depth,
                                            sample_weight=w), "regression", f"depth={depth}")
    bad = W.copy()
    bad[2, :4] = 1e-150 * (bad[2, :4] > 0) + 1e-150  # lost in the rounding of the sum
    bad[3] = 1e-320  # too small
    with pytest.raises(ValueError) as alone:
        qbnb_jax.solve(X, y, task="regression", sample_weight=bad[2])
    with pytest.raises(ValueError) as batched:
        qbnb_jax.solve_batch(X, y, bad, task="regression")
    assert str(batched.value) == str(alone.value)
    assert str(batched.value).startswith("sample_weight spans too many orders of magnitude")


def test_solve_many_bad_input():
    with pytest.raises(ValueError, match="empty"):
        qbnb_jax.solve_many([], task="classification")
    with pytest.raises(ValueError, match=r"datasets\[0\]"):
        qbnb_jax.solve_many([np.ones((3, 2))], task="classification")


_SHARDED = """
import json, sys
import numpy as np, jax, qbnb_jax
rng = np.random.default_rng(1)
X = np.round(rng.normal(size=(60, 3)), 1)
y = rng.integers(0, 3, 60)
W = rng.multinomial(60, np.full(60, 1 / 60), size=40)  # enough for the problem-lane kernels
y2 = y % 2  # two classes: depth 2 takes `sweep_grid`
out = [[r.objective, r.tree.feature.tolist(), np.nan_to_num(r.tree.threshold).tolist()]
       for labels, depth, rows in ((y, 2, W), (y2, 2, W), (y, 3, W[:4]))
       for r in qbnb_jax.solve_batch(X, labels, rows, task="classification", depth=depth)]
json.dump({"devices": jax.device_count(), "results": out}, sys.stdout)
"""


def test_sharded_over_four_cpu_devices_equals_one_device():
    def run(devices: int):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
                   JAX_PLATFORMS="cpu")
        proc = subprocess.run([sys.executable, "-c", _SHARDED], env=env, capture_output=True,
                              text=True, timeout=600, check=True)
        return json.loads(proc.stdout)

    one, four = run(1), run(4)
    assert (one["devices"], four["devices"]) == (1, 4)
    assert one["results"] == four["results"]


def test_bench_batch_smoke(capsys):
    from qbnb_jax import bench_batch

    assert bench_batch.main(["--problems", "4", "--n", "50", "--p", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("| yes |") == 3  # first and warm batched calls and the loop match


@pytest.mark.parametrize("options", [
    ["--task", "regression", "--targets", "2", "--weights", "folds", "--depth", "1"],
    ["--classes", "4", "--weights", "fractional"],
    ["--source", "synth-pixels"],  # a generated set, sampled: no files needed
])
def test_bench_batch_options(capsys, options):
    from qbnb_jax import bench_batch

    assert bench_batch.main(["--problems", "3", "--n", "40", "--p", "3", *options]) == 0
    out = capsys.readouterr().out
    assert out.count("| yes |") == 3


def test_bench_batch_weightings_have_their_kind():
    from qbnb_jax.bench_batch import make_data, make_weights

    _, y = make_data(60, 3, 0, classes=3)
    boot = make_weights("bootstrap", y, "classification", 5, 0)
    folds = make_weights("folds", y, "classification", 5, 0)
    balanced = make_weights("fractional", y, "classification", 5, 0)
    assert (boot.sum(axis=1) == 60).all() and (boot == np.round(boot)).all()
    assert set(np.unique(folds)) <= {0.0, 1.0} and (folds.sum(axis=1) > 0).all()
    assert (balanced != np.round(balanced)).any()
    # class-balanced: each class carries the same total weight under uniform counts
    classes, counts = np.unique(y, return_counts=True)
    factor = balanced[boot > 0] / boot[boot > 0]
    assert np.allclose(np.unique(np.round(factor, 12)),
                       np.sort(np.unique(np.round(60 / (3 * counts), 12))))


@pytest.mark.parametrize("n_classes", [12, 24])
def test_many_class_batches_equal_one_by_one(n_classes):
    """Batches of 12 and 24 classes (more than the class lanes and the class grid
    take), integer counts (bootstraps, a fold) beside a fractional row, at depths 1
    to 3, return solve()'s trees, objectives and bounds: at depth 3 the counts keep
    their exact bound (`_solve_by_kind`); 24 classes take the class-ordered sweeps."""
    from qbnb_jax._search.batch import OWN_LAYOUTS_FROM

    assert OWN_LAYOUTS_FROM <= 8
    rng = np.random.default_rng(n_classes)
    n, p = 90, 3
    X = np.round(rng.normal(size=(n, p)), 1)
    y = np.digitize(X[:, 0] - 0.7 * X[:, 1] + 0.4 * rng.normal(size=n),
                    np.linspace(-1.5, 1.5, n_classes - 1))
    y[:n_classes] = np.arange(n_classes)  # every class present
    # enough problems that counts sweep each problem's own samples (OWN_LAYOUTS_FROM)
    W = rng.multinomial(n, np.full(n, 1 / n), size=9).astype(float)
    W[0] = rng.random(n) < 0.7  # a fold
    W[1] = W[1] * rng.uniform(0.5, 2.0, n)  # fractional
    W[:, 0] += 1  # no row all zero
    integral = np.delete(W, 1, axis=0)  # counts alone share one layout
    for depth in (1, 2, 3):
        for batch in (W, integral) if depth < 3 else (W[:3],):
            results = qbnb_jax.solve_batch(X, y, batch, task="classification", depth=depth)
            for i, (w, res) in enumerate(zip(batch, results)):
                alone = qbnb_jax.solve(X, y, task="classification", depth=depth,
                                       sample_weight=w)
                assert_same(res, alone, "classification", f"depth={depth} i={i}")
