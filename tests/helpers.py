"""Independent test oracles for qbnb_jax, written from the problem definition only.

Nothing here imports qbnb_jax. Everything is plain numpy in float64.

- `BruteForce`: the exact optimum of the depth-d tree problem by exhaustive recursion.
- `depth2_optimum`, `depth3_optimum`: depth-2 optima of mid-size problems by enumerating
  cut pairs, depth-3 optima of a few dozen rows from them.
- `random_problem`: small random problems with ties, duplicates, constant features and
  (zero / integer / fractional) sample weights.
- `PaperQuantities`: the paper's L0, L1, L2, V_s, W0, W1_{s'}, W2 computed literally from
  their definitions (Quant-BnB, Mazumder/Meng/Wang 2022, sections 2-3).
- `partition_loss`, `prediction_loss`: the loss of a fitted tree, recomputed on the host.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Literal

import numpy as np

Task = Literal["classification", "regression"]


# --------------------------------------------------------------------------------------
# The problem and the loss of a constant leaf
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Problem:
    X: np.ndarray  # (n, p) float64
    y: np.ndarray  # (n,) labels, or (n,) / (n, m) float64 targets
    w: np.ndarray  # (n,) float64, >= 0
    task: Task

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def p(self) -> int:
        return int(self.X.shape[1])


def _encode_targets(y: np.ndarray, task: Task) -> np.ndarray:
    """Classification: one-hot (n, C) of the labels. Regression: targets as (n, m)."""
    y = np.asarray(y)
    if task == "classification":
        _, codes = np.unique(y, return_inverse=True)
        codes = codes.reshape(-1)
        n_classes = int(codes.max()) + 1 if codes.size else 1
        return np.eye(n_classes, dtype=np.float64)[codes]
    y = np.asarray(y, dtype=np.float64)
    return y[:, None] if y.ndim == 1 else y.reshape(y.shape[0], int(np.prod(y.shape[1:])))


def leaf_losses(masks: np.ndarray, Y: np.ndarray, w: np.ndarray, task: Task) -> np.ndarray:
    """Loss of the best constant fit to each subset. `masks` (B, n) bool -> (B,) float64.

    Y is `_encode_targets` output. Classification: weight - largest class weight.
    Regression: weighted SSE around the weighted mean, computed in two passes.
    """
    W = masks.astype(np.float64) * w[None, :]  # (B, n)
    if task == "classification":
        counts = W @ Y  # (B, C)
        return counts.sum(axis=1) - counts.max(axis=1, initial=0.0)
    total = W.sum(axis=1)
    mean = (W @ Y) / np.where(total > 0, total, 1.0)[:, None]  # (B, m)
    resid = Y[None, :, :] - mean[:, None, :]  # (B, n, m)
    return np.einsum("bn,bnm->b", W, resid * resid)


def leaf_loss(mask: np.ndarray, Y: np.ndarray, w: np.ndarray, task: Task) -> float:
    return float(leaf_losses(mask[None, :], Y, w, task)[0])


# --------------------------------------------------------------------------------------
# Brute force
# --------------------------------------------------------------------------------------


def candidate_splits(X: np.ndarray) -> np.ndarray:
    """All distinct routings `x[f] <= thr` of the rows of X, as a (K, n) bool matrix.

    Thresholds: midpoints of consecutive distinct values of each feature, plus +inf
    (everything left; "everything right" is the same partition mirrored).
    Missing values (NaN) go left or right, both are listed for every threshold, as
    scikit-learn's trees choose a side per split: so the split "every present value
    left, the missing ones right" is one of them.
    """
    n, p = X.shape
    rows = [np.ones(n, dtype=bool)]
    for f in range(p):
        missing = np.isnan(X[:, f])
        values = np.unique(X[~missing, f])
        for v in values[:-1]:  # everything up to each distinct value goes left
            rows.append(X[:, f] <= v)  # NaN <= v is False: missing values go right
            rows.append((X[:, f] <= v) | missing)
        rows.append(~missing)
    return np.unique(np.array(rows, dtype=bool).reshape(-1, n), axis=0)


class BruteForce:
    """Exact optimum of min_T sum_i w_i loss(y_i, T(x_i)) over perfect depth-d trees.

    best(0, S) = leaf loss of S;
    best(d, S) = min over splits (f, thr), including "all on one side",
                 of best(d-1, S & left) + best(d-1, S & right).
    Samples with weight 0 are dropped first (they are absent from the problem).

    Leaf limits (`min_samples` rows, `min_weight` weight; scikit-learn's
    min_samples_leaf and min_weight_fraction_leaf x total weight): a split of S counts
    only when both parts hold that much; "all on one side" stays allowed (it is the
    subtree of S itself), and so does a leaf.
    """

    def __init__(self, X, y, w=None, task: Task = "classification", *,
                 min_samples: int = 1, min_weight: float = 0.0):
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        w = np.ones(n) if w is None else np.asarray(w, dtype=np.float64)
        keep = w > 0
        self.task = task
        self.X = X[keep]
        self.Y = _encode_targets(y, task)[keep]
        self.w = w[keep]
        self.n = int(keep.sum())
        self.G = candidate_splits(self.X) if self.n else np.ones((1, 0), dtype=bool)
        self._memo: dict[tuple[int, bytes], float] = {}
        self.min_samples, self.min_weight = min_samples, min_weight
        self.limited = min_samples > 1 or min_weight > 0

    def _leaves(self, masks: np.ndarray) -> np.ndarray:
        return leaf_losses(masks, self.Y, self.w, self.task)

    def best(self, depth: int, mask: np.ndarray | None = None) -> float:
        if mask is None:
            mask = np.ones(self.n, dtype=bool)
        key = (depth, mask.tobytes())
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if depth == 0 or not mask.any():
            value = float(self._leaves(mask[None, :])[0])
        elif self.limited:
            value = self._best_limited(depth, mask)
        elif depth == 1:  # all stumps of S at once
            left = mask[None, :] & self.G
            right = mask[None, :] & ~self.G
            value = float(np.min(self._leaves(left) + self._leaves(right)))
        else:
            value = np.inf
            seen = set()
            for g in self.G:
                left = mask & g
                key_l = left.tobytes()
                if key_l in seen:
                    continue
                seen.add(key_l)
                value = min(value, self.best(depth - 1, left) + self.best(depth - 1, mask & ~g))
            value = float(value)
        self._memo[key] = value
        return value


    def _fits(self, parts: np.ndarray) -> np.ndarray:
        """Whether each part `(B, n)` may be a leaf under the limits."""
        return (parts.sum(axis=1) >= self.min_samples) & (parts @ self.w >= self.min_weight)

    def _best_limited(self, depth: int, mask: np.ndarray) -> float:
        left, right = mask[None, :] & self.G, mask[None, :] & ~self.G
        ok = self._fits(left) & self._fits(right)
        left, right = left[ok], right[ok]
        if depth == 1:
            split = self._leaves(left) + self._leaves(right)
            return float(min(self._leaves(mask[None, :])[0], split.min(initial=np.inf)))
        value = self.best(depth - 1, mask)  # a leaf, or everything on one side
        for a, b in zip(left, right):
            value = min(value, self.best(depth - 1, a) + self.best(depth - 1, b))
        return float(value)


def depth2_optimum(X, y, w=None, *, task: Task, block: int = 32) -> float:
    """The depth-2 optimum of mid-size problems (hundreds to thousands of rows), where
    `BruteForce`'s recursion over row masks is out of reach: every root split `x[j] <=
    v` (v each distinct value of feature j; the largest sends everything left), and
    below it, on each side and each feature, every cut between consecutive distinct
    values of the whole training set (and "no split"), scored from prefix sums of the
    samples' stat vectors in that feature's order, `block` root splits at a time.
    No missing values. Regression targets are centred on their weighted mean first,
    so a leaf's `S2 - |S1|^2 / S0` does not cancel large sums."""
    X = np.asarray(X, dtype=np.float64)
    n, p = X.shape
    w = np.ones(n) if w is None else np.asarray(w, dtype=np.float64)
    if not (w > 0).any():  # no weight, no loss
        return 0.0
    Y = _encode_targets(y, task)
    if task == "regression":
        Y = Y - (w @ Y) / w.sum()
        Z = np.column_stack([w, w[:, None] * Y, w * (Y * Y).sum(axis=1)])
    else:
        Z = w[:, None] * Y

    def loss(S):  # summed stat vectors (..., C) -> best constant fit's loss
        if task == "regression":
            s0 = S[..., 0]
            explained = (S[..., 1:-1] ** 2).sum(axis=-1) / np.where(s0 > 0, s0, 1.0)
            return np.maximum(S[..., -1] - np.where(s0 > 0, explained, 0.0), 0.0)
        return S.sum(axis=-1) - S.max(axis=-1)

    orders = [np.argsort(X[:, f], kind="stable") for f in range(p)]
    valid = []
    for f in range(p):
        xs = X[orders[f], f]
        v = np.ones(n + 1, dtype=bool)
        v[1:n] = xs[1:] != xs[:-1]
        valid.append(v)

    def best_stumps(masks):  # (B, n) sets -> (B,) best stump loss over the features
        out = np.full(len(masks), np.inf)
        for f in range(p):
            o = orders[f]
            cum = np.zeros((len(masks), n + 1, Z.shape[1]))
            np.cumsum(masks[:, o, None] * Z[o][None], axis=1, out=cum[:, 1:])
            split = loss(cum) + loss(cum[:, -1:] - cum)
            out = np.minimum(out, np.where(valid[f][None], split, np.inf).min(axis=1))
        return out

    best = np.inf
    for j in range(p):
        values = np.unique(X[:, j])
        for b0 in range(0, len(values), block):
            left = X[None, :, j] <= values[b0 : b0 + block, None]
            best = min(best, float((best_stumps(left) + best_stumps(~left)).min()))
    return best


def depth3_optimum(X, y, w=None, *, task: Task) -> float:
    """The depth-3 optimum of problems of a few dozen rows: every root split `x[j] <= v`
    (as `depth2_optimum`), each side's depth-2 optimum by `depth2_optimum` on its rows
    alone (every split of a side's rows by the whole set's thresholds is a split by its
    own)."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=np.float64)
    y = np.asarray(y)
    best = depth2_optimum(X, y, w, task=task)  # a root split that sends everything left
    for j in range(X.shape[1]):
        for v in np.unique(X[:, j])[:-1]:
            left = X[:, j] <= v
            best = min(best, depth2_optimum(X[left], y[left], w[left], task=task)
                       + depth2_optimum(X[~left], y[~left], w[~left], task=task))
    return best


def brute_force(X, y, w=None, *, task: Task, depth: int, min_samples: int = 1,
                min_weight: float = 0.0) -> float:
    return BruteForce(X, y, w, task, min_samples=min_samples, min_weight=min_weight).best(depth)


class PrunedBruteForce(BruteForce):
    """Exact optimum of `loss + penalty * splits` over trees of depth at most d with at
    most `leaves` leaves (None: no limit); nodes may stay leaves at any level. With leaf
    limits (as `BruteForce`), a split counts only when both of its parts fit them.

    pruned(d, L, S) = min(leaf loss of S,
                          min over splits and 1 <= l < L of
                          penalty + pruned(d-1, l, S & left) + pruned(d-1, L-l, S & right)).
    """

    def __init__(self, X, y, w=None, task: Task = "classification", *, penalty: float = 0.0,
                 min_samples: int = 1, min_weight: float = 0.0):
        super().__init__(X, y, w, task, min_samples=min_samples, min_weight=min_weight)
        self.penalty = float(penalty)
        self._pruned: dict[tuple[int, int, bytes], float] = {}

    def pruned(self, depth: int, leaves: int | None = None, mask: np.ndarray | None = None
               ) -> float:
        if mask is None:
            mask = np.ones(self.n, dtype=bool)
        leaves = 2**depth if leaves is None else min(leaves, 2**depth)
        key = (depth, leaves, mask.tobytes())
        if key in self._pruned:
            return self._pruned[key]
        value = float(self._leaves(mask[None, :])[0])
        if depth > 0 and leaves >= 2 and mask.sum() >= 2:
            seen = set()
            for g in self.G:
                left = mask & g
                if not left.any() or left.sum() == mask.sum() or left.tobytes() in seen:
                    continue
                seen.add(left.tobytes())
                if self.limited and not self._fits(np.stack([left, mask & ~g])).all():
                    continue
                for ll in range(1, leaves):
                    value = min(value, self.penalty + self.pruned(depth - 1, ll, left)
                                + self.pruned(depth - 1, leaves - ll, mask & ~g))
        self._pruned[key] = value
        return value


# --------------------------------------------------------------------------------------
# Random problems
# --------------------------------------------------------------------------------------


def _random_feature(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.choice(["grid", "grid", "normal", "constant", "few"], p=[0.3, 0.1, 0.35, 0.1, 0.15])
    if kind == "grid":  # small integer grid: many ties
        return rng.integers(0, int(rng.integers(2, 6)), size=n).astype(np.float64)
    if kind == "normal":
        x = rng.normal(size=n)
        if n > 2 and rng.random() < 0.5:  # a few exact duplicates
            k = int(rng.integers(1, max(2, n // 3)))
            x[rng.integers(0, n, size=k)] = x[rng.integers(0, n, size=k)]
        return np.round(x, 3) if rng.random() < 0.3 else x
    if kind == "constant":
        return np.full(n, float(rng.normal()))
    vals = rng.normal(size=int(rng.integers(1, 4))) * 10  # two or three distinct values
    return vals[rng.integers(0, vals.size, size=n)]


def seed_of(*parts) -> int:
    """A seed that is stable across processes (unlike `hash` of a string)."""
    return zlib.crc32(repr(parts).encode())


def random_weights(rng: np.random.Generator, n: int, weights: str) -> np.ndarray:
    """`weights`: "ones", "int" (0..3, some zeros), "float" (fractional, ~20% zeros), "mixed"."""
    if weights == "mixed":
        weights = str(rng.choice(["ones", "int", "float"]))
    if weights == "ones":
        return np.ones(n)
    if weights == "int":
        return rng.integers(0, 4, size=n).astype(np.float64)
    if weights == "float":
        w = rng.uniform(0.05, 3.0, size=n)
        w[rng.random(n) < 0.2] = 0.0
        return w
    raise ValueError(weights)


def random_problem(
    rng: np.random.Generator,
    task: Task,
    n: int,
    p: int,
    k: int = 2,
    weights: str = "mixed",
) -> Problem:
    """A small random problem with ties, duplicate rows, constant features and weights.

    `k` is the number of classes (classification) or of targets (regression; with k == 1
    the targets are randomly returned as shape (n,) or (n, 1)).
    """
    X = np.column_stack([_random_feature(rng, n) for _ in range(p)]).reshape(n, p)
    if n > 3 and rng.random() < 0.3:  # duplicated rows
        dup = rng.integers(0, n, size=int(rng.integers(1, n // 2 + 1)))
        X[dup] = X[rng.integers(0, n, size=dup.size)]
    # a hidden depth-2 structure so that pruning has something to do
    f0, f1 = rng.integers(0, p, size=2)
    signal = (X[:, f0] > np.median(X[:, f0])).astype(int) * 2 + (
        X[:, f1] > np.median(X[:, f1])
    ).astype(int)
    noise = rng.random(n) < rng.uniform(0.0, 0.6)
    if task == "classification":
        labels = np.sort(rng.choice(np.arange(-3, 12), size=k, replace=False))
        codes = np.where(noise, rng.integers(0, k, size=n), signal % k)
        y = labels[codes]
    else:
        centers = rng.normal(size=(4, k)) * 3
        if rng.random() < 0.3:  # tied targets
            y = np.round(centers[signal] + noise[:, None] * rng.integers(-2, 3, size=(n, k)))
        else:
            y = centers[signal] + rng.normal(size=(n, k)) * rng.uniform(0.1, 2.0)
        if k == 1 and rng.random() < 0.5:
            y = y[:, 0]
    w = random_weights(rng, n, weights)
    return Problem(X=X, y=y, w=w, task=task)


# --------------------------------------------------------------------------------------
# Losses of a fitted tree
# --------------------------------------------------------------------------------------


def partition_loss(leaf_ids: np.ndarray, y, w, task: Task) -> float:
    """Sum over the groups of `leaf_ids` of the best constant fit's loss."""
    Y = _encode_targets(y, task)
    w = np.asarray(w, dtype=np.float64)
    groups = np.unique(leaf_ids)
    masks = leaf_ids[None, :] == groups[:, None]
    return float(leaf_losses(masks, Y, w, task).sum())


def prediction_loss(pred, y, w, task: Task) -> float:
    """sum_i w_i loss(y_i, pred_i): 0-1 loss on labels, or squared error summed over targets."""
    w = np.asarray(w, dtype=np.float64)
    if task == "classification":
        return float(np.sum(w * (np.asarray(pred) != np.asarray(y))))
    Y = np.asarray(y, dtype=np.float64).reshape(len(w), -1) if len(w) else np.zeros((0, 1))
    P = np.asarray(pred, dtype=np.float64).reshape(len(w), -1) if len(w) else np.zeros((0, 1))
    return float(np.sum(w[:, None] * (Y - P) ** 2))


# --------------------------------------------------------------------------------------
# The paper's quantities, literally
# --------------------------------------------------------------------------------------


def equispaced(a: int, b: int, s: int) -> list[int]:
    """Almost s-equi-spaced integers in [a, b]: t_0 = a, t_s = b, t_j = floor(a + j(b-a)/s)."""
    assert 1 <= s <= b - a, (a, b, s)
    return [a] + [(a * s + j * (b - a)) // s for j in range(1, s)] + [b]


class PaperQuantities:
    """L0, L1, L2, V_s, W0, W1_{s'}, W2 of the paper over the full sample set [n].

    A sample set I is a boolean mask over the n samples (or an index array). For feature f,
    `rank[i, f]` in 1..u(f) is the position of x_{i,f} among the distinct values w^f_1 <
    ... < w^f_{u(f)}, so I^f_{[a,b]} = {i in I : ~w^f_a <= x_{i,f} <= ~w^f_b} is
    {i in I : a < rank[i, f] <= b}. phi = (f0, a, b, f1, f2) with 0 <= a <= b <= u(f0).
    """

    def __init__(self, X, y, w=None, task: Task = "classification"):
        self.X = np.asarray(X, dtype=np.float64)
        self.n, self.p = self.X.shape
        self.w = np.ones(self.n) if w is None else np.asarray(w, dtype=np.float64)
        self.Y = _encode_targets(y, task)
        self.task = task
        self.rank = np.zeros((self.n, self.p), dtype=np.int64)
        self.u = np.zeros(self.p, dtype=np.int64)
        for f in range(self.p):
            values, inv = np.unique(self.X[:, f], return_inverse=True)
            self.rank[:, f] = inv.reshape(-1) + 1
            self.u[f] = values.size
        self._l1_memo: dict[tuple[bytes, int], float] = {}

    def all(self) -> np.ndarray:
        return np.ones(self.n, dtype=bool)

    def _mask(self, idx) -> np.ndarray:
        idx = np.asarray(idx)
        if idx.dtype == bool:
            return idx
        mask = np.zeros(self.n, dtype=bool)
        mask[idx] = True
        return mask

    def sub(self, idx, f: int, a: int, b: int) -> np.ndarray:
        """I^f_{[a,b]}."""
        assert 0 <= a <= b <= self.u[f]
        r = self.rank[:, f]
        return self._mask(idx) & (r > a) & (r <= b)

    def ref_L0(self, idx) -> float:
        return leaf_loss(self._mask(idx), self.Y, self.w, self.task)

    def ref_L1(self, idx, f: int) -> float:
        """min over 0 <= t <= u(f) of L0(I^f_[0,t]) + L0(I^f_[t,u(f)])."""
        mask = self._mask(idx)
        key = (mask.tobytes(), f)
        if key not in self._l1_memo:
            u = int(self.u[f])
            self._l1_memo[key] = min(
                self.ref_L0(self.sub(mask, f, 0, t)) + self.ref_L0(self.sub(mask, f, t, u))
                for t in range(u + 1)
            )
        return self._l1_memo[key]

    def ref_L2(self, idx, phi) -> float:
        """min over a <= t <= b of L1(I^{f0}_[0,t], f1) + L1(I^{f0}_[t,u(f0)], f2)."""
        f0, a, b, f1, f2 = phi
        mask, u = self._mask(idx), int(self.u[f0])
        return min(
            self.ref_L1(self.sub(mask, f0, 0, t), f1) + self.ref_L1(self.sub(mask, f0, t, u), f2)
            for t in range(a, b + 1)
        )

    def ref_V(self, phi, s: int) -> float:
        """Upper bound V_s([n], phi): L2's objective at the almost s-equi-spaced t_j only."""
        f0, a, b, f1, f2 = phi
        u, mask = int(self.u[f0]), self.all()
        return min(
            self.ref_L1(self.sub(mask, f0, 0, t), f1) + self.ref_L1(self.sub(mask, f0, t, u), f2)
            for t in equispaced(a, b, s)
        )

    def ref_W0(self, phi) -> float:
        """L1([n]^{f0}_[0,a], f1) + L1([n]^{f0}_[b,u(f0)], f2)."""
        f0, a, b, f1, f2 = phi
        u, mask = int(self.u[f0]), self.all()
        return self.ref_L1(self.sub(mask, f0, 0, a), f1) + self.ref_L1(
            self.sub(mask, f0, b, u), f2
        )

    def ref_L2hat(self, idx, phi, s_prime: int) -> float:
        """min over 1 <= j <= s' of L1(I^{f0}_[0,t_{j-1}], f1) + L1(I^{f0}_[t_j,u(f0)], f2)."""
        f0, a, b, f1, f2 = phi
        mask, u = self._mask(idx), int(self.u[f0])
        t = equispaced(a, b, s_prime)
        return min(
            self.ref_L1(self.sub(mask, f0, 0, t[j - 1]), f1)
            + self.ref_L1(self.sub(mask, f0, t[j], u), f2)
            for j in range(1, s_prime + 1)
        )

    def ref_W1(self, phi, s_prime: int) -> float:
        """W0([n], phi) + L2hat([n]^{f0}_[a,b], phi, s')."""
        f0, a, b, _, _ = phi
        middle = self.sub(self.all(), f0, a, b)
        return self.ref_W0(phi) + self.ref_L2hat(middle, phi, s_prime)

    def ref_W2(self, phi) -> float:
        """W0([n], phi) + L2([n]^{f0}_[a,b], phi)."""
        f0, a, b, _, _ = phi
        middle = self.sub(self.all(), f0, a, b)
        return self.ref_W0(phi) + self.ref_L2(middle, phi)
