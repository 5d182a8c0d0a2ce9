"""Problem-parallel kernels of a shared layout against the row kernels and the host."""

import jax
import numpy as np
import pytest

import qbnb_jax
from qbnb_jax._device import runner as _runner
from qbnb_jax._device.kernels import SweepData, sweep_full, sweep_grid
from qbnb_jax._device.runner import KernelRunner
from qbnb_jax._problem.data import as_targets, make_problem, reweighted_samples
from qbnb_jax._problem.host import (
    build_tree,
    depth2_trees_shared,
    stumps_of_all_shared,
    tree_objective,
)
from qbnb_jax._search.search import depth2_splits

# `sweep_grid` serves the sequential plan (conftest.py)
pytestmark = pytest.mark.usefixtures("sequential_plan")


def shared_batch(seed: int, n: int, p: int, P: int, n_classes: int = 2, scale: int = 1):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 1)  # ties
    X[:, -1] = 0.5  # a constant feature
    y = rng.integers(0, n_classes, n)
    W = rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float) * scale  # zero weights
    base = make_problem(X, y, task="classification")
    problems, tables = base.reweighted(W)
    return rng, X, y, W, base, problems, tables


def _assert_grid_equals_rows(rng, data, n: int, K: int = 3) -> None:
    """`sweep_grid` of 9 problems over 4 root slots and 5 feature columns (any root
    features and feature orders, repeats too; empty prefixes and suffixes) equals
    `sweep_full`'s rows, bit for bit."""
    cuts = np.sort(rng.integers(0, n + 1, size=(4, K, 9)), axis=1).astype(np.int32)
    cuts[:, 0, :2] = 0  # empty prefixes
    cuts[:, -1, 2:4] = n  # empty suffixes
    slot_f0 = np.array([2, 0, 3, 2], dtype=np.int32)
    feature = np.array([3, 1, 0, 2, 1], dtype=np.int32)
    pre, suf = (np.asarray(a) for a in sweep_grid(data, np.int32(0), slot_f0, feature, cuts))
    q, slot, column = (a.ravel() for a in np.meshgrid(np.arange(9), np.arange(4),
                                                      np.arange(5), indexing="ij"))
    want_pre, want_suf = sweep_full(data, q.astype(np.int32), slot_f0[slot],
                                    feature[column].astype(np.int32), cuts[slot, :, q])
    np.testing.assert_array_equal(pre[column, slot, :, q], np.asarray(want_pre))
    np.testing.assert_array_equal(suf[column, slot, :, q], np.asarray(want_suf))


@pytest.mark.parametrize("n, scale", [(3, 1), (70, 1), (70, 600)])  # 600: int32 counts
def test_sweep_grid_equals_sweep_full(n, scale):
    rng, _, _, _, base, problems, _ = shared_batch(n, n, 4, 9, scale=scale)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        assert data.scan_dtype == ("int16" if scale == 1 else "int32")
        _assert_grid_equals_rows(rng, data, n)


@pytest.mark.parametrize("n_classes, n, scale", [(3, 8, 1), (3, 70, 1), (5, 70, 1),
                                                  (8, 50, 1), (4, 70, 600)])
def test_class_grid_equals_sweep_full(n_classes, n, scale):
    """Integer counts of several classes in the lanes: the integers `sweep_full` returns
    (zero weights, tied values, invalid positions, empty sides)."""
    rng, _, _, _, base, problems, _ = shared_batch(n + n_classes, n, 4, 9, n_classes, scale)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        assert data.grid_scan.shape[2] == n_classes
        _assert_grid_equals_rows(rng, data, n)


@pytest.mark.parametrize("n_classes", [2, 5])
@pytest.mark.parametrize("features", [(0, 1, 2, 3), (3, 1)])  # all, or a subset swept
def test_full_requests_on_the_grid_equal_rows(monkeypatch, features, n_classes):
    """`KernelRunner.full` on the grid path: tuples of one (problem, root feature)
    side by side, subsets of features (class counts: every feature in one call, one
    scan each, feature 3 constant so that no position but the first is valid), a
    repeated single cut."""
    monkeypatch.setattr(_runner, "GRID_ADVANTAGE", 10**6)  # the grid, however sparse
    rng, _, _, _, base, problems, _ = shared_batch(2, 60, 4, 40, n_classes)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        runner = KernelRunner(problems[0], data)
        rows = []
        for q in range(40):
            for _ in range(int(rng.integers(1, 4))):
                f0 = int(rng.integers(0, 2))  # few root features: repeats per problem
                cuts = np.sort(rng.integers(0, 61, 4))
                if rng.random() < 0.2:
                    cuts[:] = cuts[0]
                asked = [f for f in features if rng.random() < 0.7]
                for f in sorted(asked if q % 5 else features):
                    rows.append((q, f0, f, *cuts))
        rows = np.array(rows)
        problem, f0, f, cuts = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3:]
        assert runner._grid_plan(problem, f0, f, cuts) is not None
        got = runner.full(f0, f, cuts, problem=problem)
        want = sweep_full(data, *(a.astype(np.int32) for a in (problem, f0, f, cuts)))
    np.testing.assert_array_equal(got[0], np.asarray(want[0]))
    np.testing.assert_array_equal(got[1], np.asarray(want[1]))


def test_root_feature_groups_take_plans_of_their_own(monkeypatch):
    """Late-iteration requests of regression lanes: root feature 0 with four tuples
    per problem, feature 1 with one, feature 2 for a few problems. They get plans of
    their own (widths 16, 4 and rows), and `full` still returns `sweep_full`'s
    numbers, bit for bit. Count lanes keep one plan."""
    rng, X, y, W, base, problems, _ = shared_batch(3, 50, 4, 64)
    with jax.enable_x64(True):
        counts = KernelRunner(problems[0], SweepData.from_problems(
            [base], problems, [0] * len(problems)))
    y = rng.normal(size=len(y))
    base = make_problem(X, y, task="regression")
    problems, _ = reweighted_samples(base, W, as_targets(y, len(y)))
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        runner = KernelRunner(problems[0], data)
        rows = []
        for q in range(64):
            for f0, tuples in ((0, 4), (1, 1), (2, 1 if q < 3 else 0)):
                for _ in range(tuples):
                    cuts = np.sort(rng.integers(0, 51, 4))
                    rows.extend((q, f0, f, *cuts) for f in range(4))
        rows = np.array(rows)
        problem, f0, f, cuts = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3:]
        groups = runner._root_feature_groups(problem, f0, f, cuts)
        assert sorted(np.unique(f0[g]).tolist() for g in groups) == [[0], [1]]
        assert len(counts._root_feature_groups(problem, f0, f, cuts)) == 1
        seen = []
        monkeypatch.setattr(runner, "_run_grid", lambda plan, *a: seen.append(
            plan.lane_cuts.shape[1:3]) or KernelRunner._run_grid(runner, plan, *a))
        got = runner.full(f0, f, cuts, problem=problem)
        # bootstrap counts: exact weights, whose rows read their set sums
        assert np.asarray(data.exact_weights)[:64].all()
        want = sweep_full(data, *(a.astype(np.int32) for a in (problem, f0, f, cuts)),
                          root_totals=True)
    assert sorted(seen) == [(1, 4), (1, 16)]  # (slots, width) of each plan
    np.testing.assert_array_equal(got[0], np.asarray(want[0]))
    np.testing.assert_array_equal(got[1], np.asarray(want[1]))


@pytest.mark.parametrize("scale", [1, 600])  # int16 scores, and wider ones
def test_reweighting_best_stumps_equal_host(scale):
    """The best stumps the two-class reweighting pass computes (the greedy start's)."""
    _, _, _, W, base, _, _ = shared_batch(1, 90, 4, 40, scale=scale)
    buffers = SweepData.shared_stat_buffers(base, W)
    problems, tables = base.reweighted(W, block=7, signed_out=buffers["sorted_scan"],
                                       mass_out=buffers["root_cum"])
    want_losses, want_positions = stumps_of_all_shared(problems)
    np.testing.assert_array_equal(tables.stump_loss, want_losses)
    np.testing.assert_array_equal(tables.stump_position, want_positions)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_depth2_trees_shared_equal_build_tree(n_classes):
    """Random depth-2 specs, many of whose splits collapse (tiny, tied data)."""
    rng = np.random.default_rng(n_classes)
    for trial in range(12):
        n = int(rng.integers(1, 40))
        _, _, _, _, _, problems, tables = shared_batch(trial, n, 3, 15, n_classes)
        specs = []
        for pr in problems:
            f0 = int(rng.integers(0, 3))
            specs.append((f0, int(rng.integers(0, pr.n_thresholds[f0] + 1)),
                          int(rng.integers(0, 3)), int(rng.integers(0, 3))))
        built = depth2_trees_shared(problems, tables.cut_pos, tables.cut_valid,
                                    np.array(specs))
        for pr, spec, (tree, objective) in zip(problems, specs, built):
            want = build_tree(pr, depth2_splits(pr, *spec))
            assert objective == tree_objective(want, pr)
            for field in ("children_left", "children_right", "feature", "threshold",
                          "value", "weighted_n_node_samples"):
                got, expected = getattr(tree, field), getattr(want, field)
                assert got.dtype == expected.dtype, field
                np.testing.assert_array_equal(got, expected, err_msg=f"{field} {spec}")


def test_large_two_class_batch_takes_the_grid_path_and_equals_one_by_one():
    _, X, y, W, *_ = shared_batch(5, 50, 4, _runner.GRID_MIN_PROBLEMS + 8)
    _runner._COMPILED.clear()
    results = qbnb_jax.solve_batch(X, y, W, task="classification")
    assert "grid" in {key[0] for key in _runner._COMPILED}
    for w, res in zip(W, results):
        alone = qbnb_jax.solve(X, y, task="classification", sample_weight=w)
        assert res.objective == alone.objective
        for field in ("feature", "threshold", "children_left", "value"):
            np.testing.assert_array_equal(getattr(res.tree, field), getattr(alone.tree, field))


def test_batch_halves_on_two_threads_equal_one_by_one(monkeypatch):
    """Large stacked batches run as two concurrent halves; the counters add up."""
    from qbnb_jax._search import batch as _batch
    _, X, y, W, *_ = shared_batch(7, 40, 3, 45)
    whole = qbnb_jax.solve_batch(X, y, W, task="classification")
    monkeypatch.setattr(_batch, "SPLIT_FROM", 20)
    monkeypatch.setattr(_batch, "THREADS", 2)
    monkeypatch.setattr(_runner, "GRID_MIN_PROBLEMS", 8)  # the halves take the grid too
    parts = []
    solve_stacked = _batch._solve_stacked
    monkeypatch.setattr(_batch, "_solve_stacked",
                        lambda base, rows, *options: (parts.append(len(rows)),
                                                      solve_stacked(base, rows, *options))[1])
    split = qbnb_jax.solve_batch(X, y, W, task="classification")
    assert sorted(parts) == [22, 23]
    assert split[0].stats["rows_evaluated"] == split[-1].stats["rows_evaluated"] > 0
    for w, a, b in zip(W, whole, split):
        alone = qbnb_jax.solve(X, y, task="classification", sample_weight=w)
        assert a.objective == b.objective == alone.objective
        for field in ("feature", "threshold", "children_left", "value"):
            np.testing.assert_array_equal(getattr(b.tree, field), getattr(alone.tree, field))


@pytest.mark.parametrize("scale", [1, 600])
def test_stat_tables_filled_by_reweighting_equal_from_problems(scale):
    """`solve_batch` fills the two-class stat tables during the reweighting pass; they
    equal the ones `SweepData.from_problems` builds from the problems."""
    _, _, _, W, base, _, _ = shared_batch(3, 57, 4, 37, scale=scale)
    buffers = SweepData.shared_stat_buffers(base, W)
    problems, _ = base.reweighted(W, block=5, signed_out=buffers["sorted_scan"],
                                  mass_out=buffers["root_cum"])
    with jax.enable_x64(True):
        want = SweepData.from_problems([base], problems, [0] * len(problems))
        got = SweepData.from_problems([base], problems, [0] * len(problems),
                                      stat_tables=buffers)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_batch_halves_reraise_an_error(monkeypatch):
    from qbnb_jax._search import batch as _batch
    _, X, y, W, *_ = shared_batch(8, 30, 3, 10)
    monkeypatch.setattr(_batch, "SPLIT_FROM", 4)
    monkeypatch.setattr(_batch, "THREADS", 2)

    def fail(base, rows, *options):
        raise RuntimeError("a half failed")

    monkeypatch.setattr(_batch, "_solve_stacked", fail)
    with pytest.raises(RuntimeError, match="a half failed"):
        qbnb_jax.solve_batch(X, y, W, task="classification")


def test_batch_halves_with_a_time_limit_keep_valid_bounds(monkeypatch):
    """A time limit counts from the call's start in both halves; every bound is proved."""
    from qbnb_jax._search import batch as _batch
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1500, 6))
    y = rng.integers(0, 2, 1500)
    W = rng.multinomial(1500, np.full(1500, 1 / 1500), size=40).astype(float)
    monkeypatch.setattr(_batch, "SPLIT_FROM", 8)
    monkeypatch.setattr(_batch, "THREADS", 2)
    results = qbnb_jax.solve_batch(X, y, W, task="classification", time_limit=1e-3)
    assert len(results) == 40
    for r in results:
        assert r.status in ("time_limit", "optimal")
        assert 0 <= r.lower_bound <= r.objective
    assert any(r.status == "time_limit" for r in results)


@pytest.mark.parametrize("n_classes, carry_bytes", [(2, 1), (4, 1 << 17), (4, 1)])
def test_groups_with_many_tuples_spill_to_rows(monkeypatch, n_classes, carry_bytes):
    """One problem asking for many tuples of one root feature: its later tuples sweep
    rows (`GridPlan.on_grid`) rather than widening every group's lanes, and every row
    gets the losses `sweep_full` gives it (also with one feature per `sweep_grid`
    call, `GRID_CARRY_BYTES`, for two classes; class counts take every feature in one
    call, one after another)."""
    monkeypatch.setattr(_runner, "GRID_ADVANTAGE", 4)
    monkeypatch.setattr(_runner, "GRID_CARRY_BYTES", carry_bytes)
    rng, _, _, _, base, problems, _ = shared_batch(5, 60, 4, 40, n_classes)
    with jax.enable_x64(True):
        data = SweepData.from_problems([base], problems, [0] * len(problems))
        runner = KernelRunner(problems[0], data)
        rows = []
        for q in range(40):
            for _ in range(12 if q == 7 else 1):
                cuts = np.sort(rng.integers(0, 61, 4))
                for f in range(4):
                    rows.append((q, 1, f, *cuts))
        rows = np.array(rows)
        problem, f0, f, cuts = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3:]
        plan = runner._grid_plan(problem, f0, f, cuts)
        assert plan is not None and 0 < (~plan.on_grid).sum() < 12 * 4
        chunks = runner._grid_feature_chunks(plan.feature, 1)
        if carry_bytes == 1:
            assert len(chunks) == (4 if n_classes == 2 else 1)
        got = runner.full(f0, f, cuts, problem=problem)
        want = sweep_full(data, *(a.astype(np.int32) for a in (problem, f0, f, cuts)))
    np.testing.assert_array_equal(got[0], np.asarray(want[0]))
    np.testing.assert_array_equal(got[1], np.asarray(want[1]))


def test_grid_feature_chunks_pad_the_last():
    """Two classes chunk the features by their carry; class counts take them all in one
    call (`_class_grid` sweeps one feature after another)."""
    chunked = {}
    for n_classes in (2, 3):
        _, _, _, _, base, problems, _ = shared_batch(1, 30, 4, 3, n_classes)
        with jax.enable_x64(True):
            data = SweepData.from_problems([base], problems, [0] * 3)
        runner = KernelRunner(problems[0], data)
        per_feature = 5 * data.grid_scan.dtype.itemsize  # the two-class sums of a lane
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_runner, "GRID_CARRY_BYTES", 3 * per_feature)
            chunks = runner._grid_feature_chunks(np.array([5, 6, 7, 8], np.int32), 1)
        chunked[n_classes] = [c.tolist() for c in chunks]
    assert chunked == {2: [[5, 6, 7], [8, 5, 5]], 3: [[5, 6, 7, 8]]}
