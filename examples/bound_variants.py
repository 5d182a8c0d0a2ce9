# %% [markdown]
# # Lower-bound variants: W0, W1, W2 and L2
#
# Quant-BnB proves optimality by pruning pieces of the search space whose *lower
# bound* exceeds the best tree found so far (paper, section 3). `qbnb_jax.solve`
# offers four bounds, ordered by strength (W0 <= W1 <= W2 <= L2):
#
# | bound | what it is | cost per piece |
# |---|---|---|
# | `"w0"` | drop the samples inside the root interval | O(n) per feature |
# | `"w1"` | W0 plus a coarse depth-2 fit of the dropped samples | O(n) per feature |
# | `"w2"` | W0 plus the exact depth-2 fit of the dropped samples | quadratic in the interval |
# | `"l2"` | the exact loss over the interval (exhaustive) | quadratic in the interval |
#
# A tighter bound prunes more (smaller frontier, fewer iterations) but costs more per
# piece. This notebook solves one depth-2 classification problem with each bound,
# records the search with a `progress=` callback (frontier size, incumbent, lower
# bound, elapsed time after every iteration), prints a comparison table and plots
# frontier size and time per iteration.
#
# Runs as a plain script (`python examples/bound_variants.py --help`) or as a notebook
# (the `# %%` cells open in Jupyter / VS Code). No download is needed: the default
# problem is synthetic. Options (command line, or environment variables when run as a
# notebook):
#
# - `--n` / `QBNB_BV_N`: number of samples (default 3000).
# - `--dataset` / `QBNB_BV_DATASET`: `synthetic` (default) or the name of a dataset in
#   `../shared/datasets` (e.g. `magic`), subsampled to `n` rows (`--n 0`: all rows).
# - `--out` / `QBNB_BV_OUT`: where to save the PNG (default `bound_variants.png`).
# - `--time-limit` / `QBNB_BV_TIME_LIMIT`: seconds per bound (default 120); a bound
#   that runs out returns its best tree with `status == "time_limit"`.
# - `--warmup`: solve each bound once first so the timings exclude JIT compilation.

# %%
import argparse
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")  # headless: the figure is written to a file
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402

import qbnb_jax  # noqa: E402
from qbnb_jax.bench import datasets as _datasets  # noqa: E402

BOUNDS = ("w0", "w1", "w2", "l2")


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__ or "Compare Quant-BnB lower bounds.")
    parser.add_argument("--n", type=int, default=int(env("QBNB_BV_N", 3000)),
                        help="number of samples (0: all rows of a stored dataset)")
    parser.add_argument("--dataset", default=env("QBNB_BV_DATASET", "synthetic"),
                        help="'synthetic' or a dataset name under ../shared/datasets")
    parser.add_argument("--out", default=env("QBNB_BV_OUT", "bound_variants.png"),
                        help="PNG output path")
    parser.add_argument("--time-limit", type=float,
                        default=float(env("QBNB_BV_TIME_LIMIT", 120.0)),
                        help="seconds per bound")
    parser.add_argument("--warmup", action="store_true",
                        default=env("QBNB_BV_WARMUP", "") not in ("", "0"),
                        help="solve each bound once first so timings exclude compilation")
    if "ipykernel" in sys.modules:  # inside a notebook: the kernel's argv is not ours
        argv = []
    return parser.parse_args(argv)


args = parse_args()

# %% [markdown]
# ## The problem
#
# A noisy binary problem: 10 features of which 4 informative and 2 redundant, 20% of
# the labels flipped. Noise keeps the optimum well away from zero, so the bounds have
# real work to do.

# %%
def load_problem(args):
    if args.dataset == "synthetic":
        X, y = make_classification(
            n_samples=args.n or 3000, n_features=10, n_informative=4, n_redundant=2,
            flip_y=0.2, class_sep=0.5, random_state=0,
        )
        return X, y, "synthetic (make_classification, seed 0)"
    root = _datasets.find_datasets_dir()
    if root is None:
        raise SystemExit(f"dataset {args.dataset!r} asked for, but ../shared/datasets is absent")
    X, y, task = _datasets.load_dataset(root, args.dataset)
    if task != "classification":
        raise SystemExit(f"{args.dataset!r} is a {task} dataset; this example classifies")
    if args.n and args.n < len(y):
        keep = np.sort(np.random.default_rng(0).choice(len(y), size=args.n, replace=False))
        X, y = X[keep], y[keep]
    return X, y, f"{args.dataset} (../shared/datasets)"


X, y, source = load_problem(args)
print(f"problem: {source}: n={X.shape[0]}, p={X.shape[1]}, classes={len(np.unique(y))}, "
      f"depth 2, time limit {args.time_limit:g} s per bound")

# %% [markdown]
# ## Solve with each bound, recording every iteration
#
# The `progress` callback receives a dict after every branch-and-bound iteration:
# `iteration`, `frontier` (tuples still alive after it), `incumbent` (best objective
# so far), `lower_bound` (proved), `gap` and `elapsed` (seconds since `solve` started,
# compilation included).

# %%
def run(bound: str):
    trace: list[dict] = []
    result = qbnb_jax.solve(X, y, task="classification", depth=2, bound=bound,
                            time_limit=args.time_limit, progress=trace.append)
    return result, trace


if args.warmup:  # compile every kernel once (results thrown away)
    for bound in BOUNDS:
        run(bound)

results, traces = {}, {}
for bound in BOUNDS:
    start = time.perf_counter()
    results[bound], traces[bound] = run(bound)
    r = results[bound]
    print(f"  {bound}: {r.status}, objective {r.objective:g}, "
          f"{time.perf_counter() - start:.2f} s", flush=True)

# %% [markdown]
# ## Per-iteration trace

# %%
for bound in BOUNDS:
    print(f"\n{bound}:  iter  frontier  incumbent  lower_bound  elapsed_s")
    for rec in traces[bound]:
        print(f"      {rec['iteration']:6d}  {rec['frontier']:8d}  {rec['incumbent']:9g}  "
              f"{rec['lower_bound']:11g}  {rec['elapsed']:9.3f}")

# %% [markdown]
# ## Comparison table
#
# `rows_evaluated` counts (root feature, child feature) rows swept on the device,
# `cut_evaluations` the root cuts evaluated over those rows; compile and solve seconds
# are reported apart (`compile_seconds` is near zero when JAX's persistent cache
# already holds the kernels).

# %%
header = (f"{'bound':<6}{'objective':>11}{'lower_bd':>11}{'status':>12}{'iters':>7}"
          f"{'peak_front':>12}{'rows_eval':>11}{'cut_evals':>11}{'compile_s':>11}{'solve_s':>9}")
print("\n" + header)
print("-" * len(header))
for bound in BOUNDS:
    r = results[bound]
    st = r.stats
    print(f"{bound:<6}{r.objective:>11g}{r.lower_bound:>11g}{r.status:>12}{st['iterations']:>7d}"
          f"{st['peak_frontier']:>12d}{st['rows_evaluated']:>11d}{st['cut_evaluations']:>11d}"
          f"{st['compile_seconds']:>11.2f}{st['solve_seconds']:>9.2f}")

# Every bound is exact: the optimal objective does not depend on it. A bound stopped by
# the time limit still returns a valid (objective, proved lower bound) bracket.
optimal = {b: r.objective for b, r in results.items() if r.status == "optimal"}
assert optimal, "no bound finished within the time limit; raise --time-limit"
best = min(optimal.values())
assert all(v == best for v in optimal.values()), f"bounds disagree: {optimal}"
for bound, r in results.items():
    assert r.lower_bound <= best + 1e-9 * max(1.0, abs(best)) <= r.objective + 2e-9 * max(
        1.0, abs(best)), (bound, r.lower_bound, best, r.objective)
if len(optimal) == len(BOUNDS):
    print(f"\nall four bounds reach the same optimal objective: {best:g}")
else:
    late = sorted(set(BOUNDS) - set(optimal))
    print(f"\noptimal objective {best:g} (from {', '.join(sorted(optimal))}); "
          f"{', '.join(late)} hit the time limit with consistent brackets")

# %% [markdown]
# ## Frontier size and time per iteration
#
# Left: tuples alive after each iteration (iteration 0 is the starting frontier, one
# tuple per root feature). Right: seconds spent in each iteration (log scale). The
# first iteration also holds data preparation and the greedy start, and any iteration
# may hold JIT compilation when it meets a new kernel shape for the first time (run
# with `--warmup` to exclude compilation).

# %%
fig, (ax_front, ax_time) = plt.subplots(1, 2, figsize=(11, 4.2))
for bound in BOUNDS:
    trace = traces[bound]
    its = [0] + [rec["iteration"] for rec in trace]
    ax_front.plot(its, [X.shape[1]] + [rec["frontier"] for rec in trace], marker="o",
                  label=bound)
    elapsed = np.array([rec["elapsed"] for rec in trace])
    ax_time.plot(its[1:], np.diff(elapsed, prepend=0.0), marker="o", label=bound)
ax_front.set(xlabel="iteration", ylabel="frontier size (alive tuples)",
             title="Frontier after each iteration")
ax_time.set(xlabel="iteration", ylabel="seconds", yscale="log",
            title="Time per iteration" + ("" if args.warmup else " (incl. JIT compile)"))
for ax in (ax_front, ax_time):
    ax.grid(alpha=0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(title="bound")
fig.suptitle(f"Quant-BnB depth 2 on {source.split(' ')[0]}, n={X.shape[0]}, p={X.shape[1]}")
fig.tight_layout()
out = os.path.abspath(args.out)
fig.savefig(out, dpi=110)
plt.close(fig)
print(f"plot written to {out}")

# %% [markdown]
# ## The leaf-count bound (three classes or more)
#
# With more classes than a side has leaves, `solve` also rules out root cuts by a
# bound that needs no sweep: a side of L leaves misclassifies at least its weight
# outside its L heaviest classes. `leaf_count_bound=False` turns it off, so W0's own
# pruning can be seen alone. Both give the same optimum; `cut_elements` (root cuts x
# samples swept) is the work each did.

# %%
# 30 features, 30 classes: two thresholds set the label (four classes), 3% of the rows
# relabelled at random among all 30
rng = np.random.default_rng(0)
X30 = np.round(rng.normal(size=(args.n or 3000, 30)), 2)
y30 = 2 * (X30[:, 0] > 0.5) + (X30[:, 1] > -0.3)
relabel = rng.random(len(y30)) < 0.03
y30[relabel] = rng.integers(0, 30, int(relabel.sum()))
print(f"\n30 classes: n={X30.shape[0]}, p={X30.shape[1]}")
print(f"{'leaf-count bound':<18}{'objective':>11}{'status':>10}{'cut_elements':>14}{'solve_s':>9}")
by_switch = {}
for on in (True, False):
    r = qbnb_jax.solve(X30, y30, task="classification", depth=2, leaf_count_bound=on,
                       time_limit=args.time_limit)
    by_switch[on] = r
    print(f"{'on' if on else 'off':<18}{r.objective:>11g}{r.status:>10}"
          f"{r.stats['cut_elements']:>14d}{r.stats['solve_seconds']:>9.2f}")
if all(r.status == "optimal" for r in by_switch.values()):
    assert by_switch[True].objective == by_switch[False].objective
    print(f"same optimum either way: {by_switch[True].objective:g}")
