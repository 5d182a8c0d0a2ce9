"""How well `time_limit` is kept (``python -m qbnb_jax.bench.anytime``): a markdown table.

For each dataset, depth and limit, a fresh Python process (a subprocess running this
module with ``--_one``) loads the data and calls `qbnb_jax.solve` twice with the same
`time_limit`: the **first** call pays for JAX's start-up and compilation, the **warm**
one follows in the same process (an abandoned worker of the first call may still be
finishing a compile then: docs/design.md, "Anytime behaviour"). Each shows the seconds
the call took, the objective, the proved lower bound and the relative gap. pycontree's
ConTree, with the same depth and limit, runs in the same process on the classification
problems. By default the children use no persistent compilation cache (the worst
case: everything compiles); ``--disk-cache`` keeps it.

Problems: ``eeg``, ``bean`` and ``fault`` from the datasets folder (skipped when it is
absent) and ``random``, n = 20,000, p = 20, 5 classes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qbnb_jax.bench.datasets import DEFAULT_RELATIVE_DIR, find_datasets_dir, load_dataset

PROG = "python -m qbnb_jax.bench.anytime"
_MARK = "@@anytime "
DATASETS = ("eeg", "bean", "fault", "random")


def random_problem(n: int = 20_000, p: int = 20, classes: int = 5, seed: int = 0):
    """Noisy labels over a few features: a search that runs long at depths 3 and 4."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 3)
    score = X[:, 0] + 0.7 * X[:, 1] - 0.5 * np.abs(X[:, 2]) + 0.5 * rng.normal(size=n)
    y = np.searchsorted(np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]), score)
    flip = rng.random(n) < 0.25
    y[flip] = rng.integers(0, classes, int(flip.sum()))
    return X, y.astype(np.int64), "classification"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), metavar="NAME")
    ap.add_argument("--depths", nargs="+", type=int, default=[2, 3, 4])
    ap.add_argument("--limits", nargs="+", type=float, default=[1.0, 5.0, 20.0])
    ap.add_argument("--data-dir", default=None,
                    help=f"datasets folder (default: {DEFAULT_RELATIVE_DIR} from the repository)")
    ap.add_argument("--no-contree", action="store_true", help="skip ConTree")
    ap.add_argument("--disk-cache", action="store_true",
                    help="let the children use the persistent compilation cache")
    ap.add_argument("--_one", nargs=3, metavar=("NAME", "DEPTH", "LIMIT"), help=argparse.SUPPRESS)
    return ap


def _load(name: str, root: Path | None):
    return random_problem() if name == "random" else load_dataset(root, name)


def _timed_solve(X, y, task: str, depth: int, limit: float) -> dict[str, Any]:
    from qbnb_jax import solve

    start = time.perf_counter()
    res = solve(X, y, task=task, depth=depth, time_limit=limit)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "objective": res.objective, "lower_bound": res.lower_bound,
            "status": res.status}


def _contree(X, y, depth: int, limit: float) -> dict[str, Any]:
    try:
        from pycontree import ConTree
    except ImportError as exc:
        return {"error": f"pycontree not installed ({exc})"}
    _, codes = np.unique(y, return_inverse=True)
    codes = codes.reshape(-1).astype(np.int32)
    model = ConTree(max_depth=depth, time_limit=limit)
    start = time.perf_counter()
    model.fit(np.ascontiguousarray(X, dtype=np.float64), codes)
    seconds = time.perf_counter() - start
    pred = np.asarray(model.predict(np.ascontiguousarray(X, dtype=np.float64))).reshape(-1)
    return {"seconds": seconds, "objective": float(np.sum(pred != codes))}


def _one(args) -> int:
    """Child process: the first and the warm solve (and ConTree) of one cell."""
    name, depth, limit = args._one[0], int(args._one[1]), float(args._one[2])
    out: dict[str, Any] = {}
    try:
        X, y, task = _load(name, find_datasets_dir(args.data_dir))
        out["first"] = _timed_solve(X, y, task, depth, limit)
        out["warm"] = _timed_solve(X, y, task, depth, limit)
        if task == "classification" and not args.no_contree:
            out["contree"] = _contree(X, y, depth, limit)
    except Exception as exc:  # reported in the table; the parent goes on
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(_MARK + json.dumps(out), flush=True)
    os._exit(0)  # an abandoned search worker must not delay the exit


def _run_one(name: str, depth: int, limit: float, root: Path | None, args) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "qbnb_jax.bench.anytime", "--_one", name, str(depth),
           str(limit)]
    if root is not None:
        cmd += ["--data-dir", str(root)]
    if args.no_contree:
        cmd.append("--no-contree")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2])] + ([env["PYTHONPATH"]]
                                                      if env.get("PYTHONPATH") else []))
    if not args.disk_cache:
        env["QBNB_JAX_CACHE_DIR"] = "0"
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
    return {"error": f"exited {proc.returncode}: " + " | ".join(tail)}


def _cell(run: dict[str, Any] | None) -> list[str]:
    if not run:
        return ["-"] * 4
    objective, lower = run["objective"], run["lower_bound"]
    gap = (objective - lower) / objective if objective > 0 else 0.0
    return [f"{run['seconds']:.2f}", f"{objective:.6g}", f"{lower:.6g}", f"{gap:.1%}"]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args._one:
        return _one(args)
    root = find_datasets_dir(args.data_dir)
    names = [name for name in args.datasets if name == "random" or root is not None]
    if len(names) < len(args.datasets):
        print(f"datasets folder not found: only {names} run", file=sys.stderr)
    headers = ["problem", "depth", "limit s",
               "first s", "first obj", "first LB", "first gap",
               "warm s", "warm obj", "warm LB", "warm gap", "ConTree s", "ConTree obj"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    print(lines[0] + "\n" + lines[1], flush=True)
    for name in names:
        for depth in args.depths:
            for limit in args.limits:
                out = _run_one(name, depth, limit, root, args)
                if "error" in out:
                    row = [name, str(depth), f"{limit:g}", out["error"]] + [""] * 9
                else:
                    ct = out.get("contree") or {}
                    row = [name, str(depth), f"{limit:g}", *_cell(out.get("first")),
                           *_cell(out.get("warm")),
                           f"{ct['seconds']:.2f}" if "seconds" in ct else "-",
                           f"{ct['objective']:.6g}" if "objective" in ct else "-"]
                print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
