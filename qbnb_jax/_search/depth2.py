"""Quant-BnB for depth 2 (paper, Algorithm 1) over every problem of a `Search` at once.

The frontier of alive tuples `(problem, f0, [a, b], F1, F2)` of every problem lives in
one `Frontier` record (`frontier.py`) of host numpy arrays, so each iteration costs a
few dozen numpy calls however many problems there are; the iterations' O(n) work
happens in the device sweeps of `_device/kernels.py`, batched over (problem, tuple,
feature) rows. A single solve is one problem; a batch (`solve_batch`) or the sides of a
deeper tree's root cuts are many. Per iteration:

1. cut the tuple's root interval at s + 1 almost equi-spaced thresholds t_1..t_{s+1}
   strictly inside its two ends (cuts evaluated before, or the trivial 0 and u(f0));
2. sweep: `prefix[j, f] = L1(prefix_{t_j}, f)`, `suffix[j, f] = L1(suffix_{t_j}, f)`;
3. Step 1 (upper bound V_s): every tree with root cut t_j is now evaluated exactly;
4. Step 2 (Proposition quantile-prune): for each of the s + 2 pieces between the ends
   and the cuts, keep the child features whose lower bound (W0, then W1_{s'}, W2 or
   L2) can still beat the problem's incumbent; the ends enter as carried bounds;
5. surviving pieces become children over their open interval, whose ends carry the
   bounds of step 2 (not re-swept: that sweeps fewer cut-elements than re-sweeping
   them, most on datasets with many thresholds).

Incumbents live in the search's `Incumbents` record, indexed by problem. Each problem
follows exactly the path it would follow alone: the frontier keeps every problem's
tuples in their own order and all decisions are per problem.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qbnb_jax._device.kernels import CHANNELS_MAJOR_FROM_CLASSES, CLASS_LANE_ROWS
from qbnb_jax._device.runner import KernelRunner, pow2_at_least
from qbnb_jax._problem.data import ThresholdTables
from qbnb_jax._problem.host import row_searchsorted, stumps_of_all_shared, stumps_of_each
from qbnb_jax._problem.leaf_limits import root_cut_range
from qbnb_jax._search.class_bound import applies, leaf_count_bounds, narrow
from qbnb_jax._search.frontier import CutLosses, Frontier, PieceBounds, PieceFeatures, Pieces
from qbnb_jax._search.pair_bounds import PairInputs, pair_bounds
from qbnb_jax._search.penalty import (
    LEAF_SPEC,
    SideLeaves,
    all_leaf_loss,
    penalise_sweep,
    side_values,
)
from qbnb_jax._search.search import Search
from qbnb_jax._search.seeds import SearchExits, SeedTuples, start_exits, step_exits
from qbnb_jax._search.state import Incumbents

# The paper's s' = floor(0.6 n s / (b - a)) for W1, capped to keep rows short.
W1_FACTOR = 0.6
W1_MAX_SUBCUTS = 64
W1_MAX_SHARE = 8  # W1 refines only pieces with at most n / 8 samples
# Tuples processed per block: the host arrays of one step hold tuples x (s + 3) x p
# entries, at most MAX_BLOCK_ELEMENTS (8 MB of float64) per array, so memory stays
# bounded however many features there are. With few features that allows thousands of
# tuples, which lets the problem-lane sweep take a batch's first iteration whole.
MAX_BLOCK_ELEMENTS = 1 << 20
# Where the leaf-count bound applies, iteration 1 sweeps first the tuples of each
# problem's best root stumps (the head), as many as fit with the greedy start's p rows
# in one call a thread (`head`); the others are narrowed by the incumbent the head
# leaves.
HEAD_THREADS = 2
REPORT_EVERY = 0.5  # seconds between progress reports inside an anytime iteration


class KernelRequest(NamedTuple):
    """A sweep the search asks for: `runner.<kind>(*args, problem=...)`."""

    kind: str  # "full" or "window"
    args: tuple
    problem: np.ndarray  # (rows,) the search's problem of each row


def min_last(a: np.ndarray) -> np.ndarray:
    """`a.min(axis=-1)` for a short last axis (the p features): one `np.minimum` per
    feature over whole slices, much faster than numpy's reduction over short rows."""
    if a.shape[-1] == 0 or a.shape[-1] > 32:
        return a.min(axis=-1)
    out = a[..., 0].copy()
    for k in range(1, a.shape[-1]):
        np.minimum(out, a[..., k], out=out)
    return out


def solve_depth2(search: Search, tables: ThresholdTables | None = None,
                 runner_rows: np.ndarray | None = None, *, seeds: SeedTuples | None = None,
                 record_exits: bool = False) -> SearchExits | None:
    """Solve every problem of `search` (all with the same number of features).

    `search.runner` (default: a new one for its only problem) sweeps problem q as its
    data's problem `runner_rows[q]` (default q; one problem: the runner's
    `problem_index`). `tables`: the problems' stacked threshold tables, if known.
    `seeds`: initial tuples of the problems they name (`_search/seeds.py`); with
    `record_exits`, returns the bound each root threshold left the search with. Both
    apply to searches without leaf limits, penalties or leaf budgets (None returned).
    """
    if search.runner is None:
        search.runner = KernelRunner(search.problems[0])
    depth2 = Depth2Search(search, tables, runner_rows, seeds=seeds, record_exits=record_exits)
    depth2.run()
    return None if depth2.exits is None else SearchExits.concatenate(depth2.exits)


class Depth2Search:
    """Depth-2 Quant-BnB for the problems of `search`, in one frontier.

    The problems' sample counts may differ (tables are padded). Each starts from its
    own incumbent (a cutoff given to `Search`). `tables` and `runner_rows`: as for
    `solve_depth2`.
    """

    def __init__(self, search: Search, tables: ThresholdTables | None = None,
                 runner_rows: np.ndarray | None = None, *, seeds: SeedTuples | None = None,
                 record_exits: bool = False):
        self.search = search
        self.incumbents: Incumbents = search.incumbents
        self.options = search.options
        if runner_rows is None:
            runner_rows = (np.arange(search.n_problems) if search.n_problems > 1
                           else [search.runner.problem_index])
        self.runner_rows = np.asarray(runner_rows)
        problems = search.problems
        self.p = problems[0].p
        self.capacity = self.options.capacity
        fits = pow2_at_least(MAX_BLOCK_ELEMENTS // (self.p * (self.options.s + 3)) + 1) // 2
        self.max_capacity = max(self.capacity, fits)
        if tables is None:
            tables = stack_tables(problems)
        self.cut_pos, self.slack_left, self.n_thresholds = tables[:3]
        self.stumps = None  # (losses, positions) of every problem, when the tables have them
        if tables.stump_loss is not None:
            self.stumps = tables.stump_loss, tables.stump_position
        self.n_samples = np.array([pr.n for pr in problems])
        # min_samples_leaf / min_weight_fraction_leaf: one problem (see `solve`)
        self.limits = problems[0].leaf_limits
        self.penalty = self.options.penalty
        self.leaf_sides = search.leaf_sides
        self.pruned = bool(self.penalty) or self.leaf_sides is not None  # nodes may stay leaves
        self.leaves = SideLeaves(problems) if self.pruned else None
        # sides of a root cut are stumps: two leaves each (`class_bound.py`); the
        # bounds are built at the first narrowing
        self.leaf_bound_on = (self.options.leaf_count_bound and applies(problems, 2)
                              and not self.pruned)
        self.leaf_bounds = None
        self.reported = 0.0  # elapsed seconds at the last report inside an iteration
        # a subset's bounds hold on a superset for plain losses only (`_search/seeds.py`)
        plain = not self.pruned and self.limits is None
        self.seeds = seeds if plain and seeds is not None and len(seeds.seeded) else None
        self.exits: list[SearchExits] | None = [] if plain and record_exits else None

    # -- driver -------------------------------------------------------------------------
    def run(self) -> None:
        """Solve every problem, answering kernel requests with the search's runner."""
        steps = self.steps()
        runner = self.search.runner
        try:
            request = next(steps)
            while True:
                sweep = getattr(runner, request.kind)
                result = sweep(*request.args, problem=self.runner_rows[request.problem])
                if self.pruned and request.kind in ("full", "limited"):
                    # a window's raw L1 stays valid next to penalised ends (design.md);
                    # a limited sweep's columns -k - 1 are its constrained stumps at k,
                    # penalised alike (both keep the bounds' properties)
                    f0, _, cuts = request.args
                    positions = np.where(cuts < 0, -cuts - 1, cuts)
                    result = penalise_sweep(self.leaves, self.penalty, self.leaf_sides,
                                            request.problem, f0, positions, *result)
                request = steps.send(result)
        except StopIteration:
            pass

    def steps(self):
        """The search as a generator of `KernelRequest`s."""
        search, p = self.search, self.p
        n_problems = search.n_problems
        greedy = self.greedy()
        start = next(greedy)  # the greedy start's sweep; `stump_all` is known
        if not self.shares_first_sweep(start):
            self.finish(greedy, (yield start))
            greedy = None
        problem = np.repeat(np.arange(n_problems), p)
        # Root cuts lo..hi lie strictly between two ends whose sides are bounded per
        # child feature (see `step`). At first the ends are the trivial cuts 0 (nothing
        # left) and u(f0) (everything left): a side is empty or the best stump of all.
        everything = self.stump_all[problem]
        nothing = np.zeros_like(everything)
        if self.pruned:  # penalised sides; the prefix carries the root's penalty
            leaf_all = np.array([all_leaf_loss(pr) for pr in search.problems])
            left, right = side_values(leaf_all, self.stump_all, self.penalty, self.leaf_sides)
            ends = np.stack([nothing + self.penalty, right[problem],
                             left[problem] + self.penalty, nothing], axis=1)
        else:
            ends = np.stack([nothing, everything, everything, nothing], axis=1)
        frontier = Frontier(
            problem=problem,
            root=np.tile(np.arange(p), n_problems),
            lo=np.ones(n_problems * p, dtype=np.int64),
            hi=self.n_thresholds.reshape(-1) - 1,
            left_features=np.ones((n_problems * p, p), dtype=bool),
            right_features=np.ones((n_problems * p, p), dtype=bool),
            ends=ends,
            lower_bound=np.zeros(n_problems * p),  # losses are never negative
        )
        if self.limits is not None:
            frontier = self.limit_roots(frontier)
        if self.exits is not None:
            self.exits.append(start_exits(self.cut_pos, self.n_thresholds, self.stump_all))
        if self.seeds is not None:
            frontier = self.seeded(frontier)
        frontier = frontier.take(frontier.lo <= frontier.hi)  # a constant feature: no cut
        if self.leaf_bound_on:  # each problem's best root stumps first: the head
            frontier = frontier.take(np.lexsort(
                (self.stump_all[frontier.problem, frontier.root], frontier.problem)))
        if greedy is not None and not frontier.size:
            self.finish(greedy, (yield start))
            greedy = None
        first = True
        while frontier.size:
            if not search.begin_iteration(frontier.lower_bound, frontier.problem):
                break
            while self.capacity < frontier.size and self.capacity < self.max_capacity:
                self.capacity *= 2
            for q in np.unique(frontier.problem):
                search.stats.capacity_history[q].append(self.capacity)
            children = []
            rest = None
            if first and self.leaf_bound_on:  # the head, then the rest narrowed
                head = self.head(frontier)
                frontier, rest = frontier.take(head), frontier.take(~head)
            while True:
                for b0 in range(0, frontier.size, self.capacity):  # bounded memory per block
                    if (b0 or children) and (
                            self.options.out_of_time() or self.options.anytime
                            and self.bound_inside(children, frontier, b0, rest)):
                        # they keep their bounds
                        children += [frontier.take(slice(b0, None))] + [rest] * (rest is not None)
                        rest = None
                        break
                    block = frontier.take(slice(b0, b0 + self.capacity))
                    if greedy is None:
                        children.append((yield from self.step(block)))
                    else:
                        children.append((yield from self.step_with(greedy, start, block)))
                        greedy = None
                if rest is None:
                    break
                frontier, rest = self.narrowed(rest), None
            first = False
            frontier = self.narrowed(Frontier.concatenate(children))
            search.report(frontier.lower_bound, frontier.problem)
        else:
            self.incumbents.prove_optimal(np.arange(n_problems))
        if greedy is not None:  # stopped before the first iteration
            self.finish(greedy, (yield start))

    def shares_first_sweep(self, start: KernelRequest) -> bool:
        """Whether the greedy start's sweep goes in one request with the first block's
        (`step_with`): one problem, full sweeps, and no time or gap limit that could end
        the search before the first iteration (which would leave that sweep unused).
        The first block's sweep depends on no incumbent, so every decision is the same;
        the request's rows fill the kernels' calls better (one call fewer on page)."""
        options = self.options
        return (self.search.n_problems == 1 and start.kind == "full"
                and options.time_limit is None and options.max_gap is None
                and not options.anytime)

    def head(self, frontier: Frontier) -> np.ndarray:
        """`(T,)` bool: the head of each problem's first tuples (its first ones, the
        frontier being in each problem's order of best root stumps)."""
        first_of = np.searchsorted(frontier.problem, frontier.problem)  # problem-major
        # rows a call: the class lanes' for fewer classes than the channels-major
        # sweeps take, about half that for more (their wider steps fill a call sooner)
        lanes = CLASS_LANE_ROWS
        if self.search.problems[0].n_channels >= CHANNELS_MAJOR_FROM_CLASSES:
            lanes //= 2
        rows = HEAD_THREADS * lanes
        return np.arange(frontier.size) - first_of < max(1, (rows - self.p) // self.p)

    def narrowed(self, frontier: Frontier) -> Frontier:
        """The tuples narrowed by the leaf-count bound (`class_bound.narrow`), where it
        applies."""
        if not self.leaf_bound_on or not frontier.size:
            return frontier
        if self.leaf_bounds is None:  # after the greedy start and the head: each
            # problem decides alike alone and in a batch (`leaf_count_bounds`)
            self.leaf_bounds = leaf_count_bounds(self.search.problems, 2, self.incumbents)
        # kept tuples keep their spans: a sweep costs the same whatever a tuple's
        # span, and ends moved in carry weaker bounds than the ones they replace
        # (measured on generated sets of 4 to 30 classes: the same or fewer
        # cut-elements, up to 40% fewer, than shrinking them)
        return narrow(frontier, self.leaf_bounds, self.incumbents, self.slack_left,
                      shrink=False)

    @staticmethod
    def finish(greedy, result) -> None:
        """Hand the greedy start its sweep's result (it asks for nothing more)."""
        try:
            greedy.send(result)
        except StopIteration:
            return
        raise RuntimeError("the greedy start asked for a second sweep")

    def step_with(self, greedy, start: KernelRequest, block: Frontier):
        """`step(block)`, its first sweep in one request with the greedy start's
        `start`, whose result the greedy start takes first (it offers its incumbent
        before the step prunes, as when the two are swept apart)."""
        step = self.step(block)
        own = next(step)
        assert own.kind == start.kind
        rows = len(start.problem)
        pre, suf = yield KernelRequest(
            own.kind, tuple(np.concatenate([a, b]) for a, b in zip(start.args, own.args)),
            np.concatenate([start.problem, own.problem]))
        self.finish(greedy, (pre[:rows], suf[:rows]))
        try:
            request = step.send((pre[rows:], suf[rows:]))
            while True:
                request = step.send((yield request))
        except StopIteration as done:
            return done.value

    def limit_roots(self, frontier: Frontier) -> Frontier:
        """The first tuples narrowed to the root cuts whose both sides may be leaves."""
        problems = self.search.problems
        lo, hi = frontier.lo.copy(), frontier.hi.copy()
        for i, (q, f0) in enumerate(zip(frontier.problem, frontier.root)):
            pr = problems[q]
            t_min, t_max = root_cut_range(pr.leaf_limits, pr.cut_pos[f0],
                                          pr.weight[pr.perm[f0]], int(pr.n_thresholds[f0]))
            lo[i], hi[i] = max(lo[i], t_min), min(hi[i], t_max)
        return self.moved_in(frontier, lo, hi)

    def seeded(self, frontier: Frontier) -> Frontier:
        """The first tuples with the seeded problems' replaced by their seeds (a seeded
        problem without any has no tree that can beat its cutoff: no tuple), in
        frontier order."""
        seeds, p = self.seeds, self.p
        # the first frontier: problem q's tuple of root f1 is row q * p + f1
        moved = self.moved_in(frontier.take(seeds.problem * p + seeds.root), seeds.lo, seeds.hi)
        # either set of ends is valid (both are lower bounds): the larger of each
        moved = moved._replace(ends=np.maximum(moved.ends, seeds.ends))
        rest = frontier.take(~np.isin(frontier.problem, seeds.seeded))
        merged = Frontier.concatenate([rest, moved])
        return merged.take(np.lexsort((merged.lo, merged.root, merged.problem)))

    def moved_in(self, frontier: Frontier, lo: np.ndarray, hi: np.ndarray) -> Frontier:
        """First tuples (ends the trivial cuts 0 and u(f0)) over lo..hi instead.

        Their ends move in from the trivial cuts as `children` moves a child's: the
        slack bounds S_lo and P_hi lose the slack of the samples passed over (docs/design.md,
        "Leaf limits"); the monotone bounds P_lo = S_hi = 0 stay valid.
        """
        ends = frontier.ends.copy()
        q, f0, wl = frontier.problem, frontier.root, self.slack_left
        last = self.n_thresholds[q, f0]
        ends[:, 1] -= (wl[q, f0, np.maximum(lo - 1, 0)] - wl[q, f0, 0])[:, None]
        ends[:, 2] -= (wl[q, f0, last] - wl[q, f0, np.minimum(hi + 1, last)])[:, None]
        return frontier._replace(lo=lo, hi=hi, ends=ends)

    def bound_inside(self, children: list[Frontier], frontier: Frontier, b0: int,
                     rest: Frontier | None = None) -> bool:
        """Anytime, between blocks: record (and at most every REPORT_EVERY seconds,
        report) the bound of the children so far, the tuples from `b0` on and those
        of `rest` (not swept yet this iteration); True when that meets `max_gap`."""
        search = self.search
        parts = children + [frontier.take(slice(b0, None))] + [rest] * (rest is not None)
        lower = np.concatenate([c.lower_bound for c in parts])
        problem = np.concatenate([c.problem for c in parts])
        search.record_bounds(lower, problem)
        if search.elapsed() >= self.reported + REPORT_EVERY:
            self.reported = search.elapsed()
            search.report(lower, problem)
        return search.gap_reached(np.unique(problem))

    # -- the greedy start -----------------------------------------------------------------
    def greedy(self):
        """Greedy depth-2 tree per problem: the best stump, then the best stump per side.

        The sides come from one kernel sweep (every feature at the root's cut), the
        same kernel the search uses; only the winning stumps are rebuilt on the host.
        """
        problems, p = self.search.problems, self.p
        n_problems = len(problems)
        if self.pruned:  # the root may stay a leaf
            for q, pr in enumerate(problems):
                self.incumbents.offer(q, all_leaf_loss(pr), LEAF_SPEC)
        if self.stumps is not None:  # computed by the reweighting pass
            losses, positions = self.stumps
        elif n_problems > 1 and all(pr.perm is problems[0].perm for pr in problems):
            losses, positions = stumps_of_all_shared(problems)  # a batch of weightings
        else:
            losses, positions = stumps_of_each(problems)
        self.stump_all = losses  # (n_problems, p)
        every = np.arange(n_problems)
        root = losses.argmin(axis=1)
        k = positions[every, root]
        # s + 1 copies of the cut: the shape of the search's own sweeps, so no compile.
        cuts = np.repeat(np.repeat(k, p)[:, None], self.options.s + 1, axis=1)
        kind = "full"
        if self.limits is not None:  # constrained stumps, in `step`'s shape
            kind, cuts = "limited", np.concatenate([-cuts - 1, -cuts - 1], axis=1)
        pre, suf = yield KernelRequest(
            kind, (np.repeat(root, p), np.tile(np.arange(p), n_problems), cuts),
            np.repeat(every, p))
        pre, suf = pre[:, 0].reshape(n_problems, p), suf[:, 0].reshape(n_problems, p)
        f1, f2 = pre.argmin(axis=1), suf.argmin(axis=1)
        value = pre[every, f1] + suf[every, f2]
        # the root's threshold index: cut positions ascend to u(f), then repeat n
        t = row_searchsorted(self.cut_pos.reshape(n_problems * p, -1), every * p + root, k,
                             "left")
        self.incumbents.offer_depth2(every, value, np.stack([root, t, f1, f2], axis=-1))

    # -- one iteration --------------------------------------------------------------------
    def step(self, block: Frontier):
        """One Quant-BnB iteration over a block of tuples; returns their children.

        What is carried of a tuple's ends, `ends[:, :, f]` = (P_lo, S_lo, P_hi, S_hi),
        are lower bounds such that every root cut t inside has `L1(prefix_t, f) >=
        P_lo` and `L1(suffix_t, f) >= S_hi` (sides only grow) and `L1(suffix_t, f) >=
        S_lo - c(lo - 1, t)` and `L1(prefix_t, f) >= P_hi - c(t, hi + 1)`, with c the
        summed `sample_slack` of the samples that change sides (their weight, for
        classification). So the s + 1 swept cuts all fall inside and make s + 2
        pieces; W0 and the W1/W2 windows stay valid at the ends by super-additivity
        (the end's set is a subset of the piece's prefix).
        """
        n_swept = self.options.s + 1
        F1, F2, ends = block.left_features, block.right_features, block.ends
        T, p = F1.shape
        lo, hi = block.lo, block.hi
        j = np.arange(n_swept)
        swept = (lo - 1)[:, None] + ((j[None, :] + 1) * (hi - lo + 2)[:, None]) // (n_swept + 1)
        swept = np.clip(swept, lo[:, None], hi[:, None])
        pos = self.cut_pos[block.problem[:, None], block.root[:, None], swept]
        ti, fi = np.nonzero(F1 | F2)
        in1, in2 = F1[ti, fi], F2[ti, fi]

        def spread(pre, suf):
            prefix = np.full((T, n_swept, p), np.inf)
            suffix = np.full((T, n_swept, p), np.inf)
            prefix[ti[in1], :, fi[in1]] = pre[in1]
            suffix[ti[in2], :, fi[in2]] = suf[in2]
            return prefix, suffix

        def with_ends(prefix, suffix):
            return CutLosses(
                np.concatenate([np.where(F1, ends[:, 0], np.inf)[:, None], prefix,
                                np.where(F1, ends[:, 2], np.inf)[:, None]], axis=1),
                np.concatenate([np.where(F2, ends[:, 1], np.inf)[:, None], suffix,
                                np.where(F2, ends[:, 3], np.inf)[:, None]], axis=1),
            )

        if self.limits is None:
            pre, suf = yield KernelRequest("full", (block.root[ti], fi, pos[ti]),
                                           block.problem[ti])
            prefix, suffix = spread(pre, suf)
            achieved = losses = with_ends(prefix, suffix)
        else:  # unconstrained (monotone bounds) and constrained (achieved) stumps
            pre, suf = yield KernelRequest(
                "limited", (block.root[ti], fi, np.concatenate([pos, -pos - 1], axis=1)[ti]),
                block.problem[ti])
            losses = with_ends(*spread(pre[:, :n_swept], suf[:, :n_swept]))
            prefix, suffix = spread(pre[:, n_swept:], suf[:, n_swept:])
            achieved = with_ends(prefix, suffix)
        self.upper_bounds(block, swept, CutLosses(prefix, suffix))  # the ends are bounds
        cuts = np.concatenate([(lo - 1)[:, None], swept, (hi + 1)[:, None]], axis=1)
        pieces, keep = self.prune_w0(block, losses, cuts)
        if pieces.alive.any():
            pieces, keep = self.slack(block, losses, pieces, keep, achieved)
            pieces = pieces._replace(alive=pieces.alive & (pieces.child_lo <= pieces.child_hi)
                                     & keep.left.any(axis=2) & keep.right.any(axis=2))
        if self.options.bound != "w0" and pieces.alive.any():
            pieces, keep = yield from self.refine(block, losses, pieces, keep)
        if self.exits is not None:
            self.exits.append(step_exits(block, losses, pieces, swept, self.cut_pos,
                                         self.incumbents.value[block.problem]))
        return self.children(block, losses, pieces, keep, achieved)

    def prune_w0(self, block: Frontier, losses: CutLosses, cuts: np.ndarray
                 ) -> tuple[Pieces, PieceFeatures]:
        """Step 2: prune each piece [t_{j-1}, t_j] with W0 = prefix[j-1, f1] + suffix[j, f2]."""
        left_p, right_s = losses.prefix[:, :-1, :], losses.suffix[:, 1:, :]  # (T, pieces, p)
        min_left, min_right = min_last(left_p), min_last(right_s)
        q3 = block.problem[:, None, None]
        keep = PieceFeatures(
            block.left_features[:, None, :]
            & self.incumbents.can_improve(left_p + min_right[..., None], q3),
            block.right_features[:, None, :]
            & self.incumbents.can_improve(min_left[..., None] + right_s, q3),
        )
        piece_lo, piece_hi = cuts[:, :-1], cuts[:, 1:]
        pieces = Pieces(
            lo=piece_lo,
            hi=piece_hi,
            child_lo=piece_lo + 1,  # the cuts themselves are done
            child_hi=piece_hi - 1,
            lower_bound=min_left + min_right,
            alive=(piece_hi - piece_lo >= 2) & keep.left.any(axis=2) & keep.right.any(axis=2),
        )
        return pieces, keep

    def children(self, block: Frontier, losses: CutLosses, pieces: Pieces,
                 keep: PieceFeatures, achieved: CutLosses) -> Frontier:
        """The alive pieces as tuples over their open interval.

        `losses` give the ends' monotone bounds (P_lo, S_hi), `achieved` their slack
        bounds (S_lo, P_hi): the same arrays without leaf limits (see `slack`).
        """
        ti, tj = np.nonzero(pieces.alive)
        child_lo, child_hi = pieces.child_lo[ti, tj], pieces.child_hi[ti, tj]
        pa, sa = losses.prefix[ti, tj], achieved.suffix[ti, tj]  # (children, p)
        pb, sb = achieved.prefix[ti, tj + 1], losses.suffix[ti, tj + 1]
        # the children's ends moved in from the cuts
        q, roots = block.problem[ti], block.root[ti]
        wl = self.slack_left
        sa = sa - (wl[q, roots, child_lo - 1] - wl[q, roots, pieces.lo[ti, tj]])[:, None]
        pb = pb - (wl[q, roots, pieces.hi[ti, tj]] - wl[q, roots, child_hi + 1])[:, None]
        return Frontier(
            problem=q,
            root=roots,
            lo=child_lo,
            hi=child_hi,
            left_features=keep.left[ti, tj],
            right_features=keep.right[ti, tj],
            ends=np.stack([pa, sa, pb, sb], axis=1),
            lower_bound=pieces.lower_bound[ti, tj],
        )

    def upper_bounds(self, block: Frontier, cuts: np.ndarray, losses: CutLosses) -> None:
        """Step 1: every tree whose root cut is some t_j is evaluated exactly.

        Per problem, the first (tuple, cut) in frontier order with the least value
        becomes the incumbent when it beats the current one.
        """
        pr = block.problem
        value = min_last(losses.prefix) + min_last(losses.suffix)  # (T, n_cuts)
        best_j = value.argmin(axis=1)
        best = value[np.arange(len(value)), best_j]
        order = np.lexsort((np.arange(len(best)), best, pr))
        first = order[np.r_[True, pr[order][1:] != pr[order][:-1]]]  # each problem's best
        won = first[best[first] < self.incumbents.value[pr[first]]]
        jj = best_j[won]
        spec = np.stack([block.root[won], cuts[won, jj],
                         losses.prefix[won, jj].argmin(axis=1),
                         losses.suffix[won, jj].argmin(axis=1)], axis=-1)
        self.incumbents.offer_depth2(pr[won], best[won], spec)

    def slack(self, block: Frontier, losses: CutLosses, pieces: Pieces, keep: PieceFeatures,
              achieved: CutLosses) -> tuple[Pieces, PieceFeatures]:
        """Bounds from moving a cut by a few samples (docs/design.md, "Bounds and why
        they are valid", slack bound).

        Moving the root cut so that samples of total slack x change sides changes
        each side's best-stump loss by at most x (`data.sample_slack`: for
        classification the slack is the weight, for squared error a bound from the
        targets' range). For a root cut inside a piece whose samples' slack is W, with
        x the slack between t_{j-1} and the cut:
        `P(t) >= max(P_a, P_b - (W - x))` and `S(t) >= max(S_b, S_a - x)`. Minimised
        over x this gives the pair bound `max(P_a + S_b, P_b + S_a - W)`; the x where
        it can still beat the incumbent form an interval, which shrinks the piece.

        Under leaf limits a side's best stump is not monotone in the side's set, but
        adding samples to a constrained stump keeps it valid, so the slack terms P_b
        and S_a come from `achieved` (constrained) and the monotone terms P_a and S_b
        from `losses` (unconstrained, a lower bound of the constrained); without
        limits both are the same (docs/design.md, "Leaf limits").
        """
        pr, f0 = block.problem, block.root
        pa, pb = losses.prefix[:, :-1, :], achieved.prefix[:, 1:, :]  # (T, pieces, p)
        sa, sb = achieved.suffix[:, :-1, :], losses.suffix[:, 1:, :]
        width = (self.slack_left[pr[:, None], f0[:, None], pieces.hi]
                 - self.slack_left[pr[:, None], f0[:, None], pieces.lo])  # (T, pieces)
        keep1, keep2 = keep.left.copy(), keep.right.copy()
        piece_lb = pieces.lower_bound.copy()
        ti, tj = np.nonzero(pieces.alive)
        q = pr[ti]
        outcome = pair_bounds(
            PairInputs(pa[ti, tj], pb[ti, tj], sa[ti, tj], sb[ti, tj], width[ti, tj],
                       self.incumbents.value[q]),
            keep1[ti, tj], keep2[ti, tj])
        keep1[ti, tj], keep2[ti, tj] = outcome.keep_left, outcome.keep_right
        piece_lb[ti, tj] = np.maximum(piece_lb[ti, tj], outcome.least)
        # Feasible x: P_a + S_a - x < U and P_b + S_b - W + x < U (with the pair's
        # other terms already checked above); a superset of the kept pairs is safe.
        bounds = PieceBounds(
            prefix_lo=min_last(np.where(keep1, pa, np.inf)),
            prefix_hi=min_last(np.where(keep1, pb, np.inf)),
            suffix_lo=min_last(np.where(keep2, sa, np.inf)),
            suffix_hi=min_last(np.where(keep2, sb, np.inf)),
        )
        child_lo, child_hi = shrink_pieces(self.slack_left, self.incumbents, block.problem,
                                           block.root, pieces, bounds)
        pieces = pieces._replace(lower_bound=piece_lb, child_lo=child_lo, child_hi=child_hi)
        return pieces, PieceFeatures(keep1, keep2)

    def refine(self, block: Frontier, losses: CutLosses, pieces: Pieces, keep: PieceFeatures):
        """Tighten W0 to W1_{s'}, W2 or L2 on the pieces that W0 kept (Lemma key-ineq).

        A generator of `KernelRequest`s; returns the updated `(pieces, keep)`.
        """
        bound, s = self.options.bound, self.options.s
        ti, tj = np.nonzero(pieces.alive)
        a, b = pieces.lo[ti, tj], pieces.hi[ti, tj]  # threshold indices of each piece
        q, roots = block.problem[ti], block.root[ti]
        width = b - a
        if bound == "w1":
            # The paper's s' = 0.6 n s / (b - a), counted in samples rather than
            # thresholds so that a gathered piece costs about 0.6 n per row. With
            # s' = 1, W1 equals W0: such pieces are not refined.
            parent = (self.cut_pos[q, roots, block.hi[ti]]
                      - self.cut_pos[q, roots, block.lo[ti]])
            n = self.n_samples[q]
            sub = np.floor(W1_FACTOR * n * s / np.maximum(parent, 1))
            sub = np.minimum(sub.astype(np.int64), np.minimum(width, W1_MAX_SUBCUTS))
            # Pieces holding a large share of the samples would need a full-length scan
            # per sub-cut; measured, that costs more than the pruning it buys.
            samples = self.cut_pos[q, roots, b] - self.cut_pos[q, roots, a]
            useful = (sub >= 2) & (samples * W1_MAX_SHARE <= n)
            ti, tj, a, b, width, sub, q, roots = (
                x[useful] for x in (ti, tj, a, b, width, sub, q, roots)
            )
            if len(ti) == 0:
                return pieces, keep
        else:
            sub = width  # every threshold of the piece
        n_cuts = int(sub.max()) + 1
        k = np.minimum(np.arange(n_cuts)[None, :], sub[:, None])
        sub_t = a[:, None] + (k * width[:, None]) // sub[:, None]  # (N, K'), padded
        sub_pos = self.cut_pos[q[:, None], roots[:, None], sub_t]
        rows_piece, rows_f = np.nonzero(keep.left[ti, tj] | keep.right[ti, tj])
        if bound == "l2":
            pre, suf = yield KernelRequest(
                "full", (roots[rows_piece], rows_f, sub_pos[rows_piece]), q[rows_piece])
        else:
            mid_lo = self.cut_pos[q, roots, a]
            mid_hi = self.cut_pos[q, roots, b]
            pre, suf = yield KernelRequest(
                "window", (roots[rows_piece], rows_f, mid_lo[rows_piece], mid_hi[rows_piece],
                           sub_pos[rows_piece]), q[rows_piece])
        N, p = len(ti), keep.left.shape[2]
        A = np.full((N, n_cuts, p), np.inf)
        B = np.full((N, n_cuts, p), np.inf)
        k1 = keep.left[ti, tj][rows_piece, rows_f]
        k2 = keep.right[ti, tj][rows_piece, rows_f]
        A[rows_piece[k1], :, rows_f[k1]] = pre[k1]
        B[rows_piece[k2], :, rows_f[k2]] = suf[k2]
        if bound == "l2":
            term1, term2 = A, B
        else:
            term1 = A + losses.prefix[:, :-1, :][ti, tj][:, None, :]
            term2 = B + losses.suffix[:, 1:, :][ti, tj][:, None, :]
            if bound == "w1":  # drop the samples between consecutive sub-cuts
                term1, term2 = term1[:, :-1], term2[:, 1:]
        min1, min2 = term1.min(axis=2), term2.min(axis=2)  # (N, K)
        qq = q[:, None]
        new1 = keep.left[ti, tj] & self.incumbents.can_improve(
            (term1 + min2[..., None]).min(axis=1), qq)
        new2 = keep.right[ti, tj] & self.incumbents.can_improve(
            (term2 + min1[..., None]).min(axis=1), qq)
        keep1, keep2 = keep.left.copy(), keep.right.copy()
        keep1[ti, tj], keep2[ti, tj] = new1, new2
        piece_lb = pieces.lower_bound.copy()
        piece_lb[ti, tj] = np.maximum(piece_lb[ti, tj], (min1 + min2).min(axis=1))
        alive = pieces.alive & keep1.any(axis=2) & keep2.any(axis=2)
        return pieces._replace(lower_bound=piece_lb, alive=alive), PieceFeatures(keep1, keep2)


def shrink_pieces(slack_left: np.ndarray, incumbents: Incumbents, problem: np.ndarray,
                  root: np.ndarray, pieces: Pieces, bounds: PieceBounds
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Narrow pieces to the root cuts whose slack bound can still win:
    `(child_lo, child_hi)`.

    With x the slack between t_{j-1} and a root cut inside the piece (of slack W), the
    slack bound exceeds the incumbent U unless P_a + S_a - x < U and
    P_b + S_b - W + x < U. `slack_left[q, f0]`: summed sample slack left of each
    threshold index of problem q; `problem` and `root` (f0): `(T,)` per tuple;
    `pieces` and `bounds` are `(T, pieces)`.
    """
    q2 = problem[:, None]
    w_left = slack_left[q2, root[:, None], pieces.lo]
    width = slack_left[q2, root[:, None], pieces.hi] - w_left
    incumbent = incumbents.value[q2]
    x_low = bounds.prefix_lo + bounds.suffix_lo - incumbent  # need x > x_low
    x_high = incumbent - bounds.prefix_hi - bounds.suffix_hi + width  # need x < x_high
    child_lo, child_hi = pieces.child_lo.copy(), pieces.child_hi.copy()
    ti, tj = np.nonzero(pieces.alive)
    if len(ti) == 0:
        return child_lo, child_hi
    n_rows, p, width_t = slack_left.shape
    table = slack_left.reshape(n_rows * p, width_t)
    rows = problem[ti] * p + root[ti]
    # Strict inequalities: a tie cannot improve (docs/design.md, "Regression tolerance
    # rule"). Only the piece's own thresholds are searched: an answer outside them
    # leaves the piece whole or empty either way.
    lo_value, hi_value = w_left[ti, tj] + x_low[ti, tj], w_left[ti, tj] + x_high[ti, tj]
    window = pieces.lo[ti, tj], pieces.hi[ti, tj] + 1
    first = row_searchsorted(table, rows, lo_value, "right", *window)
    last = row_searchsorted(table, rows, hi_value, "left", *window) - 1
    child_lo[ti, tj] = np.maximum(child_lo[ti, tj], first)
    child_hi[ti, tj] = np.minimum(child_hi[ti, tj], last)
    return child_lo, child_hi


def stack_tables(problems: list) -> ThresholdTables:
    """The problems' threshold tables stacked, padded past each u(f) as t = u(f) is."""
    width = max(pr.n for pr in problems) + 1
    n_problems, p = len(problems), problems[0].p
    cut_pos = np.empty((n_problems, p, width), dtype=np.int64)
    slack_left = np.empty((n_problems, p, width))
    for q, pr in enumerate(problems):  # padding: "everything left", as t = u(f)
        cut_pos[q, :, : pr.n + 1] = pr.cut_pos
        cut_pos[q, :, pr.n + 1 :] = pr.n
        slack_left[q, :, : pr.n + 1] = pr.slack_left
        slack_left[q, :, pr.n + 1 :] = pr.slack_left[:, -1:]
    n_thresholds = np.stack([pr.n_thresholds for pr in problems]).astype(np.int64)
    return ThresholdTables(cut_pos, slack_left, n_thresholds)
