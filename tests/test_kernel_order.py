"""Backend exactness of the device kernels (docs/design.md, "Exact on every backend").

XLA may reorder or regroup the operands of any reduction, split a scan, and apply
colliding scatter writes in any order; a CPU test run never sees a GPU's choices. So:

- every kernel is compared with a plain numpy reference on inputs where the order of
  summation matters: signed counts that alternate in the swept order (a reduction that
  combines "sum, best prefix" out of order gets these wrong), runs of one class, ties;
- every kernel's jaxpr is audited: a reduction with a custom combine must be
  commutative as well as associative (checked on random operands), a scatter must add
  integers (any order gives the same sum) rather than overwrite, and floating-point
  scatter-adds are refused.

Each test names the execution plan whose kernels it checks (by default the sequential
plan, a CPU's): run on an accelerator, the same tests check the same kernels there.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from qbnb_jax._device import kernels as _kernels
from qbnb_jax._device.kernels import (
    SweepData,
    exact_weight_sums,
    sweep_full,
    sweep_gathered,
    sweep_grid,
    sweep_windowed,
)
from qbnb_jax._device.limits import limit_data, sweep_limited
from qbnb_jax._device.runner import SSE_GRID_COMPILER_OPTIONS, KernelRunner
from qbnb_jax._problem.data import as_targets, make_problem, reweighted_samples
from qbnb_jax._problem.leaf_limits import LeafLimits

# the sequential plan unless a test asks for the parallel one (conftest.py)
pytestmark = pytest.mark.usefixtures("sequential_plan")


# ---------------------------------------------------------------------------------------
# the reference: the best stump of a sample set, from its definition
# ---------------------------------------------------------------------------------------
def set_loss(total: np.ndarray, loss_kind: str) -> float:
    """Loss of a constant leaf from the summed stat vector of its samples."""
    if loss_kind == "sse":  # [w, w y_1..m, w |y|^2]
        w = total[0]
        return float(total[-1] - (np.sum(total[1:-1] ** 2) / w if w > 0 else 0.0))
    return float(total.sum() - total.max(initial=0))


def best_stump(stats: np.ndarray, values: np.ndarray, members: np.ndarray,
               loss_kind: str) -> float:
    """min over thresholds on `values` of the two leaves' losses over `members`."""
    s, v = stats[members].astype(np.float64), values[members]
    best = set_loss(s.sum(axis=0), loss_kind)
    for t in np.unique(v)[:-1]:
        left = v <= t
        best = min(best, set_loss(s[left].sum(axis=0), loss_kind)
                   + set_loss(s[~left].sum(axis=0), loss_kind))
    return best


def reference(problem, f0: int, f: int, lo: int, hi: int, cut: int) -> tuple[float, float]:
    """`L1([lo, cut), f)` and `L1([cut, hi), f)` over positions of f0's order."""
    pos = problem.rank[f0]
    values = problem.value_rank[f]
    kind = problem.loss_kind
    return (best_stump(problem.stats, values, (pos >= lo) & (pos < cut), kind),
            best_stump(problem.stats, values, (pos >= cut) & (pos < hi), kind))


# ---------------------------------------------------------------------------------------
# problems whose prefix sums depend on the order they are added in
# ---------------------------------------------------------------------------------------
def ordered_problem(seed: int, n: int, p: int, kind: str):
    """Feature 0 distinct; labels alternate (or run) along it; other features tied."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 1)
    X[:, 0] = np.arange(n)
    runs = np.repeat(np.arange(n), rng.integers(1, 4, n))[:n]  # runs of 1-3 samples
    if kind == "two-class":
        y = (runs % 2) if seed % 2 else (np.arange(n) % 2)  # sign-alternating counts
        return make_problem(X, y, task="classification")
    if kind == "multi-class":
        return make_problem(X, runs % 5, task="classification")
    if kind.startswith("weighted"):
        w = rng.uniform(0.1, 2.0, n)
        classes = 2 if kind == "weighted-2" else 3
        return make_problem(X, runs % classes, task="classification", sample_weight=w)
    if kind == "class-weighted":  # one weight per class: the class lanes weigh counts
        y = runs % 4
        return make_problem(X, y, task="classification",
                            sample_weight=rng.uniform(0.1, 2.0, 4)[y])
    y = np.where(np.arange(n) % 2, 1.0, -1.0) * rng.uniform(0.5, 2.0, n)
    return make_problem(X, np.stack([y, y * 0.5 + 1], 1) if kind == "sse-2" else y,
                        task="regression")


KINDS = ["two-class", "multi-class", "weighted", "weighted-2", "class-weighted", "sse",
         "sse-2"]
BLOCKED_KINDS = KINDS[1:]  # integer two-class rows never take the blocked path


def random_rows(rng, problem, rows: int, K: int):
    p, n = problem.p, problem.n
    f0 = rng.integers(0, p, rows).astype(np.int32)
    f = rng.integers(0, p, rows).astype(np.int32)
    lo = rng.integers(0, n // 2 + 1, rows).astype(np.int32)
    hi = np.minimum(n, lo + rng.integers(1, n + 1, rows)).astype(np.int32)
    cuts = np.sort(lo[:, None] + rng.integers(0, (hi - lo)[:, None] + 1, (rows, K)), 1)
    return f0, f, lo, hi, cuts.astype(np.int32)


def use_block(monkeypatch, request, name: str, block: int) -> None:
    """Set a block size that the walks read when traced, and drop the traces made with
    the other one: `sweep_full`'s and `sweep_full_within`'s, before the test and after
    it (the tests' own jits of a kernel wrap a fresh `functools.partial`, which is
    traced anew). Clearing only these keeps every other compiled kernel."""
    monkeypatch.setattr(_kernels, name, block)

    def drop() -> None:
        sweep_full.clear_cache()
        _kernels.sweep_full_within.clear_cache()

    drop()
    request.addfinalizer(drop)


def assert_rows_match(problem, f0, f, lo, hi, cuts, got_pre, got_suf):
    tol = 1e-9 * max(1.0, float(np.abs(problem.stats).sum()))
    for r in range(len(f0)):
        for k in range(cuts.shape[1]):
            want = reference(problem, f0[r], f[r], lo[r], hi[r], cuts[r, k])
            np.testing.assert_allclose((got_pre[r, k], got_suf[r, k]), want, atol=tol,
                                       rtol=0, err_msg=f"row {r} cut {k}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed, n", [(0, 70), (1, 200)])
def test_sweep_full_equals_reference(kind, seed, n):
    problem = ordered_problem(seed, n, 3, kind)
    rng = np.random.default_rng(seed + 10)
    f0, f, _, _, cuts = random_rows(rng, problem, 12, 4)
    zeros, ends = np.zeros_like(f0), np.full_like(f0, n)
    cuts = np.clip(cuts, 0, n)
    cuts[0] = [0, 1, n - 1, n]  # empty and one-sample sides
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        pre, suf = sweep_full(data, zeros, f0, f, cuts)
    assert_rows_match(problem, f0, f, zeros, ends, cuts, np.asarray(pre), np.asarray(suf))


@pytest.mark.parametrize("block", [None, 32])
@pytest.mark.parametrize("kind", ["multi-class", "weighted", "sse", "sse-2"])
def test_channels_major_sweep_equals_the_row_sweep(monkeypatch, request, kind, block):
    """The all-rows channels-major sweep gives the numbers of the per-row sweep it
    replaced on the sequential plan: the same for class counts and weights; regression
    scores a split by its gain (`_sse_gain`, one division), so its losses agree to
    rounding (docs/design.md, "Regression scores"). `block`: its walk gathers that
    many positions at a time (here five blocks, the last one cut short by the walk's
    end), as it does past WALK_BLOCK samples."""
    if block is not None:
        use_block(monkeypatch, request, "WALK_BLOCK", block)
    problem = ordered_problem(5, 150, 4, kind)
    rng = np.random.default_rng(6)
    f0, f, _, _, cuts = random_rows(rng, problem, 16, 4)
    cuts = np.clip(cuts, 0, problem.n)
    rows = np.zeros_like(f0)
    if kind.startswith("sse") or kind == "weighted":  # the walk's data has no `full_scan`,
        monkeypatch.setenv("QBNB_JAX_PLAN", "parallel")  # the parallel plan's keeps it
    with jax.enable_x64(True):
        data = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
        per_row = jax.jit(jax.vmap(functools.partial(_kernels._full_row, data)))
        channels_major = jax.jit(functools.partial(_kernels._channels_major_full_rows),
                                 static_argnames="steps")
        want = per_row(rows, f0, f, cuts)
        got = channels_major(data, rows, f0, f, cuts, steps=data.length)
        # a walk that stops after the samples (a traced count) changes no number
        short = jax.jit(functools.partial(_kernels._channels_major_full_rows))(
            data, rows, f0, f, cuts, np.int32(problem.n))
    assert data.length > problem.n
    for a, b in zip(short, got):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(got, want):
        if kind.startswith("sse"):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13,
                                       atol=1e-13 * float(problem.stats[:, -1].sum()))
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_exact_weight_sums():
    """Weights whose every sum is exact in any order: integers, and whole multiples of
    a power of two, below 2^52 of it in all; not decimals, nor totals past that."""
    assert exact_weight_sums(np.ones(5))
    assert exact_weight_sums(np.array([1.0, 3.0, 0.0]) * 2.0**-40)
    assert exact_weight_sums(np.array([0.5, 0.25, 3.0]))
    assert exact_weight_sums(np.array([2.0**51, 1.0]))
    assert not exact_weight_sums(np.array([0.1, 0.2]))
    assert not exact_weight_sums(np.array([2.0**52, 1.0]))
    assert not exact_weight_sums(np.array([2.0**60, 1.0]))


def weighted_regression(kind: str, weights: str, n: int = 150, p: int = 4):
    """`ordered_problem`'s regression data under exact or fractional weights."""
    base = ordered_problem(5, n, p, kind)
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 4, n).astype(float)
    w = {"unit": None, "counts": counts, "scaled": counts * 2.0**-30,
         "fractional": rng.uniform(0.1, 2.0, n)}[weights]
    return make_problem(base.X, base.y, task="regression", sample_weight=w)


@pytest.mark.parametrize("block", [None, 32])
@pytest.mark.parametrize("kind, weights", [("sse", "unit"), ("sse-2", "unit"),
                                           ("sse", "counts"), ("sse-2", "scaled")])
def test_exact_weights_read_their_set_sums(monkeypatch, request, kind, weights, block):
    """Regression rows of exact weights take their prefix sets' sums from `full_scan`
    in f0's order (`root_totals`) instead of a first pass: the reference's losses,
    and the first pass's to rounding. A row's numbers do not depend on the rows
    beside it in its call (each row alone, or all in one call; where the sums were
    gathered into the final loss's fusion, XLA contracted `S1^2 + gain` into one
    rounding only at some shapes). `block`: the walk in blocks of 32 positions."""
    if block is not None:
        use_block(monkeypatch, request, "WALK_BLOCK", block)
    problem = weighted_regression(kind, weights)
    rng = np.random.default_rng(8)
    f0, f, _, _, cuts = random_rows(rng, problem, 16, 4)
    cuts = np.clip(cuts, 0, problem.n)
    cuts[0] = [0, 1, problem.n - 1, problem.n]  # empty and one-sample sides
    rows = np.zeros_like(f0)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        assert bool(np.asarray(data.exact_weights)[0])
        got = [np.asarray(a) for a in sweep_full(data, rows, f0, f, cuts, root_totals=True)]
        walked = [np.asarray(a) for a in sweep_full(data, rows, f0, f, cuts)]
        alone = [[np.asarray(a) for a in sweep_full(data, rows[r:r + 1], f0[r:r + 1],
                                                     f[r:r + 1], cuts[r:r + 1],
                                                     root_totals=True)]
                 for r in range(len(f0))]
    assert_rows_match(problem, f0, f, np.zeros_like(f0), np.full_like(f0, problem.n), cuts,
                      *got)
    scale = float(problem.stats[:, -1].sum())
    for a, b in zip(got, walked):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13 * scale)
    for r, (pre, suf) in enumerate(alone):
        np.testing.assert_array_equal(pre[0], got[0][r])
        np.testing.assert_array_equal(suf[0], got[1][r])


def test_rows_take_their_own_problems_kind_of_sums():
    """Rows of problems of exact and of fractional weights in one request: each row
    gets its own problem's kernel (`KernelRunner._exact_rows`), bit for bit, so a
    problem's numbers do not depend on the problems it is batched with."""
    problems = [weighted_regression("sse", w) for w in ("counts", "fractional")]
    rng = np.random.default_rng(9)
    f0, f, _, _, cuts = random_rows(rng, problems[0], 24, 4)
    cuts = np.clip(cuts, 0, problems[0].n)
    problem = np.tile(np.array([0, 1], np.int32), 12)
    with jax.enable_x64(True):
        data = SweepData.from_problems(problems, problems, [0, 1])
        assert np.asarray(data.exact_weights)[:2].tolist() == [True, False]
        got = KernelRunner(problems[0], data).full(f0, f, cuts, problem=problem)
        for q, root in ((0, True), (1, False)):
            mine = problem == q
            want = sweep_full(data, problem[mine], f0[mine], f[mine], cuts[mine],
                              root_totals=root)
            np.testing.assert_array_equal(got[0][mine], np.asarray(want[0]))
            np.testing.assert_array_equal(got[1][mine], np.asarray(want[1]))


@pytest.mark.parametrize("block", [None, 32])
@pytest.mark.parametrize("seed", [0, 1])
def test_two_class_walk_equals_the_row_sweep(monkeypatch, request, seed, block):
    """The two-class walk of compacted subsets (`_two_class_walked_rows`) gives the
    integers of the vmapped `_binary_full_row` it replaces there, walking every padded
    position or stopping after the samples (a traced count), its inputs gathered in
    blocks (`block`: here five, the last cut short by the walk's end) or at once. The
    signed counts alternate or run along the swept orders (`ordered_problem`), and
    ties leave most positions of the other features invalid. Early stops at subsets'
    own lengths: `test_subsets_rows_walk_their_own_length`."""
    if block is not None:
        use_block(monkeypatch, request, "TWO_CLASS_WALK_BLOCK", block)
    problem = ordered_problem(seed, 150, 4, "two-class")
    rng = np.random.default_rng(seed + 20)
    f0, f, _, _, cuts = random_rows(rng, problem, 24, 4)
    cuts = np.clip(cuts, 0, problem.n)
    cuts[0] = [0, 1, problem.n - 1, problem.n]  # empty and one-sample sides
    rows = np.zeros_like(f0)
    with jax.enable_x64(True):
        data = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
        assert _kernels.walks_two_class_rows(data) and data.length > problem.n
        want = jax.jit(jax.vmap(functools.partial(_kernels._binary_full_row, data)))(
            rows, f0, f, cuts)
        walk = jax.jit(functools.partial(_kernels._two_class_walked_rows))
        for steps in (data.length, problem.n):
            got = walk(data, rows, f0, f, cuts, np.int32(steps))
            for a, b in zip(got, want):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert_rows_match(problem, f0, f, np.zeros_like(f0), np.full_like(f0, problem.n), cuts,
                      *(np.asarray(a) for a in got))


@pytest.mark.parametrize("kind", ["two-class", "multi-class", "weighted", "weighted-2"])
def test_few_classes_past_the_lane_sweeps_walk_channels_major(monkeypatch, request, kind):
    """From BLOCKED_FROM on (here 64 samples) two to seven classes, counts or weights,
    take the channels-major walk in blocks (here of 64 positions) with the per-row
    sweep's numbers; below it counts keep their own sweeps (float weights walk
    channels-major at any n)."""
    problem = ordered_problem(7, 150, 3, kind)
    with jax.enable_x64(True):
        walks = _kernels.sweeps_channels_major(SweepData.from_problem(problem))
    assert walks == kind.startswith("weighted")
    monkeypatch.setattr(_kernels, "BLOCKED_FROM", 64)
    monkeypatch.setattr(_kernels, "WALK_BLOCK", 64)
    jax.clear_caches()
    request.addfinalizer(jax.clear_caches)
    rng = np.random.default_rng(8)
    f0, f, _, _, cuts = random_rows(rng, problem, 12, 4)
    cuts = np.clip(cuts, 0, problem.n)
    rows = np.zeros_like(f0)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        assert _kernels.sweeps_channels_major(data) and data.length % 64 != 0
        got = sweep_full(data, rows, f0, f, cuts)
        # the per-row reference reads `full_scan`, which the parallel plan's data keeps
        monkeypatch.setenv("QBNB_JAX_PLAN", "parallel")
        reference = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
        want = jax.jit(jax.vmap(functools.partial(_kernels._full_row, reference)))(
            rows, f0, f, cuts)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("block", [None, 32])
@pytest.mark.parametrize("kind", ["weighted-2", "balanced-2"])
def test_two_class_float_weights_walk(monkeypatch, request, kind, block):
    """Float weights of two classes (different per sample, or one per class) take the
    two-class walk too, its sums in f's order: the losses are the reference's to
    rounding and the channels-major walk's (which sums in the same order, scoring
    every position) to rounding, whole or in blocks of `block` positions, walking the
    padded length or stopping at the samples."""
    if block is not None:
        use_block(monkeypatch, request, "TWO_CLASS_WALK_BLOCK", block)
    if kind == "weighted-2":
        problem = ordered_problem(3, 150, 4, "weighted-2")
    else:  # class_weight="balanced"-like: one fractional weight per class
        rng = np.random.default_rng(4)
        X = np.round(rng.normal(size=(150, 4)), 1)
        X[:, 0] = np.arange(150)
        y = (rng.random(150) < 0.3).astype(int)
        problem = make_problem(X, y, task="classification",
                               sample_weight=np.array([0.7, 2.3])[y])
    rng = np.random.default_rng(block or 5)
    f0, f, _, _, cuts = random_rows(rng, problem, 24, 4)
    cuts = np.clip(cuts, 0, problem.n)
    cuts[0] = [0, 1, problem.n - 1, problem.n]  # empty and one-sample sides
    rows = np.zeros_like(f0)
    full = np.zeros_like(f0), np.full_like(f0, problem.n)
    with jax.enable_x64(True):
        data = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
        assert data.binary and not np.issubdtype(data.sorted_scan.dtype, np.integer)
        assert _kernels.walks_two_class_rows(data) and _kernels.scans_own_length(data)
        walked = sweep_full(data, rows, f0, f, cuts)
        short = _kernels.sweep_full_within(data, rows, f0, f, full[1], cuts)
        channels = jax.jit(_kernels._channels_major_full_rows)(data, rows, f0, f, cuts,
                                                               data.length)
    scale = float(np.abs(problem.stats).sum())
    for got in (walked, short):
        assert_rows_match(problem, f0, f, *full, cuts, *map(np.asarray, got))
        for a, b in zip(got, channels):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0,
                                       atol=1e-12 * scale)


@pytest.mark.parametrize("classes, weight, K, n, block", [
    (3, 0, 1, 150, None), (5, 0, 2, 2**15 + 10, None), (5, 1, 4, 150, None),
    (5, 300, 32, 150, None), (5, 0, 4, 150, 32),
    pytest.param(5, 0, 4, 150, None, marks=pytest.mark.slow),
    pytest.param(12, 0, 4, 150, None, marks=pytest.mark.slow),
    pytest.param(7, 1, 1, 150, None, marks=pytest.mark.slow),
    pytest.param(5, 1, 4, 150, 32, marks=pytest.mark.slow)])
def test_class_lane_sweep_equals_the_row_sweep(monkeypatch, request, classes, weight, K,
                                               n, block):
    """The rows-in-lanes sweep of class counts (`_class_lane_rows`) gives the per-row
    sweep's integers: counts of 0 or 1 read from `root_code` (weight 0), or every class
    count read, int16 or (integer weights summing past 2**15) int32; root positions
    compared as int16, or int32 past 2**15 samples. It is what `sweep_full` takes for
    them on the sequential plan. `block`: its inputs gathered that many positions at a
    time (here five blocks, the last cut short where the walk stops at the samples)
    rather than CLASS_LANE_BLOCK."""
    if block is not None:
        use_block(monkeypatch, request, "CLASS_LANE_BLOCK", block)
    rng = np.random.default_rng(classes + K)
    X = np.round(rng.normal(size=(n, 4)), 1)
    X[:, 0] = np.arange(n)
    runs = np.repeat(np.arange(n), rng.integers(1, 4, n))[:n]
    w = rng.integers(1, 3, n) * weight if weight else None
    problem = make_problem(X, runs % classes, task="classification", sample_weight=w)
    f0, f, _, _, cuts = random_rows(rng, problem, 70, K)  # a second call's worth of rows
    cuts = np.clip(cuts, 0, n)
    cuts[0] = np.linspace(0, n, K).astype(np.int32)  # the empty and the whole set
    rows = np.zeros_like(f0)
    with jax.enable_x64(True):
        data = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
        assert _kernels.sweeps_class_lanes(data)
        assert (data.root_code.size > 0) == (not weight)
        assert data.sorted_scan.dtype == (np.int32 if weight > 1 or n > 2**15 else np.int16)
        per_row = jax.jit(jax.vmap(functools.partial(_kernels._full_row, data)))
        want = per_row(rows, f0, f, cuts)
        got = sweep_full(data, rows, f0, f, cuts)
        short = _kernels.sweep_full_within(data, rows, f0, f, np.full_like(f0, n), cuts)
    for a, b in zip((*got, *short), (*want, *want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("classes, K, n, times, block", [
    (3, 4, 150, 1, None), (7, 2, 129, 255, None), (5, 4, 150, 3, 32),
    pytest.param(5, 1, 150, 1, None, marks=pytest.mark.slow),
    pytest.param(7, 4, 129, 1, None, marks=pytest.mark.slow),
    pytest.param(12, 2, 200, 1, None, marks=pytest.mark.slow),
    pytest.param(3, 4, 150, 3, None, marks=pytest.mark.slow)])
def test_class_weights_sweep_as_weighed_counts(monkeypatch, request, classes, K, n, times,
                                               block):
    """Float weights that are multiples (up to `times`, 0 for some samples) of one
    weight per class (`class_weight`, bootstraps of it) take the class lanes: samples
    counted in integers, each count weighed by its class's weight in the score
    (`class_scales`). Weights that are no such multiples take them too, each sample's
    weight added to float sums. The losses are the reference's to rounding. `block`:
    the lanes' inputs gathered that many positions at a time."""
    if block is not None:
        use_block(monkeypatch, request, "CLASS_LANE_BLOCK", block)
    rng = np.random.default_rng(classes * K + times)
    X = np.round(rng.normal(size=(n, 4)), 1)
    X[:, 0] = np.arange(n)
    y = np.repeat(np.arange(n), rng.integers(1, 4, n))[:n] % classes
    per_class = rng.uniform(0.2, 3.0, classes)
    multiple = np.ones(n) if times == 1 else rng.integers(0, times + 1, n)
    multiple[[np.flatnonzero(y == c)[0] for c in range(classes)]] = 1  # each class's own
    problem = make_problem(X, y, task="classification", sample_weight=multiple * per_class[y])
    f0, f, lo, hi, cuts = random_rows(rng, problem, 40, K)
    cuts = np.clip(cuts, 0, n)
    cuts[0] = np.linspace(0, n, K).astype(np.int32)  # the empty and the whole set
    rows = np.zeros_like(f0)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        assert _kernels.sweeps_class_lanes(data) and data.root_code.size > 0
        np.testing.assert_array_equal(np.asarray(data.class_scale)[0], per_class)
        got = sweep_full(data, rows, f0, f, cuts)
        # zero multiples drop their samples: the walk stops at the problem's own n
        short = _kernels.sweep_full_within(data, rows, f0, f, np.full_like(f0, problem.n),
                                           cuts)
        varied = make_problem(X, y, task="classification",
                              sample_weight=rng.uniform(0.5, 2.0, n) * per_class[y])
        other = SweepData.from_problem(varied)
        assert other.class_scale.size == 0 and other.root_code.size > 0
        assert _kernels.sweeps_class_lanes(other)
        floats = sweep_full(other, rows, f0, f, cuts)
        floats_short = _kernels.sweep_full_within(other, rows, f0, f, np.full_like(f0, n),
                                                  cuts)
    full = np.zeros_like(lo), np.full_like(hi, n)
    assert_rows_match(problem, f0, f, *full, cuts, *map(np.asarray, got))
    assert_rows_match(problem, f0, f, *full, cuts, *map(np.asarray, short))
    assert_rows_match(varied, f0, f, *full, cuts, *map(np.asarray, floats))
    assert_rows_match(varied, f0, f, *full, cuts, *map(np.asarray, floats_short))


@pytest.mark.parametrize("classes", [12, 16])
def test_float_lanes_stop_at_their_class_count(classes):
    """Per-sample float weights take the class lanes up to FLOAT_LANES_MAX_CLASSES
    classes and the channels-major walk past it; one weight per class takes the lanes
    (counted and weighed) at any count they hold. Both sweep the reference's losses."""
    rng = np.random.default_rng(classes)
    n = 200
    X = np.round(rng.normal(size=(n, 3)), 1)
    y = rng.integers(0, classes, n)
    varied = make_problem(X, y, task="classification",
                          sample_weight=rng.uniform(0.5, 1.5, n))
    per_class = make_problem(X, y, task="classification",
                             sample_weight=rng.uniform(0.5, 1.5, classes)[y])
    f0, f, lo, hi, cuts = random_rows(rng, varied, 12, 4)
    cuts = np.clip(cuts, 0, n)
    rows = np.zeros_like(f0)
    full = np.zeros_like(lo), np.full_like(hi, n)
    with jax.enable_x64(True):
        for problem, lanes in ((varied, classes <= _kernels.FLOAT_LANES_MAX_CLASSES),
                               (per_class, True)):
            data = dataclasses.replace(SweepData.from_problem(problem), plan="sequential")
            assert _kernels.sweeps_class_lanes(data) == lanes
            assert lanes or _kernels.sweeps_channels_major(data)
            got = sweep_full(data, rows, f0, f, cuts)
            assert_rows_match(problem, f0, f, *full, cuts, *map(np.asarray, got))


def sweep_many_classes(classes: int, weight: int, seed: int) -> SweepData:
    """Full sweeps of random rows of a 300-sample problem of `classes` classes (integer
    weights 1 or 2 times `weight`, or none) checked against the reference; its data."""
    rng = np.random.default_rng(seed)
    n = 300
    X = np.round(rng.normal(size=(n, 3)), 1)
    X[:, 0] = np.arange(n)
    w = rng.integers(1, 3, n) * weight if weight else None
    problem = make_problem(X, rng.integers(0, classes, n), task="classification",
                           sample_weight=w)
    f0, f, _, _, cuts = random_rows(rng, problem, 12, 4)
    zeros, ends = np.zeros_like(f0), np.full_like(f0, n)
    cuts = np.clip(cuts, 0, n)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        pre, suf = sweep_full(data, zeros, f0, f, cuts)
    assert_rows_match(problem, f0, f, zeros, ends, cuts, np.asarray(pre), np.asarray(suf))
    return data


@pytest.mark.parametrize("classes", [30, 31, 40])
def test_unit_counts_of_many_classes_sweep_right_without_class_order(monkeypatch, classes):
    """`root_code` holds a class in CLASS_CODE_BITS bits (one value marks no weight):
    counts of more classes than that take another sweep, whatever CLASS_ORDER_FROM
    says (raised here, so that the class order does not take them first)."""
    monkeypatch.setattr(_kernels, "CLASS_ORDER_FROM", 10**6)
    data = sweep_many_classes(classes, 0, seed=classes)
    assert (data.root_code.size > 0) == (classes < _kernels.CLASS_CODE_NONE)


@pytest.mark.parametrize("classes, weight, sweep", [
    (25, 0, "lanes"), (25, 2, "channels-major"), (40, 0, "class order"),
    (40, 2, "class order")])
def test_long_orders_of_many_classes_take_their_sweeps(monkeypatch, classes, weight,
                                                        sweep):
    """Past CLASS_ORDER_MAX_LENGTH (lowered here) the class order takes counts of
    CLASS_ORDER_FROM_LONG or more classes only; fewer take the class lanes (counts of
    0 or 1) or the channels-major walk. Each gives the reference's losses."""
    from qbnb_jax._device import classwise

    monkeypatch.setattr(_kernels, "CLASS_ORDER_MAX_LENGTH", 64)
    assert classwise.CLASS_ORDER_MAX_LENGTH > 64  # the setting this lowers
    assert 25 < _kernels.CLASS_ORDER_FROM_LONG <= 40
    data = sweep_many_classes(classes, weight, seed=classes + weight)
    taken = ("class order" if _kernels.uses_class_order(data) else
             "lanes" if _kernels.sweeps_class_lanes(data) else
             "channels-major" if _kernels.sweeps_channels_major(data) else "other")
    assert taken == sweep


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_blocked_prefix_sums_are_numpys(monkeypatch, dtype):
    """`_prefix_sums` forms the table sums block by block in numpy's sequential order:
    the same numbers, floats included."""
    monkeypatch.setattr(_kernels, "PREFIX_BLOCK", 16)
    rng = np.random.default_rng(3)
    a = (rng.random((2, 3, 101, 9)) * 100).astype(dtype)
    want = np.zeros((2, 3, 102, 9), dtype)
    np.cumsum(a, axis=2, out=want[:, :, 1:])
    got = np.zeros_like(want)
    _kernels._prefix_sums(a, got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", KINDS)
def test_window_sweeps_equal_reference(kind):
    problem = ordered_problem(3, 120, 3, kind)
    rng = np.random.default_rng(4)
    f0, f, lo, hi, cuts = random_rows(rng, problem, 10, 3)
    zeros = np.zeros_like(f0)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        wide = sweep_windowed(data, zeros, f0, f, lo, hi, cuts)
        gathered = sweep_gathered(data, zeros, f0, f, lo, hi, cuts, length=128)
    for pre, suf in (wide, gathered):
        assert_rows_match(problem, f0, f, lo, hi, cuts, np.asarray(pre), np.asarray(suf))


@pytest.mark.parametrize("kind", BLOCKED_KINDS)
def test_blocked_full_sweep_equals_reference(monkeypatch, kind):
    """The large-n path of the vmapped row sweeps (`_blocked_full_row`), at small n
    with small blocks. It serves the parallel plan only (the sequential plan walks
    channels-major at large n), whose tables keep `full_scan`."""
    monkeypatch.setattr(_kernels, "FULL_BLOCK", 64)
    monkeypatch.setattr(_kernels, "BLOCKED_FROM", 64)
    monkeypatch.setenv("QBNB_JAX_PLAN", "parallel")
    problem = ordered_problem(5, 250, 3, kind)
    rng = np.random.default_rng(6)
    f0, f, _, _, cuts = random_rows(rng, problem, 8, 4)
    zeros, ends = np.zeros_like(f0), np.full_like(f0, problem.n)
    with jax.enable_x64(True):
        data = SweepData.from_problem(problem)
        assert data.length % 64 == 0
        row = jax.vmap(functools.partial(_kernels._blocked_full_row, data))
        pre, suf = jax.jit(row)(zeros, f0, f, cuts)
    assert_rows_match(problem, f0, f, zeros, ends, cuts, np.asarray(pre), np.asarray(suf))


@pytest.mark.parametrize("n, scale", [(3, 1), (70, 1), (70, 600)])
def test_sweep_grid_equals_reference(n, scale):
    """Problems as lanes: each lane against the reference of its own weights."""
    rng = np.random.default_rng(n + scale)
    X = np.round(rng.normal(size=(n, 3)), 1)
    X[:, 0] = np.arange(n)
    y = np.arange(n) % 2  # alternating along feature 0
    P = 5
    W = rng.multinomial(n, np.full(n, 1 / n), size=P) * scale
    base = make_problem(X, y, task="classification")
    problems, _ = base.reweighted(W)
    K, S = 3, 2
    cuts = np.sort(rng.integers(0, n + 1, size=(S, K, P)), axis=1).astype(np.int32)
    cuts[:, 0, 0] = 0
    cuts[:, -1, 1] = n
    slot_f0 = np.array([0, 2], dtype=np.int32)
    feature = np.array([1, 0, 2], dtype=np.int32)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * P)
        pre, suf = (np.asarray(a) for a in sweep_grid(data, np.int32(0), slot_f0, feature,
                                                      cuts))
    for q, pr in enumerate(problems):
        for s in range(S):
            for c, fc in enumerate(feature):
                for k in range(K):
                    want = reference(pr, slot_f0[s], fc, 0, n, cuts[s, k, q])
                    assert (pre[c, s, k, q], suf[c, s, k, q]) == want, (q, s, c, k)


@pytest.mark.parametrize("targets, n, feature, root_totals", [
    (1, 3, (1, 0, 2), False), (1, 70, (1, 0, 2), False), (2, 70, (1, 0, 2), False),
    (3, 41, (1, 0, 2), False),
    # one feature: steps of several samples (`_sse_chunked`); distinct values, runs
    # of ties longer than a step, and fewer samples than a step
    (1, 70, (0,), False), (2, 41, (2,), False), (1, 3, (1,), False),
    # the set sums read (exact weights)
    (1, 70, (1, 0, 2), True), (3, 41, (1, 0, 2), True), (2, 41, (2,), True)])
def test_sse_grid_equals_sweep_full_bitwise(targets, n, feature, root_totals):
    """Regression lanes: the same floats `sweep_full` forms for each lane's rows (zero
    weights, tied values, so invalid positions; sums that depend on their order), each
    compiled as the runner compiles it (the lanes for wide vectors on a CPU); with
    `root_totals`, the lanes and rows that read their set sums (exact weights)."""
    rng = np.random.default_rng(10 * n + targets)
    X = np.round(rng.normal(size=(n, 3)), 1)
    X[:, 0] = np.arange(n)
    X[:, 2] = rng.integers(0, 3, size=n)  # many ties
    y = rng.normal(size=(n, targets)) * 10.0 ** rng.integers(-3, 4, size=(n, 1))
    P = 5
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(np.float64)
    W[1] *= rng.uniform(0.1, 3, size=n)  # fractional weights too
    base = make_problem(X, y if targets > 1 else y[:, 0], task="regression")
    problems, _ = reweighted_samples(base, W, as_targets(y if targets > 1 else y[:, 0], n))
    K, S = 3, 2
    cuts = np.sort(rng.integers(0, n + 1, size=(S, K, P)), axis=1).astype(np.int32)
    cuts[:, 0, 0] = 0
    cuts[:, -1, 1] = n
    slot_f0 = np.array([0, 2], dtype=np.int32)
    feature = np.array(feature, dtype=np.int32)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * P)
        assert data.grid_scan.ndim == 4 and _kernels.sweeps_channels_major(data)
        grid_args = (data, np.int32(0), slot_f0, feature, cuts)
        grid_options = SSE_GRID_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
        lanes = sweep_grid.lower(*grid_args, root_totals=root_totals).compile(
            compiler_options=grid_options)
        pre, suf = (np.asarray(a) for a in lanes(*grid_args))
        exact = np.asarray(data.exact_weights)
        for q in range(P):
            if root_totals and not exact[q]:
                continue  # fractional weights: never swept so
            for s in range(S):
                rows = len(feature)
                want_pre, want_suf = (np.asarray(a) for a in sweep_full(
                    data, np.full(rows, q, np.int32), np.full(rows, slot_f0[s], np.int32),
                    feature, np.repeat(cuts[s, :, q][None], rows, axis=0),
                    root_totals=root_totals))
                assert np.array_equal(pre[:, s, :, q], want_pre), (q, s)
                assert np.array_equal(suf[:, s, :, q], want_suf), (q, s)


# ---------------------------------------------------------------------------------------
# the jaxpr audit
# ---------------------------------------------------------------------------------------
def _equations(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in (value if isinstance(value, (list, tuple)) else [value]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _kernel_jaxprs(monkeypatch):
    out = {}
    with jax.enable_x64(True):
        for kind in KINDS:
            problem = ordered_problem(0, 70, 3, kind)
            data = SweepData.from_problem(problem)
            rows = (np.zeros(4, np.int32),) * 3
            lo, hi = np.zeros(4, np.int32), np.full(4, 70, np.int32)
            cuts = np.zeros((4, 2), np.int32)
            out[f"full {kind}"] = jax.make_jaxpr(sweep_full)(data, *rows, cuts)
            if _kernels.sweeps_rows_apart(data):  # calls of a few rows (`runner.FEW_ROWS`)
                out[f"rows {kind}"] = jax.make_jaxpr(_kernels.sweep_rows)(data, *rows, cuts)
            out[f"windowed {kind}"] = jax.make_jaxpr(sweep_windowed)(data, *rows, lo, hi, cuts)
            out[f"gathered {kind}"] = jax.make_jaxpr(
                functools.partial(sweep_gathered, length=64))(data, *rows, lo, hi, cuts)
            if kind in BLOCKED_KINDS:
                with monkeypatch.context() as patch:  # the large-n tables (`full_scan`)
                    patch.setattr(_kernels, "BLOCKED_FROM", 64)
                    patch.setenv("QBNB_JAX_PLAN", "parallel")  # the plan it serves
                    blocked = SweepData.from_problem(problem)
                out[f"blocked {kind}"] = jax.make_jaxpr(jax.vmap(functools.partial(
                    _kernels._blocked_full_row, blocked)))(*rows, cuts)
            limited = dataclasses.replace(problem, leaf_limits=LeafLimits(3, 0.5))
            out[f"limited {kind}"] = jax.make_jaxpr(sweep_limited)(
                limit_data([limited], data), *rows, cuts)
        sequential = _kernels.execution_plan() == "sequential"
        if sequential:  # the class-ordered sweeps (`classwise.py`), a CPU's only
            with monkeypatch.context() as patch:
                patch.setattr(_kernels, "CLASS_ORDER_FROM", 3)
                data = SweepData.from_problem(ordered_problem(0, 70, 3, "multi-class"))
            assert _kernels.uses_class_order(data)
            rows = (np.zeros(4, np.int32),) * 3
            out["full class-order"] = jax.make_jaxpr(sweep_full)(data, *rows, cuts)
            out["windowed class-order"] = jax.make_jaxpr(sweep_windowed)(
                data, *rows, lo, hi, cuts)
        base = make_problem(np.arange(40.0)[:, None] % 7, np.arange(40) % 2,
                            task="classification")
        problems, _ = base.reweighted(np.ones((3, 40), dtype=np.int64))
        data = SweepData.from_problems([base], problems, [0] * 3)
        out["grid"] = jax.make_jaxpr(sweep_grid)(
            data, np.int32(0), np.zeros(1, np.int32), np.zeros(1, np.int32),
            np.zeros((1, 2, 3), np.int32))
        base = make_problem(np.arange(40.0)[:, None] % 7, np.arange(40) % 4,
                            task="classification")
        problems, _ = base.reweighted(np.ones((3, 40), dtype=np.int64))
        data = SweepData.from_problems([base], problems, [0] * 3)
        # class counts in the lanes; the parallel plan packs them into fields instead
        assert (data.grid_scan.ndim == 4) == sequential
        if sequential:
            out["grid classes"] = jax.make_jaxpr(sweep_grid)(
                data, np.int32(0), np.zeros(1, np.int32), np.zeros(1, np.int32),
                np.zeros((1, 2, 3), np.int32))
        base = make_problem(np.arange(40.0)[:, None] % 7, np.arange(40.0) % 5,
                            task="regression")
        problems, _ = reweighted_samples(base, np.ones((3, 40)),
                                            as_targets(np.arange(40.0) % 5, 40))
        data = SweepData.from_problems([base], problems, [0] * 3)
        assert data.grid_scan.ndim == 4 and data.loss_kind == "sse"  # regression lanes
        out["grid regression"] = jax.make_jaxpr(sweep_grid)(
            data, np.int32(0), np.zeros(1, np.int32), np.zeros(1, np.int32),
            np.zeros((1, 2, 3), np.int32))
    return out


def _is_commutative(eqn) -> bool:
    """A generic `reduce`'s combine, applied to random operand pairs both ways."""
    closed = eqn.params["jaxpr"]
    body = getattr(closed, "jaxpr", closed)
    consts = getattr(closed, "consts", [])
    half = len(body.invars) // 2
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = [jnp.asarray(rng.integers(-50, 50), v.aval.dtype) for v in body.invars[:half]]
        b = [jnp.asarray(rng.integers(-50, 50), v.aval.dtype) for v in body.invars[half:]]
        ab = jax.core.eval_jaxpr(body, consts, *a, *b)
        ba = jax.core.eval_jaxpr(body, consts, *b, *a)
        if any(not np.array_equal(x, y) for x, y in zip(ab, ba)):
            return False
    return True


@pytest.mark.parametrize("plan", ["sequential", "parallel"])
def test_kernels_reduce_and_scatter_only_order_free(monkeypatch, plan):
    monkeypatch.setenv("QBNB_JAX_PLAN", plan)
    monkeypatch.setattr(_kernels, "FULL_BLOCK", 8)  # the blocked path at n = 72
    seen = set()
    for name, closed in _kernel_jaxprs(monkeypatch).items():
        for eqn in _equations(closed.jaxpr):
            prim = eqn.primitive.name
            seen.add(prim)
            if prim == "reduce":
                assert _is_commutative(eqn), f"{name}: lax.reduce with a non-commutative combine"
            if prim == "reduce_sum":
                dtype = eqn.outvars[0].aval.dtype
                assert jnp.issubdtype(dtype, jnp.integer), (
                    f"{name}: a float reduce_sum, grouped as XLA chooses per shape")
            if prim.startswith("scatter"):
                dtype = eqn.outvars[0].aval.dtype
                assert prim == "scatter-add" and jnp.issubdtype(dtype, jnp.integer), (
                    f"{name}: {prim} on {dtype} depends on the order of colliding writes")
    assert {"cumsum", "reduce_max"} & seen or "add" in seen  # the audit saw the kernels


def test_the_audit_catches_a_non_commutative_combine():
    """The combine the GPU backend broke: (sum, max prefix) is not commutative."""
    def combine(a, b):
        return a[0] + b[0], jnp.maximum(a[1], a[0] + b[1])

    def best_prefix(x):
        return jax.lax.reduce((x, x), (jnp.int32(0), jnp.int32(-(2**20))), combine, (0,))

    closed = jax.make_jaxpr(best_prefix)(jnp.arange(8, dtype=jnp.int32))
    reduces = [e for e in _equations(closed.jaxpr) if e.primitive.name == "reduce"]
    assert reduces and not _is_commutative(reduces[0])


@pytest.mark.parametrize("task", ["regression", "classification", "two-class"])
def test_subsets_rows_walk_their_own_length(task):
    """Compacted subsets of different sizes share one padded layout; rows of the
    smaller ones are swept by `sweep_full_within`, whose walk stops after the longest
    row of a call (`KernelRunner._full_rows`): the numbers of a full-length sweep, with
    fewer cut-elements."""
    from qbnb_jax._device.runner import KernelRunner

    rng = np.random.default_rng(11)
    n = 600
    X = np.round(rng.normal(size=(n, 3)), 1)
    y = (rng.normal(size=n) if task == "regression"
         else rng.integers(0, 2 if task == "two-class" else 4, n))
    problem = make_problem(X, y, task="regression" if task == "regression" else "classification")
    subs = [problem.compact(problem.rank[0] < size) for size in (70, 300, 590)]
    rows = np.repeat([1, 0], 20)  # rows of the two smaller subsets, not in size order
    f0 = rng.integers(0, 3, len(rows)).astype(np.int32)
    f = rng.integers(0, 3, len(rows)).astype(np.int32)
    sizes = np.array([sub.n for sub in subs])[rows]
    cuts = np.sort(rng.integers(0, sizes[:, None] + 1, (len(rows), 4)), axis=1).astype(np.int32)
    with jax.enable_x64(True):
        runner = KernelRunner(problem).for_compact(subs)
        assert _kernels.scans_own_length(runner.data)
        got = runner.full(f0, f, cuts, problem=rows)
        whole = KernelRunner(problem).for_compact(subs)
        whole._problem_lengths = None  # every row walks the layout's whole length
        want = whole.full(f0, f, cuts, problem=rows)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert runner.counters.cut_elements <= 4 * len(rows) * sizes.max()
    assert whole.counters.cut_elements == 4 * len(rows) * runner.data.length
