"""Loaders for the benchmark datasets kept outside the repository.

The datasets (training splits of the UCI datasets used by the Quant-BnB paper) live in
``../shared/datasets`` next to the repository and are never part of it; everything here
returns ``None`` / skips when the folder is absent. Layout::

    <root>/classification/<name>.json | <name>.txt
    <root>/regression/<name>.json

Formats:

- ``*.json``: keys ``Xtrain``, ``Ytrain`` (lists of rows), ``treetype`` (``"C"`` or
  ``"R"``) and ``C`` (number of classes, or number of regression targets). Regression rows
  of ``Ytrain`` are lists of length ``C``.
- ``*.txt``: space separated, no header; first column the integer class label, the rest
  the features (classification).

Features that are constant on the training set are dropped, as the paper does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["find_datasets_dir", "list_datasets", "load_dataset", "load_optima",
           "check_optimum", "DEFAULT_RELATIVE_DIR"]

DEFAULT_RELATIVE_DIR = Path("..") / "shared" / "datasets"
_SUBDIRS = ("classification", "regression")
_EXTS = (".json", ".txt")


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def find_datasets_dir(path: str | Path | None = None) -> Path | None:
    """The datasets folder, or ``None`` when it does not exist.

    With ``path`` given, that folder (if it exists). Otherwise ``../shared/datasets``
    relative to the current working directory, then relative to the repository root
    (found from this file's location).
    """
    if path is not None:
        p = Path(path).expanduser()
        return p.resolve() if p.is_dir() else None
    for base in (Path.cwd(), _repo_root()):
        p = base / DEFAULT_RELATIVE_DIR
        if p.is_dir():
            return p.resolve()
    return None


def _files(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for sub in _SUBDIRS:
        d = Path(root) / sub
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.is_file() and f.suffix in _EXTS and f.stem not in out:
                out[f.stem] = f
    return out


def list_datasets(root: str | Path) -> list[str]:
    """Dataset names under ``root``: classification ones first, each group sorted."""
    return list(_files(Path(root)))


def _drop_constant(X: np.ndarray) -> np.ndarray:
    if X.shape[0] == 0:
        return X
    keep = np.nanmax(X, axis=0) > np.nanmin(X, axis=0)
    return X[:, keep]


def load_dataset(root: str | Path, name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Training split of dataset ``name`` as ``(X, y, task)``.

    ``X`` is float64 ``(n, p)`` with constant features removed. ``task`` is
    ``"classification"`` (``y`` int64 ``(n,)``, labels as stored) or ``"regression"``
    (``y`` float64 ``(n,)`` for a single target, ``(n, m)`` for ``m`` targets).
    """
    files = _files(Path(root))
    stem = Path(name).stem
    if stem not in files:
        raise KeyError(f"no dataset {name!r} under {root} (have: {', '.join(files)})")
    f = files[stem]
    if f.suffix == ".txt":
        a = np.loadtxt(f, dtype=np.float64, ndmin=2)
        labels = a[:, 0]
        y = labels.astype(np.int64)
        if not np.array_equal(y, labels):
            raise ValueError(f"{f}: first column must hold integer class labels")
        return _drop_constant(np.ascontiguousarray(a[:, 1:])), y, "classification"

    with open(f) as fh:
        d = json.load(fh)
    X = np.asarray(d["Xtrain"], dtype=np.float64)
    if X.ndim != 2:
        X = X.reshape(len(d["Xtrain"]), -1)
    treetype = str(d.get("treetype", "C")).upper()
    if treetype == "C":
        raw = np.asarray(d["Ytrain"], dtype=np.float64).reshape(-1)
        y = raw.astype(np.int64)
        if not np.array_equal(y, raw):
            raise ValueError(f"{f}: classification labels must be integers")
        task = "classification"
    elif treetype == "R":
        y = np.asarray(d["Ytrain"], dtype=np.float64)
        n_targets = int(d.get("C", 1 if y.ndim == 1 else y.shape[1]))
        y = y.reshape(X.shape[0], -1)
        if y.shape[1] != n_targets:
            raise ValueError(f"{f}: Ytrain has {y.shape[1]} columns, C = {n_targets}")
        if n_targets == 1:
            y = y[:, 0]
        task = "regression"
    else:
        raise ValueError(f"{f}: unknown treetype {treetype!r}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"{f}: Xtrain has {X.shape[0]} rows, Ytrain {y.shape[0]}")
    return _drop_constant(X), np.ascontiguousarray(y), task


# Regression optima are sums of squares computed in another order: compare relatively.
OPTIMUM_RTOL = 1e-9


def load_optima(root: str | Path) -> dict[int, dict[str, float]]:
    """Proved optimal objectives by depth, from ``<root>/optima.json`` ({} if absent).

    The file maps ``"depth2"``, ``"depth3"``, ... to ``{dataset: objective}``.
    """
    f = Path(root) / "optima.json"
    if not f.is_file():
        return {}
    with open(f) as fh:
        raw = json.load(fh)
    return {int(key[len("depth"):]): {name: float(v) for name, v in table.items()}
            for key, table in raw.items() if key.startswith("depth") and key[5:].isdigit()}


def check_optimum(objective: float, optimum: float | None, task: str) -> bool | None:
    """Whether `objective` equals the proved `optimum` (None when there is none)."""
    if optimum is None:
        return None
    if task == "classification":
        return abs(objective - optimum) < 1e-6
    return bool(np.isclose(objective, optimum, rtol=OPTIMUM_RTOL, atol=1e-12))
