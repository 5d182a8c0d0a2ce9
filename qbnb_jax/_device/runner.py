"""Host side of the kernels: pad rows to shape buckets, compile once per bucket, time it.

Shapes are bucketed (rows and cuts to powers of two) so that a whole solve, and every
later solve of a problem with the same (n, p, C, dtype), reuses a handful of compiled
executables. Compiled executables are cached in-process here and on disk by JAX's
persistent compilation cache, so compile time and solve time are reported apart.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import NamedTuple

import jax
import numpy as np

from qbnb_jax._device.kernels import (
    CHANNELS_MAJOR_FROM_CLASSES,
    CLASS_LANE_ROWS,
    GRID_LANES,
    WALK_BLOCK,
    SweepData,
    count_bucket,
    padded_length,
    scans_own_length,
    sweep_full,
    sweep_full_within,
    sweep_gathered,
    sweep_grid,
    sweep_rows,
    sweep_windowed,
    sweeps_channels_major,
    sweeps_class_lanes,
    sweeps_rows_apart,
    uses_class_order,
    walks_channels_major_rows,
    walks_two_class_rows,
)
from qbnb_jax._device.limits import limit_data, sweep_limited
from qbnb_jax._device.parallel import THREADS, run_all
from qbnb_jax._problem.data import Problem

# Elements of the (chunk, cuts, length, channels) intermediate processed at once on a
# CPU: small enough to stay in cache (docs/design.md, "Execution plans").
CHUNK_ELEMENTS = 1 << 18
# Sweeps of several channels (classes, regression sums) carry K x channels running sums
# per row, too few vector lanes for one row a call: they take 4x more elements a call
# (measured on bean, fault, segment and page: fewer, fuller calls; two-class sweeps
# gain nothing from it).
CHANNEL_CHUNK_ELEMENTS = 1 << 20
MAX_CHUNK = 64
# Two-class sweeps keep only K running sums per row, so their calls take up to 4x
# larger chunks: as few calls as still give every thread one. A call's walk pays a
# fixed cost per position that its rows share (at n = 4,608, a call of 8 rows took
# half the time of one of 64). Many-class sweeps keep their chunks.
BIG_CHUNK_FACTOR = 4
# Rows per call of the two-class walk (`_two_class_walked_rows`): a step costs about
# 0.4 us whatever its lanes, so at 16 rows of four cuts a walk took 6.5 ns a
# cut-element, at 64 rows 1.8 and at 256 rows 1.1-1.3 (n = 1,024 to 8,192); 128 and
# 512 were no faster at depth 2 or 3.
TWO_CLASS_WALK_ROWS = 256
# The same for float weights, whose float64 lanes are two to four times as wide: at
# 256 rows a call, random weights at depth 3 took 1.3x the time of 128 on occupancy
# and wilt (rice 1.0x); 64 was no faster than 128.
TWO_CLASS_FLOAT_WALK_ROWS = 128
# Rows per class-lane call of compacted subsets of fewer than CHANNELS_MAJOR_FROM_CLASSES
# classes, with more rows than this: measured at depth 3 against CLASS_LANE_ROWS (64),
# fault 20% and segment 10% less time, bean 6%, page 3%, and 12 classes 3% more; 256
# rows were slower on page and segment (more padding in the calls' walks). A single
# problem keeps CLASS_LANE_ROWS (128 were slower on bean at depth 2), and so do float
# weights, whose steps cost more (weighed or float lanes): at 128 rows, depth 3 with
# class-balanced weights took page 3.1-3.6 -> 4.1-4.4 s, segment 3.7-4.4 -> 5.0-6.3,
# fault 9.0 -> 12.0; with random weights page 5.0 -> 6.1, segment 3.4 -> 3.6.
SUBSET_LANE_ROWS = 128
# Rows per call of the channels-major walk (`_channels_major_full_rows`): at least
# WALK_MIN_ROWS, and for a request of a few rows (FEW_ROWS) WALK_FEW_ROWS, or one row
# a call where a step has few channels (`_walk_few_rows`). XLA's code
# for its steps costs about as much at 16 rows as at 32 (a 32-row call took 0.6-0.9x
# the time of a 16-row one over the same positions: 3 and 5 classes at n = 212,992,
# regression of 1 to 3 targets at n = 8,192 to 30,720), while below 16 a call's cost
# falls with its rows: a 4-row call took a fifth to a half of a 16-row one's time.
# With 2 to 8 lanes XLA's steps run far below their vector speed, and a one-row call
# has no row lanes at all: per row and position, one-row calls took 27-50 ns against
# 49-77 for 4-row calls (3 and 5 classes of counts, 3 classes of float weights, at n
# = 212,992 to 327,680) and 35-66 against 54-79 (one target, n = 8,192), but 149-254
# against 75-89 for three targets; 30 classes of float weights at n = 5,120 took 852
# against 675.
WALK_MIN_ROWS = 32
WALK_FEW_ROWS = 4
WALK_ONE_ROW_MAX_TARGETS = 1
# A larger request's last `rows % chunk` rows go in one-row calls, where at most this
# many, rather than in a call padded to `chunk` (KernelRunner._calls): by the costs
# above, 16 one-row calls cost 0.5-0.85 times one 32-row call, and 8 rows in 4-row
# calls (three targets) about 0.7 times.
WALK_TAIL_ROWS = 16
# A call of at most FEW_ROWS rows, on the sequential plan from FEW_ROWS_FROM padded
# samples, sweeps FEW_ROWS_CHUNK rows a call (the calls on the threads) where the
# kernel would pad it to a full call: a walk's lanes (`sweep_rows` then sweeps each row
# on its own) or a class-ordered call's rows. A walk's cost per position does not
# shrink with its rows. Measured with 4 cuts a row, 2 rows alone against a walk of 32
# lanes: page (n_pad = 4,608) 0.8 against 2.5 ms, bean (11,264) 1.7 against 9.4, 12
# classes (11,264) 3.4 against 16.9, 5 classes at 57,344 3.8 against 27.6; two-class
# walks of 64 rows 4.4 (eeg) to 39 ms (57,344) against 1.0 to 2.6; a class-ordered
# call of one row in 32 (30 classes, 5,120) 23.9 against 2.3 ms in 2. So up to 8 rows
# (two rounds of calls on two threads) cost less apart. Not below FEW_ROWS_FROM: the
# executable is one more compile (about half a second on a CPU), which the calls of
# shorter orders would take many solves to pay back.
FEW_ROWS = 8
FEW_ROWS_CHUNK = 2
FEW_ROWS_FROM = 4096
# An accelerator wants few large calls: up to this many rows, and intermediates of at
# most ACCELERATOR_SHARE of its free memory.
ACCELERATOR_MAX_ROWS = 4096
# Its calls' rows are padded to a power of ACCELERATOR_ROW_BASE, at least
# ACCELERATOR_MIN_ROWS: every distinct shape is a compile, which costs seconds on a GPU
# (a depth-3 solve met rows of every power of two from 2 to 256), while padding rows
# costs it little.
ACCELERATOR_MIN_ROWS = 64
ACCELERATOR_ROW_BASE = 8
ACCELERATOR_SHARE = 8
BYTES_PER_ELEMENT = 32  # a few live (chunk, cuts, length, channels) intermediates
MAX_CUTS = 32  # cuts per row per call; more are split into blocks
# Windows longer than n / GATHER_SHARE are scanned in place rather than gathered.
GATHER_SHARE = 4
WINDOW_CUTS = 8  # cuts per call for windowed and gathered rows
# Full sweeps of every feature for at least this many problems of one shared two-class
# layout go to `sweep_grid`, GRID_LANES problems (its vector lanes) per call.
GRID_MIN_PROBLEMS = 32
# A lane-sample of `sweep_grid` costs a small fraction of a row's cut-sample (measured
# with `python -m qbnb_jax.bench_batch`): the grid may compute up to this many times the
# elements the rows ask for, as it does when a problem has few tuples left.
GRID_ADVANTAGE = 16
# Regression lanes divide twice per lane-sample, as rows do per cut-sample, and
# sweep the zero-weight samples rows skip: a far smaller advantage.
SSE_GRID_ADVANTAGE = 8
# Root features get grid plans of their own (`_root_feature_groups`) only where that
# is estimated this many times cheaper than one plan: each plan adds calls.
GROUP_SAVING = 1.25
# Bytes of running sums per `sweep_grid` call (a share of a core's L2 cache; measured
# with `python -m qbnb_jax.bench_batch`).
GRID_CARRY_BYTES = 1 << 17
# The same for regression lanes, which chunk their root-feature slots too (measured
# with `python -m qbnb_jax.bench_batch --source concrete`).
SSE_GRID_CARRY_BYTES = 1 << 19
# A class-lane call of 32 lanes costs 20 to 30% less than one of 64 (segment, fault,
# page, bean and 8,103 and 53,940 generated rows of 4 and 5 classes), so rounds of at
# most 32 rows take 32, from this padded length on: a second executable per shape is a
# compile (about half a second on a CPU), which the calls of shorter orders (well under
# a millisecond) would take many solves to pay back; test suites and one-off fits of
# small data compile only the 64-lane one.
NARROW_LANES_FROM = 2048
# XLA's CPU backend vectorises for 256-bit registers unless told otherwise: regression
# lanes compiled for 512 (where the CPU has them; elsewhere LLVM splits them) cost
# about a third less per lane-sample (measured with `python -m qbnb_jax.bench_batch
# --source concrete`). Each lane's operations are the same, so are its floats.
SSE_GRID_COMPILER_OPTIONS = {"xla_cpu_prefer_vector_width": "512"}

# Compiled executables of this process. Each holds memory maps of its machine code,
# and JAX's own caches keep them alive too: a long-lived process that solves problems
# of many shapes (a notebook, a test suite) would exhaust the kernel's limit on maps
# (vm.max_map_count, often 65,530; about 65 maps an executable) and crash inside XLA.
# So at MAX_EXECUTABLES both are cleared (`jax.clear_caches`); an executable needed
# again is read back from the persistent cache or compiled.
MAX_EXECUTABLES = 384
_COMPILED: dict[tuple, object] = {}
_COMPILE_LOCK = threading.Lock()
_COUNTER_LOCK = threading.Lock()
# The stop event of the search running on this thread (`_search/anytime.py`), if any.
_STOP = threading.local()


class SearchStopped(Exception):
    """Raised inside a search whose caller stopped waiting for it (its deadline)."""


def set_stop_event(event: threading.Event | None) -> None:
    """Sweeps issued from this thread raise `SearchStopped` once `event` is set."""
    _STOP.event = event


def stop_event() -> threading.Event | None:
    """The calling thread's stop event (`set_stop_event`), to pass on to a helper thread."""
    return getattr(_STOP, "event", None)


def _stop_check():
    """A check for the calling thread's stop event, to run before each kernel call
    (also from the pool's threads, which have no event of their own)."""
    event = stop_event()

    def check() -> None:
        if event is not None and event.is_set():
            raise SearchStopped
    return check


def _shardings():
    """`(rows, replicated)` shardings over all devices, or None on one device.

    Rows of a kernel call are independent, so a call's rows are split across the
    devices (docs/design.md, "Execution plans") while the problem arrays are replicated on each.
    """
    devices = jax.devices()
    if len(devices) == 1:
        return None
    mesh = jax.sharding.Mesh(np.array(devices), ("rows",))
    spec = jax.sharding.PartitionSpec
    return (jax.sharding.NamedSharding(mesh, spec("rows")),
            jax.sharding.NamedSharding(mesh, spec()))


def _accelerator_free_bytes() -> int:
    """Free memory of the first device (its allocator's view), or 1 GiB where unknown
    (a CPU forced onto the parallel plan)."""
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" not in stats:
        return 1 << 30
    return max(0, int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))


def _zero_padded(a: np.ndarray, rows: int) -> np.ndarray:
    """`a` as int32 with zero rows appended up to `rows` (`np.pad`'s result; np.pad
    costs tens of microseconds a call in Python, and a deep search pads ~10^3 times)."""
    out = np.zeros((rows, *a.shape[1:]), dtype=np.int32)
    out[: len(a)] = a
    return out


def _grid_tuples(problem: np.ndarray, f0: np.ndarray, cuts: np.ndarray, p: int
                 ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """A full-sweep request's tuples (runs of consecutive rows sharing problem, root
    feature and cuts): each row's tuple, each tuple's first row, K (1 where every
    tuple repeats one cut, the greedy start's request; else the rows' cuts), and r,
    each tuple's place among the tuples of its (problem, root feature)."""
    starts = np.ones(len(f0), dtype=bool)
    starts[1:] = ((problem[1:] != problem[:-1]) | (f0[1:] != f0[:-1])
                  | (cuts[1:] != cuts[:-1]).any(axis=1))
    tuple_of_row = np.cumsum(starts) - 1
    first_row = np.flatnonzero(starts)
    t_cuts = cuts[first_row]
    K = 1 if (t_cuts == t_cuts[:, :1]).all() else cuts.shape[1]
    pair = problem[first_row].astype(np.int64) * p + f0[first_row]
    order = np.argsort(pair, kind="stable")
    new_pair = np.r_[True, pair[order][1:] != pair[order][:-1]]
    group_start = np.maximum.accumulate(np.where(new_pair, np.arange(len(order)), 0))
    r = np.empty(len(order), dtype=np.int64)
    r[order] = np.arange(len(order)) - group_start
    return tuple_of_row, first_row, K, r


def _grid_width(group: np.ndarray, r: np.ndarray, rows_of_tuple: np.ndarray, K: int,
                lanes_per_width: np.ndarray, row_cost: int) -> tuple[np.ndarray, np.ndarray]:
    """`(cost, width)` per group of tuples: the cheapest `sweep_grid` width for the
    tuples of each `group` (at places `r` in their (problem, root feature), with
    `rows_of_tuple` rows each and K cuts), its cost the lanes (`lanes_per_width[g]` per
    place of the width) plus `row_cost` for each row of the tuples beyond the width,
    which sweep rows. Ties go to the narrower width."""
    G, R = len(lanes_per_width), int(r.max()) + 1
    by_r = np.bincount(group * R + r, weights=rows_of_tuple, minlength=G * R).reshape(G, R)
    # rows of each group's tuples at r or beyond; none beyond the last place
    later = np.zeros((G, R + 1))
    later[:, :R] = np.cumsum(by_r[:, ::-1], axis=1)[:, ::-1]
    best_cost = np.full(G, np.inf)
    best_width = np.zeros(G, dtype=np.int64)
    widest = pow2_at_least(R * K)
    for width in (1 << e for e in range(widest.bit_length())):
        if width < K:  # no tuple fits
            continue
        cost = lanes_per_width * width + row_cost * later[:, min(width // K, R)]
        better = cost < best_cost
        best_cost[better], best_width[better] = cost[better], width
    return best_cost, best_width


def _walk_few_rows(data: SweepData) -> int:
    """Rows per call of a channels-major walk for a request of at most FEW_ROWS rows:
    one for fewer than CHANNELS_MAJOR_FROM_CLASSES classes and for one regression
    target, else WALK_FEW_ROWS (see there)."""
    if data.loss_kind == "sse":
        few_channels = data.sorted_scan.shape[-1] - 1 <= WALK_ONE_ROW_MAX_TARGETS
    else:
        few_channels = data.n_classes < CHANNELS_MAJOR_FROM_CLASSES
    return 1 if few_channels else WALK_FEW_ROWS


def _padded_lengths(counts) -> np.ndarray | None:
    """`padded_length` of each sample count, None for None."""
    return None if counts is None else np.array([padded_length(int(n)) for n in counts])


def pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def _pow4_at_least(x: int) -> int:
    return 1 << 2 * -(-max(0, int(x) - 1).bit_length() // 2)


def _pow2_at_most(x: int) -> int:
    return 1 << (max(1, int(x)).bit_length() - 1)


@dataclasses.dataclass
class Counters:
    """Work and compile accounting, shared by a runner and its subset runners."""

    compile_seconds: float = 0.0
    compiles: int = 0
    rows_evaluated: int = 0
    cut_evaluations: int = 0
    # Rows x cuts x samples swept (padding included): deterministic, unlike timings,
    # so a change's effect on the work can be read without benchmark noise.
    cut_elements: int = 0
    # Kernel calls, and the seconds spent from issuing each until its results were on
    # the host (summed over the threads that issue them); the rest of a solve's time
    # is host work. Bytes of row arguments sent and of results read back.
    device_calls: int = 0
    device_seconds: float = 0.0
    bytes_to_device: int = 0
    bytes_from_device: int = 0

    def add(self, **counts) -> None:
        """Add to the counters; safe from several threads (a batch's halves)."""
        with _COUNTER_LOCK:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


COUNTER_NAMES = tuple(field.name for field in dataclasses.fields(Counters))


class GridPlan(NamedTuple):
    """Where `sweep_grid` puts a request's rows (`KernelRunner._grid_plan`).

    Block b's lanes are problems `first[b] + lane` (`first`: `(blocks,)`, multiples of
    GRID_LANES), `slot_f0` `(S,)` root features, `feature` `(F,)` the features swept and
    `lane_cuts` `(blocks, S, width, GRID_LANES)` the cuts (0 where unused). Per row: the
    `block`, `slot` and `lane` of its group, the `offset` of its `K` cuts in the group's
    width and its feature's `column` in `feature`; `on_grid`, whether it is on the grid
    at all (the others sweep rows). `elements`: the lane-samples swept.
    """

    K: int
    lane_cuts: np.ndarray
    first: np.ndarray
    slot_f0: np.ndarray
    feature: np.ndarray
    column: np.ndarray
    block: np.ndarray
    slot: np.ndarray
    offset: np.ndarray
    lane: np.ndarray
    elements: int
    on_grid: np.ndarray


class KernelRunner:
    """Runs sweeps for one problem and accounts for compile and run time."""

    def __init__(self, problem: Problem, data: SweepData | None = None,
                 sample_counts: np.ndarray | None = None):
        self.problem = problem
        self.data = SweepData.from_problem(problem) if data is None else data
        self.counters = Counters()
        self.problem_index = 0  # sweeps without a `problem` argument use this problem
        self._data_key = self._key_of(self.data)
        # (problems of data,) the padded length of each problem's own samples: kernel
        # choices that change how float sums group their terms depend on these alone,
        # never on a batch's padding (`_own_length`)
        self._own_lengths = _padded_lengths([problem.n] if data is None else sample_counts)

    @staticmethod
    def _key_of(data: SweepData) -> tuple:
        leaves, structure = jax.tree_util.tree_flatten(data)
        # The structure holds the static fields (loss kind, two-class, packing).
        return structure, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)

    def for_compact(self, problems: list[Problem], chunks: list | None = None,
                    steps_per_octave: int = 4, count_base: int = 16,
                    host_out: dict | None = None) -> KernelRunner:
        """A runner for `compact(...)` subsets, each laid out on its own samples.

        Counters (and the compile cache) are shared with this runner. Lengths are
        padded in `steps_per_octave` steps per octave and problem counts to powers of
        `count_base` (padding problems are zero pages no sweep reads): a deep search
        makes many such batches, and every distinct shape is a compile.
        `chunks`: the `data.CompactSides` that hold `problems` (in order), whose padded
        arrays make the tables with less copying. `host_out`: as for `from_problems`.
        """
        child = self.for_problem(0, problems[0])
        child.data = SweepData.from_problems(problems, problems, list(range(len(problems))),
                                             steps_per_octave=steps_per_octave,
                                             count_base=count_base,
                                             chunks=chunks, host_out=host_out)
        child._problem_lengths = np.array([pr.n for pr in problems])
        child._own_lengths = _padded_lengths(child._problem_lengths)
        child._data_key = self._key_of(child.data)
        child._limit_data = None  # built for this data when asked for
        child._compact_problems = problems
        return child

    def for_data(self, problem: Problem, data: SweepData) -> KernelRunner:
        """A runner for the problems of `data` (built by the caller), sharing this
        runner's counters and compiled kernels."""
        child = self.for_problem(0, problem)
        child.data = data
        child._data_key = self._key_of(data)
        child._problem_lengths = child._compact_problems = child._limit_data = None
        child._own_lengths = None
        return child

    def for_problem(self, index: int, problem: Problem) -> KernelRunner:
        """A view of this runner whose sweeps default to problem `index` of its data."""
        child = KernelRunner.__new__(KernelRunner)
        child.__dict__.update(self.__dict__)
        child.problem = problem
        child.problem_index = index
        return child

    def _own_length(self, problem: np.ndarray) -> np.ndarray | int:
        """The padded length of each row's problem alone (`padded_length` of its own
        samples), where known; else the data's.

        Windows choose between the in-place and the gathered sweep by it. On the
        parallel plan the two group float sums differently (a log-depth scan over the
        window's samples or over all positions), so a choice by the data's length
        would give a problem other last bits in a batch (padded to its largest
        problem) than alone."""
        own = self.__dict__.get("_own_lengths")
        return self.data.length if own is None else own[problem]

    def _rows_of(self, problem, rows: int) -> np.ndarray:
        return np.full(rows, self.problem_index, np.int32) if problem is None else problem

    def _executable(self, name: str, fn, args: tuple, statics: dict, options=None):
        key = (name, fn, self._data_key, tuple(a.shape for a in args[1:]),
               tuple(statics.items()), jax.device_count())
        exe = _COMPILED.get(key)
        if exe is not None:
            return exe
        with _COMPILE_LOCK:  # threads needing the same executable compile it once
            return self._compile(key, fn, args, statics, options)

    def _compile(self, key, fn, args, statics, options=None):
        exe = _COMPILED.get(key)
        if exe is None:
            if len(_COMPILED) >= MAX_EXECUTABLES:  # under the lock: no other compile
                _COMPILED.clear()
                jax.clear_caches()
            start = time.perf_counter()
            exe = fn.lower(*args, **statics).compile(compiler_options=options)
            self.counters.add(compile_seconds=time.perf_counter() - start, compiles=1)
            _COMPILED[key] = exe
        return exe

    def _replicated(self, sharding, data=None) -> SweepData:
        """This runner's data (or `data`) on every device (placed once per data)."""
        data = self.data if data is None else data
        placed = self.__dict__.get("_placed")
        if placed is None or placed[0] is not data:
            placed = (data, jax.device_put(data, sharding))
            self._placed = placed
        return placed[1]

    def _account_call(self, start: float, args: tuple, results: tuple) -> None:
        self.counters.add(device_calls=1, device_seconds=time.perf_counter() - start,
                          bytes_to_device=sum(np.asarray(a).nbytes for a in args),
                          bytes_from_device=sum(r.nbytes for r in results))

    def _few_rows(self, rows: int, length: int) -> bool:
        """Whether a call of `rows` rows over `length` positions goes FEW_ROWS_CHUNK
        rows at a time (FEW_ROWS)."""
        return rows <= FEW_ROWS and self._splits_few_rows(length)

    def _splits_few_rows(self, length: int) -> bool:
        """Whether few rows over `length` positions go in calls of their own rather than
        in a padded call (FEW_ROWS_FROM, the sequential plan)."""
        return length >= FEW_ROWS_FROM and self.data.plan == "sequential"

    def _chunk(self, cuts: int, length: int, rows: int, name: str = "full") -> int:
        if name == "rows" or (name == "full" and uses_class_order(self.data)
                              and self._few_rows(rows, length)):
            return FEW_ROWS_CHUNK
        # compacted subsets: their rows walk to each call's longest (`_full_rows`)
        subsets = self.__dict__.get("_problem_lengths") is not None
        if name == "full" and sweeps_class_lanes(self.data):
            # the rows are its vector lanes; a round of at most half of them takes half
            # the lanes, where a call costs enough to pay for compiling a second
            # executable (NARROW_LANES_FROM)
            if rows <= CLASS_LANE_ROWS // 2 and length >= NARROW_LANES_FROM:
                return CLASS_LANE_ROWS // 2
            if (subsets and rows > SUBSET_LANE_ROWS and self.data.loss_kind == "count"
                    and self.data.n_classes < CHANNELS_MAJOR_FROM_CLASSES):
                # compacted subsets (a depth-3 search's sides): their rounds hold many
                # rows, and a step's fixed cost weighs most where its lanes carry few
                # integer counts
                return SUBSET_LANE_ROWS
            return CLASS_LANE_ROWS
        if name == "full" and walks_two_class_rows(self.data):
            # a step's fixed cost is shared by all of a call's rows: as few calls as
            # leave every thread one
            most = (TWO_CLASS_WALK_ROWS if np.issubdtype(self.data.sorted_scan.dtype, np.integer)
                    else TWO_CLASS_FLOAT_WALK_ROWS)
            return min(most, max(most // 4, pow2_at_least(-(-rows // THREADS))))
        walk = name == "full" and walks_channels_major_rows(self.data)
        if walk and self._few_rows(rows, length):
            return _walk_few_rows(self.data)
        # class-ordered sweeps carry one count per (row, cut), whatever the classes
        channels = 1 if uses_class_order(self.data) else int(self.data.sorted_scan.shape[-1])
        per_row = cuts * (length + 1) * channels
        if name == "full" and self.data.plan == "sequential" and sweeps_channels_major(self.data):
            # it carries the (channel, cut, row) sums; what a call streams is a block of
            # each row's channels and root positions at a time, one position a step
            per_row = (min(length, WALK_BLOCK) + 1) * (channels + 1)
        if self.data.plan == "parallel":
            fit = _accelerator_free_bytes() // (ACCELERATOR_SHARE * BYTES_PER_ELEMENT * per_row)
            want = max(ACCELERATOR_MIN_ROWS, count_bucket(rows, ACCELERATOR_ROW_BASE))
            return max(1, min(ACCELERATOR_MAX_ROWS, _pow2_at_most(fit), want))
        budget = CHUNK_ELEMENTS if self.data.binary else CHANNEL_CHUNK_ELEMENTS
        chunk = max(1, min(MAX_CHUNK, _pow2_at_most(budget // max(per_row, 1))))
        if walk:
            return max(chunk, WALK_MIN_ROWS)
        if not self.data.binary:
            return chunk
        # as few calls as leave every thread one: each call walks all `length`
        # positions, at a cost per step that more rows share
        return min(chunk * BIG_CHUNK_FACTOR, max(chunk, pow2_at_least(-(-rows // THREADS))))

    def _calls(self, name: str, rows: int, chunk: int, length: int) -> list[tuple[int, int]]:
        """`(first row, rows)` of each call of a request of `rows` rows: calls of `chunk`
        rows, but for a channels-major walk the last `rows % chunk` rows in calls of
        `_walk_few_rows` where they are few (WALK_TAIL_ROWS), rather than a call padded
        to `chunk` rows. Largest first, so the threads start on them."""
        tail = rows % chunk
        whole = rows - tail if rows > chunk and tail else rows
        if (whole < rows and name == "full" and jax.device_count() == 1
                and self._splits_few_rows(length) and walks_channels_major_rows(self.data)):
            few = _walk_few_rows(self.data)
            if tail <= (WALK_TAIL_ROWS if few == 1 else FEW_ROWS):
                return ([(r0, chunk) for r0 in range(0, whole, chunk)]
                        + [(r0, few) for r0 in range(whole, rows, few)])
        return [(r0, chunk) for r0 in range(0, rows, chunk)]

    def _run(self, name, fn, length, row_arrays, cuts, extra_statics, cut_block=MAX_CUTS,
             data=None, row_length=None):
        """Pad rows/cuts to buckets, split into calls, return (prefix, suffix) numpy.

        `data`: what `fn` reads, if not this runner's `SweepData`. `row_length`: the
        rows' own lengths, ascending, for kernels whose walk stops after a call's
        longest row (`sweep_full_within`): the cut-elements counted are then each
        call's rows times that length."""
        rows, n_cuts = cuts.shape
        out_pre = np.empty((rows, n_cuts), dtype=np.float64)
        out_suf = np.empty((rows, n_cuts), dtype=np.float64)
        if rows == 0:
            return out_pre, out_suf
        cut_block = min(pow2_at_least(n_cuts), cut_block)
        shardings = _shardings()
        data = self.data if data is None else data
        if shardings is not None:
            data = self._replicated(shardings[1], data)
        # One call's rows: a cache-sized chunk per device.
        chunk = self._chunk(cut_block, length, rows // jax.device_count(), name)
        chunk *= jax.device_count()
        calls = self._calls(name, rows, chunk, length)
        stop = _stop_check()

        def place(rows_of_call: tuple[np.ndarray, ...]):
            if shardings is None:
                return rows_of_call
            return tuple(jax.device_put(a, shardings[0]) for a in rows_of_call)
        for c0 in range(0, n_cuts, cut_block):
            block = cuts[:, c0 : c0 + cut_block]
            width = block.shape[1]
            if width < cut_block:  # repeat the last cut: duplicates change no minimum
                block = np.concatenate(
                    [block, np.repeat(block[:, -1:], cut_block - width, axis=1)], axis=1
                )
            padded_rows = max(r0 + size for r0, size in calls)
            padded = [_zero_padded(a, padded_rows) for a in (*row_arrays, block)]
            stop()
            exes = {size: self._executable(
                        name, fn, (data, *place(tuple(a[:size] for a in padded))), extra_statics)
                    for size in sorted({size for _, size in calls}, reverse=True)}

            def run_chunk(call: tuple[int, int], exes=exes, padded=padded, c0=c0,
                          width=width) -> None:
                stop()
                r0, size = call
                r1 = min(rows, r0 + size)
                args = tuple(a[r0 : r0 + size] for a in padded)
                start = time.perf_counter()
                pre, suf = (np.asarray(a) for a in exes[size](data, *place(args)))
                self._account_call(start, args, (pre, suf))
                out_pre[r0:r1, c0 : c0 + width] = pre[: r1 - r0, :width]
                out_suf[r0:r1, c0 : c0 + width] = suf[: r1 - r0, :width]

            # One cache-sized call per chunk of rows. An XLA CPU call runs on one core
            # and releases the GIL, so calls from a few threads use the other cores.
            run_all(run_chunk, calls)
            walked = (rows * length if row_length is None else
                      sum(len(part) * int(part[-1]) for part in
                          (row_length[r0 : r0 + size] for r0, size in calls)))
            self.counters.add(rows_evaluated=rows, cut_evaluations=rows * width,
                              cut_elements=cut_block * walked)
        return out_pre, out_suf

    def full(self, f0: np.ndarray, f: np.ndarray, cuts: np.ndarray, problem=None):
        """`L1(prefix_c, f)` and `L1(suffix_c, f)` over all samples, f0's order.

        `problem`: which of the data's problems each row belongs to (default:
        `problem_index`). Many problems of a shared two-class layout go to
        `sweep_grid` (see `_grid_plan`), the rest to `sweep_full`.
        """
        problem = self._rows_of(problem, len(f0))
        pre, suf = np.empty(cuts.shape), np.empty(cuts.shape)
        rest = np.ones(len(f0), dtype=bool)
        for rows in self._root_feature_groups(problem, f0, f, cuts):
            plan = self._grid_plan(problem[rows], f0[rows], f[rows], cuts[rows])
            if plan is None:
                continue
            grid_pre, grid_suf = self._run_grid(plan, f[rows], cuts.shape[1])
            on = rows[plan.on_grid]
            pre[on], suf[on] = grid_pre[plan.on_grid], grid_suf[plan.on_grid]
            rest[on] = False
        if rest.any():
            pre[rest], suf[rest] = self._full_rows(problem[rest], f0[rest], f[rest], cuts[rest])
        return pre, suf

    def _full_rows(self, problem, f0, f, cuts):
        """`sweep_full` of these rows. Subsets of different sizes share one padded
        layout (`for_compact`); where the kernel walks positions one by one
        (`scans_own_length`), the rows go to calls in order of their subset's size,
        each call's walk stopping after its longest subset (`sweep_full_within`), so
        a small side costs about its own n, not the largest side's. Rows of problems
        with exact weights (`_exact_rows`) go to calls of their own."""
        exact = self._exact_rows(problem)
        if exact is None or not exact.any():
            return self._walk_rows(problem, f0, f, cuts, {})
        if exact.all():
            return self._walk_rows(problem, f0, f, cuts, {"root_totals": True})
        pre, suf = np.empty(cuts.shape), np.empty(cuts.shape)
        for rows, statics in ((exact, {"root_totals": True}), (~exact, {})):
            pre[rows], suf[rows] = self._walk_rows(problem[rows], f0[rows], f[rows],
                                                   cuts[rows], statics)
        return pre, suf

    def _walk_rows(self, problem, f0, f, cuts, statics: dict):
        lengths = self.__dict__.get("_problem_lengths")
        if (lengths is None and self._few_rows(len(f0), self.data.length)
                and sweeps_rows_apart(self.data)):
            return self._run("rows", sweep_rows, self.data.length, [problem, f0, f], cuts,
                             statics)
        if lengths is None or not scans_own_length(self.data):
            return self._run("full", sweep_full, self.data.length, [problem, f0, f], cuts,
                             statics)
        length = lengths[problem]
        order = np.argsort(length, kind="stable")
        pre, suf = np.empty(cuts.shape), np.empty(cuts.shape)
        pre[order], suf[order] = self._run(
            "full", sweep_full_within, self.data.length,
            [problem[order], f0[order], f[order], length[order]], cuts[order], statics,
            row_length=length[order])
        return pre, suf

    def _exact_rows(self, problem: np.ndarray) -> np.ndarray | None:
        """Which rows' problems have exact weights (`SweepData.exact_weights`), whose
        regression sweeps on the sequential plan read their set sums rather than sum
        them (`root_totals`); None where the data's sweeps make no such choice. The
        choice is each problem's own, so a problem in a batch gets its solve's
        numbers: the two kinds are compiled apart, and XLA's CPU code may contract
        a product and a sum into one rounding differently in each."""
        if self.data.loss_kind != "sse" or self.data.plan != "sequential":
            return None
        cached = self.__dict__.get("_exact")
        if cached is None or cached[0] is not self.data:
            cached = (self.data, np.asarray(self.data.exact_weights))
            self._exact = cached
        return cached[1][problem]

    def limited(self, f0: np.ndarray, f: np.ndarray, cuts: np.ndarray, problem=None):
        """`full` for a problem with leaf limits (`_device/limits.py`): columns whose
        cut is given as `-(c + 1)` get the constrained best stumps, the others the
        unconstrained ones."""
        if self.__dict__.get("_limit_data") is None:
            problems = self.__dict__.get("_compact_problems") or [self.problem]
            self._limit_data = limit_data(problems, self.data)
        problem = self._rows_of(problem, len(f0))
        return self._run("limited", sweep_limited, self.data.length, [problem, f0, f], cuts,
                         {}, data=self._limit_data)

    def _grid_plan(self, problem, f0, f, cuts) -> GridPlan | None:
        """Where each row's cuts go in `sweep_grid`'s lanes, or None to sweep rows.

        Rows come grouped by tuple (consecutive rows sharing problem, root feature and
        cuts). The tuples of one (problem, root feature) share a lane group, their cuts
        side by side; a slot per root feature present. The grid computes every feature
        asked for (by any row) of every group, so it is chosen only when its lanes are
        at most GRID_ADVANTAGE times the rows' cut-elements, and for at least
        GRID_MIN_PROBLEMS problems. (Late iterations ask for a few features: the ones
        the surviving trees can still use.)
        """
        rows = len(f0)
        if not self.can_sweep_grid() or rows == 0:
            return None
        p = int(self.data.perm.shape[1])
        tuple_of_row, first_row, K, r = _grid_tuples(problem, f0, cuts, p)
        t_problem, t_f0, t_cuts = problem[first_row], f0[first_row], cuts[first_row]
        if len(np.unique(t_problem)) < GRID_MIN_PROBLEMS:
            return None
        slot_f0, t_slot = np.unique(t_f0, return_inverse=True)
        slots = min(p, pow2_at_least(len(slot_f0)))
        feature, column = np.unique(f, return_inverse=True)
        F = min(p, pow2_at_least(len(feature)))
        # Blocks are fixed ranges of problems (a slice of `grid_scan` each), swept when
        # one of their problems asks.
        t_block, t_lane = np.divmod(t_problem, GRID_LANES)
        present, t_block = np.unique(t_block, return_inverse=True)
        blocks = len(present)
        # The width fits the groups' first tuples; a few groups with many tuples would
        # widen every group's lanes, so their later tuples may go to `sweep_full`
        # instead: the width of least estimated cost, rows weighted GRID_ADVANTAGE.
        row_cost = self._grid_row_cost(cuts.shape[1])
        rows_of_tuple = np.bincount(tuple_of_row, minlength=len(first_row))
        (cost,), (width,) = _grid_width(np.zeros(len(r), dtype=np.int64), r, rows_of_tuple, K,
                                        np.array([blocks * GRID_LANES * slots * F]), row_cost)
        if cost > row_cost * rows:
            return None
        grid_elements = blocks * GRID_LANES * slots * width * F
        fits = (r + 1) * K <= width  # the tuples on the grid; the others sweep rows
        lane_cuts = np.zeros((blocks, slots, width, GRID_LANES), dtype=np.int32)
        for k in range(K):
            lane_cuts[t_block[fits], t_slot[fits], r[fits] * K + k, t_lane[fits]] = (
                t_cuts[fits, k])
        padded_f0 = np.zeros(slots, dtype=np.int32)
        padded_f0[: len(slot_f0)] = slot_f0
        padded_feature = np.full(F, feature[0], dtype=np.int32)  # repeats: unread columns
        padded_feature[: len(feature)] = feature
        return GridPlan(K=K, lane_cuts=lane_cuts, first=(present * GRID_LANES).astype(np.int32),
                        slot_f0=padded_f0, feature=padded_feature, column=column,
                        block=t_block[tuple_of_row],
                        slot=t_slot[tuple_of_row], offset=(r * K)[tuple_of_row],
                        lane=t_lane[tuple_of_row], elements=grid_elements * self.data.length,
                        on_grid=fits[tuple_of_row])

    def _grid_row_cost(self, n_cuts: int) -> int:
        """A row's cost in `_grid_plan`'s units (lane-samples of one cut)."""
        advantage = SSE_GRID_ADVANTAGE if self.data.loss_kind == "sse" else GRID_ADVANTAGE
        return advantage * pow2_at_least(n_cuts)

    def _root_feature_groups(self, problem, f0, f, cuts) -> list[np.ndarray]:
        """The rows in groups of root features, each to get a `_grid_plan` of its own.

        One plan gives every root feature's slot the width of the most tuples any
        (problem, root feature) has, and sweeps every feature asked for by any row.
        Late iterations keep many tuples at a few root features and one or none at
        the others, whose slots are then mostly empty lanes. So the root features are
        grouped by the width each would take alone (by `_grid_width`'s cost); a group
        gets its own plan where the groups' estimated lanes cost less than one plan's
        by GROUP_SAVING. Root features whose rows cost less than their lanes go to no
        group (they sweep rows). Regression lanes only: their lane-samples cost the
        most, while count lanes gained nothing measurable (the extra calls of page's
        class grid cost more than its emptier lanes saved).
        """
        whole = [np.arange(len(f0))]
        if not self.can_sweep_grid() or self.data.loss_kind != "sse" or len(f0) == 0:
            return whole
        roots = np.unique(f0)
        if len(roots) < 2:
            return whole
        p = int(self.data.perm.shape[1])
        tuple_of_row, first_row, K, r = _grid_tuples(problem, f0, cuts, p)
        t_block = problem[first_row] // GRID_LANES
        rows_of_tuple = np.bincount(tuple_of_row, minlength=len(first_row))
        row_cost = self._grid_row_cost(cuts.shape[1])

        def cost_of(row_group: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """`_grid_width` of one plan per group of rows (`row_group`, 0..G-1, whole
            tuples), with `slots` root-feature slots each: lanes for the blocks of
            problems and the features the group's rows ask for."""
            group = row_group[first_row]
            G = len(slots)
            blocks = np.bincount(np.unique(group * (t_block.max() + 1) + t_block)
                                 // (t_block.max() + 1), minlength=G)
            features = np.bincount(np.unique(row_group * p + f) // p, minlength=G)
            F = np.array([min(p, pow2_at_least(x)) for x in features])
            return _grid_width(group, r, rows_of_tuple, K, blocks * GRID_LANES * slots * F,
                               row_cost)

        root_of_row = np.searchsorted(roots, f0)
        (one_plan,), _ = cost_of(np.zeros(len(f0), dtype=np.int64),
                                 np.array([min(p, pow2_at_least(len(roots)))]))
        cost, width = cost_of(root_of_row, np.ones(len(roots), dtype=np.int64))
        alone = row_cost * np.bincount(root_of_row, minlength=len(roots))
        width = np.where(alone <= cost, 0, width)  # 0: the root feature sweeps rows
        widths, class_of_root = np.unique(width, return_inverse=True)
        if len(widths) == 1:
            return whole  # every root feature alike
        class_of_row = class_of_root[root_of_row]
        members = np.bincount(class_of_root, minlength=len(widths))
        class_cost, _ = cost_of(class_of_row, np.array([min(p, pow2_at_least(m))
                                                         for m in members]))
        rows = np.bincount(class_of_row, minlength=len(widths))
        grouped = np.where(widths == 0, row_cost * rows, class_cost).sum()
        if grouped * GROUP_SAVING > one_plan:
            return whole  # too little to gain
        return [np.flatnonzero(class_of_row == c) for c in range(len(widths)) if widths[c]]

    def _problem_axis(self):
        """`(data, place)`: `place(array, axis)` splits the problem axis over the devices.

        The problems of a `sweep_grid` call are independent vector lanes, so with
        several devices each gets a share of them (the data replicated).
        """
        shardings = _shardings()
        if shardings is None or GRID_LANES % jax.device_count():
            return self.data, lambda array, axis: array
        mesh = shardings[0].mesh

        def place(array, axis):
            spec = [None] * array.ndim
            spec[axis] = "rows"
            return jax.device_put(array, jax.sharding.NamedSharding(
                mesh, jax.sharding.PartitionSpec(*spec)))

        return self._replicated(shardings[1]), place

    def _run_grid(self, plan: GridPlan, f: np.ndarray, n_cuts: int):
        """Rows swept by `sweep_grid`, as `_grid_plan` placed them."""
        rows = len(f)
        out_pre = np.empty((rows, n_cuts))
        out_suf = np.empty((rows, n_cuts))
        data, place = self._problem_axis()
        lane_cuts, slot_f0 = plan.lane_cuts, plan.slot_f0
        _, slots, width, lanes = lane_cuts.shape
        features = self._grid_feature_chunks(plan.feature, slots * width * lanes)
        step = self._grid_slot_chunk(slots, width * lanes)
        args = (data, plan.first[0], slot_f0[:step], features[0],
                place(lane_cuts[0, :step], 2))
        options = (SSE_GRID_COMPILER_OPTIONS if self.data.loss_kind == "sse"
                   and jax.default_backend() == "cpu" else None)
        # regression lanes of exact weights read their set sums (`root_totals`); a
        # block holding both kinds is swept twice, each row taking its own kind's
        exact = self._exact_rows(plan.first[plan.block] + plan.lane)
        if exact is None:
            exact = np.zeros(rows, dtype=bool)
        exes = {kind: self._executable("grid", sweep_grid, args,
                                       {"root_totals": True} if kind else {}, options)
                for kind in np.unique(exact[plan.on_grid]).tolist()}
        # each row's K cuts (K = 1: one cut, repeated) as flat indices of a block's
        # [feature column, slot, cut, lane] output: one np.take per output (far cheaper
        # than a fancy index)
        cut_index = plan.offset[:, None] + np.arange(plan.K)[None, :]
        flat = (((plan.column[:, None] * slots + plan.slot[:, None]) * width + cut_index)
                * lanes + plan.lane[:, None])

        stop = _stop_check()
        stop()

        def sweep_block(b: int, exe) -> tuple[np.ndarray, np.ndarray]:
            parts = []
            for chunk in features:
                by_slot = []
                for s0 in range(0, slots, step):
                    args = (plan.first[b], slot_f0[s0 : s0 + step], chunk,
                            lane_cuts[b, s0 : s0 + step])
                    start = time.perf_counter()
                    out = tuple(np.asarray(a) for a in exe(data, *args[:3],
                                                           place(args[3], 2)))
                    self._account_call(start, args, out)
                    by_slot.append(out)
                parts.append(by_slot[0] if len(by_slot) == 1 else tuple(
                    np.concatenate([o[i] for o in by_slot], axis=1) for i in (0, 1)))
            return tuple(np.concatenate([part[i] for part in parts]) if len(parts) > 1
                         else parts[0][i] for i in (0, 1))

        def run_block(b: int) -> None:
            stop()
            block = (plan.block == b) & plan.on_grid
            for kind in np.unique(exact[block]).tolist():
                pre, suf = sweep_block(b, exes[kind])
                mine = np.nonzero(block & (exact == kind))[0]
                out_pre[mine] = np.take(pre.reshape(-1), flat[mine])
                out_suf[mine] = np.take(suf.reshape(-1), flat[mine])

        blocks = len(lane_cuts)
        run_all(run_block, range(blocks))
        on_grid = int(plan.on_grid.sum())
        self.counters.add(rows_evaluated=on_grid, cut_evaluations=on_grid * n_cuts,
                          cut_elements=plan.elements)
        return out_pre, out_suf

    def _grid_slot_chunk(self, slots: int, lanes_per_slot: int) -> int:
        """Root-feature slots per `sweep_grid` call: all of them, but for regression
        sums the most (a divisor of `slots`) whose running and set sums fit
        SSE_GRID_CARRY_BYTES (a regression lane carries 3 S + 2 floats: one feature's
        carry of 8 slots spilled out of a core's L2 and cost 1.5x per lane-sample)."""
        if self.data.loss_kind != "sse":
            return slots
        per_slot = (3 * self.data.grid_scan.shape[2] + 2) * lanes_per_slot * 8
        fits = max(1, SSE_GRID_CARRY_BYTES // per_slot)
        return max(d for d in range(1, slots + 1) if slots % d == 0 and d <= fits)

    def _grid_feature_chunks(self, feature: np.ndarray, lanes_per_feature: int
                             ) -> list[np.ndarray]:
        """`feature` in chunks of equal length, each one `sweep_grid` call.

        Each two-class lane carries the prefix sum and its four extremes: each call
        keeps at most GRID_CARRY_BYTES of them, so that they stay in a core's cache.
        The last chunk repeats its first feature. Class counts and regression sums
        scan one feature after another within a call (`_class_grid`, `_sse_grid`),
        carrying one feature's sums at a time: one chunk."""
        if not self.data.binary:
            return [feature]
        per_feature = 5 * lanes_per_feature * self.data.grid_scan.dtype.itemsize
        size = max(1, min(len(feature), GRID_CARRY_BYTES // per_feature))
        count = -(-len(feature) // size)
        padded = np.full(count * size, feature[0], dtype=feature.dtype)
        padded[: len(feature)] = feature
        return list(padded.reshape(count, size))

    def can_sweep_grid(self) -> bool:
        """Whether this data serves `sweep_grid`: it has `grid_scan`, which is built for
        integer counts of up to 8 classes and regression sums of one shared layout.
        Regression lanes form the floats of `_channels_major_full_rows`, so they serve
        only where `sweep_full` takes it."""
        if self.data.loss_kind == "sse" and not sweeps_channels_major(self.data):
            return False
        return self.data.grid_scan.size > 0

    def window(self, f0, f, lo, hi, cuts, problem=None):
        """As `full`, restricted to samples at positions [lo, hi) of f0's order.

        Rows whose window is a large share of n scan all n samples; the others gather
        their window's samples and sort them, grouped by length (steps of 4x).
        """
        problem = self._rows_of(problem, len(f0))
        pre = np.empty(cuts.shape)
        suf = np.empty(cuts.shape)
        bucket = np.array([max(16, _pow4_at_least(w)) for w in hi - lo], dtype=np.int64)
        wide = bucket * GATHER_SHARE > self._own_length(problem)
        groups = [("windowed", sweep_windowed, self.data.length, wide, {})]
        for length in np.unique(bucket[~wide]):
            rows = ~wide & (bucket == length)
            groups.append(("gathered", sweep_gathered, int(length), rows, {"length": int(length)}))
        for name, fn, length, rows, statics in groups:
            if rows.any():
                args = [problem[rows], f0[rows], f[rows], lo[rows], hi[rows]]
                pre[rows], suf[rows] = self._run(
                    name, fn, length, args, cuts[rows], statics, cut_block=WINDOW_CUTS
                )
        return pre, suf
