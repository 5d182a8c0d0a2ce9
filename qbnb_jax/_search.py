"""Quant-BnB for depth 1 and 2 (paper, Algorithm 1): the search behind `solve`.

The host loop keeps the frontier of alive tuples `(f0, [a, b], F1, F2)` as numpy
arrays (a few thousand tuples at most); all O(n) work happens in the device sweeps of
`_kernels.py`, batched over (tuple, feature) rows. Per iteration:

1. cut the root interval at almost s-equi-spaced thresholds t_0..t_s;
2. sweep: `P[j, f] = L1(prefix_{t_j}, f)`, `S[j, f] = L1(suffix_{t_j}, f)`;
3. Step 1 (upper bound V_s): every tree with root cut t_j is now evaluated exactly;
4. Step 2 (Proposition quantile-prune): for each piece [t_{j-1}, t_j], keep the child
   features whose lower bound (W0, then W1_{s'}, W2 or L2) can still beat the incumbent;
5. surviving pieces become children over the open interval (t_{j-1}, t_j): both
   endpoints were evaluated exactly in step 3.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ._data import Problem
from ._host import best_stump, position_threshold, stump_losses
from ._runner import KernelRunner, pow2_at_least

# Regression and fractional weights: prune only when LB > U + RTOL*|U| + ATOL*scale.
RTOL = 1e-9
ATOL = 1e-12
# The paper's s' = floor(0.6 n s / (b - a)) for W1, capped to keep rows short.
W1_FACTOR = 0.6
W1_MAX_SUBCUTS = 64
W1_MAX_SHARE = 8  # W1 refines only pieces with at most n / 8 samples


# Tuples processed per block: the host arrays of one step grow as tuples x s x p^2.
MAX_CAPACITY = 4096


class Search:
    """Depth-1/2 Quant-BnB on one problem (or a `Problem.restrict` subset of one).

    `cutoff` starts the search with an upper bound that no tree achieves yet: every
    tree that cannot beat it is pruned, so when none is found the optimum is proved to
    be at least `cutoff` (deeper trees use this for their subtrees).
    """

    def __init__(self, problem: Problem, *, bound, s, time_limit, progress, capacity, start,
                 runner: KernelRunner | None = None, cutoff: float = np.inf):
        self.problem = problem
        self.bound = bound
        self.s = s
        self.time_limit = time_limit
        self.progress = progress
        self.capacity = pow2_at_least(capacity)
        self.max_capacity = max(self.capacity, MAX_CAPACITY)
        self.start = start
        self.exact = problem.loss_kind == "count"
        scale = float(problem.weight.sum())
        if problem.loss_kind == "sse":
            scale = float(problem.stats[:, -1].sum())  # total squared error of the root
        self.atol = ATOL * scale if scale > 0 else np.finfo(float).tiny  # scale-invariant
        self.runner = runner
        self.incumbent = float(cutoff)
        self._splits = None
        self.lower_bound = -np.inf
        self.status = "optimal"
        self.iterations = 0
        self.frontier_sizes: list[int] = []
        self.capacity_history: list[int] = []
        self.tuples_explored = 0
        self._stump_of_all: tuple[np.ndarray, np.ndarray] | None = None

    # -- incumbent and pruning ------------------------------------------------------
    def tolerance(self) -> float:
        return 0.0 if self.exact else RTOL * abs(self.incumbent) + self.atol

    def can_improve(self, lower: np.ndarray) -> np.ndarray:
        """True where a lower bound does not rule out beating the incumbent."""
        if self.exact:  # integer counts: the incumbent is achieved, ties need not be kept
            return lower < self.incumbent
        return lower <= self.incumbent + self.tolerance()

    def offer(self, value: float, splits) -> None:
        """A tree achieving `value`: its split spec, or a function that builds it.

        Building a spec costs host stump searches; most incumbents are replaced
        before the end, so the searches pass functions and only the last one runs.
        """
        if value < self.incumbent:
            self.incumbent = float(value)
            self._splits = splits

    @property
    def splits(self):
        """Split spec of the incumbent (None: no tree beats the cutoff)."""
        if callable(self._splits):
            self._splits = self._splits()
        return self._splits

    def stump_splits(self, mask: np.ndarray, feature: int | None = None):
        features = None if feature is None else [feature]
        loss, f, k = best_stump(self.problem, mask, features)
        return loss, (f, position_threshold(self.problem, f, k), None, None)

    def depth2_splits(self, f0: int, t: int, f1: int, f2: int):
        problem = self.problem
        k = int(problem.cut_pos[f0, t])
        left = np.zeros(problem.n, dtype=bool)
        left[problem.perm[f0, :k]] = True
        _, left_spec = self.stump_splits(left, f1)
        _, right_spec = self.stump_splits(~left, f2)
        return (f0, position_threshold(problem, f0, k), left_spec, right_spec)

    def stump_of_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Best stump of all samples on every feature: `(losses, positions)`, once."""
        if self._stump_of_all is None:
            everyone = np.ones(self.problem.n, dtype=bool)
            self._stump_of_all = stump_losses(self.problem, everyone)
        return self._stump_of_all

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    # -- depth 1 --------------------------------------------------------------------
    def solve_depth1(self) -> None:
        loss, splits = self.stump_splits(np.ones(self.problem.n, dtype=bool))
        self.offer(loss, splits)
        self.lower_bound = self.incumbent - self.tolerance()

    # -- depth 2 --------------------------------------------------------------------
    def greedy(self):
        """Greedy depth-2 tree: the best stump, then the best stump on each side.

        The sides come from one kernel sweep (every feature at the root's cut), the
        same kernel the search uses; only the winning stumps are rebuilt on the host.
        """
        problem = self.problem
        losses, positions = self.stump_of_all()
        f0 = int(np.argmin(losses))
        k = int(positions[f0])
        features = np.arange(problem.p)
        # s + 1 copies of the cut: the shape of the search's own sweeps, so no compile.
        cuts = np.full((problem.p, self.s + 1), k)
        pre, suf = yield "full", (np.full(problem.p, f0), features, cuts)
        f1, f2 = int(np.argmin(pre[:, 0])), int(np.argmin(suf[:, 0]))
        value = float(pre[f1, 0] + suf[f2, 0])
        if value < self.incumbent:
            t = int(np.searchsorted(problem.cut_pos[f0, : problem.n_thresholds[f0] + 1], k))
            self.offer(value, functools.partial(self.depth2_splits, f0, t, f1, f2))

    def solve_depth2(self) -> None:
        if self.runner is None:
            self.runner = KernelRunner(self.problem)
        self.run(self.depth2_steps())

    def run(self, steps) -> None:
        """Drive a search generator, answering its kernel requests with `self.runner`.

        The search yields `(kind, args)` for each sweep it needs (`kind`: a
        `KernelRunner` method) and gets its result back; a batch of searches can
        instead be driven in lockstep with one merged call per round (`_batch.py`).
        """
        try:
            kind, args = next(steps)
            while True:
                kind, args = steps.send(getattr(self.runner, kind)(*args))
        except StopIteration:
            pass

    def depth2_steps(self):
        """The depth-2 search as a generator of kernel requests (see `run`)."""
        problem = self.problem
        p = problem.p
        yield from self.greedy()
        # The frontier: one tuple (f0, [0, u(f0)], all, all) per root feature.
        f0 = np.arange(p)
        lo = np.zeros(p, dtype=np.int64)
        hi = problem.n_thresholds.astype(np.int64)
        F1 = np.ones((p, p), dtype=bool)
        F2 = np.ones((p, p), dtype=bool)
        tuple_lb = np.zeros(p)  # losses are never negative
        root = True
        while len(f0):
            if not self.begin_iteration(tuple_lb):
                return
            while self.capacity < len(f0) and self.capacity < self.max_capacity:
                self.capacity *= 2
            self.capacity_history.append(self.capacity)
            children = []
            for b0 in range(0, len(f0), self.capacity):  # bounded memory per block
                block = (x[b0 : b0 + self.capacity] for x in (f0, lo, hi, F1, F2))
                children.append((yield from self.step(*block, root=root)))
            f0, lo, hi, F1, F2, tuple_lb = (np.concatenate(x) for x in zip(*children))
            root = False
            self.report(tuple_lb)
        self.lower_bound = self.incumbent - self.tolerance()

    def begin_iteration(self, tuple_lb: np.ndarray) -> bool:
        """Record the proved bound; False (status "time_limit") when time is up."""
        self.lower_bound = min(self.incumbent, float(tuple_lb.min())) - self.tolerance()
        if self.time_limit is not None and self.elapsed() > self.time_limit:
            self.status = "time_limit"
            return False
        self.iterations += 1
        self.frontier_sizes.append(len(tuple_lb))
        self.tuples_explored += len(tuple_lb)
        return True

    def report(self, tuple_lb: np.ndarray) -> None:
        if self.progress is None:
            return
        lower = min(self.incumbent, float(tuple_lb.min(initial=np.inf)))
        self.progress(
            {
                "iteration": self.iterations,
                "frontier": int(len(tuple_lb)),
                "incumbent": self.incumbent,
                "lower_bound": lower,
                "gap": self.incumbent - lower,
                "elapsed": self.elapsed(),
            }
        )

    def step(self, f0, lo, hi, F1, F2, *, root: bool = False):
        """One Quant-BnB iteration over a block of tuples; returns the children.

        With `root`, every tuple spans its whole threshold range [0, u(f0)], whose ends
        need no sweep (an empty side has loss 0, the other side is the best stump of
        all samples), so the s+1 swept cuts all fall inside: s+2 pieces for one sweep.
        """
        problem, s = self.problem, self.s
        T, p = F1.shape
        n_swept = s + 1
        j = np.arange(n_swept)
        if root:
            swept = ((j[None, :] + 1) * hi[:, None]) // (n_swept + 1)
        else:
            swept = lo[:, None] + (j[None, :] * (hi - lo)[:, None]) // s  # almost equi-spaced
        pos = problem.cut_pos[f0[:, None], swept]
        ti, fi = np.nonzero(F1 | F2)
        pre, suf = yield "full", (f0[ti], fi, pos[ti])
        P = np.full((T, n_swept, p), np.inf)
        S = np.full((T, n_swept, p), np.inf)
        in1, in2 = F1[ti, fi], F2[ti, fi]
        P[ti[in1], :, fi[in1]] = pre[in1]
        S[ti[in2], :, fi[in2]] = suf[in2]
        cuts = swept
        if root:
            everything = np.where(F1, self.stump_of_all()[0][None, :], np.inf)[:, None, :]
            nothing = np.where(F1, 0.0, np.inf)[:, None, :]
            P = np.concatenate([nothing, P, everything], axis=1)
            S = np.concatenate([everything, S, nothing], axis=1)
            cuts = np.concatenate([lo[:, None], swept, hi[:, None]], axis=1)
        n_cuts = cuts.shape[1]

        # Step 1: every tree whose root cut is some t_j is evaluated exactly.
        best_p, best_s = P.min(axis=2), S.min(axis=2)
        value = best_p + best_s
        flat = int(np.argmin(value))
        i, jj = divmod(flat, n_cuts)
        if value[i, jj] < self.incumbent:
            splits = functools.partial(
                self.depth2_splits,
                int(f0[i]), int(cuts[i, jj]), int(np.argmin(P[i, jj])), int(np.argmin(S[i, jj])),
            )
            self.offer(float(value[i, jj]), splits)

        # Step 2: prune each piece [t_{j-1}, t_j] with W0 = P[j-1, f1] + S[j, f2].
        left_p, right_s = P[:, :-1, :], S[:, 1:, :]  # (T, pieces, p)
        min_left, min_right = left_p.min(axis=2), right_s.min(axis=2)
        keep1 = F1[:, None, :] & self.can_improve(left_p + min_right[..., None])
        keep2 = F2[:, None, :] & self.can_improve(min_left[..., None] + right_s)
        piece_lb = min_left + min_right
        piece_lo, piece_hi = cuts[:, :-1], cuts[:, 1:]
        alive = (piece_hi - piece_lo >= 2) & keep1.any(axis=2) & keep2.any(axis=2)
        child_lo, child_hi = piece_lo + 1, piece_hi - 1  # endpoints are solved exactly
        if problem.task == "classification" and alive.any():
            keep1, keep2, piece_lb, child_lo, child_hi = self.slack(
                f0, P, S, piece_lo, piece_hi, keep1, keep2, piece_lb, child_lo, child_hi, alive
            )
            alive &= (child_lo <= child_hi) & keep1.any(axis=2) & keep2.any(axis=2)
        if self.bound != "w0" and alive.any():
            keep1, keep2, piece_lb, alive = yield from self.refine(
                f0, lo, hi, piece_lo, piece_hi, left_p, right_s, keep1, keep2, piece_lb, alive
            )
        ti, tj = np.nonzero(alive)
        return (
            f0[ti],
            child_lo[ti, tj],
            child_hi[ti, tj],
            keep1[ti, tj],
            keep2[ti, tj],
            piece_lb[ti, tj],
        )

    def slack(self, f0, P, S, piece_lo, piece_hi, keep1, keep2, piece_lb, child_lo, child_hi,
              alive):
        """Classification only: bounds from moving a cut by a few samples (DESIGN.md 3).

        Moving the root cut so that samples of total weight x change sides changes
        each side's best-stump loss by at most x. For a root cut inside a piece whose
        samples weigh W, with x the weight between t_{j-1} and the cut:
        `P(t) >= max(P_a, P_b - (W - x))` and `S(t) >= max(S_b, S_a - x)`. Minimised
        over x this gives the pair bound `max(P_a + S_b, P_b + S_a - W)`; the x where
        it can still beat the incumbent form an interval, which shrinks the piece.
        """
        problem = self.problem
        pa, pb = P[:, :-1, :], P[:, 1:, :]  # (T, s, p)
        sa, sb = S[:, :-1, :], S[:, 1:, :]
        w_left = problem.weight_left[f0[:, None], piece_lo]
        width = problem.weight_left[f0[:, None], piece_hi] - w_left  # (T, s)
        keep1, keep2, piece_lb = keep1.copy(), keep2.copy(), piece_lb.copy()
        ti, tj = np.nonzero(alive)
        block = max(1, (1 << 22) // (keep1.shape[2] ** 2))
        for b0 in range(0, len(ti), block):
            i, j = ti[b0 : b0 + block], tj[b0 : b0 + block]
            pair = np.maximum(
                pa[i, j][:, :, None] + sb[i, j][:, None, :],
                pb[i, j][:, :, None] + sa[i, j][:, None, :] - width[i, j][:, None, None],
            )
            ok = self.can_improve(pair) & keep1[i, j][:, :, None] & keep2[i, j][:, None, :]
            keep1[i, j], keep2[i, j] = ok.any(axis=2), ok.any(axis=1)
            piece_lb[i, j] = np.maximum(piece_lb[i, j], pair.min(axis=(1, 2)))
        # Feasible x: P_a + S_a - x < U and P_b + S_b - W + x < U (with the pair's
        # other terms already checked above); a superset of the kept pairs is safe.
        big = np.inf
        min_pa = np.where(keep1, pa, big).min(axis=2)
        min_pb = np.where(keep1, pb, big).min(axis=2)
        min_sa = np.where(keep2, sa, big).min(axis=2)
        min_sb = np.where(keep2, sb, big).min(axis=2)
        child_lo, child_hi = self.shrink(
            f0, piece_lo, piece_hi, min_pa, min_pb, min_sa, min_sb, child_lo, child_hi, alive
        )
        return keep1, keep2, piece_lb, child_lo, child_hi

    def shrink(self, f0, piece_lo, piece_hi, pa, pb, sa, sb, child_lo, child_hi, alive):
        """Classification: narrow each piece to the root cuts that can still win.

        With x the weight between t_{j-1} and a root cut inside the piece (of weight
        W), the slack bound exceeds the incumbent U unless P_a + S_a - x < U and
        P_b + S_b - W + x < U. `pa`..`sb`: `(T, pieces)` lower bounds (minimised over
        the child features still allowed).
        """
        problem = self.problem
        w_left = problem.weight_left[f0[:, None], piece_lo]
        width = problem.weight_left[f0[:, None], piece_hi] - w_left
        slackness = 0.0 if self.exact else self.tolerance()
        x_low = pa + sa - self.incumbent - slackness  # need x > x_low
        x_high = self.incumbent + slackness - pb - sb + width  # need x < x_high
        child_lo, child_hi = child_lo.copy(), child_hi.copy()
        for root in np.unique(f0[np.nonzero(alive)[0]]):
            sel = alive & (f0 == root)[:, None]
            table = problem.weight_left[root, : problem.n_thresholds[root] + 1]
            # Strict inequalities for exact counts, non-strict within the tolerance.
            first = np.searchsorted(table, w_left[sel] + x_low[sel],
                                    side="right" if self.exact else "left")
            last = np.searchsorted(table, w_left[sel] + x_high[sel],
                                   side="left" if self.exact else "right") - 1
            child_lo[sel] = np.maximum(child_lo[sel], first)
            child_hi[sel] = np.minimum(child_hi[sel], last)
        return child_lo, child_hi

    def refine(self, f0, lo, hi, piece_lo, piece_hi, left_p, right_s, keep1, keep2, piece_lb,
               alive):
        """Tighten W0 to W1_{s'}, W2 or L2 on the pieces that W0 kept (Lemma key-ineq)."""
        problem = self.problem
        ti, tj = np.nonzero(alive)
        a, b = piece_lo[ti, tj], piece_hi[ti, tj]  # threshold indices of each piece
        width = b - a
        if self.bound == "w1":
            # The paper's s' = 0.6 n s / (b - a), counted in samples rather than
            # thresholds so that a gathered piece costs about 0.6 n per row. With
            # s' = 1, W1 equals W0: such pieces are not refined.
            parent = problem.cut_pos[f0[ti], hi[ti]] - problem.cut_pos[f0[ti], lo[ti]]
            sub = np.floor(W1_FACTOR * problem.n * self.s / np.maximum(parent, 1))
            sub = np.minimum(sub.astype(np.int64), np.minimum(width, W1_MAX_SUBCUTS))
            # Pieces holding a large share of the samples would need a full-length scan
            # per sub-cut; measured, that costs more than the pruning it buys.
            samples = problem.cut_pos[f0[ti], b] - problem.cut_pos[f0[ti], a]
            useful = (sub >= 2) & (samples * W1_MAX_SHARE <= problem.n)
            ti, tj, a, b, width, sub = (x[useful] for x in (ti, tj, a, b, width, sub))
            if len(ti) == 0:
                return keep1, keep2, piece_lb, alive
        else:
            sub = width  # every threshold of the piece
        n_cuts = int(sub.max()) + 1
        k = np.minimum(np.arange(n_cuts)[None, :], sub[:, None])
        sub_t = a[:, None] + (k * width[:, None]) // sub[:, None]  # (N, K'), padded
        roots = f0[ti]
        sub_pos = problem.cut_pos[roots[:, None], sub_t]
        rows_piece, rows_f = np.nonzero(keep1[ti, tj] | keep2[ti, tj])
        args = (roots[rows_piece], rows_f)
        if self.bound == "l2":
            pre, suf = yield "full", (*args, sub_pos[rows_piece])
        else:
            mid_lo = problem.cut_pos[roots, a]
            mid_hi = problem.cut_pos[roots, b]
            pre, suf = yield "window", (
                *args, mid_lo[rows_piece], mid_hi[rows_piece], sub_pos[rows_piece]
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
        new1 = keep1[ti, tj] & self.can_improve((term1 + min2[..., None]).min(axis=1))
        new2 = keep2[ti, tj] & self.can_improve((term2 + min1[..., None]).min(axis=1))
        keep1, keep2 = keep1.copy(), keep2.copy()
        keep1[ti, tj], keep2[ti, tj] = new1, new2
        piece_lb = piece_lb.copy()
        piece_lb[ti, tj] = np.maximum(piece_lb[ti, tj], (min1 + min2).min(axis=1))
        alive = alive & keep1.any(axis=2) & keep2.any(axis=2)
        return keep1, keep2, piece_lb, alive

    def outcome(self) -> tuple[float, float, object]:
        """`(lower bound, objective or inf, splits or None)` for use as a subtree."""
        found = self.splits is not None
        upper = self.incumbent if found else np.inf
        if self.status == "optimal":
            return self.incumbent - self.tolerance(), upper, self.splits
        return min(self.lower_bound, self.incumbent), upper, self.splits

    # -- result -----------------------------------------------------------------------
