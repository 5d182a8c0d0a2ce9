"""Depth-3 searches of many problems in lockstep: their sides share depth-2 frontiers.

A depth-3 search (`deep.DeepSearch.deep_steps`) is a generator that asks, a group of
root cuts at a time, for the best depth-2 subtrees of sides of its root cuts. Solved
one problem at a time, a request holds at most 2 x SIDE_GROUP sides, so every group
is a handful of small depth-2 searches (a few dozen numpy calls and kernel calls per
iteration each) on layouts padded to the group's largest side. Here every problem's
search runs to its next request, the requests of all problems are solved together,
and all searches resume: one round per group. A round's sides are many, so they are
batched by their own padded length (`padded_length`, the bucket `for_compact`
uses): batches of hundreds of sides, and little padding.

Each problem still takes the path it takes alone: its requests and their cutoffs come
from its own state, and a side's outcome does not depend on which sides share its
frontier (depth-2 decisions are per problem, `_search/depth2.py`).
"""

from __future__ import annotations

import functools

import numpy as np

from qbnb_jax._device.kernels import SweepData, execution_plan, padded_length
from qbnb_jax._device.runner import GRID_MIN_PROBLEMS, KernelRunner
from qbnb_jax._problem.data import (
    CompactSides,
    Problem,
    SortedSamples,
    ThresholdTables,
    compact_sides,
    sorted_samples,
    two_class_stumps,
)
from qbnb_jax._problem.host import sse_stumps_from_prefix_sums
from qbnb_jax._search.deep import LEFT, SIDE_LAYOUT_BYTES, DeepSearch, side_threads
from qbnb_jax._search.depth2 import solve_depth2
from qbnb_jax._search.search import Search, depth2_splits
from qbnb_jax._search.seeds import SeedTuples, SideBounds, ThresholdExits, seed_batch
from qbnb_jax._search.state import SearchOptions

# Sides per depth-2 search of a round. Their problem count is padded to a power of four
# (`for_compact(count_base=4)`), so these are powers of four; a batch whose sides are fewer than
# SMALL_BATCH takes the next length bucket's sides too (less padding is not worth a
# search of its own).
MAX_BATCH = 256
SMALL_BATCH = 64
# Steps per octave of the batches' lengths (`for_compact`). A round's sides are many
# (a batch of MAX_BATCH spans a narrow range of sizes), so finer steps than a single
# solve's 4 cut the padding at little cost in batches: measured, 4% fewer cut-elements
# than 4 steps on 200 problems of 0/1 folds (16 steps: 6% fewer, 7% more kernel calls).
LENGTH_STEPS = 8
# The parallel plan's (an accelerator's) lengths are powers of two: each distinct length
# is a compile of seconds there, and padding costs it little.
ACCELERATOR_LENGTH_STEPS = 1
# Sides compacted together (`compact_sides`): a few dozen numpy calls per chunk instead
# of per side, on padded arrays small enough to stay in cache (sides of a batch are
# sorted by size, so a chunk pads little).
COMPACT_CHUNK = 16
# Sides of a `solve_batch` of two-class counts, whose problems reweight one shared layout,
# are weightings of it too (`_solve_on_layout`): its grid lanes take a side each, at a
# fraction of a row sweep's cost per sample, though a side sweeps all the layout's
# samples; and no side is compacted. Measured on 200 folds of `bidding` (n = 1,000):
# 3.0 s against 4.1 s compacted; 10 folds of all of `occupancy`, 2.3 s against 3.0 s.
# Rounds of fewer sides than the grid takes problems are compacted. A batch of sides
# holds a few tables of (side, feature, position) entries: LAYOUT_BYTES_PER_ENTRY bytes
# each (measured peak memory), at most LAYOUT_SIDES_BYTES a batch.
LAYOUT_SIDES_FROM = GRID_MIN_PROBLEMS
# A round whose sides make one batch leaves the second thread (`side_threads`) idle
# while the batch's host work runs. From this many padded (side, feature, position)
# entries its smaller and larger halves are searched apart, one beside the other
# (`split_round`). Measured on single depth-3 solves (alternating runs, best of 2-3):
# a generated 8,000 x 12 regression 11.7-12.6 -> 9.4-9.6 s, page 2.49-2.83 -> 2.15-2.18,
# segment 1.93 -> 1.75-1.78, occupancy 1.07-1.34 -> 0.93-1.10, query1 1.73-2.21 ->
# 1.72-1.73; bidding 0.36-0.40 -> 0.41 (two-class sides: little host work to hide).
# Rounds of small sides (concrete, fish) took longer split at any size: twice the
# kernel calls for little work each; below this limit they stay whole.
SPLIT_ROUND_ENTRIES = 1 << 18
LAYOUT_SIDES_BYTES = 1 << 28
LAYOUT_BYTES_PER_ENTRY = 32


def solve_deep_lockstep(searches: list[DeepSearch], runner: KernelRunner,
                        layout: Problem | None = None) -> None:
    """Run the depth-3 `searches` to the end, their side requests solved together.

    `runner`: sweeps for compacted sides (`for_compact`) with shared counters and
    compiled kernels. `layout`: the layout every search's problem reweights, where
    their sides may be solved as its weightings (`sides_on_layout_serve`). Searches of
    other depths, or with leaf budgets, solve their own requests (`solve_sides`) in
    the same rounds.
    """
    steps = {i: search.deep_steps() for i, search in enumerate(searches)}
    pending: dict[int, tuple] = {}
    sources: dict[int, SortedSamples] = {}  # each problem's, made at its first side

    def advance(i: int) -> None:
        try:
            pending[i] = next(steps[i])
        except StopIteration:
            pending.pop(i, None)
            del steps[i]

    for i in list(steps):
        advance(i)
    while pending:
        solve_round(searches, pending, runner, sources, layout)
        for i in list(pending):
            advance(i)
    for search in searches:  # what seeds the sides is not needed past the search
        search.side_bounds.clear()
        search.bound_cuts.clear()


def solve_round(searches: list[DeepSearch], pending: dict[int, tuple],
                runner: KernelRunner, sources: dict[int, SortedSamples],
                layout: Problem | None = None) -> None:
    """Solve the side requests `pending` `{search index: (keys, cutoffs)}`.

    `sources`: the problems' `SortedSamples` by search index, filled in as needed.
    `layout`: as for `solve_deep_lockstep`.

    The batches are independent depth-2 searches; two threads take them in turn, so
    that one's host work (compacting, tables, bookkeeping) runs while the other's
    kernels do. Each batch's outcome is the same on either thread.
    """
    owners, keys, sizes, cutoffs = [], [], [], []
    for i, (request_keys, request_cutoffs) in pending.items():
        search = searches[i]
        if search.depth != 3 or search.budgets is not None:
            search.solve_sides(request_keys, request_cutoffs)
            continue
        if i not in sources:
            sources[i] = sorted_samples(search.problem)
        before, n_positive = sources[i].positive_before, sources[i].perm.shape[1]
        for key, cutoff in search.pending_sides(request_keys, request_cutoffs).items():
            f0, k, which = key  # `search.side_size(key)`, from the sorted samples
            size = int(before[f0, k]) if which == LEFT else n_positive - int(before[f0, k])
            if size == 0:
                search.sides[key] = (0.0, 0.0, None)
                continue
            search.subproblems += 1
            owners.append(i)
            keys.append(key)
            sizes.append(size)
            cutoffs.append(cutoff)
    if not keys:
        return
    if layout is not None and _solve_on_layout(searches, owners, keys, cutoffs, sources,
                                               runner, layout):
        return
    side_options = searches[0].side_options

    def solve(batch: list[int]) -> None:
        if _out_of_time(searches, owners, keys, batch):
            return
        chunks = [compact_sides([sources[owners[j]] for j in part],
                                [searches[owners[j]].side_subset(keys[j])[1] for j in part])
                  for part in (batch[at: at + COMPACT_CHUNK]
                               for at in range(0, len(batch), COMPACT_CHUNK))]
        subs = [sub for chunk in chunks for sub in chunk.problems]
        sent: dict[str, np.ndarray] = {}
        search = Search(subs, side_options,
                        runner=runner.for_compact(subs, chunks, length_steps(), count_base=4,
                                                  host_out=sent),
                        cutoff=[cutoffs[j] for j in batch])
        tables = side_tables(chunks, sent)
        seeds, passed_over = side_seeds([searches[owners[j]] for j in batch],
                                        [keys[j] for j in batch], subs, tables,
                                        [cutoffs[j] for j in batch])
        record = any(seeds_apply(searches[owners[j]].problem) for j in batch)
        exits = solve_depth2(search, tables, seeds=seeds, record_exits=record)
        bounds = None
        if exits is not None:
            if passed_over is not None:
                exits = exits._replace(inherited=passed_over)
            bounds = exits.of_problems(np.array([sub.n for sub in subs]))
        for q, j in enumerate(batch):
            lower, upper, splits = search.outcome(q)
            owner = searches[owners[j]]
            owner.sides[keys[j]] = (lower, upper,
                                    lasting_splits(splits, sources[owners[j]], keys[j]))
            if bounds is not None:
                solved_bounds.append((j, bounds[q]))

    # A batch's depth-2 searches share one feature count (`solve_many` pads datasets of
    # different widths; padding features are never swept). Largest first: the last
    # batches taken are short, so both threads end together.
    widths = np.array([searches[i].problem.p for i in owners])
    batches = []
    for p in np.unique(widths):
        members = np.flatnonzero(widths == p)
        batches += [[int(members[j]) for j in batch]
                    for batch in lockstep_batches(np.asarray(sizes)[members], int(p))[::-1]]
    batches = split_round(batches, sizes, int(widths.max()))
    # a round's sides seed later rounds only, in request order: each batch's seeds are
    # the same whichever thread finishes first
    solved_bounds: list[tuple[int, SideBounds]] = []
    side_threads(solve, sorted(batches, key=lambda batch: -max(sizes[j] for j in batch)))
    for j, bounds in sorted(solved_bounds, key=lambda item: item[0]):
        searches[owners[j]].keep_side_bounds(keys[j], bounds)


def seeds_apply(problem: Problem) -> bool:
    """Whether the sides of `problem`'s depth-3 search are seeded from the solved sides
    they hold (`side_seeds`): not for two classes, whose sides a batch may solve as
    weightings of a shared layout (`sides_on_layout_serve`; a batch of integer and
    fractional weights counts both as floats), which are not seeded. Seeds change
    which of several equal trees a search finds first, and a problem's tree in a batch
    is the one it gets alone."""
    return not (problem.task == "classification" and problem.n_channels == 2)


def side_seeds(owners: list[DeepSearch], keys: list[tuple], subs: list[Problem],
               tables: ThresholdTables, cutoffs: list[float]
               ) -> tuple[SeedTuples | None, ThresholdExits | None]:
    """Initial tuples of a batch's sides (`subs`, side `keys[q]` of search `owners[q]`)
    that hold a solved side with kept bounds (`DeepSearch.nested_bounds`): their
    depth-2 searches start on the thresholds those bounds do not rule out
    (`_search/seeds.py`); and the bounds they inherit. None where no side has one."""
    seeded, bounds, in_subset = [], [], []
    for q, (owner, key, sub) in enumerate(zip(owners, keys, subs)):
        nested = owner.nested_bounds(key) if seeds_apply(owner.problem) else None
        if nested is None:
            continue
        (f0, k, which), side_bounds = nested
        before = owner.problem.rank[f0][sub.parent_ids] < k
        seeded.append(q)
        bounds.append(side_bounds)
        in_subset.append(before if which == LEFT else ~before)
    if not seeded:
        return None, None
    return seed_batch(np.array(seeded), bounds, in_subset, [subs[q].perm for q in seeded],
                      tables.cut_pos, tables.n_thresholds, np.asarray(cutoffs)[seeded])


def split_round(batches: list[list[int]], sizes: list[int], p: int) -> list[list[int]]:
    """A round's `batches` (each smallest side first), its only batch split into its
    smaller and larger halves where its padded tables hold at least
    SPLIT_ROUND_ENTRIES entries: two batches, one per thread. Each side's outcome is
    the same in either batch."""
    if len(batches) != 1 or len(batches[0]) < 2:
        return batches
    (batch,) = batches
    if len(batch) * max(sizes[j] for j in batch) * p < SPLIT_ROUND_ENTRIES:
        return batches
    half = len(batch) // 2
    return [batch[:half], batch[half:]]


def _out_of_time(searches: list[DeepSearch], owners: list[int], keys: list[tuple],
                 batch: list[int]) -> bool:
    """Past the time limit, a batch of sides not yet begun is not begun: each side
    gets the bound 0 (losses are never negative) and no tree. The round then counts as
    unsolved (`DeepSearch.step_deep`), so no tuple bound comes from these; setting up a
    batch of hundreds of sides would only run past the limit."""
    if not searches[0].side_options.out_of_time():
        return False
    for j in batch:
        searches[owners[j]].sides[keys[j]] = (0.0, np.inf, None)
    return True


def sides_on_layout_serve(layout: Problem) -> bool:
    """Whether the sides of problems that reweight `layout` (`Problem.reweighted`:
    integer class weights) are solved as weightings of it (`_solve_on_layout`): two
    classes, whose counts `sweep_grid` takes as signed integers. (Counts of up to 8
    classes go to its lanes too, but as weightings their sides gained only on 200
    folds of 1,000 rows of `page`; they lost on 10 folds of all of `page` and of
    `segment`, 100 folds of 1,000 rows of `bean` and 200 folds of a synthetic
    4-class set, also with rounds of fewer than 512 sides compacted: they are
    compacted.)"""
    return layout.loss_kind == "count" and layout.n_channels == 2 and layout.missing is None


def _solve_on_layout(searches: list[DeepSearch], owners: list[int], keys: list[tuple],
                     cutoffs: list[float], sources: dict[int, SortedSamples],
                     runner: KernelRunner, layout: Problem) -> bool:
    """Solve a round's sides `keys` (of searches `owners`) as weightings of the
    problems' shared `layout`; False (nothing solved) where the round is too small
    for the grid's lanes or a batch of its sides' tables too large.

    A side is its problem's weights with zeros outside it: `Problem.reweighted`
    numbers its thresholds as the compacted side's and its search takes the same
    path (docs/design.md, "Batching", sides as weightings), so its outcome and
    deferred spec are the compacted side's, built on that side when asked for
    (`lasting_splits`).
    """
    size = LAYOUT_SIDES_BYTES // (LAYOUT_BYTES_PER_ENTRY * layout.p * (layout.n + 1))
    if len(keys) < LAYOUT_SIDES_FROM or size < LAYOUT_SIDES_FROM:
        return False
    size = -(-len(keys) // -(-len(keys) // size))  # batches of about equal size
    side_options = searches[0].side_options

    def solve(batch: list[int]) -> None:
        if _out_of_time(searches, owners, keys, batch):
            return
        weights = np.zeros((len(batch), layout.n))
        for q, j in enumerate(batch):
            problem, side = searches[owners[j]].side_subset(keys[j])
            weights[q, side] = problem.weight[side]
        outcomes = depth2_on_layout(layout, weights, [cutoffs[j] for j in batch],
                                    side_options, runner)
        for (lower, upper, splits), j in zip(outcomes, batch):
            searches[owners[j]].sides[keys[j]] = (
                lower, upper, lasting_splits(splits, sources[owners[j]], keys[j]))

    side_threads(solve, [list(range(a, min(a + size, len(keys))))
                         for a in range(0, len(keys), size)])
    return True


def depth2_on_layout(layout: Problem, weights: np.ndarray, cutoffs: list[float],
                     options: SearchOptions, runner: KernelRunner) -> list[tuple]:
    """`Search.outcome` of depth-2 searches of two-class `layout` under each row of
    integer `weights`, with these cutoffs, in one frontier (set up as `solve_batch`
    sets up a depth-2 batch: the kernels' stat tables filled on the way)."""
    stat_tables = SweepData.shared_stat_buffers(layout, weights)
    problems, tables = layout.reweighted(weights, signed_out=stat_tables["sorted_scan"],
                                         mass_out=stat_tables["root_cum"])
    data = SweepData.from_problems([layout], problems, [0] * len(problems),
                                   stat_tables=stat_tables)
    search = Search(problems, options, runner=runner.for_data(problems[0], data),
                    cutoff=cutoffs)
    solve_depth2(search, tables, runner_rows=np.arange(len(problems)))
    return [search.outcome(q) for q in range(len(problems))]


def lasting_splits(splits, source: SortedSamples, key):
    """A side's `splits` as kept in its search's `sides`: a deferred depth-2 spec
    (`Search.deferred_splits`) built, when asked for, on side `key` compacted again
    from its problem's `source` (equal to the batch's compacted side), so that it
    holds no view of the batch's padded tables (a problem's incumbent keeps its
    sides' specs to the end of the batch)."""
    if isinstance(splits, functools.partial) and splits.func is depth2_splits:
        return functools.partial(_side_splits, source, key, splits.args[1:], splits.keywords)
    return splits


def _side_splits(source: SortedSamples, key, args: tuple, keywords: dict):
    f0, k, which = key
    left = source.problem.rank[f0] < k  # `DeepSearch.side_subset`
    (side,) = compact_sides([source], [left if which == LEFT else ~left]).problems
    return depth2_splits(side, *args, **keywords)


def side_tables(chunks: list[CompactSides], sent: dict[str, np.ndarray] | None = None
                ) -> ThresholdTables:
    """`depth2.stack_tables` of the sides compacted in `chunks`, from the chunks' padded
    tables, with their best stumps on every feature (what `Depth2Search.greedy` would
    compute side by side) for two-class counts, and for squared error where `sent`,
    the host tables of the sides' kernels (`SweepData.from_problems`' `host_out`),
    hold their prefix sums in each feature's order (`sse_stumps_from_prefix_sums`: the
    same numbers, without summing every side again).

    `two_class_stumps` gives `host.stump_losses`' losses and tie-breaks in integers,
    chunk by chunk (the chunks' tables are small enough to stay in cache): the signed
    counts are zero and the cuts invalid past each side's own n. Sides whose samples
    all weigh 1 (`CompactSides.unit_weight`) have `slack_left` equal to `cut_pos` and
    weights equal to their n.
    """
    subs = [sub for chunk in chunks for sub in chunk.problems]
    n, p = max(sub.n for sub in subs), subs[0].p
    cut_pos = np.empty((len(subs), p, n + 1), dtype=np.int64)
    unit = all(chunk.unit_weight for chunk in chunks)
    slack_left = None if unit else np.empty((len(subs), p, n + 1))
    n_thresholds = np.empty((len(subs), p), dtype=np.int64)
    stumps = all(chunk.signed is not None for chunk in chunks)
    losses, positions = [], []
    q = 0
    for chunk in chunks:  # padding: "everything left", as t = u(f)
        rows = slice(q, q + len(chunk.problems))
        width = chunk.cut_pos.shape[-1]
        cut_pos[rows, :, :width] = chunk.cut_pos
        cut_pos[rows, :, width:] = chunk.sizes[:, None, None]
        if not unit:
            slack_left[rows, :, :width] = chunk.slack_left
            slack_left[rows, :, width:] = chunk.slack_left[..., -1:]
        n_thresholds[rows] = chunk.n_thresholds
        if stumps:
            total = (chunk.sizes if unit else
                     np.array([sub.stats.sum() for sub in chunk.problems], dtype=np.int64))
            loss, position = two_class_stumps(chunk.signed, chunk.cut_valid, total)
            losses.append(loss)
            positions.append(position)
        q += len(chunk.problems)
    if unit:
        slack_left = cut_pos.astype(np.float64)
    tables = ThresholdTables(cut_pos, slack_left, n_thresholds)
    full_scan = (sent or {}).get("full_scan")
    if subs[0].loss_kind == "sse" and full_scan is not None and full_scan.shape[2] > 1:
        sizes = np.concatenate([chunk.sizes for chunk in chunks])
        loss, position = sse_stumps_from_prefix_sums(full_scan, sent["root_cum"],
                                                     sent["cut_valid"], sizes)
        return tables._replace(stump_loss=loss, stump_position=position)
    if not stumps:
        return tables
    return tables._replace(stump_loss=np.concatenate(losses),
                           stump_position=np.concatenate(positions))


def length_steps() -> int:
    """Steps per octave of the side batches' padded lengths on this execution plan."""
    return LENGTH_STEPS if execution_plan() == "sequential" else ACCELERATOR_LENGTH_STEPS


def lockstep_batches(sizes, p: int) -> list[list[int]]:
    """Indices of sides of these `sizes` (all positive), smallest first, in batches.

    A batch holds sides of one padded length, except that a batch of fewer than
    SMALL_BATCH sides takes the next lengths' too; at most MAX_BATCH sides and
    SIDE_LAYOUT_BYTES of presorted layouts (as `deep.size_batches`).
    """
    batches: list[list[int]] = []
    batch: list[int] = []
    bucket = 0
    steps = length_steps()
    for i in (int(i) for i in np.argsort(sizes, kind="stable")):
        length = padded_length(int(sizes[i]), steps)
        if batch and ((length > bucket and len(batch) >= SMALL_BATCH)
                      or len(batch) >= MAX_BATCH
                      or (len(batch) + 1) * p * p * length * 4 > SIDE_LAYOUT_BYTES):
            batches.append(batch)
            batch = []
        batch.append(i)
        bucket = length
    return batches + [batch] if batch else batches
