"""Throughput of many small problems (``python -m qbnb_jax.bench_batch``).

P weightings of one dataset, each a depth-d problem, solved three ways in one run:

- **batched**: one `solve_batch` call, timed twice: the process's first call (with its
  compiles and one-time costs such as loading the compiled kernels; the compile seconds
  from the result's stats, summed over threads, are printed apart) and the median of `--repeat`
  further calls on the same problems (warm, as a program fitting many batches runs),
  half of them before the loops and half after, so that a machine whose speed drifts
  during the run weighs on both sides of the comparison;
- **loop**: `solve` once per problem;
- **ConTree loop** (``--vs contree``, classification with integer weights): pycontree
  once per problem, each weighting given as repeated rows.

The data (`--source`): a synthetic problem (the default: a noisy two-feature XOR rule
among p features for two classes; `--classes K` bands of a noisy score; `--task
regression` with `--targets m`: a step signal plus noise), or `n` rows sampled from a
dataset of ``../shared/datasets`` (`--source page`) or of a generated benchmark set
(`--source synth-class12`, no files needed). The weightings (`--weights`):
bootstrap counts, 0/1 folds (each problem leaves out a random fifth), or fractional
(bootstrap counts times class-balanced weights for classification, times uniform
factors for regression).

Every objective is checked against the batched one: the loop's must be identical, and
ConTree's equal. Prints a markdown table with seconds, problems per second and the
ratio to ConTree's loop and to our own loop; exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from qbnb_jax import solve, solve_batch

WEIGHTINGS = ("bootstrap", "folds", "fractional")


def make_data(n: int, p: int, seed: int, *, task: str = "classification", classes: int = 2,
              targets: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic problem: signal in the first features, noise in labels or targets."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    if task == "regression":
        signal = np.where(X[:, 0] > 0.3, 2.0, -1.0) + np.where(X[:, 1 % p] < -0.5, 1.5, 0.0)
        y = np.stack([signal * (1 + 0.4 * k) + rng.normal(size=n) for k in range(targets)], 1)
        return X, y[:, 0] if targets == 1 else y
    if classes == 2:
        y = ((X[:, 0] > 0.3) ^ (X[:, 1 % p] < -0.2)).astype(np.int64)
        flip = rng.random(n) < 0.15
        y[flip] = 1 - y[flip]
        return X, y
    score = X[:, 0] + 0.7 * X[:, 1 % p] + 0.3 * rng.normal(size=n)
    y = np.searchsorted(np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]), score)
    flip = rng.random(n) < 0.2
    y[flip] = rng.integers(0, classes, int(flip.sum()))
    return X, y.astype(np.int64)


def sample_dataset(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """`n` rows (without replacement) of a dataset of ../shared/datasets or of a
    generated benchmark set (`bench/synthetic.py`, e.g. `synth-class12`)."""
    from qbnb_jax.bench.datasets import find_datasets_dir
    from qbnb_jax.bench.synthetic import SYNTHETIC, load_named

    root = find_datasets_dir()
    if root is None and name not in SYNTHETIC:
        raise SystemExit(f"--source {name}: the datasets folder ../shared/datasets is "
                         "absent (generated sets: " + ", ".join(SYNTHETIC) + ")")
    X, y, task = load_named(root, name)
    rows = np.sort(np.random.default_rng(seed).choice(len(X), min(n, len(X)), replace=False))
    keep = np.ptp(X[rows], axis=0) > 0  # features constant on the sample: never split
    return np.ascontiguousarray(X[rows][:, keep]), y[rows], task


def make_weights(kind: str, y: np.ndarray, task: str, problems: int, seed: int
                 ) -> np.ndarray:
    """`(problems, n)` weightings of one kind (see the module docstring)."""
    n = len(y)
    rng = np.random.default_rng(seed + 1)
    if kind == "folds":
        W = (rng.random((problems, n)) >= 0.2).astype(np.float64)
        W[W.sum(axis=1) == 0, 0] = 1.0
        return W
    W = rng.multinomial(n, np.full(n, 1.0 / n), size=problems).astype(np.float64)
    if kind == "bootstrap":
        return W
    if task == "classification":  # class-balanced: n / (classes * count of the class)
        _, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
        return W * (n / (len(counts) * counts))[codes]
    return W * np.round(rng.uniform(0.5, 2.0, size=(problems, n)), 3)


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
        description="Solve P weighted problems batched, one by one, and (optionally) "
        "with a ConTree loop; print throughput as a markdown table.",
    )
    ap.add_argument("--problems", type=int, default=1000, help="number of problems P")
    ap.add_argument("--n", type=int, default=1000, help="samples per problem")
    ap.add_argument("--p", type=int, default=10, help="features (synthetic source)")
    ap.add_argument("--depth", type=int, default=2, choices=(1, 2, 3), help="tree depth")
    ap.add_argument("--source", default="synthetic",
                    help="'synthetic', a dataset name of ../shared/datasets or a "
                    "generated set such as synth-class12 (sampled)")
    ap.add_argument("--task", choices=("classification", "regression"),
                    default="classification", help="task of the synthetic source")
    ap.add_argument("--classes", type=int, default=2, help="classes (synthetic)")
    ap.add_argument("--targets", type=int, default=1, help="regression targets (synthetic)")
    ap.add_argument("--weights", choices=WEIGHTINGS, default="bootstrap")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loop-problems", type=int, default=None,
                    help="problems timed in our own loop (default: all)")
    ap.add_argument("--vs", choices=("contree",), default=None,
                    help="also time a loop of pycontree's ConTree")
    ap.add_argument("--repeat", type=int, default=3,
                    help="warm solve_batch calls timed after the first, half before the "
                    "loops and half after (median reported)")
    args = ap.parse_args(argv)

    if args.source == "synthetic":
        task = args.task
        X, y = make_data(args.n, args.p, args.seed, task=task, classes=args.classes,
                         targets=args.targets)
    else:
        X, y, task = sample_dataset(args.source, args.n, args.seed)
    W = make_weights(args.weights, y, task, args.problems, args.seed)
    kind = (f"{len(np.unique(y))} classes" if task == "classification"
            else f"{1 if y.ndim == 1 else y.shape[1]} target(s)")
    print(f"# {args.problems} problems ({args.weights}), {args.source}, n={len(X)}, "
          f"p={X.shape[1]}, {kind}, depth {args.depth}", file=sys.stderr)

    start = time.perf_counter()
    batched = solve_batch(X, y, W, task=task, depth=args.depth)
    batch_wall = time.perf_counter() - start
    compile_s = batched[0].stats["compile_seconds"]  # the batch's shared counters
    reference = [r.objective for r in batched]
    # compile seconds are summed over the threads that compile, so they are printed
    # beside the first call's wall time rather than subtracted from it
    rows = [("solve_batch, first call (compiles included)", len(W), batch_wall, True)]

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
    loop_seconds = time.perf_counter() - start
    rows.append(("solve loop", k, loop_seconds, loop == reference[:k]))
    loop_rate = k / loop_seconds

    contree_rate = None
    integral = bool(np.all(W == np.round(W)))
    if args.vs == "contree" and task == "classification" and integral:
        try:
            seconds, objectives = _contree_loop(X, y, W, args.depth)
        except ImportError as err:
            print(f"pycontree is not installed ({err}); pip install pycontree", file=sys.stderr)
        else:
            rows.append(("ConTree loop", len(W), seconds, objectives == reference))
            contree_rate = len(W) / seconds
    elif args.vs == "contree":
        print("ConTree takes no fractional weights and no regression: not run", file=sys.stderr)

    later, later_same = warm_calls(args.repeat // 2)
    if args.repeat > 0:
        rows.insert(1, (f"solve_batch, warm (median of {args.repeat})", len(W),
                        float(np.median(warm + later)), warm_same and later_same))

    print(f"solve_batch wall {batch_wall:.2f} s, of which compiling {compile_s:.2f} s")
    print()
    print("| method | problems | seconds | problems/s | vs ConTree loop | vs our loop "
          "| objectives match |")
    print("|---|---:|---:|---:|---:|---:|:---:|")
    for name, count, seconds, match in rows:
        rate = count / seconds
        ratio = f"{rate / contree_rate:.2f}x" if contree_rate else "-"
        print(f"| {name} | {count} | {seconds:.2f} | {rate:.1f} | {ratio} | "
              f"{rate / loop_rate:.2f}x | {'yes' if match else 'NO'} |")
    return 0 if all(match for *_, match in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
