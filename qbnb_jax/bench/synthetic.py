"""Generated benchmark problems shaped like the hard held-out ones (no files needed).

Each is deterministic (seeded) and has real signal plus noise, so the search has
something to prune with and something to fight:

- `synth-reg1`: regression, 1 target, n = 8,000, p = 12;
- `synth-reg3`: regression, 3 correlated targets, n = 8,576, p = 5;
- `synth-class12`: 12 classes, n = 10,430, p = 10;
- `synth-class30`: 30 classes, n = 5,000, p = 8;
- `synth-reg3-large`: regression, 3 targets, n = 300,000, p = 8;
- `synth-class5-large`: 5 classes, n = 300,000, p = 10;
- `synth-class30-large`: 30 classes, n = 100,000, p = 20;
- `synth-reg1-wide`: regression, 1 target, n = 31,715, p = 59 (the shape of the
  paper's largest depth-2 regression set, "news");
- `synth-reg3-wide`: regression, 3 targets, n = 10,000, p = 40;
- `synth-reg1-mid`: regression, 1 target, n = 36,584, p = 9, and `synth-reg3-tall`:
  3 targets, n = 159,874, p = 4 (the shapes of the paper's "casp" and "query2", whose
  depth-3 solves took it 7,609 and 2,896 s);
- `synth-class5-wide`: 5 classes, n = 10,000, p = 100;
- `synth-class20-wide`: 20 classes, n = 20,000, p = 40;
- `synth-easy-class4`: 4 classes, n = 8,103, p = 16, and `synth-easy-class5-large`:
  5 classes, n = 53,940, p = 7: readings of two decimals (many ties), classes set by
  two thresholds, 3% label noise: easy data, where a peer's bounds end its search
  early and a solve's fixed costs and full sweeps show;
- `synth-easy-class3-tall`: the same with 3 classes, n = 200,000, p = 6, and
  `synth-easy-class3-huge`, n = 10^6: large n where little is left to prove;
- `synth-easy-class30-wide`: the same with 30 classes (the noise labels spread over
  all of them), n = 10,000, p = 30;
- `synth-ordinal-class30-wide`: 30 ordered classes (quantile bands of a noisy score of
  three features, like ratings or age bands), n = 10,000, p = 30: most features carry
  no class, and every side of a root cut mixes many classes;
- `synth-pixels`: two classes, n = 196,045 rows of p = 3 integer features 0..255
  drawn from 51,000 distinct rows (the shape of the paper's "skin" set: colour
  values that repeat), so most rows repeat another.

In the wide sets most features are noise: the search must prove them useless.

`python -m qbnb_jax.bench --datasets synth-reg1,...` runs them; `--check-regression`
compares the regression objectives with the numpy brute force and `--vs contree` the
classification ones with ConTree.
"""

from __future__ import annotations

import numpy as np


def _regression(n: int, p: int, targets: int, seed: int):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 3)
    signal = (np.where(X[:, 0] > 0.3, 2.0, -1.0) + np.where(X[:, 1] < -0.5, 1.5, 0.0)
              + 0.8 * np.tanh(X[:, 2 % p]) + 0.3 * X[:, 3 % p])
    y = np.stack([signal * (1.0 + 0.4 * k) + rng.normal(scale=1.0, size=n)
                  for k in range(targets)], axis=1)
    return X, (y[:, 0] if targets == 1 else y), "regression"


def _classification(n: int, p: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 3)
    score = X[:, 0] + 0.7 * X[:, 1] - 0.5 * np.abs(X[:, 2]) + 0.3 * rng.normal(size=n)
    bands = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    y = np.searchsorted(bands, score)
    flip = rng.random(n) < 0.25  # label noise
    y[flip] = rng.integers(0, classes, int(flip.sum()))
    return X, y.astype(np.int64), "classification"


def _easy_classification(n: int, p: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, p)), 2)
    # two axis-aligned thresholds set the class: a depth-2 tree nearly separates them
    y = np.minimum(2 * (X[:, 0] > 0.5) + (X[:, 1] > -0.3), classes - 1)
    flip = rng.random(n) < 0.03  # label noise
    y[flip] = rng.integers(0, classes, int(flip.sum()))
    return X, y.astype(np.int64), "classification"


def _ordinal_classification(n: int, p: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    score = X[:, 0] + 0.7 * X[:, 1] - 0.5 * X[:, 2] + rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    return X, y.astype(np.int64), "classification"


def _repeated_pixels(n: int, distinct: int, seed: int):
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, size=(distinct, 3)).astype(np.float64)
    score = 0.8 * pool[:, 0] - 0.5 * pool[:, 1] + 0.3 * pool[:, 2]
    score += rng.normal(scale=30.0, size=distinct)
    label = (score > np.quantile(score, 0.79)).astype(np.int64)
    rows = rng.integers(0, distinct, n)
    y = label[rows]
    flip = rng.random(n) < 0.02  # label noise: some repeats disagree
    y[flip] = 1 - y[flip]
    return pool[rows], y, "classification"


SYNTHETIC = {
    "synth-reg1": lambda: _regression(8000, 12, 1, seed=11),
    "synth-reg3": lambda: _regression(8576, 5, 3, seed=13),
    "synth-class12": lambda: _classification(10430, 10, 12, seed=17),
    "synth-class30": lambda: _classification(5000, 8, 30, seed=19),
    "synth-reg3-large": lambda: _regression(300_000, 8, 3, seed=23),
    "synth-class5-large": lambda: _classification(300_000, 10, 5, seed=29),
    "synth-class30-large": lambda: _classification(100_000, 20, 30, seed=31),
    "synth-reg1-wide": lambda: _regression(31_715, 59, 1, seed=37),
    "synth-reg3-wide": lambda: _regression(10_000, 40, 3, seed=41),
    "synth-reg1-mid": lambda: _regression(36_584, 9, 1, seed=71),
    "synth-reg3-tall": lambda: _regression(159_874, 4, 3, seed=73),
    "synth-class5-wide": lambda: _classification(10_000, 100, 5, seed=43),
    "synth-class20-wide": lambda: _classification(20_000, 40, 20, seed=47),
    "synth-easy-class4": lambda: _easy_classification(8103, 16, 4, seed=59),
    "synth-easy-class5-large": lambda: _easy_classification(53_940, 7, 5, seed=61),
    "synth-easy-class3-tall": lambda: _easy_classification(200_000, 6, 3, seed=89),
    "synth-easy-class3-huge": lambda: _easy_classification(1_000_000, 6, 3, seed=97),
    "synth-easy-class30-wide": lambda: _easy_classification(10_000, 30, 30, seed=79),
    "synth-ordinal-class30-wide": lambda: _ordinal_classification(10_000, 30, 30, seed=83),
    "synth-pixels": lambda: _repeated_pixels(196_045, 51_000, seed=53),
}


def load_synthetic(name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """`(X, y, task)` of generated problem `name` (a key of `SYNTHETIC`)."""
    return SYNTHETIC[name]()


def load_named(root, name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """`(X, y, task)` of a generated problem, or else of the dataset `name` of the
    datasets folder `root` (`datasets.load_dataset`)."""
    if name in SYNTHETIC:
        return load_synthetic(name)
    from qbnb_jax.bench.datasets import load_dataset

    return load_dataset(root, name)
