"""Host-side preprocessing: validation, per-sample stat vectors and presorted orders.

Everything here is numpy. The solver turns a problem into one `Problem` per fit; the
device kernels only read the arrays it holds (docs/design.md, "Problem and data layout").
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Literal, NamedTuple

import numpy as np

from qbnb_jax._device.parallel import THREADS, run_all
from qbnb_jax._problem.duplicates import repeated_row_groups
from qbnb_jax._problem.leaf_limits import LeafLimits
from qbnb_jax._problem.missing import MissingColumns, virtual_features
from qbnb_jax._problem.scaling import SAFE_MAX, SAFE_MIN, sse_setup

Task = Literal["classification", "regression"]
# How leaf losses are computed from summed stat vectors:
#   "count": integer class counts, exact;   "weighted": float class weights;
#   "sse":   [w, w*y_1..w*y_m, w*|y|^2], squared error.
LossKind = Literal["count", "weighted", "sse"]

TASKS = ("classification", "regression")


class ThresholdTables(NamedTuple):
    """`Problem.cut_pos`, `slack_left`, `n_thresholds` (and `cut_valid`) of problems of
    one width, stacked; `Problem.reweighted` adds two-class problems' best stumps."""

    cut_pos: np.ndarray  # (P, p, n+1)
    slack_left: np.ndarray  # (P, p, n+1)
    n_thresholds: np.ndarray  # (P, p)
    cut_valid: np.ndarray | None = None  # (P, p, n+1)
    # `reweighted` problems of counts: `host.stump_losses` of all samples, (P, p) each
    stump_loss: np.ndarray | None = None
    stump_position: np.ndarray | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """A validated problem in array form (host numpy).

    `n` counts only samples with positive weight: zero-weight rows are removed, so they
    neither cost anything nor add candidate thresholds.
    """

    task: Task
    loss_kind: LossKind
    X: np.ndarray  # float64 (n, p)
    stats: np.ndarray  # (n, C) int32 or float64, per-sample stat vectors z_i
    perm: np.ndarray  # int32 (p, n): stable order of each feature
    rank: np.ndarray  # int32 (p, n): rank[f, i] = position of sample i in perm[f]
    value_rank: np.ndarray  # int32 (p, n): dense rank of x[i, f] among distinct values
    cut_valid: np.ndarray  # bool (p, n+1): a threshold may fall before sorted position k
    # int32 (p, n+1), int16 for `reweighted` problems: threshold index t -> samples left
    cut_pos: np.ndarray
    n_thresholds: np.ndarray  # int32 (p,): u(f); threshold indices run 0..u(f)
    # float64 (p, n+1), integers for `reweighted` problems (int16 when they fit): summed
    # `sample_slack` of the samples left of threshold index t
    slack_left: np.ndarray
    classes: np.ndarray | None
    y_offset: np.ndarray | None  # regression: the weighted mean removed from y
    y: np.ndarray  # encoded labels (n,) or centred targets (n, m)
    weight: np.ndarray  # float64 (n,)
    # Regression: `stats` and `slack_left` hold weight * 2**weight_exponent and y *
    # 2**target_exponent, powers of two chosen so that the search's sums neither
    # underflow nor overflow (`scaling.sse_setup`); exact, so they change no decision.
    # `weight`, `y` and `y_offset` stay in the caller's units, for the tree's values
    # and objective.
    weight_exponent: int = 0
    target_exponent: int = 0
    # min_samples_leaf / min_weight_fraction_leaf; None: leaves of any size
    leaf_limits: LeafLimits | None = None
    # X had NaN: `X` holds the virtual features of `_problem/missing.py`; None: none
    missing: MissingColumns | None = None

    @property
    def n_features(self) -> int:
        """The caller's number of features (`p` counts columns with NaN twice)."""
        return self.p if self.missing is None else self.missing.n_features

    @property
    def loss_exponent(self) -> int:
        """A loss or bound computed from `stats` is the true one times 2**loss_exponent."""
        return self.weight_exponent + 2 * self.target_exponent

    def true_loss(self, value: float) -> float:
        """A loss or bound computed from `stats`, in the caller's units (exact)."""
        return float(np.ldexp(value, -self.loss_exponent))

    def search_slack(self, idx: np.ndarray) -> np.ndarray:
        """`sample_slack` of samples `idx` in the units of `stats`."""
        y, w = self.y[idx], self.weight[idx]
        if self.task == "regression":
            y, w = np.ldexp(y, self.target_exponent), np.ldexp(w, self.weight_exponent)
        return sample_slack(self.task, y, w)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def p(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_channels(self) -> int:
        return int(self.stats.shape[1])

    def compact(self, mask: np.ndarray) -> Problem:
        """The samples in `mask` (with positive weight) alone, as a smaller problem.

        Presorted from this problem's orders, no sort; thresholds are those between
        the kept samples, at the midpoints of kept neighbours. A sweep of it costs its
        own n, not the parent's; deeper trees solve their subtrees on these.
        """
        keep = mask & (self.weight > 0)
        idx = np.flatnonzero(keep)
        p, m = self.p, len(idx)
        new_id = np.full(self.n, -1, dtype=np.int32)
        new_id[idx] = np.arange(m, dtype=np.int32)
        kept = self.perm[keep[self.perm]].reshape(p, m)  # each row keeps m samples
        perm = new_id[kept]
        vr = self.value_rank[np.arange(p)[:, None], kept]
        w = self.weight[idx]
        rank, value_rank, cut_valid, cut_pos, n_thresholds, slack_left = _presorted(
            perm, vr[:, 1:] != vr[:, :-1], self.search_slack(idx)
        )
        return dataclasses.replace(
            self, X=self.X[idx], stats=self.stats[idx], perm=perm, rank=rank,
            value_rank=value_rank, cut_valid=cut_valid, cut_pos=cut_pos,
            n_thresholds=n_thresholds, slack_left=slack_left, y=self.y[idx], weight=w,
        )

    def reweighted(self, weights: np.ndarray, block: int = 16, *,
                   signed_out: np.ndarray | None = None, mass_out: np.ndarray | None = None,
                   stats: np.ndarray | None = None, slack: np.ndarray | None = None,
                   class_stumps: bool = False) -> tuple[list[Problem], ThresholdTables]:
        """The same samples and layout under each row of integer weights `(P, n)`.

        Classification with unit weights only (as `make_problem` without weights):
        the stats are counts. Thresholds are those of the samples with positive
        weight, numbered as a solve of that weighted problem alone numbers them
        (zero-weight rows dropped): a cut sits right after a positive sample whose
        next positive sample has a larger value. Searches on the two then take the
        same path and return the same tree.

        Returns the problems and their threshold tables stacked (the problems hold
        views of them). Computed for `block` problems at a time, so the temporaries
        stay in cache, the blocks spread over threads (numpy releases the GIL).

        The same pass can fill the kernels' stat tables of two-class problems (see
        `SweepData.shared_stat_buffers`), which it computes on the way:
        `signed_out[q, f, k, 0]`, problem q's signed count (class 1 minus class 0) at
        sorted position k of f; `mass_out[q, f, k, 0]`, its weight before position k
        (the total past n). Both `(>= P, p, >= n (+ 1), 1)`, entries beyond left alone.
        With `signed_out` the tables also carry each problem's best stumps, and so they
        do with `class_stumps` for counts of more classes (as `host.stumps_of_all_shared`
        finds them, from the class counts in each feature's order formed here on the way).

        Float weights (regression, fractional class weights; `reweighted_samples`):
        `stats` `(P, n, C)` and `slack` `(P, n)` give each problem's stat vectors and
        sample slack, zero on its zero-weight rows; `slack_left` is then the float
        prefix sums of `slack`, which equal those of the problem alone at every cut
        (a sequential sum, to which zero-weight rows add exact zeros).
        """
        n, p = self.n, self.p
        P = len(weights)
        # group_end[f, k]: the first sorted position of f whose value exceeds position k's
        vr_sorted = np.take_along_axis(self.value_rank, self.perm, axis=1)
        group_end = np.empty((p, n), dtype=np.int64)
        for f in range(p):  # one searchsorted per feature over its distinct values
            group_end[f] = np.searchsorted(vr_sorted[f], vr_sorted[f], side="right")
        tied = group_end[:, :-1] != np.arange(1, n)[None, :]  # (p, n-1)
        # Positions and integer slack in the narrowest type that holds them (int16 for
        # n and weight sums below 2**15): these tables are a batch's largest arrays,
        # and only differences of entries or their sums with floats are ever formed.
        position_dtype = np.int16 if n < 2**15 else np.int32
        cut_pos = np.empty((P, p, n + 1), dtype=position_dtype)
        cut_valid = np.zeros((P, p, n + 1), dtype=bool)
        cut_valid[..., 0] = True
        n_thresholds = np.empty((P, p), dtype=np.int32)
        floats = slack is not None
        if floats:
            integral = weights
            slack_left = np.empty((P, p, n + 1))
        else:
            total = weights.sum(axis=1).max(initial=0)
            counts_dtype = np.int32 if total < 2**31 else np.int64
            slack_left = np.empty((P, p, n + 1),
                                  dtype=np.int16 if total < 2**15 else counts_dtype)
            integral = weights.astype(counts_dtype)
        stump_loss = stump_position = None
        class_stumps = class_stumps and not floats and signed_out is None
        if signed_out is not None or class_stumps:
            stump_loss = np.empty((P, p))
            stump_position = np.empty((P, p), dtype=np.int64)
        if stats is None:
            stats = np.multiply(self.stats[None], integral[:, :, None], dtype=np.int32,
                                casting="unsafe")  # counts below 2**31 (`counts_dtype`)
        if signed_out is not None:  # +1 for class 1, -1 for class 0, in each feature's order
            signed_sorted = (self.stats[:, 1] - self.stats[:, 0])[self.perm]
        if class_stumps:  # (C, p, n): each sample's unit counts, in each feature's order
            class_sorted = np.ascontiguousarray(np.moveaxis(self.stats[self.perm], 2, 0),
                                                dtype=counts_dtype)

        def fill(b0: int) -> None:  # problems b0 .. b0 + block - 1
            W = integral[b0 : b0 + block]
            B = len(W)
            w_sorted = np.take(W, self.perm, axis=1)  # (B, p, n) in each feature's order
            positive = w_sorted > 0
            # positives before each position; a cut after position k - 1 is valid when
            # that sample is positive, none follows it in its group of equal values,
            # and one follows later: seen[group_end] == seen[k] < seen[n]
            seen = np.zeros((B, p, n + 1), dtype=np.int32)
            np.cumsum(positive, axis=2, out=seen[..., 1:])
            valid = positive[..., :-1] & (seen[..., 1:n] < seen[..., n:])
            if tied.any():
                at_end = np.take_along_axis(
                    seen, np.broadcast_to(group_end[:, :-1], (B, p, n - 1)), axis=2)
                valid &= ~tied | (at_end == seen[..., 1:n])
            cut_valid[b0 : b0 + B, :, 1:n] = valid
            if floats:  # the float slack summed in each feature's order, as `_presorted`
                cum_slack = np.zeros((B, p, n + 1))
                np.cumsum(np.take(slack[b0 : b0 + B], self.perm, axis=1), axis=2,
                          out=cum_slack[..., 1:])
                n_thresholds[b0 : b0 + B] = _cut_tables(
                    valid, cum_slack, cut_pos[b0 : b0 + B], slack_left[b0 : b0 + B])
                return
            cum_weight = np.zeros((B, p, n + 1), dtype=counts_dtype)
            np.cumsum(w_sorted, axis=2, out=cum_weight[..., 1:])
            n_thresholds[b0 : b0 + B] = _cut_tables(valid, cum_weight, cut_pos[b0 : b0 + B],
                                                    slack_left[b0 : b0 + B])
            if signed_out is not None:
                signed = signed_out[b0 : b0 + B, :, :n, 0]
                np.multiply(w_sorted, signed_sorted, out=signed,
                            casting="unsafe")  # |values| <= the weights' sum: they fit
                stump_loss[b0 : b0 + B], stump_position[b0 : b0 + B] = two_class_stumps(
                    signed, cut_valid[b0 : b0 + B], cum_weight[:, 0, n])
            if class_stumps:  # counts (B, C, p, n): the weights times the unit counts
                ordered = np.multiply(w_sorted[:, None], class_sorted[None], dtype=counts_dtype)
                stump_position[b0 : b0 + B], stump_loss[b0 : b0 + B] = valid_argmin(
                    class_count_losses(ordered), cut_valid[b0 : b0 + B])
            if mass_out is not None:
                mass = mass_out[b0 : b0 + B, :, :, 0]
                mass[:, :, : n + 1] = cum_weight
                mass[:, :, n + 1 :] = mass[:, :, n : n + 1]

        run_all(fill, range(0, P, block))
        # Copies of this (frozen) problem's fields, made without `dataclasses.replace`,
        # whose __init__ cost 20 us a problem: a tenth of this pass.
        problems = []
        for i in range(P):
            problem = object.__new__(Problem)
            problem.__dict__.update(self.__dict__, stats=stats[i], cut_valid=cut_valid[i],
                                    cut_pos=cut_pos[i], n_thresholds=n_thresholds[i],
                                    slack_left=slack_left[i], weight=weights[i])
            problems.append(problem)
        return problems, ThresholdTables(cut_pos, slack_left, n_thresholds, cut_valid,
                                         stump_loss, stump_position)


def reweighted_samples(base: Problem, weights: np.ndarray, targets: np.ndarray | None = None
                       ) -> tuple[list[Problem], ThresholdTables]:
    """`base` (made without weights) under each row of float weights `(P, n)`, on base's
    layout, for problems whose sums are floats: regression, fractional class weights.

    Each problem's stat vectors, sample slack, centred targets and search exponents are
    those `make_problem(X, y, sample_weight=row)` computes from the row's positive
    samples, bit for bit (`scaling.sse_setup`, for all rows at once); its zero-weight
    rows hold zero stats, slack and centred targets. The sweeps' float prefix sums run
    in each feature's order one sample at a time (the sequential plan;
    `tables.slack_left` likewise), and a zero-weight row adds an exact zero to them, so
    on the shared layout they are the same numbers a solve of the problem alone forms;
    thresholds are numbered as that solve numbers them (`reweighted`).
    `targets`: regression, the caller's targets `(n, m)` (`as_targets`).

    What a solve computes from whole sample sets (tree values, objective, tolerance)
    it sums term by term in sample order (`_problem/sums.py`), to which zero-weight
    rows add exact zeros: the problems give the same numbers as they are.

    Returns `(problems, tables)`.
    """
    P, n = weights.shape
    if base.task == "regression":
        setup = sse_setup(targets, weights)
        problems, tables = base.reweighted(weights, stats=list(setup.stats), slack=setup.slack)
        for q, problem in enumerate(problems):
            problem.__dict__.update(y=setup.centred[q], y_offset=setup.offset[q],
                                    weight_exponent=int(setup.weight_exponent[q]),
                                    target_exponent=int(setup.target_exponent[q]))
        return problems, tables
    stats_all = np.empty((P, n, base.n_channels))
    onehot = base.stats.astype(np.float64)
    np.multiply(onehot[None], weights[:, :, None], out=stats_all)  # as `make_problem`
    stats: list[np.ndarray] = []
    kinds: list[str] = []
    for w, st in zip(weights, stats_all):
        if bool(np.all(w == np.round(w))) and float(w.sum()) < 2**30:
            stats.append(st.astype(np.int32))  # counts, as `make_problem` keeps them
            kinds.append("count")
        else:
            _check_class_weight_range(w[w > 0])
            stats.append(st)
            kinds.append("weighted")
    # `sample_slack` of classification: the weights
    problems, tables = base.reweighted(weights, stats=stats, slack=weights)
    for problem, kind in zip(problems, kinds):
        problem.__dict__.update(loss_kind=kind)
    return problems, tables


class Layout(NamedTuple):
    """The presorted orders a sweep reads (`SweepData.from_problems`' layouts)."""

    perm: np.ndarray  # (p, n)
    rank: np.ndarray  # (p, n)
    value_rank: np.ndarray  # (p, n): equal values, equal entries
    cut_valid: np.ndarray  # (p, n + 1)

    @property
    def n(self) -> int:
        return int(self.perm.shape[1])

    @property
    def p(self) -> int:
        return int(self.perm.shape[0])


def positive_layouts(base: Problem, weights: np.ndarray) -> tuple[list[Layout], np.ndarray]:
    """Each row of `weights` `(P, n)`'s positive samples laid out as `make_problem` lays
    them out alone (no sort: `base`'s orders, zero-weight rows dropped, as `compact`
    drops them), and `seen` `(P, p, n + 1)`: `seen[q, f, k]`, problem q's positive
    samples before position k of f's order in `base`, which turns a position of the
    shared layout into the same cut of problem q's own.

    `value_rank` keeps `base`'s ranks (dense among all samples): sweeps only compare
    neighbours for equality.
    """
    P, n = weights.shape
    p = base.p
    positive = weights > 0
    counts = positive.sum(axis=1)
    new_id = np.cumsum(positive, axis=1, dtype=np.int32) - 1  # (P, n)
    flags = np.take(positive, base.perm, axis=1)  # (P, p, n), each feature's order
    seen = np.zeros((P, p, n + 1), dtype=np.int16 if n < 2**15 else np.int32)
    np.cumsum(flags, axis=2, out=seen[..., 1:])
    perm = np.take(new_id, base.perm, axis=1)[flags]  # problem by problem, (p, m_q) each
    vr_sorted = np.take_along_axis(base.value_rank, base.perm, axis=1)
    sorted_values = np.broadcast_to(vr_sorted, (P, p, n))[flags]
    # rank[q, f, j]: the position of problem q's j-th positive sample in f's own order
    at = np.take_along_axis(seen[..., :n], np.broadcast_to(base.rank, (P, p, n)), axis=2)
    rank = at[np.broadcast_to(positive[:, None, :], (P, p, n))]
    value_rank = np.broadcast_to(base.value_rank, (P, p, n))[
        np.broadcast_to(positive[:, None, :], (P, p, n))]
    ends = np.concatenate([[0], np.cumsum(counts * p)])
    layouts = []
    for q in range(P):
        m = int(counts[q])
        one = slice(ends[q], ends[q + 1])
        values = sorted_values[one].reshape(p, m)
        cut_valid = np.zeros((p, m + 1), dtype=bool)
        cut_valid[:, 0] = True
        cut_valid[:, 1:m] = values[:, 1:] != values[:, :-1]
        layouts.append(Layout(perm[one].reshape(p, m), rank[one].reshape(p, m).astype(np.int32),
                              value_rank[one].reshape(p, m), cut_valid))
    return layouts, seen


def midpoint(lo: float, hi: float) -> float:
    """A threshold `t` with `lo <= t < hi` for consecutive distinct values `lo < hi`.

    `(lo + hi) / 2` is wrong in two corner cases: it overflows to inf when both values
    are huge (|x| > ~9e307), and for adjacent floats the rounded midpoint can equal
    `hi`, so `x <= t` would send `hi` left too. Like scikit-learn, halve first and fall
    back to `lo` when the midpoint is not strictly below `hi`.
    """
    t = lo / 2.0 + hi / 2.0
    if not (lo <= t < hi):
        t = lo
    return float(t)


def _one_line(err: BaseException) -> str:
    return " ".join((str(err) or type(err).__name__).split())


def _missing_marker(value) -> str | None:
    """How a missing value is spelled ("None", "NaN", "pd.NA", "NaT"); None if it is not one.

    pandas' markers are recognised by type name, so pandas need not be installed.
    """
    if value is None:
        return "None"
    name = type(value).__name__
    if name == "NAType":
        return "pd.NA"
    if name == "NaTType" or (isinstance(value, (np.datetime64, np.timedelta64))
                             and bool(np.isnat(value))):
        return "NaT"
    try:
        if isinstance(value, (float, np.floating)) and bool(np.isnan(value)):
            return "NaN"
    except TypeError:  # pragma: no cover - exotic float subclasses
        pass
    return None


def _is_time(value) -> bool:
    """A date, time or duration (datetime, pandas Timestamp / Timedelta, numpy datetime64)."""
    return isinstance(value, (datetime.date, datetime.time, datetime.timedelta,
                              np.datetime64, np.timedelta64))


def _where(shape: tuple, flat_index: int) -> str:
    index = np.unravel_index(flat_index, shape)
    if len(index) == 2:
        return f"row {index[0]}, column {index[1]}"
    return f"row {index[0]}" if len(index) == 1 else "the scalar"


def _inexact_integer(name: str, value: int, where: str) -> str:
    try:
        read_as = f"it would be read as {float(value):.17g}, possibly merged with its neighbours"
    except OverflowError:
        read_as = "it is beyond float64's range"
    return (f"{name} holds the integer {value} ({where}), which float64 cannot represent "
            f"exactly: integers beyond 2**53 lose their low bits ({read_as}). Subtract an "
            "offset so the values fit in 53 bits, or convert them to float yourself if the "
            "rounding is acceptable.")


def _check_exact_integers(arr: np.ndarray, name: str) -> None:
    """Refuse a 64-bit integer array that float64 cannot hold exactly.

    Converting it would merge distinct values (2**62 + 1 and 2**62 become one float), so
    thresholds could no longer separate them and a claimed optimum would be wrong.
    """
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize < 8 or arr.size == 0:
        return  # int32 and narrower fit the 53-bit significand
    as_float = arr.astype(np.float64)
    # 2**63 (2**64 unsigned) is the first float past the type's range: it cannot cast back.
    top = 2.0 ** (64 if arr.dtype.kind == "u" else 63)
    in_range = (as_float < top) & (as_float >= -top)
    back = np.where(in_range, as_float, 0.0).astype(arr.dtype)
    inexact = ~in_range | (back != arr)
    if inexact.any():
        i = int(np.argmax(inexact.reshape(-1)))
        value = int(arr.reshape(-1)[i])
        raise ValueError(_inexact_integer(name, value, _where(arr.shape, i)))


def _object_problem(arr: np.ndarray, name: str, allow_missing: bool = False) -> str | None:
    """What makes an object array unfit for float64: the first missing marker, date or
    inexact integer, as a message; None when there is none (other values are left to
    the numeric conversion, whose error names them). `allow_missing`: None and pd.NA
    are missing values (read as NaN), not refused."""
    for i, value in enumerate(arr.reshape(-1).tolist()):
        marker = _missing_marker(value)
        if allow_missing and marker in ("None", "pd.NA"):
            continue
        if marker is not None and marker != "NaN":  # NaN is a float: the finite check names it
            return f"{name} contains missing values ({marker}) at {_where(arr.shape, i)}."
        if _is_time(value):
            return (f"{name} holds a date or time ({value!r}) at {_where(arr.shape, i)}; "
                    "convert it to numbers.")
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            try:
                exact = int(float(value)) == int(value)
            except OverflowError:  # beyond float64's range altogether
                exact = False
            if not exact:
                return _inexact_integer(name, int(value), _where(arr.shape, i))
    return None


def _as_float(arr: np.ndarray, name: str, allow_missing: bool = False) -> np.ndarray:
    """A numeric or object array as float64, refusing what float64 would misread
    (`allow_missing`: None and pd.NA become NaN)."""
    if arr.dtype.kind in "mM":
        kind = "timedelta" if arr.dtype.kind == "m" else "datetime"
        raise ValueError(f"{name} has {kind} dtype ({arr.dtype}); convert it to numbers.")
    if arr.dtype == object:
        problem = _object_problem(arr, name, allow_missing)
        if problem is not None:
            raise ValueError(problem)
        if allow_missing:
            missing = [_missing_marker(v) is not None for v in arr.reshape(-1).tolist()]
            if any(missing):
                arr = arr.copy()
                arr.reshape(-1)[np.asarray(missing)] = np.nan
        try:
            return arr.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} must be numeric; {_one_line(err)}.") from None
    if not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise ValueError(f"{name} must be numeric; got dtype {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name} must be real-valued; got complex numbers.")
    _check_exact_integers(arr, name)
    return arr.astype(np.float64)


def _is_frame(X) -> bool:
    """A pandas DataFrame (or alike): 2-D with per-column dtypes."""
    return getattr(X, "ndim", None) == 2 and hasattr(X, "dtypes") and hasattr(X, "iloc")


def _check_frame_columns(X, name: str, allow_missing: bool = False) -> None:
    """Refuse, naming the column, what converting a DataFrame to float64 would misread:
    datetime columns, missing values (pd.NA in nullable columns, NaN, None; unless
    `allow_missing`) and integers float64 cannot hold exactly (a frame of int and float
    columns converts to float64 silently)."""
    for j, (label, dtype) in enumerate(X.dtypes.items()):
        column = X.iloc[:, j]
        what = f"{name} column {label!r}"
        kind = getattr(dtype, "kind", "O")
        if kind in "mM" or str(dtype).startswith("period"):
            time_kind = "timedelta" if kind == "m" else "datetime"
            raise ValueError(f"{what} has {time_kind} dtype ({dtype}); convert it to numbers.")
        missing = np.asarray(column.isna(), dtype=bool)
        if missing.any() and not allow_missing:
            row = int(np.argmax(missing))
            marker = _missing_marker(column.iloc[row]) or "NaN"
            raise ValueError(f"{name} contains missing values ({marker}) in column {label!r} "
                             f"(first at row {row}).")
        if kind in "iu":
            present = column[~missing] if missing.any() else column  # pd.NA has no int64
            _check_exact_integers(present.to_numpy(dtype=np.uint64 if kind == "u" else np.int64),
                                  what)
        elif kind == "O":
            problem = _object_problem(column.to_numpy(dtype=object), what, allow_missing)
            if problem is not None:
                raise ValueError(problem)


def check_values(values, name: str, allow_missing: bool = False) -> None:
    """Refuse input that float64 would misread: dates, missing markers other than NaN
    (pd.NA, None, NaT; `allow_missing`: NaT only) and integers beyond float64's
    precision, with a message naming the value (and a DataFrame's column), as `solve`'s
    conversion does. For the estimators, before scikit-learn converts their input;
    other problems (strings, NaN) are left to that conversion, whose message names them."""
    if values is None:  # absent: the caller says so
        return
    if _is_frame(values):
        _check_frame_columns(values, name, allow_missing)
        return
    try:
        arr = np.asarray(values)
    except Exception:  # ragged lists and the like: the converter explains
        return
    if arr.dtype.kind in "mM":
        _as_float(arr, name)
    elif arr.dtype == object:
        problem = _object_problem(arr, name, allow_missing)
        if problem is not None:
            raise ValueError(problem)
    else:
        _check_exact_integers(arr, name)


def missing_as_nan(X):
    """Features with None and pd.NA in object arrays or object DataFrame columns as NaN,
    which scikit-learn's float64 conversion (for the estimators) does not read."""
    if _is_frame(X):
        columns = [j for j, dtype in enumerate(X.dtypes) if getattr(dtype, "kind", "O") == "O"]
        if columns and bool(X.iloc[:, columns].isna().to_numpy().any()):
            X = X.copy()
            for j in columns:
                X.iloc[:, j] = X.iloc[:, j].where(X.iloc[:, j].notna(), np.nan)
        return X
    if isinstance(X, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(X)
        except Exception:  # ragged lists and the like: the converter explains
            return X
        if arr.dtype == object:
            missing = np.array([_missing_marker(v) in ("None", "pd.NA")
                                for v in arr.reshape(-1).tolist()], dtype=bool)
            if missing.any():
                arr = arr.copy()
                arr.reshape(-1)[missing] = np.nan
                return arr
    return X


def check_task(task: str) -> Task:
    if not isinstance(task, str) or task not in TASKS:
        raise ValueError(f"Unknown task {task!r}: expected 'classification' or 'regression'.")
    return task  # type: ignore[return-value]


def as_feature_matrix(X) -> np.ndarray:
    """Validate features: a numeric, non-empty 2-D array of finite numbers or missing
    values (NaN; None and pd.NA are read as NaN), never infinite."""
    if _is_frame(X):  # its conversion to one array can be lossy: checked column by column
        _check_frame_columns(X, "X", allow_missing=True)
    try:
        arr = np.asarray(X)
    except Exception as err:  # ragged lists and the like
        raise ValueError(f"X could not be read as an array: {_one_line(err)}") from None
    arr = _as_float(arr, "X", allow_missing=True)
    if arr.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_samples, n_features); got shape {arr.shape}. "
            "Reshape a single feature with X.reshape(-1, 1)."
        )
    if arr.shape[0] == 0:
        raise ValueError("X is empty: it has 0 samples.")
    if arr.shape[1] == 0:
        raise ValueError("X has 0 features.")
    if np.isinf(arr).any():
        bad = np.argwhere(np.isinf(arr))[0]
        raise ValueError(
            f"X contains infinity (first at row {bad[0]}, column {bad[1]}); missing values "
            "may be NaN, other values must be finite."
        )
    return arr


def weight_values(sample_weight, n: int) -> np.ndarray:
    """`sample_weight` as float64 values, a scalar repeated n times.

    The one definition of which weight types are accepted, shared by `solve` and the
    estimators: numbers of any numeric dtype, object arrays of numbers, not missing
    markers, dates or integers float64 cannot hold exactly. Shape and values are
    checked by the callers.
    """
    w = np.asarray(sample_weight)
    if w.ndim == 0:
        w = np.full(n, w)
    return _as_float(w, "sample_weight")


def as_sample_weight(sample_weight, n: int) -> tuple[np.ndarray, bool]:
    """Validate weights; returns float64 weights and whether all are integers."""
    if sample_weight is None:
        return np.ones(n), True
    w = weight_values(sample_weight, n)
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"sample_weight must have shape ({n},); got {w.shape}.")
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight contains NaN or infinity.")
    if np.any(w < 0):
        raise ValueError("sample_weight must be non-negative.")
    if not np.any(w > 0):
        raise ValueError("sample_weight is zero everywhere: there is nothing to fit.")
    with np.errstate(over="ignore"):
        total = float(w.sum())
    if not np.isfinite(total):
        raise ValueError("sample_weight is too large: the weights sum to infinity.")
    integral = bool(np.all(w == np.round(w))) and float(w.sum()) < 2**30
    return w, integral


def encode_labels(y, n: int) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"Classification y must be 1-D; got shape {arr.shape}.")
    if arr.shape[0] != n:
        raise ValueError(f"X has {n} samples but y has {arr.shape[0]}.")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValueError("y contains NaN or infinity.")
    if arr.dtype.kind == "c":
        raise ValueError("Classification labels must not be complex numbers.")
    fractional = arr != np.round(arr) if arr.dtype.kind == "f" else None
    if fractional is not None and fractional.any():
        # scikit-learn's classifiers refuse these too ("continuous" targets): every
        # distinct value would be a class, and tables grow with the classes
        i = int(np.argmax(fractional))
        raise ValueError(f"Classification labels in y are continuous (non-integer floats, "
                         f"e.g. {float(arr[i])!r} at row {i}): use task='regression', or give the "
                         "classes as integers or strings.")
    if arr.dtype == object:
        markers = [_missing_marker(v) for v in arr.tolist()]
        found = next((m for m in markers if m is not None), None)
        if found is not None:
            raise ValueError(f"y contains a missing label ({found} at row "
                             f"{markers.index(found)}): NaN, None and pd.NA are not allowed.")
    if arr.dtype.kind in "iu" and arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if hi - lo <= 4 * arr.size and hi < 2**63:
            # integer labels of a bounded range: np.unique's classes and codes by
            # counting, without its sort
            shifted = arr.astype(np.int64) - lo
            present = np.bincount(shifted) > 0
            classes = (np.flatnonzero(present) + lo).astype(arr.dtype)
            return classes, (np.cumsum(present) - 1)[shifted]
    try:
        classes, codes = np.unique(arr, return_inverse=True)
    except TypeError as err:
        raise ValueError(f"Labels in y cannot be sorted: {err}") from None
    return classes, codes.reshape(-1).astype(np.int64)


def as_targets(y, n: int) -> np.ndarray:
    if _is_frame(y):
        _check_frame_columns(y, "y")
    arr = _as_float(np.asarray(y), "y")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"Regression y must be (n,) or (n, m); got shape {arr.shape}.")
    if arr.shape[0] != n:
        raise ValueError(f"X has {n} samples but y has {arr.shape[0]}.")
    if arr.shape[1] == 0:
        raise ValueError("Regression y has 0 target columns.")
    if not np.all(np.isfinite(arr)):
        raise ValueError("y contains NaN or infinity.")
    return arr


def make_problem(X, y, *, task: str, sample_weight=None, merge_repeats: bool = False
                 ) -> Problem:
    """Validate inputs and build the presorted arrays of docs/design.md, "Problem and data layout".

    Inputs float64 cannot hold well enough to prove an optimum are refused, naming
    sample_weight or y (the safe range). Regression: |y - mean| at most 2**500
    (~3.3e150); sum w (y - mean)**2 between n * 2**-1000 (~n * 9.3e-302) and 2**1000
    (~1.1e301); the weighted mean of (y - mean)**2 above 2**-1000; every positive weight
    above n * 2**-52 of their total. Inside the range, weights and targets are rescaled by powers of
    two for the search (`Problem.weight_exponent`), so any overall scale works.
    Fractional class weights: their total between n * 2**-1000 and 2**1000. Integers
    (X, y, sample_weight) must be exact in float64 (|v| <= 2**53, or fewer
    significant bits). Missing values (NaN) in X: each column with NaN becomes two
    virtual features (`_problem/missing.py`), chosen from X alone, whatever the weights.

    `merge_repeats`: classification with integer weights and no missing value, rows of
    equal features and class become one row of their summed weight
    (`_problem/duplicates.py`; the same optimum, shorter sweeps). Callers that
    count rows (leaf limits) or index the problem's rows by the caller's keep it off.
    """
    task = check_task(task)
    X, missing = virtual_features(as_feature_matrix(X))
    n_all = X.shape[0]
    w, integral = as_sample_weight(sample_weight, n_all)
    if task == "classification":
        classes, codes = encode_labels(y, n_all)
        y_enc: np.ndarray = codes
    else:
        classes = None
        y_enc = as_targets(y, n_all)
    keep = w > 0
    return _presorted_problem(task, X[keep], y_enc[keep], w[keep], integral, classes,
                              missing, merge_repeats)


def _presorted_problem(task: Task, X: np.ndarray, y_enc: np.ndarray, w: np.ndarray,
                       integral: bool, classes: np.ndarray | None,
                       missing: MissingColumns | None, merge_repeats: bool) -> Problem:
    """`make_problem` of validated rows of positive weight (`y_enc`: class codes into
    `classes`, or targets)."""
    n = X.shape[0]
    exponents = (0, 0)
    offset = None
    if task == "classification":
        onehot = np.zeros((n, len(classes)), dtype=np.float64)
        onehot[np.arange(n), y_enc] = 1.0
        if integral:
            stats = (onehot * w[:, None]).astype(np.int32)
            loss_kind: LossKind = "count"
        else:
            _check_class_weight_range(w)
            stats = onehot * w[:, None]
            loss_kind = "weighted"
        slack = sample_slack(task, y_enc, w)
    else:
        setup = sse_setup(y_enc, w[None])
        y_enc, offset, stats, slack = (setup.centred[0], setup.offset[0], setup.stats[0],
                                       setup.slack[0])
        exponents = (int(setup.weight_exponent[0]), int(setup.target_exponent[0]))
        loss_kind = "sse"

    perm, changes = stable_order(X.T)
    rank, value_rank, cut_valid, cut_pos, n_thresholds, slack_left = _presorted(
        perm, changes, slack, threaded=True
    )
    if merge_repeats and loss_kind == "count" and missing is None:
        groups = repeated_row_groups(value_rank, changes, y_enc)
        if groups is not None:
            first, group = groups
            merged_weight = np.bincount(group, weights=w, minlength=len(first))  # integers
            return _presorted_problem(task, X[first], y_enc[first], merged_weight, integral,
                                      classes, missing, merge_repeats=False)
    return Problem(
        task=task,
        loss_kind=loss_kind,
        X=X,
        stats=stats,
        perm=perm,
        rank=rank,
        value_rank=value_rank,
        cut_valid=cut_valid,
        cut_pos=cut_pos,
        n_thresholds=n_thresholds,
        slack_left=slack_left,
        classes=classes,
        y_offset=offset,
        y=y_enc,
        weight=w,
        weight_exponent=exponents[0],
        target_exponent=exponents[1],
        missing=missing,
    )


def _check_class_weight_range(w: np.ndarray) -> None:
    """Fractional class weights: losses are sums of weights, exact to a relative
    rounding unless the total is so small that subnormal round-off (halving a sum of
    subnormal weights) approaches the pruning tolerance, or so large that a sum of
    losses overflows."""
    total, smallest = float(w.sum()), len(w) * SAFE_MIN
    if total > SAFE_MAX:
        raise ValueError(
            f"sample_weight is too large: the weights sum to {total:.3g}, above the safe "
            "float64 limit 2**1000 (about 1.1e301). Divide sample_weight by a constant; "
            "the optimal tree does not change.")
    if total < smallest:
        raise ValueError(
            f"sample_weight is too small: the weights sum to {total:.3g}, below the safe "
            f"float64 limit n * 2**-1000 (about {smallest:.2g}), where float64 cannot prove "
            "a tree optimal. Multiply sample_weight by a constant; the optimal tree does "
            "not change.")


def sample_slack(task: str, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`(n,)`: how much adding each sample to any set can raise its best loss, at most.

    The best tree of a set plus sample i is no worse than the set's best tree with i
    added to the leaf it reaches, which costs at most: classification, its weight;
    squared error, `w_i W / (W + w_i) |y_i - mu|^2 <= w_i |y_i - mu|^2` for a leaf of
    weight W and mean mu, and mu lies in the targets' bounding box, so at most w_i
    times the largest squared distance from y_i to a corner of the box. Summed over
    the samples that change sides when a cut moves, this bounds how much each side's
    best loss can change (the slack bound of `_search/depth2.py` and `_search/deep.py`).
    """
    if task == "classification" or len(w) == 0:
        return w
    lo, hi = y.min(axis=0), y.max(axis=0)
    return w * np.maximum((y - lo) ** 2, (y - hi) ** 2).sum(axis=1)


class SortedSamples(NamedTuple):
    """A problem's positive-weight samples in each feature's order, with the per-sample
    values a subset's tables take in that order (`compact_sides`): computed once per
    problem, so that a subset takes entries of these rows (one list of positions
    serves them all) instead of gathering each through `perm`."""

    problem: Problem
    positive: np.ndarray  # bool (n,): weight > 0
    perm: np.ndarray  # int32 (p, n+): the positive samples in each feature's order
    value_rank: np.ndarray  # int32 (p, n+): their `value_rank` in that order
    # (p, n+): their `sample_slack` in that order where it is the sample's own
    # (classification), int64 where every one is an integer (then summed in integers:
    # the same float64 sums below 2**53); None: it depends on the subset (regression)
    slack: np.ndarray | None
    unit_slack: bool  # every positive sample's slack is 1: a sum of slack is a count
    signed: np.ndarray | None  # int32 (p, n+): two-class counts, class 1 minus class 0
    # int32 (p, n + 1): positive samples before each position of each feature's order
    # (`problem.perm`'s positions): the n of the subset left of a cut, without compacting
    positive_before: np.ndarray


def sorted_samples(problem: Problem) -> SortedSamples:
    """`problem`'s `SortedSamples`."""
    positive = problem.weight > 0
    perm = problem.perm[positive[problem.perm]].reshape(problem.p, -1)
    value_rank = np.take_along_axis(problem.value_rank, perm, axis=1)
    slack, unit, signed = None, False, None
    if problem.task == "classification":
        own = problem.search_slack(np.flatnonzero(positive))
        unit = bool(np.all(own == 1.0))
        if np.all(own == np.round(own)) and float(own.sum()) < 2.0**53:
            own = own.astype(np.int64)
        slack = np.zeros(problem.n, dtype=own.dtype)
        slack[positive] = own
        slack = slack[perm]
    if problem.loss_kind == "count" and problem.n_channels == 2:
        signed = (problem.stats[:, 1] - problem.stats[:, 0])[perm]
    positive_before = np.zeros((problem.p, problem.n + 1), dtype=np.int32)
    np.cumsum(positive[problem.perm], axis=1, out=positive_before[:, 1:])
    return SortedSamples(problem, positive, perm, value_rank, slack, unit, signed,
                         positive_before)


def compact_many(problems: list[Problem], masks: list[np.ndarray]) -> list[Problem]:
    """`[problem.compact(mask) for ...]`, equal array for array, for many subsets at once
    (`compact_sides` without sorted samples kept from call to call)."""
    return compact_sides([sorted_samples(pr) for pr in problems], masks).problems


class CompactedSide(Problem):
    """A `compact_sides` subset whose `X`, `y` and `stats` rows are taken from its
    parent when first read (then kept): equal to `Problem.compact`'s, field for field.
    A lockstep round's sides are searched on their tables alone (two-class counts:
    `CompactSides.signed` and `sample_signed` give the sweeps' stat tables), and their
    trees built from a side compacted again (`deep_batch.lasting_splits`), so most
    never read them; taking X's rows was a sixth of a side's compaction."""

    @property
    def n(self) -> int:
        return int(self.weight.shape[0])

    @property
    def p(self) -> int:
        return int(self.perm.shape[0])

    @property
    def n_channels(self) -> int:
        return int(self.__dict__["_rows"][0].n_channels)

    @property
    def parent_ids(self) -> np.ndarray:
        """`(n,)`: each sample's index in the parent problem."""
        return self.__dict__["_rows"][1]

    def __getattr__(self, name: str):  # only for attributes not in the instance
        if name in ("X", "y", "stats"):
            parent, idx = self.__dict__["_rows"]
            value = getattr(parent, name).take(idx, axis=0)
            self.__dict__[name] = value
            return value
        raise AttributeError(name)


class CompactSides(NamedTuple):
    """Subsets compacted together (`compact_sides`): the problems, and the tables they
    hold views of, padded to the largest subset's n, `M`."""

    problems: list[Problem]
    cut_pos: np.ndarray  # int32 (B, p, M + 1): past its u(f), a subset's own n
    slack_left: np.ndarray  # float64 (B, p, M + 1): past its u(f), a subset's total
    n_thresholds: np.ndarray  # int32 (B, p)
    cut_valid: np.ndarray  # bool (B, p, M + 1): False past a subset's own n
    # int32 (B, p, M): two-class counts' signed count in each feature's order, zero past
    # a subset's own n; None unless every source has them
    signed: np.ndarray | None
    # int32 (B, M): the signed counts in sample order (the subsets' `stats[:, 1] -
    # stats[:, 0]`), zero past a subset's own n; None with `signed`
    sample_signed: np.ndarray | None
    # int32 (B, p, M): the subsets' orders and ranks; past a subset's own n, padding
    # samples (their own ids) in `perm` and `rank`, and `value_rank` unspecified
    perm: np.ndarray
    rank: np.ndarray
    value_rank: np.ndarray
    sizes: np.ndarray  # int64 (B,): each subset's n
    # every kept sample's weight is 1 (classification, `SortedSamples.unit_slack`), and
    # so are its stats' sums
    unit_weight: bool = False


def compact_sides(sources: list[SortedSamples], masks: list[np.ndarray]) -> CompactSides:
    """`source.problem.compact(mask)` of each subset, equal array for array, computed
    together (every problem has the same p).

    A subset's samples in each feature's order are the entries of its problem's
    `SortedSamples` rows at one list of positions, which gives its order, value ranks
    (and so its valid cuts), slack and signed counts. Its ranks and threshold tables
    are computed for all subsets at once, on arrays padded to the largest: a handful
    of numpy calls for all instead of a few dozen per subset (the sides of a lockstep
    round, `_search/deep_batch.py`, are hundreds of similar sizes). Padding positions
    hold padding samples (their own ids) with no valid cut and zero slack, so no real
    entry depends on them.
    """
    B, p = len(sources), sources[0].problem.p
    keeps = [mask & src.positive for src, mask in zip(sources, masks)]
    idxs = [np.flatnonzero(keep) for keep in keeps]
    sizes = np.array([len(idx) for idx in idxs], dtype=np.int64)
    M = int(sizes.max(initial=0))
    perm = np.broadcast_to(np.arange(M, dtype=np.int32), (B, p, M)).copy()
    cut_valid = np.zeros((B, p, M + 1), dtype=bool)
    cut_valid[:, :, 0] = True
    if all(src.unit_slack for src in sources):
        slack_kind = "count"
    elif any(src.slack is None for src in sources):
        slack_kind = "subset"
        slack = np.zeros((B, M))
    else:
        dtypes = {src.slack.dtype for src in sources}
        slack_kind = "sorted"
        cum = np.zeros((B, p, M + 1), dtype=np.float64 if len(dtypes) > 1 else dtypes.pop())
    with_signed = all(src.signed is not None for src in sources)
    signed = np.zeros((B, p, M), dtype=np.int32) if with_signed else None
    for b, (src, keep, idx) in enumerate(zip(sources, keeps, idxs)):
        m = len(idx)
        new_id = np.cumsum(keep, dtype=np.int32)  # kept sample i -> new_id[i] - 1
        new_id -= 1
        at = np.flatnonzero(keep.take(src.perm))  # each row keeps m samples
        perm[b, :, :m] = new_id.take(src.perm.take(at)).reshape(p, m)
        vr = src.value_rank.take(at).reshape(p, m)
        np.not_equal(vr[:, 1:], vr[:, :-1], out=cut_valid[b, :, 1:m])
        if slack_kind == "subset":
            slack[b, :m] = src.problem.search_slack(idx)
        elif slack_kind == "sorted":
            np.cumsum(src.slack.take(at).reshape(p, m), axis=-1, out=cum[b, :, 1 : m + 1])
            cum[b, :, m + 1 :] = cum[b, :, m : m + 1]
        if with_signed:
            signed[b, :, :m] = src.signed.take(at).reshape(p, m)
    # each (side, feature) row of perm is a permutation of 0..M-1: flat scatters
    flat = (perm + (np.arange(B * p, dtype=np.int32) * M).reshape(B, p, 1)).reshape(-1)
    rank = np.empty((B, p, M), dtype=np.int32)
    rank.reshape(-1)[flat] = np.tile(np.arange(M, dtype=np.int32), B * p)
    dense_sorted = np.cumsum(cut_valid[..., :M], axis=-1, dtype=np.int32)  # 1 at position 0
    dense_sorted -= 1
    value_rank = np.empty((B, p, M), dtype=np.int32)
    value_rank.reshape(-1)[flat] = dense_sorted.reshape(-1)
    cut_pos = np.empty((B, p, M + 1), dtype=np.int32)
    n_thresholds = _cut_positions(cut_valid[..., 1:M], cut_pos).astype(np.int32)
    # past its u(f) a subset's entries are its own n (the padded fill is M; the slack
    # there is its total either way: padding adds none)
    if slack_kind == "count":  # the slack left of a cut is the number of samples
        slack_left = cut_pos.astype(np.float64)
    else:
        if slack_kind == "subset":
            cum = np.zeros((B, p, M + 1))
            np.cumsum(slack[np.arange(B)[:, None, None], perm], axis=-1, out=cum[..., 1:])
        slack_left = _left_sums(cum, cut_pos).astype(np.float64, copy=False)
    np.minimum(cut_pos, sizes.astype(np.int32)[:, None, None], out=cut_pos)
    if slack_kind == "count":
        np.minimum(slack_left, sizes[:, None, None], out=slack_left)
    # Copies of the (frozen) problems' fields, made without `dataclasses.replace`, whose
    # __init__ costs as much as a side's compaction takes (as `Problem.reweighted`).
    problems = []
    for b, (src, idx, m) in enumerate(zip(sources, idxs, sizes.tolist())):
        parent = src.problem
        problem = object.__new__(CompactedSide)
        problem.__dict__.update(
            parent.__dict__, perm=perm[b, :, :m], rank=rank[b, :, :m],
            value_rank=value_rank[b, :, :m],
            cut_valid=cut_valid[b, :, : m + 1], cut_pos=cut_pos[b, :, : m + 1],
            n_thresholds=n_thresholds[b], slack_left=slack_left[b, :, : m + 1],
            weight=parent.weight.take(idx), _rows=(parent, idx))
        del problem.__dict__["X"], problem.__dict__["y"], problem.__dict__["stats"]
        problems.append(problem)
    sample_signed = None
    if with_signed:  # feature 0's order holds every sample once (padding: zero, own ids)
        sample_signed = np.empty((B, M), dtype=np.int32)
        at = perm[:, 0] + (np.arange(B, dtype=np.int32) * M)[:, None]
        sample_signed.reshape(-1)[at.reshape(-1)] = signed[:, 0].reshape(-1)
    return CompactSides(problems, cut_pos, slack_left, n_thresholds, cut_valid, signed,
                        sample_signed, perm, rank, value_rank, sizes, slack_kind == "count")


# Rows sort by the default sort of unique keys (`_stable_order_keys`): on fresh copies
# of normal, rounded and integer-valued columns of 2,000 to 10^6 samples the keys took
# 0.3 to 0.55 of numpy's stable argsort's time (a merge sort for floats): 22 against
# 41 ms at 53,940 x 7, 270 against 560 ms at 10^6 x 3 (normal values).
# Rows whose neighbours descend at fewer than this share of positions (sorted
# runs, as timestamps make, or few distinct values, as integer codes make) go to the
# stable argsort after all: its merge sort finds the runs, and such rows cost the keys'
# first sort up to 7x more. A row in random order of D distinct values descends at a
# share of about (1 - 1/D) / 2. Measured on fresh (rotated) copies of each dataset's
# columns, since a sort repeated on one array runs faster as the branch predictor
# learns it: bidding 4.2 -> 2.1 ms, occupancy 3.1 -> 1.5 ms, segment 1.5 -> 1.3 ms;
# the rows of htru, magic, bean and wilt descend at about half their positions and
# keep the keys.
RUN_SORT_DESCENTS = 0.46
# Orders of at least this many entries are sorted a block of features per thread
# (numpy's sorts release the GIL): on two cores page's (4,378 x 10) took half the time;
# below, the threads' hand-off costs about what they save.
THREADED_SORT_FROM = 1 << 14


def stable_order(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's stable ascending order (ties by index) of `columns` `(p, n)` (no NaN), as
    `(perm int32 (p, n), changes (p, n-1))`; `changes[f, k]`: the (k+1)-th sample of f's
    order has a larger value than the k-th. The same result as
    `np.argsort(kind="stable")`, faster on the threads of `run_all`."""
    p, n = columns.shape
    if not _threads_pay(p, n):
        return _stable_order_block(columns)
    out = (np.empty((p, n), dtype=np.int32), np.empty((p, max(n - 1, 0)), dtype=bool))
    return _by_feature_blocks(lambda rows: _stable_order_block(columns[rows]), out)


def _threads_pay(p: int, n: int) -> bool:
    """Whether per-feature host work on `(p, n)` is split over the threads."""
    return min(THREADS, p) >= 2 and p * n >= THREADED_SORT_FROM


def _by_feature_blocks(compute, out: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """`out` filled a block of features (leading rows) per thread of `run_all`:
    `compute(rows)` returns the block's part of each array of `out`."""
    p = len(out[0])
    edges = np.linspace(0, p, min(THREADS, p) + 1).astype(int)

    def fill(b: int) -> None:
        rows = slice(edges[b], edges[b + 1])
        for table, part in zip(out, compute(rows)):
            table[rows] = part

    run_all(fill, range(len(edges) - 1))
    return out


def _stable_order_block(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`stable_order` of one block of rows: by the keys, except the rows of few
    descents (`RUN_SORT_DESCENTS`), by the stable argsort."""
    p, n = columns.shape
    runs = (np.count_nonzero(columns[:, 1:] < columns[:, :-1], axis=1)
            < RUN_SORT_DESCENTS * n)
    if not runs.any():
        return _stable_order_keys(columns)
    if runs.all():
        return _stable_order_argsort(columns)
    perm = np.empty((p, n), dtype=np.int32)
    changes = np.empty((p, max(n - 1, 0)), dtype=bool)
    for rows, sort in ((runs, _stable_order_argsort), (~runs, _stable_order_keys)):
        perm[rows], changes[rows] = sort(columns[rows])
    return perm, changes


def _stable_order_argsort(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`stable_order` of one block of features by numpy's stable argsort."""
    order = np.argsort(columns, axis=1, kind="stable")
    values = np.take_along_axis(columns, order, axis=1)
    return order.astype(np.int32, copy=False), values[:, 1:] > values[:, :-1]


def _stable_order_keys(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`stable_order` of one block of features by numpy's default sort, faster on short
    rows: the default sort orders the values (ties in any order); then the keys
    `run * n + index` (`run`: the rank of the sample's value among the distinct values)
    are unique, so any sort orders them as the stable sort does.
    """
    p, n = columns.shape
    order = np.argsort(columns, axis=1)
    values = np.take_along_axis(columns, order, axis=1)
    changes = values[:, 1:] > values[:, :-1]
    dtype = np.int32 if n * n <= 2**31 else np.int64  # keys below n * n; int32 sorts faster
    run = np.zeros((p, n), dtype=dtype)
    np.cumsum(changes, axis=1, out=run[:, 1:])
    run *= n
    key = run + order.astype(dtype, copy=False)
    key.sort(axis=1)
    key -= run  # the sort keeps each position's run: runs are ascending
    return key.astype(np.int32, copy=False), changes


def _presorted(perm: np.ndarray, changes: np.ndarray, slack: np.ndarray,
               threaded: bool = False):
    """Orders and threshold tables from each feature's sorted order `perm` `(p, n)`.

    `changes[f, k]`: the (k+1)-th sample of f's order has a larger value than the k-th;
    `slack`: `sample_slack` of each sample.
    Returns `(rank, value_rank, cut_valid, cut_pos, n_thresholds, slack_left)`, each
    feature's rows computed alone; `threaded`: a block of features per thread of
    `run_all`, as `stable_order`.
    """
    p, n = perm.shape
    if not (threaded and _threads_pay(p, n)):
        return _presorted_block(perm, changes, slack)
    out = (np.empty((p, n), np.int32), np.empty((p, n), np.int32),
           np.empty((p, n + 1), bool), np.empty((p, n + 1), np.int32),
           np.empty(p, np.int32), np.empty((p, n + 1)))
    return _by_feature_blocks(
        lambda rows: _presorted_block(perm[rows], changes[rows], slack), out)


def _presorted_block(perm: np.ndarray, changes: np.ndarray, slack: np.ndarray):
    """`_presorted` of a block of features."""
    p, n = perm.shape
    rank = np.empty_like(perm)
    rows = np.arange(p)[:, None]
    rank[rows, perm] = np.arange(n, dtype=np.int32)[None, :]
    cut_valid = np.zeros((p, n + 1), dtype=bool)
    cut_valid[:, 0] = True
    cut_valid[:, 1:n] = changes
    dense_sorted = np.concatenate(
        [np.zeros((p, 1), dtype=np.int32), np.cumsum(changes, axis=1, dtype=np.int32)], axis=1
    )
    value_rank = np.empty_like(perm)
    value_rank[rows, perm] = dense_sorted
    cut_pos, n_thresholds, slack_left = _threshold_tables(cut_valid, perm, slack)
    return rank, value_rank, cut_valid, cut_pos, n_thresholds, slack_left


def _threshold_tables(cut_valid: np.ndarray, perm: np.ndarray, w: np.ndarray):
    """`(cut_pos, n_thresholds, left sums of w)` from the valid cuts `(p, n+1)`."""
    p, n = perm.shape
    cut_pos = np.empty((p, n + 1), dtype=np.int32)
    if np.all(w == 1.0):  # unit slack (unweighted classification): the sums are positions
        n_thresholds = _cut_positions(cut_valid[:, 1:n], cut_pos)
        return cut_pos, n_thresholds.astype(np.int32), cut_pos.astype(np.float64)
    cum_weight = np.zeros((p, n + 1))  # in each feature's order
    np.cumsum(w[perm], axis=1, out=cum_weight[:, 1:])
    slack_left = np.empty((p, n + 1))
    n_thresholds = _cut_tables(cut_valid[:, 1:n], cum_weight, cut_pos, slack_left)
    return cut_pos, n_thresholds.astype(np.int32), slack_left


def class_count_losses(ordered: np.ndarray) -> np.ndarray:
    """Stump losses `(B, ..., n + 1)` of integer class counts `ordered` `(B, C, ..., n)`,
    in sorted order along the last axis: as `split_losses`, the same numbers.

    A stump's loss is `T - max_c left_c - max_c right_c`: integer prefix sums, channels
    outermost, so that the maxima over classes are element-wise over whole rows (numpy
    reduces a short last axis slowly) and the sums are half as wide as float64's.
    """
    B, C, *rest, n = ordered.shape
    left = np.zeros((B, C, *rest, n + 1), dtype=ordered.dtype)
    np.cumsum(ordered, axis=-1, out=left[..., 1:])
    best = left[:, 0].copy()  # (B, ..., n + 1): largest class count left of each cut
    best_right = left[:, 0, ..., -1:] - left[:, 0]
    for c in range(1, C):
        np.maximum(best, left[:, c], out=best)
        np.maximum(best_right, left[:, c, ..., -1:] - left[:, c], out=best_right)
    total = left[:, 0, ..., -1:].copy()  # (B, ..., 1): every order sums all
    for c in range(1, C):
        total += left[:, c, ..., -1:]
    best += best_right
    np.subtract(total, best, out=best)
    return best  # integers: `valid_argmin` takes them without a float copy


def valid_argmin(loss: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position of the least integer `loss` among the `valid` cuts of the last axis (the
    first on ties, as an argmin of float losses with inf at invalid cuts; cut 0 is
    always valid) and that loss as float64."""
    at = np.argmin(np.where(valid, loss, np.iinfo(loss.dtype).max), axis=-1)
    return at, np.take_along_axis(loss, at[..., None], axis=-1)[..., 0].astype(np.float64)


def two_class_stumps(signed: np.ndarray, valid: np.ndarray, total: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Best stump per (problem, feature) of a sample set: `(losses, positions)`.

    `signed` `(B, p, n)`: the set's signed counts in each feature's order (0 outside
    it); `valid` `(B, p, n+1)`: the problem's `cut_valid`; `total` `(B,)`: the set's
    weight, or any bound of it (it only sizes the integers) when the losses are not
    used. The loss of the cut before position k is (T - |d_k| - |D - d_k|) / 2 with d
    the prefix sums (`host.split_losses`), so the best stump is the first largest
    |d| + |D - d| among the valid positions: `host.stump_losses`' losses and
    tie-break, in integers.
    """
    B, p, n = signed.shape
    # |d| + |D - d| + 1 <= 2 total + 1 fits int16 below 2**14: half the memory traffic
    dtype = np.int16 if 2 * int(total.max(initial=0)) + 1 < 2**15 else np.int64
    d = np.zeros((B, p, n + 1), dtype=dtype)
    np.cumsum(signed, axis=2, out=d[..., 1:])
    score = np.abs(d)
    np.subtract(d[..., -1:], d, out=d)
    score += np.abs(d, out=d)
    score += 1
    score *= valid  # invalid positions score 0, below every valid one
    position = score.argmax(axis=2)
    best = np.take_along_axis(score, position[..., None], axis=2)[..., 0].astype(np.int64) - 1
    return (total[:, None] - best) / 2.0, position


def _cut_tables(valid: np.ndarray, cum: np.ndarray, cut_pos: np.ndarray,
                slack_left: np.ndarray) -> np.ndarray:
    """Fill `cut_pos` and `slack_left` `(..., n+1)` (C-contiguous); return each row's u(f).

    `valid[..., k - 1]`: a cut before sorted position k (1..n-1) is valid; `cum`
    `(..., n+1)`: the summed slack before each position. See `_cut_positions`.
    """
    counts = _cut_positions(valid, cut_pos)
    _left_sums(cum, cut_pos, out=slack_left)
    return counts


def _cut_positions(valid: np.ndarray, cut_pos: np.ndarray) -> np.ndarray:
    """Fill `cut_pos` `(..., n+1)` (C-contiguous) from the valid cuts `valid`
    `(..., n-1)`; return each row's u(f).

    Threshold index t in 0..u(f): t=0 sends nothing left, t=u(f) everything (and so do
    the entries past it); in between, the cut at the t-th valid position. The valid
    positions, row by row in order (`flatnonzero`, less each row's offset), fill each
    row's first u(f) - 1 entries in the same order (a boolean mask): 2x faster than a
    stable sort of the flags.
    """
    n = cut_pos.shape[-1] - 1
    counts = valid.sum(axis=-1)
    cut_pos[..., 0] = 0
    cut_pos[..., 1:] = n
    if n > 1:
        row_start = np.arange(counts.size) * (n - 1) - 1  # flat index of position 0
        cut_pos[..., 1:n][np.arange(n - 1) < counts[..., None]] = (
            np.flatnonzero(valid) - np.repeat(row_start, counts.reshape(-1)))
    return counts + 1


def _left_sums(cum: np.ndarray, cut_pos: np.ndarray, out: np.ndarray | None = None
               ) -> np.ndarray:
    """`cum[..., cut_pos]` row by row (`cum` and `cut_pos` `(..., n+1)`, C-contiguous),
    into `out` (default: a new array of `cum`'s dtype)."""
    n = cut_pos.shape[-1] - 1
    rows = cut_pos.reshape(-1, n + 1)
    at = rows + (np.arange(len(rows)) * (n + 1))[:, None]
    if out is None:
        out = np.empty(cut_pos.shape, dtype=cum.dtype)
    np.take(cum.reshape(-1), at, out=out.reshape(-1, n + 1))
    return out
