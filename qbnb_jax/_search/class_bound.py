"""The leaf-count bound of classification: root cuts ruled out before they are swept.

A side of the root with at most L leaves labels at most L classes, so it misclassifies
at least the side's weight outside its L heaviest classes, `W - top_L`, whichever
features split it (docs/design.md, "Bounds and why they are valid", leaf-count
bound). That weight only grows as samples join a set, so over the root cuts t of an
interval `[g, h]` the prefix set's bound is at least its value at g and the suffix
set's at least its value at h. The bound is computed once per search at a grid of
GRID + 1 threshold indices of every (problem, f0), from one `bincount` per block of
problems; a frontier is then narrowed to the grid points and the gaps between them
whose bound can still beat the incumbent (`narrow`), before their cuts are swept.

With many classes and a few features that carry them, it rules out most root
features: their sides mix more than L classes at every cut. With one dominant class
it rules out few, and a search may keep it only for the problems where a coarse grid
says it rules out enough (`leaf_count_bounds` with `incumbents`). With at most L
classes it is 0: not built.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import numpy as np

from qbnb_jax._problem.data import Problem
from qbnb_jax._search.frontier import Frontier, RootFrontier
from qbnb_jax._search.state import Incumbents

# Grid intervals per (problem, root feature): every threshold of a feature with fewer.
# The same grid whatever else a search holds, so a problem takes the same path alone
# as in a batch; finer grids narrow closer to the cuts that can win, at O(p GRID
# classes) host work per problem.
GRID = 256
# With incumbents, a problem keeps its bounds where they rule out at least MIN_SHARE
# of the root cuts at every COARSE-th grid point (a grid of GRID / COARSE intervals).
COARSE = 16
MIN_SHARE = 1 / 8
BLOCK_ENTRIES = 1 << 22  # (feature, sample) entries of one block of host arrays


Tuples = TypeVar("Tuples", Frontier, RootFrontier)


def grid_point(i, u, intervals: int):
    """Threshold index of grid point i of a feature with u thresholds, `ceil(i u / G)`
    (broadcasting)."""
    return -(-i * u // intervals)


class LeafCountBounds(NamedTuple):
    """The bound at a grid of root threshold indices of every problem's features.

    Grid point i of a feature with u thresholds is `ceil(i u / G)`, so the last grid
    point at or below cut t is `floor(t G / u)`. As elements, `2 G + 1` per (problem,
    f0): grid point i is element 2i (its own cut), the gap after it element 2i + 1
    (the cuts strictly between it and the next; empty where they are adjacent)."""

    intervals: int  # G
    # (Q,) int64: the row of each problem's first feature in the arrays below, -1 for
    # a problem without bounds; problem q's feature f is row `first_row[q] + f`
    first_row: np.ndarray
    u: np.ndarray  # (rows,) int64: the thresholds of each (problem, f0), at least 1
    prefix: np.ndarray  # (rows, G + 1) float64: bound of the prefix set at each point
    suffix: np.ndarray  # (rows, G + 1) float64: of the suffix set

    def point(self, row: np.ndarray, i: np.ndarray) -> np.ndarray:
        """The threshold index of grid point i of each row (broadcasting)."""
        return grid_point(i, self.u[row], self.intervals)

    def points(self, rows: np.ndarray) -> np.ndarray:
        """`(len(rows), G + 1)`: the grid's threshold indices."""
        return self.point(rows[:, None], np.arange(self.intervals + 1)[None, :])

    def elements(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(start, end, value)` `(len(rows), 2 G + 1)`: each element's first and last
        cut (last below first: an empty gap) and the bound of every tree with a root
        cut in it."""
        grid, bp, bs = self.points(rows), self.prefix[rows], self.suffix[rows]
        start = np.empty((len(rows), 2 * self.intervals + 1), dtype=np.int64)
        end = np.empty_like(start)
        value = np.empty(start.shape)
        start[:, 0::2], end[:, 0::2], value[:, 0::2] = grid, grid, bp + bs
        start[:, 1::2], end[:, 1::2] = grid[:, :-1] + 1, grid[:, 1:] - 1
        value[:, 1::2] = bp[:, :-1] + bs[:, 1:]
        return start, end, value

    def point_at_or_below(self, row: np.ndarray, cut: np.ndarray) -> np.ndarray:
        return cut * self.intervals // self.u[row]

    def point_at_or_above(self, row: np.ndarray, cut: np.ndarray) -> np.ndarray:
        return np.clip((cut - 1) * self.intervals // self.u[row] + 1, 0, self.intervals)


def applies(problems: list[Problem], leaves: int) -> bool:
    """Whether the bound can be positive: classification with more classes than leaves."""
    first = problems[0]
    return first.task == "classification" and first.n_channels > leaves


def leaf_count_bounds(problems: list[Problem], leaves: int,
                      incumbents: Incumbents | None = None) -> LeafCountBounds:
    """`LeafCountBounds` of the problems, whose sides have at most `leaves` leaves.

    With `incumbents`, only of the problems where they may rule out cuts: some grid
    point's bound can reach the incumbent (`may_rule_out`), and at least MIN_SHARE of
    the coarse grid's points do. Each problem decides from its own samples and
    incumbent alone."""
    p = problems[0].p
    which = np.arange(len(problems))
    if incumbents is not None:
        which = np.flatnonzero(may_rule_out(problems, leaves, incumbents))
    blocks, block, entries = [], [], 0
    for q in which:  # blocks of problems of at most BLOCK_ENTRIES (feature, sample)
        if block and entries + p * problems[q].n > BLOCK_ENTRIES:
            blocks.append(block)
            block, entries = [], 0
        block.append(q)
        entries += p * problems[q].n
    kept, prefix, suffix = [], [], []
    for part in blocks + [block] * bool(block):
        sums = _class_sums([problems[q] for q in part], GRID)  # (C, Q * p, GRID + 1)
        if incumbents is not None:  # the coarse grid's share ruled out, per problem
            coarse = sums[:, :, ::COARSE]
            points = (_outside_top(coarse, leaves)
                      + _outside_top(coarse[:, :, -1:] - coarse, leaves))
            share = (~incumbents.can_improve(points.reshape(len(part), -1),
                                             np.asarray(part)[:, None])).mean(axis=1)
            useful = share >= MIN_SHARE
            part = [q for q, ok in zip(part, useful) if ok]
            sums = sums.reshape(sums.shape[0], -1, p, GRID + 1)[:, useful].reshape(
                sums.shape[0], -1, GRID + 1)
        kept += part
        prefix.append(_outside_top(sums, leaves))
        suffix.append(_outside_top(sums[:, :, -1:] - sums, leaves))
    first_row = np.full(len(problems), -1, dtype=np.int64)
    first_row[kept] = np.arange(len(kept)) * p
    u = np.maximum(np.concatenate([problems[q].n_thresholds for q in kept] + [np.zeros(0)])
                   .astype(np.int64), 1)
    empty = np.zeros((0, GRID + 1))
    return LeafCountBounds(GRID, first_row, u, np.concatenate(prefix + [empty]),
                           np.concatenate(suffix + [empty]))


def _class_sums(problems: list[Problem], G: int) -> np.ndarray:
    """`(C, Q * p, G + 1)`: the class sums of the prefix set at each grid point of each
    (problem, feature).

    A sample at position k of f's order is left of cut t exactly when k is below
    `cut_pos[f, t]`: each position's grid interval comes from the positions of the
    grid points (zero-weight rows of `Problem.reweighted` included), then one
    `bincount` sums the classes of every (problem, feature, interval). The keys are
    formed in each feature's order, the classes read through `perm` from a copy of
    `y` in the narrowest integer type: a gather from a small array, where reading the
    intervals through `rank` gathered from a large one (at n = 10^6 the keys took
    half the time)."""
    Q, p, C = len(problems), problems[0].p, problems[0].n_channels
    u = np.maximum(np.stack([pr.n_thresholds for pr in problems]).astype(np.int64), 1)
    grid = grid_point(np.arange(G + 1)[None, None, :], u[:, :, None], G)  # (Q, p, G + 1)
    at = np.stack([np.take_along_axis(pr.cut_pos, grid[q], axis=1)
                   for q, pr in enumerate(problems)])
    # (problem, feature, position) -> (problem, feature) row * G + interval
    dtype = np.int32 if C * Q * p * G < 2**31 else np.int64
    interval_at = np.repeat(np.arange(Q * p * G, dtype=dtype),
                            np.diff(at, axis=2).reshape(-1))
    weights = [pr.stats[np.arange(pr.n), pr.y] for pr in problems]  # one class per row
    unit = all(bool(np.all(w == 1)) for w in weights)
    label = np.int8 if C <= 127 else np.int16 if C <= 2**15 - 1 else np.int32
    keys, start = [], 0
    for pr in problems:
        at_position = interval_at[start : start + p * pr.n].reshape(p, pr.n)
        keys.append((pr.y.astype(label)[pr.perm].astype(dtype) * dtype(Q * p * G)
                     + at_position).reshape(-1))
        start += p * pr.n
    keys = np.concatenate(keys)
    size = C * Q * p * G
    counts = (np.bincount(keys, minlength=size) if unit else np.bincount(
        keys, weights=np.concatenate([w.astype(np.float64)[pr.perm].reshape(-1)
                                      for w, pr in zip(weights, problems)]),
        minlength=size))
    sums = np.zeros((C, Q * p, G + 1))  # classes outermost: the top-L is element-wise
    np.cumsum(counts.reshape(C, Q * p, G), axis=2, out=sums[:, :, 1:])
    return sums


def _outside_top(sums: np.ndarray, leaves: int) -> np.ndarray:
    """The weight outside the `leaves` heaviest classes of each set, `sums` `(C, ...)`."""
    top = [np.zeros(sums.shape[1:]) for _ in range(leaves)]  # sums are never negative
    for x in sums:
        for j in range(leaves):  # insert x into the descending top
            top[j], x = np.maximum(top[j], x), np.minimum(top[j], x)
    return np.maximum(sums.sum(axis=0) - sum(top), 0.0)


def may_rule_out(problems: list[Problem], leaves: int, incumbents: Incumbents) -> np.ndarray:
    """`(Q,)` bool: whether the bound can rule out any root cut of each problem. Every
    cut's bound is at most the weight outside the `leaves` heaviest classes of all of
    the problem's samples (those classes' weight on either side is at most their
    side's top), so where that cannot reach the incumbent, nothing is ruled out."""
    totals = np.stack([pr.stats.sum(axis=0, dtype=np.float64) for pr in problems])
    return ~incumbents.can_improve(_outside_top(totals.T, leaves), np.arange(len(problems)))


def narrow(frontier: Tuples, bounds: LeafCountBounds, incumbents: Incumbents,
           slack_left: np.ndarray, shrink: bool = True) -> Tuples:
    """The tuples narrowed to the root cuts whose leaf-count bound can beat the
    incumbent, the others dropped.

    A tuple's cuts `[lo, hi]` are covered by grid elements: it keeps the span from the
    first element that can still beat the incumbent to the last. Its ends move in as
    `children` moves a child's (their slack bounds lose the slack passed over), and
    its monotone ends rise to the bound's: P_lo to the prefix bound at the grid point
    at or below the new lo, S_hi to the suffix bound at or above the new hi. With
    `shrink` False, a tuple with any such cut is kept as it is.

    `frontier`: a depth-2 `Frontier` (ends per child feature) or a deeper search's
    `RootFrontier` (one bound per end, of its one problem). Tuples of problems
    without bounds are kept as they are, in their place.
    """
    q = getattr(frontier, "problem", None)
    if q is None:
        q = np.zeros(frontier.size, dtype=np.int64)
    todo = np.flatnonzero(bounds.first_row[q] >= 0)
    if not todo.size:
        return frontier
    q, f0, lo, hi = q[todo], frontier.root[todo], frontier.lo[todo], frontier.hi[todo]
    row = bounds.first_row[q] + f0
    # the (problem, f0) rows of the tuples
    rows, one, at = np.unique(row, return_index=True, return_inverse=True)
    start, end, value = bounds.elements(rows)
    n_elements = value.shape[1]
    alive = (start <= end) & incumbents.can_improve(value, q[one][:, None])
    index = np.broadcast_to(np.arange(n_elements), alive.shape)
    # next and previous alive element of every element
    after = np.minimum.accumulate(np.where(alive, index, n_elements)[:, ::-1], axis=1)[:, ::-1]
    before = np.maximum.accumulate(np.where(alive, index, -1), axis=1)
    first = after[at, _element(bounds, row, lo)]
    last = before[at, _element(bounds, row, hi)]
    kept = first <= last
    if not shrink:
        keep = np.ones(frontier.size, dtype=bool)
        keep[todo] = kept
        return frontier.take(keep)
    first, last = np.minimum(first, n_elements - 1), np.maximum(last, 0)
    new_lo = np.maximum(lo, start[at, first])
    new_hi = np.minimum(hi, end[at, last])
    ends = frontier.ends.copy()
    part = ends[todo]

    def per_end(x):  # (T,) against an end's (T,) or (T, p) bounds
        return x.reshape(x.shape + (1,) * (ends.ndim - 2))
    part[:, 1] -= per_end(slack_left[q, f0, new_lo - 1] - slack_left[q, f0, lo - 1])
    part[:, 2] -= per_end(slack_left[q, f0, hi + 1] - slack_left[q, f0, new_hi + 1])
    below = bounds.point_at_or_below(row, new_lo)
    above = bounds.point_at_or_above(row, new_hi)
    part[:, 0] = np.maximum(part[:, 0], per_end(bounds.prefix[row, below]))
    part[:, 3] = np.maximum(part[:, 3], per_end(bounds.suffix[row, above]))
    ends[todo] = part
    all_lo, all_hi = frontier.lo.copy(), frontier.hi.copy()
    all_lo[todo], all_hi[todo] = new_lo, new_hi
    keep = np.ones(frontier.size, dtype=bool)
    keep[todo] = kept
    return frontier._replace(lo=all_lo, hi=all_hi, ends=ends).take(keep)


def _element(bounds: LeafCountBounds, row: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The element holding root cut `cut` of each row: its grid point where it is one,
    else the gap after the last grid point below it."""
    i = bounds.point_at_or_below(row, cut)
    return 2 * i + (bounds.point(row, i) != cut)
