"""Depth 3 by the paper's appendix algorithm (DESIGN.md section 6, route 1).

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
is the recursion of `_deep.py`; `solve(..., route="appendix")` selects this one, and
the README compares the two.
"""

from __future__ import annotations

import functools

import numpy as np

from ._deep import size_batches
from ._host import best_stump, position_threshold
from ._runner import KernelRunner
from ._search import RTOL, Search

LEFT, RIGHT = 0, 1
ENTRY_BLOCK_ELEMENTS = 1 << 21  # entries x pieces x sub-pieces x p pruned at once


def cut_points(a: np.ndarray, b: np.ndarray, s: int):
    """Cuts of closed intervals [a, b] and the pieces between them.

    Returns `(cuts, count, piece_lo, piece_hi, piece_valid)`: `cuts (N, s+1)` (padded
    by repeating the last), `count (N,)`, and per piece the indices of its two end
    cuts in `cuts` and whether it exists. An interval wider than s gets s + 1 almost
    equi-spaced cuts and s closed pieces between them (each narrower than the
    interval); a narrower one is cut at every threshold into singleton pieces.
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
    return cuts, count, piece_lo, piece_hi, piece_valid


class AppendixSearch(Search):
    """Exact depth-3 search by the appendix algorithm (single problem)."""

    def __init__(self, problem, **kwargs):
        super().__init__(problem, **kwargs)
        self.subproblems = 0  # compacted subsets swept

    # -- tolerances ---------------------------------------------------------------------
    def at_most(self, lower: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """`lower <= cap`, within the pruning tolerance for floats (ties kept)."""
        if self.exact:
            return lower <= cap
        finite = np.where(np.isfinite(cap), cap, 0.0)
        return lower <= cap + RTOL * np.abs(finite) + self.atol

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
        rf0 = np.arange(p)
        ra, rb = np.zeros(p, dtype=np.int64), u.copy()
        er = np.repeat(np.arange(p), 2 * p)  # entries: tuple, side, f1
        es = np.tile(np.repeat([LEFT, RIGHT], p), p)
        ef1 = np.tile(np.arange(p), 2 * p)
        elo, ehi = np.zeros(len(er), dtype=np.int64), u[ef1]
        Fa = np.ones((len(er), p), dtype=bool)
        Fb = np.ones((len(er), p), dtype=bool)
        tuple_lb = np.zeros(p)
        while len(rf0):
            if not self.begin_iteration(tuple_lb):
                return
            (rf0, ra, rb, tuple_lb), (er, es, ef1, elo, ehi, Fa, Fb) = self.step(
                rf0, ra, rb, er, es, ef1, elo, ehi, Fa, Fb)
            self.report(tuple_lb)
        self.lower_bound = self.incumbent - self.tolerance()

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
    def step(self, rf0, ra, rb, er, es, ef1, elo, ehi, Fa, Fb):
        s, K = self.s, self.s + 1
        problem = self.problem
        R, E = len(rf0), len(er)
        rcuts, rcount, rplo, rphi, rpvalid = cut_points(ra, rb, s)
        ecuts, ecount, eplo, ephi, epvalid = cut_points(elo, ehi, s)

        # Each entry is swept on its side of every root cut of its tuple: one (entry,
        # root cut) pair per set, one kernel row per child feature of the pair.
        pair_of = np.full((E, K), -1, dtype=np.int64)
        pe, pc = np.nonzero(np.arange(K)[None, :] < rcount[er][:, None])
        pair_of[pe, pc] = np.arange(len(pe))
        pos = problem.cut_pos[rf0[er[pe]], rcuts[er[pe], pc]]  # samples left of the root cut
        key = (rf0[er[pe]] * (problem.n + 1) + pos) * 2 + es[pe]
        keys, subset_of_pair = np.unique(key, return_inverse=True)
        PRE, SUF = self.sweep_pairs(keys, subset_of_pair, pe, ef1, ecuts, Fa, Fb)

        # Step 1: V(set, entry), the best tree at the entry's cuts, is achieved.
        minA, minB = PRE.min(axis=2), SUF.min(axis=2)  # (pairs, K)
        tree = np.where(np.arange(K)[None, :] < ecount[pe][:, None], minA + minB, np.inf)
        v_entry, v_cut = tree.min(axis=1), tree.argmin(axis=1)
        w_entry = minA[:, 0] + minB[np.arange(len(pe)), ecount[pe] - 1]  # W0, whole entry
        group = (er[pe] * K + pc) * 2 + es[pe]
        v_side = np.full(R * K * 2, np.inf)
        w_side = np.full(R * K * 2, np.inf)
        np.minimum.at(v_side, group, v_entry)
        np.minimum.at(w_side, group, w_entry)
        v_side, w_side = v_side.reshape(R, K, 2), w_side.reshape(R, K, 2)
        self.upper_bounds(rf0, rcuts, v_side, group, v_entry, v_cut, pe, pc, ef1, ecuts,
                          PRE, SUF)

        # Step 2: entry sub-pieces per root piece, in blocks of entries (the arrays are
        # (entries, root piece, sub-piece, p)); only the survivors are kept.
        block = max(1, ENTRY_BLOCK_ELEMENTS // (K * K * Fa.shape[1]))
        kept = [self.prune_entries(np.arange(e0, min(E, e0 + block)), er, es, rplo, rphi,
                                   rpvalid, eplo, ephi, epvalid, pair_of, PRE, SUF, v_side,
                                   w_side, Fa, Fb)
                for e0 in range(0, max(E, 1), block)]
        ei, ri, di, keep_a, keep_b, w_alive = (np.concatenate(x) for x in zip(*kept))

        # A root piece lives while both sides keep an entry; its bound is the least
        # W0 on each side.
        piece_w = np.full((R, K, 2), np.inf)
        np.minimum.at(piece_w, (er[ei], ri, es[ei]), w_alive)
        piece_lb = piece_w.sum(axis=2)
        piece_alive = rpvalid & np.isfinite(piece_lb) & self.can_improve(piece_lb)
        # A root singleton whose entries are all singletons was evaluated in step 1.
        open_entry = np.zeros((R, K), dtype=bool)
        wide = ecuts[ei, ephi[ei, di]] > ecuts[ei, eplo[ei, di]]
        open_entry[er[ei[wide]], ri[wide]] = True
        singleton = rcuts[np.arange(R)[:, None], rplo] == rcuts[np.arange(R)[:, None], rphi]
        piece_alive &= open_entry | ~singleton
        new_id = np.full((R, K), -1, dtype=np.int64)
        tr, tj = np.nonzero(piece_alive)
        new_id[tr, tj] = np.arange(len(tr))
        tuples = (rf0[tr], rcuts[tr, rplo[tr, tj]], rcuts[tr, rphi[tr, tj]], piece_lb[tr, tj])
        child = new_id[er[ei], ri] >= 0
        ei, ri, di, keep_a, keep_b = ei[child], ri[child], di[child], keep_a[child], keep_b[child]
        entries = (new_id[er[ei], ri], es[ei], ef1[ei], ecuts[ei, eplo[ei, di]],
                   ecuts[ei, ephi[ei, di]], keep_a, keep_b)
        order = np.argsort(entries[0], kind="stable")  # entries grouped by tuple
        return tuples, tuple(x[order] for x in entries)

    def prune_entries(self, e, er, es, rplo, rphi, rpvalid, eplo, ephi, epvalid, pair_of,
                      PRE, SUF, v_side, w_side, Fa, Fb):
        """Proposition pruning-d=3 for entries `e`: the sub-pieces kept per root piece.

        Returns `(entry, root piece, sub-piece, F_a, F_b, W0)` of the kept ones.
        """
        r, side = er[e], es[e]
        left = (side == LEFT)[:, None]
        set_cut = np.where(left, rplo[r], rphi[r])  # the smaller set of the piece
        big_cut = np.where(left, rphi[r], rplo[r])  # the larger set
        pair = np.maximum(pair_of[e[:, None], set_cut], 0)  # invalid pieces masked below
        A = PRE[pair[:, :, None], eplo[e][:, None, :]]  # (entries, K, K, p)
        B = SUF[pair[:, :, None], ephi[e][:, None, :]]
        v_cap = v_side[r[:, None], big_cut, side[:, None]][..., None, None]
        w_other = w_side[r[:, None], big_cut, 1 - side[:, None]][..., None, None]
        min_a, min_b = A.min(axis=3), B.min(axis=3)
        with_b, with_a = A + min_b[..., None], B + min_a[..., None]
        keep_a = (Fa[e][:, None, None, :] & self.at_most(with_b, v_cap)
                  & self.can_improve(with_b + w_other))
        keep_b = (Fb[e][:, None, None, :] & self.at_most(with_a, v_cap)
                  & self.can_improve(with_a + w_other))
        alive = (rpvalid[r][:, :, None] & epvalid[e][:, None, :]
                 & keep_a.any(axis=3) & keep_b.any(axis=3))
        i, ri, di = np.nonzero(alive)
        w_kept = (np.where(keep_a[i, ri, di], A[i, ri, di], np.inf).min(axis=1)
                  + np.where(keep_b[i, ri, di], B[i, ri, di], np.inf).min(axis=1))
        return e[i], ri, di, keep_a[i, ri, di], keep_b[i, ri, di], w_kept

    def sweep_pairs(self, keys, subset_of_pair, pe, ef1, ecuts, Fa, Fb):
        """Best stumps of each pair's child features on both sides of its entry cuts.

        Returns `(PRE, SUF)`, `(pairs, s + 1, p)`: `PRE[x, k, f]` is the best stump on f
        of the pair's set left of its entry's k-th cut (inf where f is not in F_a),
        `SUF` right of it (inf where f is not in F_b).
        """
        problem = self.problem
        n, p = problem.n, problem.p
        X, K = len(pe), ecuts.shape[1]
        PRE = np.full((X, K, p), np.inf)
        SUF = np.full((X, K, p), np.inf)
        f0 = keys // 2 // (n + 1)
        pos = keys // 2 % (n + 1)
        side = keys % 2
        size = np.where(side == LEFT, pos, n - pos)
        empty = size[subset_of_pair] == 0
        PRE[empty] = np.where(Fa[pe[empty]][:, None, :], 0.0, np.inf)
        SUF[empty] = np.where(Fb[pe[empty]][:, None, :], 0.0, np.inf)
        # Subsets of similar size share a batch (sweeps cost the batch's padded size).
        for batch in size_batches(size, p):
            self.sweep_batch(batch, f0, pos, side, subset_of_pair, pe, ef1, ecuts, Fa, Fb,
                             PRE, SUF)
        return PRE, SUF

    def sweep_batch(self, batch, f0, pos, side, subset_of_pair, pe, ef1, ecuts, Fa, Fb,
                    PRE, SUF) -> None:
        problem = self.problem
        subs, shifts = [], []
        for u in batch:
            inside = problem.rank[f0[u]] < pos[u]
            mask = inside if side[u] == LEFT else ~inside
            subs.append(problem.compact(mask))
            # Parent position m in f's order -> samples of the subset before it.
            shifts.append(np.concatenate(
                [np.zeros((problem.p, 1), np.int64), np.cumsum(mask[problem.perm], axis=1)],
                axis=1))
        self.subproblems += len(batch)
        local = np.full(len(f0), -1, dtype=np.int64)
        local[batch] = np.arange(len(batch))
        pairs = np.nonzero(local[subset_of_pair] >= 0)[0]
        rows_pair, rows_f = np.nonzero((Fa | Fb)[pe[pairs]])
        x = pairs[rows_pair]
        sub = local[subset_of_pair[x]]
        f1 = ef1[pe[x]]
        parent_pos = problem.cut_pos[f1[:, None], ecuts[pe[x]]]  # (rows, K)
        shift = np.stack(shifts)  # (batch, p, n + 1)
        cuts = shift[sub[:, None], f1[:, None], parent_pos]
        runner = self.runner.for_compact(subs)
        pre, suf = runner.full(f1, rows_f, cuts, problem=sub)
        in_a, in_b = Fa[pe[x], rows_f], Fb[pe[x], rows_f]
        PRE[x[in_a], :, rows_f[in_a]] = pre[in_a]
        SUF[x[in_b], :, rows_f[in_b]] = suf[in_b]

    def upper_bounds(self, rf0, rcuts, v_side, group, v_entry, v_cut, pe, pc, ef1, ecuts,
                     PRE, SUF) -> None:
        """Step 1: the best pair of sides at any root cut is a tree; offer the best."""
        value = v_side[:, :, LEFT] + v_side[:, :, RIGHT]  # (R, K); padding repeats cuts
        r, j = np.unravel_index(int(np.argmin(value)), value.shape)
        if not value[r, j] < self.incumbent:
            return
        K = v_side.shape[1]
        sides = []
        for which in (LEFT, RIGHT):
            x = int(np.nonzero((group == (r * K + j) * 2 + which)
                               & (v_entry == v_side[r, j, which]))[0][0])
            k = int(v_cut[x])
            sides.append((int(ef1[pe[x]]), int(ecuts[pe[x], k]), int(np.argmin(PRE[x, k])),
                          int(np.argmin(SUF[x, k]))))
        self.offer(float(value[r, j]),
                   functools.partial(self.tree_spec, int(rf0[r]), int(rcuts[r, j]), *sides))

    def tree_spec(self, f0: int, t0: int, left, right):
        """Split spec of the root cut t0 with a depth-2 entry tree on each side."""
        problem = self.problem
        k = int(problem.cut_pos[f0, t0])
        inside = problem.rank[f0] < k
        return (f0, position_threshold(problem, f0, k),
                self.depth2_splits(*left, mask=inside), self.depth2_splits(*right, mask=~inside))
