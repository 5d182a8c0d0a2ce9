"""Exact-rational brute force on extreme weights, targets and integer features.

`ExactOracle` computes the optimum of small problems (n <= 8, depth 1-2) in
`fractions.Fraction`: every float input is a rational number exactly, integer features
are compared as integers, and a leaf's loss S2 - |S1|^2 / S0 is exact, so no scale of
weights or targets can underflow, overflow or round. The oracle uses nothing from
qbnb_jax.

Each problem is drawn from one family (`FAMILIES`): regression weights or targets
scaled uniformly by up to 1e+-290, weights spread over ten orders of magnitude (and
scaled), fractional class weights likewise, 64-bit integer features near +-2**62 or
2**64 that float64 holds exactly or that it cannot. For every problem `solve` either

- refuses it with a one-line ValueError whose message the family allows (inexact
  integers must be refused; in-range scales never are), or
- returns a result that `check_result` accepts: status "optimal"; the returned tree,
  evaluated exactly, within the solver's documented tolerance of the exact optimum
  (0 for integer counts); a lower bound not above the exact optimum and, but for
  `LOOSE_BOUNDS`, not more than the tolerance below it; an objective equal to the
  tree's exact loss; all up to the float64 rounding of the reported numbers.

The default run checks `DEFAULT_COUNT` problems; the slow test runs all 1,000.
"""

from __future__ import annotations

import re
import warnings
from fractions import Fraction

import numpy as np
import pytest
from helpers import random_problem, seed_of

from qbnb_jax import solve

DEFAULT_COUNT = 140  # 20 a family
FULL_COUNT = 1000


# --------------------------------------------------------------------------------------
# The exact oracle
# --------------------------------------------------------------------------------------


def exact_number(value) -> Fraction | int:
    """A float as the rational number it is; an integer as itself (no float on the way)."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    return Fraction(float(value))


class ExactOracle:
    """Optimum over perfect depth-d trees (d <= 2) of the weighted loss, exactly.

    Sample sets are bitmasks. A split sends the samples with x[f] <= v left, for every
    feature f and every distinct value v of it but the largest; "all on one side" is the
    full set. Zero-weight samples are dropped first, as the solver drops them.
    """

    def __init__(self, X: np.ndarray, y, w, task: str):
        y = np.asarray(y)
        keep = [i for i in range(len(X)) if w[i] > 0]
        self.task = task
        self.X = [[exact_number(X[i, f]) for f in range(X.shape[1])] for i in keep]
        self.w = [exact_number(w[i]) for i in keep]
        if task == "classification":
            _, codes = np.unique(y, return_inverse=True)
            self.labels = [int(codes.reshape(-1)[i]) for i in keep]
        else:
            Y = y.reshape(len(X), -1)
            self.Y = [[exact_number(v) for v in Y[i]] for i in keep]
        self.n = len(keep)
        self.full = (1 << self.n) - 1
        self.splits = self._splits()
        self._leaf: dict[int, Fraction] = {}
        self._best: dict[tuple[int, int], Fraction] = {}

    def _splits(self) -> list[int]:
        splits = {self.full}
        for f in range(len(self.X[0]) if self.n else 0):
            for v in sorted({row[f] for row in self.X})[:-1]:
                splits.add(sum(1 << i for i, row in enumerate(self.X) if row[f] <= v))
        return sorted(splits)

    def members(self, mask: int) -> list[int]:
        return [i for i in range(self.n) if mask >> i & 1]

    def leaf(self, mask: int) -> Fraction:
        hit = self._leaf.get(mask)
        if hit is not None:
            return hit
        rows = self.members(mask)
        s0 = sum((self.w[i] for i in rows), Fraction(0))
        if not rows:
            value = Fraction(0)
        elif self.task == "classification":
            by_class: dict[int, Fraction] = {}
            for i in rows:
                by_class[self.labels[i]] = by_class.get(self.labels[i], 0) + self.w[i]
            value = s0 - max(by_class.values())
        else:
            m = len(self.Y[0])
            s1 = [sum((self.w[i] * self.Y[i][j] for i in rows), Fraction(0)) for j in range(m)]
            s2 = sum((self.w[i] * self.Y[i][j] ** 2 for i in rows for j in range(m)),
                     Fraction(0))
            value = s2 - sum(s * s for s in s1) / s0
        self._leaf[mask] = value
        return value

    def best(self, depth: int, mask: int | None = None) -> Fraction:
        mask = self.full if mask is None else mask
        key = (depth, mask)
        if key not in self._best:
            if depth == 0 or mask == 0:
                value = self.leaf(mask)
            else:
                value = min(self.best(depth - 1, mask & g) + self.best(depth - 1, mask & ~g)
                            for g in self.splits)
            self._best[key] = value
        return self._best[key]

    def tree_loss(self, tree) -> Fraction:
        """The loss of `tree`'s partition, its thresholds compared exactly
        (x <= t as rationals: a float threshold is a rational number)."""
        leaves: dict[int, int] = {}
        for i, row in enumerate(self.X):
            node = 0
            while tree.feature[node] >= 0:
                go_left = row[tree.feature[node]] <= Fraction(float(tree.threshold[node]))
                node = tree.children_left[node] if go_left else tree.children_right[node]
            leaves[node] = leaves.get(node, 0) | 1 << i
        return sum((self.leaf(mask) for mask in leaves.values()), Fraction(0))

    def total_weight(self) -> Fraction:
        return sum(self.w, Fraction(0))


# --------------------------------------------------------------------------------------
# Problem families
# --------------------------------------------------------------------------------------


def log_uniform(rng, lo: float, hi: float) -> float:
    return float(10.0 ** rng.uniform(lo, hi))


def base_problem(rng, task: str, weights: str = "mixed"):
    n, p = int(rng.integers(2, 9)), int(rng.integers(1, 4))
    k = int(rng.integers(2, 4)) if task == "classification" else int(rng.integers(1, 3))
    P = random_problem(rng, task, n, p, k, weights=weights)
    if not P.w.any():  # some weight to fit
        P.w[0] = 1.0
    return P


def scaled_weights(rng):
    """Regression weights scaled by 1e-290 .. 1e290: the root's squared error stays in
    the documented range (targets are O(1)..O(10))."""
    P = base_problem(rng, "regression")
    return P.X, P.y, P.w * log_uniform(rng, -290, 290)


def scaled_targets(rng):
    """Regression targets scaled by 1e-140 .. 1e140 (their squares within 1e+-280)."""
    P = base_problem(rng, "regression")
    return P.X, P.y * log_uniform(rng, -140, 140), P.w


def scaled_both(rng):
    """Weights by 10**a and targets by 10**b with the squared error's scale 10**(a + 2b)
    within 1e+-280."""
    P = base_problem(rng, "regression")
    b = rng.uniform(-140, 140)
    a = rng.uniform(max(-280 - 2 * b, -290), min(280 - 2 * b, 290))
    return P.X, P.y * 10.0**b, P.w * 10.0**a


def spread_weights(rng):
    """Each weight 10**U(-5, 5), a fifth of them zero; the whole problem then scaled by
    up to 1e+-250."""
    P = base_problem(rng, "regression", weights="ones")
    w = 10.0 ** rng.uniform(-5, 5, size=P.n) * log_uniform(rng, -250, 250)
    w[1:][rng.random(P.n - 1) < 0.2] = 0.0
    return P.X, P.y, w


def classification_weights(rng):
    """Fractional class weights scaled by 1e-280 .. 1e280, spread over 10**U(-5, 5)."""
    P = base_problem(rng, "classification", weights="ones")
    w = 10.0 ** rng.uniform(-5, 5, size=P.n) * log_uniform(rng, -280, 280)
    return P.X, P.y, w


def large_integers(rng, exact: bool):
    """int64 features near +-2**62 or uint64 near 2**64, spaced by multiples of their
    float64 ulp (exact), or with one value 1 off such a multiple (inexact)."""
    task = "classification" if rng.random() < 0.5 else "regression"
    P = base_problem(rng, task)
    unsigned = rng.random() < 0.4
    if unsigned:  # ulp 2048 in [2**63, 2**64)
        base, ulp, dtype = 2**64 - 2048 * 64, 2048, np.uint64
    else:  # ulp 1024 in [2**62, 2**63)
        base, ulp, dtype = (2**62 if rng.random() < 0.5 else -(2**62) - 1024 * 64), 1024, np.int64
    ranks = [np.unique(P.X[:, f], return_inverse=True)[1].reshape(-1) for f in range(P.p)]
    values = [[base + ulp * int(r) for r in col] for col in ranks]
    if not exact:
        f, i = int(rng.integers(P.p)), int(rng.integers(P.n))
        values[f][i] += 1
    X = np.array(values, dtype=dtype).T.copy()
    return X, P.y, P.w


FAMILIES = {
    # name -> (make, pattern a refusal's message must match, or None: never refused)
    "scaled weights": (scaled_weights, None),
    "scaled targets": (scaled_targets, None),
    "scaled weights and targets": (scaled_both, None),
    "spread weights": (spread_weights, None),
    "classification weights": (classification_weights, None),
    "exact large integers": (lambda rng: large_integers(rng, exact=True), None),
    "inexact large integers": (lambda rng: large_integers(rng, exact=False),
                               r"^X holds the integer -?\d+ \(row \d+, column \d+\), which "
                               r"float64 cannot represent exactly"),
}
MUST_REFUSE = {"inexact large integers"}
# The search's one-pass sums (a side's weight is a total less a prefix) lose digits to
# cancellation when weights spread over many orders of magnitude, so its proved bound
# can trail the optimum by more than the tolerance: valid, but looser than documented.
# This predates the rescaling and is not about range; only validity is checked there.
LOOSE_BOUNDS = {"spread weights"}


def make_case(index: int):
    name = list(FAMILIES)[index % len(FAMILIES)]
    rng = np.random.default_rng(seed_of("exact inputs", index))
    X, y, w = FAMILIES[name][0](rng)
    task = "classification" if np.asarray(y).dtype.kind in "iu" else "regression"
    return name, task, 1 + index // len(FAMILIES) % 2, X, y, w


# --------------------------------------------------------------------------------------
# The comparison
# --------------------------------------------------------------------------------------


def tolerance(oracle: ExactOracle, optimum: Fraction, w) -> Fraction:
    """The solver's pruning tolerance (docs/design.md, "Bounds and why they are valid"):
    none for integer counts; 1e-9 of the optimum plus 1e-12 of the total weight
    (classification) or of the root's squared error (regression)."""
    integral = bool(np.all(w == np.round(w))) and float(np.sum(w)) < 2**30
    if oracle.task == "classification":
        if integral:
            return Fraction(0)
        return Fraction(1, 10**9) * optimum + Fraction(1, 10**12) * oracle.total_weight()
    return Fraction(1, 10**9) * optimum + Fraction(1, 10**12) * oracle.leaf(oracle.full)


def check_result(res, oracle: ExactOracle, depth: int, w, tight: bool = True) -> list[str]:
    """What is wrong with `res` as the solution of the oracle's problem (empty: nothing).

    Certificates, always: the tree within the tolerance of the optimum, the lower bound
    not above it, the objective the tree's loss; all up to the float64 rounding of the
    reported numbers (none for integer counts). `tight`: also the lower bound within the
    tolerance below the optimum, so the gap is the tolerance, as documented.
    """
    optimum = oracle.best(depth)
    tol = tolerance(oracle, optimum, w)
    loss = oracle.tree_loss(res.tree)
    rounding = Fraction(0) if tol == 0 else Fraction(1, 10**12) * (
        oracle.total_weight() if oracle.task == "classification" else oracle.leaf(oracle.full))
    lower = Fraction(res.lower_bound)
    problems = []
    if res.status != "optimal":
        problems.append(f"status {res.status}")
    if loss > optimum + tol:
        problems.append(f"tree loss {float(loss):.17g} > optimum {float(optimum):.17g} + tol")
    if lower > optimum + rounding:
        problems.append(f"lower bound {res.lower_bound:.17g} > optimum {float(optimum):.17g}")
    if abs(Fraction(res.objective) - loss) > rounding:
        problems.append(f"objective {res.objective:.17g} != tree loss {float(loss):.17g}")
    if tight and optimum - lower > tol + rounding:
        problems.append(f"lower bound {res.lower_bound:.17g} more than the tolerance "
                        f"{float(tol):.3g} below the optimum {float(optimum):.17g}")
    return problems


def run_case(index: int) -> tuple[str, str]:
    """`(family, outcome)`: outcome "solved", "refused", or what went wrong."""
    name, task, depth, X, y, w = make_case(index)
    allowed = FAMILIES[name][1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow or underflow warning either
            res = solve(X, y, task=task, depth=depth, sample_weight=w)
    except ValueError as err:
        message = str(err)
        if allowed is None or not re.match(allowed, message):
            return name, f"case {index}: refused: {message}"
        if "\n" in message:
            return name, f"case {index}: message spans lines"
        return name, "refused"
    if name in MUST_REFUSE:
        return name, f"case {index}: solved, should be refused"
    problems = check_result(res, ExactOracle(X, y, w, task), depth, w,
                            tight=name not in LOOSE_BOUNDS)
    if problems:
        return name, f"case {index} (depth {depth}): " + "; ".join(problems)
    return name, "solved"


def run_cases(count: int) -> None:
    outcomes: dict[str, list[str]] = {name: [] for name in FAMILIES}
    for index in range(count):
        name, outcome = run_case(index)
        outcomes[name].append(outcome)
    failures = [o for results in outcomes.values() for o in results
                if o not in ("solved", "refused")]
    assert not failures, failures
    for name, results in outcomes.items():  # every family was exercised as intended
        expected = "refused" if name in MUST_REFUSE else "solved"
        assert results and all(o == expected for o in results), (name, results)


def test_oracle_on_hand_examples():
    """The oracle itself: separable large integers, and the optimum of the issue's
    example of two integers float64 cannot tell apart."""
    X = np.array([[2**62 + 1], [2**62]], dtype=np.int64)
    oracle = ExactOracle(X, np.array([1, 0]), np.ones(2), "classification")
    assert oracle.best(0) == 1 and oracle.best(1) == 0
    X = np.array([[0.0], [1.0], [2.0]])
    y = np.array([0.0, 1.0, 3.0])
    w = np.array([1e-300, 1e-300, 2e-300])
    oracle = ExactOracle(X, y, w, "regression")
    # mean 7/4; in units of the float 1e-300: root 27/4, best stump 1/2 (split 0, 1 | 3)
    unit = Fraction(1e-300)
    assert oracle.best(0) == unit * Fraction(49, 16) + unit * Fraction(9, 16) + (
        2 * unit * Fraction(25, 16))
    assert oracle.best(1) == unit * Fraction(1, 2)


def test_exact_inputs_match_the_rational_brute_force():
    run_cases(DEFAULT_COUNT)


@pytest.mark.slow
def test_exact_inputs_match_the_rational_brute_force_1000():
    run_cases(FULL_COUNT)
