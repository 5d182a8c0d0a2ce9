"""Large n: an exact depth-2 tree on a synthetic problem with a million samples.

The data has real signal: classification labels come from a planted depth-2 rule on
three features with 10% of the labels flipped; regression targets are a piecewise-
constant function of the same rule plus Gaussian noise. Every feature is continuous,
so each has (almost) n distinct values and n candidate thresholds.

Printed: the problem size, the solver's objective, proved lower bound, status,
iterations, compile and solve seconds, and the wall time of the solve call. Two
checks independent of the solver follow: the planted tree and scikit-learn's greedy
CART are both depth-2 trees, so the optimum can be no worse than either.

    python examples/large_n.py                      # n = 10^6, p = 10, classification
    python examples/large_n.py --task regression --n 100000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qbnb_jax

# The planted rule: root x0 <= 0.5, then x1 <= 0.3 on the left, x2 <= 0.7 on the right.
ROOT, LEFT, RIGHT = (0, 0.5), (1, 0.3), (2, 0.7)
NOISE = 0.1  # classification: share of flipped labels; regression: noise std


def planted_leaf(X: np.ndarray) -> np.ndarray:
    """Leaf index 0..3 of each sample in the planted tree."""
    root = X[:, ROOT[0]] <= ROOT[1]
    left = X[:, LEFT[0]] <= LEFT[1]
    right = X[:, RIGHT[0]] <= RIGHT[1]
    return np.where(root, np.where(left, 0, 1), np.where(right, 2, 3))


def make_data(n: int, p: int, seed: int, task: str) -> tuple[np.ndarray, np.ndarray]:
    if p < 3:
        raise SystemExit("--p must be at least 3 (the planted rule uses three features)")
    rng = np.random.default_rng(seed)
    X = rng.random((n, p))
    leaf = planted_leaf(X)
    if task == "classification":
        y = np.array([0, 1, 1, 0])[leaf]  # an XOR-like pattern across the root split
        flip = rng.random(n) < NOISE
        return X, np.where(flip, 1 - y, y)
    means = np.array([0.0, 1.0, 2.0, -1.0])
    return X, means[leaf] + NOISE * rng.standard_normal(n)


def leaf_objective(leaf: np.ndarray, y: np.ndarray, task: str) -> float:
    """Training loss of a partition with the best constant in each part."""
    total = 0.0
    for k in np.unique(leaf):
        part = y[leaf == k]
        if task == "classification":
            total += len(part) - np.bincount(part).max()
        else:
            total += float(((part - part.mean()) ** 2).sum())
    return float(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--p", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", choices=("classification", "regression"),
                        default="classification")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--quiet", action="store_true", help="no per-iteration progress")
    args = parser.parse_args()

    X, y = make_data(args.n, args.p, args.seed, args.task)
    print(f"n={args.n}, p={args.p}, task={args.task}, depth={args.depth}, seed={args.seed}")

    def progress(info: dict) -> None:
        print(f"  iteration {info['iteration']:3d}: frontier {info['frontier']:6d}, "
              f"incumbent {info['incumbent']:.10g}, gap {info['gap']:.4g}, "
              f"{info['elapsed']:.1f} s", flush=True)

    start = time.perf_counter()
    result = qbnb_jax.solve(X, y, task=args.task, depth=args.depth,
                            progress=None if args.quiet else progress)
    wall = time.perf_counter() - start
    st = result.stats
    print(f"objective:   {result.objective:.10g}")
    print(f"lower bound: {result.lower_bound:.10g}  (gap {result.gap:.3g})")
    print(f"status:      {result.status}")
    print(f"iterations:  {st['iterations']}  (peak frontier {st['peak_frontier']}, "
          f"tuples {st['tuples_explored']})")
    print(f"compile s:   {st['compile_seconds']:.2f}  ({st['compiles']} compiles)")
    print(f"solve s:     {st['solve_seconds']:.2f}")
    print(f"wall s:      {wall:.2f}  (solve call, data generation excluded)")

    # Checks independent of the solver: two depth-2 trees it must match or beat.
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    planted = leaf_objective(planted_leaf(X), y, args.task)
    model = DecisionTreeClassifier if args.task == "classification" else DecisionTreeRegressor
    cart = model(max_depth=args.depth, random_state=0).fit(X, y)
    cart_obj = leaf_objective(cart.apply(X), y, args.task)
    slack = 0.0 if args.task == "classification" else 1e-9 * max(planted, cart_obj)
    planted_ok = args.depth < 2 or result.objective <= planted + slack
    cart_ok = result.objective <= cart_obj + slack
    print(f"planted tree objective: {planted:.10g}  (optimum <= it: {planted_ok})")
    print(f"CART depth-{args.depth} objective: {cart_obj:.10g}  (optimum <= it: {cart_ok})")
    print(f"lower bound <= objective: {result.lower_bound <= result.objective}")
    if not (planted_ok and cart_ok and result.status == "optimal"):
        raise SystemExit("check failed")


if __name__ == "__main__":
    main()
