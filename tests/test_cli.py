"""The `qbnb` command line, end to end on temporary CSV files."""

import csv
import json
import pathlib
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
        "inf": header + "1,2,3,inf,x\n1,2,3,4,y\n",
        "missing": header + "1,2,3,4,\n1,2,3,4,y\n",
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
        "inf": (["fit", paths["inf"], "--target", "species"], "non-finite"),
        "empty target cell": (["fit", paths["missing"], "--target", "species"], "missing value"),
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


# -- predict: columns of a tree without feature names ------------------------------------


def predictions(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["prediction"]
    return [row[0] for row in rows[1:]]


@pytest.fixture
def unnamed_tree(tmp_path):
    """A tree fitted on an array (no feature names) whose label is feature 0's sign."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = OptimalTreeClassifier(max_depth=1).fit(X, y)
    path = str(tmp_path / "unnamed.json")
    qbnb_jax.save_tree(clf, path)
    return path, X, clf


def test_predict_refuses_columns_it_cannot_match_to_an_unnamed_tree(
    tmp_path, unnamed_tree, capsys
):
    tree, X, clf = unnamed_tree
    swapped = write_csv(tmp_path / "swapped.csv", ["b", "a"], X[:, ::-1].tolist())
    assert main(["predict", tree, swapped]) == 2  # was exit 0 with half the labels wrong
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stores no feature names" in err and "--by-position" in err

    in_order = write_csv(tmp_path / "in_order.csv", ["a", "b"], X.tolist())
    assert main(["predict", tree, in_order]) == 2
    assert "--by-position" in capsys.readouterr().err
    out = str(tmp_path / "pred.csv")
    assert main(["predict", tree, in_order, "--by-position", "-o", out]) == 0
    assert predictions(out) == [str(v) for v in clf.predict(X)]


@pytest.mark.parametrize(
    "header, needle",
    [
        (["x1", "x0"], "column 1 is 'x1'"),
        (["feature_1", "feature_0"], "another order"),
        (["1", "0"], "another order"),
    ],
)
def test_generated_names_in_another_order_are_refused(
    tmp_path, unnamed_tree, header, needle, capsys
):
    tree, X, _ = unnamed_tree
    path = write_csv(tmp_path / "data.csv", header, X.tolist())
    for extra in ([], ["--by-position"]):
        assert main(["predict", tree, path, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, (extra, err)


def test_by_position_needs_exactly_the_trees_feature_count(tmp_path, unnamed_tree, capsys):
    tree, X, clf = unnamed_tree
    with_target = write_csv(
        tmp_path / "with_target.csv", ["a", "b", "y"], np.column_stack([X, clf.predict(X)]).tolist()
    )
    for extra in ([], ["--by-position"]):
        assert main(["predict", tree, with_target, *extra]) == 2
        err = capsys.readouterr().err
        assert "has 3 columns but the tree" in err and "expects 2 features" in err
    ordered = write_csv(tmp_path / "ordered.csv", ["feature_0", "feature_1"], X.tolist())
    out = str(tmp_path / "pred.csv")
    assert main(["predict", tree, ordered, "--by-position", "-o", out]) == 0
    assert predictions(out) == [str(v) for v in clf.predict(X)]


def test_by_position_with_a_named_tree(tmp_path, iris_csv, iris_data, capsys):
    X, _ = iris_data
    tree = str(tmp_path / "tree.json")
    assert main(["fit", iris_csv, "--target", "species", "--depth", "1", "-q", "-o", tree]) == 0
    renamed = write_csv(tmp_path / "renamed.csv", ["p", "q", "r", "s"], X.tolist())
    out = str(tmp_path / "pred.csv")
    assert main(["predict", tree, renamed, "--by-position", "-o", out]) == 0
    by_name = str(tmp_path / "by_name.csv")
    assert main(["predict", tree, iris_csv, "-o", by_name]) == 0
    assert predictions(out) == predictions(by_name)
    reordered = write_csv(tmp_path / "reordered.csv", FEATURES[::-1], X[:, ::-1].tolist())
    capsys.readouterr()
    assert main(["predict", tree, reordered, "--by-position"]) == 2
    assert "another order" in capsys.readouterr().err


def test_predict_with_a_saved_result_or_bare_tree(tmp_path, unnamed_tree):
    _, X, _ = unnamed_tree
    data = write_csv(tmp_path / "data.csv", ["a", "b"], X.tolist())
    y = np.where(X[:, 1] > 0, 2.5, -1.0)
    result = qbnb_jax.solve(X, y, task="regression", depth=1)
    for name, obj in (("result.json", result), ("bare.json", result.tree)):
        path = str(tmp_path / name)
        qbnb_jax.save_tree(obj, path)
        out = str(tmp_path / f"{name}.csv")
        assert main(["predict", path, data, "--by-position", "-o", out]) == 0
        assert predictions(out) == [str(v) for v in result.tree.predict(X)[:, 0]]


def test_predict_help_documents_matching(capsys):
    assert main(["predict", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--by-position" in help_text and "stores no names" in help_text
    assert "in another order is refused" in help_text


# -- output paths --------------------------------------------------------------------------


@pytest.fixture
def no_solve(monkeypatch):
    """Fail the test if the command gets as far as solving."""

    def solve(*args, **kwargs):
        raise AssertionError("the command solved before checking its output path")

    monkeypatch.setattr(qbnb_jax, "solve", solve)


def test_output_is_never_an_input(tmp_path, iris_csv, capsys, monkeypatch):
    tree = str(tmp_path / "tree.json")
    assert main(["fit", iris_csv, "--target", "species", "--depth", "1", "-q", "-o", tree]) == 0
    with open(iris_csv) as fh:
        data_text = fh.read()
    with open(tree) as fh:
        tree_text = fh.read()
    monkeypatch.chdir(tmp_path)
    cases = [
        ["fit", iris_csv, "--target", "species", "-o", iris_csv],
        ["fit", iris_csv, "--target", "species", "-o", "./iris.csv"],  # the same file
        ["predict", tree, iris_csv, "-o", tree],
        ["predict", tree, iris_csv, "-o", iris_csv],
        ["export", tree, "-o", "tree.json"],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is the input file" in err, (argv, err)
    with open(iris_csv) as fh:
        assert fh.read() == data_text
    with open(tree) as fh:
        assert fh.read() == tree_text


def test_unwritable_output_is_reported_before_solving(tmp_path, iris_csv, no_solve, capsys):
    cases = {
        str(tmp_path / "missing" / "tree.json"): "does not exist",
        str(tmp_path): "is a directory",
    }
    for output, needle in cases.items():
        assert main(["fit", iris_csv, "--target", "species", "-q", "-o", output]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err


def test_fit_output_replaces_an_existing_file(tmp_path, iris_csv):
    tree = tmp_path / "tree.json"
    tree.write_text("x" * 100_000)  # longer than the tree: must not leave a tail
    argv = ["fit", iris_csv, "--target", "species", "--depth", "1", "-q", "-o", str(tree)]
    assert main(argv) == 0
    assert json.loads(tree.read_text())["format"] == "qbnb_jax.tree"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iris.csv", "tree.json"]


# -- tree files past the limits: exit 2 and one line, never a traceback --------------------


def test_export_deep_files(tmp_path, capsys):
    from test_export import chain_file

    from qbnb_jax._sklearn.export import MAX_TREE_DEPTH

    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    too_deep = chain_file(tmp_path / "too_deep.json", MAX_TREE_DEPTH + 1)
    for path, needle in ((nested, "nested more than"), (too_deep, "levels deep")):
        for command in (["export", str(path)], ["export", str(path), "--format", "dot"]):
            assert main(command) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and needle in err and str(path) in err, err

    chain = str(chain_file(tmp_path / "chain.json", 2500))  # 5,001 nodes
    assert main(["export", chain]) == 0
    assert "truncated branch of depth 2490" in capsys.readouterr().out
    assert main(["export", chain, "--format", "dot"]) == 0
    assert capsys.readouterr().out.count(" -> ") == 5000


# -- start-up: --help and usage errors stay light ------------------------------------------

ISOLATED_CLI = r"""
import sys, types
package = types.ModuleType("qbnb_jax")  # the package without running its __init__
package.__path__ = [sys.argv[1]]
sys.modules["qbnb_jax"] = package
from qbnb_jax._cli import main
codes = [main(["--help"]), main(["fit", "data.csv"]), main(["predict", "--by-position"])]
print(codes, sorted(m for m in ("numpy", "sklearn", "jax") if m in sys.modules))
"""


def test_cli_module_answers_help_and_usage_errors_without_heavy_imports():
    """What the CLI module itself imports (qbnb_jax/__init__.py imports JAX on its own)."""
    proc = subprocess.run(
        [sys.executable, "-c", ISOLATED_CLI, str(pathlib.Path(qbnb_jax.__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.splitlines()[-1] == "[0, 2, 2] []", proc.stdout + proc.stderr


def test_bound_choices_are_the_solvers():
    from qbnb_jax._cli import build_parser
    from qbnb_jax._constants import BOUNDS

    fit = build_parser()._subparsers._group_actions[0].choices["fit"]
    choices = next(action.choices for action in fit._actions if action.dest == "bound")
    assert tuple(choices) == BOUNDS


HELP_IMPORTS = r"""
import runpy, sys
sys.argv = ["qbnb", "--help"]
try:
    runpy.run_module("qbnb_jax", run_name="__main__")
except SystemExit:
    pass
print(sorted(m for m in ("sklearn", "jax") if m in sys.modules))
"""


def test_qbnb_help_imports_neither_jax_nor_sklearn():
    proc = subprocess.run(
        [sys.executable, "-c", HELP_IMPORTS], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout + proc.stderr


def test_fit_takes_leaf_limits_pruning_and_gap(tmp_path, iris_data, capsys):
    X, y = iris_data
    path = write_csv(tmp_path / "iris.csv", ["a", "b", "c", "d", "y"],
                     np.column_stack([X, y]).tolist())
    options = ["--min-samples-leaf", "5", "--ccp-alpha", "0.02", "--max-gap", "0"]
    assert main(["fit", path, "--target", "y", "--depth", "2", "-q", *options]) == 0
    info = summary(capsys.readouterr().out)
    clf = OptimalTreeClassifier(max_depth=2, min_samples_leaf=5, ccp_alpha=0.02,
                                max_gap=0.0).fit(X, y)
    assert float(info["objective"]) == clf.objective_
    assert float(info["penalized objective"]) == pytest.approx(clf.penalized_objective_)


@pytest.mark.parametrize("option, value", [
    ("--max-leaf-nodes", "1"), ("--ccp-alpha", "-1"), ("--max-gap", "2"),
    ("--min-samples-leaf", "0"),
])
def test_fit_refuses_bad_pruning_options(tmp_path, iris_csv, capsys, option, value):
    assert main(["fit", iris_csv, "--target", "species", option, value, "-q"]) == 2
    err = capsys.readouterr().err
    assert option in err and len(err.strip().splitlines()) == 1
