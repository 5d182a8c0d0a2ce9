"""Device kernels: batched best-stump sweeps (pure functions, jitted per shape bucket).

Every bound of the paper reduces to one primitive, `L1(S, f)`: the best stump of a
sample set `S` on feature `f`. Here `S` is always "samples whose position in root
feature f0's order lies in [lo, c)" (a prefix-like set) or "in [c, hi)" (its
complement within [lo, hi)), for a handful of cut positions `c` at once. One row of
work is one (f0, f, cuts) triple; a call handles a small batch of rows with `vmap`,
sized by the caller so that the `(rows, cuts, n)` intermediates stay cache sized.

**Exact on every backend** (docs/design.md, "Exact on every backend"). XLA may reorder
and regroup the operands of any reduction, and GPUs do, so every kernel here obeys:

- a reduction combines with a commutative and associative operation only (sum, max,
  min of integers; float sums only where the tolerance rule covers rounding). Anything
  that depends on order, such as a running prefix sum, is computed explicitly as a scan
  (`_cumsum`, `lax.scan`), whose order the program fixes, and only then reduced;
- no scatter whose result depends on which of colliding writes wins;
- ties (best split, best class) are broken by values alone, never by which operand a
  reduction visited first.

`tests/test_kernel_order.py` checks each kernel against a numpy reference on inputs
whose prefix sums depend on the summation order, and audits the kernels' jaxprs for
reductions with non-commutative combines and order-dependent scatters.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, Shaped

from qbnb_jax._device.classwise import (
    CLASS_ORDER_FROM,
    CLASS_ORDER_FROM_LONG,
    CLASS_ORDER_MAX_LENGTH,
    class_order_scores,
    class_tables,
)
from qbnb_jax._device.memory import check_allocation
from qbnb_jax._device.parallel import run_all
from qbnb_jax._problem.data import LossKind, Problem


class SweepData(eqx.Module):
    """Device copy of the presorted arrays a sweep reads, for one or many problems.

    A stump's loss splits into a constant of the sample set and a "score" that only
    needs a few scanned channels (see `_score`): binary classification scans one
    signed count, C classes scan C counts, regression scans [w, w*y] (the squared
    term is constant). Only those channels are scanned; set totals come from
    cumulative sums in the root feature's order, an O(1) lookup per cut.

    Problems (axis P) carry their own stats; they share a sample layout (axis L, the
    presorted orders of one X) when they differ only in weights, as bootstrap samples
    and folds do (docs/design.md, "Batching"); the compacted sides of a deeper tree have a
    layout each. A single solve has
    P = L = 1.

    **Fields** (n samples padded, p features, C stat channels, S scanned channels):

    - `cut_valid`: `(L, p, n+1)`, thresholds may fall before these sorted positions.
    - `perm`, `rank`, `value_rank`: `(L, p, n)`. A row (f0, f) reads the position, in
      f0's order, of the k-th sample of f's order as `rank[l, f0][perm[l, f]]` (one
      gather of n per row; one compare with a cut then makes the prefix mask). Memory
      stays O(L p n): no table per (f0, f) pair is ever stored.
    - `sorted_scan`: `(P, p, n, S)`, scanned channels in each feature's order.
    - `full_scan`: `(P, p, n+1, S)`, their cumulative sums (leading zero row), read by
      the class lanes, the class grid and the vmapped row sweeps; empty `(P, p, 1, S)`
      where none of them serves the data (`_channels_major_full_rows` and `_sse_grid`
      form their running sums themselves; two-class counts' reductions need none).
    - `root_cum`: `(P, p, n+1, C)`, cumulative stat vectors in each feature's order;
      integer counts keep one channel, their summed weight, and regression sums one,
      their summed w |y|^2 (C = 1): all a set's loss needs besides its score.
    - `scan`: `(P, n, S)`, scanned channels in sample order.
    - `grid_scan`: `(p, n, G)`, two-class signed counts as in `sorted_scan` with the
      problems last (G: P rounded up to GRID_LANES), for `sweep_grid`; `(p, n, C, G)`
      for integer counts of up to GRID_MAX_CLASSES classes and for regression's
      scanned channels; empty `(0, 0, 0)` unless the problems share one layout.
    - `layout_of`: `(P,)`, the layout of each problem.
    - `class_sample`, `class_weight`, `class_start`, `class_place`: `(P, p, n)`, each
      feature's order re-sorted stably by class, for the class-ordered sweeps of
      integer counts of three or more classes (`classwise.class_tables`); empty
      `(0, 0, 0)` where those sweeps are not used (`uses_class_order`).
    - `root_code`: `(P, p, n)` int32, `rank` of the problem's layout times 32 plus the
      sample's class (31 for no weight): one read gives `_class_lane_rows` a sample's
      root position and its counts, for integer counts of 0 or 1 of fewer than
      `CLASS_ORDER_FROM` classes; empty `(0, 0, 0)` otherwise (`class_lane_codes`).
      Float class weights that are multiples of one weight per class (`class_weight`
      alone, with 0/1 folds, or bootstrap counts of it) get codes too, the multiple
      in SCALED_COUNT_BITS bits above the class, with
    - `class_scale`: `(P, C)`, each problem's weight of a sample of each class: the
      class lanes count samples and score `scale_c count_c`; empty `(0, 0)` otherwise
      (`class_scales`).
    - `exact_weights`: `(P,)`, regression problems whose weights sum exactly in any
      order (`exact_weight_sums`): their sweeps read the prefix sets' totals from
      `full_scan` in f0's order instead of summing them in a first pass
      (`_root_totals`). Which of the two a problem's sweeps take depends on it alone:
      the runner reads this (no kernel does) and sends its rows to the kernel
      compiled for it (`root_totals`).
    """

    cut_valid: Bool[Array, "L p n1"]
    perm: Int[Array, "L p n"]
    rank: Int[Array, "L p n"]
    value_rank: Int[Array, "L p n"]
    sorted_scan: Shaped[Array, "P p n S"]
    full_scan: Shaped[Array, "P p n1 S"]
    root_cum: Shaped[Array, "P p n1 C"]
    scan: Shaped[Array, "P n S"]
    grid_scan: Shaped[Array, "p n *CG"]
    layout_of: Int[Array, " P"]
    class_sample: Int[Array, "P p n"]
    class_weight: Shaped[Array, "P p n"]
    class_start: Bool[Array, "P p n"]
    class_place: Int[Array, "P p n"]
    root_code: Int[Array, "P p n"]
    class_scale: Shaped[Array, "P C"]
    exact_weights: Bool[Array, " P"]
    loss_kind: LossKind = eqx.field(static=True)
    binary: bool = eqx.field(static=True)
    field_bits: int = eqx.field(static=True, default=0)  # > 0: class counts bit-packed
    n_classes: int = eqx.field(static=True, default=0)
    scan_dtype: str = eqx.field(static=True, default="int32")
    # How prefix sums are formed (`prefix_sums`): "sequential" (a loop over samples,
    # fastest on a CPU) or "parallel" (a log-depth scan, what an accelerator wants).
    plan: str = eqx.field(static=True, default="sequential")

    @staticmethod
    def from_problem(problem: Problem) -> SweepData:
        """Device arrays for one problem (P = L = 1)."""
        return SweepData.from_problems([problem], [problem], [0])

    @staticmethod
    def shared_stat_buffers(base: Problem, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Stat tables of two-class `base` under each row of integer `weights` `(P, n)`,
        with `scan` and `grid_scan` built and the tables in each feature's order
        (`sorted_scan`, `root_cum`) zero, for `Problem.reweighted` to fill on its way.

        Shapes and dtypes are those `from_problems` builds; pass the filled tables to
        `from_problems(stat_tables=...)`.
        """
        P, n = weights.shape
        bucket = count_bucket(P, 2) if P > 1 else 1
        n_pad = padded_length(n)
        dtype = count_dtype(int(weights.sum(axis=1).max()))
        tables = dict(sorted_scan=aligned_zeros((bucket, base.p, n_pad, 1), dtype),
                      full_scan=aligned_zeros((bucket, base.p, 1, 1), dtype),
                      root_cum=aligned_zeros((bucket, base.p, n_pad + 1, 1), dtype),
                      scan=aligned_zeros((bucket, n_pad, 1), dtype))
        tables["scan"][:P, :n, 0] = (base.stats[:, 1] - base.stats[:, 0])[None, :] * weights
        tables["grid_scan"] = _grid_table(tables["scan"][:P, :n, 0], base.perm, n_pad)
        return tables

    @staticmethod
    def from_problems(
        layouts: list[Problem], problems: list[Problem], layout_of: list[int],
        steps_per_octave: int = 8, count_base: int = 2,
        stat_tables: dict[str, np.ndarray] | None = None, chunks: list | None = None,
        host_out: dict[str, np.ndarray] | None = None,
    ) -> SweepData:
        """Device arrays for `problems`, problem i laid out as `layouts[layout_of[i]]`.

        Every array is padded to `padded_length` of the largest n and to the largest p,
        and the numbers of layouts and problems to a power of `count_base` (slots that
        no row ever refers to, left zero). `stat_tables`: the stat tables already
        filled (`shared_stat_buffers`: two-class counts of one layout). `chunks`: the
        `data.CompactSides` whose problems are `problems`, in order, each its own
        layout: their padded arrays are copied a chunk at a time (the same tables).
        `host_out`: filled with the host arrays sent (`cut_valid`, the stat tables),
        for host work that reads the same numbers (`host.sse_stumps_from_prefix_sums`).
        Padding samples have zero stats and sit after every real sample in every order,
        so no cut of a real sample set ever includes them: bucketing n lets problems of
        similar size share compiled kernels. Padding features are never swept.
        """
        n_pad = padded_length(max(lay.n for lay in layouts), steps_per_octave)
        p = max(lay.p for lay in layouts)
        L = count_bucket(len(layouts), count_base) if len(layouts) > 1 else 1
        count = len(problems)
        bucket = count_bucket(count, count_base) if count > 1 else 1
        check_tables_fit(L, bucket, p, n_pad, problems[0], count)
        # aligned: `jax.device_put` on CPU then uses them in place instead of copying
        # (for a lockstep round's side batches, most of the transfer's cost)
        # (and the padding layouts, which no problem refers to, stay zero pages)
        used = len(layouts)
        perm = aligned_zeros((L, p, n_pad), np.int32)
        rank = aligned_zeros((L, p, n_pad), np.int32)
        value_rank = aligned_zeros((L, p, n_pad), np.int32)
        cut_valid = aligned_zeros((L, p, n_pad + 1), bool)
        if chunks is not None:
            _copy_chunk_layouts(chunks, perm, rank, value_rank, cut_valid)
        else:
            perm[:used] = np.arange(n_pad, dtype=np.int32)
            rank[:used] = perm[:used]
            np.add(perm[:used], n_pad, out=value_rank[:used])
            for li, lay in enumerate(layouts):
                perm[li, : lay.p, : lay.n] = lay.perm
                rank[li, : lay.p, : lay.n] = lay.rank
                value_rank[li, : lay.p, : lay.n] = lay.value_rank
                cut_valid[li, : lay.p, : lay.n + 1] = lay.cut_valid
        first = problems[0]
        binary = first.loss_kind != "sse" and first.n_channels == 2
        field_bits = 0
        # every sample's stats sum to 1 (`CompactSides.unit_weight`): a problem's
        # summed weight before a position is the position, up to its n
        unit_sizes = None
        if chunks is not None and all(chunk.unit_weight for chunk in chunks):
            unit_sizes = np.concatenate([chunk.sizes for chunk in chunks])
        if stat_tables is not None:
            total = None
            scan_dtype = stat_tables["sorted_scan"].dtype
        elif first.loss_kind == "count":
            total = (int(unit_sizes.max(initial=0)) if unit_sizes is not None
                     else max(int(pr.stats.sum()) for pr in problems))
            scan_dtype = first.stats.dtype
        else:
            total = None
            scan_dtype = first.stats.dtype
        if total is not None:
            scan_dtype = count_dtype(total, scan_dtype)
        plan = execution_plan()
        # The parallel plan scans whole (K, n, lanes) blocks: packing classes into
        # fewer lanes pays there. The sequential plan's running sums are cheap per
        # lane, and unpacking each position's fields would cost more than it saves.
        if total is not None and not binary and first.n_channels > 2 and plan == "parallel":
            field_bits = packing_bits(total)
            scan_dtype = np.int64
        # Bucketed problem counts share compiled kernels; padding problems stay zero.
        layout_of = np.concatenate([np.asarray(layout_of, dtype=np.int32),
                                    np.zeros(bucket - count, np.int32)])
        class_order = (first.loss_kind == "count" and first.n_channels >= CLASS_ORDER_FROM
                       and plan == "sequential" and n_pad < BLOCKED_FROM
                       and (n_pad <= CLASS_ORDER_MAX_LENGTH
                            or first.n_channels >= CLASS_ORDER_FROM_LONG))
        lanes_serve = (not binary and not field_bits and not class_order
                       and plan == "sequential" and n_pad < BLOCKED_FROM
                       and first.n_channels < CLASS_CODE_NONE)
        scales, multiples = (class_scales([pr.stats for pr in problems])
                             if lanes_serve and first.loss_kind == "weighted"
                             else (None, None))
        # float class weights: one class per sample, whose weight the lanes read
        # from `scan` where they are no multiples of one weight per class (`scales`)
        lane_codes = lanes_serve and (
            first.loss_kind == "weighted" and (scales is not None
                                               or first.n_channels <= FLOAT_LANES_MAX_CLASSES)
            or (first.loss_kind == "count"
                and all(pr.stats.max(initial=0) <= 1 for pr in problems)))
        exact = np.zeros(bucket, bool)
        if first.loss_kind == "sse":
            exact[:count] = [exact_weight_sums(pr.stats[:, 0]) for pr in problems]
        if stat_tables is not None:
            tables = dict(stat_tables)
        else:
            # `full_scan` is read by the class lanes of integer counts (float weights
            # read `root_cum`), the class grid and the vmapped row sweeps; the
            # channels-major walks and the regression lanes form every running sum
            # themselves.
            settings = (plan, field_bits, binary, first.loss_kind, first.n_channels, n_pad)
            count_grid = (first.loss_kind == "count" and not binary and not field_bits
                          and first.n_channels <= GRID_MAX_CLASSES and L == 1 and count > 1)
            full_sums = (not _walks_channels_major(*settings) or count_grid
                         or _walks_class_lanes(lane_codes, *settings)
                         and first.loss_kind == "count"
                         or bool(exact.any()))
            signed_chunks = (chunks if binary and chunks is not None
                             and all(ch.signed is not None for ch in chunks) else None)
            # two-class unit-weight sides: every table comes from the chunks and sizes
            # (`CompactedSide` takes its stats' rows only if read)
            from_chunks = (signed_chunks is not None and unit_sizes is not None
                           and first.loss_kind == "count")
            tables = _stat_tables(None if from_chunks else [pr.stats for pr in problems],
                                  perm, layout_of, bucket,
                                  binary=binary, loss_kind=first.loss_kind,
                                  field_bits=field_bits, scan_dtype=scan_dtype,
                                  full_sums=full_sums, unit_sizes=unit_sizes,
                                  signed_chunks=signed_chunks)
        if class_order:
            stats = np.zeros((count, n_pad, first.n_channels), first.stats.dtype)
            # by the stats' rows: a batch's problem swept on its own samples holds only
            # its positive rows' stats (`_positive_rows`), fewer than its n
            for i, pr in enumerate(problems):
                stats[i, : len(pr.stats)] = pr.stats
            tables.update(class_tables(stats, perm, layout_of, bucket, scan_dtype))
        else:
            empty = np.zeros((0, 0, 0), np.int32)
            tables.update(class_sample=empty, class_weight=empty.astype(scan_dtype),
                          class_start=empty.astype(bool), class_place=empty)
        tables["root_code"] = (class_lane_codes([pr.stats for pr in problems], rank, layout_of,
                                                bucket, multiples)
                               if lane_codes else np.zeros((0, 0, 0), np.int32))
        tables["class_scale"] = np.zeros((0, 0))
        if scales is not None:
            tables["class_scale"] = np.ones((bucket, first.n_channels))
            tables["class_scale"][:count] = scales
        # One transfer for all arrays: each separate device_put costs ~0.2 ms. The
        # empty placeholders are made on the device once (`_device_empty`).
        host = dict(cut_valid=cut_valid, perm=perm, rank=rank, value_rank=value_rank,
                    layout_of=layout_of, exact_weights=exact, **tables)
        if host_out is not None:
            host_out.update(host)
        arrays = jax.device_put({k: a for k, a in host.items() if a.size})
        x64 = bool(jax.config.jax_enable_x64)
        arrays.update({k: _device_empty(a.shape, a.dtype, x64) for k, a in host.items()
                       if not a.size})
        return SweepData(
            **arrays,
            loss_kind=first.loss_kind,
            binary=binary,
            field_bits=field_bits,
            n_classes=first.n_channels,
            scan_dtype=np.dtype(scan_dtype).name,
            plan=plan,
        )

    @property
    def length(self) -> int:
        return int(self.perm.shape[-1])


@functools.cache
def _device_empty(shape: tuple, dtype, x64: bool) -> Array:
    """An empty device array, made once per shape, dtype and float64 setting (which
    decides the dtype it gets): a transfer of one costs as much as of a small table
    (about 18 us), and a solve has several."""
    return jax.device_put(np.zeros(shape, dtype))


def table_bytes(layouts: int, problems: int, p: int, n_pad: int, channels: int) -> int:
    """An upper bound on the bytes of `SweepData`'s arrays: the layouts' orders (three
    int32 and one bool per sample and feature) and each problem's stat tables (at most
    four of 8-byte channels per sample and feature: `sorted_scan`, `full_scan`,
    `root_cum` and the problem-lane copy `grid_scan`; and the class order's three
    4-byte and one bool, or else at most `root_code`'s 4 bytes)."""
    return (layouts * p * (n_pad + 1) * 13
            + problems * p * (n_pad + 1) * (channels * 8 * 4 + 13))


def check_tables_fit(layouts: int, problems: int, p: int, n_pad: int, first: Problem,
                     count: int = 1) -> None:
    """Refuse tables above the memory ceiling (`check_allocation`) before building them:
    `problems` slots (`count` of them real) of `first`'s channels (classes, targets)."""
    classes = (f", {first.n_channels} classes" if first.loss_kind != "sse"
               and first.n_channels > 2 else "")
    check_allocation(table_bytes(layouts, problems, p, n_pad, first.n_channels),
                     f"the sweep tables of {count} problem(s) (n = {n_pad}, p = {p}"
                     f"{classes})")


TABLE_CHUNK = 64  # problems per block of host table work
SPLIT_TABLES_FROM = 1 << 15  # entries of one problem's tables worth both threads
# Positions per block of `_prefix_sums` over many channels.
PREFIX_BLOCK = 256


def _prefix_sums(a: np.ndarray, out: np.ndarray) -> None:
    """`out[:, :, 1:] = np.cumsum(a, axis=2)`, the same sequential sums.

    With many channels (classes) numpy's cumsum along the position axis strides
    through memory (13 ns an entry for 30 classes at n = 1e5); block by block, each
    block's first row taking the previous block's last sums, the sums are formed in
    the same order, so they are the same numbers (floats too), 9x faster there.
    """
    n = a.shape[2]
    if a.shape[-1] < 8 or n <= PREFIX_BLOCK:
        np.cumsum(a, axis=2, dtype=a.dtype, out=out[:, :, 1:])
        return
    for k0 in range(0, n, PREFIX_BLOCK):
        k1 = min(n, k0 + PREFIX_BLOCK)
        block = out[:, :, k0 + 1 : k1 + 1]
        np.copyto(block, a[:, :, k0:k1])
        block[:, :, 0] += out[:, :, k0]
        np.cumsum(block, axis=2, out=block)


PLANS = ("sequential", "parallel")


def execution_plan() -> str:
    """"sequential" on a CPU, "parallel" on an accelerator; `QBNB_JAX_PLAN` forces one.

    Both give identical results (integer channels; float channels up to rounding, see
    docs/design.md, "Exact on every backend"); forcing "parallel" on a CPU tests the
    accelerator's kernels without one.
    """
    forced = os.environ.get("QBNB_JAX_PLAN", "").strip().lower()
    if forced:
        if forced not in PLANS:
            raise ValueError(f"QBNB_JAX_PLAN must be one of {', '.join(PLANS)}, not {forced!r}")
        return forced
    return "sequential" if jax.default_backend() == "cpu" else "parallel"


def _root_positions(data: SweepData, lay: Array, f0: Array, f: Array) -> Array:
    """`(n,)`: the position, in f0's order, of each sample of f's order."""
    return data.rank[lay, f0][data.perm[lay, f]]


def aligned_zeros(shape: tuple, dtype) -> np.ndarray:
    """`np.zeros` on a 64-byte boundary, which `jax.device_put` on CPU uses in place.

    An unaligned array is copied into fresh device memory instead: for 1,000
    bootstrap problems about 45 MB per batch, a quarter of the batch's page faults.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = np.zeros(nbytes + 64, dtype=np.uint8)
    offset = -buffer.ctypes.data % 64
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape)


def _stat_tables(stats: list[np.ndarray] | None, perm: np.ndarray, layout_of: np.ndarray,
                 bucket: int, *, binary: bool, loss_kind: str, field_bits: int,
                 scan_dtype, full_sums: bool = True, signed_chunks: list | None = None,
                 unit_sizes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Host stat tables of `SweepData`; problem i is laid out as `perm[layout_of[i]]`.

    Built for all problems at once (stats padded with zero samples, as the layouts
    are), then padded with all-zero problems up to `bucket`. Integer counts keep one
    channel of `root_cum`, the summed weight, which is all their set totals need (a
    loss is total weight minus a score), regression sums likewise their S2 channel,
    and two-class counts, whose sweeps never read `full_scan`, get an empty one, as
    does regression without `full_sums` (the sweeps that read it are not used): for
    large batches these tables are the largest host
    cost. `signed_chunks`: `data.CompactSides` of the (two-class) problems, in order,
    whose `signed` counts in each feature's order are `sorted_scan` already.
    `unit_sizes`: each problem's n, where every sample's stats sum to 1 (integer
    counts of unit weights): `root_cum` is then the position, up to the problem's n.
    `stats` None: two-class counts of unit weights with `signed_chunks` and
    `unit_sizes`, whose `sample_signed` are `scan`.
    """
    count = len(stats) if stats is not None else len(unit_sizes)
    L, p, n_pad = perm.shape
    if stats is None:  # signed counts in sample order, zero past each problem's n
        C, st = 2, None
        scan = np.zeros((count, n_pad, 1), dtype=np.int32)
        q = 0
        for chunk in signed_chunks:
            B, M = chunk.sample_signed.shape
            scan[q : q + B, :M, 0] = chunk.sample_signed
            q += B
    else:
        C = stats[0].shape[1]
        st = np.zeros((count, n_pad, C), dtype=stats[0].dtype)
        for i, one in enumerate(stats):
            st[i, : len(one)] = one
        if binary:
            scan = st[..., 1:2] - st[..., 0:1]
        elif loss_kind == "sse":
            scan = st[..., :-1]
        else:
            scan = st
    if field_bits:
        scan = pack_counts(scan.astype(np.int64).reshape(-1, scan.shape[-1]),
                           field_bits).reshape(count, n_pad, -1)
    scan = scan.astype(scan_dtype)
    integer_counts = loss_kind == "count"
    if loss_kind == "sse":  # a loss is S2 minus a score (`_loss_from_score`)
        st = st[..., -1:]
    unit_cum = None
    if integer_counts and unit_sizes is not None:  # no per-sample weights to sum
        dtype = count_dtype(int(unit_sizes.max(initial=0)))
        unit_cum = aligned_zeros((bucket, p, n_pad + 1, 1), dtype)
        # positions in int64: n_pad itself can pass the counts' dtype (2**15 for int16
        # sums), the minimum never does
        np.minimum(np.arange(n_pad + 1), unit_sizes[:, None, None],
                   out=unit_cum[:count, :, :, 0], casting="unsafe")
    elif integer_counts:
        total = int(st.sum(axis=(1, 2)).max(initial=0))
        # class by class: numpy sums a short last axis slowly (4x for five classes)
        weight = st[..., :1].astype(count_dtype(total))
        for c in range(1, C):
            weight += st[..., c : c + 1]  # per-sample sums fit as the totals do
        st = weight
    # Blocks of problems are gathered and summed on the pool's threads (numpy releases
    # the GIL): these tables are most of the host work of a large batch.
    chunks = range(0, count, TABLE_CHUNK)

    # A single problem's tables are split by feature instead, so both threads gather,
    # from SPLIT_TABLES_FROM entries (a hand-off to the pool costs about 70 us).
    split = count == 1 and p * n_pad * C >= SPLIT_TABLES_FROM
    pieces = ([(c0, slice(None)) for c0 in chunks] if not split else
              [(0, slice(f0, f0 + -(-p // 2))) for f0 in range(0, p, -(-p // 2))])

    def in_order(a, rows: int):  # (count, n_pad, k) -> (rows >= count, p, n_pad, k)
        out = aligned_zeros((rows, p, n_pad, a.shape[-1]), a.dtype)

        def fill(piece: int) -> None:
            c0, features = pieces[piece]
            c1 = min(count, c0 + TABLE_CHUNK)
            if L == 1:  # one shared layout: a take along the sample axis
                np.take(a[c0:c1], perm[0][features], axis=1, out=out[c0:c1, features],
                        mode="clip")
            else:  # one flat take per array (much faster than a two-array fancy index)
                flat = (perm[layout_of[c0:c1]][:, features]
                        + (np.arange(c1 - c0) * n_pad)[:, None, None]).reshape(-1)
                np.take(a[c0:c1].reshape((c1 - c0) * n_pad, -1), flat, axis=0,
                        out=out[c0:c1, features].reshape(-1, a.shape[-1]), mode="clip")

        run_all(fill, range(len(pieces)))
        return out

    def cumulative(a):  # (count, p, n_pad, k) -> (bucket, p, n_pad + 1, k)
        out = aligned_zeros((bucket, p, n_pad + 1, a.shape[-1]), a.dtype)

        def fill(piece: int) -> None:
            c0, features = pieces[piece]
            c1 = min(count, c0 + TABLE_CHUNK)
            _prefix_sums(a[c0:c1, features], out[c0:c1, features])

        run_all(fill, range(len(pieces)))
        return out

    if signed_chunks is not None:  # copied, not gathered again
        sorted_scan = aligned_zeros((bucket, p, n_pad, 1), scan.dtype)
        q = 0
        for chunk in signed_chunks:
            B, _, M = chunk.signed.shape
            sorted_scan[q : q + B, :, :M, 0] = chunk.signed
            q += B
    else:
        sorted_scan = in_order(scan, bucket)  # padding problems stay zero
    if binary and integer_counts or not full_sums:
        full_scan = np.zeros((bucket, p, 1, scan.shape[-1]), dtype=scan.dtype)
    else:
        full_scan = cumulative(sorted_scan[:count])
    scan_padded = aligned_zeros((bucket, *scan.shape[1:]), scan.dtype)
    scan_padded[:count] = scan
    grid_scan = np.zeros((0, 0, 0), scan.dtype)
    if loss_kind == "sse" and L == 1 and count > 1:  # regression lanes (`_sse_grid`)
        grid_scan = _grid_table(scan, perm[0], n_pad)
    if integer_counts and L == 1 and count > 1:  # problems `sweep_grid` can take
        if binary:
            grid_scan = _grid_table(scan[:, :, 0], perm[0], n_pad)
        elif not field_bits and C <= GRID_MAX_CLASSES:
            grid_scan = _grid_table(scan, perm[0], n_pad)
    return {"sorted_scan": sorted_scan, "full_scan": full_scan,
            "root_cum": cumulative(in_order(st, count)) if unit_cum is None else unit_cum,
            "scan": scan_padded,
            "grid_scan": grid_scan}


def _copy_chunk_layouts(chunks: list, perm: np.ndarray, rank: np.ndarray,
                        value_rank: np.ndarray, cut_valid: np.ndarray) -> None:
    """Fill the first layouts of `SweepData`'s padded layout arrays (zero) from
    `data.CompactSides` `chunks`, a chunk at a time, as `from_problems` lays out
    problems: padding samples (past a subset's n, and past its chunk's width) keep
    their ids in `perm` and `rank`, their `value_rank` is their id plus the padded n,
    and no cut before them is valid. Each entry is written once."""
    P, n_pad = perm.shape[1:]
    positions = np.arange(n_pad, dtype=np.int32)
    padded = positions + n_pad
    q = 0
    for chunk in chunks:
        B, p, M = chunk.perm.shape
        rows = slice(q, q + B)
        perm[rows, :p, :M] = chunk.perm
        rank[rows, :p, :M] = chunk.rank
        cut_valid[rows, :p, : M + 1] = chunk.cut_valid
        np.copyto(value_rank[rows, :p, :M],
                  np.where(positions[:M] >= chunk.sizes[:, None, None], padded[:M],
                           chunk.value_rank))
        for table, ids in ((perm, positions), (rank, positions), (value_rank, padded)):
            table[rows, :, M:] = ids[M:]
            if p < P:
                table[rows, p:, :M] = ids[:M]
        q += B


def _grid_table(signed: np.ndarray, perm: np.ndarray, n_pad: int) -> np.ndarray:
    """`grid_scan` `(p, n_pad, G)` of the signed counts `(P, >= n)` in sample order, or
    `(p, n_pad, C, G)` of class counts `(P, >= n, C)`.

    `[f, k, (c,) q]`: problem q's count of the k-th sample of f's order. A take of whole
    rows of the (sample, problem) table, much cheaper than transposing per-problem tables.
    """
    P = len(signed)
    p, n = perm.shape
    lanes = -(-P // GRID_LANES) * GRID_LANES
    by_sample = np.zeros((n, *signed.shape[2:], lanes), signed.dtype)
    by_sample[..., :P] = np.moveaxis(signed[:, :n], 0, -1)
    out = aligned_zeros((p, n_pad, *by_sample.shape[1:]), signed.dtype)
    np.take(by_sample, perm, axis=0, out=out[:, :n], mode="clip")
    return out


def count_dtype(total: int, wider=np.int32):
    """int16 for integer counts whose sums stay below 2**15 on the sequential plan
    (exact, and half the memory traffic of a CPU's scans), else `wider`.

    The parallel plan (an accelerator's) keeps at least 32 bits: on an H200 the
    suite's tests of two-class unit-weight sweeps, the one int16 path of that plan,
    failed while the same tests of every other count type passed (docs/benchmarks.md,
    "Depth 2, GPU"), and XLA has miscompiled 16-bit reductions on GPUs before
    (openxla/xla#7112). Not yet checked on a GPU."""
    return np.int16 if total < 2**15 and execution_plan() == "sequential" else wider


# Float class weights that are no multiples of one weight per class take the class
# lanes up to this many classes, the channels-major walk past it: random weights at
# depth 2 (n = 8,000, p = 8) ran 1.0-1.1x faster in the lanes at 10 and 12 classes,
# 1.1-1.5x slower at 14 and 2x slower at 16 to 30 (synth-class30 0.23 against 0.16-0.20 s).
FLOAT_LANES_MAX_CLASSES = 12
CLASS_CODE_BITS = 5  # `root_code`: the class in the low bits; 31 marks no weight
CLASS_CODE_NONE = (1 << CLASS_CODE_BITS) - 1  # so `root_code` holds fewer classes
# Weighed class lanes (`class_scale`): a sample's multiple of its class's weight in the
# next bits of `root_code` (root positions stay below BLOCKED_FROM = 2^17: the code
# stays below 2^30)
SCALED_COUNT_BITS = 8


def class_lane_codes(stats: list[np.ndarray], rank: np.ndarray, layout_of: np.ndarray,
                     bucket: int, multiples: list[np.ndarray] | None = None) -> np.ndarray:
    """`SweepData.root_code` `(bucket, p, n_pad)` of class counts `stats` (each
    `(n, C)`, every entry 0 or 1) laid out by `rank[layout_of[i]]` `(L, p, n_pad)`.
    With `multiples` (`class_scales`), float class weights: each sample's multiple of
    its class's weight goes in SCALED_COUNT_BITS bits above the class."""
    _, p, n_pad = rank.shape
    codes = aligned_zeros((bucket, p, n_pad), np.int32)  # used in place by device_put
    for i, one in enumerate(stats):
        label = np.full(n_pad, CLASS_CODE_NONE, np.int32)
        label[: len(one)] = np.where(one.any(axis=1), one.argmax(axis=1), CLASS_CODE_NONE)
        if multiples is None:
            codes[i] = (rank[layout_of[i]] << CLASS_CODE_BITS) | label[None, :]
            continue
        count = np.zeros(n_pad, np.int32)
        count[: len(one)] = multiples[i]
        codes[i] = ((rank[layout_of[i]] << CLASS_CODE_BITS + SCALED_COUNT_BITS)
                    | (count << CLASS_CODE_BITS) | label)[None, :]
    return codes


def class_scales(stats: list[np.ndarray]
                 ) -> tuple[np.ndarray, list[np.ndarray]] | tuple[None, None]:
    """`(scales, multiples)`: `(problems, C)` a weight per class of each problem (1 for
    a class with none) of which every positive sample's weight is an exact multiple,
    at most `2^SCALED_COUNT_BITS - 1` times, and each problem's multiples `(n,)` (0 for
    no weight), for float class weights `stats` (each `(n, C)`, one nonzero per row);
    `(None, None)` where any are not such multiples.

    Class weights alone (`class_weight`, with 0/1 folds) are 1 times their class's;
    bootstrap counts of them a few times. The class lanes then count samples in exact
    integers and weigh the counts in the score. `scale_c L_c` rounds once where the
    weighted sums round at every sample: both are within the tolerance rule of the
    exact loss (docs/design.md, "Regression tolerance rule")."""
    scales = np.ones((len(stats), stats[0].shape[1]))
    multiples = []
    for i, one in enumerate(stats):
        times_of = np.zeros(len(one), np.int32)
        for c in range(one.shape[1]):
            positive = one[:, c] > 0
            weight = one[positive, c]
            if len(weight) == 0:
                continue
            unit = weight.min()
            times = np.rint(weight / unit)
            if times.max() >= 1 << SCALED_COUNT_BITS or (times * unit != weight).any():
                return None, None
            scales[i, c] = unit
            times_of[positive] = times
        multiples.append(times_of)
    return scales, multiples


def exact_weight_sums(weights: np.ndarray) -> bool:
    """Whether every sum of these non-negative float `weights`, in any order, is exact:
    all are whole multiples of the smallest power of two among their lowest set bits,
    and their total is below 2^52 of those units (integer weights, and such weights
    times the search's power-of-two unit, `scaling.sse_setup`)."""
    positive = weights[weights > 0]
    if len(positive) == 0:
        return True
    mantissa, exponent = np.frexp(positive)
    whole = (mantissa * 2.0**53).astype(np.int64)  # exact: 53-bit mantissas
    lowest = exponent - 53 + np.frexp((whole & -whole).astype(np.float64))[1] - 1
    unit = int(lowest.min())
    return float(np.ldexp(positive, -unit).sum()) < 2.0**52


def packing_bits(total: int) -> int:
    """Field width for packed class counts whose sums stay below `total`."""
    return next(b for b in (16, 21, 32) if total < 2 ** (b - 1))


def pack_counts(counts: np.ndarray, bits: int) -> np.ndarray:
    """Pack integer class counts `(n, C)` into bit fields of int64 lanes `(n, lanes)`.

    Every partial sum of a field stays below `2**(bits-1)` (see `packing_bits`), so
    sums of packed lanes never carry between fields or reach the sign bit: one scan of
    a lane adds up 64 // bits classes at once, which makes many-class sweeps cheap.
    """
    per_lane = 64 // bits
    n, n_classes = counts.shape
    lanes = -(-n_classes // per_lane)
    packed = np.zeros((n, lanes), dtype=np.int64)
    for c in range(n_classes):
        packed[:, c // per_lane] += counts[:, c] << (bits * (c % per_lane))
    return packed


def _unpack(data: SweepData, packed: Array) -> Array:
    """Inverse of `pack_counts` on device: `(..., lanes)` int64 -> `(..., C)`."""
    bits = data.field_bits
    per_lane = 64 // bits
    mask = (1 << bits) - 1
    fields = [
        (packed[..., c // per_lane] >> (bits * (c % per_lane))) & mask
        for c in range(data.n_classes)
    ]
    return jnp.stack(fields, axis=-1)


def count_bucket(count: int, base: int) -> int:
    """The smallest power of `base` at least `count`."""
    bucket = 1
    while bucket < count:
        bucket *= base
    return bucket


def padded_length(n: int, steps_per_octave: int = 8) -> int:
    """Sample count rounded up to a shape bucket: 64, then 8 steps per octave (<13% pad)."""
    if n <= 64:
        return 64
    octave = 1 << (n - 1).bit_length() - 1  # largest power of two below n
    step = octave // steps_per_octave
    return -(-n // step) * step


def _cumsum(x: Array, axis: int) -> Array:
    """Inclusive prefix sums in x's own dtype.

    `lax.associative_scan` beats `jnp.cumsum` (a reduce_window on CPU) on this
    workload, and keeps int16 counts in int16.
    """
    return jax.lax.associative_scan(jnp.add, x, axis=axis)


def _masked_prefix_sums(data: SweepData, values: Array, key: Array, cuts: Array) -> Array:
    """`(n, K, S)`: at each position, for each cut, the prefix sums of `values` `(n, S)`
    over the samples whose `key` `(n,)` lies below the cut.

    Positions come first in every sweep's arrays (the scan leaves them so, and the
    reductions over positions then read them in place). The order of the additions is
    fixed by the program either way, so no backend can change it. "sequential" walks
    the samples once, carrying K x S running sums (no masked `(n, K, S)` operand is
    formed, and each step is a few vector ops); "parallel" masks all at once and runs a
    log-depth scan, which an accelerator spreads over its cores.
    """
    if data.plan == "sequential":
        def step(acc, sample):
            value, k = sample
            acc = acc + jnp.where((k < cuts)[:, None], value[None, :], 0).astype(acc.dtype)
            return acc, acc

        start = jnp.zeros((cuts.shape[0], values.shape[-1]), values.dtype)
        return jax.lax.scan(step, start, (values, key))[1]
    inside = key[:, None, None] < cuts[None, :, None]
    return _cumsum(jnp.where(inside, values[:, None, :], 0).astype(values.dtype), axis=0)


def _score(data: SweepData, left: Array, total_scan: Array) -> Array:
    """Score of splitting a set at each position; larger is better.

    `left`: `(L, K, S)` scanned channels left of each position; `total_scan`: `(K, S)`.
    The stump loss is `_constant(set) - score`.
    """
    right = total_scan[None] - left
    if data.binary:  # loss = (T - |d_left| - |d_right|) / 2 with d = signed count
        return jnp.abs(left[..., 0]) + jnp.abs(right[..., 0])
    if data.loss_kind == "sse":  # loss = S2 - |S1_l|^2/S0_l - |S1_r|^2/S0_r
        def explained(part):
            s0 = part[..., 0]
            squares = _ordered_sum(part[..., 1:] ** 2)
            return jnp.where(s0 > 0, squares / jnp.where(s0 > 0, s0, 1), 0)
        return explained(left) + explained(right)
    if data.field_bits:
        left, right = _unpack(data, left), _unpack(data, right)
    return jnp.max(left, axis=-1) + jnp.max(right, axis=-1)  # loss = T - max_l - max_r


def _loss_from_score(data: SweepData, totals: Array, score: Array) -> Array:
    """Stump loss from the set's summed stat vector `(K, C)` and its best score `(K,)`."""
    if data.binary:
        loss = _ordered_sum(totals) - score.astype(totals.dtype)
        return loss // 2 if jnp.issubdtype(loss.dtype, jnp.integer) else loss / 2
    if data.loss_kind == "sse":
        return totals[..., -1] - score
    return _ordered_sum(totals) - score.astype(totals.dtype)


def _ordered_sum(x: Array) -> Array:
    """The sum over x's last axis, first entry to last, as adds the program fixes.

    `jnp.sum` is a reduction whose grouping XLA chooses per compiled shape (and per
    backend): float sums of a set's channels then came out a few ulps apart between
    calls with other rows beside them, so a problem's losses in a batch were not its
    solve's. docs/design.md, "Exact on every backend"."""
    total = x[..., 0]
    for c in range(1, x.shape[-1]):
        total = total + x[..., c]
    return total


def _best_scores(data: SweepData, left: Array, total_scan: Array, valid: Array) -> Array:
    """Max score over valid positions; `left` excludes position 0, which is always valid."""
    score = _score(data, left, total_scan)  # (L, K)
    at_zero = _score(data, jnp.zeros_like(left[:1]), total_scan)[0]
    low = jnp.asarray(jnp.iinfo(score.dtype).min if jnp.issubdtype(score.dtype, jnp.integer)
                      else -jnp.inf, score.dtype)
    return jnp.maximum(jnp.max(jnp.where(valid[:, None], score, low), axis=0), at_zero)


def _extreme_prefix_sums(prefix: Array, valid: Array) -> tuple[Array, Array, Array]:
    """Total, and max and min over valid positions `(n,)`, of inclusive prefix sums
    `(n, K)`.

    The prefix sums are formed explicitly (`_cumsum`) and only then reduced with max and
    min, which are commutative: a reduction whose combine carries "sum, best prefix" is
    associative but not commutative, and XLA may reorder any reduction's operands (the
    GPU backend does). See docs/design.md, "Exact on every backend".
    Invalid positions count as 0, the empty prefix's sum, which is always a candidate
    (it scores |T|), so they change neither extreme's score.
    """
    zero = jnp.zeros((), prefix.dtype)
    at = jnp.where(valid[:, None], prefix, zero)
    return prefix[-1], jnp.max(at, axis=0), jnp.min(at, axis=0)


def _wide(dtype) -> jnp.dtype:
    """Type for `2a - T` of prefix sums `a` in `dtype`: integers widened (`2a - T` may
    leave int16), floats kept."""
    if jnp.issubdtype(dtype, jnp.floating):
        return dtype
    return jnp.int64 if dtype == jnp.int64 else jnp.int32


def _two_class_score(part_total: Array, top: Array, bottom: Array) -> Array:
    """Best split score `max(|T|, 2 top - T, T - 2 bottom)` of a set with signed total T
    and largest/smallest valid prefix sums `top`/`bottom` (see `_binary_full_row`)."""
    wide = _wide(part_total.dtype)
    part_total, top, bottom = (v.astype(wide) for v in (part_total, top, bottom))
    return jnp.maximum(jnp.abs(part_total),
                       jnp.maximum(2 * top - part_total, part_total - 2 * bottom))


def _binary_full_row(
    data: SweepData, i: Array, f0: Array, f: Array, cuts: Array
) -> tuple[Array, Array]:
    """`_full_row` for two classes: one signed count `d` per sample.

    A split at prefix sum `a` of a set with total `T` scores `|a| + |T - a|`, which is
    `max(|T|, 2a - T, T - 2a)`: the best score needs only the largest and smallest
    prefix sums over valid positions (position 0, the empty side, gives `|T|`).
    """
    lay = data.layout_of[i]
    key = _root_positions(data, lay, f0, f)
    d = data.sorted_scan[i, f]  # (n, 1)
    valid = data.cut_valid[lay, f, 1:]
    # one more cut past every position: its sums are the prefix sums of the whole set
    sums = _masked_prefix_sums(data, d, key, jnp.append(cuts, data.length))[..., 0]
    left, right = sums[:, :-1], sums[:, -1:] - sums[:, :-1]  # (n, K): right, the suffix part
    pre_tot = data.root_cum[i, f0, cuts]  # (K, C)
    suf_tot = data.root_cum[i, f0, -1][None] - pre_tot
    prefix = _two_class_score(*_extreme_prefix_sums(left, valid))
    suffix = _two_class_score(*_extreme_prefix_sums(right, valid))
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


# Full sweeps over at least this many (padded) samples run block by block (see
# `_blocked_full_row`); n_pad is then a multiple of FULL_BLOCK (`padded_length`).
BLOCKED_FROM = 1 << 17
FULL_BLOCK = 4096


def _check_full_scan(data: SweepData) -> None:
    """Refuse, when tracing, a sweep that reads `full_scan` where the data left it
    empty (`from_problems` builds it only where such a sweep serves the data)."""
    if data.full_scan.shape[2] != data.length + 1:
        raise ValueError("this SweepData has no full_scan: build it for this plan")


def _blocked_full_row(
    data: SweepData, i: Array, f0: Array, f: Array, cuts: Array
) -> tuple[Array, Array]:
    """`_full_row` for large n: a sequential loop over blocks of FULL_BLOCK samples.

    The one-shot version materialises `(K, n, S)` prefix sums (tens of MB per row at
    n = 10^6, in fresh pages on every call); here each block's prefix sums are formed
    from a running carry and reduced to the best score at once, so the intermediates
    stay in cache. The same scores, summed in another order.
    """
    _check_full_scan(data)
    n = data.length
    S = data.sorted_scan.shape[-1]
    lay = data.layout_of[i]
    key = _root_positions(data, lay, f0, f)
    scan = data.sorted_scan[i, f]
    full = data.full_scan[i, f, 1:]
    blocks = n // FULL_BLOCK
    xs = (
        key.reshape(blocks, FULL_BLOCK),
        scan.reshape(blocks, FULL_BLOCK, S),
        full.reshape(blocks, FULL_BLOCK, S),
        data.cut_valid[lay, f, 1:].reshape(blocks, FULL_BLOCK),
    )

    def prefix_block(acc, key_b, scan_b):  # (B, K, S) prefix sums, from acc on
        contrib = jnp.where((key_b[:, None] < cuts[None, :])[..., None], scan_b[:, None], 0)
        return acc[None] + _cumsum(contrib.astype(acc.dtype), axis=0)

    # the prefix sets' totals: the same sums the second pass ends with (a reduction's
    # grouping of floats would be XLA's choice)
    zero = jnp.zeros((cuts.shape[0], S), scan.dtype)
    pre_scan, _ = jax.lax.scan(lambda acc, b: (prefix_block(acc, b[0], b[1])[-1], None),
                               zero, xs[:2])
    suf_scan = full[-1][None] - pre_scan

    def body(carry, block):
        acc, best_pre, best_suf = carry
        key_b, scan_b, full_b, valid_b = block
        left = prefix_block(acc, key_b, scan_b)
        score_pre = _score(data, left, pre_scan)
        score_suf = _score(data, full_b[:, None] - left, suf_scan)
        low = jnp.asarray(jnp.iinfo(score_pre.dtype).min
                          if jnp.issubdtype(score_pre.dtype, jnp.integer) else -jnp.inf,
                          score_pre.dtype)
        best_pre = jnp.maximum(best_pre, jnp.max(jnp.where(valid_b[:, None], score_pre, low), 0))
        best_suf = jnp.maximum(best_suf, jnp.max(jnp.where(valid_b[:, None], score_suf, low), 0))
        return (left[-1], best_pre, best_suf), None

    at_zero_pre = _score(data, zero[None], pre_scan)[0]
    at_zero_suf = _score(data, zero[None], suf_scan)[0]
    (_, prefix, suffix), _ = jax.lax.scan(body, (zero, at_zero_pre, at_zero_suf), xs)
    pre_tot = data.root_cum[i, f0, cuts]  # (K, C)
    suf_tot = data.root_cum[i, f0, -1][None] - pre_tot
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


def _full_row(data: SweepData, i: Array, f0: Array, f: Array, cuts: Array) -> tuple[Array, Array]:
    if data.binary and jnp.issubdtype(data.sorted_scan.dtype, jnp.integer):
        return _binary_full_row(data, i, f0, f, cuts)
    _check_full_scan(data)
    if data.length >= BLOCKED_FROM and data.length % FULL_BLOCK == 0:
        return _blocked_full_row(data, i, f0, f, cuts)
    lay = data.layout_of[i]
    key = _root_positions(data, lay, f0, f)
    left = _masked_prefix_sums(data, data.sorted_scan[i, f], key, cuts)  # (n, K, S)
    valid = data.cut_valid[lay, f, 1:]
    pre_tot = data.root_cum[i, f0, cuts]  # (K, C)
    suf_tot = data.root_cum[i, f0, -1][None] - pre_tot
    pre_scan = left[-1]
    full = data.full_scan[i, f, 1:]
    prefix = _best_scores(data, left, pre_scan, valid)
    suffix = _best_scores(data, full[:, None] - left, full[-1][None] - pre_scan, valid)
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


def _window_losses(data, i, f0, lo, hi, cuts, left, base, valid) -> tuple[Array, Array]:
    """Stump losses of [lo, c) and [c, hi) from the scans of a window's samples.

    `left`: `(L, K, S)` scans of the prefix part; `base`: `(L, S)`, of the whole window.
    """
    at_cuts = data.root_cum[i, f0, cuts]
    pre_tot = at_cuts - data.root_cum[i, f0, lo][None]
    suf_tot = data.root_cum[i, f0, hi][None] - at_cuts
    pre_scan = left[-1]
    prefix = _best_scores(data, left, pre_scan, valid)
    suffix = _best_scores(data, base[:, None] - left, base[-1][None] - pre_scan, valid)
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


def _windowed_row(
    data: SweepData, i: Array, f0: Array, f: Array, lo: Array, hi: Array, cuts: Array
) -> tuple[Array, Array]:
    lay = data.layout_of[i]
    key = _root_positions(data, lay, f0, f)
    key = jnp.where(key >= lo, key, data.length)  # before the window: never inside
    # cuts lie in [lo, hi]: the cut at hi collects the whole window
    sums = _masked_prefix_sums(data, data.sorted_scan[i, f], key, jnp.append(cuts, hi))
    left, base = sums[:, :-1], sums[:, -1]
    valid = data.cut_valid[lay, f, 1:]
    return _window_losses(data, i, f0, lo, hi, cuts, left, base, valid)


def _gathered_row(
    data: SweepData, i: Array, f0: Array, f: Array, lo: Array, hi: Array, cuts: Array,
    length: int,
) -> tuple[Array, Array]:
    n = data.length
    lay = data.layout_of[i]
    slot = lo + jnp.arange(length)
    inside = slot < hi
    ids = data.perm[lay, f0, jnp.minimum(slot, n - 1)]
    order = jnp.argsort(jnp.where(inside, data.rank[lay, f, ids], n))
    ids, inside = ids[order], inside[order]
    pos = jnp.where(inside, data.rank[lay, f0, ids], n)  # position in f0's order
    scan = jnp.where(inside[:, None], data.scan[i, ids], 0)
    values = data.value_rank[lay, f, ids]
    valid = jnp.concatenate([inside[1:] & (values[1:] != values[:-1]), jnp.zeros(1, bool)])
    sums = _masked_prefix_sums(data, scan, pos, jnp.append(cuts, n + 1))
    left, base = sums[:, :-1], sums[:, -1]
    return _window_losses(data, i, f0, lo, hi, cuts, left, base, valid)


@functools.partial(jax.jit, static_argnames=("root_totals",))
def sweep_full(
    data: SweepData,
    problem: Int[Array, " rows"],
    f0: Int[Array, " rows"],
    f: Int[Array, " rows"],
    cuts: Int[Array, "rows K"],
    root_totals: bool = False,
) -> tuple[Shaped[Array, "rows K"], Shaped[Array, "rows K"]]:
    """Best stumps on feature `f` of the prefix and suffix of f0's order at each cut.

    **Arguments:**

    - `data`: the problems' `SweepData`.
    - `problem`: which problem each row belongs to.
    - `f0`, `f`: root feature and stump feature per row.
    - `cuts`: positions in f0's order (number of samples sent left).
    - `root_totals`: the rows' problems have exact weights (regression on the
      channels-major walk, `SweepData.exact_weights`): set sums read, not summed.

    **Returns:** `(prefix, suffix)`, each `(rows, K)`: `L1(prefix_c, f)`, `L1(suffix_c, f)`.
    """
    if uses_class_order(data):
        return _class_order_rows(data, problem, f0, f, jnp.zeros_like(f0), None, cuts)
    if scans_own_length(data):
        return _walked_rows(data, problem, f0, f, cuts, data.length, root_totals)
    return jax.vmap(functools.partial(_full_row, data))(problem, f0, f, cuts)


def sweeps_rows_apart(data: SweepData) -> bool:
    """Whether `sweep_rows` serves this data: integer counts on the sequential plan,
    below the blocked sweeps' length, where `_full_row` finds the tables it reads
    (`full_scan`, which two-class counts do not need). Integer losses are exact in any
    kernel, so a problem's numbers do not depend on which kernel a call took."""
    integer = jnp.issubdtype(data.sorted_scan.dtype, jnp.integer) and not data.field_bits
    has_tables = data.binary or data.full_scan.shape[2] == data.length + 1
    return (data.plan == "sequential" and integer and data.loss_kind != "sse"
            and data.length < BLOCKED_FROM and has_tables)


@jax.jit
def sweep_rows(
    data: SweepData,
    problem: Int[Array, " rows"],
    f0: Int[Array, " rows"],
    f: Int[Array, " rows"],
    cuts: Int[Array, "rows K"],
) -> tuple[Shaped[Array, "rows K"], Shaped[Array, "rows K"]]:
    """`sweep_full`, each row swept on its own (`_full_row`, vmapped) rather than in
    the lanes of a walk: for calls of a few rows, which a walk pads to its full width
    of lanes at the same cost per position (`runner.FEW_ROWS`)."""
    return jax.vmap(functools.partial(_full_row, data))(problem, f0, f, cuts)


@functools.partial(jax.jit, static_argnames=("root_totals",))
def sweep_full_within(
    data: SweepData,
    problem: Int[Array, " rows"],
    f0: Int[Array, " rows"],
    f: Int[Array, " rows"],
    length: Int[Array, " rows"],
    cuts: Int[Array, "rows K"],
    root_totals: bool = False,
) -> tuple[Shaped[Array, "rows K"], Shaped[Array, "rows K"]]:
    """`sweep_full` for data that `scans_own_length`, of rows whose problems have
    `length` samples (0 for padding rows): the walk over positions stops after the
    longest. Padding samples come after every real one in every order, add exact
    zeros and are never valid positions, so the numbers are `sweep_full`'s; the count
    is traced, so one compiled loop serves every length."""
    return _walked_rows(data, problem, f0, f, cuts, jnp.max(length), root_totals)


def scans_own_length(data: SweepData) -> bool:
    """Whether `sweep_full` walks the positions one by one (`_class_lane_rows`,
    `_channels_major_full_rows`, `_two_class_walked_rows`), and so `sweep_full_within`
    serves this data."""
    return not uses_class_order(data) and (sweeps_class_lanes(data)
                                           or sweeps_channels_major(data)
                                           or walks_two_class_rows(data))


def walks_two_class_rows(data: SweepData) -> bool:
    """Whether `sweep_full` takes `_two_class_walked_rows`: two-class counts or float
    weights on the sequential plan, below the blocked sweeps' length (past it, the
    channels-major walk). The vmapped `_binary_full_row` serves the parallel plan:
    measured on a CPU at depth 2, with the walk's inputs gathered in blocks, it took
    1.1-1.7x the walk's time (eeg, htru, magic, rice, occupancy; the smallest sets
    alike)."""
    return (data.binary and data.plan == "sequential" and not data.field_bits
            and data.length < BLOCKED_FROM)


def walks_channels_major_rows(data: SweepData) -> bool:
    """Whether `sweep_full` and `sweep_full_within` walk `_channels_major_full_rows`:
    the walk `_walked_rows` takes where neither the class lanes nor the two-class walk
    do."""
    return (scans_own_length(data) and not sweeps_class_lanes(data)
            and not walks_two_class_rows(data))


def _walked_rows(data: SweepData, problem, f0, f, cuts, steps, root_totals: bool = False
                 ) -> tuple[Array, Array]:
    """The row sweep that walks the first `steps` positions one by one."""
    if sweeps_class_lanes(data):
        return _class_lane_rows(data, problem, f0, f, cuts, steps)
    if walks_two_class_rows(data):
        return _two_class_walked_rows(data, problem, f0, f, cuts, steps)
    return _channels_major_full_rows(data, problem, f0, f, cuts, steps, root_totals)


def _walk(step, carry, xs, steps):
    """`lax.scan(step, carry, xs)[0]` over the first `steps` entries of `xs` (a traced
    count or all of them), one entry per step in order.

    Counters and positions are int32: the solver traces under `jax.enable_x64`, where
    Python-int bounds make int64 ones, and their index arithmetic in every step made a
    2-row channels-major call at n = 212,992 four times slower."""
    def body(i, carry):
        return step(carry, jax.tree.map(
            lambda x: jax.lax.dynamic_index_in_dim(x, i, keepdims=False), xs))[0]
    return jax.lax.fori_loop(jnp.int32(0), jnp.asarray(steps, jnp.int32), body, carry)


def uses_class_order(data: SweepData) -> bool:
    """Whether the full and windowed sweeps take the class-ordered kernel
    (`classwise.py`): integer counts of three or more classes, whose tables
    `from_problems` then builds."""
    return data.class_sample.size > 0


def _class_order_rows(
    data: SweepData, problem: Array, f0: Array, f: Array, lo: Array, hi: Array | None,
    cuts: Array
) -> tuple[Array, Array]:
    """`sweep_full` (`hi` None) or `sweep_windowed` by `classwise.class_order_scores`."""
    n = data.length
    lay = data.layout_of[problem]  # (R,)
    samples = data.class_sample[problem, f]  # (R, n)
    key = data.rank[lay[:, None], f0[:, None], samples]  # positions in f0's order
    end = jnp.full_like(lo, n) if hi is None else hi
    rows = (problem, f)
    prefix, suffix = class_order_scores(
        key.T, data.class_weight[rows].T, data.class_start[rows].T, data.class_place[rows].T,
        data.cut_valid[lay, f, 1:].T, lo, cuts, end)
    at_cuts = data.root_cum[problem[:, None], f0[:, None], cuts]  # (R, K, C)
    if hi is None:
        pre_tot = at_cuts
        suf_tot = data.root_cum[problem, f0, -1][:, None] - at_cuts
    else:
        pre_tot = at_cuts - data.root_cum[problem, f0, lo][:, None]
        suf_tot = data.root_cum[problem, f0, hi][:, None] - at_cuts
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


# Classes from which `sweep_full` keeps channels outermost on a CPU (measured on the
# shared and generated datasets: regression sums and 12 or 30 classes gained). Integer
# counts of fewer classes take `_class_lane_rows`, whose inputs hold every class count
# of every position: with 12 classes their transposition cost it more than it saved.
CHANNELS_MAJOR_FROM_CLASSES = 8


def sweeps_channels_major(data: SweepData) -> bool:
    """Whether `sweep_full` takes `_channels_major_full_rows` (unless it takes the class
    lanes, `sweeps_class_lanes`, or the class order): see `_walks_channels_major`."""
    return _walks_channels_major(data.plan, data.field_bits, data.binary, data.loss_kind,
                                 data.n_classes, data.length)


def _walks_channels_major(plan: str, field_bits: int, binary: bool, loss_kind: str,
                          n_classes: int, length: int) -> bool:
    """Regression sums, float class weights (two classes too) and many classes on the
    sequential plan at any n (the walk gathers a block at a time); from BLOCKED_FROM
    on, where the lane sweeps and the two-class reductions stop, every other kind too.
    For float weights of a few classes the walk takes a third to a half of the vmapped
    `_full_row`'s time (measured with class-balanced weights on bean, page, segment,
    fault and bidding)."""
    if plan != "sequential" or field_bits:
        return False
    if binary:
        return length >= BLOCKED_FROM or loss_kind == "weighted"
    return (loss_kind in ("sse", "weighted") or n_classes >= CHANNELS_MAJOR_FROM_CLASSES
            or length >= BLOCKED_FROM)


def sweeps_class_lanes(data: SweepData) -> bool:
    """Whether `sweep_full` takes `_class_lane_rows`: see `_walks_class_lanes`."""
    return _walks_class_lanes(data.root_code.size > 0, data.plan, data.field_bits,
                              data.binary, data.loss_kind, data.n_classes, data.length)


def _walks_class_lanes(lane_codes: bool, plan: str, field_bits: int, binary: bool,
                       loss_kind: str, n_classes: int, length: int) -> bool:
    """Classes read from `root_code` (`lane_codes`: integer counts of 0 or 1, or float
    class weights of three classes or more, with `class_scale`, or each sample's own up
    to FLOAT_LANES_MAX_CLASSES), or integer counts of three to seven classes, on the
    sequential plan, below the blocked sweeps' length."""
    return lane_codes or (loss_kind == "count" and not binary
                          and n_classes < CHANNELS_MAJOR_FROM_CLASSES
                          and plan == "sequential" and not field_bits
                          and length < BLOCKED_FROM)


def _sse_gain(part, total) -> Array:
    """Gain of splitting a set of channels-first regression sums `total` (an array or a
    tuple of channels [S0, S1_1..S1_T]) into `part` and the rest `r = total - part`:
    `sum_t (part_t r_0 - r_t part_0)^2 / (part_0 r_0)`, 0 where a part is empty.

    It is `(|S1_l|^2 / S0_l + |S1_r|^2 / S0_r - |S1|^2 / S0) S0`, so the set's best stump
    loss is `_sse_loss` of its best gain: one division per scored split rather than
    two, and no cancellation between large explained sums (docs/design.md, "Regression
    scores", bounds its rounding). The lane sweeps (`_sse_grid`) form the same floats
    as the row sweeps through this one function.
    """
    rest = [t - a for t, a in zip(total, part)]
    l0, r0 = part[0], rest[0]
    cross = part[1] * r0 - rest[1] * l0
    squares = cross * cross
    for c in range(2, len(part)):
        cross = part[c] * r0 - rest[c] * l0
        squares = squares + cross * cross
    den = l0 * r0
    return jnp.where(den > 0, squares / jnp.where(den > 0, den, 1), 0)


def _sse_loss(squares, sums, gain) -> Array:
    """Best stump loss `S2 - (|S1|^2 + gain) / S0` of sets with summed squares `squares`,
    channels-first sums `sums` [S0, S1_1..S1_T] and best split `gain` (`_sse_gain`),
    as `S2 - (sum_t S1_t^2 / S0 + gain / S0)`: no product feeds a sum. XLA's CPU code
    contracts a product and the sum it feeds into one rounding (FMA) or not depending
    on how a fusion is compiled for its shapes: `S1^2 + gain` gave a row other last
    bits in a call of one row than in a call of 24, where its sums were gathered in
    the fusion (`_root_totals`)."""
    s0 = sums[0]
    positive = s0 > 0
    safe = jnp.where(positive, s0, 1)
    explained = gain / safe
    for c in range(1, len(sums)):
        explained = explained + sums[c] * sums[c] / safe
    return squares - jnp.where(positive, explained, 0)


def _channels_major_score(data: SweepData, left: Array, total: Array) -> Array:
    """`_score` with the channels first: `left`, `total` `(S, ...)`; for regression the
    split's gain (`_sse_gain`) rather than its explained sum."""
    if data.loss_kind == "sse":
        return _sse_gain(left, total)
    if data.binary:  # one signed channel
        return jnp.abs(left[0]) + jnp.abs(total[0] - left[0])
    return jnp.max(left, axis=0) + jnp.max(total - left, axis=0)


# Positions per block of a channels-major walk: each block's rows are gathered and
# laid out (positions, channels, rows) at once, so a call holds a block of every row,
# not its whole order, and as many rows fit a call at any n as at this one. A walk of
# one block gathers it once for both its passes.
WALK_BLOCK = 8192


def _channels_major_full_rows(
    data: SweepData, problem: Array, f0: Array, f: Array, cuts: Array, steps,
    root_totals: bool = False,
) -> tuple[Array, Array]:
    """`sweep_full` for several channels: all rows in one scan, channels outermost.

    One step per position of the rows' feature orders carries the running sums of every
    (channel, cut, row) and the best scores so far, so no `(n, K, S)` prefix sums are
    stored, and the maxima over classes (or sums over targets) are element-wise over
    whole (cut, row) slabs rather than reductions over a short last axis: the vmapped
    `_full_row` spent most of its time on those. Rows are innermost, the vector lanes
    (with the cuts innermost, four to a row, a step took about 1.6x longer at 64
    rows). The rows' inputs are gathered WALK_BLOCK positions at a time
    (`_walk_blocks`). Every running sum is formed in the order `_full_row`'s sequential
    plan forms it (float weights too), so the sums are the same numbers. The running
    total of all the row's samples (`full_scan`, a sequential cumsum of the same values
    in the same order) is carried rather than read: streaming a gathered `(n, S, R)`
    copy of it cost up to half the sweep. `root_totals`: regression rows of exact
    weights (`SweepData.exact_weights`), whose set sums are read (`_root_totals`)
    rather than summed in a first pass.
    """
    dtype = data.sorted_scan.dtype
    S = data.sorted_scan.shape[-1]
    R, K = cuts.shape
    zero = jnp.zeros((), dtype)
    lane_cuts = jnp.transpose(cuts)  # (K, R)
    over_blocks = _row_blocks(data, problem, f0, f, steps)

    def add_sample(left, value, k):  # left (S, K, R), value (S, R), k (R,)
        return left + jnp.where((k[None, :] < lane_cuts)[None], value[:, None, :], zero)

    empty = jnp.zeros((S, K, R), dtype)
    if jnp.issubdtype(dtype, jnp.integer):  # exact in any order: a block at a time
        def block_sum(xs, _, sums):
            values, key, _, pos = xs  # positions past the walk are masked
            walked = (pos < steps)[:, None, None]
            inside = (key[:, None, :] < lane_cuts[None]) & walked
            return (sums[0] + jnp.sum(jnp.where(inside[:, None], values[:, :, None, :], zero),
                                      axis=0, dtype=dtype),
                    sums[1] + jnp.sum(jnp.where(walked, values, zero), axis=0, dtype=dtype))

        # (S, K, R) prefix sets' and (S, R) all samples' sums
        pre_scan, whole = over_blocks(block_sum, (empty, jnp.zeros((S, R), dtype)))
        low = jnp.asarray(jnp.iinfo(dtype).min, dtype)
    else:  # float weights: the prefix sets' totals summed in the scan's own order, and
        # the row's total in `full_scan`'s (a sequential cumsum of the same values),
        # or for weights whose sums are exact both read in f0's order (`_root_totals`)
        if root_totals:
            pre_scan, whole = _root_totals(data, problem, f0, cuts)
        else:
            def first_pass(carry, x):
                left, total = carry
                return (add_sample(left, x[0], x[1]), total + x[0]), None

            pre_scan, whole = over_blocks(
                lambda xs, count, carry: _walk(first_pass, carry, xs[:2], count),
                (empty, jnp.zeros((S, R), dtype)))
        low = jnp.asarray(-jnp.inf, dtype)
    suf_scan = whole[:, None, :] - pre_scan

    def step(carry, sample):
        left, total, best_pre, best_suf = carry  # (S, K, R), (S, R), (K, R), (K, R)
        value, k, ok = sample  # (S, R), (R,), (R,)
        left = add_sample(left, value, k)
        total = total + value  # `full_scan` at this position, summed in its order
        right = total[:, None, :] - left  # the suffix set's samples up to this position
        score_pre = _channels_major_score(data, left, pre_scan)
        score_suf = _channels_major_score(data, right, suf_scan)
        best_pre = jnp.maximum(best_pre, jnp.where(ok[None, :], score_pre, low))
        best_suf = jnp.maximum(best_suf, jnp.where(ok[None, :], score_suf, low))
        return (left, total, best_pre, best_suf), None

    # position 0, the empty left part, is always valid
    start = (empty, jnp.zeros_like(whole), _channels_major_score(data, empty, pre_scan),
             _channels_major_score(data, empty, suf_scan))
    _, _, prefix, suffix = over_blocks(
        lambda xs, count, carry: _walk(step, carry, xs[:3], count), start)
    prefix, suffix = jnp.transpose(prefix), jnp.transpose(suffix)
    pre_scan, suf_scan = jnp.transpose(pre_scan, (0, 2, 1)), jnp.transpose(suf_scan, (0, 2, 1))
    pre_tot = data.root_cum[problem[:, None], f0[:, None], cuts]  # (R, K, C)
    suf_tot = data.root_cum[problem, f0, -1][:, None] - pre_tot
    if data.loss_kind == "sse":
        return (_sse_loss(pre_tot[..., -1], pre_scan, prefix),
                _sse_loss(suf_tot[..., -1], suf_scan, suffix))
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


def _root_totals(data: SweepData, problem: Array, f0: Array, cuts: Array
                 ) -> tuple[Array, Array]:
    """The scanned channels' sums of each row's prefix sets `(S, K, R)` and of all its
    samples `(S, R)`, read from `full_scan` in f0's order.

    For weights whose sums are exact in any order (`exact_weight_sums`) a walk's own
    first pass, which sums them in f's order, is not needed: the weight channel is
    the same number in either order, so a part the walk has emptied still has weight
    exactly 0 and scores 0, and the target channels differ only by rounding, which
    the tolerance rule covers (docs/design.md, "Regression scores")."""
    pre, whole = _set_sums(data, problem, f0, cuts, 1)  # (R, K, S), (R, S)
    return jnp.transpose(pre, (2, 1, 0)), jnp.transpose(whole)


def _set_sums(data: SweepData, problem: Array, f0: Array, cuts: Array, cut_axis: int
              ) -> tuple[Array, Array]:
    """`full_scan` (channels last) at `cuts` and at the end of f0's order: the prefix
    sets' and all samples' sums; `problem` and `f0` broadcast to the shape of `cuts`
    without its `cut_axis` (rows: `(R,)`; the regression lanes: `(S, Q)`)."""
    problem, f0 = jnp.broadcast_arrays(problem, f0)

    def at_cuts(index):
        return jnp.expand_dims(index, cut_axis)

    return data.full_scan[at_cuts(problem), at_cuts(f0), cuts], data.full_scan[problem, f0, -1]


def _row_slices(table: Array, index: tuple, at, size: int) -> Array:
    """`(R, size, ...)`: row r's slice `table[index[0][r], index[1][r], ..., at : at +
    size]` (the trailing axes whole), for R rows of `index`."""
    def one(*row):
        start = (*row, at) + (0,) * (table.ndim - len(row) - 1)
        start = tuple(jnp.asarray(i, jnp.int32) for i in start)
        return jax.lax.dynamic_slice(table, start, (1,) * len(row) + (size,)
                                     + table.shape[len(row) + 1:])
    return jax.vmap(one)(*index).reshape(len(index[0]), size, *table.shape[len(index) + 1:])


def _blocks(length: int, steps, limit: int, block_of):
    """`over_blocks(fn, carry)`: `carry = fn(xs, count, carry)` for each block of at
    most `limit` positions of a walk over the first `steps` of `length` positions, in
    order (`_walk_block`; the whole order in one block up to that length), `xs =
    block_of(start, size)` the block's inputs and `count` its positions to walk. A
    walk of one block gathers it once for all its passes. A walk stops at `length`
    (a slice past the end would be moved back onto positions walked already)."""
    block = _walk_block(length, limit)
    once = block_of(0, block) if block == length else None
    steps = jnp.minimum(steps, length)

    def over_blocks(fn, carry):
        if once is not None:
            return fn(once, steps, carry)
        return _walk_blocks(steps, block, carry, lambda start, carry: fn(
            block_of(start, block), jnp.minimum(steps - start, block), carry))

    return over_blocks


def _row_blocks(data: SweepData, problem: Array, f0: Array, f: Array, steps,
                limit: int | None = None):
    """The inputs of a walk over the first `steps` positions of its rows' feature orders,
    lanes last, in blocks of at most `limit` (default WALK_BLOCK) positions (`_blocks`):
    `xs = (values (B, S, R), root positions (B, R), valid (B, R), positions (B,))`. A
    call then holds a block of each row rather than its whole order, so it takes as
    many rows at n = 10^6 as at 10^4."""
    lay = data.layout_of[problem]  # (R,)

    def block_of(start, size):  # positions [start, start + size) of every row
        ids = _row_slices(data.perm, (lay, f), start, size)  # (R, B)
        key = data.rank[lay[:, None], f0[:, None], ids]
        values = _row_slices(data.sorted_scan, (problem, f), start, size)  # (R, B, S)
        valid = _row_slices(data.cut_valid, (lay, f), start + 1, size)
        return (jnp.transpose(values, (1, 2, 0)), jnp.transpose(key),
                jnp.transpose(valid), start + jnp.arange(size, dtype=jnp.int32))

    return _blocks(data.length, steps, WALK_BLOCK if limit is None else limit, block_of)


# Positions per block of the two-class walk (`_row_blocks`). Its one pass costs little
# a step, so gathering and transposing each row's inputs is much of a call: in blocks
# of this many positions they stay in a core's caches (256-row calls at 7,168 samples:
# 10.1 ms whole, 5.5 ms in blocks of 512; 1,024 was slower than 512 and 256 no faster).
# The channels-major walk keeps whole orders: it walks every block twice, and its one
# gather of them for both passes cost less than two gathers of blocks.
TWO_CLASS_WALK_BLOCK = 512


def _two_class_walked_rows(
    data: SweepData, problem: Array, f0: Array, f: Array, cuts: Array, steps
) -> tuple[Array, Array]:
    """`_binary_full_row` of all rows in one walk over the first `steps` positions.

    A set's best split needs only its signed total and the largest and smallest prefix
    sums at valid positions (`_binary_full_row`), so one pass carries, per (cut, row)
    lane, the prefix set's running sum, and the extremes of it and of the suffix set's
    (the row's running total less it), and scores once at the end: no `(n, K)` prefix
    sums are stored, and a call's walk stops after its longest row (compacted sides of
    different sizes, `sweep_full_within`). Invalid positions leave the extremes as
    they are, which start at 0, the empty prefix. Integer sums: the same numbers as
    `_binary_full_row` in any order (`tests/test_kernel_order.py`). Float signed
    weights: every sum is added in f's order, the set's total too (the running sum
    at the walk's end), as the channels-major walk adds them; the score `max(|T|, 2
    top - T, T - 2 bottom)` equals the best `|a| + |T - a|` up to rounding. Each step
    is a dozen element-wise operations over the lanes, so a call takes many rows
    (TWO_CLASS_WALK_ROWS, `_device/runner.py`).
    """
    dtype = data.sorted_scan.dtype
    R, K = cuts.shape
    lane_cuts = jnp.transpose(cuts)  # (K, R)
    zero = jnp.zeros((K, R), dtype)

    def step(carry, sample):
        left, total, top_pre, low_pre, top_suf, low_suf = carry  # (K, R) but total (R,)
        value, k, ok = sample  # (1, R), (R,), (R,)
        left = left + jnp.where(k[None, :] < lane_cuts, value, jnp.zeros((), dtype))
        total = total + value[0]
        right = total[None, :] - left
        ok = ok[None, :]
        return (left, total,
                jnp.where(ok, jnp.maximum(top_pre, left), top_pre),
                jnp.where(ok, jnp.minimum(low_pre, left), low_pre),
                jnp.where(ok, jnp.maximum(top_suf, right), top_suf),
                jnp.where(ok, jnp.minimum(low_suf, right), low_suf)), None

    start = (zero, jnp.zeros((R,), dtype), zero, zero, zero, zero)
    left, total, top_pre, low_pre, top_suf, low_suf = _row_blocks(
        data, problem, f0, f, steps, TWO_CLASS_WALK_BLOCK)(
        lambda xs, count, carry: _walk(step, carry, xs[:3], count), start)
    prefix = jnp.transpose(_two_class_score(left, top_pre, low_pre))
    suffix = jnp.transpose(_two_class_score(total[None, :] - left, top_suf, low_suf))
    pre_tot = data.root_cum[problem[:, None], f0[:, None], cuts]  # (R, K, C)
    suf_tot = data.root_cum[problem, f0, -1][:, None] - pre_tot
    return _loss_from_score(data, pre_tot, prefix), _loss_from_score(data, suf_tot, suffix)


def _walk_block(length: int, limit: int) -> int:
    """Positions per block of a walk over `length` (a `padded_length`): all of them up
    to `limit` (a power of two), else the largest power of two that divides it, at
    most `limit`, so that every block is whole (a slice that passed the end would be
    moved back). `padded_length` steps by a multiple of 64 past 512 samples, of 1024
    past 8192."""
    return length if length <= limit else math.gcd(length, limit)


def _walk_blocks(steps, block: int, carry, fn):
    """`carry = fn(start, carry)` for start = 0, block, 2 block, ... below `steps` (a
    traced count or an int), in order; int32 starts, as in `_walk`."""
    count = jnp.asarray((steps + block - 1) // block, jnp.int32)
    return jax.lax.fori_loop(jnp.int32(0), count, lambda b, c: fn(b * block, c), carry)


# Rows per `_class_lane_rows` call: its steps are element-wise over (row) lanes of int16
# or int32 counts, which XLA's CPU backend vectorises only with enough of them (at 16
# or 32 rows a step ran at scalar speed, 3x slower a cut-element than at 64; measured
# on page, segment, bean and fault); more rows stream more of the transposed inputs
# through the caches (128 rows were slower on bean).
CLASS_LANE_ROWS = 64
# Positions per block of `_class_lane_rows`' inputs (`_blocks`), gathered and transposed
# a block at a time: see TWO_CLASS_WALK_BLOCK.
CLASS_LANE_BLOCK = 512


def _class_lane_rows(
    data: SweepData, problem: Array, f0: Array, f: Array, cuts: Array, steps
) -> tuple[Array, Array]:
    """`sweep_full` for integer class counts: all rows in one scan, rows in the lanes.

    One step per position of the rows' feature orders adds each sample's class counts
    to the running left counts of the cuts its root position lies below and scores
    `max_c left_c + max_c (T_c - left_c)` for the prefix set (T: its class totals) and
    likewise for the suffix set, whose samples so far are the running total of f's
    order minus the left counts; each (row, cut) keeps its best score so far. The carry
    is `(class, cut, row)`: rows innermost, so every operation of a step is
    element-wise over whole vectors of rows (with rows or classes innermost, XLA's CPU
    code for these steps ran at scalar speed), and the maxima over classes are
    element-wise over `(cut, row)` slabs. The class totals of each prefix set are
    `full_scan` (cumulative class counts in f0's order) at the cut. Integer sums and
    maxima: the scores are `_full_row`'s integers in any order. Float class weights
    with `class_scale` count samples the same way and weigh each class's count in the
    score, `max_c s_c left_c + max_c (W_c - s_c left_c)`, W the weighted class sums
    (`root_cum`). Other float class weights (up to FLOAT_LANES_MAX_CLASSES classes) add
    each sample's weight, read from `scan` at its class, to float left sums, and score
    them against `root_cum` likewise: both kinds of float sums are within the tolerance
    rule (docs/design.md, "Kernels"). The inputs are gathered CLASS_LANE_BLOCK
    positions at a time."""
    lay = data.layout_of[problem]  # (R,)
    dtype = data.sorted_scan.dtype
    C = data.n_classes
    # Float class weights, multiples of one weight per class: counts weighed in the
    # score. The class sums in f0's order are then `root_cum` (float weights keep every
    # class there), so no `full_scan` is built; other float weights likewise.
    scale = (jnp.transpose(data.class_scale[problem])[:, None, :]  # (C, 1, R)
             if data.class_scale.size else None)
    floats = not jnp.issubdtype(dtype, jnp.integer)
    integer_counts = scale is None and not floats
    if integer_counts:
        _check_full_scan(data)
    class_sums = data.full_scan if integer_counts else data.root_cum
    # root positions compared as int16 where they fit: twice the lanes of int32
    key_dtype = jnp.int16 if data.length < 2**15 else jnp.int32
    if data.root_code.size:  # counts of 0 or 1: root position and class in one read
        label = jnp.arange(C, dtype=jnp.int32)[:, None]
        class_bits = (1 << CLASS_CODE_BITS) - 1
        key_shift = CLASS_CODE_BITS + (0 if scale is None else SCALED_COUNT_BITS)

        def block_of(start, size):  # lanes last: (codes, valid, weights) (B, R)
            ids = _row_slices(data.perm, (lay, f), start, size)  # (R, B)
            codes = data.root_code[problem[:, None], f0[:, None], ids]
            valid = _row_slices(data.cut_valid, (lay, f), start + 1, size)
            if not floats or scale is not None:
                return jnp.transpose(codes), jnp.transpose(valid)
            # the sample's weight: its class's channel of `scan` (0 with no weight)
            weight = data.scan[problem[:, None], ids,
                               jnp.minimum(codes & class_bits, C - 1)]
            return jnp.transpose(codes), jnp.transpose(valid), jnp.transpose(weight)

        over_blocks = _blocks(data.length, steps, CLASS_LANE_BLOCK, block_of)

        def sample_of(x):
            code, ok = x[:2]
            is_class = (code & class_bits)[None, :] == label  # (C, R)
            if scale is not None:  # the sample's multiple of its class's weight
                times = (code >> CLASS_CODE_BITS) & ((1 << SCALED_COUNT_BITS) - 1)
                counts = is_class.astype(dtype) * times.astype(dtype)[None, :]
            elif floats:  # its weight, in its class's channel
                counts = jnp.where(is_class, x[2][None, :], jnp.zeros((), dtype))
            else:
                counts = is_class.astype(dtype)
            return counts, (code >> key_shift).astype(key_dtype), ok
    else:  # every class count of every position, transposed
        rows = _row_blocks(data, problem, f0, f, steps, CLASS_LANE_BLOCK)

        def over_blocks(fn, carry):  # root positions in `key_dtype`, a block at a time
            return rows(lambda xs, count, c: fn((xs[0], xs[1].astype(key_dtype), xs[2]),
                                                count, c), carry)

        def sample_of(x):
            return x
    lane_cuts = jnp.transpose(cuts).astype(key_dtype)  # (K, R)
    classes = class_sums[problem[:, None], f0[:, None], cuts].astype(dtype)  # (R, K, C)
    pre_scan = jnp.transpose(classes, (2, 1, 0))  # (C, K, R)
    whole = class_sums[problem, f0, -1].astype(dtype)  # (R, C)
    suf_scan = jnp.transpose(whole)[:, None, :] - pre_scan
    zero = jnp.zeros((), dtype)
    low = jnp.asarray(jnp.iinfo(dtype).min if jnp.issubdtype(dtype, jnp.integer)
                      else -jnp.inf, dtype)

    def class_max(counts):  # (C, K, R) -> (K, R), element-wise over the slabs
        top = counts[0]
        for c in range(1, C):
            top = jnp.maximum(top, counts[c])
        return top

    def score(left, total):  # total: the set's class sums (weighted, with a scale)
        if scale is not None:
            left = left * scale
        return class_max(left) + class_max(total - left)

    def step(carry, sample):
        left, seen, best_pre, best_suf = carry  # (C, K, R), (C, R), (K, R), (K, R)
        value, k, ok = sample_of(sample)  # (C, R), (R,), (R,)
        left = left + jnp.where((k[None, :] < lane_cuts)[None], value[:, None, :], zero)
        seen = seen + value
        right = seen[:, None, :] - left  # the suffix set's samples up to this position
        best_pre = jnp.maximum(best_pre, jnp.where(ok[None, :], score(left, pre_scan), low))
        best_suf = jnp.maximum(best_suf, jnp.where(ok[None, :], score(right, suf_scan), low))
        return (left, seen, best_pre, best_suf), None

    # position 0, the empty left part, is always valid
    empty = jnp.zeros_like(pre_scan)
    start = (empty, jnp.zeros((C, cuts.shape[0]), dtype), score(empty, pre_scan),
             score(empty, suf_scan))
    _, _, prefix, suffix = over_blocks(
        lambda xs, count, carry: _walk(step, carry, xs, count), start)
    pre_tot = data.root_cum[problem[:, None], f0[:, None], cuts]  # (R, K, 1)
    suf_tot = data.root_cum[problem, f0, -1][:, None] - pre_tot
    return (_loss_from_score(data, pre_tot, jnp.transpose(prefix)),
            _loss_from_score(data, suf_tot, jnp.transpose(suffix)))


@jax.jit
def sweep_windowed(
    data: SweepData,
    problem: Int[Array, " rows"],
    f0: Int[Array, " rows"],
    f: Int[Array, " rows"],
    lo: Int[Array, " rows"],
    hi: Int[Array, " rows"],
    cuts: Int[Array, "rows K"],
) -> tuple[Shaped[Array, "rows K"], Shaped[Array, "rows K"]]:
    """`L1([lo, c), f)` and `L1([c, hi), f)` over positions of f0's order, scanning all n.

    The choice for wide windows, where gathering and sorting would cost more.
    """
    if uses_class_order(data):
        return _class_order_rows(data, problem, f0, f, lo, hi, cuts)
    return jax.vmap(functools.partial(_windowed_row, data))(problem, f0, f, lo, hi, cuts)


@functools.partial(jax.jit, static_argnames=("length",))
def sweep_gathered(
    data: SweepData,
    problem: Int[Array, " rows"],
    f0: Int[Array, " rows"],
    f: Int[Array, " rows"],
    lo: Int[Array, " rows"],
    hi: Int[Array, " rows"],
    cuts: Int[Array, "rows K"],
    *,
    length: int,
) -> tuple[Shaped[Array, "rows K"], Shaped[Array, "rows K"]]:
    """As `sweep_full`, restricted to samples at positions [lo, hi) of f0's order.

    The `hi - lo <= length` samples are gathered and sorted by `f`, so the cost is
    O(length) per cut rather than O(n): this is what makes W1 cheap (paper, Lemma
    compare-cost). Returns `L1([lo, c), f)` and `L1([c, hi), f)` for each cut `c`.
    """
    return jax.vmap(functools.partial(_gathered_row, data, length=length))(
        problem, f0, f, lo, hi, cuts
    )


# -- problem-parallel sweeps of a shared layout -------------------------------------------
# Problems that share one layout (a batch of bootstrap weightings or folds) read the same
# orders and root positions; only their signed counts and cuts differ. `sweep_grid`
# therefore walks each feature's order once, one sample per step, and keeps the running
# prefix sums of every (feature, root feature, cut, problem) in the vector lanes: the
# two-class score needs only each prefix sum's running maximum and minimum
# (`_binary_full_row`), so a step is a dozen lane-wise integer operations and nothing
# is gathered or stored per step.


# Problems per `sweep_grid` call: its vector lanes (fewer lanes leave the vector units
# idle; measured with `python -m qbnb_jax.bench_batch`).
GRID_LANES = 128
# Integer counts of at most this many classes get a `grid_scan` (its steps cost O(C) per
# lane; the class-ordered sweeps take many classes).
GRID_MAX_CLASSES = 8


def _grid_step(cuts, carry, step):
    total, left, top_l, bottom_l, top_r, bottom_r = carry
    x, key, valid = step  # (F, Q) signed counts, (F, S) root positions, (F,) valid
    zero = jnp.zeros((), left.dtype)
    inside = key[:, :, None, None] < cuts[None]  # (p, S, K, Q)
    left = left + jnp.where(inside, x[:, None, None, :], zero)
    total = total + x
    right = total[:, None, None, :] - left
    at = valid[:, None, None, None]
    # Prefix sums at invalid positions are replaced by 0, the empty prefix's, which
    # is always a candidate (it scores |T|): the extremes are unchanged.
    top_l = jnp.maximum(top_l, jnp.where(at, left, zero))
    bottom_l = jnp.minimum(bottom_l, jnp.where(at, left, zero))
    top_r = jnp.maximum(top_r, jnp.where(at, right, zero))
    bottom_r = jnp.minimum(bottom_r, jnp.where(at, right, zero))
    return (total, left, top_l, bottom_l, top_r, bottom_r), None


def _grid_inputs(data: SweepData, first: Array, slot_f0: Array, feature: Array, Q: int):
    """What every `sweep_grid` kind reads: the lanes' scanned channels in each feature's
    order, `(n, F, Q)` for two-class counts or `(n, C, F, Q)` with C channels; the root
    positions `(n, F, S)`; the valid positions `(n, F)`; the problem of each lane (those
    past the padded count exist only in `grid_scan`'s lanes: none is read); and the
    positions' dtype."""
    key_dtype = jnp.int16 if data.length < 2**15 else jnp.int32
    # A slice of the problem-minor table, its rows swapped: transposing
    # `sorted_scan[problems]` here cost a fifth of the sweep (4 ns a sample).
    table = jax.lax.dynamic_slice_in_dim(data.grid_scan, first, Q, axis=-1)[feature]
    xs = jnp.transpose(table, (1, 0, 2) if table.ndim == 3 else (1, 2, 0, 3))
    problem = jnp.minimum(first + jnp.arange(Q), data.root_cum.shape[0] - 1)
    keys = jnp.transpose(data.rank[0][slot_f0][:, data.perm[0][feature]], (2, 1, 0))
    valid = jnp.transpose(data.cut_valid[0][feature, 1:])
    return xs, keys.astype(key_dtype), valid, problem, key_dtype


@functools.partial(jax.jit, static_argnames=("root_totals",))
def sweep_grid(
    data: SweepData, first: Int[Array, ""], slot_f0: Int[Array, " S"],
    feature: Int[Array, " F"], cuts: Int[Array, "S K Q"], root_totals: bool = False,
) -> tuple[Shaped[Array, "F S K Q"], Shaped[Array, "F S K Q"]]:
    """`sweep_full` for F features of the Q problems `first + q` at S root features:
    two-class counts (signed), integer counts of a few classes (`_class_grid`), or
    regression sums (`_sse_grid`, the same floats as `sweep_full`'s).

    All problems must use layout 0 (`data.layout_of`) and `data.grid_scan`, whose
    problem axis `first + Q` must not pass. `cuts[s, :, q]` are problem `first + q`'s
    cuts in root feature `slot_f0[s]`'s order (0 where unused).

    **Returns:** `(prefix, suffix)` losses, `[i, s, k, q]` = `L1(prefix_c, f)` and
    `L1(suffix_c, f)` of `f = feature[i]` at `c = cuts[s, k, q]`: the same integers
    `sweep_full` returns.
    """
    if data.loss_kind == "sse":
        return _sse_grid(data, first, slot_f0, feature, cuts, root_totals)
    if not data.binary:
        return _class_grid(data, first, slot_f0, feature, cuts)
    dtype = data.sorted_scan.dtype
    Q = cuts.shape[2]
    xs, keys, valid, problem, key_dtype = _grid_inputs(data, first, slot_f0, feature, Q)
    F = xs.shape[1]
    S, K, _ = cuts.shape
    lanes = jnp.zeros((F, S, K, Q), dtype)
    carry = (jnp.zeros((F, Q), dtype), lanes, lanes, lanes, lanes, lanes)
    step = functools.partial(_grid_step, cuts.astype(key_dtype))
    (total, left, top_l, bottom_l, top_r, bottom_r), _ = jax.lax.scan(
        step, carry, (xs, keys, valid))
    right = total[:, None, None, :] - left
    # Set totals: the summed weight in f0's order at each cut (O(1) per cut; integer
    # counts keep one `root_cum` channel), read at the cuts alone.
    wide = _wide(dtype)
    pre_tot = data.root_cum[problem[None, None, :], slot_f0[:, None, None], cuts, 0]
    pre_tot = pre_tot.astype(wide)  # (S, K, Q)
    suf_tot = data.root_cum[problem, 0, -1, 0].astype(wide)[None, None, :] - pre_tot
    prefix = (pre_tot[None] - _two_class_score(left, top_l, bottom_l)) // 2
    suffix = (suf_tot[None] - _two_class_score(right, top_r, bottom_r)) // 2
    return prefix, suffix


# Integer counts of C classes: `grid_scan` is `(p, n, C, G)`. The score of a split is
# max_c left_c + max_c (T_c - left_c) for a set of class totals T (`_score`), so each
# lane carries its C running left counts and its best score so far; the maxima over
# classes are element-wise over whole (feature, slot, cut, problem) slabs.


def _class_grid_score(left: tuple, total: tuple) -> Array:
    top = left[0]
    rest = total[0] - left[0]
    for c in range(1, len(left)):
        top = jnp.maximum(top, left[c])
        rest = jnp.maximum(rest, total[c] - left[c])
    return top + rest


def _class_grid_feature(data, first, slot_f0, cuts, pre_tot, suf_tot, start, f):
    """The best left and right scores `(S, K, Q)` of one feature `f` (a scalar).

    One feature a scan: its lanes are `(S, K, Q)` slabs with no feature axis, on which
    XLA's CPU loops spent a quarter to a half less per lane-sample than on
    `(F, S, K, Q)` slabs with F > 1 (measured on page's lanes), and
    each position's validity is one flag, so that tied positions (most of them where a
    feature has a few hundred values) skip the scores and only add their sample.
    """
    Q = cuts.shape[2]
    _, keys, valid, _, key_dtype = _grid_inputs(data, first, slot_f0, f[None], Q)
    # this feature's slab of the lanes' counts, (n, C, Q): slicing the lanes of every
    # feature first (as `_grid_inputs` does) is hoisted out of the loop over features
    # and copies all of them once a call
    _, n, C, _ = data.grid_scan.shape
    at = jnp.zeros((), first.dtype)
    xs = jax.lax.dynamic_slice(data.grid_scan, (f.astype(first.dtype), at, at, first),
                               (1, n, C, Q))[0]
    lane_cuts = cuts.astype(key_dtype)

    def step(carry, sample):
        total, left, best_pre, best_suf = carry  # (C, Q), (C, S, K, Q), (S, K, Q) x2
        x, key, ok = sample  # (C, Q) counts, (S,) root positions, () valid
        inside = key[:, None, None] < lane_cuts  # (S, K, Q)
        left = left + jnp.where(inside[None], x[:, None, None, :], jnp.zeros((), left.dtype))
        total = total + x

        def scored(bests):
            right = total[:, None, None, :] - left  # the suffix set's samples so far
            return (jnp.maximum(bests[0], _class_grid_score(tuple(left), pre_tot)),
                    jnp.maximum(bests[1], _class_grid_score(tuple(right), suf_tot)))

        best_pre, best_suf = jax.lax.cond(ok, scored, lambda bests: bests,
                                          (best_pre, best_suf))
        return (total, left, best_pre, best_suf), None

    dtype = start[0].dtype
    carry = (jnp.zeros((C, Q), dtype), jnp.zeros((C, *cuts.shape), dtype), *start)
    (_, _, best_pre, best_suf), _ = jax.lax.scan(step, carry, (xs, keys[:, 0], valid[:, 0]))
    return best_pre, best_suf


def _class_grid(
    data: SweepData, first: Array, slot_f0: Array, feature: Array, cuts: Array
) -> tuple[Array, Array]:
    """`sweep_grid` for integer counts of C classes (`grid_scan` `(p, n, C, G)`), one
    feature after another (`_class_grid_feature`).

    The class totals of each prefix set (and so of its suffix) are read before the
    scan from `full_scan`, the cumulative class counts in f0's order, at the cuts.
    """
    _check_full_scan(data)
    dtype = data.sorted_scan.dtype
    Q = cuts.shape[2]
    C = data.grid_scan.shape[2]
    problem = _grid_inputs(data, first, slot_f0, feature[:1], Q)[3]
    classes = data.full_scan[problem[None, None, :], slot_f0[:, None, None], cuts]  # S K Q C
    classes = jnp.moveaxis(classes, -1, 0).astype(dtype)  # (C, S, K, Q)
    whole = data.full_scan[problem, 0, -1].astype(dtype)  # (Q, C): any feature's total
    rest = jnp.transpose(whole)[:, None, None, :] - classes
    pre_tot = tuple(classes[c] for c in range(C))
    suf_tot = tuple(rest[c] for c in range(C))
    zeros = tuple(jnp.zeros(cuts.shape, dtype) for _ in range(C))
    # position 0, the empty left part, is always valid; invalid positions are skipped
    # (scoring them 0 would change no maximum, as every start is at least 0)
    start = (_class_grid_score(zeros, pre_tot), _class_grid_score(zeros, suf_tot))
    one = functools.partial(_class_grid_feature, data, first, slot_f0, cuts, pre_tot,
                            suf_tot, start)
    best_pre, best_suf = jax.lax.map(one, feature)  # (F, S, K, Q) each
    wide = _wide(dtype)
    pre_w = data.root_cum[problem[None, None, :], slot_f0[:, None, None], cuts, 0]
    pre_w = pre_w.astype(wide)  # (S, K, Q)
    suf_w = data.root_cum[problem, 0, -1, 0].astype(wide)[None, None, :] - pre_w
    return pre_w[None] - best_pre.astype(wide), suf_w[None] - best_suf.astype(wide)


# Regression: `grid_scan` is `(p, n, S, G)` of the scanned channels [w, w*y_1..y_T] in
# float. Float sums depend on their order, so every sum is formed as
# `_channels_major_full_rows` forms it on the sequential plan: the prefix sets' totals by
# a first pass over f's order (adding exact zeros outside the set), the suffix set's
# partial sums as the running total of f's order (`full_scan`, a sequential cumsum) minus
# the prefix set's, and the gains and losses by `_sse_gain` and `_sse_loss`. The losses
# are then the same floats, bit for bit.


# Samples per step of a one-feature regression sweep (`_sse_chunked`), unrolled in the
# step (measured with `python -m qbnb_jax.bench_batch --source concrete`).
SSE_CHUNK = 4


def _sse_chunks(valid: Array, U: int) -> tuple[Array, Array, Array, Array]:
    """One feature's positions `(n,)` in chunks of at most U consecutive ones, each
    ending at a valid position, before a multiple of U, or at the end: the chunks'
    `starts` and `lengths` `(n,)` (past the last chunk: start n, length 0), whether
    each ends at a valid position, and `count`, the chunks up to the last valid
    position (none past it is scored)."""
    n = valid.shape[0]
    i = jnp.arange(n)
    first = (i % U == 0) | jnp.concatenate([jnp.zeros(1, bool), valid[:-1]])
    starts = jnp.nonzero(first, size=n, fill_value=n)[0]
    ends = jnp.concatenate([starts[1:], jnp.full(1, n, starts.dtype)])
    scored = valid[jnp.clip(ends - 1, 0, n - 1)] & (starts < n)
    chunk = jnp.cumsum(first) - 1  # integers: exact in any order
    last = jnp.max(jnp.where(valid, i, -1))
    count = jnp.where(last >= 0, chunk[jnp.maximum(last, 0)] + 1, 0)
    return starts, ends - starts, scored, count


def _sse_chunked(read: Callable[[Array], Array], n: int, keys: Array, valid: Array,
                 lane_cuts: Array, root: tuple | None = None
                 ) -> tuple[Array, Array, tuple, tuple]:
    """The best prefix and suffix gains `(S, K, Q)` of one feature's order, and the
    prefix and suffix sets' channel sums (`_sse_loss` reads them), SSE_CHUNK samples
    per step: each step reads and writes the lanes' running sums once for several
    samples, and the second pass steps from one valid position to the next (a chunk
    ends at each), so most steps score and the invalid positions cost no step of
    their own. The samples are added one at a time in the same order (a masked-off
    sample adds an exact zero), so the sums and scores are the same floats.

    `read(k)`: the lanes' channels `(C, Q)` at sorted position k (`0 <= k < n`), read
    from the table in place, not from a copy of the feature's block. `keys` `(n, S)`,
    `valid` `(n,)`. `root`: `(prefix sets' sums C x (S, K, Q), all samples' C x (S,
    Q))` in f0's order, which lanes of exact weights take instead of a first pass
    (`_root_totals`)."""
    U = SSE_CHUNK
    S, K, Q = lane_cuts.shape
    one = jax.eval_shape(read, jnp.int32(0))
    (C, _), dtype = one.shape, one.dtype
    zero = jnp.zeros((), dtype)
    m = -(-n // U)
    # root positions past the end: whole chunks for the first pass, whole windows for
    # the second (their samples are masked off)
    keys = jnp.concatenate([keys, jnp.zeros((m * U + U - n, S), keys.dtype)])

    def at(k):  # the channels at position k, zeros past the end
        x = read(jnp.minimum(k, n - 1))
        return x if n % U == 0 else jnp.where(k < n, x, zero)

    def add(left, x, key, keep=True):  # left: C x (S, K, Q); x: (C, Q); key: (S,)
        inside = (key[:, None, None] < lane_cuts) & keep
        return tuple(a + jnp.where(inside, x[c][None, None, :], zero)
                     for c, a in enumerate(left))

    empty = tuple(jnp.zeros((S, K, Q), dtype) for _ in range(C))

    def first_pass(t, carry):
        left, total = carry
        for u in range(U):
            k = t * U + u
            x = at(k)
            left = add(left, x, jax.lax.dynamic_index_in_dim(keys, k, keepdims=False))
            total = total + x
        return left, total

    if root is not None:
        pre_scan = root[0]
        suf_scan = tuple(root[1][c][:, None, :] - pre_scan[c] for c in range(C))
    else:
        pre_scan, whole = jax.lax.fori_loop(0, m, first_pass,
                                            (empty, jnp.zeros((C, Q), dtype)))
        suf_scan = tuple(whole[c][None, None, :] - pre_scan[c] for c in range(C))
    starts, lengths, scored, count = _sse_chunks(valid, U)

    def second_pass(t, carry):
        left, total, best_pre, best_suf = carry
        for u in range(U):
            k = starts[t] + u
            x = read(jnp.minimum(k, n - 1))
            key = jax.lax.dynamic_index_in_dim(keys, k, keepdims=False)
            keep = u < lengths[t]
            left, total = add(left, x, key, keep), total + jnp.where(keep, x, zero)

        def score(bests):
            right = tuple(total[c][None, None, :] - left[c] for c in range(C))
            return (jnp.maximum(bests[0], _sse_gain(left, pre_scan)),
                    jnp.maximum(bests[1], _sse_gain(right, suf_scan)))

        # a chunk cut short of a valid position (runs of tied values) is not scored
        best_pre, best_suf = jax.lax.cond(scored[t], score, lambda bests: bests,
                                          (best_pre, best_suf))
        return left, total, best_pre, best_suf

    # position 0, the empty left part, is always valid
    start = (empty, jnp.zeros((C, Q), dtype), _sse_gain(empty, pre_scan),
             _sse_gain(empty, suf_scan))
    _, _, best_pre, best_suf = jax.lax.fori_loop(0, count, second_pass, start)
    return best_pre, best_suf, pre_scan, suf_scan


def _sse_grid(
    data: SweepData, first: Array, slot_f0: Array, feature: Array, cuts: Array,
    root_totals: bool = False,
) -> tuple[Array, Array]:
    """`sweep_grid` for regression sums (`grid_scan` `(p, n, S, G)`, floats);
    `root_totals`: the set sums of every lane read in f0's order (`_root_totals`),
    the lanes of problems of exact weights."""
    Q = cuts.shape[2]
    _, keys, valid, problem, key_dtype = _grid_inputs(data, first, slot_f0, feature, Q)
    lane_cuts = cuts.astype(key_dtype)
    _, _, C, _ = data.grid_scan.shape
    root = None
    if root_totals:  # as `_root_totals`: (S, K, Q, C) and (S, Q, C)
        pre, whole = _set_sums(data, problem[None, :], slot_f0[:, None], cuts, 1)
        root = (tuple(pre[..., c] for c in range(C)), tuple(whole[..., c] for c in range(C)))

    def one_feature(i):
        def read(k):
            at = (feature[i], k, 0, first)
            return jax.lax.dynamic_slice(
                data.grid_scan, [jnp.asarray(j, jnp.int32) for j in at], (1, 1, C, Q))[0, 0]

        return _sse_chunked(read, data.length, keys[:, i], valid[:, i], lane_cuts, root)

    # One feature's order after another, each in steps of SSE_CHUNK samples, carrying
    # one feature's sums: a step over several features side by side spilled its sums
    # out of a core's L2 and scored at every position any of them could split.
    best_pre, best_suf, pre_scan, suf_scan = jax.lax.map(one_feature,
                                                         jnp.arange(feature.shape[0]))
    pre_tot = data.root_cum[problem[None, None, :], slot_f0[:, None, None], cuts, -1]  # S K Q
    suf_tot = data.root_cum[problem[None, None, :], slot_f0[:, None, None], -1, -1] - pre_tot
    return (_sse_loss(pre_tot[None], pre_scan, best_pre),
            _sse_loss(suf_tot[None], suf_scan, best_suf))
