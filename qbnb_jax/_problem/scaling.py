"""Regression targets and weights made ready for the search, for one weighting or many.

A problem's targets are centred on their weighted mean and, where the search's sums
would leave float64's safe range, weights and targets are scaled by powers of two
(exact: the same decisions). Inputs whose squared errors float64 cannot hold are
refused, naming the cause. `sse_setup` does this for P weightings of one target array
at once, rows of zero weight included: every whole-set sum adds its terms one at a
time in sample order (`_problem/sums.py`) and every other step is element-wise or a
maximum, so each weighting gets the numbers a setup of its positive samples alone
gets, bit for bit (`make_problem` runs it for one).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from qbnb_jax._problem.sums import sequential_sum

# The float64 range the solver's sums are kept in (`make_problem` documents what it
# means for the inputs). Beyond it an overflow gives inf, and an underflow's absolute
# error (up to 2**-1075 an operation) is no longer negligible next to the pruning
# tolerance, 1e-12 (about 2**-40) of the root's loss: a tree could be proved optimal
# from lost digits.
SAFE_MAX = 2.0**1000
SAFE_MIN = 2.0**-1000  # per summed term: a loss summed over n samples reaches n * SAFE_MIN
# The underflow errors allowed are below 2**-64 of the root's squared error: 2**-24 of
# the pruning tolerance.
UNDERFLOW_MARGIN = 2.0**64
# Entries (weightings x samples x targets) set up together: temporaries of a few MB.
BLOCK_ENTRIES = 1 << 19


class SseSetup(NamedTuple):
    """P weightings of the same targets, ready for the search."""

    offset: np.ndarray  # (P, m): each weighting's weighted mean of the targets
    centred: np.ndarray  # (P, n, m): targets less the offset; 0 on zero-weight rows
    weight_exponent: np.ndarray  # int (P,): the search's weights are w * 2**a
    target_exponent: np.ndarray  # int (P,): its targets centred * 2**b
    stats: np.ndarray  # (P, n, m + 2): [w, w y, w |y|^2] in the search's units
    slack: np.ndarray  # (P, n): `data.sample_slack` in the search's units


def sse_setup(targets: np.ndarray, weights: np.ndarray) -> SseSetup:
    """Centre, check and scale `targets` `(n, m)` under each row of `weights` `(P, n)`
    (non-negative, each row with a positive weight).

    Centring keeps S2 - |S1|^2 / S0 well conditioned for targets with a large offset
    (the loss of every set is unchanged by the shift). The powers of two are `(0, 0)`,
    the caller's units, where the sums are safe already (`_sums_safe`); otherwise the
    largest weight and the largest |y| are brought into [0.5, 1), where the sums are
    always safe once the weights' spread passes: every positive weight is then above
    n * 2**-53, so the root's squared error is too, far above any underflow. Raises
    ValueError for the first weighting (in order) whose sums float64 cannot hold.
    """
    P, n = weights.shape
    m = targets.shape[1]
    out = SseSetup(np.empty((P, m)), np.empty((P, n, m)), np.zeros(P, dtype=np.int64),
                   np.zeros(P, dtype=np.int64), np.empty((P, n, m + 2)), np.empty((P, n)))
    block = max(1, BLOCK_ENTRIES // max(n * m, 1))
    for b0 in range(0, P, block):
        _setup_block(targets, weights[b0 : b0 + block], b0, out)
    return out


def _setup_block(y: np.ndarray, W: np.ndarray, b0: int, out: SseSetup) -> None:
    rows = slice(b0, b0 + len(W))
    positive = W > 0
    count = positive.sum(axis=1)
    w_max = W.max(axis=1)
    w_min = np.where(positive, W, np.inf).min(axis=1)
    # The weights are divided by a power of two first (exact: the same mean, bit for
    # bit) so that w * y neither overflows for huge weights nor underflows for tiny ones.
    unit = np.ldexp(W, -np.frexp(w_max)[1][:, None])
    with np.errstate(over="ignore", invalid="ignore"):
        offset = (sequential_sum(unit[:, None, :] * y.T[None], axis=-1)
                  / sequential_sum(unit, axis=-1)[:, None])
    # A constant target column is centred to exact zeros: its weighted mean can be off
    # by an ulp, and round-off alone would then make some split look better than the
    # single leaf (scikit-learn returns a leaf for constant targets).
    y_first = y[positive.argmax(axis=1)]  # (B, m): each weighting's first sample
    constant = np.all((y[None] == y_first[:, None]) | ~positive[..., None], axis=1)
    offset = np.where(constant, y_first, offset)
    with np.errstate(over="ignore", invalid="ignore"):
        centred = y[None] - offset[:, None]
    centred[~positive] = 0.0
    overflow = ~(np.isfinite(offset).all(axis=1) & np.isfinite(centred).all(axis=(1, 2)))

    with np.errstate(all="ignore"):
        deviation = np.abs(centred).max(axis=(1, 2))
        varies = deviation > 0  # constant targets: every loss is exactly 0, units kept
        total = sequential_sum(W, axis=-1)
        spread = varies & (w_min <= count * np.finfo(np.float64).eps * total)
        a, b = -np.frexp(w_max)[1], -np.frexp(deviation)[1]
        # the sums in the units the search would take (the largest weight and |y| in
        # [0.5, 1)), and the sums in the caller's units, where the objective is formed
        w_unit = np.ldexp(W, a[:, None])
        y_unit = np.ldexp(centred, b[:, None, None])
        log_total = np.log2(sequential_sum(w_unit, axis=-1)) - a
        log_root = (np.log2(sequential_sum(w_unit * np.sum(y_unit**2, axis=-1), axis=-1))
                    - a - 2 * b)
        unreportable = varies & ~spread & _unreportable(deviation, log_total, log_root, count)
        safe = _sums_safe(centred, W, positive, deviation, total, w_min, count)
    refused = overflow | spread | unreportable
    if refused.any():
        q = int(np.argmax(refused))
        raise ValueError(_refusal(bool(overflow[q]), bool(spread[q]), float(w_min[q]),
                                  float(total[q]), int(count[q]), float(deviation[q]),
                                  float(log_total[q]), float(log_root[q])))
    scaled = varies & ~safe
    a, b = np.where(scaled, a, 0), np.where(scaled, b, 0)
    w_s = np.ldexp(W, a[:, None])
    y_s = np.ldexp(centred, b[:, None, None])
    stats = out.stats[rows]
    stats[..., 0] = w_s
    np.multiply(w_s[..., None], y_s, out=stats[..., 1:-1])
    stats[..., -1] = w_s * np.sum(y_s**2, axis=-1)
    out.slack[rows] = _box_slack(y_s, w_s, positive)
    out.offset[rows] = offset
    out.centred[rows] = centred
    out.weight_exponent[rows] = a
    out.target_exponent[rows] = b


def _sums_safe(y, w, positive, deviation, total, w_min, count) -> np.ndarray:
    """`(B,)`: whether the search's sums of these centred targets `(B, n, m)` and
    weights `(B, n)` stay in the safe range: no sum (squared error, |S1|^2, slack)
    above SAFE_MAX, and the root's squared error large enough that no underflow
    matters.

    The underflow that matters is |S1|^2's in a leaf's loss S2 - |S1|^2 / S0: when it
    is subnormal its error, up to 2**-1074, becomes 2**-1074 / S0, and it is also at
    most |S1|^2 / S0 <= S0 d^2 (d = max |y|). So a leaf loses at most
    min(2**-1074 / w_min, 2**-537 d) of its loss, whatever its samples.

    A split's gain (`kernels._sse_gain`) squares `S1_l S0_r - S1_r S0_l`, at most
    `S0**2 |y|_max / 2` for a set of weight S0, over `S0_l S0_r <= S0**2 / 4`: both
    stay below SAFE_MAX when `S0**4 max(|y|_max**2, 1)` does. Its subnormal round-off
    (a few 2**-1074 per target in the squares) is divided by `S0_l S0_r S0 >= w_min**3`.
    """
    squares = np.sum(y**2, axis=-1)  # (B, n)
    root = sequential_sum(w * squares, axis=-1)
    s1_squared = (sequential_sum(np.abs(w[..., None] * y), axis=1) ** 2).max(axis=-1)
    slack = sequential_sum(_box_slack(y, w, positive), axis=-1)
    leaf_error = np.minimum(2.0**-1074 / w_min, 2.0**-537 * deviation)
    gain_cross = total**4 * np.maximum(squares.max(axis=-1), 1.0)
    gain_error = 2.0**-1070 * y.shape[-1] / w_min**3
    largest = np.maximum.reduce([root, s1_squared, slack, gain_cross])
    return (np.isfinite(largest) & (largest <= SAFE_MAX) & (root >= count * SAFE_MIN)
            & (root >= UNDERFLOW_MARGIN * np.maximum(leaf_error, gain_error)))


def _box_slack(y: np.ndarray, w: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """`(B, n)`: `data.sample_slack` of targets `(B, n, m)` and weights `(B, n)`, each
    sample's weight times its largest squared distance to a corner of the box of its
    weighting's positive samples' targets (zero-weight rows: 0)."""
    lo = np.where(positive[..., None], y, np.inf).min(axis=1)[:, None]
    hi = np.where(positive[..., None], y, -np.inf).max(axis=1)[:, None]
    return w * np.maximum((y - lo) ** 2, (y - hi) ** 2).sum(axis=-1)


def _unreportable(deviation, log_total, log_root, count) -> np.ndarray:
    """Where `_reportable_error` refuses (vectorised)."""
    return ((deviation > 2.0**500) | ~(log_root - log_total >= -1000)
            | (log_root > math.log2(SAFE_MAX)) | (log_root < np.log2(count * SAFE_MIN)))


def _refusal(overflow: bool, spread: bool, w_min: float, total: float, n: int,
             deviation: float, log_total: float, log_root: float) -> str:
    """The message for the first check a weighting fails, in the order they run."""
    if overflow:
        return ("y is too large for float64: its deviations from the weighted mean overflow. "
                "Rescale y (for example divide it by its standard deviation).")
    if spread:
        # The search gets a side's sums as a total less a prefix; with such weights the
        # side's S0 can come out as 0 or a few ulps of the total, and its loss off by up
        # to its whole squared error. No power of two helps: the ratio of the weights is
        # the problem.
        return (f"sample_weight spans too many orders of magnitude for float64 sums: the "
                f"smallest positive weight, {w_min:.3g}, is lost in the rounding of their "
                f"total, {total:.3g} (below n * 2**-52 of it), so the squared errors of its "
                "samples cannot be resolved. Give such samples weight 0, or raise their "
                "weights.")
    return _reportable_error(deviation, log_total, log_root, n)


def _reportable_error(deviation: float, log_total: float, log_root: float, n: int) -> str:
    """Why the squared errors cannot be held in the caller's units, where the tree's
    values and objective are computed: of the total weight W and the weighted mean
    square deviation V = sum w (y - mean)^2 / W, the one further from 1 (in orders of
    magnitude) is named."""
    if deviation > 2.0**500:
        return (f"y is too large for float64: its deviations from the weighted mean reach "
                f"{deviation:.3g}, whose squares overflow (the safe limit is 2**500, about "
                "3.3e150). Rescale y (for example divide it by its standard deviation).")
    log_mean_square = log_root - log_total
    if not log_mean_square >= -1000:
        return (f"y varies too little for float64: the weighted mean of (y - mean)**2 is "
                f"about 2**{log_mean_square:.0f}, below 2**-1000 (about 9.3e-302), where its "
                "squares underflow. Rescale y (for example divide it by its standard "
                "deviation).")
    blame_weights = abs(log_total) >= abs(log_mean_square)
    total = f"sum w*(y - mean)**2 is about 2**{log_root:.0f}"
    if log_root > math.log2(SAFE_MAX):
        return (f"sample_weight is too large: {total}, above the safe float64 limit 2**1000 "
                "(about 1.1e301). Divide sample_weight by a constant; the optimal tree does "
                "not change." if blame_weights else
                f"y is too large for float64: {total}, above the safe limit 2**1000 (about "
                "1.1e301). Rescale y (for example divide it by its standard deviation).")
    limit = f"the safe float64 limit n * 2**-1000 (about {n * SAFE_MIN:.2g})"
    return (f"sample_weight is too small: {total}, below {limit}. Multiply sample_weight "
            "by a constant; the optimal tree does not change." if blame_weights else
            f"y varies too little for float64: {total}, below {limit}. Rescale y (for "
            "example divide it by its standard deviation).")
