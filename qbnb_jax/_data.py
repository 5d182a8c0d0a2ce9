"""Host-side preprocessing: validation, per-sample stat vectors and presorted orders.

Everything here is numpy. The solver turns a problem into one `Problem` per fit; the
device kernels only read the arrays it holds (DESIGN.md section 2).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, NamedTuple

import numpy as np

from ._parallel import run_all

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
    # two-class `reweighted` problems: `_host.stump_losses` of all samples, (P, p) each
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
            perm, vr[:, 1:] != vr[:, :-1], sample_slack(self.task, self.y[idx], w)
        )
        return dataclasses.replace(
            self, X=self.X[idx], stats=self.stats[idx], perm=perm, rank=rank,
            value_rank=value_rank, cut_valid=cut_valid, cut_pos=cut_pos,
            n_thresholds=n_thresholds, slack_left=slack_left, y=self.y[idx], weight=w,
        )

    def reweighted(self, weights: np.ndarray, block: int = 16, *,
                   signed_out: np.ndarray | None = None, mass_out: np.ndarray | None = None
                   ) -> tuple[list[Problem], ThresholdTables]:
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
        With `signed_out` the tables also carry each problem's best stumps.
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
        total = weights.sum(axis=1).max(initial=0)
        counts_dtype = np.int32 if total < 2**31 else np.int64
        slack_left = np.empty((P, p, n + 1), dtype=np.int16 if total < 2**15 else counts_dtype)
        integral = weights.astype(counts_dtype)
        stump_loss = stump_position = None
        if signed_out is not None:
            stump_loss = np.empty((P, p))
            stump_position = np.empty((P, p), dtype=np.int64)
        stats = np.multiply(self.stats[None], integral[:, :, None], dtype=np.int32,
                            casting="unsafe")  # counts below 2**31 (`counts_dtype`)
        if signed_out is not None:  # +1 for class 1, -1 for class 0, in each feature's order
            signed_sorted = (self.stats[:, 1] - self.stats[:, 0])[self.perm]

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


def _is_missing(value) -> bool:
    """None or a float NaN (the missing-value markers of object arrays)."""
    if value is None:
        return True
    try:
        return isinstance(value, (float, np.floating)) and bool(np.isnan(value))
    except TypeError:  # pragma: no cover - exotic float subclasses
        return False


def check_task(task: str) -> Task:
    if not isinstance(task, str) or task not in TASKS:
        raise ValueError(f"Unknown task {task!r}: expected 'classification' or 'regression'.")
    return task  # type: ignore[return-value]


def as_feature_matrix(X) -> np.ndarray:
    """Validate features: a finite, numeric, non-empty 2-D array."""
    try:
        arr = np.asarray(X)
    except Exception as err:  # ragged lists and the like
        raise ValueError(f"X could not be read as an array: {_one_line(err)}") from None
    if arr.dtype == object:  # e.g. lists mixing ints and floats, pandas nullable columns
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"X must be numeric; {_one_line(err)}.") from None
    if not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise ValueError(f"X must be numeric; got dtype {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError("X must be real-valued; got complex numbers.")
    if arr.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_samples, n_features); got shape {arr.shape}. "
            "Reshape a single feature with X.reshape(-1, 1)."
        )
    if arr.shape[0] == 0:
        raise ValueError("X is empty: it has 0 samples.")
    if arr.shape[1] == 0:
        raise ValueError("X has 0 features.")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(
            f"X contains NaN or infinity (first at row {bad[0]}, column {bad[1]})."
        )
    return arr


def as_sample_weight(sample_weight, n: int) -> tuple[np.ndarray, bool]:
    """Validate weights; returns float64 weights and whether all are integers."""
    if sample_weight is None:
        return np.ones(n), True
    w = np.asarray(sample_weight)
    if w.dtype == object:
        try:
            w = w.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"sample_weight must be numeric; {_one_line(err)}.") from None
    if not (np.issubdtype(w.dtype, np.number) or np.issubdtype(w.dtype, np.bool_)):
        raise ValueError(f"sample_weight must be numeric; got dtype {w.dtype}.")
    if np.issubdtype(w.dtype, np.complexfloating):
        raise ValueError("sample_weight must be real-valued; got complex numbers.")
    w = w.astype(np.float64)
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
    if arr.dtype == object and any(_is_missing(v) for v in arr.tolist()):
        raise ValueError("y contains NaN or None (missing labels are not allowed).")
    try:
        classes, codes = np.unique(arr, return_inverse=True)
    except TypeError as err:
        raise ValueError(f"Labels in y cannot be sorted: {err}") from None
    return classes, codes.reshape(-1).astype(np.int64)


def as_targets(y, n: int) -> np.ndarray:
    arr = np.asarray(y)
    if arr.dtype == object:
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"Regression y must be numeric; {_one_line(err)}.") from None
    if not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise ValueError(f"Regression y must be numeric; got dtype {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError("Regression y must be real-valued; got complex numbers.")
    arr = arr.astype(np.float64)
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


def make_problem(X, y, *, task: str, sample_weight=None) -> Problem:
    """Validate inputs and build the presorted arrays of DESIGN.md section 2."""
    task = check_task(task)
    X = as_feature_matrix(X)
    n_all = X.shape[0]
    w, integral = as_sample_weight(sample_weight, n_all)
    if task == "classification":
        classes, codes = encode_labels(y, n_all)
        y_enc: np.ndarray = codes
        offset = None
    else:
        classes = None
        y_enc = as_targets(y, n_all)
    keep = w > 0
    X, w, y_enc = X[keep], w[keep], y_enc[keep]
    n, p = X.shape

    if task == "classification":
        n_classes = len(classes)
        onehot = np.zeros((n, n_classes), dtype=np.float64)
        onehot[np.arange(n), y_enc] = 1.0
        if integral:
            stats = (onehot * w[:, None]).astype(np.int32)
            loss_kind: LossKind = "count"
        else:
            stats = onehot * w[:, None]
            loss_kind = "weighted"
    else:
        y_enc, offset, stats = _centred_sse_stats(y_enc, w)
        loss_kind = "sse"

    perm = np.argsort(X, axis=0, kind="stable").T.astype(np.int32)  # (p, n)
    x_sorted = np.take_along_axis(X.T, perm, axis=1)  # (p, n)
    changes = x_sorted[:, 1:] > x_sorted[:, :-1]  # (p, n-1)
    rank, value_rank, cut_valid, cut_pos, n_thresholds, slack_left = _presorted(
        perm, changes, sample_slack(task, y_enc, w)
    )
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
    )


def _centred_sse_stats(y: np.ndarray, w: np.ndarray):
    """`(centred y, offset, [w, w*y, w*|y|^2])` for targets `(n, m)` and weights `(n,)`."""
    # Centring first keeps S2 - |S1|^2/S0 well conditioned for targets with a
    # large offset; the loss of every set is unchanged by the shift.
    with np.errstate(over="ignore", invalid="ignore"):
        offset = (w[:, None] * y).sum(axis=0) / w.sum()
    # A constant target column is centred to exact zeros: its weighted mean can be
    # off by an ulp, and round-off alone would then make some split look better
    # than the single leaf (scikit-learn returns a leaf for constant targets).
    constant = np.all(y == y[:1], axis=0)
    offset = np.where(constant, y[0], offset)
    with np.errstate(over="ignore", invalid="ignore"):
        y = y - offset
        stats = np.concatenate(
            [w[:, None], w[:, None] * y, (w * np.sum(y**2, axis=1))[:, None]], axis=1
        )
        # The largest intermediates of a leaf loss S2 - |S1|^2 / S0 over any subset.
        largest = np.concatenate(
            [np.abs(stats[:, 1:-1]).sum(axis=0) ** 2, stats[:, -1:].sum(axis=0)]
        )
    if not (np.all(np.isfinite(offset)) and np.all(np.isfinite(largest))):
        raise ValueError(
            "y is too large for float64: the weighted squared deviations of the "
            "targets overflow. Rescale y (for example divide it by its standard "
            "deviation)."
        )
    return y, offset, stats


def sample_slack(task: str, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`(n,)`: how much adding each sample to any set can raise its best loss, at most.

    The best tree of a set plus sample i is no worse than the set's best tree with i
    added to the leaf it reaches, which costs at most: classification, its weight;
    squared error, `w_i W / (W + w_i) |y_i - mu|^2 <= w_i |y_i - mu|^2` for a leaf of
    weight W and mean mu, and mu lies in the targets' bounding box, so at most w_i
    times the largest squared distance from y_i to a corner of the box. Summed over
    the samples that change sides when a cut moves, this bounds how much each side's
    best loss can change (the slack bound of `_depth2.py` and `_deep.py`).
    """
    if task == "classification" or len(w) == 0:
        return w
    lo, hi = y.min(axis=0), y.max(axis=0)
    return w * np.maximum((y - lo) ** 2, (y - hi) ** 2).sum(axis=1)


def _presorted(perm: np.ndarray, changes: np.ndarray, slack: np.ndarray):
    """Orders and threshold tables from each feature's sorted order `perm` `(p, n)`.

    `changes[f, k]`: the (k+1)-th sample of f's order has a larger value than the k-th;
    `slack`: `sample_slack` of each sample.
    Returns `(rank, value_rank, cut_valid, cut_pos, n_thresholds, slack_left)`.
    """
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
    cum_weight = np.zeros((p, n + 1))  # in each feature's order
    np.cumsum(w[perm], axis=1, out=cum_weight[:, 1:])
    cut_pos = np.empty((p, n + 1), dtype=np.int32)
    slack_left = np.empty((p, n + 1))
    n_thresholds = _cut_tables(cut_valid[:, 1:n], cum_weight, cut_pos, slack_left)
    return cut_pos, n_thresholds.astype(np.int32), slack_left


def two_class_stumps(signed: np.ndarray, valid: np.ndarray, total: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Best stump per (problem, feature) of a sample set: `(losses, positions)`.

    `signed` `(B, p, n)`: the set's signed counts in each feature's order (0 outside
    it); `valid` `(B, p, n+1)`: the problem's `cut_valid`; `total` `(B,)`: the set's
    weight, or any bound of it (it only sizes the integers) when the losses are not
    used. The loss of the cut before position k is (T - |d_k| - |D - d_k|) / 2 with d
    the prefix sums (`_host.split_losses`), so the best stump is the first largest
    |d| + |D - d| among the valid positions: `_host.stump_losses`' losses and
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
    `(..., n+1)`: the summed slack before each position. Threshold index t in 0..u(f):
    t=0 sends nothing left, t=u(f) everything (and so do the entries past it); in
    between, the cut at the t-th valid position. The valid positions, row by row in
    order (`flatnonzero`, less each row's offset), fill each row's first u(f) - 1
    entries in the same order (a boolean mask): 2x faster than a stable sort of the
    flags.
    """
    n = cum.shape[-1] - 1
    counts = valid.sum(axis=-1)
    cut_pos[..., 0] = 0
    cut_pos[..., 1:] = n
    if n > 1:
        row_start = np.arange(counts.size) * (n - 1) - 1  # flat index of position 0
        cut_pos[..., 1:n][np.arange(n - 1) < counts[..., None]] = (
            np.flatnonzero(valid) - np.repeat(row_start, counts.reshape(-1)))
    rows = cut_pos.reshape(-1, n + 1)
    at = rows + (np.arange(len(rows)) * (n + 1))[:, None]
    np.take(cum.reshape(-1), at, out=slack_left.reshape(-1, n + 1))
    return counts + 1
