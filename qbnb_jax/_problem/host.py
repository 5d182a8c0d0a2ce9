"""Host (numpy) helpers: exact stump search, tree assembly, objective recomputation.

These work on one sample subset at a time and serve the greedy initial incumbent, depth
1, and turning a solved split specification into a `Tree`.
"""

from __future__ import annotations

import numpy as np

from qbnb_jax._device.parallel import THREADS, run_all
from qbnb_jax._problem.data import (
    Problem,
    class_count_losses,
    midpoint,
    two_class_stumps,
    valid_argmin,
)
from qbnb_jax._problem.sums import grouped_sums, sequential_sum
from qbnb_jax._problem.tree import LEAF, Tree


def leaf_loss_np(stats: np.ndarray, loss_kind: str) -> np.ndarray:
    """Best constant-fit loss from summed stat vectors `(..., C)`.

    Channels are combined one at a time: numpy reduces a short last axis slowly.
    """
    stats = np.asarray(stats, dtype=np.float64)
    channels = [stats[..., c] for c in range(stats.shape[-1])]
    if loss_kind == "sse":
        s0 = channels[0]
        sq = sum(c * c for c in channels[1:-1])
        safe = np.where(s0 > 0, s0, 1.0)
        return channels[-1] - np.where(s0 > 0, sq / safe, 0.0)
    total, largest = channels[0].copy(), channels[0].copy()
    for c in channels[1:]:
        total += c
        np.maximum(largest, c, out=largest)
    return total - largest


def split_losses(ordered: np.ndarray, total, loss_kind: str) -> np.ndarray:
    """Loss of a stump cut before each position of stat vectors in sorted order.

    `ordered`: `(..., n, C)`; `total`: the set's summed stats, broadcast against
    `(..., 1)` (used by the two-class form). Returns `(..., n + 1)`, position 0 sending
    everything right.
    """
    if loss_kind != "sse" and ordered.shape[-1] == 2:
        # Two classes: loss(left) + loss(right) = (T - |d_left| - |D - d_left|) / 2
        # with d the signed count, so one cumulative sum suffices (as in the kernels).
        signed = (ordered[..., 1] - ordered[..., 0]).astype(np.float64)
        d = np.zeros(signed.shape[:-1] + (signed.shape[-1] + 1,))
        np.cumsum(signed, axis=-1, out=d[..., 1:])
        return (total - np.abs(d) - np.abs(d[..., -1:] - d)) / 2.0
    cum = np.zeros(ordered.shape[:-2] + (ordered.shape[-2] + 1, ordered.shape[-1]))
    np.cumsum(ordered.astype(np.float64), axis=-2, out=cum[..., 1:, :])
    return leaf_loss_np(cum, loss_kind) + leaf_loss_np(cum[..., -1:, :] - cum, loss_kind)


# `stump_losses` takes every feature in one pass up to this many (feature, position,
# channel) entries, a few hundred kB of temporaries.
STUMPS_AT_ONCE = 1 << 16
# Integer prefix sums of several classes `stump_losses` forms at once (4 MB of int32).
COUNT_STUMPS_AT_ONCE = 1 << 20
# From this many (feature, position, channel) entries `stump_losses` takes its features
# a block per thread of `run_all` (numpy's cumulative sums release the GIL). Measured
# on two cores: 53,940 x 7 of 5 classes 18 -> 14-16 ms, 300,000 x 8 of 3 targets
# 420-426 -> 307-319 ms; sets of 0.3 to 1.2 M entries (eeg, magic, bean) gained nothing.
THREADED_STUMPS_FROM = 1 << 20


def stump_losses(problem: Problem, mask: np.ndarray, features=None):
    """Best stump of the samples in `mask` on each feature: `(losses, positions)`.

    `positions[i]` is a valid cut in `features[i]`'s full sorted order; samples of
    `mask` before it go left. Ties go to the lowest position.
    """
    features = np.arange(problem.p) if features is None else np.asarray(features)
    stats = np.where(mask[:, None], problem.stats, 0)
    total = set_total(stats, problem.weight)
    losses = np.empty(len(features))
    positions = np.empty(len(features), dtype=np.int64)
    limits = problem.leaf_limits
    C = stats.shape[1]
    threaded = THREADS >= 2 and len(features) >= 2 and (
        len(features) * (problem.n + 1) * C >= THREADED_STUMPS_FROM)
    if limits is None and problem.loss_kind == "count" and C > 2:
        # Integer class counts, channels outermost (`_count_split_losses`): the same
        # numbers and first minima, several times faster than float sums; features in
        # blocks of at most COUNT_STUMPS_AT_ONCE prefix sums.
        step = max(1, COUNT_STUMPS_AT_ONCE // ((problem.n + 1) * C))
        if threaded:  # at least a block per thread
            step = min(step, -(-len(features) // THREADS))

        def count_block(i: int) -> None:
            block = features[i : i + step]
            loss = _count_split_losses(stats[None], problem.perm[block])[0]
            positions[i : i + step], losses[i : i + step] = valid_argmin(
                loss, problem.cut_valid[block])

        _each(count_block, range(0, len(features), step), threaded)
        return losses, positions
    if limits is None and len(features) * (problem.n + 1) * stats.shape[1] <= STUMPS_AT_ONCE:
        # Small sets (the sides of deep searches): every feature in one pass, the same
        # per-feature arithmetic (cumulative sums along each feature's own order)
        # without a Python loop per feature.
        loss = split_losses(stats[problem.perm[features]], total, problem.loss_kind)
        loss = np.where(problem.cut_valid[features], loss, np.inf)
        positions = np.argmin(loss, axis=1)
        return np.take_along_axis(loss, positions[:, None], axis=1)[:, 0], positions
    # One feature at a time: the (n+1, C) intermediates of one feature stay small
    # (all features at once cost gigabytes at n = 10^6) and the arithmetic is the same.
    def one_feature(i: int) -> None:
        f = features[i]
        loss = split_losses(stats[problem.perm[f]], total, problem.loss_kind)
        valid = problem.cut_valid[f]
        if limits is not None:
            valid = valid & limited_positions(problem, mask, f)
        loss = np.where(valid, loss, np.inf)
        positions[i] = np.argmin(loss)
        losses[i] = loss[positions[i]]

    _each(one_feature, range(len(features)), threaded)
    return losses, positions


def _each(fn, items, threaded: bool) -> None:
    """`fn(item)` for every item: on the threads of `run_all` where `threaded` (each
    item's results are its own, so they are the same numbers either way), else in
    order on this thread."""
    if threaded:
        run_all(fn, items)
    else:
        for item in items:
            fn(item)


def set_total(stats: np.ndarray, weight: np.ndarray) -> float:
    """The summed stats `(n, C)` of a set (two-class losses start from it), over the
    samples of positive `weight` alone: a problem that keeps zero-weight rows
    (`reweighted_samples`) then sums the same array, in the same order, as its solve
    without them. Float sums depend on how the terms are grouped, zeros included."""
    if stats.dtype.kind != "f" or bool(np.all(weight > 0)):
        return float(stats.sum())
    return float(stats[weight > 0].sum())


def limited_positions(problem: Problem, mask: np.ndarray, f: int) -> np.ndarray:
    """`(n+1,)`: the cuts of f's order whose both sides of `mask` may be leaves under
    `problem.leaf_limits`, and position 0 (no split: the set stays one leaf).

    Prefix sums in f's order, sequential as the kernels' (`_device/limits.py`), so that
    both decide a boundary weight alike.
    """
    order = problem.perm[f]
    inside = mask[order]
    count = np.zeros(len(order) + 1)
    weight = np.zeros(len(order) + 1)
    np.cumsum(inside & (problem.weight[order] > 0), out=count[1:])
    np.cumsum(np.where(inside, problem.weight[order], 0.0), out=weight[1:])
    limits = problem.leaf_limits
    ok = limits.allows(count, weight) & limits.allows(count[-1] - count, weight[-1] - weight)
    ok[0] = True
    return ok


def stumps_of_each(problems: list[Problem]) -> tuple[np.ndarray, np.ndarray]:
    """`(losses, positions)` `(n_problems, p)`: every problem's best stump of all its
    samples on each feature (`stump_losses`), one problem at a time."""
    stumps = [stump_losses(pr, np.ones(pr.n, dtype=bool)) for pr in problems]
    return np.stack([one for one, _ in stumps]), np.stack([at for _, at in stumps])


def stumps_of_all_shared(problems: list[Problem]) -> tuple[np.ndarray, np.ndarray]:
    """`stump_losses(pr, all samples)` of problems sharing one layout (one `perm`).

    As `[stump_losses(pr, everyone) for pr in problems]` stacked into `(n_problems, p)` losses
    and positions, with the same arithmetic and tie-breaks, computed for blocks of
    problems at a time (a bootstrap batch has thousands of them). Under leaf limits
    (`solve`'s alternatives of one problem) each problem's own limited stumps.
    """
    first = problems[0]
    if first.leaf_limits is not None:
        return stumps_of_each(problems)
    if first.loss_kind == "sse":
        return _sse_stumps_shared(problems)
    losses = np.empty((len(problems), first.p))
    positions = np.empty((len(problems), first.p), dtype=np.int64)
    # Blocks of 8 problems keep the temporaries in cache: measured, faster than one by
    # one and than large blocks.
    block = 8
    for b0 in range(0, len(problems), block):
        group = problems[b0 : b0 + block]
        stats = np.stack([pr.stats for pr in group])  # (B, n, C)
        valid = np.stack([pr.cut_valid for pr in group])
        if stats.dtype.kind != "f" and stats.shape[2] > 2:
            at, best = valid_argmin(_count_split_losses(stats, first.perm), valid)
            positions[b0 : b0 + len(group)] = at
            losses[b0 : b0 + len(group)] = best
            continue
        if stats.dtype.kind == "f":  # float sums: each as `stump_losses` forms it
            total = np.array([set_total(pr.stats, pr.weight) for pr in group])[:, None, None]
        else:
            total = stats.sum(axis=(1, 2)).astype(np.float64)[:, None, None]
        # a take along the sample axis: the same entries as `stats[:, perm]`, faster
        loss = split_losses(np.take(stats, first.perm, axis=1), total,
                            first.loss_kind)  # (B, p, n+1)
        loss = np.where(valid, loss, np.inf)
        at = np.argmin(loss, axis=2)
        positions[b0 : b0 + len(group)] = at
        losses[b0 : b0 + len(group)] = np.take_along_axis(loss, at[..., None], axis=2)[..., 0]
    return losses, positions


# Problems whose squared-error stumps `_sse_stumps_shared` forms at once: each prefix
# sum step adds a row of (channel, feature, problem) entries, long enough that numpy's
# per-call cost stays small, while the (n + 1)-row table stays a few MB.
SSE_STUMP_PROBLEMS = 32


def _sse_stumps_shared(problems: list[Problem]) -> tuple[np.ndarray, np.ndarray]:
    """`stumps_of_all_shared` of squared-error problems: the numbers and first minima of
    `split_losses`, computed at the valid cuts alone.

    The prefix sums are the same sequential float sums as `np.cumsum` along each
    feature's order (entry k + 1 = entry k + sample k), formed one sample position at
    a time over a whole row of (feature, channel, problem) entries, sample-major
    `(n + 1, p, C, B)`: numpy's cumsum takes several ns per entry, a row's add a
    fraction of one. A bootstrap's valid cuts are a fifth of the positions (zero
    weights, ties), so the losses, the same per-entry arithmetic, are formed at those
    only, and each (feature, problem)'s least (its first, on ties) found by segment.
    """
    first = problems[0]
    P, p, n = len(problems), first.p, first.n
    losses = np.empty((P, p))
    positions = np.empty((P, p), dtype=np.int64)
    order = first.perm.T  # (n, p): the k-th sample of each feature's order
    for b0 in range(0, P, SSE_STUMP_PROBLEMS):
        group = problems[b0 : b0 + SSE_STUMP_PROBLEMS]
        B = len(group)
        stats = np.stack([pr.stats for pr in group]).astype(np.float64)  # (B, n, C)
        C = stats.shape[2]
        by_sample = np.ascontiguousarray(stats.transpose(1, 2, 0))  # (n, C, B)
        ordered = by_sample[order].reshape(n, p * C * B)  # (n, p, C, B)
        cum = np.empty((n + 1, p * C * B))
        cum[0] = 0.0
        for k in range(n):
            np.add(cum[k], ordered[k], out=cum[k + 1])
        valid = np.stack([pr.cut_valid for pr in group])  # (B, p, n + 1)
        column, at = np.nonzero(valid.reshape(B * p, n + 1))  # column = b * p + f
        b, f = np.divmod(column, p)
        entry = f * (C * B) + b  # channel 0 of (f, b) in a row of `cum`
        table = cum.reshape(-1)
        left = [table[at * (p * C * B) + entry + c * B] for c in range(C)]
        loss = _sse_split_loss(left, [cum[n][entry + c * B] for c in range(C)])
        counts = np.count_nonzero(valid, axis=2).reshape(-1)  # >= 1: cut 0 is valid
        starts = np.zeros(B * p, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        least = np.minimum.reduceat(loss, starts)
        candidate = np.where(loss == np.repeat(least, counts), np.arange(len(loss)), len(loss))
        positions[b0 : b0 + B] = at[np.minimum.reduceat(candidate, starts)].reshape(B, p)
        losses[b0 : b0 + B] = least.reshape(B, p)
    return losses, positions


# (set, feature, position) entries `sse_stumps_from_prefix_sums` forms at once: each
# of its temporaries stays a few MB.
PREFIX_STUMP_ENTRIES = 1 << 18


def sse_stumps_from_prefix_sums(sums: np.ndarray, squares: np.ndarray, cut_valid: np.ndarray,
                                sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`stump_losses(set, all samples)` of squared-error sets `(losses, positions)`
    `(Q, p)`, from their prefix sums in each feature's order, as the kernels' stat
    tables hold them (`SweepData.from_problems`' `host_out`): `sums` `(Q', p, N + 1,
    C - 1)` the channels S0, S1.., `squares` `(Q', p, N + 1, 1)` S2, entry k the sum of
    a set's first k samples (np.cumsum's sequential sums: the numbers `split_losses`
    forms), `cut_valid` `(Q', p, N + 1)` False past each set's own n, `sizes` `(Q,)`
    each set's n (`Q' >= Q`). A set's totals are its entries at its own n (padding
    samples add zeros, which can turn a sum of -0.0 into +0.0). The same losses and
    first minima as `stump_losses` (no leaf limits)."""
    Q, p, width = len(sizes), sums.shape[1], sums.shape[2]
    losses = np.empty((Q, p))
    positions = np.empty((Q, p), dtype=np.int64)
    step = max(1, PREFIX_STUMP_ENTRIES // (p * width))
    for q0 in range(0, Q, step):
        q1 = min(Q, q0 + step)
        left = [sums[q0:q1, :, :, c] for c in range(sums.shape[3])] + [squares[q0:q1, :, :, 0]]
        at_n = np.broadcast_to(np.asarray(sizes[q0:q1])[:, None, None], (q1 - q0, p, 1))
        loss = _sse_split_loss(left, [np.take_along_axis(c, at_n, axis=2) for c in left])
        np.copyto(loss, np.inf, where=~cut_valid[q0:q1])
        at = np.argmin(loss, axis=2)
        positions[q0:q1] = at
        losses[q0:q1] = np.take_along_axis(loss, at[..., None], axis=2)[..., 0]
    return losses, positions


def _sse_first_best(ordered: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`argmin(where(valid, split_losses(ordered, None, "sse"), inf), axis=1)` of
    squared-error stats `(Q, n, C)` in some order: the same prefix sums (sequential,
    a sample row of (channel, set) entries at a time: see `_sse_stumps_shared`),
    losses and first least, laid out sample-major."""
    Q, n, C = ordered.shape
    by_sample = np.ascontiguousarray(ordered.transpose(1, 2, 0), dtype=np.float64)
    cum = np.empty((n + 1, C, Q))
    cum[0] = 0.0
    for k in range(n):
        np.add(cum[k], by_sample[k], out=cum[k + 1])
    loss = _sse_split_loss([cum[:, c] for c in range(C)], [cum[n, c] for c in range(C)])
    np.copyto(loss, np.inf, where=~valid.T)
    return np.argmin(loss, axis=0)


def _sse_split_loss(left: list[np.ndarray], total: list[np.ndarray]) -> np.ndarray:
    """`split_losses`' squared-error loss of cuts from the summed channels [S0, S1..,
    S2] left of each cut and of the whole set: the left leaf's loss plus the right's,
    the right's sums `total - left`."""
    loss = _sse_leaf_loss(left)
    loss += _sse_leaf_loss([whole - part for whole, part in zip(total, left)])
    return loss


def _sse_leaf_loss(channels: list[np.ndarray]) -> np.ndarray:
    """`leaf_loss_np(..., "sse")` of summed channels [S0, S1.., S2]: S2 - |S1|^2 / S0,
    and S2 where S0 is not positive."""
    s0 = channels[0]
    sq = channels[1] * channels[1]
    for c in channels[2:-1]:
        sq += c * c
    ratio = np.zeros_like(sq)
    np.divide(sq, s0, out=ratio, where=s0 > 0)
    return np.subtract(channels[-1], ratio, out=ratio)


def _count_split_losses(stats: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """`split_losses` of integer class counts `(B, n, C)` in each feature's order `perm`
    `(p, n)`: `(B, p, n + 1)`, the same numbers (integers, exact in float64 either way).
    """
    by_class = np.ascontiguousarray(stats.transpose(0, 2, 1), dtype=_sum_dtype(stats))
    return class_count_losses(np.take(by_class, perm, axis=2))  # (B, C, p, n)


def _sum_dtype(stats: np.ndarray):
    """int32 prefix sums where every problem's total fits, else int64 (measured: numpy's
    int16 cumsum is slower than int32's)."""
    return np.int32 if int(stats.sum(axis=(1, 2)).max(initial=0)) < 2**31 else np.int64


def best_stump(problem: Problem, mask: np.ndarray, features=None) -> tuple[float, int, int]:
    """Best stump of the samples in `mask`: `(loss, feature, position)`.

    Ties go to the lowest feature, then the lowest position.
    """
    features = np.arange(problem.p) if features is None else np.asarray(features)
    losses, positions = stump_losses(problem, mask, features)
    i = int(np.argmin(losses))
    return float(losses[i]), int(features[i]), int(positions[i])


def position_threshold(problem: Problem, f: int, k: int) -> float:
    """Threshold value for a cut before sorted position `k` of feature `f`."""
    order, w = problem.perm[f], problem.weight
    if 0 < k < len(order) and w[order[k - 1]] > 0 and w[order[k]] > 0:
        return midpoint(float(problem.X[order[k - 1], f]), float(problem.X[order[k], f]))
    # The neighbours are the nearest samples with positive weight (a reweighted
    # problem keeps zero-weight rows), so thresholds match a solve without those rows.
    before = np.flatnonzero(w[order[:k]] > 0)
    after = np.flatnonzero(w[order[k:]] > 0)
    if len(before) == 0:
        return -np.inf
    if len(after) == 0:
        return np.inf
    xs = problem.X[order, f]
    return midpoint(float(xs[before[-1]]), float(xs[k + after[0]]))



class _Builder:
    def __init__(self):
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.left: list[int] = []
        self.right: list[int] = []

    def add(self, feature: int, threshold: float) -> int:
        self.feature.append(feature)
        self.threshold.append(threshold)
        self.left.append(LEAF)
        self.right.append(LEAF)
        return len(self.feature) - 1


def build_tree(problem: Problem, splits) -> Tree:
    """Assemble a tree from nested split specs and fill its leaf values.

    `splits` is `None` (a leaf) or `(feature, threshold, left_splits, right_splits)`.
    Splits that send no training weight to one side are collapsed into the other side,
    so every leaf of the result holds training samples (or the tree is a single leaf).
    """
    return fill_values(_assemble(problem, splits), problem)


def built_tree(problem: Problem, splits) -> tuple[Tree, float]:
    """`build_tree(problem, splits)` and its `tree_objective`, the samples routed once."""
    tree = _assemble(problem, splits)
    leaf_of = tree.apply(problem.X)
    tree = fill_values(tree, problem, leaf_of)
    return tree, _objective_of_leaves(problem, tree, leaf_of)


def _assemble(problem: Problem, splits) -> Tree:
    """The nodes of `build_tree`, values not yet filled."""
    builder = _Builder()

    def emit(spec, rows: np.ndarray) -> int:
        while spec is not None:
            f, thr, left, right = spec
            goes_left = problem.X[rows, f] <= thr
            if goes_left.all():
                spec = left
            elif not goes_left.any():
                spec = right
            else:
                break
        if spec is None:
            return builder.add(LEAF, np.nan)
        f, thr, left, right = spec
        node = builder.add(f, thr)
        goes_left = problem.X[rows, f] <= thr
        builder.left[node] = emit(left, rows[goes_left])
        builder.right[node] = emit(right, rows[~goes_left])
        return node

    emit(splits, np.flatnonzero(problem.weight > 0))
    n_nodes = len(builder.feature)
    return Tree(
        children_left=np.asarray(builder.left, dtype=np.int32),
        children_right=np.asarray(builder.right, dtype=np.int32),
        feature=np.asarray(builder.feature, dtype=np.int32),
        threshold=np.asarray(builder.threshold, dtype=np.float64),
        value=np.zeros((n_nodes, 1)),
        weighted_n_node_samples=np.zeros(n_nodes),
        task=problem.task,
    )


def fill_values(tree: Tree, problem: Problem, leaf_of: np.ndarray | None = None) -> Tree:
    """Recompute every node's value and weight from the training data (float64);
    `leaf_of`: each sample's leaf, if known (`tree.apply(problem.X)`).

    A leaf's sums run over its samples one at a time in sample order (`np.bincount`),
    an internal node's are its children's summed: a problem that keeps zero-weight
    rows (`solve_batch`) gets the numbers of its solve (`_problem/sums.py`)."""
    if leaf_of is None:
        leaf_of = tree.apply(problem.X)
    value, weights = _node_values(tree, problem, leaf_of)
    return Tree(
        children_left=tree.children_left,
        children_right=tree.children_right,
        feature=tree.feature,
        threshold=tree.threshold,
        value=value,
        weighted_n_node_samples=weights,
        task=tree.task,
    )


def _node_values(tree: Tree, problem: Problem, leaf_of: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """`(value, weight)` of every node of `tree`, for the leaf of every sample."""
    n_nodes = tree.n_nodes
    weights, sums = _leaf_sums(problem, leaf_of, n_nodes)
    for node in range(n_nodes - 1, -1, -1):  # preorder: children after parents
        left, right = tree.children_left[node], tree.children_right[node]
        if left != LEAF:
            weights[node] = weights[left] + weights[right]
            sums[node] = sums[left] + sums[right]
    if problem.task == "classification":
        return sums, weights
    return sums / np.where(weights > 0, weights, 1.0)[:, None] + problem.y_offset[None], weights


def _leaf_sums(problem: Problem, leaf_of: np.ndarray, n_nodes: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """`(weight (n_nodes,), sums (n_nodes, k))` of the samples of each node of
    `leaf_of`: class weights, or weighted (centred) targets."""
    w = problem.weight
    weights = grouped_sums(leaf_of, w, n_nodes)
    if problem.task == "classification":
        C = len(problem.classes)
        sums = grouped_sums(leaf_of * C + problem.y, w, n_nodes * C).reshape(n_nodes, C)
    else:
        sums = np.stack([grouped_sums(leaf_of, w * problem.y[:, k], n_nodes)
                         for k in range(problem.y.shape[1])], axis=1)
    return weights, sums


def tree_objective(tree: Tree, problem: Problem) -> float:
    """Weighted training loss of `tree`, recomputed exactly (float64, two-pass means,
    sums term by term in sample order as `fill_values`')."""
    return _objective_of_leaves(problem, tree, tree.apply(problem.X))


def _objective_of_leaves(problem: Problem, tree: Tree, leaf_of: np.ndarray) -> float:
    """`tree_objective(tree, problem)` for the leaf of every sample, `leaf_of`."""
    w = problem.weight
    if problem.task == "classification":
        predicted = np.argmax(tree.value, axis=1)[leaf_of]
        return float(sequential_sum(w * (predicted != problem.y)))
    weights, sums = _leaf_sums(problem, leaf_of, tree.n_nodes)
    mean = sums / np.where(weights > 0, weights, 1.0)[:, None]
    terms = w * np.sum((problem.y - mean[leaf_of]) ** 2, axis=1)
    return float(sequential_sum(grouped_sums(leaf_of, terms, tree.n_nodes)))


# A full depth-2 tree in preorder: root, left child, its leaves, right child, its leaves.
_FULL_LEFT = np.array([1, 2, LEAF, LEAF, 5, LEAF, LEAF], dtype=np.int32)
_FULL_RIGHT = np.array([4, 3, LEAF, LEAF, 6, LEAF, LEAF], dtype=np.int32)


def depth2_trees_reweighted(problems: list[Problem], splits: list
                            ) -> list[tuple[Tree, float]]:
    """`(build_tree(problems[q], spec), tree_objective(...))` of depth-2 split specs
    `(f0, t0, (f1, t1, None, None), (f2, t2, None, None))` of problems that share `X`
    and keep their zero-weight rows (`data.reweighted_samples`), with float weights,
    vectorised over the problems.

    A tree whose every split sends positive weight both ways (the usual case) is the
    full 7-node tree: its leaves come from three comparisons per sample, its node sums
    from one `np.bincount` over all problems, which adds each problem's terms in sample
    order as `fill_values` and `tree_objective` do for one (zero-weight rows add exact
    zeros): the same numbers. Others (a split collapses) take `build_tree`.
    """
    out: list = [None] * len(problems)

    def fill(c0: int) -> None:
        q = np.arange(c0, min(len(problems), c0 + TREE_CHUNK))
        for i, built in zip(q, _depth2_chunk([problems[i] for i in q],
                                             [splits[i] for i in q])):
            out[i] = built if built is not None else built_tree(problems[i], splits[i])

    run_all(fill, range(0, len(problems), TREE_CHUNK))
    return out


def _depth2_chunk(problems: list[Problem], splits: list) -> list:
    """`depth2_trees_reweighted` of a few problems: `(tree, objective)`, or None where
    the tree is not the full one."""
    Q, X, first = len(problems), problems[0].X, problems[0]
    plain = [spec is not None and spec[2] is not None and spec[3] is not None
             and spec[2][2:] == (None, None) and spec[3][2:] == (None, None)
             for spec in splits]
    f0, t0, f1, t1, f2, t2 = (np.array(column) for column in zip(*[
        (s[0], s[1], s[2][0], s[2][1], s[3][0], s[3][1]) if ok else (0, 0.0, 0, 0.0, 0, 0.0)
        for s, ok in zip(splits, plain)]))
    W = np.stack([pr.weight for pr in problems])  # (Q, n)
    positive = W > 0
    left = X[:, f0].T <= t0[:, None]  # (Q, n), as `build_tree` compares
    first_child = X[:, f1].T <= t1[:, None]
    second_child = X[:, f2].T <= t2[:, None]
    count = positive.sum(axis=1)
    n_left = np.count_nonzero(left & positive, axis=1)
    ll = np.count_nonzero(first_child & left & positive, axis=1)
    rl = np.count_nonzero(second_child & ~left & positive, axis=1)
    full = (np.array(plain) & (0 < n_left) & (n_left < count) & (0 < ll) & (ll < n_left)
            & (0 < rl) & (rl < count - n_left))
    leaf_of = np.where(left, np.where(first_child, 2, 3), np.where(second_child, 5, 6))
    node = (np.arange(Q)[:, None] * 7 + leaf_of).reshape(-1)
    weights = grouped_sums(node, W, Q * 7).reshape(Q, 7)
    if first.task == "classification":
        C = len(first.classes)
        sums = grouped_sums(node * C + np.tile(first.y, Q), W, Q * 7 * C).reshape(Q, 7, C)
    else:
        Y = np.stack([pr.y for pr in problems])  # (Q, n, m)
        sums = np.stack([grouped_sums(node, W * Y[..., k], Q * 7).reshape(Q, 7)
                         for k in range(Y.shape[2])], axis=2)
    for parent, (a, b) in ((4, (5, 6)), (1, (2, 3)), (0, (1, 4))):  # as `_node_values`
        weights[:, parent] = weights[:, a] + weights[:, b]
        sums[:, parent] = sums[:, a] + sums[:, b]
    lanes = np.arange(Q)[:, None]
    if first.task == "classification":
        value = sums
        predicted = np.argmax(sums[lanes, leaf_of], axis=2)
        objective = sequential_sum(W * (predicted != first.y[None]), axis=1)
    else:
        mean = sums / np.where(weights > 0, weights, 1.0)[..., None]
        terms = W * np.sum((Y - mean[lanes, leaf_of]) ** 2, axis=2)
        objective = sequential_sum(grouped_sums(node, terms, Q * 7).reshape(Q, 7), axis=1)
        value = mean + np.stack([pr.y_offset for pr in problems])[:, None]
    out: list = []
    for i in range(Q):
        if not full[i]:
            out.append(None)
            continue
        tree = Tree(children_left=_FULL_LEFT.copy(), children_right=_FULL_RIGHT.copy(),
                    feature=np.array([f0[i], f1[i], LEAF, LEAF, f2[i], LEAF, LEAF],
                                     dtype=np.int32),
                    threshold=np.array([t0[i], t1[i], np.nan, np.nan, t2[i], np.nan, np.nan]),
                    value=value[i], weighted_n_node_samples=weights[i], task=first.task)
        out.append((tree, float(objective[i])))
    return out


TREE_CHUNK = 128  # problems per block of the vectorised depth-2 trees and cuts


def depth2_cuts_shared(problems: list[Problem], cut_pos: np.ndarray, cut_valid: np.ndarray,
                       specs: np.ndarray, q: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The cuts of depth-2 incumbents `specs[q] = (f0, t, f1, f2)` of problems `q` that
    share one layout (`Problem.reweighted`, `reweighted_samples`), vectorised over them:
    `(k0, k1, k2, thresholds)`, the root's and its children's cut positions `(Q,)` each
    and their thresholds `(Q, 3)`, as `search.depth2_splits` finds them one at a time:
    the children's stumps from the same `split_losses` arithmetic (prefix sums in the
    feature's order, to which zero-weight rows add exact zeros) and tie-breaks, the
    thresholds from the same midpoints."""
    first = problems[0]
    n = first.n
    f0, t, f1, f2 = (np.asarray(c, dtype=np.int64) for c in specs[q].T)
    weight = np.stack([problems[i].weight for i in q])  # (Q, n)
    stats = np.stack([problems[i].stats for i in q])  # (Q, n, C)
    k0 = cut_pos[q, f0, t]
    left = first.rank[f0] < k0[:, None]  # (Q, n), sample order
    two_class_counts = stats.shape[2] == 2 and stats.dtype.kind != "f"
    if two_class_counts:
        signed_all = stats[..., 1] - stats[..., 0]
        mass = weight.sum(axis=1)  # bounds each side's weight
    class_counts = stats.shape[2] > 2 and stats.dtype.kind != "f"
    if class_counts:
        by_class_all = np.ascontiguousarray(stats.transpose(0, 2, 1), dtype=_sum_dtype(stats))

    def best_position(mask: np.ndarray, f: np.ndarray) -> np.ndarray:
        if two_class_counts:  # the same integer arithmetic as the batch's best stumps
            ordered = np.take_along_axis(signed_all * mask, first.perm[f], axis=1)
            return two_class_stumps(ordered[:, None], cut_valid[q, f][:, None], mass)[1][:, 0]
        if class_counts:  # integer counts of several classes: `class_count_losses`
            by_class = np.where(mask[:, None], by_class_all, 0)  # (Q, C, n)
            loss = class_count_losses(
                np.take_along_axis(by_class, first.perm[f][:, None], axis=2))
            return valid_argmin(loss, cut_valid[q, f])[0]
        masked = np.where(mask[..., None], stats, 0)
        if problems[q[0]].loss_kind == "sse":
            return _sse_first_best(
                np.take_along_axis(masked, first.perm[f][..., None], axis=1),
                cut_valid[q, f])
        if stats.dtype.kind == "f":  # as `stump_losses` sums each set
            total = np.array([set_total(m, w) for m, w in zip(masked, weight)])[:, None]
        else:
            total = masked.sum(axis=(1, 2)).astype(np.float64)[:, None]
        ordered = np.take_along_axis(masked, first.perm[f][..., None], axis=1)
        loss = split_losses(ordered, total, problems[q[0]].loss_kind)
        return np.argmin(np.where(cut_valid[q, f], loss, np.inf), axis=1)

    def thresholds(f: np.ndarray, k: np.ndarray) -> np.ndarray:
        """`position_threshold(problem q, f, k)` for valid cuts `k` (or 0, n).

        A valid cut sits right after a positive sample, so only the first positive
        sample at or after k is searched for: a few steps (bootstrap weights leave
        about a third of the samples at zero).
        """
        after = k.copy()
        while True:
            open_ = np.nonzero(after < n)[0]
            open_ = open_[weight[open_, first.perm[f[open_], after[open_]]] <= 0]
            if len(open_) == 0:
                break
            after[open_] += 1
        lo = first.X[first.perm[f, np.maximum(k - 1, 0)], f]
        hi = first.X[first.perm[f, np.minimum(after, n - 1)], f]
        with np.errstate(over="ignore", invalid="ignore"):
            mid = lo / 2.0 + hi / 2.0  # as `midpoint`
        mid = np.where((lo <= mid) & (mid < hi), mid, lo)
        return np.where(k == 0, -np.inf, np.where(after >= n, np.inf, mid))

    k1, k2 = best_position(left, f1), best_position(~left, f2)
    thr = np.stack([thresholds(f0, k0), thresholds(f1, k1), thresholds(f2, k2)], axis=1)
    return k0, k1, k2, thr


def depth2_splits_shared(problems: list[Problem], cut_pos: np.ndarray, cut_valid: np.ndarray,
                         specs: np.ndarray) -> list[tuple]:
    """`search.depth2_splits(problems[q], *specs[q])` of every problem (no penalty),
    for problems that share one layout, vectorised over them (`depth2_cuts_shared`)."""
    out: list = [None] * len(problems)

    def fill(c0: int) -> None:
        q = np.arange(c0, min(len(problems), c0 + TREE_CHUNK))
        *_, thr = depth2_cuts_shared(problems, cut_pos, cut_valid, specs, q)
        for i, (f0, _, f1, f2), (t0, t1, t2) in zip(q, specs[q].tolist(), thr.tolist()):
            out[i] = (f0, t0, (f1, t1, None, None), (f2, t2, None, None))

    run_all(fill, range(0, len(problems), TREE_CHUNK))
    return out


def depth2_trees_shared(problems: list[Problem], cut_pos: np.ndarray, cut_valid: np.ndarray,
                        specs: np.ndarray) -> list[tuple[Tree, float]]:
    """`build_tree` and `tree_objective` of depth-2 incumbents, for classification
    problems that share one layout (`Problem.reweighted`), vectorised over problems.

    `specs[q] = (f0, t, f1, f2)`: problem q's tree is `search.depth2_splits(problems[q],
    f0, t, f1, f2)`. The same trees as one at a time: the cuts and thresholds of
    `depth2_cuts_shared`, and splits that send no weight to one side collapse as
    `build_tree` collapses them. Counts are integers, so node values and objectives are
    exact sums.
    """
    first = problems[0]
    n_problems, C = len(problems), len(first.classes)
    f0, f1, f2 = (np.asarray(specs[:, i], dtype=np.int64) for i in (0, 2, 3))
    thr = np.empty((n_problems, 3))  # thresholds of the root, its left and its right child
    sums = np.empty((n_problems, 4, C))  # class weights of the leaves LL, LR, RL, RR

    def fill(c0: int) -> None:  # problems c0 .. c0 + TREE_CHUNK - 1, on the pool's threads
        q = np.arange(c0, min(n_problems, c0 + TREE_CHUNK))
        k0, k1, k2, thr[q] = depth2_cuts_shared(problems, cut_pos, cut_valid, specs, q)
        weight = np.stack([problems[i].weight for i in q])  # (Q, n)
        lanes = np.arange(len(q))
        left = first.rank[f0[q]] < k0[:, None]  # (Q, n), sample order
        # Each cut's threshold sends a sample of positive weight left exactly when its
        # rank is below the cut (zero weights add nothing to the sums): ranks, not values.
        quadrant = np.where(left, np.where(first.rank[f1[q]] < k1[:, None], 0, 1),
                            np.where(first.rank[f2[q]] < k2[:, None], 2, 3))
        sums[q] = np.bincount(((lanes[:, None] * 4 + quadrant) * C + first.y[None]).reshape(-1),
                              weights=weight.reshape(-1),
                              minlength=len(q) * 4 * C).reshape(len(q), 4, C)

    run_all(fill, range(0, n_problems, TREE_CHUNK))
    # Every leaf holds weight (the usual case): the full 7-node tree, built for all at once.
    full = (sums.sum(axis=2) > 0).all(axis=1)
    leaf, none = LEAF, np.full(n_problems, LEAF)
    feature = np.stack([f0, f1, none, none, f2, none, none], axis=1).astype(np.int32)
    threshold = np.full((n_problems, 7), np.nan)
    threshold[:, [0, 1, 4]] = thr
    value = np.stack([sums.sum(axis=1), sums[:, 0] + sums[:, 1], sums[:, 0], sums[:, 1],
                      sums[:, 2] + sums[:, 3], sums[:, 2], sums[:, 3]], axis=1)
    weights = value.sum(axis=2)
    children_left = np.array([1, 2, leaf, leaf, 5, leaf, leaf], dtype=np.int32)
    children_right = np.array([4, 3, leaf, leaf, 6, leaf, leaf], dtype=np.int32)
    objective = (sums.sum(axis=2) - sums.max(axis=2)).sum(axis=1)
    out = []
    for i in range(n_problems):
        if full[i]:
            tree = Tree(children_left=children_left.copy(), children_right=children_right.copy(),
                        feature=feature[i], threshold=threshold[i], value=value[i],
                        weighted_n_node_samples=weights[i], task=first.task)
            out.append((tree, float(objective[i])))
            continue
        nodes = _depth2_nodes(sums[i], (int(f0[i]), int(f1[i]), int(f2[i])), thr[i])
        feat, thresh, lefts, rights, values = (np.asarray(a) for a in zip(*nodes))
        values = values.astype(np.float64)
        tree = Tree(children_left=lefts.astype(np.int32), children_right=rights.astype(np.int32),
                    feature=feat.astype(np.int32), threshold=thresh.astype(np.float64),
                    value=values, weighted_n_node_samples=values.sum(axis=1), task=first.task)
        leaves = values[feat == LEAF]
        out.append((tree, float(np.sum(leaves.sum(axis=1) - leaves.max(axis=1)))))
    return out


def _depth2_nodes(sums: np.ndarray, features, thresholds) -> list[list]:
    """Preorder nodes `[feature, threshold, left, right, value]` of a depth-2 tree whose
    four leaves (LL, LR, RL, RR) hold the class sums `sums` `(4, C)`, collapsing every
    split that sends no weight to one side (as `build_tree`)."""
    f0, f1, f2 = features
    # a spec: (feature, threshold, left spec, right spec, left leaves, right leaves)
    left = (f1, thresholds[1], None, None, [0], [1])
    right = (f2, thresholds[2], None, None, [2], [3])
    nodes: list[list] = []

    def emit(spec, leaves: list[int]) -> int:
        while spec is not None:
            _, _, left_spec, right_spec, left_leaves, right_leaves = spec
            if sums[right_leaves].sum() == 0:
                spec, leaves = left_spec, left_leaves
            elif sums[left_leaves].sum() == 0:
                spec, leaves = right_spec, right_leaves
            else:
                break
        value = sums[leaves].sum(axis=0)
        node = len(nodes)
        if spec is None:
            nodes.append([LEAF, np.nan, LEAF, LEAF, value])
            return node
        f, thr, left_spec, right_spec, left_leaves, right_leaves = spec
        nodes.append([f, thr, LEAF, LEAF, value])
        nodes[node][2] = emit(left_spec, left_leaves)
        nodes[node][3] = emit(right_spec, right_leaves)
        return node

    emit((f0, thresholds[0], left, right, [0, 1], [2, 3]), [0, 1, 2, 3])
    return nodes


def row_searchsorted(table: np.ndarray, rows: np.ndarray, values: np.ndarray,
                     side: str, lo: np.ndarray | None = None,
                     hi: np.ndarray | None = None) -> np.ndarray:
    """`np.searchsorted(table[rows[i]], values[i], side)` for every i, vectorised,
    clipped to `[lo[i], hi[i]]` when given (a search of that window alone).

    A binary search over ascending rows, exact for floats (no offsets added); with
    few distinct rows, numpy's own search row by row is faster.
    """
    distinct = np.unique(rows)
    if len(distinct) <= 32:
        out = np.empty(len(values), dtype=np.int64)
        for row in distinct:
            at = rows == row
            out[at] = np.searchsorted(table[row], values[at], side=side)
        return out if lo is None else np.clip(out, lo, hi)
    lo = np.zeros(len(values), dtype=np.int64) if lo is None else lo.astype(np.int64)
    hi = np.full(len(values), table.shape[1], dtype=np.int64) if hi is None else hi
    for _ in range(int((hi - lo).max(initial=0)).bit_length()):
        mid = (lo + hi) // 2
        probe = table[rows, np.minimum(mid, table.shape[1] - 1)]
        go_right = (probe <= values) if side == "right" else (probe < values)
        go_right &= mid < hi
        lo = np.where(go_right, mid + 1, lo)
        hi = np.where(go_right, hi, mid)
    return lo
