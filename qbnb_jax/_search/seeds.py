"""Seeding a side's depth-2 search with the bounds a solved subset of it proved.

A depth-3 search solves the sides of many root cuts of a feature f0, and they nest:
the side left of cut k holds every side left of a smaller cut, and the side right of
it every side right of a larger one. Take a depth-2 tree and a subset of a side: the
tree's loss on the side is at least its loss on the subset (each leaf's loss is a sum
over its samples of a loss that removing samples never raises: misclassified weight,
squared error about the leaf's best value), and so is each child's best stump loss.
A root cut (f1, v) splits the subset as one of the subset's own root thresholds on
f1 does (the subset's "induced" threshold), so every bound that the subset's finished
search proved for the trees of a threshold of its holds, on the side, for every root
cut that induces it.

So a depth-2 search records, for each root threshold, the bound it had when it left
the search (`step_exits`): as a cut swept (its exact value), in a piece pruned (the
piece's bound), or passed over by the slack bound (the incumbent); and the child
features' stump losses at the cuts it swept. A later search of a side that holds
that subset reads the bounds at its own thresholds (`seed_batch`) and starts on the
runs of thresholds they do not rule out, instead of on every threshold, with ends
from the subset's swept cuts (`_floors`). docs/design.md, "Seeded sides".

Bounds proved over fewer child features than all (a tuple's features pruned before)
are capped at the incumbent of that step, which every dropped feature was shown not
to beat; bounds are only ever lowered, so every recorded bound stays valid.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qbnb_jax._problem.host import row_searchsorted
from qbnb_jax._search.frontier import CutLosses, Frontier, Pieces

# Kept thresholds closer than this join one tuple, and a root feature starts with at
# most SEED_TUPLES tuples (`seed_batch`): a tuple costs a kernel row per child feature
# each iteration, and the sweeps of a joined tuple prune a narrow gap soon.
SEED_GAP = 16
SEED_TUPLES = 4


class ThresholdExits(NamedTuple):
    """Root thresholds with a proved bound: row r holds the root cuts on `feature[r]`
    whose left part has `count_lo[r]` to `count_hi[r]` of problem `problem[r]`'s
    samples (prefix sizes in that feature's order, which name a threshold however it
    is numbered); every tree of theirs has loss at least `bound[r]`."""

    problem: np.ndarray  # (R,) int64
    feature: np.ndarray  # (R,) int64
    count_lo: np.ndarray  # (R,) int64
    count_hi: np.ndarray  # (R,) int64
    bound: np.ndarray  # (R,) float64

    @staticmethod
    def concatenate(parts: list[ThresholdExits]) -> ThresholdExits:
        return ThresholdExits(*(np.concatenate(field) for field in zip(*parts)))

    @staticmethod
    def empty() -> ThresholdExits:
        none = np.zeros(0, dtype=np.int64)
        return ThresholdExits(none, none, none, none, np.zeros(0))


class SweptCuts(NamedTuple):
    """Root cuts a depth-2 search swept: row r is the cut on `feature[r]` with
    `count[r]` samples left, and the best-stump losses of its two parts on each child
    feature (inf where the search no longer swept that feature)."""

    problem: np.ndarray  # (R,) int64
    feature: np.ndarray  # (R,) int64
    count: np.ndarray  # (R,) int64
    prefix: np.ndarray  # (R, p) float64
    suffix: np.ndarray  # (R, p) float64

    @staticmethod
    def concatenate(parts: list[SweptCuts]) -> SweptCuts:
        return SweptCuts(*(np.concatenate(field) for field in zip(*parts)))


class SearchExits(NamedTuple):
    """What a depth-2 search proved of its root thresholds (`solve_depth2`), and the
    bounds its problems inherited from subsets (`seed_batch`)."""

    thresholds: ThresholdExits
    cuts: SweptCuts
    inherited: ThresholdExits

    @staticmethod
    def concatenate(parts: list[SearchExits]) -> SearchExits:
        return SearchExits(*(type(field[0]).concatenate(list(field))
                             for field in zip(*parts)))

    def of_problems(self, sizes: np.ndarray) -> list[SideBounds]:
        """Each problem's `SideBounds` (`sizes`: each problem's n), all computed at once
        on keys that hold the problems apart (problem q's from `offset[q]`)."""
        p = self.cuts.prefix.shape[1]
        stride = sizes + 1
        offset = np.r_[0, np.cumsum(p * stride)]

        def keys(exits, count):
            return offset[exits.problem] + exits.feature * stride[exits.problem] + count

        # the search's own exits and the inherited bounds overlap where it searched:
        # both hold, and the seeds read their union (`seed_batch`)
        exits = ThresholdExits.concatenate([self.thresholds, self.inherited])
        start = keys(exits, exits.count_lo)
        order = np.argsort(start, kind="stable")
        start, stop = start[order], keys(exits, exits.count_hi)[order]
        bound = exits.bound[order]
        cuts = self.cuts
        cut = keys(cuts, cuts.count)
        order = np.argsort(cut, kind="stable")
        cut, group = cut[order], (cuts.problem * p + cuts.feature)[order]
        prefix = _filled(group, cuts.prefix[order])
        suffix = _filled(group[::-1], cuts.suffix[order][::-1])[::-1]
        edges, cut_edges = np.searchsorted(start, offset), np.searchsorted(cut, offset)
        out = []
        for q, (a, b, c, d) in enumerate(zip(edges[:-1], edges[1:], cut_edges[:-1],
                                             cut_edges[1:])):
            out.append(SideBounds(start[a:b] - offset[q], stop[a:b] - offset[q], bound[a:b],
                                  int(stride[q]), cut[c:d] - offset[q], prefix[c:d],
                                  suffix[c:d]))
        return out


def _filled(group: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """Per row, each column's last finite entry at or before it within its group's
    rows (0 if none). A group's rows are one root feature's cuts in order: a prefix
    part only grows with the cut, so an earlier cut's loss bounds every later one's
    (and a suffix part's, the rows reversed)."""
    R, p = losses.shape
    if R == 0:
        return np.zeros((0, p))
    index = np.arange(R)
    first = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
    group_start = first[np.searchsorted(first, index, side="right") - 1]
    last = np.maximum.accumulate(np.where(np.isfinite(losses), index[:, None], -1), axis=0)
    ok = last >= group_start[:, None]
    return np.where(ok, losses[np.maximum(last, 0), np.arange(p)], 0.0)


class SideBounds(NamedTuple):
    """A solved side's exits and inherited bounds, intervals of keys `feature * stride
    + count` by start (they may overlap: each holds), and its swept cuts' part
    losses."""

    start: np.ndarray  # (R,) int64
    stop: np.ndarray  # (R,) int64
    bound: np.ndarray  # (R,) float64
    stride: int  # the side's n + 1
    cut: np.ndarray  # (C,) int64: the swept cuts' keys, ascending
    # (C, p) float64: per child feature, a lower bound of the prefix part at this cut
    # and every later one of its root feature, and of the suffix part at this cut and
    # every earlier one
    prefix_floor: np.ndarray
    suffix_floor: np.ndarray

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.start, self.stop, self.bound, self.cut,
                                      self.prefix_floor, self.suffix_floor))


class SeedTuples(NamedTuple):
    """Initial tuples of seeded problems: problem q starts on these (root f1, lo..hi)
    alone, with ends from the subset's swept cuts (their bounds start at 0, as a first
    tuple's do)."""

    problem: np.ndarray  # (S,) int64
    root: np.ndarray  # (S,) int64
    lo: np.ndarray  # (S,) int64
    hi: np.ndarray  # (S,) int64
    # (S, 4, p): (P_lo, S_lo, P_hi, S_hi) as a tuple's ends carry them (`Frontier`)
    ends: np.ndarray
    seeded: np.ndarray  # the problems seeded (one without tuples has no tree to find)

    @staticmethod
    def concatenate(parts: list[SeedTuples]) -> SeedTuples:
        return SeedTuples(*(np.concatenate(field) for field in zip(*parts)))


def start_exits(cut_pos: np.ndarray, n_thresholds: np.ndarray, stump_all: np.ndarray
                ) -> SearchExits:
    """The trivial root cuts 0 and u(f1) of every problem: a part empty, the other all
    samples, whose best loss per child feature is the best stump of all (`stump_all`
    `(Q, p)`)."""
    Q, p = n_thresholds.shape
    problem = np.repeat(np.arange(Q), p)
    feature = np.tile(np.arange(p), Q)
    last = cut_pos[problem, feature, n_thresholds.reshape(-1)]
    count = np.concatenate([np.zeros(Q * p, dtype=np.int64), last])
    value = np.tile(np.repeat(stump_all.min(axis=1), p), 2)
    everything = stump_all[problem]
    nothing = np.zeros_like(everything)
    problem, feature = np.tile(problem, 2), np.tile(feature, 2)
    return SearchExits(
        ThresholdExits(problem, feature, count, count, value),
        SweptCuts(problem, feature, count, np.concatenate([nothing, everything]),
                  np.concatenate([everything, nothing])),
        ThresholdExits.empty())


def step_exits(block: Frontier, losses: CutLosses, pieces: Pieces, swept: np.ndarray,
               cut_pos: np.ndarray, incumbent: np.ndarray) -> SearchExits:
    """The thresholds that leave the search in one iteration of `block`: its swept cuts
    `swept` `(T, s + 1)` (their exact values), the pieces that die (their bounds), and
    the ends of live pieces that the slack bound cut off (the incumbent). `incumbent`
    `(T,)`: the tuples' problems' incumbents after the iteration's pruning (a bound
    capped at it is valid: every pruned tree was shown not to beat a larger one)."""
    whole = block.left_features.all(axis=1) & block.right_features.all(axis=1)
    U = incumbent[:, None]
    value = losses.prefix[:, 1:-1].min(axis=-1) + losses.suffix[:, 1:-1].min(axis=-1)
    cut_bound = np.where(whole[:, None], value, np.minimum(value, U))
    dead = ~pieces.alive & (pieces.hi - pieces.lo >= 2)
    dead_bound = np.where(whole[:, None], np.maximum(pieces.lower_bound, U), U)
    cut_off_low = pieces.alive & (pieces.child_lo > pieces.lo + 1)
    cut_off_high = pieces.alive & (pieces.child_hi < pieces.hi - 1)
    at_incumbent = np.broadcast_to(U, pieces.lo.shape)
    parts = [(np.ones(swept.shape, dtype=bool), swept, swept, cut_bound),
             (dead, pieces.lo + 1, pieces.hi - 1, dead_bound),
             (cut_off_low, pieces.lo + 1, pieces.child_lo - 1, at_incumbent),
             (cut_off_high, pieces.child_hi + 1, pieces.hi - 1, at_incumbent)]
    out = []
    for mask, lo, hi, bound in parts:
        ti, tj = np.nonzero(mask)
        q, f = block.problem[ti], block.root[ti]
        out.append(ThresholdExits(q, f, cut_pos[q, f, lo[ti, tj]], cut_pos[q, f, hi[ti, tj]],
                                  bound[ti, tj]))
    T, n_swept = swept.shape
    q, f = np.repeat(block.problem, n_swept), np.repeat(block.root, n_swept)
    cuts = SweptCuts(q, f, cut_pos[q, f, swept.reshape(-1)],
                     losses.prefix[:, 1:-1].reshape(T * n_swept, -1),
                     losses.suffix[:, 1:-1].reshape(T * n_swept, -1))
    return SearchExits(ThresholdExits.concatenate(out), cuts, ThresholdExits.empty())


def seed_batch(problems: np.ndarray, bounds: list[SideBounds], in_subset: list[np.ndarray],
               perms: list[np.ndarray], cut_pos: np.ndarray, n_thresholds: np.ndarray,
               cutoffs: np.ndarray) -> tuple[SeedTuples, ThresholdExits]:
    """Initial tuples of the batch's problems `problems[i]` from the `bounds` of a subset
    of each, and the bounds they inherit from them (a search records only the
    thresholds it searches).

    On each root feature f1 of a problem, its thresholds 1..u(f1)-1 whose subset bound
    (at the threshold they induce on the subset) is below its cutoff are kept, in
    runs; runs closer than SEED_GAP thresholds are joined, and at most SEED_TUPLES are
    left per feature (the narrowest gaps joined first). A feature with none starts with
    no tuple: no tree there can beat the cutoff. The tuples' bounds start at 0, as a
    first tuple's do; their ends come from the subset's swept cuts.

    Everything is mapped through the subset samples' positions in each of the
    problem's orders: the cuts that induce the subset's counts c1..c2 are those with
    `pos[c1 - 1] + 1` to `pos[c2]` samples left. `in_subset[i]` `(n_i,)`: which of
    problem i's samples its subset holds; `perms[i]` `(p, n_i)`: its orders;
    `cut_pos` `(Q, p, W)` and `n_thresholds` `(Q, p)`: the batch's threshold tables.
    """
    S, p = len(problems), cut_pos.shape[1]
    n = np.array([perm.shape[1] for perm in perms])
    m = np.array([int(np.count_nonzero(inside)) for inside in in_subset])
    M = int(n.max())
    held = np.zeros((S, p, M), dtype=bool)
    for i, (inside, perm) in enumerate(zip(in_subset, perms)):
        held[i, :, : n[i]] = inside[perm]
    # row r = i * p + f1 holds m[i] entries r * M + (position in f1's order), ascending
    flat = np.flatnonzero(held)
    row_start = np.r_[0, np.cumsum(np.repeat(m, p))][:-1]

    def position(row: np.ndarray, c: np.ndarray) -> np.ndarray:
        return flat[row_start[row] + c] - row * M

    def induced(row: np.ndarray, count: np.ndarray) -> np.ndarray:
        return np.searchsorted(flat, row * M + count, side="left") - row_start[row]

    side = np.repeat(np.arange(S), [len(b.start) for b in bounds])
    stride = np.array([b.stride for b in bounds])
    start = np.concatenate([b.start for b in bounds])
    feature, c1 = np.divmod(start, stride[side])
    c2 = np.concatenate([b.stop for b in bounds]) - feature * stride[side]
    bound = np.concatenate([b.bound for b in bounds])
    row = side * p + feature
    count_lo = np.where(c1 > 0, position(row, np.maximum(c1 - 1, 0)) + 1, 0)
    count_hi = np.where(c2 < m[side], position(row, np.minimum(c2, m[side] - 1)), n[side])
    shown = count_lo <= count_hi
    inherited = ThresholdExits(problems[side][shown], feature[shown], count_lo[shown],
                               count_hi[shown], bound[shown])
    # the thresholds ruled out: the dead intervals' images (by start within each
    # (side, feature) row), those that touch or overlap joined, as ranges of threshold
    # indices; with sentinels at the trivial cuts 0 and u(f1)
    dead = np.flatnonzero(shown & (bound >= cutoffs[side]))
    span = int(n.max()) + 2
    reach = (np.maximum.accumulate(row[dead] * span + count_hi[dead]) - row[dead] * span
             if len(dead) else dead)  # the farthest count ruled out so far in the row
    first = np.ones(len(dead), dtype=bool)
    first[1:] = (row[dead][1:] != row[dead][:-1]) | (count_lo[dead][1:] > reach[:-1] + 1)
    block_lo = dead[first]
    block_reach = reach[np.r_[np.flatnonzero(first)[1:] - 1, len(dead) - 1]] if len(dead) else dead
    Q, _, W = cut_pos.shape
    table = cut_pos.reshape(Q * p, W)
    at_row = problems[side[block_lo]] * p + feature[block_lo]
    every = np.arange(S * p)
    last = n_thresholds[problems[every // p], every % p]
    group = np.concatenate([row[block_lo], every, every])
    t_lo = np.concatenate([row_searchsorted(table, at_row, count_lo[block_lo], "left"),
                           np.zeros(S * p, dtype=np.int64), last])
    t_hi = np.concatenate([row_searchsorted(table, at_row, block_reach, "right") - 1,
                           np.zeros(S * p, dtype=np.int64), last])
    order = np.lexsort((t_lo, group))
    group, t_lo, t_hi = group[order], t_lo[order], t_hi[order]
    reach = np.maximum.accumulate(group * (W + 2) + t_hi) - group * (W + 2)
    run_lo, run_hi = reach[:-1] + 1, t_lo[1:] - 1
    open_run = (group[1:] == group[:-1]) & (run_lo <= run_hi)
    group, lo, hi = group[1:][open_run], run_lo[open_run], run_hi[open_run]
    # join runs closer than SEED_GAP, then keep at most SEED_TUPLES - 1 gaps a feature
    gap = lo[1:] - hi[:-1] - 1
    same = group[1:] == group[:-1]
    split = ~same | (gap > SEED_GAP)
    inner = np.flatnonzero(split & same)
    ranked = inner[np.lexsort((-gap[inner], group[inner]))]
    rank = np.arange(len(ranked)) - np.searchsorted(group[ranked], group[ranked])
    split[ranked[rank >= SEED_TUPLES - 1]] = False
    begin = np.r_[0, np.flatnonzero(split) + 1][: len(group)]
    finish = np.r_[np.flatnonzero(split), len(group) - 1][: len(group)]
    group, lo, hi = group[begin], lo[begin], hi[finish]
    owner, root = np.divmod(group, p)
    q = problems[owner]
    # ends: the subset's parts at the first and last cut inside (the monotone P_lo,
    # S_hi) and just outside (the slack ends S_lo at lo - 1, P_hi at hi + 1)
    at = np.concatenate([lo, hi + 1, hi, lo - 1])
    count = induced(np.tile(group, 4), cut_pos[np.tile(q, 4), np.tile(root, 4), at])
    prefix, suffix = _floors(bounds, np.tile(owner, 4), np.tile(root, 4), count)
    T = len(group)
    ends = np.stack([prefix[:T], suffix[3 * T :], prefix[T : 2 * T], suffix[2 * T : 3 * T]],
                    axis=1)
    return SeedTuples(q, root, lo, hi, ends, problems), inherited


def _floors(bounds: list[SideBounds], owner: np.ndarray, feature: np.ndarray,
            count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds `(K, p)` of the prefix part at every root cut on `feature` of the
    subset `bounds[owner]` with at least `count` samples left (from its last swept
    cut at or before), and of the suffix part at every one with at most `count` (its
    first at or after); 0 where no swept cut gives one."""
    p = bounds[0].prefix_floor.shape[1]
    stride = np.array([b.stride for b in bounds])
    big = int(stride.max()) * p + 1  # the subsets' keys apart, ascending
    cut = np.concatenate([i * big + b.cut for i, b in enumerate(bounds)])
    prefix_floor = np.concatenate([b.prefix_floor for b in bounds])
    suffix_floor = np.concatenate([b.suffix_floor for b in bounds])
    prefix, suffix = np.zeros((len(owner), p)), np.zeros((len(owner), p))
    if len(cut) == 0:
        return prefix, suffix
    base = owner * big + feature * stride[owner]
    key = base + count
    i = np.searchsorted(cut, key, side="right") - 1
    ok = (i >= 0) & (cut[np.maximum(i, 0)] >= base)
    prefix[ok] = prefix_floor[i[ok]]
    j = np.searchsorted(cut, key, side="left")
    jj = np.minimum(j, len(cut) - 1)
    ok = (j < len(cut)) & (cut[jj] < base + stride[owner])
    suffix[ok] = suffix_floor[jj[ok]]
    return prefix, suffix
