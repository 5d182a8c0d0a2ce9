"""Dataset loaders, the regression brute force and the benchmark command line.

Tests that read the real datasets (``../shared/datasets``, outside the repository) skip
when that folder is absent; the others use small synthetic files.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from qbnb_jax.bench import solve as bench
from qbnb_jax.bench.bruteforce import depth0_sse, depth1_sse, depth2_sse
from qbnb_jax.bench.datasets import find_datasets_dir, list_datasets, load_dataset

DATA_DIR = find_datasets_dir()
needs_data = pytest.mark.skipif(DATA_DIR is None, reason="../shared/datasets is absent")

# name: (task, n train, p as documented, classes / targets) from the datasets README
DOCUMENTED = {
    "bank": ("classification", 1097, 4, 2),
    "bean": ("classification", 10888, 16, 7),
    "bidding": ("classification", 5056, 9, 2),
    "eeg": ("classification", 11984, 14, 2),
    "fault": ("classification", 1552, 27, 7),
    "htru": ("classification", 14318, 8, 2),
    "magic": ("classification", 15216, 10, 2),
    "occupancy": ("classification", 8143, 5, 2),
    "page": ("classification", 4378, 10, 5),
    "raisin": ("classification", 720, 7, 2),
    "rice": ("classification", 3048, 7, 2),
    "segment": ("classification", 1848, 18, 7),
    "wilt": ("classification", 4339, 5, 2),
    "concrete": ("regression", 824, 8, 1),
    "fish": ("regression", 726, 6, 1),
    "qsar": ("regression", 436, 8, 1),
    "query1": ("regression", 8000, 3, 1),
}


# ---------------------------------------------------------------------------------------
# real datasets
# ---------------------------------------------------------------------------------------
@needs_data
def test_list_datasets_has_the_documented_ones():
    names = list_datasets(DATA_DIR)
    assert set(DOCUMENTED) <= set(names)
    # classification first, then regression
    tasks = [DOCUMENTED[n][0] for n in names if n in DOCUMENTED]
    assert tasks == sorted(tasks)


@needs_data
@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_load_documented_dataset(name):
    task, n, p, k = DOCUMENTED[name]
    X, y, got_task = load_dataset(DATA_DIR, name)
    assert got_task == task
    assert X.dtype == np.float64 and X.ndim == 2
    assert X.shape[0] == n
    assert 1 <= X.shape[1] <= p  # constant features may have been dropped
    assert np.isfinite(X).all()
    assert (X.max(0) > X.min(0)).all()  # no constant feature left
    assert y.shape == (n,)
    if task == "classification":
        assert np.issubdtype(y.dtype, np.integer)
        assert y.min() >= 0 and y.max() <= k - 1
        assert len(np.unique(y)) == k
    else:
        assert y.dtype == np.float64 and np.isfinite(y).all()


# ---------------------------------------------------------------------------------------
# synthetic files: both formats, constant features, folder discovery
# ---------------------------------------------------------------------------------------
def _write_fake_root(root):
    (root / "classification").mkdir(parents=True)
    (root / "regression").mkdir()
    Xc = [[0.1, 5.0, 0.3], [0.2, 5.0, 0.1], [0.4, 5.0, 0.2], [0.3, 5.0, 0.9]]
    (root / "classification" / "toyc.json").write_text(json.dumps(
        {"Xtrain": Xc, "Ytrain": [0, 1, 1, 2], "Xtest": [], "Ytest": [], "treetype": "C",
         "C": 3}))
    (root / "classification" / "toyt.txt").write_text(
        "1 0.5 0.0 0.25\n0 0.1 0.0 0.75\n1 0.9 0.0 0.5\n")
    (root / "regression" / "toyr.json").write_text(json.dumps(
        {"Xtrain": [[1.0, 2.0], [1.0, 3.0], [1.0, 1.0]], "Ytrain": [[0.5], [1.5], [2.5]],
         "treetype": "R", "C": 1}))
    (root / "regression" / "toym.json").write_text(json.dumps(
        {"Xtrain": [[1.0, 2.0], [2.0, 3.0], [3.0, 1.0]],
         "Ytrain": [[0.5, 1.0], [1.5, 0.0], [2.5, 2.0]], "treetype": "R", "C": 2}))


def test_loaders_on_synthetic_files(tmp_path):
    _write_fake_root(tmp_path)
    assert list_datasets(tmp_path) == ["toyc", "toyt", "toym", "toyr"]

    X, y, task = load_dataset(tmp_path, "toyc")
    assert task == "classification" and X.shape == (4, 2)  # the constant 5.0 is dropped
    np.testing.assert_array_equal(X[:, 1], [0.3, 0.1, 0.2, 0.9])
    np.testing.assert_array_equal(y, [0, 1, 1, 2])
    assert np.issubdtype(y.dtype, np.integer)

    X, y, task = load_dataset(tmp_path, "toyt")
    assert task == "classification" and X.shape == (3, 2)
    np.testing.assert_array_equal(y, [1, 0, 1])
    np.testing.assert_array_equal(X[:, 0], [0.5, 0.1, 0.9])

    X, y, task = load_dataset(tmp_path, "toyr")
    assert task == "regression" and X.shape == (3, 1) and y.shape == (3,)
    np.testing.assert_array_equal(y, [0.5, 1.5, 2.5])

    X, y, task = load_dataset(tmp_path, "toym")
    assert task == "regression" and X.shape == (3, 2) and y.shape == (3, 2)

    with pytest.raises(KeyError):
        load_dataset(tmp_path, "nope")


def test_find_datasets_dir(tmp_path, monkeypatch):
    assert find_datasets_dir(tmp_path / "missing") is None
    assert find_datasets_dir(tmp_path) == tmp_path.resolve()
    # default: ../shared/datasets relative to the working directory comes first
    work = tmp_path / "repo"
    work.mkdir()
    (tmp_path / "shared" / "datasets").mkdir(parents=True)
    monkeypatch.chdir(work)
    assert find_datasets_dir() == (tmp_path / "shared" / "datasets").resolve()


# ---------------------------------------------------------------------------------------
# the regression brute force against a literal enumeration
# ---------------------------------------------------------------------------------------
def _leaf(y, w):
    if w.sum() == 0:
        return 0.0
    mean = (w[:, None] * y).sum(0) / w.sum()
    return float((w[:, None] * (y - mean) ** 2).sum())


def _naive(X, y, w, depth):
    best = _leaf(y, w)
    if depth == 0:
        return best
    for f in range(X.shape[1]):
        for v in np.unique(X[:, f]):
            m = X[:, f] <= v
            best = min(best, _naive(X[m], y[m], w[m], depth - 1)
                       + _naive(X[~m], y[~m], w[~m], depth - 1))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_depth2_sse_matches_naive_enumeration(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 16))
    p = int(rng.integers(1, 4))
    m = 1 + seed % 2
    X = rng.integers(0, 5, size=(n, p)).astype(float)  # ties on purpose
    if seed % 3 == 0:
        X = rng.normal(size=(n, p))
    y = rng.normal(size=(n, m))
    w = np.ones(n) if seed % 4 else rng.integers(0, 4, n).astype(float)
    y_arg = y[:, 0] if m == 1 else y
    for depth, fn in ((0, depth0_sse), (1, depth1_sse), (2, depth2_sse)):
        want = _naive(X, y, w, depth)
        got = fn(X, y_arg, sample_weight=w)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (depth, got, want)


def test_depth2_sse_exhaustive_on_one_feature_pair():
    # every cut combination, written out: the optimum over root cut a and child cuts
    rng = np.random.default_rng(7)
    X = rng.normal(size=(9, 2))
    y = rng.normal(size=9)
    w = np.ones(9)
    cands = [_leaf(y[:, None], w)]
    for j, fl, fr in itertools.product(range(2), repeat=3):
        for a in X[:, j]:
            L = X[:, j] <= a
            for bl, br in itertools.product(X[:, fl], X[:, fr]):
                parts = [L & (X[:, fl] <= bl), L & (X[:, fl] > bl),
                         ~L & (X[:, fr] <= br), ~L & (X[:, fr] > br)]
                cands.append(sum(_leaf(y[q][:, None], w[q]) for q in parts))
    assert depth2_sse(X, y) == pytest.approx(min(cands), rel=1e-12, abs=1e-12)


# ---------------------------------------------------------------------------------------
# the benchmark command line
# ---------------------------------------------------------------------------------------
def test_bench_missing_data_dir_exits_zero(tmp_path, capsys):
    rc = bench.main(["--data-dir", str(tmp_path / "does-not-exist")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "not found" in out.lower()


def test_bench_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0
    assert "--vs" in capsys.readouterr().out


def test_bench_unknown_dataset_is_an_error(tmp_path, capsys):
    _write_fake_root(tmp_path)
    assert bench.main(["--data-dir", str(tmp_path), "--datasets", "nope"]) == 2
    assert "unknown dataset" in capsys.readouterr().err


def _table_rows(out: str) -> dict[str, dict[str, str]]:
    """The printed benchmark table's rows, by dataset, each as {column: cell}."""
    lines = [ln for ln in out.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[1:]]
    return {row["dataset"]: row for row in rows}


def _bench_table(tmp_path, capsys, *args: str):
    """`bench.main` on the fake datasets (`--no-cold --repeat 1`, then `args`), which
    must succeed: `(datasets root, printed output, _table_rows of it)`."""
    root = tmp_path / "data"
    _write_fake_root(root)
    assert bench.main(["--data-dir", str(root), "--no-cold", "--repeat", "1", *args]) == 0
    out = capsys.readouterr().out
    return root, out, _table_rows(out)


def test_bench_end_to_end_on_synthetic_files(tmp_path, capsys):
    root = tmp_path / "data"
    _write_fake_root(root)
    out_md = tmp_path / "table.md"
    rc = bench.main(["--data-dir", str(root), "--depth", "1", "--no-cold", "--repeat", "1",
                     "--vs", "contree", "--check-regression", "--output", str(out_md)])
    assert rc == 0
    rows = _table_rows(capsys.readouterr().out)
    assert len(rows) == 4  # one row per dataset
    assert rows["toyc"]["status"] == "optimal"
    if rows["toyc"]["ConTree s"] != "error":  # pycontree is optional
        assert rows["toyc"]["match"] == "yes"
    assert rows["toyr"]["match"] == "-"
    assert abs(float(rows["toyr"]["rel. diff"])) < 1e-9
    assert abs(float(rows["toym"]["rel. diff"])) < 1e-9
    assert out_md.read_text().count("| toy") == 4


def test_bench_vs_appendix_route(tmp_path, capsys):
    root, _, rows = _bench_table(tmp_path, capsys, "--depth", "3", "--vs", "appendix",
                                 "--datasets", "toyc,toyr")
    assert [row["match"] for row in rows.values()] == ["yes", "yes"]
    assert bench.main(["--data-dir", str(root), "--depth", "2", "--vs", "appendix"]) == 2
    assert "appendix route" in capsys.readouterr().err


def test_bench_class_balanced_weights(tmp_path, capsys):
    """`--weights balanced` solves the classification sets with class-balanced weights
    (their objective is the weighted loss the library reports) and skips regression."""
    import qbnb_jax

    root, out, rows = _bench_table(tmp_path, capsys, "--depth", "2", "--weights", "balanced",
                                   "--datasets", "toyc,toyr")
    assert list(rows) == ["toyc"] and "toyr: regression, skipped" in out
    row = rows["toyc"]
    X, y, task = load_dataset(root, "toyc")
    weighted = qbnb_jax.solve(X, y, task=task, depth=2, sample_weight=bench.balanced_weights(y))
    assert row["objective"] == bench._fmt_obj(weighted.objective, task)
    counts = np.bincount(np.unique(y, return_inverse=True)[1])
    assert np.allclose(np.bincount(np.unique(y, return_inverse=True)[1],
                                   weights=bench.balanced_weights(y)), len(y) / len(counts))
    assert bench.main(["--data-dir", str(root), "--weights", "balanced", "--vs",
                       "contree"]) == 2


def test_bench_random_fractional_weights(tmp_path, capsys):
    """`--weights random` solves both tasks with seeded fractional weights, and its loss
    check recomputes each objective from the tree's predictions."""
    import qbnb_jax

    root, _, rows = _bench_table(tmp_path, capsys, "--depth", "2", "--weights", "random",
                                 "--datasets", "toyc,toyr")
    assert set(rows) == {"toyc", "toyr"}
    for name, row in rows.items():
        X, y, task = load_dataset(root, name)
        weight = bench.sample_weights(y, "random")
        assert weight.min() >= 0.5 and weight.max() < 1.5 and len(np.unique(weight)) == len(y)
        assert np.array_equal(weight, bench.sample_weights(y, "random"))  # seeded
        res = qbnb_jax.solve(X, y, task=task, depth=2, sample_weight=weight)
        assert row["objective"] == bench._fmt_obj(res.objective, task)
        assert row["loss check"] == "ok"


def test_bench_weighted_loss_from_predictions():
    """The loss check's own arithmetic, on a stump whose losses are known by hand."""
    import qbnb_jax

    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    w = np.array([0.5, 1.0, 1.5, 2.0])
    y = np.array([0, 1, 1, 1])
    res = qbnb_jax.solve(X, y, task="classification", depth=1, sample_weight=w)
    assert bench.weighted_loss(res, X, y, "classification", w) == 0.0
    flipped = np.array([1, 1, 1, 1])  # the same tree scored on other labels
    assert bench.weighted_loss(res, X, flipped, "classification", w) == 0.5
    yr = np.array([0.0, 0.0, 1.0, 3.0])
    reg = qbnb_jax.solve(X, yr, task="regression", depth=1, sample_weight=w)
    # best split: {0, 1, 2} | {3}; the left mean (0 + 0 + 1.5) / 3 = 0.5
    want = 0.5 * 0.5**2 + 1.0 * 0.5**2 + 1.5 * 0.5**2
    assert np.isclose(bench.weighted_loss(reg, X, yr, "regression", w), want, rtol=1e-12)
    assert np.isclose(reg.objective, want, rtol=1e-9)


def test_bench_generated_problems_need_no_folder(tmp_path, capsys):
    from qbnb_jax.bench.synthetic import SYNTHETIC, load_synthetic

    for name in SYNTHETIC:  # deterministic
        X1, y1, _ = load_synthetic(name)
        X2, y2, _ = load_synthetic(name)
        assert np.array_equal(X1, X2) and np.array_equal(y1, y2)
    rc = bench.main(["--data-dir", str(tmp_path / "absent"), "--datasets", "synth-reg3",
                     "--depth", "1", "--no-cold", "--repeat", "0", "--check-regression"])
    out = capsys.readouterr().out
    assert rc == 0 and "synth-reg3" in out and "optimal" in out
    row = next(line for line in out.splitlines() if line.startswith("| synth-reg3"))
    rel = float(row.rstrip(" |").split("|")[-1])
    assert abs(rel) < 1e-9  # equal to the brute force


def test_bench_checks_a_subsample_beyond_the_brute_force_reach(tmp_path, capsys, monkeypatch):
    """Depth 2 on more distinct values than the brute force sweeps: both sides solve the
    same fixed subsample, and the row says so."""
    monkeypatch.setattr(bench, "BRUTE_FORCE_D2_CELLS", 1e6)
    rc = bench.main(["--data-dir", str(tmp_path / "absent"), "--datasets", "synth-reg3",
                     "--depth", "2", "--no-cold", "--repeat", "0", "--check-regression"])
    out = capsys.readouterr().out
    assert rc == 0
    row = next(line for line in out.splitlines() if line.startswith("| synth-reg3"))
    cells = [cell.strip() for cell in row.strip(" |").split("|")]
    size = int(cells[-1].split("(n=")[1].rstrip(")"))
    assert 40 <= size < 8576 and cells[-2].endswith(f"(n={size})")
    assert abs(float(cells[-1].split()[0])) < 1e-9  # equal to the brute force there
