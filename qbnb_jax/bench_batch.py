"""Throughput of many small problems (``python -m qbnb_jax.bench_batch``).

P bootstrap samples of one synthetic dataset (a noisy two-feature XOR rule among p
features), each a depth-d classification problem, solved three ways in one run:

- **batched**: one `solve_batch` call, timed twice: the process's first call (its
  compile seconds, from the result's stats, reported apart and excluded; it still pays
  one-time costs such as loading the compiled kernels) and the median of `--repeat`
  further calls on the same problems (warm, as a program fitting many batches runs),
  half of them before the loops and half after, so that a machine whose speed drifts
  during the run weighs on both sides of the comparison;
- **loop**: `solve` once per problem;
- **ConTree loop** (``--vs contree``): pycontree once per problem, the bootstrap
  sample given as repeated rows.

Every objective is checked against the batched one. Prints a markdown table with
seconds, problems per second and the ratio to ConTree's loop.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from qbnb_jax import solve, solve_batch


def make_data(n: int, p: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = ((X[:, 0] > 0.3) ^ (X[:, 1] < -0.2)).astype(np.int64)
    flip = rng.random(n) < 0.15
    y[flip] = 1 - y[flip]
    return X, y


def bootstrap_weights(n: int, problems: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=problems).astype(np.float64)


def _contree_loop(X, y, W, depth):
    from pycontree import ConTree

    objectives = []
    start = time.perf_counter()
    for w in W:
        rows = np.repeat(np.arange(len(y)), w.astype(np.int64))
        model = ConTree(max_depth=depth)
        model.fit(X[rows], y[rows])
        objectives.append(float(np.sum(model.predict(X[rows]) != y[rows])))
    return time.perf_counter() - start, objectives


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m qbnb_jax.bench_batch",
        description="Solve P bootstrap problems batched, one by one, and (optionally) "
        "with a ConTree loop; print throughput as a markdown table.",
    )
    ap.add_argument("--problems", type=int, default=1000, help="number of problems P")
    ap.add_argument("--n", type=int, default=1000, help="samples per problem")
    ap.add_argument("--p", type=int, default=10, help="features")
    ap.add_argument("--depth", type=int, default=2, choices=(1, 2, 3), help="tree depth")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loop-problems", type=int, default=None,
                    help="problems timed in our own loop (default: all)")
    ap.add_argument("--vs", choices=("contree",), default=None,
                    help="also time a loop of pycontree's ConTree")
    ap.add_argument("--repeat", type=int, default=3,
                    help="warm solve_batch calls timed after the first, half before the "
                    "loops and half after (median reported)")
    args = ap.parse_args(argv)

    X, y = make_data(args.n, args.p, args.seed)
    W = bootstrap_weights(args.n, args.problems, args.seed)
    task = "classification"
    print(f"# {args.problems} problems, n={args.n}, p={args.p}, depth {args.depth}",
          file=sys.stderr)

    start = time.perf_counter()
    batched = solve_batch(X, y, W, task=task, depth=args.depth)
    batch_wall = time.perf_counter() - start
    compile_s = batched[0].stats["compile_seconds"]  # the batch's shared counters
    reference = [r.objective for r in batched]
    rows = [("solve_batch, first call (compile excluded)", len(W), batch_wall - compile_s,
             True)]

    def warm_calls(count: int) -> tuple[list[float], bool]:
        seconds, same = [], True
        for _ in range(count):
            start = time.perf_counter()
            again = solve_batch(X, y, W, task=task, depth=args.depth)
            seconds.append(time.perf_counter() - start)
            same &= [r.objective for r in again] == reference
            del again
        return seconds, same

    warm, warm_same = warm_calls(args.repeat - args.repeat // 2)

    # Our loop and ConTree's see the compiled kernels warm (a first solve compiles).
    solve(X, y, task=task, depth=args.depth, sample_weight=W[0])

    k = len(W) if args.loop_problems is None else min(args.loop_problems, len(W))
    start = time.perf_counter()
    loop = [solve(X, y, task=task, depth=args.depth, sample_weight=w).objective for w in W[:k]]
    rows.append(("solve loop", k, time.perf_counter() - start, loop == reference[:k]))

    contree_rate = None
    if args.vs == "contree":
        try:
            seconds, objectives = _contree_loop(X, y, W, args.depth)
        except ImportError as err:
            print(f"pycontree is not installed ({err}); pip install pycontree", file=sys.stderr)
        else:
            rows.append(("ConTree loop", len(W), seconds, objectives == reference))
            contree_rate = len(W) / seconds

    later, later_same = warm_calls(args.repeat // 2)
    if args.repeat > 0:
        rows.insert(1, (f"solve_batch, warm (median of {args.repeat})", len(W),
                        float(np.median(warm + later)), warm_same and later_same))

    print(f"solve_batch wall {batch_wall:.2f} s, of which compiling {compile_s:.2f} s")
    print()
    print("| method | problems | seconds | problems/s | vs ConTree loop | objectives match |")
    print("|---|---:|---:|---:|---:|:---:|")
    for name, count, seconds, match in rows:
        rate = count / seconds
        ratio = f"{rate / contree_rate:.2f}x" if contree_rate else "-"
        print(f"| {name} | {count} | {seconds:.2f} | {rate:.1f} | {ratio} | "
              f"{'yes' if match else 'NO'} |")
    return 0 if all(match for *_, match in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
