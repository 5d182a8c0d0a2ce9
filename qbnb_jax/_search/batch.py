"""Many problems in one call: `solve_batch` (shared X, many weightings), `solve_many`.

Problems differ only in their stat vectors (docs/design.md, "Batching"), so they share one
`SweepData`: a problem axis on the stats, a layout axis on the presorted orders (one
layout for a shared X, one per dataset otherwise, padded to common shapes). At depth 2
the tuples of every problem form one frontier (`_search/depth2.py`): an iteration is a few
numpy calls and one kernel call per kind for all problems, rows tagged with their
problem.

A reweighted problem numbers its thresholds as a solve of that weighted problem alone
does (`Problem.reweighted`, `reweighted_samples` for float sums), so each search takes
the same path as `solve` would and returns the same tree. Sweeps may run on each
problem's own positive samples (`positive_layouts`, `_OwnPositions`), the sweeps
`solve` runs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import gc
from collections.abc import Callable, Sequence

import jax
import numpy as np

from qbnb_jax._device.cache import enable_persistent_cache
from qbnb_jax._device.kernels import (
    BLOCKED_FROM,
    GRID_MAX_CLASSES,
    SweepData,
    execution_plan,
    padded_length,
)
from qbnb_jax._device.memory import tune_malloc
from qbnb_jax._device.parallel import THREADS
from qbnb_jax._device.runner import COUNTER_NAMES, GRID_MIN_PROBLEMS, KernelRunner
from qbnb_jax._problem.data import (
    Layout,
    Problem,
    ThresholdTables,
    as_sample_weight,
    as_targets,
    make_problem,
    positive_layouts,
    reweighted_samples,
)
from qbnb_jax._problem.duplicates import repeated_row_groups
from qbnb_jax._problem.host import (
    depth2_splits_shared,
    depth2_trees_reweighted,
    depth2_trees_shared,
)
from qbnb_jax._problem.leaf_limits import leaf_limits
from qbnb_jax._search.deep import DeepSearch
from qbnb_jax._search.deep_batch import sides_on_layout_serve, solve_deep_lockstep
from qbnb_jax._search.depth2 import solve_depth2
from qbnb_jax._search.search import Search
from qbnb_jax._search.solve import SolveResult, _check_options, _make_result
from qbnb_jax._search.state import SearchOptions


def solve_batch(
    X,
    y,
    sample_weights,
    *,
    task: str,
    depth: int = 2,
    bound: str = "w0",
    s: int = 3,
    time_limit: float | None = None,
    progress: Callable[[dict], None] | None = None,
    min_samples_leaf: int | float = 1,
    min_weight_fraction_leaf: float = 0.0,
    leaf_count_bound: bool = True,
) -> list[SolveResult]:
    """Solve P problems that share `X` and `y` and differ in their sample weights.

    Bootstrap samples are integer weights, cross-validation folds 0/1 weights. Result
    `i` is the tree `solve(X, y, sample_weight=sample_weights[i], ...)` returns: the
    same tree, objective and bound (without `time_limit`: under one, `solve` starts
    from CART's tree, which can break ties between optimal trees differently). The
    problems share one presorted layout (`X` sorted once; regression and fractional
    weights at depth 1 and 2 on a CPU, see docs/design.md,
    "Batching"); at depth 2 the others sweep each problem's positive samples alone,
    in orders derived from the shared ones, but integer counts of up to 8 classes and
    regression, in batches of 32 or more problems, where the kernels take the problems
    as vector lanes of the shared layout; 512
    or more run as two halves on two threads (without a `progress` callback). At
    depth 3 the problems' searches run in lockstep, the sides of their root cuts in
    shared depth-2 searches (two-class sides as weightings of the shared layout, in
    the kernels' lanes). None of this changes any result. The first call sets
    glibc's malloc thresholds for the process (`memory.tune_malloc`;
    `QBNB_JAX_TUNE_MALLOC=0`: not).

    **Arguments:**

    - `X`, `y`, `task`, `depth`, `bound`, `s`, `leaf_count_bound`: as for `solve`.
    - `sample_weights`: `(P, n)` non-negative weights, no row all zero.
    - `time_limit`: seconds for the whole batch; unfinished problems return their best
      tree with status `"time_limit"` and a proved lower bound.
    - `progress`: called after every depth-2 iteration with `solve`'s dict: `iteration`
      (the most any problem has run), `frontier` (tuples of all problems), `incumbent`
      and `lower_bound` (summed over the problems), `gap`, `active` (problems still
      searching), `solved` and `elapsed`. Problems of different widths (`solve_many`)
      run one group after another, each reporting its own.

    **Returns:** a list of P `SolveResult`s; their `stats` share the batch's kernel
    counters (compile seconds, rows evaluated) and report the batch's wall time.

    !!! Example
        ```python
        rng = np.random.default_rng(0)
        boot = rng.multinomial(len(X), np.full(len(X), 1 / len(X)), size=100)
        results = qbnb_jax.solve_batch(X, y, boot, task="classification")
        ```
    """
    _check_options(depth, bound, s, time_limit, leaf_count_bound=leaf_count_bound)
    _refuse_leaf_limits(min_samples_leaf, min_weight_fraction_leaf)
    tune_malloc()
    with _collector_paused():
        options = SearchOptions.make(bound=bound, s=s, time_limit=time_limit,
                                     progress=progress, leaf_count_bound=leaf_count_bound)
        return _solve_batch(X, y, sample_weights, task, depth, options)


def _refuse_leaf_limits(min_samples_leaf, min_weight_fraction_leaf) -> None:
    """Leaf limits run in `solve` alone (one problem's sweeps, `_device/limits.py`)."""
    if leaf_limits(min_samples_leaf, min_weight_fraction_leaf, 1, 1.0) is not None:
        raise ValueError("min_samples_leaf and min_weight_fraction_leaf are not supported "
                         "by solve_batch and solve_many: call solve for each problem.")


def _solve_batch(X, y, sample_weights, task: str, depth: int, options: SearchOptions
                 ) -> list[SolveResult]:
    base = make_problem(X, y, task=task)
    W = _as_weight_matrix(sample_weights, base.n)
    integral = _check_rows(W)
    if task == "classification" and integral:
        base, W = _merge_repeated_rows(base, W)
        # Integer counts are exact in any order: one shared layout for every problem.
        if options.progress is None and THREADS > 1 and len(W) >= 2 * SPLIT_FROM:
            return _in_two_halves(lambda rows: _solve_stacked(base, W[rows], depth, options),
                                  len(W))
        return _solve_stacked(base, W, depth, options)
    if depth <= 2 and _float_sums_shareable(base):
        # Float sums on the shared layout: zero-weight rows add exact zeros to the
        # sequential sums (`reweighted_samples`), so they are solve()'s numbers.
        targets = as_targets(y, base.n) if task == "regression" else None
        if options.progress is None and THREADS > 1 and len(W) >= 2 * SPLIT_FROM:
            return _in_two_halves(
                lambda rows: _solve_floats(base, W[rows], targets, depth, options), len(W))
        return _solve_floats(base, W, targets, depth, options)
    # Otherwise each problem gets the layout of its own samples, as solve() builds it,
    # so that float sums group their terms as solve()'s do.
    problems = [make_problem(X, y, task=task, sample_weight=w) for w in W]
    return _solve_problems(_Batch(problems, problems, list(range(len(problems)))), depth,
                           options)


def _merge_repeated_rows(base: Problem, W: np.ndarray) -> tuple[Problem, np.ndarray]:
    """`base` (made without weights) over its distinct (row, class) pairs, and each
    weighting summed over the rows of each pair (docs/design.md, "Repeated rows"): each
    problem keeps its thresholds and sums, so it takes the path `solve` takes of it,
    merged or not."""
    if base.missing is not None:
        return base, W
    groups = repeated_row_groups(base.value_rank, base.cut_valid[:, 1:-1], base.y)
    if groups is None:
        return base, W
    first, group = groups
    order = np.argsort(group, kind="stable")
    in_order = group[order]
    starts = np.flatnonzero(np.r_[True, in_order[1:] != in_order[:-1]])
    merged = make_problem(base.X[first], base.classes[base.y[first]],
                          task="classification")
    return merged, np.add.reduceat(W[:, order], starts, axis=1)  # integers: exact


def _solve_floats(base: Problem, W: np.ndarray, targets: np.ndarray | None, depth: int,
                  options: SearchOptions) -> list[SolveResult]:
    """Problems `base` under each row of float weights `W`, on one shared layout."""
    problems, tables = reweighted_samples(base, W, targets)
    own = None
    if depth == 2 and not (REGRESSION_GRID and targets is not None
                           and len(W) >= GRID_MIN_PROBLEMS):
        own = (*positive_layouts(base, W), _positive_rows(problems, W))
    return _solve_problems(_Batch([base], problems, [0] * len(problems), tables=tables,
                                  float_sums=True, own=own), depth, options)


def _float_sums_shareable(base: Problem) -> bool:
    """Whether problems with float sums (regression, fractional weights) can share
    `base`'s layout and still form solve()'s numbers: only where every prefix sum runs
    one sample at a time, the sequential plan below the blocked sweeps' lengths (a
    log-depth scan groups its terms by position, zero-weight rows included). Deeper
    trees and missing values (whose trees are rebuilt from all rows' weights) keep
    a layout per problem."""
    return (execution_plan() == "sequential" and padded_length(base.n) < BLOCKED_FROM
            and base.missing is None)


def _solve_stacked(base: Problem, W: np.ndarray, depth: int, options: SearchOptions
                   ) -> list[SolveResult]:
    """Problems `base` under each row of integer weights `W`, on one shared layout."""
    stat_tables = None
    if base.n_channels == 2:  # the kernels' stat tables come out of the reweighting pass
        stat_tables = SweepData.shared_stat_buffers(base, W)
    problems, tables = base.reweighted(
        W, signed_out=None if stat_tables is None else stat_tables["sorted_scan"],
        mass_out=None if stat_tables is None else stat_tables["root_cum"],
        class_stumps=depth == 2 and base.n_channels > 2)
    own = None
    if (stat_tables is None and depth == 2 and len(W) >= OWN_LAYOUTS_FROM
            and not _class_grid_serves(base, len(W))):
        # Many classes sweep rows (not `sweep_grid`'s lanes): on each problem's positive
        # samples alone, a bootstrap's sweeps skip its zero-weight third. Counts are
        # exact in any order, so the losses are the same.
        own = (*positive_layouts(base, W), _positive_rows(problems, W))
    return _solve_problems(_Batch([base], problems, [0] * len(problems), tables=tables,
                                  stat_tables=stat_tables, own=own), depth, options)


def _class_grid_serves(base: Problem, count: int) -> bool:
    """Whether a batch of `count` problems of `base`'s few classes can go to
    `sweep_grid`'s lanes, which need the shared layout (`grid_scan`): then the
    problems keep it, rather than sweeping rows on their own samples."""
    return (base.n_channels <= GRID_MAX_CLASSES and count >= GRID_MIN_PROBLEMS
            and execution_plan() == "sequential")


# Regression batches of at least GRID_MIN_PROBLEMS keep the shared layout, whose full
# sweeps go to `sweep_grid`'s lanes (`_sse_grid`), rather than each problem's own.
REGRESSION_GRID = True


# Count batches of at least this many problems sweep each on its own samples: the
# layouts cost host work per problem, which a few problems' sweeps do not repay.
OWN_LAYOUTS_FROM = 8


def _positive_rows(problems: list[Problem], W: np.ndarray) -> list[Problem]:
    """Copies of `problems` whose `stats` hold their positive-weight rows alone (for
    `SweepData`, which reads nothing else of them)."""
    out = []
    for problem, w in zip(problems, W):
        copy = object.__new__(Problem)
        copy.__dict__.update(problem.__dict__, stats=problem.stats[w > 0])
        out.append(copy)
    return out


def _in_two_halves(solve_rows: Callable[[slice], list[SolveResult]], n_problems: int
                   ) -> list[SolveResult]:
    """`solve_rows` on the first and the second half of n_problems, on two threads.

    While one half runs host numpy (mostly holding the GIL), the other's kernels and
    numpy blocks use the second core: large bootstrap batches ran faster than in one
    piece. The problems are independent, so each gets the result it gets alone;
    every result's stats report both halves' kernel counters summed. The first half
    runs on the calling thread and the second on one long-lived thread, so that every
    batch allocates from the same two malloc arenas: a new thread per call got a new
    arena, whose pages were fresh (page faults) every time.
    """
    half = n_problems // 2
    second = _SECOND_HALF.submit(solve_rows, slice(half, n_problems))
    try:
        first = solve_rows(slice(0, half))
    except BaseException:
        concurrent.futures.wait([second])  # nothing of this call runs on after it
        raise
    results = [first, second.result()]
    merged = {name: sum(half[0].stats[name] for half in results) for name in COUNTER_NAMES}
    for result in results[0] + results[1]:
        result.stats.update(merged)
        result.stats["solve_seconds"] = result.stats["total_seconds"] - merged["compile_seconds"]
    return results[0] + results[1]


def solve_many(
    datasets: Sequence[tuple],
    *,
    task: str,
    depth: int = 2,
    bound: str = "w0",
    s: int = 3,
    time_limit: float | None = None,
    progress: Callable[[dict], None] | None = None,
    min_samples_leaf: int | float = 1,
    min_weight_fraction_leaf: float = 0.0,
    leaf_count_bound: bool = True,
) -> list[SolveResult]:
    """Solve problems with different data in one call: `(X, y)` or `(X, y, weight)` each.

    The datasets may differ in rows and features (and classes or targets); they are
    padded to common shapes with zero-weight samples and features that are never
    swept. Result `i` is what `solve(*datasets[i], ...)` returns. Like `solve_batch`,
    it sets glibc's malloc thresholds once per process.
    """
    _check_options(depth, bound, s, time_limit, leaf_count_bound=leaf_count_bound)
    _refuse_leaf_limits(min_samples_leaf, min_weight_fraction_leaf)
    options = SearchOptions.make(bound=bound, s=s, time_limit=time_limit, progress=progress,
                                 leaf_count_bound=leaf_count_bound)
    if len(datasets) == 0:
        raise ValueError("datasets is empty: give at least one (X, y) pair.")
    tune_malloc()
    with _collector_paused():
        return _solve_datasets(datasets, task, depth, options)


def _solve_datasets(datasets, task: str, depth: int, options: SearchOptions
                    ) -> list[SolveResult]:
    problems = []
    for i, item in enumerate(datasets):
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise ValueError(f"datasets[{i}] must be a tuple (X, y) or (X, y, sample_weight).")
        Xi, yi, wi = (*item, None)[:3]
        problems.append(make_problem(Xi, yi, task=task, sample_weight=wi,
                                     merge_repeats=True))
    # Problems of one stat channel count (classes, or targets) form a batch: padded to
    # more channels, a problem would be swept by other kernels than its solve()'s
    # (two classes: by the several-class formula), whose float sums may round
    # differently, so that ties between trees may go elsewhere.
    return _solve_in_groups(problems, [pr.n_channels for pr in problems], depth, options)


def _solve_in_groups(problems: list[Problem], keys: list, depth: int, options: SearchOptions
                     ) -> list[SolveResult]:
    """Problems of equal `keys` as batches of their own, each problem on its own
    layout; the results in the problems' order."""
    results: list = [None] * len(problems)
    for key in dict.fromkeys(keys):
        members = [i for i, k in enumerate(keys) if k == key]
        group = [problems[i] for i in members]
        solved = _solve_problems(_Batch(group, group, list(range(len(group)))), depth, options)
        for i, result in zip(members, solved):
            results[i] = result
    return results


# Batches on a shared layout of at least twice this many problems run as two
# concurrent halves.
SPLIT_FROM = 256
_SECOND_HALF = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qbnb_jax-half")


def _as_weight_matrix(sample_weights, n: int) -> np.ndarray:
    try:
        W = np.asarray(sample_weights, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"sample_weights must be a numeric (P, n) array: {err}") from None
    if W.ndim != 2 or W.shape[1] != n or W.shape[0] == 0:
        raise ValueError(f"sample_weights must have shape (P, {n}) with P >= 1; got {W.shape}.")
    return W


def _check_rows(W: np.ndarray) -> bool:
    """Validate each row as `as_sample_weight` does; True when every weight is integral.

    Checked for the whole matrix at once; a failing matrix is rechecked row by row,
    which raises the same error a single solve would.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        totals = W.sum(axis=1)
        valid = (np.isfinite(W).all() and (W >= 0).all() and (W > 0).any(axis=1).all()
                 and np.isfinite(totals).all())
    if not valid:
        for w in W:
            as_sample_weight(w, W.shape[1])
    return bool(np.all(W == np.round(W))) and float(totals.max()) < 2**30


def _common_stats(problems: list[Problem]) -> list[np.ndarray]:
    """Stats of every problem in one dtype and channel count (padding with zero channels).

    Integer counts become floats when any problem has fractional weights (exact: the
    counts are small integers); missing classes or targets are zero channels, which
    change no loss. Regression keeps its squared-norm channel last.
    """
    width = max(pr.n_channels for pr in problems)
    as_float = any(pr.loss_kind == "weighted" for pr in problems)
    out = []
    for pr in problems:
        st = pr.stats.astype(np.float64) if as_float else pr.stats
        if st.shape[1] < width:
            pad = np.zeros((len(st), width - st.shape[1]), st.dtype)
            st = (np.concatenate([st[:, :-1], pad, st[:, -1:]], 1) if pr.loss_kind == "sse"
                  else np.concatenate([st, pad], 1))
        out.append(st)
    return out


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for the duration (then back as it was).

    A batch creates a few objects per problem, thousands in all, which triggered
    collections that took a noticeable share of a large batch's CPU time; they hold
    no reference cycles worth collecting meanwhile.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclasses.dataclass(frozen=True)
class _Batch:
    """The problems of one call and the layouts their sweeps use."""

    layouts: list[Problem]  # presorted layouts (one shared, or one per problem)
    problems: list[Problem]
    layout_of: list[int]  # (n_problems,) the layout of each problem
    tables: ThresholdTables | None = None  # stacked tables of a shared layout
    stat_tables: dict | None = None  # the kernels' stat tables, when precomputed
    # float sums on a shared layout (`reweighted_samples`), zero-weight rows kept
    float_sums: bool = False
    # sweeps on each problem's positive samples alone: their layouts, the table `seen`
    # that turns the shared layout's positions into theirs (`positive_layouts`), and
    # the problems with those samples' stats
    own: tuple[list[Layout], np.ndarray, list[Problem]] | None = None


def _solve_problems(batch: _Batch, depth: int, options: SearchOptions) -> list[SolveResult]:
    if depth >= 3 and {pr.loss_kind for pr in batch.problems} == {"count", "weighted"}:
        return _solve_by_kind(batch, depth, options)
    enable_persistent_cache()
    problems, layouts, layout_of = batch.problems, batch.layouts, batch.layout_of
    if batch.own is not None:  # swept on each problem's own samples, as solve() sweeps
        layouts, seen, problems = batch.own
        layout_of = range(len(problems))
    stats = _common_stats(problems)
    device_view = [pr if st is pr.stats else dataclasses.replace(pr, stats=st)
                   for pr, st in zip(problems, stats)]
    if any(pr.loss_kind == "weighted" for pr in problems):
        device_view = [dataclasses.replace(pr, loss_kind="weighted") for pr in device_view]
    with jax.enable_x64(True):
        data = SweepData.from_problems(layouts, device_view, list(layout_of),
                                       stat_tables=batch.stat_tables)
        runner = KernelRunner(device_view[0], data,
                              sample_counts=[pr.n for pr in device_view])
        if batch.own is not None:
            runner = _OwnPositions(runner, seen)
        if depth <= 2:
            results = _solve_shallow(batch, depth, options, runner)
        else:
            # Deeper trees recurse into subsets; they share the batch's layouts and
            # compiled kernels (and so its stat channels and dtype). Depth 3 runs every
            # problem's search in lockstep, the sides of all in shared depth-2 frontiers
            # (`_search/deep_batch.py`); deeper ones run one problem at a time.
            searches = [DeepSearch(pr, options.quiet(), depth=depth,
                                   runner=runner.for_problem(i, pr))
                        for i, pr in enumerate(device_view)]
            if depth == 3:
                # integer counts reweight one layout: their sides may too
                shared = (len(layouts) == 1 and problems[0].loss_kind == "count"
                          and sides_on_layout_serve(layouts[0]))
                solve_deep_lockstep(searches, runner, layouts[0] if shared else None)
            else:
                for search in searches:
                    search.solve_deep()
            results = [(search, 0, None) for search in searches]
    out = []
    for i, (search, q, tree) in enumerate(results):
        search.runner = runner  # every result reports the batch's kernel counters
        out.append(_make_result(search, depth, q, tree))
    return out


def _solve_by_kind(batch: _Batch, depth: int, options: SearchOptions) -> list[SolveResult]:
    """A deep batch of integer counts and fractional weights, each kind as a batch of
    its own (each problem on its own layout, as such batches are built).

    A deep search's sides share their batch's kernel data, so they would sweep
    integer counts as floats and give those problems the float tolerance: a proved
    bound below the objective where solve() proves it equal (docs/design.md,
    "Batching"). Apart, each problem's search is its solve's."""
    assert batch.layouts is batch.problems and batch.own is None
    return _solve_in_groups(batch.problems, [pr.loss_kind for pr in batch.problems], depth,
                            options)


def _solve_shallow(batch: _Batch, depth: int, options: SearchOptions, runner: KernelRunner
                   ) -> list[tuple[Search, int, tuple | None]]:
    """Depth 1 or 2: `(search, index in it, built tree or None)` per problem.

    Depth 2 solves problems of one width in one frontier (one search); problems with
    different numbers of features run as separate searches, one after another.
    """
    problems = batch.problems
    if depth == 1:
        search = _search_of(batch, options, runner)
        search.solve_depth1()
        return [(search, q, None) for q in range(len(problems))]
    if batch.tables is not None:  # one shared layout: one frontier
        search = _search_of(batch, options, runner)
        # a single problem sweeps as `solve` would, from its own tables
        solve_depth2(search, batch.tables if len(problems) > 1 else None,
                     runner_rows=np.arange(len(problems)))
        specs = search.incumbents.depth2_spec
        if (specs[:, 0] >= 0).all() and len(problems) > 1:  # depth-2 trees, built at once
            if batch.float_sums:  # the cuts, then the trees' float sums, at once
                splits = depth2_splits_shared(problems, batch.tables.cut_pos,
                                              batch.tables.cut_valid, specs)
                built = depth2_trees_reweighted(problems, splits)
                return [(search, q, tree) for q, tree in enumerate(built)]
            if problems[0].loss_kind == "count":
                built = depth2_trees_shared(problems, batch.tables.cut_pos,
                                            batch.tables.cut_valid, specs)
                return [(search, q, tree) for q, tree in enumerate(built)]
        return [(search, q, None) for q in range(len(problems))]
    widths = np.array([pr.p for pr in problems])
    found: list = [None] * len(problems)
    for p in np.unique(widths):
        members = np.nonzero(widths == p)[0]
        search = Search([problems[q] for q in members], options, runner=runner)
        solve_depth2(search, runner_rows=members)
        for q, member in enumerate(members):
            found[member] = (search, q, None)
    return found


def _search_of(batch: _Batch, options: SearchOptions, runner: KernelRunner) -> Search:
    """One search of all the batch's problems. Float sums on a shared layout keep
    zero-weight rows, whose terms add exact zeros to the tolerance's sequential sums
    (`absolute_tolerance`): each problem gets its solve's tolerance."""
    return Search(batch.problems, options, runner=runner)


class _OwnPositions:
    """A runner for searches on a shared layout whose problems' sweeps run on their own
    layouts (`positive_layouts`): each request's positions, in the shared layout's
    feature orders, become the same cuts of the problem's own samples.

    A zero-weight row costs a step of every sweep that scans it: a bootstrap leaves a
    third of the rows at zero. On its own samples a sweep is the one solve() runs,
    the same sums in the same order.
    """

    def __init__(self, runner: KernelRunner, seen: np.ndarray):
        self.runner = runner
        self.seen = seen  # (problems, p, n + 1)

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def _own(self, problem: np.ndarray, f0: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if positions.ndim == 2:
            return self.seen[problem[:, None], f0[:, None], positions]
        return self.seen[problem, f0, positions]

    def full(self, f0, f, cuts, problem):
        return self.runner.full(f0, f, self._own(problem, f0, cuts), problem=problem)

    def window(self, f0, f, lo, hi, cuts, problem):
        own = functools.partial(self._own, problem, f0)
        return self.runner.window(f0, f, own(lo), own(hi), own(cuts), problem=problem)
