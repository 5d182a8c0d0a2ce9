"""The public entry point `solve` and its result.

Depth 1 runs in `_search/search.py`, depth 2 the array-batched Quant-BnB of `_search/depth2.py`;
depth 3 and 4 run the recursion of `_search/deep.py` over the root split, whose subtrees are
depth-2 (or deeper) searches on subsets of the same arrays.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from qbnb_jax._constants import BOUNDS, SUPPORTED_DEPTHS
from qbnb_jax._device.cache import enable_persistent_cache
from qbnb_jax._device.kernels import check_tables_fit, padded_length
from qbnb_jax._device.runner import COUNTER_NAMES, Counters
from qbnb_jax._problem.data import make_problem
from qbnb_jax._problem.host import built_tree
from qbnb_jax._problem.leaf_limits import leaf_limits
from qbnb_jax._problem.missing import original_tree
from qbnb_jax._problem.tree import Tree
from qbnb_jax._search.anytime import cart_splits, quiet_after, run_until, user_splits
from qbnb_jax._search.appendix import AppendixSearch
from qbnb_jax._search.budget import NO_LIMIT, AlternativesSearch, allocations
from qbnb_jax._search.deep import DeepSearch
from qbnb_jax._search.depth2 import solve_depth2
from qbnb_jax._search.penalty import search_penalty
from qbnb_jax._search.search import Search
from qbnb_jax._search.state import SearchOptions

ROUTES = ("recursion", "appendix")
# Depth 3 and deeper recurse over the root split (`_search/deep.py`); each level multiplies
# the work, so beyond 4 only small problems finish in reasonable time.
MAX_S = 256  # cuts per interval per iteration grow with s, and so does the work per tuple


@dataclasses.dataclass(frozen=True, eq=False)
class SolveResult:
    """What `solve` returns.

    **Fields:**

    - `tree`: the best `Tree` found (optimal when `status == "optimal"`).
    - `objective`: its weighted training loss, recomputed on the host in float64
      (weighted misclassification, or weighted squared error summed over targets).
    - `lower_bound`: a proved lower bound on the optimal objective (with `ccp_alpha`:
      on the optimal penalised objective).
    - `gap`: `objective - lower_bound` (0 for an exact classification optimum; at most
      the pruning tolerance for regression and fractional weights).
    - `status`: `"optimal"`, `"time_limit"` (stopped by `time_limit`) or `"gap_limit"`
      (stopped by `max_gap` with a proved gap within it, and above 0: a search that
      `max_gap` stops at a proved gap of 0 is `"optimal"`).
    - `stats`: iterations, frontier size per iteration, compile and solve seconds, ...
    - `classes`: the original labels (classification), in `tree.value` column order.
    - `penalized_objective`: what was minimised, `objective + ccp_alpha * W * splits`
      (W the total sample weight); `lower_bound` and `gap` refer to it. None for a
      result loaded by `load_tree`.
      The number of leaves is `tree.n_leaves`.

    `predict(X)` gives the tree's predictions as labels (classification) or target
    means; `tree.predict(X)` gives class codes, indices into `classes`.
    """

    tree: Tree
    objective: float
    lower_bound: float
    gap: float
    status: str
    stats: dict[str, Any]
    task: str
    depth: int
    classes: np.ndarray | None
    n_features: int
    # what was minimised: `objective` plus the split penalty (`ccp_alpha`); equal to
    # `objective` without one
    penalized_objective: float | None = None

    def predict(self, X) -> np.ndarray:
        """Predicted class labels `(n,)` (classification) or target means `(n, m)`."""
        predicted = self.tree.predict(np.asarray(X, dtype=np.float64))
        if self.classes is not None:
            return self.classes[predicted]
        return predicted

    def __repr__(self) -> str:
        return (
            f"SolveResult(task={self.task!r}, depth={self.depth}, status={self.status!r}, "
            f"objective={self.objective:.10g}, lower_bound={self.lower_bound:.10g}, "
            f"gap={self.gap:.3g}, iterations={self.stats.get('iterations')})"
        )


def _check_options(depth, bound, s, time_limit, route="recursion", leaf_count_bound=True):
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)):
        raise ValueError(f"depth must be an integer; got {depth!r}.")
    if depth not in SUPPORTED_DEPTHS:
        raise ValueError(
            f"depth={depth} is not supported: choose an integer from {SUPPORTED_DEPTHS[0]} "
            f"to {SUPPORTED_DEPTHS[-1]}."
        )
    if bound not in BOUNDS:
        raise ValueError(f"Unknown bound {bound!r}: choose one of {BOUNDS}.")
    if route not in ROUTES:
        raise ValueError(f"Unknown route {route!r}: choose one of {ROUTES}.")
    if route == "appendix" and (depth != 3 or bound != "w0"):
        raise ValueError(
            f"route='appendix' solves depth 3 with bound 'w0' only; got depth={depth}, "
            f"bound={bound!r}."
        )
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 2 <= s <= MAX_S:
        raise ValueError(f"s must be an integer from 2 to {MAX_S}; got {s!r}.")
    if time_limit is not None and not (
        isinstance(time_limit, (int, float)) and not np.isnan(time_limit) and time_limit > 0
    ):
        raise ValueError(f"time_limit must be a positive number of seconds; got {time_limit!r}.")
    if not isinstance(leaf_count_bound, (bool, np.bool_)):
        raise ValueError(f"leaf_count_bound must be True or False; got {leaf_count_bound!r}.")


def _check_penalty(ccp_alpha, route) -> None:
    if isinstance(ccp_alpha, bool) or not isinstance(ccp_alpha, (int, float, np.number)) or not (
        np.isfinite(ccp_alpha) and ccp_alpha >= 0
    ):
        raise ValueError(f"ccp_alpha must be a finite number >= 0; got {ccp_alpha!r}.")
    if ccp_alpha and route != "recursion":
        raise ValueError(f"ccp_alpha > 0 needs route='recursion'; got route={route!r}.")


def _leaf_budget(max_leaf_nodes, depth: int, route: str) -> tuple[int, int | None]:
    """`(depth to search, leaf budget or None)`: 2 leaves are a depth-1 tree, at least
    2**depth no limit; the budgets between are searched at depth 2 and 3."""
    if max_leaf_nodes is None:
        return depth, None
    if (isinstance(max_leaf_nodes, bool) or not isinstance(max_leaf_nodes, (int, np.integer))
            or max_leaf_nodes < 2):
        raise ValueError(f"max_leaf_nodes must be None or an integer >= 2; got "
                         f"{max_leaf_nodes!r}.")
    if max_leaf_nodes >= 2**depth:
        return depth, None
    if max_leaf_nodes == 2:
        return 1, None
    if depth > 3:
        raise ValueError(
            f"max_leaf_nodes={max_leaf_nodes} with depth={depth} is not supported: choose "
            f"max_leaf_nodes 2 or at least {2**depth} (no limit) at this depth, or depth "
            f"2 or 3."
        )
    if route != "recursion":
        raise ValueError(f"max_leaf_nodes={max_leaf_nodes} needs route='recursion'; got "
                         f"route={route!r}.")
    return depth, int(max_leaf_nodes)


def solve(
    X,
    y,
    *,
    task: str,
    depth: int = 2,
    sample_weight=None,
    bound: str = "w0",
    s: int = 3,
    time_limit: float | None = None,
    progress: Callable[[dict], None] | None = None,
    initial_capacity: int | None = None,
    route: str = "recursion",
    min_samples_leaf: int | float = 1,
    min_weight_fraction_leaf: float = 0.0,
    ccp_alpha: float = 0.0,
    max_leaf_nodes: int | None = None,
    max_gap: float | None = None,
    initial_tree=None,
    leaf_count_bound: bool = True,
) -> SolveResult:
    """Find a provably optimal decision tree of the given depth.

    **Arguments:**

    - `X`: features, `(n, p)`, finite numbers or NaN (missing): each split then also
      chooses which side missing values go to, and the tree is optimal over those
      choices too (columns with NaN count twice in the search).
    - `y`: class labels `(n,)` (any sortable values; floats must be integral) or targets
      `(n,)` / `(n, m)`.
    - `task`: `"classification"` (0-1 loss) or `"regression"` (squared error).
    - `depth`: 1 to 8 (3 and deeper cost much more, each level more again: see
      `_search/deep.py`).
    - `sample_weight`: non-negative weights `(n,)`; zero removes a sample.
    - `bound`: lower bound used for pruning: `"w0"` (default), `"w1"` (W1_{s'}), `"w2"`
      or `"l2"` (exhaustive), as in the paper's section 3.
    - `s`: how finely each root interval is cut per iteration: s + 1 swept cuts (s + 2
      pieces) at depth 2, s cuts (s + 1 pieces) over the root of deeper trees.
    - `time_limit`: seconds (None or inf: no limit), counted from the call and including
      compilation: the search runs on a worker thread and `solve` returns at the limit
      with the best tree so far (without leaf limits or pruning, CART's tree of the
      same depth at the least), status
      `"time_limit"` and a proved lower bound. A worker still compiling finishes that
      compile in the background (docs/design.md, "Anytime behaviour").
    - `progress`: called after every iteration with a dict (`iteration`, `frontier`,
      `incumbent`, `lower_bound`, `gap`, `active`, `solved`, `elapsed`), the same keys
      as `solve_batch`'s (`active` is 1 while tuples remain, `solved` then 0).
    - `initial_capacity`: tuples processed per block at first; doubles (up to 4096)
      while the frontier is larger, and larger frontiers are processed in blocks.
    - `route`: how depth 3 is searched: `"recursion"` (default; Quant-BnB over the root
      split with exact depth-2 sides, `_search/deep.py`) or `"appendix"` (the paper's
      appendix algorithm over tuples of depth-2 tuples, `_search/appendix.py`; depth 3 and
      bound `"w0"` only). Both are exact; docs/benchmarks.md compares their times.
    - `min_samples_leaf`: every leaf holds at least this many rows of positive weight
      (an int >= 1, or a float in (0, 1): that fraction of the rows of `X`, rounded
      up); as scikit-learn, a node is a leaf or splits with both children this large.
    - `min_weight_fraction_leaf`: every leaf holds at least this fraction (0 to 0.5)
      of the total sample weight. With either limit the tree is optimal among the
      trees that respect both (docs/design.md, "Leaf limits"); route "recursion" only.
    - `ccp_alpha`: a penalty per split (>= 0, scikit-learn's name and units): the solve
      then minimises `loss / W + ccp_alpha * splits` over trees of depth at most `depth`,
      W the total sample weight, so nodes may stay leaves above the last level
      (`route="recursion"` only). `objective` stays the loss; `penalized_objective`,
      `lower_bound` and `gap` are then in loss units too, `loss + ccp_alpha * W * splits`.
    - `max_leaf_nodes`: at most this many leaves (an integer >= 2, or None: no limit).
      Solved exactly at depths 1 to 3 (`route="recursion"`); at depth 4 and deeper only
      2 (the depth-1 problem) or at least 2**depth (no limit) are supported, anything
      between raises a ValueError. With `ccp_alpha`, both apply.
    - `max_gap`: stop with status `"gap_limit"` once `objective - lower_bound <= max_gap *
      objective` is proved (a relative gap, 0 to 1; None: solve to optimality).
    - `initial_tree`: a tree to start from (a `Tree`, a `SolveResult`'s `tree`, or a
      fitted tree estimator, ours or scikit-learn's), of at most `depth` levels: the
      first incumbent, returned when nothing better is found (routed `x[f] <= t`, with
      the best leaf values for this data).
    - `leaf_count_bound`: whether classification of more classes than a side has
      leaves also prunes with the leaf-count bound (True, default; docs/design.md,
      "Leaf-count bound"): a side of L leaves misclassifies at least its weight
      outside its L heaviest classes. False leaves `bound` alone pruning, to compare
      bounds' pruning power; the result is the same optimum either way.

    **Returns:** a `SolveResult`.

    !!! Example
        ```python
        result = qbnb_jax.solve(X, y, task="classification", depth=2)
        result.objective, result.predict(X)
        ```
    """
    _check_options(depth, bound, s, time_limit, route, leaf_count_bound)
    if max_gap is not None and not (
        isinstance(max_gap, (int, float)) and not isinstance(max_gap, bool)
        and 0 <= max_gap <= 1
    ):
        raise ValueError(f"max_gap must be a number from 0 to 1 (or None); got {max_gap!r}.")
    if initial_capacity is not None and (
        not isinstance(initial_capacity, (int, np.integer)) or initial_capacity < 1
    ):
        raise ValueError(f"initial_capacity must be a positive integer; got {initial_capacity!r}.")
    _check_penalty(ccp_alpha, route)
    depth, leaves = _leaf_budget(max_leaf_nodes, depth, route)
    enable_persistent_cache()
    limited = time_limit is not None and not np.isinf(time_limit)
    anytime = limited or max_gap is not None
    stop = threading.Event()
    if limited and progress is not None:
        progress = quiet_after(stop, progress)
    # rows merge unless leaves count them (min_samples_leaf)
    problem = make_problem(X, y, task=task, sample_weight=sample_weight,
                           merge_repeats=min_samples_leaf == 1)
    if depth >= 2:  # refused now, not after the host's first trees
        check_tables_fit(1, 1, problem.p, padded_length(problem.n), problem)
    limits = leaf_limits(min_samples_leaf, min_weight_fraction_leaf, len(X),
                         float(problem.weight.sum()),
                         fractional=bool(np.any(problem.weight != np.round(problem.weight))))
    if limits is not None:
        if route != "recursion":
            raise ValueError(f"min_samples_leaf and min_weight_fraction_leaf need "
                             f"route='recursion'; got route={route!r}.")
        problem = dataclasses.replace(problem, leaf_limits=limits)
    # Trees that are not perfect or whose leaves are limited: a CART tree or a user's
    # may not be one of them, so the search starts from its own trees.
    pruned = bool(ccp_alpha) or leaves is not None or limits is not None
    if initial_tree is not None and pruned:
        raise ValueError("initial_tree cannot be combined with min_samples_leaf, "
                         "min_weight_fraction_leaf, ccp_alpha or max_leaf_nodes.")
    options = SearchOptions.make(bound=bound, s=s, time_limit=time_limit, progress=progress,
                                 capacity=initial_capacity,
                                 penalty=search_penalty(problem, ccp_alpha), max_gap=max_gap,
                                 anytime=anytime, leaf_count_bound=leaf_count_bound)
    with jax.enable_x64(True):
        # leaf budgets run on the calling thread: their time limit is checked between
        # iterations
        if leaves is not None and depth == 3:
            return _solve_budgeted_depth3(problem, options, leaves)
        if leaves is not None:  # 3 leaves at depth 2
            # one frontier, two problems: the same one with either child kept a leaf
            search = AlternativesSearch([problem] * 2, options)
            search.leaf_sides = np.array([[False, True], [True, False]])
            solve_depth2(search, runner_rows=np.zeros(2, dtype=np.int64))
            best = int(np.argmin(search.incumbents.value))
            # the optimum is the better of the two: so is its bound, and it is proved
            # only when both are
            search.incumbents.lower_bound[best] = search.incumbents.lower_bound.min()
            search.stats.timed_out[best] = search.stats.timed_out.any()
            return _make_result(search, 2, best)
        if depth <= 2:
            search = Search([problem], options)
        elif route == "appendix":
            search = AppendixSearch(problem, options)
        else:
            search = DeepSearch(problem, options, depth=depth)
    if anytime and not pruned:  # the first incumbent, before any device work
        search.offer(*cart_splits(problem, depth))
    if initial_tree is not None:
        search.offer(*user_splits(problem, initial_tree, depth))

    def work() -> None:
        with jax.enable_x64(True):  # a per-thread setting
            if depth == 1:
                search.solve_depth1()
            elif depth == 2:
                solve_depth2(search)
            elif route == "appendix":
                search.solve_appendix()
            else:
                search.solve_deep()

    if not limited:
        work()
        return _make_result(search, depth)
    finished = run_until(work, options.start + options.time_limit, stop)
    return _make_result(search, depth, status=None if finished else "time_limit")


def _solve_budgeted_depth3(problem, options: SearchOptions, leaves: int) -> SolveResult:
    """Depth 3 with at most `leaves` (3 to 7) leaves: one root-split search per way of
    sharing them between the sides (`budget.allocations`), each starting from the
    best tree of those before as its cutoff."""
    searches = []
    for left, right in allocations(leaves):
        cutoff = min((s.incumbent for s in searches), default=np.inf)
        search = DeepSearch(problem, options, depth=3, cutoff=cutoff,
                            budgets=(left, right, min(leaves, NO_LIMIT)))
        search.solve_deep()
        searches.append(search)
    best = min(range(len(searches)), key=lambda i: (not searches[i].incumbents.found(0),
                                                   searches[i].incumbent))
    search = searches[best]
    # the optimum is the best of them: so is its bound, and it is proved only when all are
    search.incumbents.lower_bound[0] = min(s.incumbents.lower_bound[0] for s in searches)
    search.stats.timed_out[0] = any(s.stats.timed_out[0] for s in searches)
    search.subproblems = sum(s.subproblems for s in searches)
    return _make_result(search, 3)


def _counter_values(counters: Counters) -> dict[str, float]:
    # Scalar fields: a plain read, not `dataclasses.asdict`'s deep copy.
    return {name: getattr(counters, name) for name in COUNTER_NAMES}


def _make_result(search: Search, depth: int, q: int = 0,
                 built: tuple[Tree, float] | None = None, status: str | None = None
                 ) -> SolveResult:
    """The result of problem q of a finished search; `built`: its tree and objective,
    if known. `status` (default: the search's) is "time_limit" for a search still
    running on a worker thread: what is read of it is a consistent snapshot."""
    problem = search.problems[q]
    if built is None:
        with search.incumbents.lock:  # the incumbent's tree, not the next one's
            splits = search.deferred_splits(q)
        tree, objective = built_tree(problem, splits() if callable(splits) else splits)
    else:
        tree, objective = built
    if problem.missing is not None:  # a tree over the virtual features of NaN columns
        tree = original_tree(tree, problem.X, problem.weight, problem.missing)
    if status is None:
        status = search.stats.status(q)
    n_splits = tree.n_nodes - tree.n_leaves
    penalized = objective + problem.true_loss(search.options.penalty) * n_splits
    # losses are never negative
    lower = max(0.0, min(problem.true_loss(search.incumbents.lower_bound[q]), penalized))
    if status == "optimal" and search.incumbents.exact[q]:
        lower = objective
    if status == "gap_limit" and lower >= penalized:  # `max_gap` met at no gap: proved
        status = "optimal"
    frontier_sizes = list(search.stats.frontier_sizes[q])
    stats = {
        "iterations": int(search.stats.iterations[q]),
        "frontier_sizes": frontier_sizes,
        "peak_frontier": max(frontier_sizes, default=0),
        "tuples_explored": int(search.stats.tuples_explored[q]),
        "capacity_history": list(search.stats.capacity_history[q]),
        **_counter_values(search.runner.counters if search.runner else Counters()),
        "subproblems": getattr(search, "subproblems", 0),
        "bound": search.options.bound,
        "s": search.options.s,
    }
    total = search.elapsed()
    stats["solve_seconds"] = total - stats["compile_seconds"]
    stats["total_seconds"] = total
    return SolveResult(
        tree=tree,
        objective=objective,
        lower_bound=float(lower),
        gap=float(max(0.0, penalized - lower)),
        status=status,
        stats=stats,
        task=problem.task,
        depth=depth,
        classes=problem.classes,
        n_features=problem.n_features,
        penalized_objective=float(penalized),
    )
