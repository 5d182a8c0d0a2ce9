"""Quant-BnB for depth 2 (paper, Algorithm 1) over many problems at once.

The frontier of alive tuples `(problem, f0, [a, b], F1, F2)` of every problem lives in
one set of host numpy arrays, so each iteration costs a few dozen numpy calls however
many problems there are; the iterations' O(n) work happens in the device sweeps of
`_kernels.py`, batched over (problem, tuple, feature) rows. A single solve is one problem; a batch
(`solve_batch`) or the sides of a deeper tree's root cuts are many. Per iteration:

1. cut the tuple's root interval at s + 1 almost equi-spaced thresholds t_1..t_{s+1}
   strictly inside its two ends (cuts evaluated before, or the trivial 0 and u(f0));
2. sweep: `P[j, f] = L1(prefix_{t_j}, f)`, `S[j, f] = L1(suffix_{t_j}, f)`;
3. Step 1 (upper bound V_s): every tree with root cut t_j is now evaluated exactly;
4. Step 2 (Proposition quantile-prune): for each of the s + 2 pieces between the ends
   and the cuts, keep the child features whose lower bound (W0, then W1_{s'}, W2 or
   L2) can still beat the problem's incumbent; the ends enter as carried bounds;
5. surviving pieces become children over their open interval, whose ends carry the
   bounds of step 2 (not re-swept: 10% fewer cut-elements on the 13 classification
   datasets than re-sweeping them, up to 21% on htru).

Problem q's host-side state (incumbent, tree building) is `searches[q]`, a `Search`.
Each problem follows exactly the path it would follow alone: the frontier keeps every
problem's tuples in their own order and all decisions are per problem.
"""

from __future__ import annotations

import functools

import numpy as np

from ._data import ThresholdTables
from ._host import stump_losses, stumps_of_all_shared
from ._runner import KernelRunner, pow2_at_least
from ._search import RTOL, Search, depth2_splits

# The paper's s' = floor(0.6 n s / (b - a)) for W1, capped to keep rows short.
W1_FACTOR = 0.6
W1_MAX_SUBCUTS = 64
W1_MAX_SHARE = 8  # W1 refines only pieces with at most n / 8 samples
# Tuples processed per block: the host arrays of one step hold tuples x (s + 3) x p
# entries, at most MAX_BLOCK_ELEMENTS (8 MB of float64) per array, and at least 4096
# tuples. Larger blocks let the problem-lane sweep take a batch's first iteration whole.
MAX_CAPACITY = 4096
MAX_BLOCK_ELEMENTS = 1 << 20
# The slack step's (pieces, p, p) pair bounds go in blocks of this many entries: 1 MB
# of float64 per array, which stays in cache (2^22 ran 10-20% slower).
PAIR_BLOCK_ELEMENTS = 1 << 17


def min_last(a: np.ndarray) -> np.ndarray:
    """`a.min(axis=-1)` for a short last axis (the p features): one `np.minimum` per
    feature over whole slices, 3-4x faster than numpy's reduction over short rows."""
    if a.shape[-1] == 0 or a.shape[-1] > 32:
        return a.min(axis=-1)
    out = a[..., 0].copy()
    for k in range(1, a.shape[-1]):
        np.minimum(out, a[..., k], out=out)
    return out


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


class Depth2Search:
    """Depth-2 Quant-BnB for `searches[q].problem`, q = 0..P-1, in one frontier.

    `runner` sweeps problem q as its data's problem `data_index[q]` (default q; a single
    search: the runner's `problem_index`). The problems must have the same number of features; their
    sample counts may differ (tables are padded). Each search starts from its own
    incumbent (a `cutoff` given to `Search`).
    """

    def __init__(self, searches: list[Search], runner: KernelRunner, *, data_index=None,
                 batch_progress=None, tables: ThresholdTables | None = None):
        self.searches = searches
        self.runner = runner
        self.batch_progress = batch_progress
        first = searches[0]
        self.bound, self.s = first.bound, first.s
        self.time_limit, self.start = first.time_limit, first.start
        self.progress = first.progress if len(searches) == 1 else None
        self.capacity = first.capacity
        problems = [search.problem for search in searches]
        self.p = problems[0].p
        fits = pow2_at_least(MAX_BLOCK_ELEMENTS // (self.p * (self.s + 3)) + 1) // 2
        self.max_capacity = max(self.capacity, MAX_CAPACITY, fits)
        P = len(problems)
        if tables is None:
            tables = stack_tables(problems)
        self.cut_pos, self.slack_left, self.n_thresholds = tables[:3]
        self.stumps = None  # (losses, positions) of every problem, when the tables have them
        if tables.stump_loss is not None:
            self.stumps = tables.stump_loss, tables.stump_position
        self.n_of = np.array([pr.n for pr in problems])
        self.exact = np.array([search.exact for search in searches])
        self.atol = np.array([search.atol for search in searches])
        self.incumbent = np.array([search.incumbent for search in searches])
        self.spec = np.full((P, 4), -1, dtype=np.int64)  # (f0, t, f1, f2) of an incumbent
        self.lower = np.full(P, -np.inf)  # proved bound per problem (set when it ends)
        if data_index is None:
            data_index = np.arange(P) if P > 1 else [runner.problem_index]
        self.data_index = np.asarray(data_index)

    # -- incumbents -------------------------------------------------------------------
    def tolerance(self, q: np.ndarray) -> np.ndarray:
        return np.where(self.exact[q], 0.0, RTOL * np.abs(self.incumbent[q]) + self.atol[q])

    def can_improve(self, lower: np.ndarray, q: np.ndarray) -> np.ndarray:
        """True where a lower bound does not rule out beating problem q's incumbent.

        Integer counts: the incumbent is achieved, ties need not be kept; floats: keep
        everything within the tolerance. `q` broadcasts against `lower`.
        """
        inc = self.incumbent[q]
        return np.where(self.exact[q], lower < inc, lower <= inc + self.tolerance(q))

    def offer(self, q, value, f0, t, f1, f2) -> None:
        """Trees (root cut t of f0, best stumps on f1 left and f2 right) achieve `value`
        for problems `q` (distinct, arrays alike): each that beats its problem's
        incumbent replaces it. The searches learn their incumbents when `run` ends."""
        better = value < self.incumbent[q]
        q = q[better]
        self.incumbent[q] = value[better]
        self.spec[q] = np.stack([f0, t, f1, f2], axis=-1)[better]

    # -- driver -------------------------------------------------------------------------
    def run(self) -> None:
        """Solve every problem, answering kernel requests with `self.runner`."""
        steps = self.steps()
        try:
            kind, args = next(steps)
            while True:
                rows = self.data_index[args[-1]]
                kind, args = steps.send(getattr(self.runner, kind)(*args[:-1], problem=rows))
        except StopIteration:
            pass
        for q in np.flatnonzero(self.spec[:, 0] >= 0):  # a tree beat the search's cutoff
            search = self.searches[q]
            spec = tuple(int(v) for v in self.spec[q])
            search.depth2_spec = spec
            search.offer(float(self.incumbent[q]),
                         functools.partial(depth2_splits, search.problem, *spec))
        for q, search in enumerate(self.searches):
            search.incumbent = float(self.incumbent[q])
            search.lower_bound = float(self.lower[q])

    def steps(self):
        """The search as a generator of kernel requests `(kind, (..., problem rows))`."""
        P, p = len(self.searches), self.p
        yield from self.greedy()
        pr = np.repeat(np.arange(P), p)
        f0 = np.tile(np.arange(p), P)
        # Root cuts lo..hi lie strictly between two ends whose sides are bounded per
        # child feature (see `step`). At first the ends are the trivial cuts 0 (nothing
        # left) and u(f0) (everything left): a side is empty or the best stump of all.
        lo = np.ones(P * p, dtype=np.int64)
        hi = self.n_thresholds.reshape(-1) - 1
        F1 = np.ones((P * p, p), dtype=bool)
        F2 = np.ones((P * p, p), dtype=bool)
        everything = self.stump_all[pr]
        nothing = np.zeros_like(everything)
        ends = np.stack([nothing, everything, everything, nothing], axis=1)  # (T, 4, p)
        tuple_lb = np.zeros(P * p)  # losses are never negative
        inside = lo <= hi  # a constant feature has no cut inside
        pr, f0, lo, hi, F1, F2, ends, tuple_lb = (
            x[inside] for x in (pr, f0, lo, hi, F1, F2, ends, tuple_lb))
        while len(f0):
            if not self.begin_iteration(pr, tuple_lb):
                return
            while self.capacity < len(f0) and self.capacity < self.max_capacity:
                self.capacity *= 2
            for q in np.unique(pr):
                self.searches[q].capacity_history.append(self.capacity)
            children = []
            for b0 in range(0, len(f0), self.capacity):  # bounded memory per block
                block = (x[b0 : b0 + self.capacity] for x in (pr, f0, lo, hi, F1, F2, ends))
                children.append((yield from self.step(*block)))
            pr, f0, lo, hi, F1, F2, ends, tuple_lb = (
                np.concatenate(x) for x in zip(*children))
            self.report(tuple_lb)
            if self.batch_progress is not None:
                active = len(np.unique(pr))
                self.batch_progress({"iteration": max(s.iterations for s in self.searches),
                                     "active": active, "solved": P - active,
                                     "elapsed": self.searches[0].elapsed()})
        self.finish(np.arange(P))

    def finish(self, q: np.ndarray) -> None:
        """Problems `q` have no tuples left: their incumbents are proved optimal."""
        self.lower[q] = self.incumbent[q] - self.tolerance(q)

    def begin_iteration(self, pr: np.ndarray, tuple_lb: np.ndarray) -> bool:
        """Record proved bounds; False (status "time_limit") when time is up."""
        P = len(self.searches)
        present = np.zeros(P, dtype=bool)
        present[pr] = True
        self.finish(np.nonzero(~present & np.isneginf(self.lower))[0])
        best = np.full(P, np.inf)
        np.minimum.at(best, pr, tuple_lb)
        live = np.nonzero(present)[0]
        self.lower[live] = (np.minimum(self.incumbent[live], best[live])
                            - self.tolerance(live))
        if self.time_limit is not None and self.searches[0].elapsed() > self.time_limit:
            for q in live:
                self.searches[q].status = "time_limit"
            return False
        counts = np.bincount(pr, minlength=P)
        for q in live:
            search = self.searches[q]
            search.iterations += 1
            search.frontier_sizes.append(int(counts[q]))
            search.tuples_explored += int(counts[q])
        return True

    def report(self, tuple_lb: np.ndarray) -> None:
        if self.progress is None:
            return
        search = self.searches[0]
        lower = min(self.incumbent[0], float(tuple_lb.min(initial=np.inf)))
        self.progress(
            {
                "iteration": search.iterations,
                "frontier": int(len(tuple_lb)),
                "incumbent": float(self.incumbent[0]),
                "lower_bound": lower,
                "gap": float(self.incumbent[0]) - lower,
                "elapsed": search.elapsed(),
            }
        )

    # -- the greedy start -----------------------------------------------------------------
    def greedy(self):
        """Greedy depth-2 tree per problem: the best stump, then the best stump per side.

        The sides come from one kernel sweep (every feature at the root's cut), the
        same kernel the search uses; only the winning stumps are rebuilt on the host.
        """
        P, p = len(self.searches), self.p
        problems = [search.problem for search in self.searches]
        if self.stumps is not None:  # computed by the reweighting pass
            losses, positions = self.stumps
        elif P > 1 and all(pr.perm is problems[0].perm for pr in problems):
            losses, positions = stumps_of_all_shared(problems)  # a batch of weightings
        else:
            stumps = [stump_losses(pr, np.ones(pr.n, dtype=bool)) for pr in problems]
            losses = np.stack([one for one, _ in stumps])
            positions = np.stack([at for _, at in stumps])
        self.stump_all = losses  # (P, p)
        root = losses.argmin(axis=1)
        k = positions[np.arange(P), root]
        # s + 1 copies of the cut: the shape of the search's own sweeps, so no compile.
        cuts = np.repeat(np.repeat(k, p)[:, None], self.s + 1, axis=1)
        pre, suf = yield "full", (np.repeat(root, p), np.tile(np.arange(p), P), cuts,
                                  np.repeat(np.arange(P), p))
        pre, suf = pre[:, 0].reshape(P, p), suf[:, 0].reshape(P, p)
        f1, f2 = pre.argmin(axis=1), suf.argmin(axis=1)
        value = pre[np.arange(P), f1] + suf[np.arange(P), f2]
        # the root's threshold index: cut positions ascend to u(f), then repeat n
        t = row_searchsorted(self.cut_pos.reshape(P * p, -1), np.arange(P) * p + root, k,
                             "left")
        self.offer(np.arange(P), value, root, t, f1, f2)

    # -- one iteration --------------------------------------------------------------------
    def step(self, pr, f0, lo, hi, F1, F2, ends):
        """One Quant-BnB iteration over a block of tuples; returns the children.

        A tuple's root cuts lo..hi lie strictly between two ends, lo - 1 and hi + 1,
        that were evaluated before (or are trivial): what is carried of them,
        `ends[:, :, f]` = (P_lo, S_lo, P_hi, S_hi), are lower bounds such that every
        root cut t of the tuple has `L1(prefix_t, f) >= P_lo` and `L1(suffix_t, f) >=
        S_hi` (sides only grow) and `L1(suffix_t, f) >= S_lo - c(lo - 1, t)` and
        `L1(prefix_t, f) >= P_hi - c(t, hi + 1)`, with c the summed `sample_slack` of
        the samples that change sides (their weight, for classification). So the
        s + 1 swept cuts all fall inside and make s + 2 pieces; W0 and the W1/W2
        windows stay valid at the ends by super-additivity (the end's set is a subset
        of the piece's prefix).
        """
        s = self.s
        T, p = F1.shape
        n_swept = s + 1
        j = np.arange(n_swept)
        swept = (lo - 1)[:, None] + ((j[None, :] + 1) * (hi - lo + 2)[:, None]) // (n_swept + 1)
        swept = np.clip(swept, lo[:, None], hi[:, None])
        pos = self.cut_pos[pr[:, None], f0[:, None], swept]
        ti, fi = np.nonzero(F1 | F2)
        pre, suf = yield "full", (f0[ti], fi, pos[ti], pr[ti])
        P = np.full((T, n_swept, p), np.inf)
        S = np.full((T, n_swept, p), np.inf)
        in1, in2 = F1[ti, fi], F2[ti, fi]
        P[ti[in1], :, fi[in1]] = pre[in1]
        S[ti[in2], :, fi[in2]] = suf[in2]
        self.upper_bounds(pr, f0, swept, P, S)  # the ends are bounds, not trees
        P = np.concatenate([np.where(F1, ends[:, 0], np.inf)[:, None], P,
                            np.where(F1, ends[:, 2], np.inf)[:, None]], axis=1)
        S = np.concatenate([np.where(F2, ends[:, 1], np.inf)[:, None], S,
                            np.where(F2, ends[:, 3], np.inf)[:, None]], axis=1)
        cuts = np.concatenate([(lo - 1)[:, None], swept, (hi + 1)[:, None]], axis=1)

        # Step 2: prune each piece [t_{j-1}, t_j] with W0 = P[j-1, f1] + S[j, f2].
        left_p, right_s = P[:, :-1, :], S[:, 1:, :]  # (T, pieces, p)
        min_left, min_right = min_last(left_p), min_last(right_s)
        q3 = pr[:, None, None]
        keep1 = F1[:, None, :] & self.can_improve(left_p + min_right[..., None], q3)
        keep2 = F2[:, None, :] & self.can_improve(min_left[..., None] + right_s, q3)
        piece_lb = min_left + min_right
        piece_lo, piece_hi = cuts[:, :-1], cuts[:, 1:]
        alive = (piece_hi - piece_lo >= 2) & keep1.any(axis=2) & keep2.any(axis=2)
        child_lo, child_hi = piece_lo + 1, piece_hi - 1  # the cuts themselves are done
        if alive.any():
            keep1, keep2, piece_lb, child_lo, child_hi = self.slack(
                pr, f0, P, S, piece_lo, piece_hi, keep1, keep2, piece_lb, child_lo, child_hi,
                alive,
            )
            alive &= (child_lo <= child_hi) & keep1.any(axis=2) & keep2.any(axis=2)
        if self.bound != "w0" and alive.any():
            keep1, keep2, piece_lb, alive = yield from self.refine(
                pr, f0, lo, hi, piece_lo, piece_hi, left_p, right_s, keep1, keep2, piece_lb,
                alive,
            )
        ti, tj = np.nonzero(alive)
        child_lo, child_hi = child_lo[ti, tj], child_hi[ti, tj]
        pa, sa = P[ti, tj], S[ti, tj]  # (children, p)
        pb, sb = P[ti, tj + 1], S[ti, tj + 1]
        # the children's ends moved in from the cuts
        q, roots = pr[ti], f0[ti]
        wl = self.slack_left
        sa = sa - (wl[q, roots, child_lo - 1] - wl[q, roots, piece_lo[ti, tj]])[:, None]
        pb = pb - (wl[q, roots, piece_hi[ti, tj]] - wl[q, roots, child_hi + 1])[:, None]
        return (
            pr[ti],
            f0[ti],
            child_lo,
            child_hi,
            keep1[ti, tj],
            keep2[ti, tj],
            np.stack([pa, sa, pb, sb], axis=1),
            piece_lb[ti, tj],
        )

    def upper_bounds(self, pr, f0, cuts, P, S) -> None:
        """Step 1: every tree whose root cut is some t_j is evaluated exactly.

        Per problem, the first (tuple, cut) in frontier order with the least value
        becomes the incumbent when it beats the current one.
        """
        value = min_last(P) + min_last(S)  # (T, n_cuts)
        best_j = value.argmin(axis=1)
        best = value[np.arange(len(value)), best_j]
        order = np.lexsort((np.arange(len(best)), best, pr))
        first = order[np.r_[True, pr[order][1:] != pr[order][:-1]]]  # each problem's best
        won = first[best[first] < self.incumbent[pr[first]]]
        jj = best_j[won]
        self.offer(pr[won], best[won], f0[won], cuts[won, jj], P[won, jj].argmin(axis=1),
                   S[won, jj].argmin(axis=1))

    def slack(self, pr, f0, P, S, piece_lo, piece_hi, keep1, keep2, piece_lb, child_lo,
              child_hi, alive):
        """Bounds from moving a cut by a few samples (DESIGN.md 3).

        Moving the root cut so that samples of total slack x change sides changes
        each side's best-stump loss by at most x (`_data.sample_slack`: for
        classification the slack is the weight, for squared error a bound from the
        targets' range). For a root cut inside a piece whose samples' slack is W, with
        x the slack between t_{j-1} and the cut:
        `P(t) >= max(P_a, P_b - (W - x))` and `S(t) >= max(S_b, S_a - x)`. Minimised
        over x this gives the pair bound `max(P_a + S_b, P_b + S_a - W)`; the x where
        it can still beat the incumbent form an interval, which shrinks the piece.
        """
        pa, pb = P[:, :-1, :], P[:, 1:, :]  # (T, s, p)
        sa, sb = S[:, :-1, :], S[:, 1:, :]
        w_left = self.slack_left[pr[:, None], f0[:, None], piece_lo]
        width = self.slack_left[pr[:, None], f0[:, None], piece_hi] - w_left  # (T, s)
        keep1, keep2, piece_lb = keep1.copy(), keep2.copy(), piece_lb.copy()
        ti, tj = np.nonzero(alive)
        block = max(1, PAIR_BLOCK_ELEMENTS // (keep1.shape[2] ** 2))
        for b0 in range(0, len(ti), block):
            i, j = ti[b0 : b0 + block], tj[b0 : b0 + block]
            pair = np.maximum(
                pa[i, j][:, :, None] + sb[i, j][:, None, :],
                pb[i, j][:, :, None] + sa[i, j][:, None, :] - width[i, j][:, None, None],
            )
            ok = (self.can_improve(pair, pr[i][:, None, None])
                  & keep1[i, j][:, :, None] & keep2[i, j][:, None, :])
            keep1[i, j], keep2[i, j] = ok.any(axis=2), ok.any(axis=1)
            piece_lb[i, j] = np.maximum(piece_lb[i, j], pair.min(axis=(1, 2)))
        # Feasible x: P_a + S_a - x < U and P_b + S_b - W + x < U (with the pair's
        # other terms already checked above); a superset of the kept pairs is safe.
        big = np.inf
        min_pa = min_last(np.where(keep1, pa, big))
        min_pb = min_last(np.where(keep1, pb, big))
        min_sa = min_last(np.where(keep2, sa, big))
        min_sb = min_last(np.where(keep2, sb, big))
        child_lo, child_hi = self.shrink(
            pr, f0, piece_lo, piece_hi, min_pa, min_pb, min_sa, min_sb, child_lo, child_hi,
            alive,
        )
        return keep1, keep2, piece_lb, child_lo, child_hi

    def shrink(self, pr, f0, piece_lo, piece_hi, pa, pb, sa, sb, child_lo, child_hi, alive):
        """Narrow each piece to the root cuts that can still win.

        With x the slack between t_{j-1} and a root cut inside the piece (of slack W),
        the slack bound exceeds the incumbent U unless P_a + S_a - x < U and
        P_b + S_b - W + x < U. `pa`..`sb`: `(T, pieces)` lower bounds (minimised over
        the child features still allowed).
        """
        return shrink_pieces(self.slack_left, self.incumbent, self.tolerance, self.exact,
                             pr, f0, piece_lo, piece_hi, pa, pb, sa, sb, child_lo, child_hi,
                             alive)

    def refine(self, pr, f0, lo, hi, piece_lo, piece_hi, left_p, right_s, keep1, keep2,
               piece_lb, alive):
        """Tighten W0 to W1_{s'}, W2 or L2 on the pieces that W0 kept (Lemma key-ineq)."""
        ti, tj = np.nonzero(alive)
        a, b = piece_lo[ti, tj], piece_hi[ti, tj]  # threshold indices of each piece
        q, roots = pr[ti], f0[ti]
        width = b - a
        if self.bound == "w1":
            # The paper's s' = 0.6 n s / (b - a), counted in samples rather than
            # thresholds so that a gathered piece costs about 0.6 n per row. With
            # s' = 1, W1 equals W0: such pieces are not refined.
            parent = self.cut_pos[q, roots, hi[ti]] - self.cut_pos[q, roots, lo[ti]]
            n = self.n_of[q]
            sub = np.floor(W1_FACTOR * n * self.s / np.maximum(parent, 1))
            sub = np.minimum(sub.astype(np.int64), np.minimum(width, W1_MAX_SUBCUTS))
            # Pieces holding a large share of the samples would need a full-length scan
            # per sub-cut; measured, that costs more than the pruning it buys.
            samples = self.cut_pos[q, roots, b] - self.cut_pos[q, roots, a]
            useful = (sub >= 2) & (samples * W1_MAX_SHARE <= n)
            ti, tj, a, b, width, sub, q, roots = (
                x[useful] for x in (ti, tj, a, b, width, sub, q, roots)
            )
            if len(ti) == 0:
                return keep1, keep2, piece_lb, alive
        else:
            sub = width  # every threshold of the piece
        n_cuts = int(sub.max()) + 1
        k = np.minimum(np.arange(n_cuts)[None, :], sub[:, None])
        sub_t = a[:, None] + (k * width[:, None]) // sub[:, None]  # (N, K'), padded
        sub_pos = self.cut_pos[q[:, None], roots[:, None], sub_t]
        rows_piece, rows_f = np.nonzero(keep1[ti, tj] | keep2[ti, tj])
        args = (roots[rows_piece], rows_f)
        if self.bound == "l2":
            pre, suf = yield "full", (*args, sub_pos[rows_piece], q[rows_piece])
        else:
            mid_lo = self.cut_pos[q, roots, a]
            mid_hi = self.cut_pos[q, roots, b]
            pre, suf = yield "window", (
                *args, mid_lo[rows_piece], mid_hi[rows_piece], sub_pos[rows_piece],
                q[rows_piece],
            )
        N, p = len(ti), keep1.shape[2]
        A = np.full((N, n_cuts, p), np.inf)
        B = np.full((N, n_cuts, p), np.inf)
        k1 = keep1[ti, tj][rows_piece, rows_f]
        k2 = keep2[ti, tj][rows_piece, rows_f]
        A[rows_piece[k1], :, rows_f[k1]] = pre[k1]
        B[rows_piece[k2], :, rows_f[k2]] = suf[k2]
        if self.bound == "l2":
            term1, term2 = A, B
        else:
            term1 = A + left_p[ti, tj][:, None, :]
            term2 = B + right_s[ti, tj][:, None, :]
            if self.bound == "w1":  # drop the samples between consecutive sub-cuts
                term1, term2 = term1[:, :-1], term2[:, 1:]
        min1, min2 = term1.min(axis=2), term2.min(axis=2)  # (N, K)
        qq = q[:, None]
        new1 = keep1[ti, tj] & self.can_improve((term1 + min2[..., None]).min(axis=1), qq)
        new2 = keep2[ti, tj] & self.can_improve((term2 + min1[..., None]).min(axis=1), qq)
        keep1, keep2 = keep1.copy(), keep2.copy()
        keep1[ti, tj], keep2[ti, tj] = new1, new2
        piece_lb = piece_lb.copy()
        piece_lb[ti, tj] = np.maximum(piece_lb[ti, tj], (min1 + min2).min(axis=1))
        alive = alive & keep1.any(axis=2) & keep2.any(axis=2)
        return keep1, keep2, piece_lb, alive


def shrink_pieces(slack_left, incumbent, tolerance, exact, pr, f0, piece_lo, piece_hi,
                  pa, pb, sa, sb, child_lo, child_hi, alive):
    """Narrow pieces to the root cuts whose slack bound can still win.

    `slack_left[q, f0]`: summed sample slack left of each threshold index of problem q;
    `incumbent[q]`, `tolerance(q)`, `exact[q]` per problem; the rest `(T, pieces)`.
    """
    q2 = pr[:, None]
    w_left = slack_left[q2, f0[:, None], piece_lo]
    width = slack_left[q2, f0[:, None], piece_hi] - w_left
    slackness = np.where(exact[q2], 0.0, tolerance(q2))
    x_low = pa + sa - incumbent[q2] - slackness  # need x > x_low
    x_high = incumbent[q2] + slackness - pb - sb + width  # need x < x_high
    child_lo, child_hi = child_lo.copy(), child_hi.copy()
    ti, tj = np.nonzero(alive)
    if len(ti) == 0:
        return child_lo, child_hi
    P, p, width_t = slack_left.shape
    table = slack_left.reshape(P * p, width_t)
    rows = pr[ti] * p + f0[ti]
    strict = exact[pr[ti]]
    # Strict inequalities for exact counts, non-strict within the tolerance. Only the
    # piece's own thresholds are searched: an answer outside them leaves the piece
    # whole or empty either way.
    lo_value, hi_value = w_left[ti, tj] + x_low[ti, tj], w_left[ti, tj] + x_high[ti, tj]
    window = piece_lo[ti, tj], piece_hi[ti, tj] + 1

    def search(values: np.ndarray, strict_side: str, loose_side: str) -> np.ndarray:
        if strict.all() or not strict.any():  # one kind of problem: one search
            return row_searchsorted(table, rows, values,
                                    strict_side if strict.all() else loose_side, *window)
        return np.where(strict, row_searchsorted(table, rows, values, strict_side, *window),
                        row_searchsorted(table, rows, values, loose_side, *window))

    first = search(lo_value, "right", "left")
    last = search(hi_value, "left", "right") - 1
    child_lo[ti, tj] = np.maximum(child_lo[ti, tj], first)
    child_hi[ti, tj] = np.minimum(child_hi[ti, tj], last)
    return child_lo, child_hi


def stack_tables(problems: list) -> ThresholdTables:
    """The problems' threshold tables stacked, padded past each u(f) as t = u(f) is."""
    width = max(pr.n for pr in problems) + 1
    P, p = len(problems), problems[0].p
    cut_pos = np.empty((P, p, width), dtype=np.int64)
    slack_left = np.empty((P, p, width))
    for q, pr in enumerate(problems):  # padding: "everything left", as t = u(f)
        cut_pos[q, :, : pr.n + 1] = pr.cut_pos
        cut_pos[q, :, pr.n + 1 :] = pr.n
        slack_left[q, :, : pr.n + 1] = pr.slack_left
        slack_left[q, :, pr.n + 1 :] = pr.slack_left[:, -1:]
    n_thresholds = np.stack([pr.n_thresholds for pr in problems]).astype(np.int64)
    return ThresholdTables(cut_pos, slack_left, n_thresholds)


def solve_depth2(searches: list[Search], runner: KernelRunner | None = None,
                 batch_progress=None, tables: ThresholdTables | None = None) -> None:
    """Run depth-2 searches together; search q is the runner's problem q.

    One search: `runner` defaults to the search's own (or a new one). Problems with
    different numbers of features run as separate frontiers, one after another.
    """
    if runner is None:
        runner = searches[0].runner or KernelRunner(searches[0].problem)
    if len(searches) == 1:
        searches[0].runner = runner
        Depth2Search(searches, runner).run()
        return
    widths = np.array([search.problem.p for search in searches])
    if tables is not None:  # one stacked group (`Problem.reweighted`)
        Depth2Search(searches, runner, batch_progress=batch_progress, tables=tables).run()
        return
    for p in np.unique(widths):
        group = np.nonzero(widths == p)[0]
        Depth2Search([searches[q] for q in group], runner, data_index=group,
                     batch_progress=batch_progress).run()

