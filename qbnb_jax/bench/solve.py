"""Benchmark `qbnb_jax.solve` on the paper's datasets (``python -m qbnb_jax.bench``).

For each dataset:

- **cold s**: wall time of the first `solve` in a fresh Python process (a subprocess
  running this module with ``--_cold``), JAX backend start-up and compilation included
  (imports and data loading are not). That process may load
  executables from JAX's persistent compilation cache when one is configured
  (``--jax-cache`` or ``JAX_COMPILATION_CACHE_DIR``); the ``cache`` column says how many
  of its compile requests were served from it (``off`` when no cache is in use).
- **warm s**: best of ``--repeat`` solves in this process, after one untimed solve.
- **compile s**: ``stats["compile_seconds"]`` of the cold run.

With ``--vs contree``, pycontree's ConTree (same maximum depth, best of the same number
of fits, timed in this process) is run on the classification datasets and its training
misclassification count is compared with ours. With ``--vs appendix`` (depth 3), our
solver's other route, the paper's appendix algorithm, is timed the same way on every
dataset and its objective compared with ours. With ``--check-regression``, regression
objectives at depths 1 to 3 are compared with an independent numpy brute force
(`qbnb_jax.bench.bruteforce`, written from the definition alone), both on a fixed random
subsample where the whole data is out of the brute force's reach.

When the datasets folder holds ``optima.json`` (proved optima at depths 2 and 3), every
objective of a solve that finished is compared with it on any backend: the ``optimum``
column shows ``ok`` or ``MISMATCH (want ...)``, and any mismatch makes the exit status 1.

The datasets are not part of the repository; when their folder is absent a message is
printed and the exit status is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qbnb_jax._constants import BOUNDS
from qbnb_jax.bench import bruteforce
from qbnb_jax.bench.datasets import (
    DEFAULT_RELATIVE_DIR,
    check_optimum,
    find_datasets_dir,
    list_datasets,
    load_optima,
)
from qbnb_jax.bench.synthetic import SYNTHETIC, load_named

PROG = "python -m qbnb_jax.bench"
_COLD_MARK = "QBNB_BENCH_COLD_RESULT "
SUBSAMPLE_D3 = 40  # rows of the depth-3 regression cross-check (brute force is O(n^5))


WEIGHTS = ("none", "balanced", "random")
# `--weights random`: fractional weights of every path (float sums, the tolerance rule)
RANDOM_WEIGHTS = (0.5, 1.5)
RANDOM_WEIGHT_SEED = 2022


# The depth-2 brute force sweeps a (root value, child value) grid per feature pair, at
# most this many cells in all; beyond it, a fixed random subsample is checked instead.
BRUTE_FORCE_D2_CELLS = 4e9


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Time qbnb_jax.solve on the Quant-BnB paper's datasets (training splits) and "
            "print a markdown table. Cold = first solve in a fresh process (compilation "
            "included), warm = best of --repeat solves in this process."
        ),
    )
    ap.add_argument("--depth", type=int, choices=(1, 2, 3, 4), default=2,
                    help="tree depth (default 2)")
    ap.add_argument("--datasets", default=None, metavar="A,B,C",
                    help="comma separated dataset names (default: all in the folder); "
                         "generated ones, runnable without it: " + ", ".join(SYNTHETIC))
    ap.add_argument("--data-dir", default=None, metavar="DIR",
                    help=f"datasets folder (default: {DEFAULT_RELATIVE_DIR} relative to the "
                         "current directory, then to the repository root)")
    ap.add_argument("--bound", default="w0", choices=BOUNDS,
                    help="lower bound used for pruning (default w0)")
    ap.add_argument("--route", default="recursion", choices=("recursion", "appendix"),
                    help="depth-3 search route of our solver (default recursion)")
    ap.add_argument("--vs", default=None, choices=("contree", "appendix"),
                    help="also run a peer: 'contree' (pycontree, classification only) or "
                         "'appendix' (our depth-3 appendix route, both tasks)")
    ap.add_argument("--repeat", type=int, default=3, metavar="N",
                    help="timed warm solves per dataset, the best is reported (default 3; "
                         "0 skips warm timing)")
    ap.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="time limit in seconds per solve (ours and ConTree's)")
    ap.add_argument("--check-regression", action="store_true",
                    help="compare regression objectives with an independent numpy brute "
                         "force and print the relative difference (depth 3, and depth 2 "
                         "on many distinct values: both on a fixed random subsample, "
                         f"at depth 3 of {SUBSAMPLE_D3} rows)")
    ap.add_argument("--weights", default="none", choices=WEIGHTS,
                    help="sample weights: none; class-balanced (scikit-learn's "
                         "class_weight='balanced', n / (classes x class count): fractional; "
                         "regression sets are skipped); or random (fractional, each drawn "
                         f"uniformly from [{RANDOM_WEIGHTS[0]}, {RANDOM_WEIGHTS[1]}) with a "
                         "fixed seed, both tasks). Weighted runs add a 'loss check' column: "
                         "the reported objective against the tree's weighted loss recomputed "
                         "from its predictions")
    ap.add_argument("--no-cold", action="store_true",
                    help="skip the fresh-process cold runs (cold s and compile s then come "
                         "from the first solve in this process, marked with *)")
    ap.add_argument("--jax-cache", default=None, metavar="DIR",
                    help="JAX's persistent compilation cache in DIR (default: qbnb_jax's own, "
                         "$QBNB_JAX_CACHE_DIR or ~/.cache/qbnb_jax; see README)")
    ap.add_argument("--output", default=None, metavar="FILE.md",
                    help="also write the table (with a header of settings) to this file")
    ap.add_argument("--_cold", default=None, help=argparse.SUPPRESS)
    return ap


def _fail(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# solving
# ---------------------------------------------------------------------------------------
def _configure_jax_cache(path: str | None) -> None:
    if path is None:
        return
    import jax

    Path(path).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(Path(path).resolve()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


class _CacheCounter:
    """Counts JAX persistent compilation cache requests and hits (jax.monitoring events)."""

    def __init__(self) -> None:
        self.requests = 0
        self.hits = 0
        self._registered = False

    def __call__(self, event: str, **kwargs: Any) -> None:
        if event == "/jax/compilation_cache/compile_requests_use_cache":
            self.requests += 1
        elif event == "/jax/compilation_cache/cache_hits":
            self.hits += 1

    def register(self) -> None:
        try:
            import jax.monitoring

            jax.monitoring.register_event_listener(self)
            self._registered = True
        except Exception:  # pragma: no cover - monitoring API missing
            self._registered = False

    def describe(self) -> str:
        import jax

        if not jax.config.jax_compilation_cache_dir:
            return "off"
        if not self._registered:
            return "?"
        return f"{self.hits}/{self.requests} hit"


def _solve(X, y, task: str, args) -> tuple[float, Any]:
    from qbnb_jax import solve

    weight = sample_weights(y, args.weights)
    t0 = time.perf_counter()
    res = solve(X, y, task=task, depth=args.depth, bound=args.bound,
                time_limit=args.time_limit, route=args.route, sample_weight=weight)
    return time.perf_counter() - t0, res


def sample_weights(y: np.ndarray, kind: str) -> np.ndarray | None:
    """The sample weights of `--weights kind` for targets or labels `y`."""
    if kind == "balanced":
        return balanced_weights(y)
    if kind == "random":
        return np.random.default_rng(RANDOM_WEIGHT_SEED).uniform(*RANDOM_WEIGHTS, len(y))
    return None


def weighted_loss(res: Any, X, y, task: str, weight: np.ndarray) -> float:
    """The weighted training loss of `res`'s tree, from its predictions alone: an
    independent check of the objective the library sums itself (`host.tree_objective`)."""
    pred = np.asarray(res.predict(X))
    if task == "classification":
        return float(np.sum(weight[pred != np.asarray(y)]))
    residual = np.asarray(y, dtype=np.float64).reshape(len(y), -1) - pred.reshape(len(y), -1)
    return float(np.sum(weight[:, None] * residual**2))


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """scikit-learn's `class_weight="balanced"` as sample weights: n / (C n_c)."""
    _, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
    return (len(y) / (len(counts) * counts))[codes]


def _appendix(X, y, task: str, args) -> dict[str, Any]:
    """The depth-3 appendix route as a peer: best of `--repeat` after a first solve."""
    from qbnb_jax import solve

    times = []
    for _ in range(1 + max(args.repeat, 1)):
        t0 = time.perf_counter()
        res = solve(X, y, task=task, depth=3, time_limit=args.time_limit, route="appendix")
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times[1:]), "objective": float(res.objective),
            "status": res.status, "cut_elements": res.stats["cut_elements"]}


def _summary(res: Any) -> dict[str, Any]:
    stats = getattr(res, "stats", {}) or {}
    sizes = stats.get("frontier_sizes") or []
    peak = stats.get("peak_frontier", max(sizes) if len(sizes) else None)
    return {
        "objective": float(res.objective),
        "lower_bound": float(res.lower_bound),
        "gap": float(res.gap),
        "status": str(res.status),
        "compile_seconds": _maybe_float(stats.get("compile_seconds")),
        "iterations": stats.get("iterations"),
        "peak_frontier": None if peak is None else int(peak),
        "cut_elements": stats.get("cut_elements"),
    }


def _optimum_cell(runs: list[dict[str, Any]], want: float | None, task: str) -> str:
    """"ok", "MISMATCH ..." or "-": each run's objective (when it claims optimality) equals
    the proved optimum, and no run's objective or lower bound is on the wrong side of it."""
    if want is None:
        return "-"
    slack = 1e-6 if task == "classification" else 1e-9 * max(1.0, abs(want))
    for run in runs:
        if run["status"] == "optimal" and not check_optimum(run["objective"], want, task):
            return f"MISMATCH (optimum {_fmt_obj(want, task)})"
        if run["objective"] < want - slack or run["lower_bound"] > want + slack:
            return f"MISMATCH (optimum {_fmt_obj(want, task)}, bound {run['lower_bound']:g})"
    return "ok" if runs[0]["status"] == "optimal" else "ok (bracket)"


def _maybe_float(v) -> float | None:
    return None if v is None else float(v)


def _cold_main(args) -> int:
    """Child process: load one dataset, solve once, print a JSON line."""
    out: dict[str, Any] = {"name": args._cold}
    try:
        _configure_jax_cache(args.jax_cache)
        counter = _CacheCounter()
        counter.register()
        root = find_datasets_dir(args.data_dir)
        if root is None and args._cold not in SYNTHETIC:
            raise FileNotFoundError(f"datasets folder not found: {args.data_dir}")
        X, y, task = load_named(root, args._cold)
        # qbnb_jax and jax are imported already (this module is part of the package);
        # backend initialisation and compilation fall inside the timed first solve.
        seconds, res = _solve(X, y, task, args)
        out.update(_summary(res))
        out["seconds"] = seconds
        out["cache"] = counter.describe()
    except Exception as exc:  # reported in the table, the parent goes on
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(_COLD_MARK + json.dumps(out), flush=True)
    return 0


def _run_cold(name: str, root: Path | None, args) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "qbnb_jax.bench", "--_cold", name,
           "--depth", str(args.depth), "--bound", args.bound, "--route", args.route,
           "--weights", args.weights]
    if root is not None:
        cmd += ["--data-dir", str(root)]
    if args.time_limit is not None:
        cmd += ["--time-limit", repr(args.time_limit)]
    if args.jax_cache is not None:
        cmd += ["--jax-cache", str(Path(args.jax_cache).resolve())]
    env = dict(os.environ)
    # make the child import this very package even when it is not installed
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg_parent] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_COLD_MARK):
            return json.loads(line[len(_COLD_MARK):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"name": name, "error": f"cold process exited {proc.returncode}: " + " | ".join(tail)}


# ---------------------------------------------------------------------------------------
# ConTree and the regression brute force
# ---------------------------------------------------------------------------------------
def _brute_force_check(name: str, X, y, depth: int, summary) -> dict[str, str]:
    """The brute force's SSE and ours relative to it, on the whole data, or on a fixed
    random subsample (both solved there) where the whole is out of its reach: always at
    depth 3 (O(n^5)), at depth 2 above BRUTE_FORCE_D2_CELLS."""
    if depth > 3:
        return {}
    size = len(X) if depth < 3 else min(len(X), SUBSAMPLE_D3)

    def sample(size: int) -> np.ndarray:  # a fixed subsample of each size
        return np.random.default_rng(0).choice(len(X), size, replace=False)

    def cells(size: int) -> float:
        return float(sum(len(np.unique(column)) for column in X[sample(size)].T)) ** 2

    while depth == 2 and size > SUBSAMPLE_D3:
        grid = cells(size)
        if grid <= BRUTE_FORCE_D2_CELLS:
            break
        # distinct values grow more slowly than rows: shrink until the grid fits
        size = max(SUBSAMPLE_D3, min(size // 2 + 1,
                                     int(size * (BRUTE_FORCE_D2_CELLS / grid) ** 0.5)))
    brute = {1: bruteforce.depth1_sse, 2: bruteforce.depth2_sse, 3: bruteforce.depth3_sse}
    t0 = time.perf_counter()
    if size == len(X):
        ref = brute[depth](X, y)
        ours = None if summary is None else summary["objective"]
        suffix = ""
        _log(f"{name}: brute force SSE {ref:.10g} in {time.perf_counter() - t0:.2f}s")
    else:
        from qbnb_jax import solve

        idx = sample(size)
        ref = brute[depth](X[idx], y[idx])
        ours = solve(X[idx], y[idx], task="regression", depth=depth).objective
        suffix = f" (n={size})"
        _log(f"{name}: subsample of {size}: brute force SSE {ref:.10g}, ours {ours:.10g} "
             f"({time.perf_counter() - t0:.1f}s)")
    out = {"brute-force SSE": f"{ref:.10g}{suffix}"}
    if ours is not None:
        out["rel. diff"] = f"{(ours - ref) / max(abs(ref), 1e-300):.2e}{suffix}"
    return out


def _contree(X, y, depth: int, repeat: int, time_limit: float | None) -> dict[str, Any]:
    try:
        from pycontree import ConTree
    except ImportError as exc:
        return {"error": f"pycontree not installed ({exc})"}
    _, y_enc = np.unique(y, return_inverse=True)
    y_enc = y_enc.reshape(-1).astype(np.int32)
    Xc = np.ascontiguousarray(X, dtype=np.float64)
    best = np.inf
    timed_out = False
    model = None
    for _ in range(max(1, repeat)):
        model = ConTree(max_depth=depth, time_limit=600.0 if time_limit is None else time_limit)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            model.fit(Xc, y_enc)
            best = min(best, time.perf_counter() - t0)
        timed_out |= any("time limit" in str(w.message).lower() for w in caught)
    pred = np.asarray(model.predict(Xc)).reshape(-1)
    return {"seconds": best, "objective": float(np.sum(pred != y_enc)), "timed_out": timed_out}


# ---------------------------------------------------------------------------------------
# table
# ---------------------------------------------------------------------------------------
def _fmt_s(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _fmt_obj(v, task: str) -> str:
    if v is None:
        return "-"
    if task == "classification" and float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.10g}"


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    right = [i > 0 for i in range(len(headers))]

    def line(cells):
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if right[i] else c.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if right[i] else ("-" * (w + 2))
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(headers), sep] + [line(r) for r in rows])


def _environment(args) -> str:
    try:
        import jax

        dev = jax.devices()[0]
        jax_txt = f"jax {jax.__version__}, device {dev.platform} ({dev.device_kind})"
    except Exception as exc:  # pragma: no cover
        jax_txt = f"jax unavailable ({exc})"
    when = datetime.datetime.now().isoformat(timespec="seconds")
    cache = args.jax_cache or os.environ.get("JAX_COMPILATION_CACHE_DIR") or (
        "qbnb_jax default ($QBNB_JAX_CACHE_DIR or ~/.cache/qbnb_jax)"
    )
    return (f"{when}; {platform.node()}; {platform.machine()}, {os.cpu_count()} CPUs; "
            f"Python {platform.python_version()}; {jax_txt}; depth {args.depth}, "
            f"bound {args.bound}, weights {args.weights}, repeat {args.repeat}, "
            f"time limit {args.time_limit}, "
            f"persistent compilation cache: {cache}")


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args._cold is not None:
        return _cold_main(args)
    if args.repeat < 0:
        return _fail("--repeat must be >= 0")
    if args.time_limit is not None and not args.time_limit > 0:
        return _fail("--time-limit must be positive")
    if (args.route == "appendix" or args.vs == "appendix") and (args.depth != 3
                                                                  or args.bound != "w0"):
        return _fail("the appendix route solves --depth 3 with --bound w0 only")
    if args.weights != "none" and (args.vs is not None or args.check_regression):
        return _fail(f"--weights {args.weights} takes no --vs or --check-regression "
                     "(ConTree takes no fractional weights; optima.json and the brute force "
                     "are unweighted)")

    root = find_datasets_dir(args.data_dir)
    asked = [s.strip() for s in (args.datasets or "").split(",") if s.strip()]
    if root is None and not (asked and all(name in SYNTHETIC for name in asked)):
        where = args.data_dir if args.data_dir is not None else (
            f"{DEFAULT_RELATIVE_DIR} (relative to {Path.cwd()} or to the repository root)")
        print(f"Datasets folder not found: {where}; nothing to benchmark "
              f"(generated problems need no folder: --datasets {','.join(SYNTHETIC)}).")
        return 0
    real = list_datasets(root) if root is not None else []
    available = real + list(SYNTHETIC)  # generated problems run only when named
    if args.datasets:
        names = asked
        unknown = [s for s in names if s not in available]
        if unknown:
            return _fail(f"unknown dataset(s) {', '.join(unknown)}; available: "
                         f"{', '.join(available)}")
    else:
        names = real
    if not names:
        print(f"No datasets found in {root}; nothing to benchmark.")
        return 0

    _configure_jax_cache(args.jax_cache)

    optima = (load_optima(root) if root is not None else {}).get(args.depth, {})
    mismatches: list[str] = []
    headers = ["dataset", "n", "p", "classes/targets", "objective", "optimum", "status",
               "cold s",
               "warm s", "compile s", "iterations", "peak frontier", "M cut-elements",
               "cache"]
    if args.vs == "contree":
        headers += ["ConTree s", "ConTree objective", "ours/ConTree (warm)", "match"]
    if args.vs == "appendix":
        headers += ["appendix s", "appendix objective", "appendix M cut-elements",
                    "ours/appendix (warm)", "match"]
    if args.check_regression:
        headers += ["brute-force SSE", "rel. diff"]
    if args.weights != "none":
        headers += ["loss check"]
    rows: list[list[str]] = []
    notes: list[str] = []

    for name in names:
        X, y, task = load_named(root, name)
        n, p = X.shape
        k = len(np.unique(y)) if task == "classification" else (1 if y.ndim == 1 else y.shape[1])
        row = {"dataset": name, "n": str(n), "p": str(p), "classes/targets": str(k)}
        _log(f"{name}: n={n} p={p} {task}")
        if args.weights == "balanced" and task != "classification":
            notes.append(f"{name}: regression, skipped (--weights {args.weights})")
            continue

        # cold run in a fresh process (or in-process with --no-cold)
        cold: dict[str, Any]
        if args.no_cold:
            cold = {}
        else:
            cold = _run_cold(name, root, args)
            if "error" in cold:
                _log(f"{name}: cold run failed: {cold['error']}")
                notes.append(f"{name}: {cold['error']}")
            else:
                _log(f"{name}: cold {cold['seconds']:.3f}s objective {cold['objective']:.10g}")

        # warm runs in this process
        warm_best = None
        summary = None
        first = None
        if args.repeat > 0 or args.no_cold:
            try:
                first_s, res = _solve(X, y, task, args)
                first = (first_s, _summary(res))
                times = []
                for _ in range(args.repeat):
                    t, res = _solve(X, y, task, args)
                    times.append(t)
                summary = _summary(res)
                warm_best = min(times) if times else None
                if args.weights != "none":
                    loss = weighted_loss(res, X, y, task, sample_weights(y, args.weights))
                    row["loss check"] = "ok"
                    if not np.isclose(loss, res.objective, rtol=1e-9, atol=0):
                        row["loss check"] = f"MISMATCH ({loss!r})"
                        mismatches.append(f"{name}: objective {res.objective!r}, tree's "
                                          f"weighted loss {loss!r}")
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                _log(f"{name}: solve failed: {msg}")
                notes.append(f"{name}: {msg}")
        if summary is None and first is not None:
            summary = first[1]
        if summary is None and "error" not in cold and cold:
            summary = cold

        if summary is not None:
            obj = summary["objective"]
            if cold and "error" not in cold and not np.isclose(cold["objective"], obj,
                                                                rtol=1e-9, atol=1e-12):
                notes.append(f"{name}: cold objective {cold['objective']!r} != warm {obj!r}")
            row["objective"] = _fmt_obj(obj, task)
            row["status"] = summary["status"]
            want = optima.get(name) if args.weights == "none" else None  # unweighted optima
            runs = [summary] + ([cold] if cold and "error" not in cold else [])
            row["optimum"] = _optimum_cell(runs, want, task)
            if row["optimum"].startswith("MISMATCH"):
                mismatches.append(f"{name}: {row['optimum']}, got objective {obj!r}")
            row["iterations"] = "-" if summary["iterations"] is None else str(
                summary["iterations"])
            row["peak frontier"] = "-" if summary["peak_frontier"] is None else str(
                summary["peak_frontier"])
            elements = summary.get("cut_elements")
            row["M cut-elements"] = "-" if elements is None else f"{elements / 1e6:.1f}"
        else:
            row["status"] = "error"
        if args.no_cold and first is not None:
            row["cold s"] = _fmt_s(first[0]) + "*"
            row["compile s"] = _fmt_s(first[1]["compile_seconds"]) + "*"
            row["cache"] = "-"
        elif cold and "error" not in cold:
            row["cold s"] = _fmt_s(cold["seconds"])
            row["compile s"] = _fmt_s(cold["compile_seconds"])
            row["cache"] = cold.get("cache", "?")
        row["warm s"] = _fmt_s(warm_best)
        if warm_best is not None:
            _log(f"{name}: warm best of {args.repeat}: {warm_best:.3f}s")

        if args.vs == "contree":
            if task != "classification":
                row.update({"ConTree s": "-", "ConTree objective": "-",
                            "ours/ConTree (warm)": "-", "match": "-"})
            else:
                _log(f"{name}: ConTree depth {args.depth}")
                ct = _contree(X, y, args.depth, args.repeat, args.time_limit)
                if "error" in ct:
                    notes.append(f"{name}: ConTree: {ct['error']}")
                    row.update({"ConTree s": "error", "ConTree objective": "-",
                                "ours/ConTree (warm)": "-", "match": "-"})
                else:
                    _log(f"{name}: ConTree {ct['seconds']:.3f}s objective {ct['objective']:.0f}")
                    row["ConTree s"] = _fmt_s(ct["seconds"]) + (" (TL)" if ct["timed_out"] else "")
                    row["ConTree objective"] = _fmt_obj(ct["objective"], task)
                    ours_t = warm_best if warm_best is not None else (
                        cold.get("seconds") if cold else None)
                    row["ours/ConTree (warm)"] = (
                        "-" if ours_t is None or ct["seconds"] <= 0
                        else f"{ours_t / ct['seconds']:.2f}")
                    row["match"] = "-" if summary is None else (
                        "yes" if abs(summary["objective"] - ct["objective"]) < 1e-6 else "NO")

        if args.vs == "appendix":
            _log(f"{name}: appendix route")
            ap = _appendix(X, y, task, args)
            _log(f"{name}: appendix {ap['seconds']:.3f}s objective {ap['objective']:.10g}")
            row["appendix s"] = _fmt_s(ap["seconds"]) + (
                "" if ap["status"] == "optimal" else " (TL)")
            row["appendix objective"] = _fmt_obj(ap["objective"], task)
            row["appendix M cut-elements"] = f"{ap['cut_elements'] / 1e6:.1f}"
            row["ours/appendix (warm)"] = (
                "-" if warm_best is None else f"{warm_best / ap['seconds']:.2f}")
            row["match"] = "-" if summary is None else (
                "yes" if np.isclose(summary["objective"], ap["objective"], rtol=1e-9,
                                    atol=1e-12) else "NO")

        if args.check_regression:
            row["brute-force SSE"], row["rel. diff"] = "-", "-"
            if task == "regression":
                row.update(_brute_force_check(name, X, y, args.depth, summary))
        rows.append([row.get(h, "-") for h in headers])

    table = _markdown(headers, rows)
    print(table)
    notes = list(dict.fromkeys(notes))  # the cold and warm runs may fail alike
    for note in notes:
        print(f"\nNote: {note}")
    if optima and args.weights == "none":
        checked = sum(r[headers.index("optimum")] != "-" for r in rows)
        print(f"\nChecked against optima.json: {checked} of {len(rows)} datasets, "
              f"{len(mismatches)} mismatch(es).")
    for mismatch in mismatches:
        print(f"MISMATCH: {mismatch}", file=sys.stderr)
    if args.output:
        text = (f"# qbnb_jax benchmark\n\n{_environment(args)}\n\n"
                f"Command: `{PROG} {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
                + table + "\n" + "".join(f"\nNote: {n}\n" for n in notes))
        with contextlib.suppress(FileNotFoundError):
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
        _log(f"table written to {args.output}")
    return 1 if mismatches else 0
