"""Host helpers checked against plain numpy and their one-at-a-time versions."""

import dataclasses

import numpy as np
import pytest

from qbnb_jax._problem import host
from qbnb_jax._problem.data import (
    RUN_SORT_DESCENTS,
    _cut_tables,
    as_targets,
    make_problem,
    reweighted_samples,
    stable_order,
)
from qbnb_jax._problem.host import row_searchsorted, stump_losses, stumps_of_all_shared
from qbnb_jax._problem.leaf_limits import LeafLimits


@pytest.mark.parametrize("n_rows", [1, 5, 80])  # the row-by-row path and the binary search
def test_row_searchsorted_equals_numpy(n_rows):
    rng = np.random.default_rng(n_rows)
    for trial in range(40):
        width = int(rng.integers(1, 50))
        table = rng.integers(0, 20, size=(n_rows, width)).astype(float)
        if trial % 2:
            table += rng.random((n_rows, width))
        table.sort(axis=1)
        rows = rng.integers(0, n_rows, int(rng.integers(0, 100)))
        values = rng.integers(-1, 22, len(rows)).astype(float)
        values[::3] = table[rows[::3], 0]  # ties with table entries
        lo = rng.integers(0, width + 1, len(rows))
        hi = np.minimum(width, lo + rng.integers(0, width + 1, len(rows)))
        for side in ("left", "right"):
            want = [np.searchsorted(table[r], v, side=side) for r, v in zip(rows, values)]
            want = np.asarray(want, dtype=np.int64)
            np.testing.assert_array_equal(row_searchsorted(table, rows, values, side), want)
            # a window [lo, hi]: the answer clipped to it
            np.testing.assert_array_equal(row_searchsorted(table, rows, values, side, lo, hi),
                                          np.clip(want, lo, hi))


@pytest.mark.parametrize("levels", [2, 7, 1000])
def test_stable_order_equals_numpy_stable_argsort(levels):
    rng = np.random.default_rng(levels)
    n = 301 if levels < 1000 else 46_341  # past 46,340 samples: int64 keys
    cols = rng.integers(-levels, levels, size=(5, n)).astype(np.float64) * 0.5
    cols[0, ::7] = -0.0  # -0.0 ties 0.0, as in argsort
    cols[1, ::5] = np.inf
    cols[2, ::3] = -np.inf
    cols[3] = 1.0  # one value only
    for view in (cols, np.asfortranarray(cols), cols.T.copy().T):
        perm, changes = stable_order(view)
        expected = np.argsort(cols, axis=1, kind="stable")
        np.testing.assert_array_equal(perm, expected)
        assert perm.dtype == np.int32
        ordered = np.take_along_axis(cols, expected, axis=1)
        np.testing.assert_array_equal(changes, ordered[:, 1:] > ordered[:, :-1])


def test_stable_order_of_runs_ties_and_random_rows_together():
    """Short rows of few descents (sorted runs, few values) take the stable argsort,
    the others the keys: in one block, every row as numpy's stable argsort orders it."""
    rng = np.random.default_rng(5)
    n = 2_000
    cols = np.stack([
        np.sort(rng.normal(size=n)),                      # sorted: no descent
        np.repeat(rng.normal(size=n // 100), 100),        # runs of equal values
        rng.integers(0, 3, n).astype(np.float64),         # three values, random order
        np.round(rng.normal(size=n), 1),                  # many ties, random order
        rng.normal(size=n),                               # random, all distinct
        np.concatenate([np.arange(n // 2), np.arange(n // 2)]).astype(np.float64) * -1.0,
    ])
    descents = np.count_nonzero(cols[:, 1:] < cols[:, :-1], axis=1) / n
    assert (descents < RUN_SORT_DESCENTS).any() and (descents >= RUN_SORT_DESCENTS).any()
    for block in (cols, cols[descents < RUN_SORT_DESCENTS], cols[descents >= RUN_SORT_DESCENTS]):
        perm, changes = stable_order(block)
        expected = np.argsort(block, axis=1, kind="stable")
        np.testing.assert_array_equal(perm, expected)
        ordered = np.take_along_axis(block, expected, axis=1)
        np.testing.assert_array_equal(changes, ordered[:, 1:] > ordered[:, :-1])


def test_cut_tables_list_the_valid_positions_row_by_row():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        shape = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(1, 3)))
        valid = rng.random(shape + (n - 1,)) < rng.random()  # rows with none, some, all
        cum = np.cumsum(rng.integers(0, 3, size=shape + (n + 1,)), axis=-1)
        cut_pos = np.empty(shape + (n + 1,), dtype=np.int16)
        slack_left = np.empty(shape + (n + 1,), dtype=np.int32)
        u = _cut_tables(valid, cum, cut_pos, slack_left)
        for row in np.ndindex(shape):
            # t = 0: nothing left; t = 1..u-1: the valid positions in order; then all
            want = np.full(n + 1, n)
            want[0] = 0
            positions = np.flatnonzero(valid[row]) + 1
            want[1 : 1 + len(positions)] = positions
            assert u[row] == len(positions) + 1
            np.testing.assert_array_equal(cut_pos[row], want)
            np.testing.assert_array_equal(slack_left[row], cum[row][want])


@pytest.mark.parametrize("n_classes", [2, 4, 7])  # the signed-count path and the counts one
def test_stumps_of_all_shared_equals_one_by_one(n_classes):
    """The batched best stumps of reweighted problems equal `stump_losses`, ties included."""
    rng = np.random.default_rng(n_classes)
    X = np.round(rng.normal(size=(200, 5)), 1)  # many ties
    y = rng.integers(0, n_classes, 200)
    base = make_problem(X, y, task="classification")
    problems, tables = base.reweighted(rng.integers(0, 3, (37, 200)).astype(float), block=5,
                                       class_stumps=True)
    losses, positions = stumps_of_all_shared(problems)
    for q, problem in enumerate(problems):
        want_losses, want_positions = stump_losses(problem, np.ones(problem.n, dtype=bool))
        np.testing.assert_array_equal(losses[q], want_losses)
        np.testing.assert_array_equal(positions[q], want_positions)
    if n_classes > 2:  # and so are the reweighting pass's (`class_stumps`)
        np.testing.assert_array_equal(tables.stump_loss, losses)
        np.testing.assert_array_equal(tables.stump_position, positions)


@pytest.mark.parametrize("n", [1, 2, 9, 150])
def test_reweighted_numbers_thresholds_as_a_weighted_solve(n):
    """`reweighted` keeps zero-weight rows yet numbers its thresholds as `make_problem`
    with those weights (rows dropped) does: the same count per feature, and the same
    weight left of every threshold index. Ties and zero weights on purpose."""
    rng = np.random.default_rng(n)
    X = np.round(rng.normal(size=(n, 4)), 1)
    X[:, 3] = 0.5  # a constant feature
    y = rng.integers(0, 3, n)
    W = rng.integers(0, 3, (23, n)).astype(float)
    W[W.sum(axis=1) == 0, 0] = 1.0
    base = make_problem(X, y, task="classification")
    problems, tables = base.reweighted(W, block=5)
    for q, (problem, w) in enumerate(zip(problems, W)):
        alone = make_problem(X, y, task="classification", sample_weight=w)
        np.testing.assert_array_equal(problem.n_thresholds, alone.n_thresholds)
        for f in range(4):
            u = alone.n_thresholds[f]
            np.testing.assert_array_equal(problem.slack_left[f, : u + 1],
                                          alone.slack_left[f, : u + 1])
            assert (problem.cut_pos[f, u + 1 :] == n).all()
        np.testing.assert_array_equal(tables.cut_pos[q], problem.cut_pos)
        np.testing.assert_array_equal(tables.slack_left[q], problem.slack_left)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_depth2_trees_reweighted_equal_build_tree_alone(task):
    """The vectorised depth-2 trees of reweighted problems (zero-weight rows kept) are
    `build_tree`'s tree and `tree_objective`'s value of each weighted problem made
    alone, bit for bit, and collapsed splits fall back to them."""
    from qbnb_jax._problem.data import as_targets, reweighted_samples
    from qbnb_jax._problem.host import build_tree, depth2_trees_reweighted, tree_objective

    rng = np.random.default_rng(3)
    n = 70
    X = np.round(rng.normal(size=(n, 3)), 1)
    y = rng.integers(0, 3, n) if task == "classification" else rng.normal(size=(n, 2)) * 5 + 3
    W = (rng.random((40, n)) * 3 + 0.01) * (rng.random((40, n)) < 0.7)
    W[W.sum(axis=1) == 0, 0] = 1.0
    base = make_problem(X, y, task=task)
    targets = as_targets(y, n) if task == "regression" else None
    problems, _ = reweighted_samples(base, W, targets)
    specs = []
    for _ in W:
        f0, f1, f2 = rng.integers(0, 3, 3)
        # below the least and at the largest value: a side is empty and collapses
        t0, t1, t2 = (float(np.quantile(X[:, f], rng.choice([0.3, 0.5, 0.5, 1.0])))
                      - (rng.random() < 0.1) * 10.0 for f in (f0, f1, f2))
        specs.append((int(f0), t0, (int(f1), t1, None, None), (int(f2), t2, None, None)))
    for w, spec, (tree, objective) in zip(W, specs, depth2_trees_reweighted(problems, specs)):
        alone = make_problem(X, y, task=task, sample_weight=w)
        want = build_tree(alone, spec)
        assert objective == tree_objective(want, alone)
        for name in ("children_left", "children_right", "feature", "threshold", "value",
                     "weighted_n_node_samples"):
            np.testing.assert_array_equal(getattr(tree, name), getattr(want, name))


@pytest.mark.parametrize("targets", [1, 3, 9])
def test_sse_setup_of_many_weightings_equals_each_alone(targets):
    """`sse_setup` of P weightings (zero-weight rows kept) gives each weighting the
    offset, exponents, stats and slack of `make_problem` with those weights, bit for
    bit: large offsets, weights over many octaves, a constant column."""
    from qbnb_jax._problem.scaling import sse_setup

    rng = np.random.default_rng(targets)
    n = 300
    y = rng.normal(size=(n, targets)) * 10.0 ** rng.integers(-3, 4, targets) + 1e4
    y[:, -1] = 2.5 if targets > 1 else y[:, -1]
    W = np.exp(rng.normal(size=(25, n)) * 3) * (rng.random((25, n)) < 0.6)
    W[3] *= 2.0**-900  # tiny weights: scaled units
    W[W.sum(axis=1) == 0, 0] = 1.0
    setup = sse_setup(y, W)
    X = rng.normal(size=(n, 2))
    for q, w in enumerate(W):
        alone = make_problem(X, y, task="regression", sample_weight=w)
        keep = w > 0
        np.testing.assert_array_equal(setup.offset[q], alone.y_offset)
        np.testing.assert_array_equal(setup.centred[q][keep], alone.y)
        assert (setup.centred[q][~keep] == 0).all()
        assert (setup.weight_exponent[q], setup.target_exponent[q]) == (
            alone.weight_exponent, alone.target_exponent)
        np.testing.assert_array_equal(setup.stats[q][keep], alone.stats)
        assert (setup.stats[q][~keep] == 0).all()
        np.testing.assert_array_equal(setup.slack[q][keep], alone.search_slack(
            np.arange(alone.n)))
    assert setup.weight_exponent[3] != 0


def test_stump_losses_all_features_at_once_equal_one_by_one(monkeypatch):
    """Small sets take every feature in one pass (`STUMPS_AT_ONCE`): the same losses and
    positions, to the bit, as the loop over features."""
    from qbnb_jax._problem import host

    rng = np.random.default_rng(0)
    for it in range(60):
        n, p = int(rng.integers(1, 300)), int(rng.integers(1, 6))
        X = rng.integers(0, 6, size=(n, p)).astype(float)  # ties
        task = ("regression", "classification")[it % 2]
        y = (rng.normal(size=(n, 1 + it % 3)) if task == "regression"
             else rng.integers(0, 2 + it % 3, n))
        w = rng.choice([0.5, 1.0, 2.0], n) if it % 4 == 1 else None
        problem = make_problem(X, y, task=task, sample_weight=w)
        mask = rng.random(problem.n) < 0.6
        at_once = host.stump_losses(problem, mask)
        with monkeypatch.context() as m:
            m.setattr(host, "STUMPS_AT_ONCE", -1)
            one_by_one = host.stump_losses(problem, mask)
        for got, want in zip(at_once, one_by_one):
            np.testing.assert_array_equal(got, want, err_msg=f"problem {it}")


def test_stump_losses_on_threads_equal_in_order(monkeypatch):
    """Large sets take their features a block per thread (`THREADED_STUMPS_FROM`): the
    same losses and positions, to the bit, as one thread in order; class counts in
    blocks of features, float sums and leaf limits a feature at a time."""
    from qbnb_jax._problem import host

    rng = np.random.default_rng(2)
    for it in range(24):
        n, p = int(rng.integers(50, 400)), int(rng.integers(2, 7))
        X = np.round(rng.normal(size=(n, p)), 1)  # ties
        task = ("regression", "classification")[it % 2]
        y = (rng.normal(size=(n, 1 + it % 3)) if task == "regression"
             else rng.integers(0, 2 + it % 5, n))
        w = rng.choice([0.5, 1.0, 2.0], n) if it % 4 == 1 else None
        problem = make_problem(X, y, task=task, sample_weight=w)
        if it % 6 == 5:
            problem = dataclasses.replace(problem, leaf_limits=LeafLimits(5, 0.0))
        mask = rng.random(problem.n) < 0.7
        with monkeypatch.context() as m:
            m.setattr(host, "THREADED_STUMPS_FROM", 0)
            m.setattr(host, "STUMPS_AT_ONCE", -1)
            m.setattr(host, "COUNT_STUMPS_AT_ONCE", 3 * (problem.n + 1) * problem.n_channels)
            threaded = host.stump_losses(problem, mask)
            m.setattr(host, "THREADS", 1)
            in_order = host.stump_losses(problem, mask)
        for got, want in zip(threaded, in_order):
            np.testing.assert_array_equal(got, want, err_msg=f"problem {it}")


@pytest.mark.parametrize("block", [1, 1 << 20])
def test_class_count_stumps_equal_the_float_losses(monkeypatch, block):
    """Integer counts of several classes take integer prefix sums in blocks of features
    (`COUNT_STUMPS_AT_ONCE`): the losses and first minima of the float sums."""
    from qbnb_jax._problem import host

    monkeypatch.setattr(host, "COUNT_STUMPS_AT_ONCE", block)
    rng = np.random.default_rng(1)
    for it in range(30):
        n, p = int(rng.integers(1, 300)), int(rng.integers(1, 6))
        X = rng.integers(0, 6, size=(n, p)).astype(float)  # ties
        y = rng.integers(0, 3 + it % 4, n)
        w = rng.integers(1, 4, n) if it % 3 == 1 else None
        problem = make_problem(X, y, task="classification", sample_weight=w)
        if problem.n_channels < 3:
            continue
        mask = rng.random(problem.n) < 0.6
        losses, positions = host.stump_losses(problem, mask)
        stats = np.where(mask[:, None], problem.stats, 0)
        for f in range(problem.p):
            loss = host.split_losses(stats[problem.perm[f]], float(stats.sum()), "count")
            loss = np.where(problem.cut_valid[f], loss, np.inf)
            assert positions[f] == np.argmin(loss), (it, f)
            assert losses[f] == loss.min(), (it, f)


def _check_children_cuts(rng, problems, tables, p: int) -> None:
    """`depth2_cuts_shared` at random (root feature, root cut, child features) per
    problem equals the best stumps `stump_losses` finds on each side of the root cut."""
    from qbnb_jax._problem.host import depth2_cuts_shared

    specs = np.stack([rng.integers(0, p, len(problems)), np.zeros(len(problems), int),
                      rng.integers(0, p, len(problems)), rng.integers(0, p, len(problems))],
                     axis=1)
    specs[:, 1] = [rng.integers(1, max(2, pr.n_thresholds[f])) for pr, f
                   in zip(problems, specs[:, 0])]
    q = np.arange(len(problems))
    k0, k1, k2, _ = depth2_cuts_shared(problems, tables.cut_pos, tables.cut_valid, specs, q)
    for i, pr in enumerate(problems):
        f0, _, f1, f2 = specs[i]
        left = pr.rank[f0] < k0[i]
        _, at1 = stump_losses(pr, left, [f1])
        _, at2 = stump_losses(pr, ~left, [f2])
        assert (k1[i], k2[i]) == (at1[0], at2[0])


@pytest.mark.parametrize("n_classes", [3, 6])
def test_depth2_cuts_shared_children_equal_stump_losses(n_classes):
    """The children's cuts of batched depth-2 trees (integer class counts) are the
    best stumps `stump_losses` finds on each side of the root, ties included."""
    rng = np.random.default_rng(n_classes)
    n, p = 120, 4
    X = np.round(rng.normal(size=(n, p)), 1)  # many ties
    y = rng.integers(0, n_classes, n)
    base = make_problem(X, y, task="classification")
    problems, tables = base.reweighted(rng.integers(0, 3, (29, n)).astype(float))
    _check_children_cuts(rng, problems, tables, p)


@pytest.mark.parametrize("targets", [1, 2])
def test_sse_stumps_of_all_shared_equal_one_by_one(targets, monkeypatch):
    """Regression stumps of float-reweighted problems (`_sse_stumps_shared`: prefix sums
    a row at a time, losses at valid cuts only) equal `stump_losses`', bit for bit,
    first minima included; blocks of problems smaller than the batch on purpose."""
    monkeypatch.setattr(host, "SSE_STUMP_PROBLEMS", 8)
    rng = np.random.default_rng(targets)
    n = 150
    X = np.round(rng.normal(size=(n, 4)), 1)  # many ties
    X[:, 3] = 1.0  # a constant feature: no valid cut past 0
    y = np.round(rng.normal(size=(n, targets)), 1)
    y[:40] = 0.5  # problem 3 weighs these alone: every cut's loss is 0, a tie
    base = make_problem(X, y, task="regression")
    W = rng.multinomial(n, np.full(n, 1.0 / n), size=21).astype(float)
    W[1::2] *= np.round(rng.uniform(0.5, 2.0, size=W[1::2].shape), 3)  # fractional
    W[2] = 0.0
    W[2, :2] = 1.0  # two samples only
    W[3, 40:] = 0.0
    problems, _ = reweighted_samples(base, W, as_targets(y, n))
    losses, positions = stumps_of_all_shared(problems)
    for q, problem in enumerate(problems):
        want_losses, want_positions = stump_losses(problem, np.ones(n, dtype=bool))
        np.testing.assert_array_equal(losses[q], want_losses)
        np.testing.assert_array_equal(positions[q], want_positions)


@pytest.mark.parametrize("targets", [1, 2])
def test_depth2_cuts_shared_sse_children_equal_stump_losses(targets):
    """The same of regression problems with float weights (`_sse_first_best`: prefix
    sums a sample row at a time), ties included: problem 0 weighs equal targets alone."""
    rng = np.random.default_rng(targets)
    n, p = 120, 4
    X = np.round(rng.normal(size=(n, p)), 1)  # many ties
    y = np.round(rng.normal(size=(n, targets)), 1)
    y[:50] = 0.25
    W = rng.multinomial(n, np.full(n, 1.0 / n), size=29).astype(float)
    W[1::2] *= np.round(rng.uniform(0.5, 2.0, size=W[1::2].shape), 3)
    W[0, 50:] = 0.0
    base = make_problem(X, y, task="regression")
    problems, tables = reweighted_samples(base, W, as_targets(y, n))
    _check_children_cuts(rng, problems, tables, p)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_built_tree_routes_once_to_the_same_tree_and_objective(task):
    """`built_tree` (the result's tree and objective, the samples routed once) against
    `build_tree` and `tree_objective` apart, and `Tree.apply` against the tree's
    node indicator, on random trees of depth 1 to 3 (some splits send everything one
    way and collapse), routing rows with NaN too."""
    from qbnb_jax._problem.tree import LEAF

    rng = np.random.default_rng(11)
    for _ in range(30):
        n, p = int(rng.integers(5, 60)), int(rng.integers(1, 4))
        X = np.round(rng.normal(size=(n, p)), 1)
        y = rng.integers(0, 3, n) if task == "classification" else rng.normal(size=n)
        problem = make_problem(X, y, task=task, sample_weight=rng.integers(1, 4, n))

        def spec(depth):
            if depth == 0 or rng.random() < 0.2:
                return None
            f = int(rng.integers(0, problem.p))
            return (f, float(rng.normal()), spec(depth - 1), spec(depth - 1))

        splits = spec(int(rng.integers(1, 4)))
        tree, objective = host.built_tree(problem, splits)
        want = host.build_tree(problem, splits)
        np.testing.assert_array_equal(tree.value, want.value)
        np.testing.assert_array_equal(tree.feature, want.feature)
        assert objective == host.tree_objective(want, problem)
        leaves = np.flatnonzero(tree.feature == LEAF)
        with_nan = np.where(rng.random((n, p)) < 0.2, np.nan, X)
        for rows in (problem.X, with_nan):
            reach = tree.node_indicator(rows)
            np.testing.assert_array_equal(tree.apply(rows),
                                          leaves[np.argmax(reach[:, leaves], axis=1)])


def test_integer_labels_coded_as_numpy_unique_codes_them():
    from qbnb_jax._problem.data import encode_labels

    rng = np.random.default_rng(12)
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64):
        info = np.iinfo(dtype)
        for _ in range(30):
            n = int(rng.integers(1, 60))
            lo = int(rng.integers(info.min, min(info.max, 2**62) - 50))
            labels = (rng.integers(0, int(rng.integers(1, 40)), n) + lo).astype(dtype)
            classes, codes = encode_labels(labels, n)
            want_classes, want_codes = np.unique(labels, return_inverse=True)
            assert classes.dtype == want_classes.dtype
            np.testing.assert_array_equal(classes, want_classes)
            np.testing.assert_array_equal(codes, want_codes.reshape(-1))
    extremes = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0])
    np.testing.assert_array_equal(encode_labels(extremes, 3)[1], [0, 2, 1])
