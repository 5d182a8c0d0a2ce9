"""Depth 3 by the paper's appendix algorithm (docs/design.md, "Depth 3 and deeper").

A tuple is `(f0, [a, b], Phi_L, Phi_R)`: the root splits on f0 at a threshold in the
closed interval [a, b], its left subtree is a depth-2 tree of some entry of `Phi_L`
and its right subtree one of `Phi_R`. An entry is a depth-2 tuple `(f1, [c, d], F_a,
F_b)` in the parent's threshold numbering: a split on f1 in [c, d], then stumps on a
feature of `F_a` (left) and of `F_b` (right). Entries are stored flat, each with its
tuple and side (the appendix's grouping by `(f1, [c, d])` with feature masks).

Per iteration and tuple, with root cuts t_0..t_s in [a, b] and each entry's own cuts:

1. sweep every entry on the samples left of each root cut (Phi_L) and right of it
   (Phi_R): the best stump of each child feature on both sides of each entry cut.
   These sets are `Problem.compact` subsets, so an entry's threshold indices stay
   the parent's and a sweep costs the subset's own size;
2. Step 1: V(set, entry) (the best tree at the entry's cuts) is achieved, so the
   best pair of sides at a root cut is a tree (incumbent update);
3. Step 2 (Proposition pruning-d=3): the root piece [t_{j-1}, t_j] keeps an entry's
   sub-piece when its W0 on the smaller set (prefix of t_{j-1}, suffix of t_j) is at
   most the best V on the larger set (no better left subtree can exist there) and
   W0 plus the other side's least W0 can still beat the incumbent.

An interval no wider than s is cut at every threshold into singletons, so intervals
always shrink; a root singleton whose entries are all singletons was evaluated
exactly in step 1 and is dropped. The alternative route, and the solver's default,
is the recursion of `_search/deep.py`; `solve(..., route="appendix")` selects this one, and
docs/benchmarks.md ("Depth 3, two routes") compares the two.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from qbnb_jax._device.runner import KernelRunner
from qbnb_jax._problem.data import Problem
from qbnb_jax._problem.host import best_stump, position_threshold
from qbnb_jax._search.deep import size_batches
from qbnb_jax._search.search import Search, depth2_splits
from qbnb_jax._search.state import RTOL, SearchOptions

LEFT, RIGHT = 0, 1
ENTRY_BLOCK_ELEMENTS = 1 << 21  # entries x pieces x sub-pieces x p pruned at once


class Cuts(NamedTuple):
    """Cuts of N closed intervals and the pieces between them (`cut_points`)."""

    cuts: np.ndarray  # (N, s + 1) threshold indices, padded by repeating the last
    count: np.ndarray  # (N,) cuts per interval
    piece_lo: np.ndarray  # (N, s + 1) index into `cuts` of each piece's first cut
    piece_hi: np.ndarray  # (N, s + 1) of its last cut
    piece_valid: np.ndarray  # (N, s + 1) bool: whether the piece exists


class RootTuples(NamedTuple):
    """The root intervals of the frontier, R of them."""

    root: np.ndarray  # (R,) int64: f0
    lo: np.ndarray  # (R,) int64: the closed interval [lo, hi] of root thresholds
    hi: np.ndarray  # (R,) int64
    lower_bound: np.ndarray  # (R,) float64: of every tree in the tuple


class Entries(NamedTuple):
    """Depth-2 entries of the tuples' `Phi_L` and `Phi_R`, E of them, grouped by tuple."""

    tuple: np.ndarray  # (E,) int64: index of the entry's root tuple
    side: np.ndarray  # (E,) LEFT or RIGHT
    feature: np.ndarray  # (E,) int64: f1, the entry's split feature
    lo: np.ndarray  # (E,) int64: the closed interval [lo, hi] of f1's thresholds
    hi: np.ndarray  # (E,) int64
    left_features: np.ndarray  # (E, p) bool: F_a
    right_features: np.ndarray  # (E, p) bool: F_b


class PairSweeps(NamedTuple):
    """Each entry swept on its side of each root cut of its tuple: X (entry, root cut)
    pairs, each a sample set."""

    entry: np.ndarray  # (X,) int64: the pair's entry
    root_cut: np.ndarray  # (X,) int64: index of its root cut among the tuple's cuts
    pair_of: np.ndarray  # (E, s + 1) int64: pair of (entry, root cut); -1: none
    # (X, s + 1, p): best stump on f of the pair's set left of its entry's k-th cut
    # (inf where f is not in F_a), `suffix` right of it (inf where f is not in F_b)
    prefix: np.ndarray
    suffix: np.ndarray


class SideValues(NamedTuple):
    """Step 1's values per pair and per (tuple, root cut, side)."""

    tree: np.ndarray  # (X,) V(set, entry): the best tree at the entry's cuts
    tree_cut: np.ndarray  # (X,) int64: the entry cut achieving it
    group: np.ndarray  # (X,) int64: the pair's (tuple, root cut, side), flattened
    best: np.ndarray  # (R, s + 1, 2) least V over the entries of each side
    w0: np.ndarray  # (R, s + 1, 2) least W0 of a whole entry of each side


class KeptPieces(NamedTuple):
    """Entry sub-pieces that survive per root piece (`prune_entries`), Y of them."""

    entry: np.ndarray  # (Y,) int64
    root_piece: np.ndarray  # (Y,) int64
    entry_piece: np.ndarray  # (Y,) int64
    left_features: np.ndarray  # (Y, p) bool: F_a of the sub-piece
    right_features: np.ndarray  # (Y, p) bool: F_b
    w0: np.ndarray  # (Y,) the sub-piece's W0 over its kept features


def cut_points(a: np.ndarray, b: np.ndarray, s: int) -> Cuts:
    """Cuts of closed intervals [a, b] and the pieces between them.

    An interval wider than s gets s + 1 almost equi-spaced cuts and s closed pieces
    between them (each narrower than the interval); a narrower one is cut at every
    threshold into singleton pieces.
    """
    width = b - a
    j = np.arange(s + 1)
    small = (width <= s)[:, None]
    cuts = np.where(small, np.minimum(a[:, None] + j, b[:, None]),
                    a[:, None] + (j[None, :] * width[:, None]) // s)
    count = np.where(small[:, 0], width + 1, s + 1)
    piece_lo = np.broadcast_to(j, cuts.shape)
    piece_hi = np.where(small, j, np.minimum(j + 1, s))
    piece_valid = np.where(small, j < count[:, None], j < s)
    return Cuts(cuts, count, piece_lo, piece_hi, piece_valid)


class AppendixSearch(Search):
    """Exact depth-3 search by the appendix algorithm (single problem)."""

    def __init__(self, problem: Problem, options: SearchOptions):
        super().__init__([problem], options)
        self.subproblems = 0  # compacted subsets swept

    # -- tolerances ---------------------------------------------------------------------
    def at_most(self, lower: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """`lower <= cap`, within the pruning tolerance for floats (ties kept)."""
        if self.exact:
            return lower <= cap
        finite = np.where(np.isfinite(cap), cap, 0.0)
        return lower <= cap + RTOL * np.abs(finite) + self.incumbents.atol[0]

    # -- driver ---------------------------------------------------------------------------
    def solve_appendix(self) -> None:
        problem = self.problem
        if self.runner is None:
            self.runner = KernelRunner(problem)
        self.offer_greedy()
        p = problem.p
        u = problem.n_thresholds.astype(np.int64)
        # Every root interval starts whole, with the trivial cuts 0 and u(f0) (one side
        # empty: a depth-2 tree of all samples is a depth-3 tree too).
        tuples = RootTuples(root=np.arange(p), lo=np.zeros(p, dtype=np.int64), hi=u.copy(),
                            lower_bound=np.zeros(p))
        feature = np.tile(np.arange(p), 2 * p)
        entries = Entries(
            tuple=np.repeat(np.arange(p), 2 * p),
            side=np.tile(np.repeat([LEFT, RIGHT], p), p),
            feature=feature,
            lo=np.zeros(len(feature), dtype=np.int64),
            hi=u[feature],
            left_features=np.ones((len(feature), p), dtype=bool),
            right_features=np.ones((len(feature), p), dtype=bool),
        )
        while len(tuples.root):
            if not self.begin_iteration(tuples.lower_bound):
                return
            tuples, entries = self.step(tuples, entries)
            self.report(tuples.lower_bound)
        self.incumbents.prove_optimal(0)

    def offer_greedy(self) -> None:
        """The greedy depth-3 tree (best stump at every node) as the first incumbent."""
        problem = self.problem

        def greedy(mask: np.ndarray, depth: int):
            if depth == 0 or not mask.any():
                return 0.0, None
            loss, f, k = best_stump(problem, mask)
            if depth == 1:
                return loss, (f, position_threshold(problem, f, k), None, None)
            left = mask & (problem.rank[f] < k)
            a, left_spec = greedy(left, depth - 1)
            b, right_spec = greedy(mask & ~left, depth - 1)
            return a + b, (f, position_threshold(problem, f, k), left_spec, right_spec)

        value, spec = greedy(np.ones(problem.n, dtype=bool), 3)
        self.offer(value, spec)

    # -- one iteration --------------------------------------------------------------------
    def step(self, tuples: RootTuples, entries: Entries) -> tuple[RootTuples, Entries]:
        s = self.options.s
        root_cuts = cut_points(tuples.lo, tuples.hi, s)
        entry_cuts = cut_points(entries.lo, entries.hi, s)
        sweeps = self.sweep_pairs(tuples, entries, root_cuts, entry_cuts)
        values = self.side_values(len(tuples.root), entries, entry_cuts, sweeps)
        self.upper_bounds(tuples, entries, root_cuts, entry_cuts, sweeps, values)
        # Step 2: entry sub-pieces per root piece, in blocks of entries (the arrays are
        # (entries, root piece, sub-piece, p)); only the survivors are kept.
        E, K = len(entries.tuple), s + 1
        block = max(1, ENTRY_BLOCK_ELEMENTS // (K * K * entries.left_features.shape[1]))
        kept = KeptPieces(*(np.concatenate(x) for x in zip(*(
            self.prune_entries(np.arange(e0, min(E, e0 + block)), entries, root_cuts,
                               entry_cuts, sweeps, values)
            for e0 in range(0, max(E, 1), block)))))
        return self.children(tuples, entries, root_cuts, entry_cuts, kept)

    def sweep_pairs(self, tuples: RootTuples, entries: Entries, root_cuts: Cuts,
                    entry_cuts: Cuts) -> PairSweeps:
        """Best stumps of each pair's child features on both sides of its entry cuts.

        Each entry is swept on its side of every root cut of its tuple: one (entry,
        root cut) pair per set, one kernel row per child feature of the pair.
        """
        problem = self.problem
        n, p = problem.n, problem.p
        E, K = len(entries.tuple), entry_cuts.cuts.shape[1]
        pair_of = np.full((E, K), -1, dtype=np.int64)
        pe, pc = np.nonzero(np.arange(K)[None, :] < root_cuts.count[entries.tuple][:, None])
        pair_of[pe, pc] = np.arange(len(pe))
        r = entries.tuple[pe]
        pos = problem.cut_pos[tuples.root[r], root_cuts.cuts[r, pc]]  # samples left of the cut
        key = (tuples.root[r] * (n + 1) + pos) * 2 + entries.side[pe]
        keys, subset_of_pair = np.unique(key, return_inverse=True)
        sweeps = PairSweeps(pe, pc, pair_of, np.full((len(pe), K, p), np.inf),
                            np.full((len(pe), K, p), np.inf))
        subsets = _Subsets(root=keys // 2 // (n + 1), position=keys // 2 % (n + 1),
                           side=keys % 2, of_pair=subset_of_pair)
        size = np.where(subsets.side == LEFT, subsets.position, n - subsets.position)
        empty = size[subset_of_pair] == 0
        sweeps.prefix[empty] = np.where(entries.left_features[pe[empty]][:, None, :], 0.0, np.inf)
        sweeps.suffix[empty] = np.where(entries.right_features[pe[empty]][:, None, :], 0.0,
                                        np.inf)
        # Subsets of similar size share a batch (sweeps cost the batch's padded size).
        for batch in size_batches(size, p):
            self.sweep_batch(batch, subsets, entries, entry_cuts, sweeps)
        return sweeps

    def sweep_batch(self, batch: list[int], subsets: _Subsets, entries: Entries,
                    entry_cuts: Cuts, sweeps: PairSweeps) -> None:
        """Sweep the pairs of the subsets `batch`, filling `sweeps` in place."""
        problem = self.problem
        subs, shifts = [], []
        for u in batch:
            inside = problem.rank[subsets.root[u]] < subsets.position[u]
            mask = inside if subsets.side[u] == LEFT else ~inside
            subs.append(problem.compact(mask))
            # Parent position m in f's order -> samples of the subset before it.
            shifts.append(np.concatenate(
                [np.zeros((problem.p, 1), np.int64), np.cumsum(mask[problem.perm], axis=1)],
                axis=1))
        self.subproblems += len(batch)
        local = np.full(len(subsets.root), -1, dtype=np.int64)
        local[batch] = np.arange(len(batch))
        pairs = np.nonzero(local[subsets.of_pair] >= 0)[0]
        pe = sweeps.entry
        Fa, Fb = entries.left_features, entries.right_features
        rows_pair, rows_f = np.nonzero((Fa | Fb)[pe[pairs]])
        x = pairs[rows_pair]
        sub = local[subsets.of_pair[x]]
        f1 = entries.feature[pe[x]]
        parent_pos = problem.cut_pos[f1[:, None], entry_cuts.cuts[pe[x]]]  # (rows, K)
        shift = np.stack(shifts)  # (batch, p, n + 1)
        cuts = shift[sub[:, None], f1[:, None], parent_pos]
        runner = self.runner.for_compact(subs)
        pre, suf = runner.full(f1, rows_f, cuts, problem=sub)
        in_a, in_b = Fa[pe[x], rows_f], Fb[pe[x], rows_f]
        sweeps.prefix[x[in_a], :, rows_f[in_a]] = pre[in_a]
        sweeps.suffix[x[in_b], :, rows_f[in_b]] = suf[in_b]

    def side_values(self, n_tuples: int, entries: Entries, entry_cuts: Cuts,
                    sweeps: PairSweeps) -> SideValues:
        """Step 1: V(set, entry), the best tree at the entry's cuts, is achieved."""
        pe, K = sweeps.entry, entry_cuts.cuts.shape[1]
        minA, minB = sweeps.prefix.min(axis=2), sweeps.suffix.min(axis=2)  # (pairs, K)
        count = entry_cuts.count[pe]
        tree = np.where(np.arange(K)[None, :] < count[:, None], minA + minB, np.inf)
        v_entry, v_cut = tree.min(axis=1), tree.argmin(axis=1)
        w_entry = minA[:, 0] + minB[np.arange(len(pe)), count - 1]  # W0, whole entry
        group = (entries.tuple[pe] * K + sweeps.root_cut) * 2 + entries.side[pe]
        v_side = np.full(n_tuples * K * 2, np.inf)
        w_side = np.full(n_tuples * K * 2, np.inf)
        np.minimum.at(v_side, group, v_entry)
        np.minimum.at(w_side, group, w_entry)
        return SideValues(v_entry, v_cut, group, v_side.reshape(n_tuples, K, 2),
                          w_side.reshape(n_tuples, K, 2))

    def prune_entries(self, e: np.ndarray, entries: Entries, root_cuts: Cuts,
                      entry_cuts: Cuts, sweeps: PairSweeps, values: SideValues
                      ) -> KeptPieces:
        """Proposition pruning-d=3 for entries `e`: the sub-pieces kept per root piece."""
        r, side = entries.tuple[e], entries.side[e]
        left = (side == LEFT)[:, None]
        set_cut = np.where(left, root_cuts.piece_lo[r], root_cuts.piece_hi[r])  # smaller set
        big_cut = np.where(left, root_cuts.piece_hi[r], root_cuts.piece_lo[r])  # larger set
        pair = np.maximum(sweeps.pair_of[e[:, None], set_cut], 0)  # invalid: masked below
        A = sweeps.prefix[pair[:, :, None], entry_cuts.piece_lo[e][:, None, :]]  # (e, K, K, p)
        B = sweeps.suffix[pair[:, :, None], entry_cuts.piece_hi[e][:, None, :]]
        v_cap = values.best[r[:, None], big_cut, side[:, None]][..., None, None]
        w_other = values.w0[r[:, None], big_cut, 1 - side[:, None]][..., None, None]
        min_a, min_b = A.min(axis=3), B.min(axis=3)
        with_b, with_a = A + min_b[..., None], B + min_a[..., None]
        keep_a = (entries.left_features[e][:, None, None, :] & self.at_most(with_b, v_cap)
                  & self.can_improve(with_b + w_other))
        keep_b = (entries.right_features[e][:, None, None, :] & self.at_most(with_a, v_cap)
                  & self.can_improve(with_a + w_other))
        alive = (root_cuts.piece_valid[r][:, :, None] & entry_cuts.piece_valid[e][:, None, :]
                 & keep_a.any(axis=3) & keep_b.any(axis=3))
        i, ri, di = np.nonzero(alive)
        w_kept = (np.where(keep_a[i, ri, di], A[i, ri, di], np.inf).min(axis=1)
                  + np.where(keep_b[i, ri, di], B[i, ri, di], np.inf).min(axis=1))
        return KeptPieces(e[i], ri, di, keep_a[i, ri, di], keep_b[i, ri, di], w_kept)

    def children(self, tuples: RootTuples, entries: Entries, root_cuts: Cuts,
                 entry_cuts: Cuts, kept: KeptPieces) -> tuple[RootTuples, Entries]:
        """The next frontier: root pieces that live, with their kept entry sub-pieces.

        A root piece lives while both sides keep an entry; its bound is the least W0 on
        each side.
        """
        R, K = len(tuples.root), root_cuts.cuts.shape[1]
        ei, ri, di = kept.entry, kept.root_piece, kept.entry_piece
        er = entries.tuple
        rcuts, rplo, rphi = root_cuts.cuts, root_cuts.piece_lo, root_cuts.piece_hi
        ecuts, eplo, ephi = entry_cuts.cuts, entry_cuts.piece_lo, entry_cuts.piece_hi
        piece_w = np.full((R, K, 2), np.inf)
        np.minimum.at(piece_w, (er[ei], ri, entries.side[ei]), kept.w0)
        piece_lb = piece_w.sum(axis=2)
        piece_alive = (root_cuts.piece_valid & np.isfinite(piece_lb)
                       & self.can_improve(piece_lb))
        # A root singleton whose entries are all singletons was evaluated in step 1.
        open_entry = np.zeros((R, K), dtype=bool)
        wide = ecuts[ei, ephi[ei, di]] > ecuts[ei, eplo[ei, di]]
        open_entry[er[ei[wide]], ri[wide]] = True
        singleton = rcuts[np.arange(R)[:, None], rplo] == rcuts[np.arange(R)[:, None], rphi]
        piece_alive &= open_entry | ~singleton
        new_id = np.full((R, K), -1, dtype=np.int64)
        tr, tj = np.nonzero(piece_alive)
        new_id[tr, tj] = np.arange(len(tr))
        next_tuples = RootTuples(tuples.root[tr], rcuts[tr, rplo[tr, tj]],
                                 rcuts[tr, rphi[tr, tj]], piece_lb[tr, tj])
        child = new_id[er[ei], ri] >= 0
        ei, ri, di = ei[child], ri[child], di[child]
        next_entries = Entries(
            tuple=new_id[er[ei], ri],
            side=entries.side[ei],
            feature=entries.feature[ei],
            lo=ecuts[ei, eplo[ei, di]],
            hi=ecuts[ei, ephi[ei, di]],
            left_features=kept.left_features[child],
            right_features=kept.right_features[child],
        )
        order = np.argsort(next_entries.tuple, kind="stable")  # entries grouped by tuple
        return next_tuples, Entries(*(field[order] for field in next_entries))

    def upper_bounds(self, tuples: RootTuples, entries: Entries, root_cuts: Cuts,
                     entry_cuts: Cuts, sweeps: PairSweeps, values: SideValues) -> None:
        """Step 1: the best pair of sides at any root cut is a tree; offer the best."""
        v_side = values.best
        value = v_side[:, :, LEFT] + v_side[:, :, RIGHT]  # (R, K); padding repeats cuts
        r, j = np.unravel_index(int(np.argmin(value)), value.shape)
        if not value[r, j] < self.incumbent:
            return
        K = v_side.shape[1]
        pe = sweeps.entry
        sides = []
        for which in (LEFT, RIGHT):
            x = int(np.nonzero((values.group == (r * K + j) * 2 + which)
                               & (values.tree == v_side[r, j, which]))[0][0])
            k = int(values.tree_cut[x])
            sides.append((int(entries.feature[pe[x]]), int(entry_cuts.cuts[pe[x], k]),
                          int(np.argmin(sweeps.prefix[x, k])),
                          int(np.argmin(sweeps.suffix[x, k]))))
        self.offer(float(value[r, j]),
                   functools.partial(self.tree_spec, int(tuples.root[r]),
                                     int(root_cuts.cuts[r, j]), *sides))

    def tree_spec(self, f0: int, t0: int, left, right):
        """Split spec of the root cut t0 with a depth-2 entry tree on each side."""
        problem = self.problem
        k = int(problem.cut_pos[f0, t0])
        inside = problem.rank[f0] < k
        return (f0, position_threshold(problem, f0, k),
                depth2_splits(problem, *left, mask=inside),
                depth2_splits(problem, *right, mask=~inside))


class _Subsets(NamedTuple):
    """The distinct sample sets of a step's pairs: the samples left (or right) of a
    root cut, U of them."""

    root: np.ndarray  # (U,) int64: f0 of the root cut
    position: np.ndarray  # (U,) int64: the cut's sorted position in f0's order
    side: np.ndarray  # (U,) LEFT or RIGHT
    of_pair: np.ndarray  # (X,) int64: the set of each pair
