"""The `qbnb` command line, end to end on temporary CSV files."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_iris

import qbnb_jax
from qbnb_jax import OptimalTreeClassifier, OptimalTreeRegressor
from qbnb_jax._cli import main

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture(scope="module")
def iris_data():
    X, y = load_iris(return_X_y=True)
    keep = np.arange(len(y)) % 5 != 0  # 120 rows
    X, y = X[keep], y[keep]
    labels = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    return X, labels


@pytest.fixture
def iris_csv(tmp_path, iris_data):
    X, labels = iris_data
    rows = [[*map(repr, x), label] for x, label in zip(X.tolist(), labels)]
    return write_csv(tmp_path / "iris.csv", [*FEATURES, "species"], rows)


def summary(stdout):
    return dict(line.split(": ", 1) for line in stdout.splitlines() if not line.startswith("|"))


def test_fit_predict_export_end_to_end(tmp_path, iris_csv, iris_data, capsys):
    X, labels = iris_data
    out = str(tmp_path / "tree.json")
    assert main(["fit", iris_csv, "--target", "species", "--output", out]) == 0
    captured = capsys.readouterr()
    assert "iter" in captured.err  # progress lines
    info = summary(captured.out)
    clf = OptimalTreeClassifier().fit(X, labels)
    assert info["task"] == "classification"
    assert float(info["objective"]) == clf.objective_
    assert float(info["lower bound"]) == clf.lower_bound_
    assert info["status"] == clf.status_ == "optimal"
    assert "|--- petal" in captured.out  # the tree, with the CSV's column names

    with open(out) as fh:
        saved = json.load(fh)
    assert saved["feature_names"] == FEATURES and saved["classes"] == list(clf.classes_)

    pred_path = str(tmp_path / "pred.csv")
    assert main(["predict", out, iris_csv, "--output", pred_path]) == 0
    with open(pred_path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["prediction"]
    assert [r[0] for r in rows[1:]] == list(clf.predict(X))

    capsys.readouterr()
    assert main(["export", out]) == 0
    text = capsys.readouterr().out
    assert text.startswith("|--- petal") and "class: setosa" in text
    assert main(["export", out, "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph Tree {")


def test_fit_regression_auto_and_quiet(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(50, 2))
    y = np.where(X[:, 0] > 0.5, 3.25, -1.5) + 0.1 * X[:, 1]
    path = write_csv(tmp_path / "reg.csv", ["a", "b", "y"], np.column_stack([X, y]).tolist())
    assert main(["fit", path, "--target", "y", "--depth", "1", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    info = summary(captured.out)
    assert info["task"] == "regression"
    reg = OptimalTreeRegressor(max_depth=1).fit(X, y)
    assert float(info["objective"]) == reg.objective_

    rows = np.column_stack([X, y, np.full(50, 2.0)]).tolist()
    path = write_csv(tmp_path / "weighted.csv", ["a", "b", "y", "w"], rows)
    assert main(["fit", path, "--target", "y", "--weight", "w", "--depth", "1", "-q"]) == 0
    weighted = summary(capsys.readouterr().out)
    assert float(weighted["objective"]) == pytest.approx(2 * reg.objective_)


def test_keyboard_interrupt_exits_130(iris_csv, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(qbnb_jax, "solve", interrupted)
    assert main(["fit", iris_csv, "--target", "species"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_help_on_every_command(capsys):
    for argv in (["--help"], ["fit", "--help"], ["predict", "--help"], ["export", "--help"]):
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "--target" in out and "integers with at most" in out


def test_python_dash_m():
    proc = subprocess.run(
        [sys.executable, "-m", "qbnb_jax", "export", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--format" in proc.stdout


def _bad_inputs(tmp_path, iris_csv):
    header = ",".join(FEATURES) + ",species\n"
    files = {
        "nonnumeric": header + "1,2,3,abc,x\n1,2,3,4,y\n",
        "nan": header + "1,2,3,nan,x\n1,2,3,4,y\n",
        "missing": header + "1,2,,4,x\n1,2,3,4,y\n",
        "ragged": header + "1,2,3,4\n",
        "empty": "",
        "headeronly": header,
    }
    paths = {}
    for name, text in files.items():
        paths[name] = str(tmp_path / f"{name}.csv")
        with open(paths[name], "w") as fh:
            fh.write(text)
    bad_json = str(tmp_path / "bad.json")
    with open(bad_json, "w") as fh:
        fh.write('{"format": "qbnb_jax.tree"')
    return {
        "missing file": (["fit", str(tmp_path / "nope.csv"), "--target", "y"], "nope.csv"),
        "missing column": (["fit", iris_csv, "--target", "colour"], "'colour'"),
        "non-numeric": (["fit", paths["nonnumeric"], "--target", "species"], "'abc'"),
        "nan": (["fit", paths["nan"], "--target", "species"], "non-finite"),
        "empty cell": (["fit", paths["missing"], "--target", "species"], "missing value"),
        "ragged": (["fit", paths["ragged"], "--target", "species"], "fields"),
        "empty file": (["fit", paths["empty"], "--target", "species"], "empty"),
        "no rows": (["fit", paths["headeronly"], "--target", "species"], "no data rows"),
        "regression on labels": (
            ["fit", iris_csv, "--target", "species", "--task", "regression"],
            "non-numeric",
        ),
        "depth 0": (["fit", iris_csv, "--target", "species", "--depth", "0"], "--depth"),
        "bad bound": (["fit", iris_csv, "--target", "species", "--bound", "zz"], "--bound"),
        "bad time": (["fit", iris_csv, "--target", "species", "--time-limit", "x"], "--time"),
        "unknown flag": (["fit", iris_csv, "--target", "species", "--frobnicate"], "frobnicate"),
        "no target": (["fit", iris_csv], "--target"),
        "no command": ([], "COMMAND"),
        "bad json": (["predict", bad_json, iris_csv], "not a valid JSON"),
        "missing tree": (["export", str(tmp_path / "none.json")], "none.json"),
        "bad format": (["export", bad_json, "--format", "png"], "--format"),
    }


def test_bad_input_exits_2_with_one_line(tmp_path, iris_csv, capsys):
    for case, (argv, needle) in _bad_inputs(tmp_path, iris_csv).items():
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, case
        assert err.count("\n") == 1 and "Traceback" not in err, (case, err)
        assert needle in err, (case, err)


def test_predict_requires_the_trees_columns(tmp_path, iris_csv, capsys):
    out = str(tmp_path / "tree.json")
    assert main(["fit", iris_csv, "--target", "species", "--depth", "1", "-q", "-o", out]) == 0
    other = write_csv(tmp_path / "other.csv", ["sepal_length", "x"], [[1, 2]])
    capsys.readouterr()
    assert main(["predict", out, other]) == 2
    err = capsys.readouterr().err
    assert "petal_length" in err and err.count("\n") == 1
