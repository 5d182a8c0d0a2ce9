"""Depth-3 batches (problems in lockstep, `_search/deep_batch.py`) equal one-by-one solves."""

import numpy as np
import pytest
from helpers import brute_force
from test_batch import assert_same

import qbnb_jax
from qbnb_jax._problem.data import compact_sides, make_problem, sorted_samples
from qbnb_jax._problem.host import stump_losses
from qbnb_jax._search import deep_batch
from qbnb_jax._search.depth2 import stack_tables


def make_data(rng, task: str, classes: int, n: int, p: int):
    X = np.round(rng.normal(size=(n, p)), 1)  # ties
    if task == "classification":
        y = (X[:, 0] > 0.2).astype(np.int64) + (X[:, 1 % p] < -0.3)  # some structure
        flip = rng.random(n) < 0.25
        y[flip] = rng.integers(0, classes, int(flip.sum()))
        return X, np.minimum(y, classes - 1)
    return X, np.where(X[:, 0] > 0, 1.5, -0.5) + rng.normal(size=n)


def folds(rng, n: int, P: int) -> np.ndarray:
    W = (rng.random((P, n)) >= 0.25).astype(float)
    W[:, 0] = 1.0  # no row all zero
    return W


def bootstrap(rng, n: int, P: int) -> np.ndarray:
    return rng.multinomial(n, np.full(n, 1 / n), size=P).astype(float)


def check_batch(X, y, W, task, ctx, brute=()):
    results = qbnb_jax.solve_batch(X, y, W, task=task, depth=3)
    assert len(results) == len(W)
    for i, (w, res) in enumerate(zip(W, results)):
        alone = qbnb_jax.solve(X, y, task=task, depth=3, sample_weight=w)
        assert_same(res, alone, task, f"{ctx} problem {i}")
        if i in brute:
            keep = w > 0
            want = brute_force(X[keep], y[keep], w[keep], task=task, depth=3)
            assert res.objective == pytest.approx(want, rel=1e-9, abs=1e-9), ctx
    return results


@pytest.mark.parametrize("task, classes", [("classification", 2), ("classification", 3),
                                           ("regression", 0)])
@pytest.mark.parametrize("weights", ["folds", "bootstrap"])
def test_depth3_batch_equals_one_by_one(task, classes, weights):
    rng = np.random.default_rng(7 + classes + len(weights))
    n, p = 40, 3
    X, y = make_data(rng, task, classes, n, p)
    W = (folds if weights == "folds" else bootstrap)(rng, n, 6)
    check_batch(X, y, W, task, f"{task} {classes} {weights}", brute=(0,))


def test_depth3_batch_fractional_weights():
    rng = np.random.default_rng(3)
    X, y = make_data(rng, "classification", 2, 30, 3)
    W = bootstrap(rng, 30, 4) * np.round(rng.uniform(0.5, 2.0, size=(4, 30)), 2)
    check_batch(X, y, W, "classification", "fractional")


def test_depth3_batch_many_small_side_batches(monkeypatch):
    """Tiny batch limits: a round's sides split over many depth-2 searches, and small
    batches take the next lengths' sides; no result changes."""
    monkeypatch.setattr(deep_batch, "MAX_BATCH", 4)
    monkeypatch.setattr(deep_batch, "SMALL_BATCH", 2)
    rng = np.random.default_rng(5)
    X, y = make_data(rng, "classification", 2, 70, 4)
    check_batch(X, y, folds(rng, 70, 5), "classification", "small batches")


def test_split_round_halves_only_a_lone_large_batch():
    """`split_round`: a round's only batch, from SPLIT_ROUND_ENTRIES padded entries, in
    its smaller and larger halves; several batches, or a small one, as they are."""
    limit = deep_batch.SPLIT_ROUND_ENTRIES
    sizes = [10, 20, 30, 40, 50]
    p = -(-limit // (len(sizes) * 50))  # 5 sides padded to 50 samples reach the limit
    assert deep_batch.split_round([[0, 1, 2, 3, 4]], sizes, p) == [[0, 1], [2, 3, 4]]
    assert deep_batch.split_round([[0, 1, 2, 3, 4]], sizes, p - 1) == [[0, 1, 2, 3, 4]]
    assert deep_batch.split_round([[0, 1], [2, 3, 4]], sizes, 10 * p) == [[0, 1], [2, 3, 4]]
    assert deep_batch.split_round([[4]], sizes, 10 * p) == [[4]]


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_depth3_split_rounds_equal_whole_rounds(task, monkeypatch):
    """Every round split in halves (`split_round` from one entry) gives the trees,
    objectives and bounds of whole rounds, and the brute force's optimum."""
    rng = np.random.default_rng(31 if task == "regression" else 32)
    X, y = make_data(rng, task, 3, 36, 3)
    w = bootstrap(rng, 36, 1)[0]
    whole = qbnb_jax.solve(X, y, task=task, depth=3, sample_weight=w)
    halves = []
    real = deep_batch.split_round

    def recording(batches, sizes, p):
        out = real(batches, sizes, p)
        halves.append(len(out) > len(batches))
        return out

    monkeypatch.setattr(deep_batch, "SPLIT_ROUND_ENTRIES", 1)
    monkeypatch.setattr(deep_batch, "split_round", recording)
    split = qbnb_jax.solve(X, y, task=task, depth=3, sample_weight=w)
    assert any(halves)
    assert_same(split, whole, task, "split rounds")
    want = brute_force(X, y, w, task=task, depth=3)
    assert abs(split.objective - want) <= 1e-9 * max(1.0, abs(want))


@pytest.mark.parametrize("p, weights, per_batch, plan", [
    (3, "folds", None, "sequential"), (3, "bootstrap", 3, "sequential"),
    (5, "folds", 4, "sequential"), (3, "folds", None, "parallel")])
def test_depth3_sides_on_the_shared_layout(p, weights, per_batch, plan, monkeypatch):
    """Two-class sides solved as weightings of the batch's shared layout
    (`_solve_on_layout`), in the grid's lanes, in one or several batches a round, on
    either execution plan: the trees, objectives and bounds of one-by-one solves,
    whose sides are compacted."""
    from qbnb_jax._device import runner as runner_module
    from qbnb_jax._device.runner import KernelRunner

    monkeypatch.setenv("QBNB_JAX_PLAN", plan)
    monkeypatch.setattr(deep_batch, "LAYOUT_SIDES_FROM", 2)
    monkeypatch.setattr(runner_module, "GRID_MIN_PROBLEMS", 2)
    rng = np.random.default_rng(p + 3 * len(weights))
    n = 60
    if per_batch is not None:  # tables of `per_batch` sides fill a batch
        monkeypatch.setattr(deep_batch, "LAYOUT_SIDES_BYTES",
                            per_batch * deep_batch.LAYOUT_BYTES_PER_ENTRY * p * (n + 1))
    batches, grids = [], []
    real = deep_batch.depth2_on_layout
    monkeypatch.setattr(deep_batch, "depth2_on_layout",
                        lambda *a: batches.append(len(a[1])) or real(*a))
    real_grid = KernelRunner._run_grid
    monkeypatch.setattr(KernelRunner, "_run_grid",
                        lambda self, *a: grids.append(1) or real_grid(self, *a))
    X, y = make_data(rng, "classification", 2, n, p)
    W = (folds if weights == "folds" else bootstrap)(rng, n, 5)
    check_batch(X, y, W, "classification", f"p={p} {weights}", brute=(0,))
    assert batches and grids, "sides were solved on the shared layout, in the grid's lanes"
    if per_batch is not None:
        assert max(batches) <= per_batch < sum(batches)


def test_lockstep_batches_partition_by_length():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 3000, size=500)
    batches = deep_batch.lockstep_batches(sizes, p=4)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(sizes)))
    assert all(len(b) <= deep_batch.MAX_BATCH for b in batches)
    for b in batches:  # one length, and shorter sides only while the batch was small
        length = np.array([deep_batch.padded_length(int(sizes[i]), deep_batch.length_steps())
                           for i in b])
        assert (length < length.max()).sum() < deep_batch.SMALL_BATCH
    assert np.all(np.diff([sizes[b].max() for b in batches]) >= 0)  # smallest first


@pytest.mark.parametrize("weights", ["unit", "bootstrap"])
def test_side_tables_stumps_equal_host_stumps(weights):
    """The unit-weight tables (`slack_left` from `cut_pos`, totals from sizes) and the
    general ones equal `stack_tables` and the host's stumps."""
    rng = np.random.default_rng(1)
    X, y = make_data(rng, "classification", 2, 50, 3)
    w = None if weights == "unit" else bootstrap(rng, 50, 1)[0]
    problem = make_problem(X, y, task="classification", sample_weight=w)
    source = sorted_samples(problem)
    masks = [rng.random(problem.n) < share for share in (0.2, 0.5, 0.9, 1.0, 0.3, 0.7)]
    chunks = [compact_sides([source] * 4, masks[:4]), compact_sides([source] * 2, masks[4:])]
    assert all(chunk.unit_weight == (weights == "unit") for chunk in chunks)
    tables = deep_batch.side_tables(chunks)
    want = stack_tables([problem.compact(mask) for mask in masks])
    for name in ("cut_pos", "slack_left", "n_thresholds"):
        a, b = getattr(want, name), getattr(tables, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for q, mask in enumerate(masks):
        sub = problem.compact(mask)
        losses, positions = stump_losses(sub, np.ones(sub.n, dtype=bool))
        assert np.array_equal(tables.stump_loss[q], losses)
        assert np.array_equal(tables.stump_position[q], positions)


@pytest.mark.parametrize("targets,weights,n", [(1, "unit", 60), (3, "bootstrap", 60),
                                               (6, "unit", 300), (2, "fractional", 60)])
def test_side_tables_sse_stumps_equal_host_stumps(targets, weights, n):
    """Squared-error sides' stumps read from the prefix sums their kernels' tables hold
    (`side_tables(chunks, sent)`) equal the host's, bit for bit; six targets (eight
    channels) on 300 samples take the blocked prefix sums. Without those sums
    (fractional weights on the sequential plan: its sweeps sum their sets themselves)
    the search forms its own."""
    import jax

    from qbnb_jax._device.kernels import SweepData

    rng = np.random.default_rng(5 + targets)
    X, _ = make_data(rng, "regression", 2, n, 3)
    y = np.stack([np.where(X[:, t % 3] > 0, 1.5, -0.5) + rng.normal(size=n) * 10.0 ** -t
                  for t in range(targets)], axis=1)
    w = {"unit": None, "bootstrap": bootstrap(rng, n, 1)[0],
         "fractional": rng.uniform(0.5, 1.5, n)}[weights]
    problem = make_problem(X, y, task="regression", sample_weight=w)
    source = sorted_samples(problem)
    masks = [rng.random(problem.n) < share for share in (0.2, 0.5, 0.9, 1.0, 0.3, 0.7)]
    masks[1][:] = False
    masks[1][np.argsort(problem.rank[0])[:2]] = True  # two samples only
    chunks = [compact_sides([source] * 4, masks[:4]), compact_sides([source] * 2, masks[4:])]
    subs = [sub for chunk in chunks for sub in chunk.problems]
    sent: dict = {}
    with jax.enable_x64(True):
        SweepData.from_problems(subs, subs, list(range(len(subs))), steps_per_octave=8,
                                count_base=4, chunks=chunks, host_out=sent)
    tables = deep_batch.side_tables(chunks, sent)
    if sent["full_scan"].shape[2] == 1:  # the sequential plan's float sums
        assert weights == "fractional" and tables.stump_loss is None
        return
    for q, sub in enumerate(subs):
        losses, positions = stump_losses(sub, np.ones(sub.n, dtype=bool))
        assert np.array_equal(tables.stump_loss[q], losses), q
        assert np.array_equal(tables.stump_position[q], positions), q


@pytest.mark.parametrize("classes,weights", [(2, "folds"), (3, "folds"), (2, "bootstrap")])
def test_sweep_data_from_chunks_equals_per_problem(classes, weights):
    """`SweepData` built from the chunks' padded arrays (`for_compact(subs, chunks)`)
    holds the very tables built problem by problem: for 0/1 folds of two classes
    without reading the sides' stats (`CompactedSide`)."""
    import jax

    from qbnb_jax._device.kernels import SweepData

    rng = np.random.default_rng(3)
    X, y = make_data(rng, "classification", classes, 60, 3)
    w = (folds if weights == "folds" else bootstrap)(rng, 60, 1)[0]
    problem = make_problem(X, y, task="classification", sample_weight=w)
    source = sorted_samples(problem)
    masks = [rng.random(problem.n) < share for share in (0.2, 0.5, 0.9, 1.0, 0.3, 0.7, 0.6)]
    chunks = [compact_sides([source] * 4, masks[:4]), compact_sides([source] * 3, masks[4:])]
    subs = [sub for chunk in chunks for sub in chunk.problems]
    order = list(range(len(subs)))
    got = SweepData.from_problems(subs, subs, order, steps_per_octave=4, count_base=4,
                                  chunks=chunks)
    if classes == 2 and weights == "folds":
        assert not any("stats" in sub.__dict__ for sub in subs[1:])
    want = SweepData.from_problems(subs, subs, order, steps_per_octave=4, count_base=4)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    assert want_tree == got_tree
    for a, b in zip(want_leaves, got_leaves):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))


def test_unit_weight_tables_at_a_padded_length_of_2_15():
    """Unit-weight sides whose batch is padded to 2**15 samples while every side's
    counts fit int16: each side's summed weight at the last position is its n (the
    positions were formed in int16 and position 2**15 wrapped to -2**15, which made a
    depth-3 solve of 34,000 samples return a worse tree as optimal). The tables equal
    those built problem by problem."""
    import jax

    from qbnb_jax._device.kernels import SweepData

    rng = np.random.default_rng(4)
    n = 31_000  # padded to 2**15
    X = rng.normal(size=(n, 2))
    problem = make_problem(X, rng.integers(0, 3, n), task="classification")
    source = sorted_samples(problem)
    masks = [problem.rank[0] < 1000, np.ones(n, dtype=bool)]
    chunks = [compact_sides([source] * 2, masks)]
    subs = chunks[0].problems
    assert chunks[0].unit_weight
    with jax.enable_x64(True):
        got = SweepData.from_problems(subs, subs, [0, 1], steps_per_octave=8, count_base=4,
                                      chunks=chunks)
        want = SweepData.from_problems(subs, subs, [0, 1], steps_per_octave=8, count_base=4)
    assert got.length == 2**15 and got.root_cum.dtype == np.int16
    assert np.array_equal(np.asarray(got.root_cum)[:2, :, -1, 0], [[1000, 1000], [n, n]])
    assert np.array_equal(np.asarray(got.root_cum), np.asarray(want.root_cum))


def test_depth3_batch_time_limit_keeps_valid_bounds():
    """Out of time in the middle of the lockstep rounds: every problem's bound stays
    below its true optimum."""
    rng = np.random.default_rng(2)
    X, y = make_data(rng, "classification", 2, 120, 4)
    W = folds(rng, 120, 3)
    results = qbnb_jax.solve_batch(X, y, W, task="classification", depth=3,
                                   time_limit=0.05)
    for w, res in zip(W, results):
        assert res.status in ("time_limit", "optimal")
        assert 0 <= res.lower_bound <= res.objective
        best = qbnb_jax.solve(X, y, task="classification", depth=3, sample_weight=w)
        assert res.lower_bound <= best.objective + 1e-9 <= res.objective + 1e-9


@pytest.mark.parametrize("limit", [1e-4, 0.3])
def test_depth3_sides_past_the_time_limit_keep_valid_bounds(limit, monkeypatch):
    """Batches of sides (on the shared layout and compacted) not begun by the time
    limit are not begun: their sides are bounded by 0, and every problem still returns
    a tree with a bound below its true optimum."""
    from qbnb_jax._device import runner as runner_module

    monkeypatch.setattr(deep_batch, "LAYOUT_SIDES_FROM", 2)
    monkeypatch.setattr(runner_module, "GRID_MIN_PROBLEMS", 2)
    skipped = []
    real = deep_batch._out_of_time
    monkeypatch.setattr(deep_batch, "_out_of_time",
                        lambda *a: real(*a) and not skipped.append(1))
    rng = np.random.default_rng(8)
    X, y = make_data(rng, "classification", 2, 150, 4)
    W = folds(rng, 150, 6)
    results = qbnb_jax.solve_batch(X, y, W, task="classification", depth=3,
                                   time_limit=limit)
    if limit < 0.01:
        assert skipped, "batches past the limit were skipped"
    for w, res in zip(W, results):
        assert res.status in ("time_limit", "optimal")
        assert 0 <= res.lower_bound <= res.objective
        best = qbnb_jax.solve(X, y, task="classification", depth=3, sample_weight=w)
        assert res.lower_bound <= best.objective + 1e-9 <= res.objective + 1e-9


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_compact_many_equals_compact(task):
    """`compact_many` (sides compacted together, padded) gives `compact`'s arrays."""
    import dataclasses

    from qbnb_jax._problem.data import compact_many

    rng = np.random.default_rng(7)
    X, y = make_data(rng, task, 3, 120, 4)
    root = make_problem(X, y, task=task)
    parents = [root]
    if task == "classification":
        parents += root.reweighted(folds(rng, 120, 2).astype(np.int64))[0]
        parents += root.reweighted(bootstrap(rng, 120, 2).astype(np.int64))[0]
        fractional = bootstrap(rng, 120, 1)[0] * np.round(rng.uniform(0.5, 2.0, 120), 2)
        parents.append(make_problem(X, y, task=task, sample_weight=fractional))
    subsets = []
    for _ in range(60):
        parent = parents[rng.integers(len(parents))]
        f, k = rng.integers(parent.p), rng.integers(0, parent.n + 1)
        left = parent.rank[f] < k
        mask = [left, ~left, rng.random(parent.n) < 0.5][rng.integers(3)]
        subsets.append((parent, mask))
    for at in range(0, len(subsets), 13):
        chunk = subsets[at: at + 13]
        for (parent, mask), got in zip(chunk, compact_many(*zip(*chunk))):
            want = parent.compact(mask)
            for field in dataclasses.fields(want):
                a, b = getattr(want, field.name), getattr(got, field.name)
                if isinstance(a, np.ndarray):
                    assert a.dtype == b.dtype and np.array_equal(a, b), field.name


def test_sorted_samples_side_sizes():
    """`SortedSamples.positive_before` gives `DeepSearch.side_size` without compacting."""
    from qbnb_jax._search.deep import LEFT, RIGHT, DeepSearch
    from qbnb_jax._search.state import SearchOptions

    rng = np.random.default_rng(3)
    X, y = make_data(rng, "classification", 2, 60, 3)
    root = make_problem(X, y, task="classification")
    for parent in root.reweighted(folds(rng, 60, 3).astype(np.int64))[0]:
        source = sorted_samples(parent)
        options = SearchOptions(bound="w1", s=3, time_limit=None, progress=None, capacity=64,
                                start=0.0)
        search = DeepSearch(parent, options, depth=3)
        for f0 in range(parent.p):
            for k in range(parent.n + 1):
                left = int(source.positive_before[f0, k])
                assert left == search.side_size((f0, k, LEFT))
                assert source.perm.shape[1] - left == search.side_size((f0, k, RIGHT))


def test_lasting_splits_build_the_same_spec():
    """A side's deferred spec, kept as `lasting_splits` (the side compacted again from
    its parent), builds the spec the batch's compacted side builds."""
    from qbnb_jax._device.runner import KernelRunner
    from qbnb_jax._search.deep import LEFT, RIGHT
    from qbnb_jax._search.depth2 import solve_depth2
    from qbnb_jax._search.search import Search
    from qbnb_jax._search.state import SearchOptions

    rng = np.random.default_rng(4)
    X, y = make_data(rng, "classification", 2, 80, 3)
    parent = make_problem(X, y, task="classification", sample_weight=folds(rng, 80, 1)[0])
    options = SearchOptions(bound="w1", s=3, time_limit=None, progress=None, capacity=64,
                            start=0.0)
    keys = [(0, 30, LEFT), (1, 50, RIGHT), (2, 70, LEFT)]
    masks = [(parent.rank[f0] < k) ^ (which == RIGHT) for f0, k, which in keys]
    chunk = compact_sides([sorted_samples(parent)] * len(keys), masks)
    search = Search(chunk.problems, options, runner=KernelRunner(chunk.problems[0]).for_compact(
        chunk.problems))
    solve_depth2(search, deep_batch.side_tables([chunk]))
    for q, key in enumerate(keys):
        splits = search.outcome(q)[2]
        assert callable(splits)
        lasting = deep_batch.lasting_splits(splits, sorted_samples(parent), key)
        assert lasting is not splits and lasting() == splits()
