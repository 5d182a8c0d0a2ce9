"""Many problems in one call: `solve_batch` (shared X, many weightings), `solve_many`.

Problems differ only in their stat vectors (docs/design.md, "Batching"), so they share one
`SweepData`: a problem axis on the stats, a layout axis on the presorted orders (one
layout for a shared X, one per dataset otherwise, padded to common shapes). At depth 2
the tuples of every problem form one frontier (`_search/depth2.py`): an iteration is a few
numpy calls and one kernel call per kind for all problems, rows tagged with their
problem.

A reweighted problem numbers its thresholds as a solve of that weighted problem alone
does (`Problem.reweighted`), so each search takes the same path as `solve` would and
returns the same tree.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
from collections.abc import Callable, Sequence

import jax
import numpy as np

from qbnb_jax._device.cache import enable_persistent_cache
from qbnb_jax._device.kernels import SweepData
from qbnb_jax._device.memory import tune_malloc
from qbnb_jax._device.parallel import THREADS
from qbnb_jax._device.runner import COUNTER_NAMES, KernelRunner
from qbnb_jax._problem.data import Problem, ThresholdTables, as_sample_weight, make_problem
from qbnb_jax._problem.host import depth2_trees_shared
from qbnb_jax._problem.leaf_limits import leaf_limits
from qbnb_jax._search.deep import DeepSearch
from qbnb_jax._search.deep_batch import solve_deep_lockstep
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
) -> list[SolveResult]:
    """Solve P problems that share `X` and `y` and differ in their sample weights.

    Bootstrap samples are integer weights, cross-validation folds 0/1 weights. Result
    `i` is the tree `solve(X, y, sample_weight=sample_weights[i], ...)` returns: the
    same tree and objective. Integer-weighted classification problems share one
    presorted layout; regression and fractional weights give each problem the layout
    of its own samples (`(p, p, n)` int32 each), so float sums run in solve()'s order.
    With two classes and 32 or more such problems the kernels take the problems as
    vector lanes; 512 or more run as two halves on two threads (without a `progress`
    callback). Neither changes any result. The first call sets glibc's malloc
    thresholds for the process (`memory.tune_malloc`; `QBNB_JAX_TUNE_MALLOC=0`: not).

    **Arguments:**

    - `X`, `y`, `task`, `depth`, `bound`, `s`: as for `solve`.
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
    _check_options(depth, bound, s, time_limit)
    _refuse_leaf_limits(min_samples_leaf, min_weight_fraction_leaf)
    tune_malloc()
    with _collector_paused():
        options = SearchOptions.make(bound=bound, s=s, time_limit=time_limit,
                                     progress=progress)
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
        # Integer counts are exact in any order: one shared layout for every problem.
        if options.progress is None and THREADS > 1 and len(W) >= 2 * SPLIT_FROM:
            return _in_two_halves(lambda rows: _solve_stacked(base, W[rows], depth, options),
                                  len(W))
        return _solve_stacked(base, W, depth, options)
    # Float sums depend on the order of the samples summed, zero-weight ones included;
    # to take solve()'s exact path (and tie-breaks) each problem gets the layout of its
    # own samples, as solve() builds it.
    problems = [make_problem(X, y, task=task, sample_weight=w) for w in W]
    return _solve_problems(_Batch(problems, problems, list(range(len(problems)))), depth,
                           options)


def _solve_stacked(base: Problem, W: np.ndarray, depth: int, options: SearchOptions
                   ) -> list[SolveResult]:
    """Problems `base` under each row of integer weights `W`, on one shared layout."""
    stat_tables = None
    if base.n_channels == 2:  # the kernels' stat tables come out of the reweighting pass
        stat_tables = SweepData.shared_stat_buffers(base, W)
    problems, tables = base.reweighted(
        W, signed_out=None if stat_tables is None else stat_tables["sorted_scan"],
        mass_out=None if stat_tables is None else stat_tables["root_cum"])
    return _solve_problems(_Batch([base], problems, [0] * len(problems), tables=tables,
                                  stat_tables=stat_tables), depth, options)


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
) -> list[SolveResult]:
    """Solve problems with different data in one call: `(X, y)` or `(X, y, weight)` each.

    The datasets may differ in rows and features (and classes or targets); they are
    padded to common shapes with zero-weight samples and features that are never
    swept. Result `i` is what `solve(*datasets[i], ...)` returns. Like `solve_batch`,
    it sets glibc's malloc thresholds once per process.
    """
    _check_options(depth, bound, s, time_limit)
    _refuse_leaf_limits(min_samples_leaf, min_weight_fraction_leaf)
    options = SearchOptions.make(bound=bound, s=s, time_limit=time_limit, progress=progress)
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
        problems.append(make_problem(Xi, yi, task=task, sample_weight=wi))
    return _solve_problems(_Batch(problems, problems, list(range(len(problems)))), depth,
                           options)


# Stacked batches of at least twice this many problems run as two concurrent halves.
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


def _solve_problems(batch: _Batch, depth: int, options: SearchOptions) -> list[SolveResult]:
    enable_persistent_cache()
    problems = batch.problems
    stats = _common_stats(problems)
    device_view = [pr if st is pr.stats else dataclasses.replace(pr, stats=st)
                   for pr, st in zip(problems, stats)]
    if any(pr.loss_kind == "weighted" for pr in problems):
        device_view = [dataclasses.replace(pr, loss_kind="weighted") for pr in device_view]
    with jax.enable_x64(True):
        data = SweepData.from_problems(batch.layouts, device_view, batch.layout_of,
                                       stat_tables=batch.stat_tables)
        runner = KernelRunner(device_view[0], data)
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
                solve_deep_lockstep(searches, runner)
            else:
                for search in searches:
                    search.solve_deep()
            results = [(search, 0, None) for search in searches]
    out = []
    for search, q, tree in results:
        search.runner = runner  # every result reports the batch's kernel counters
        out.append(_make_result(search, depth, q, tree))
    return out


def _solve_shallow(batch: _Batch, depth: int, options: SearchOptions, runner: KernelRunner
                   ) -> list[tuple[Search, int, tuple | None]]:
    """Depth 1 or 2: `(search, index in it, built tree or None)` per problem.

    Depth 2 solves problems of one width in one frontier (one search); problems with
    different numbers of features run as separate searches, one after another.
    """
    problems = batch.problems
    if depth == 1:
        search = Search(problems, options, runner=runner)
        search.solve_depth1()
        return [(search, q, None) for q in range(len(problems))]
    if batch.tables is not None:  # one shared layout: one frontier
        search = Search(problems, options, runner=runner)
        # a single problem sweeps as `solve` would, from its own tables
        solve_depth2(search, batch.tables if len(problems) > 1 else None,
                     runner_rows=np.arange(len(problems)))
        if problems[0].loss_kind == "count" and (search.incumbents.depth2_spec[:, 0] >= 0).all():
            built = depth2_trees_shared(problems, batch.tables.cut_pos,
                                        batch.tables.cut_valid, search.incumbents.depth2_spec)
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
