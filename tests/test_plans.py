"""The two execution plans (docs/design.md, "Execution plans") give the same trees.

The parallel plan is what an accelerator runs; forcing it here (QBNB_JAX_PLAN) tests
its kernels on a CPU. Integer objectives must be equal, regression ones equal to
rounding, and the trees the same, except that of regression trees whose objectives
tie (two splits that part the weighted samples alike) either may come back: the plans
form the float sums in other orders, and a tie is broken by the computed losses.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import seed_of

import qbnb_jax
from qbnb_jax._device.kernels import BLOCKED_FROM, execution_plan


def problem(seed: int, task: str, n: int = 40, p: int = 3):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 1)
    if task == "classification":
        y = (X[:, 0] + rng.normal(size=n) > 0).astype(int) + (X[:, 1] > 0.5)
    else:
        y = X[:, 0] * 2 + np.abs(X[:, 1]) + rng.normal(size=n) * 0.3
    return X, y


def solve_with(monkeypatch, plan: str, *args, **kwargs):
    monkeypatch.setenv("QBNB_JAX_PLAN", plan)
    return qbnb_jax.solve(*args, **kwargs)


def assert_same_result(a, b, task: str):
    if task == "classification":
        assert a.objective == b.objective
    else:
        assert a.objective == pytest.approx(b.objective, rel=1e-9, abs=1e-12)
    same = (np.array_equal(a.tree.feature, b.tree.feature)
            and np.array_equal(a.tree.threshold, b.tree.threshold, equal_nan=True))
    # a regression tie: the host's objectives of both trees (summed in sample order)
    # equal to the last bits
    assert same or (task == "regression" and a.objective == pytest.approx(b.objective,
                                                                          rel=1e-14))


@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_parallel_plan_equals_sequential(monkeypatch, task, depth, seed):
    X, y = problem(seed, task)
    want = solve_with(monkeypatch, "sequential", X, y, task=task, depth=depth)
    got = solve_with(monkeypatch, "parallel", X, y, task=task, depth=depth)
    assert_same_result(got, want, task)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_parallel_plan_batches_equal_sequential(monkeypatch, task):
    X, y = problem(3, task, n=30)
    W = np.random.default_rng(4).multinomial(30, np.full(30, 1 / 30), size=40)
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    want = qbnb_jax.solve_batch(X, y, W, task=task)
    monkeypatch.setenv("QBNB_JAX_PLAN", "parallel")
    got = qbnb_jax.solve_batch(X, y, W, task=task)
    for a, b in zip(got, want):
        assert_same_result(a, b, task)


def test_plan_names_are_checked(monkeypatch):
    monkeypatch.setenv("QBNB_JAX_PLAN", "gpu")
    with pytest.raises(ValueError, match="QBNB_JAX_PLAN"):
        execution_plan()
    monkeypatch.delenv("QBNB_JAX_PLAN")
    import jax

    assert execution_plan() == ("sequential" if jax.default_backend() == "cpu" else "parallel")


def test_stats_count_device_calls_and_traffic():
    X, y = problem(5, "classification", n=200, p=4)
    stats = qbnb_jax.solve(X, y, task="classification", depth=2).stats
    assert stats["device_calls"] >= 1
    assert stats["bytes_to_device"] > 0 and stats["bytes_from_device"] > 0
    assert 0.0 <= stats["device_seconds"]


def test_parallel_plan_calls_take_few_shapes(monkeypatch):
    """Every distinct shape is a compile (seconds on a GPU): the parallel plan pads a
    call's rows to a power of ACCELERATOR_ROW_BASE (at least ACCELERATOR_MIN_ROWS) and
    a depth-3 round's side batches to power-of-two lengths."""
    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._problem.data import make_problem
    from qbnb_jax._search import deep_batch

    X, y = problem(5, "classification")
    monkeypatch.setenv("QBNB_JAX_PLAN", "parallel")
    runner = runner_module.KernelRunner(make_problem(X, y, task="classification"))
    chunks = {runner._chunk(4, 40, rows) for rows in range(1, 5000)}
    assert chunks == {64, 512, 4096}
    sizes = np.random.default_rng(0).integers(65, 3000, size=300)
    lengths = {deep_batch.padded_length(int(sizes[i]), deep_batch.length_steps())
               for batch in deep_batch.lockstep_batches(sizes, p=3) for i in batch}
    assert all(length & (length - 1) == 0 for length in lengths)
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    assert deep_batch.length_steps() == deep_batch.LENGTH_STEPS > 1


def test_class_lane_calls_narrow_for_few_rows(monkeypatch):
    """Class-lane calls: 64 rows, or 32 for a round of at most 32 rows past
    NARROW_LANES_FROM samples; the sweeps agree either way."""
    import jax

    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(7)
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    lanes = runner_module.CLASS_LANE_ROWS
    n = 3000
    X, y = np.round(rng.normal(size=(n, 3)), 2), rng.integers(0, 5, n)
    runner = runner_module.KernelRunner(make_problem(X, y, task="classification"))
    assert runner_module.sweeps_class_lanes(runner.data)
    assert runner.data.length >= runner_module.NARROW_LANES_FROM
    for rows in (1, lanes // 2, lanes // 2 + 1, 3 * lanes):
        want = lanes // 2 if rows <= lanes // 2 else lanes
        assert runner._chunk(4, runner.data.length, rows) == want, rows
        # shorter orders: one executable, 64 lanes
        assert runner._chunk(4, runner_module.NARROW_LANES_FROM - 64, rows) == lanes
    f0, f = rng.integers(0, 3, 40), rng.integers(0, 3, 40)
    cuts = np.sort(rng.integers(1, n, (40, 4)), axis=1)
    with jax.enable_x64(True):
        narrow = runner.full(f0[:20], f[:20], cuts[:20])  # one call of 32 lanes
        wide = runner.full(f0, f, cuts)  # one of 64
    assert all(np.array_equal(a, b[:20]) for a, b in zip(narrow, wide))


@pytest.mark.parametrize("classes", [2, 5])
def test_compacted_subsets_take_wide_calls(monkeypatch, classes):
    """Compacted subsets' rows walk to each call's longest row (`sweep_full_within`) in
    wide calls: the two-class walk up to TWO_CLASS_WALK_ROWS rows, class lanes of few
    integer-counted classes SUBSET_LANE_ROWS once a round has more rows (weighed
    counts keep CLASS_LANE_ROWS); a row's losses do not depend on the call it is in."""
    import jax

    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(8)
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    n = 900
    X, y = np.round(rng.normal(size=(n, 3)), 1), rng.integers(0, classes, n)
    problem = make_problem(X, y, task="classification")
    subs = [problem.compact(problem.rank[0] < size) for size in (200, 500, 850)]
    runner = runner_module.KernelRunner(problem).for_compact(subs)
    many = 3 * runner_module.TWO_CLASS_WALK_ROWS
    wide = (runner_module.TWO_CLASS_WALK_ROWS if classes == 2
            else runner_module.SUBSET_LANE_ROWS)
    assert runner._chunk(4, runner.data.length, many) == wide
    if classes > 2:  # weighed class counts (class-balanced weights) keep narrower calls
        counts = np.bincount(y, minlength=classes)
        weighed = make_problem(X, y, task="classification",
                               sample_weight=(n / (classes * counts))[y])
        lanes = runner_module.KernelRunner(weighed).for_compact(
            [weighed.compact(weighed.rank[0] < size) for size in (200, 500, 850)])
        assert runner_module.sweeps_class_lanes(lanes.data)
        assert lanes._chunk(4, lanes.data.length, many) == runner_module.CLASS_LANE_ROWS
    rows = rng.integers(0, len(subs), many)
    sizes = np.array([sub.n for sub in subs])[rows]
    f0, f = rng.integers(0, 3, many), rng.integers(0, 3, many)
    cuts = np.sort(rng.integers(0, sizes[:, None] + 1, (many, 4)), axis=1)
    with jax.enable_x64(True):
        together = runner.full(f0, f, cuts, problem=rows)
        alone = [runner.full(f0[i:i + 1], f[i:i + 1], cuts[i:i + 1], problem=rows[i:i + 1])
                 for i in range(0, many, 97)]
    for j, i in enumerate(range(0, many, 97)):
        assert together[0][i].tolist() == alone[j][0][0].tolist()
        assert together[1][i].tolist() == alone[j][1][0].tolist()


def test_two_class_calls_spread_rows_over_threads(monkeypatch):
    """The sequential plan's two-class calls: few rows go to one call per thread (each
    call walks every position), many to cache-sized chunks; at most three chunk sizes,
    so at most three compiles per sweep shape."""
    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(4000, 5)), rng.integers(0, 2, 4000)
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    runner = runner_module.KernelRunner(make_problem(X, y, task="classification"))
    assert runner.data.binary
    chunk = {rows: runner._chunk(4, runner.data.length, rows) for rows in range(1, 5000)}
    base = min(chunk.values())
    assert set(chunk.values()) <= {base, 2 * base, 4 * base}
    threads = runner_module.THREADS
    for rows, size in chunk.items():
        calls = -(-rows // size)
        if rows <= 4 * base * threads:  # every thread gets at most one call
            assert calls <= threads, (rows, size)
        assert size <= base or -(-rows // (size // 2)) > threads, (rows, size)


@pytest.mark.parametrize("classes", [2, 5, 24])
def test_few_rows_are_swept_apart(monkeypatch, classes):
    """On the sequential plan, past FEW_ROWS_FROM samples, a call of at most FEW_ROWS
    rows sweeps each row on its own (`sweep_rows`; class-ordered sweeps in calls of
    FEW_ROWS_CHUNK rows) rather than in a walk padded to its full width: the same
    integer losses as in a wide call, and a depth-2 solve whose calls all go so finds
    the brute force's optimum. Two classes (two-class walk), five (class lanes) and
    24 (class-ordered sweeps)."""
    import jax
    from helpers import brute_force

    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(seed_of("few-rows", classes))
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    # coarse features (a brute force over few splits), almost no repeated rows (which
    # the solve would merge, shortening the orders)
    n, p = 4200, 6
    X = rng.integers(0, 6, (n, p)).astype(float)
    y = np.where(X[:, 0] + rng.normal(size=n) * 2 > 3, rng.integers(0, classes, n), 0)
    runner = runner_module.KernelRunner(make_problem(X, y, task="classification"))
    assert runner.data.length >= runner_module.FEW_ROWS_FROM
    calls = []
    run = runner_module.KernelRunner._run

    def spy(self, name, fn, *args, **kwargs):
        calls.append((name, fn.__name__, self._chunk(4, self.data.length, len(args[1][0]), name)))
        return run(self, name, fn, *args, **kwargs)

    monkeypatch.setattr(runner_module.KernelRunner, "_run", spy)
    many = 40
    f0, f = rng.integers(0, p, many), rng.integers(0, p, many)
    cuts = np.sort(rng.integers(1, n, (many, 4)), axis=1)
    with jax.enable_x64(True):
        wide = runner.full(f0, f, cuts)
        assert calls[-1][2] > runner_module.FEW_ROWS
        for rows in (1, 3, runner_module.FEW_ROWS):
            part = slice(many - rows, many)
            few = runner.full(f0[part], f[part], cuts[part])
            assert calls[-1][2] == runner_module.FEW_ROWS_CHUNK, calls[-1]
            assert all(np.array_equal(a, b[part]) for a, b in zip(few, wide)), rows
    calls.clear()
    # every call of the solve swept apart (its calls have more rows than FEW_ROWS)
    monkeypatch.setattr(runner_module, "FEW_ROWS", 10**6)
    res = qbnb_jax.solve(X, y, task="classification", depth=2)
    assert res.status == "optimal"
    assert res.objective == brute_force(X, y, task="classification", depth=2)
    assert calls and all(chunk == runner_module.FEW_ROWS_CHUNK for *_, chunk in calls), calls


def test_parallel_plan_counts_in_32_bits(monkeypatch):
    """Integer counts: int16 on the sequential plan where they fit, at least int32 on
    the parallel plan (`kernels.count_dtype`: int16 counts were the one kind whose
    kernel tests failed on a GPU)."""
    import jax

    from qbnb_jax._device.kernels import SweepData
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 3))
    for classes in (2, 3):
        problem = make_problem(X, rng.integers(0, classes, 50), task="classification")
        for plan, narrow in (("sequential", True), ("parallel", False)):
            monkeypatch.setenv("QBNB_JAX_PLAN", plan)
            with jax.enable_x64(True):
                data = SweepData.from_problem(problem)
            tables = [data.sorted_scan, data.root_cum, data.scan]
            sizes = {np.dtype(t.dtype).itemsize for t in tables if t.size}
            assert (sizes == {2}) == narrow and min(sizes) >= 2, (classes, plan, sizes)


@pytest.mark.parametrize("kind", ["targets1", "targets3", "classes9-counts", "classes14-floats",
                                  "classes3-counts-long"])
def test_channels_major_calls(monkeypatch, kind):
    """The channels-major walk's calls: at least WALK_MIN_ROWS rows; for a request of
    at most FEW_ROWS rows past FEW_ROWS_FROM samples one row a call for one target,
    WALK_FEW_ROWS for more targets and for 8 classes or more, and a larger request's
    last few rows likewise; a row's losses are the same numbers in a call of any size
    (float sums too: each row's sums are its own lane's, formed in one order)."""
    import jax

    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._problem.data import make_problem

    rng = np.random.default_rng(seed_of("channels-major-calls", kind))
    monkeypatch.setenv("QBNB_JAX_PLAN", "sequential")
    # past BLOCKED_FROM samples few classes walk channels-major too
    n, p = (BLOCKED_FROM, 3) if kind.endswith("long") else (4200, 4)
    X = np.round(rng.normal(size=(n, p)), 2)
    if kind.startswith("targets"):
        y = X[:, :1] + rng.normal(size=(n, int(kind[-1])))
        made = make_problem(X, y, task="regression")
    else:
        classes = int(kind[7:].split("-")[0])
        y = rng.integers(0, classes, n)
        weight = (rng.integers(1, 4, n).astype(float) if kind.endswith("counts")
                  else rng.random(n) + 0.1)
        made = make_problem(X, y, task="classification", sample_weight=weight)
    runner = runner_module.KernelRunner(made)
    data = runner.data
    assert runner_module.sweeps_channels_major(data) and not runner_module.sweeps_class_lanes(data)
    assert data.length >= runner_module.FEW_ROWS_FROM
    few = runner_module.FEW_ROWS
    one_row = kind in ("targets1", "classes3-counts-long")
    for rows in (1, few):
        assert runner._chunk(4, data.length, rows) == (
            1 if one_row else runner_module.WALK_FEW_ROWS)
    for rows in (few + 1, 40, 1000):
        assert runner._chunk(4, data.length, rows) >= runner_module.WALK_MIN_ROWS
    chunk = runner._chunk(4, data.length, 1000)
    few_chunk = 1 if one_row else runner_module.WALK_FEW_ROWS
    many = chunk + 5  # a whole call and a tail of 5 rows in few-row calls
    tail_limit = runner_module.WALK_TAIL_ROWS if one_row else few
    assert runner._calls("full", many, chunk, data.length) == (
        [(0, chunk)] + [(r0, few_chunk) for r0 in range(chunk, many, few_chunk)])
    assert runner._calls("full", chunk + tail_limit + 1, chunk, data.length) == [
        (0, chunk), (chunk, chunk)]
    calls = []
    run_chunk = runner_module.run_all

    def spy(fn, items):
        calls.extend(items)
        return run_chunk(fn, items)

    monkeypatch.setattr(runner_module, "run_all", spy)
    f0, f = rng.integers(0, p, many), rng.integers(0, p, many)
    cuts = np.sort(rng.integers(1, n, (many, 4)), axis=1)
    with jax.enable_x64(True):
        wide = runner.full(f0, f, cuts)
        assert calls[0] == (0, chunk) and calls[-1][1] == few_chunk, calls
        part = slice(many - few - 5, many)  # rows of the whole call and of the tail
        narrow = runner.full(f0[part], f[part], cuts[part])
    assert all(np.array_equal(a, b[part]) for a, b in zip(narrow, wide))
