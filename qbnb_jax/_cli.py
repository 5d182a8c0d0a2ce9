"""The `qbnb` command line: fit an optimal tree on a CSV file, predict, export.

    qbnb fit DATA.csv --target COL [--task auto|classification|regression] [--depth 2]
             [--time-limit S] [--bound w0] [--weight COL] [--output tree.json] [--quiet]
    qbnb predict tree.json DATA.csv [--output FILE]
    qbnb export tree.json [--format text|dot] [--output FILE]

Exit codes: 0 success, 2 bad input or usage (one line on stderr, no traceback),
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

PROG = "qbnb"
MAX_AUTO_CLASSES = 20

TASK_HELP = (
    "auto (default): classification if the target column has a non-numeric value, or if "
    f"all its values are integers with at most {MAX_AUTO_CLASSES} distinct values; "
    "regression otherwise."
)


class InputError(Exception):
    """A problem with the user's input: reported as one line, exit code 2."""


class _UsageError(InputError):
    def __init__(self, prog: str, message: str) -> None:
        super().__init__(f"{prog}: {message} (see '{prog} --help')")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(self.prog, message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not value > 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from ._estimator import BOUNDS

    parser = _Parser(
        prog=PROG,
        description="Exact optimal shallow decision trees (Quant-BnB) on CSV data.",
        epilog="Run 'qbnb COMMAND --help' for the options of a command. Exit codes: 0 ok, "
        "2 bad input, 130 interrupted.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    fit = commands.add_parser(
        "fit",
        help="fit an optimal tree to a CSV file and print it",
        description="Fit an optimal tree to a CSV file (header row required; every column "
        "but the target is a numeric feature). Prints the tree, its training objective "
        "(weighted misclassifications or sum of squared errors), the proved lower bound, "
        "the gap and the status. One progress line per iteration goes to stderr.",
    )
    fit.add_argument("data", metavar="DATA.csv", help="training data with a header row")
    fit.add_argument("--target", required=True, metavar="COL", help="name of the target column")
    fit.add_argument(
        "--task",
        choices=("auto", "classification", "regression"),
        default="auto",
        help=TASK_HELP,
    )
    fit.add_argument(
        "--depth", type=_positive_int, default=2, metavar="D", help="tree depth (default 2)"
    )
    fit.add_argument(
        "--time-limit",
        type=_positive_float,
        default=None,
        metavar="S",
        help="stop after S seconds with the best tree so far (default: no limit)",
    )
    fit.add_argument(
        "--bound", choices=BOUNDS, default="w0", help="lower bound used for pruning (default w0)"
    )
    fit.add_argument(
        "--weight", default=None, metavar="COL", help="column of non-negative sample weights"
    )
    fit.add_argument(
        "--output", "-o", default=None, metavar="tree.json", help="save the tree as JSON"
    )
    fit.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    fit.set_defaults(func=_cmd_fit)

    predict = commands.add_parser(
        "predict",
        help="predict with a saved tree",
        description="Predict each row of a CSV file with a tree saved by 'qbnb fit "
        "--output'. Columns are matched by the feature names stored in the tree (other "
        "columns, such as the target, are ignored). Writes a CSV with a 'prediction' column.",
    )
    predict.add_argument("tree", metavar="tree.json", help="a tree saved by 'qbnb fit --output'")
    predict.add_argument("data", metavar="DATA.csv", help="rows to predict, with a header row")
    predict.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="write here instead of stdout"
    )
    predict.set_defaults(func=_cmd_predict)

    export = commands.add_parser(
        "export",
        help="print a saved tree as text or Graphviz DOT",
        description="Print a saved tree as text (scikit-learn's export_text format) or as "
        "Graphviz DOT (render with 'dot -Tpng').",
    )
    export.add_argument("tree", metavar="tree.json", help="a tree saved by 'qbnb fit --output'")
    export.add_argument("--format", choices=("text", "dot"), default="text", help="default text")
    export.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="write here instead of stdout"
    )
    export.set_defaults(func=_cmd_export)
    return parser


# -- CSV -------------------------------------------------------------------------------


def read_csv(path: str) -> tuple[list[str], list[list[str]]]:
    """Header and data rows of a CSV file (blank lines skipped, cells stripped)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
            except StopIteration:
                raise InputError(f"{path} is empty (a header row is required).") from None
            header = [name.strip() for name in header]
            seen: set[str] = set()
            for name in header:
                if name == "":
                    raise InputError(f"{path}: the header has an empty column name.")
                if name in seen:
                    raise InputError(f"{path}: column {name!r} appears twice in the header.")
                seen.add(name)
            rows = []
            for row in reader:
                if not row or all(cell.strip() == "" for cell in row):
                    continue
                if len(row) != len(header):
                    raise InputError(
                        f"{path}: line {reader.line_num} has {len(row)} fields, the header has "
                        f"{len(header)}."
                    )
                rows.append([cell.strip() for cell in row])
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not a UTF-8 text file ({err.reason}).") from None
    except (OverflowError, TypeError) as err:  # e.g. a node index too large for an int
        raise InputError(f"{path}: malformed tree file ({_one_line(err)}).") from None
    except csv.Error as err:
        raise InputError(f"{path}: malformed CSV ({err}).") from None
    if not rows:
        raise InputError(f"{path} has a header but no data rows.")
    return header, rows


def _line(row_index: int) -> int:
    return row_index + 2  # 1-based, after the header (approximate if blank lines were skipped)


def _numeric_column(path: str, name: str, cells: list[str]) -> np.ndarray:
    try:
        values = np.asarray(cells, dtype=np.float64)
    except ValueError:
        values = None
    if values is None or not np.all(np.isfinite(values)):
        for i, cell in enumerate(cells):
            if cell == "":
                raise InputError(f"{path}: column {name!r} has a missing value on line {_line(i)}.")
            try:
                v = float(cell)
            except ValueError:
                raise InputError(
                    f"{path}: column {name!r} has a non-numeric value {cell!r} on line {_line(i)}."
                ) from None
            if not math.isfinite(v):
                raise InputError(
                    f"{path}: column {name!r} has a non-finite value {cell!r} on line "
                    f"{_line(i)} (NaN and infinity are not allowed)."
                )
    assert values is not None
    return values


def _column(header: list[str], rows: list[list[str]], name: str, path: str) -> list[str]:
    if name not in header:
        raise InputError(f"{path} has no column {name!r} (columns: {', '.join(header)}).")
    j = header.index(name)
    return [row[j] for row in rows]


def target_task_and_labels(path: str, name: str, cells: list[str], task: str) -> tuple[str, Any]:
    """Resolve `--task auto` and convert the target cells (see TASK_HELP)."""
    for i, cell in enumerate(cells):
        if cell == "":
            raise InputError(
                f"{path}: target column {name!r} has a missing value on line {_line(i)}."
            )
    numbers: np.ndarray | None
    try:
        numbers = np.asarray(cells, dtype=np.float64)
    except ValueError:
        numbers = None
    if numbers is not None and not np.all(np.isfinite(numbers)):
        i = int(np.nonzero(~np.isfinite(numbers))[0][0])
        raise InputError(
            f"{path}: target column {name!r} has a non-finite value {cells[i]!r} on line "
            f"{_line(i)} (NaN and infinity are not allowed)."
        )
    integral = numbers is not None and bool(np.all(numbers == np.round(numbers)))
    if task == "auto":
        if numbers is None:
            task = "classification"
        elif integral and len(np.unique(numbers)) <= MAX_AUTO_CLASSES:
            task = "classification"
        else:
            task = "regression"
    if task == "regression":
        if numbers is None:
            _numeric_column(path, name, cells)  # raises, naming the bad cell
        return task, numbers
    if numbers is None:
        return task, np.asarray(cells, dtype=object)
    if integral and np.all(np.abs(numbers) < 2**53):
        return task, numbers.astype(np.int64)
    return task, numbers


# -- commands ----------------------------------------------------------------------------


def _fmt(value: float) -> str:
    """Shortest exact text of a float (integers without '.0')."""
    value = float(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.last: dict[str, Any] | None = None

    def __call__(self, info: dict[str, Any]) -> None:
        from ._estimator import format_progress

        self.last = dict(info)
        if not self.quiet:
            print(format_progress(info), file=sys.stderr, flush=True)

    def interrupted_message(self) -> str:
        if self.last is None:
            return f"{PROG}: interrupted before the first iteration finished."
        info = self.last
        return (
            f"{PROG}: interrupted at iteration {info.get('iteration')}: best objective so far "
            f"{info.get('incumbent')}, lower bound {info.get('lower_bound')}."
        )


def _write_output(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with open(output, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)


def _cmd_fit(args: argparse.Namespace) -> int:
    from sklearn.exceptions import ConvergenceWarning

    from ._estimator import OptimalTreeClassifier, OptimalTreeRegressor
    from ._export import export_text, save_tree

    header, rows = read_csv(args.data)
    target_cells = _column(header, rows, args.target, args.data)
    task, y = target_task_and_labels(args.data, args.target, target_cells, args.task)
    skip = {args.target}
    weight = None
    if args.weight is not None:
        if args.weight == args.target:
            raise InputError("--weight and --target name the same column.")
        weight = _numeric_column(
            args.data, args.weight, _column(header, rows, args.weight, args.data)
        )
        if np.any(weight < 0):
            raise InputError(f"{args.data}: weight column {args.weight!r} has a negative value.")
        skip.add(args.weight)
    features = [name for name in header if name not in skip]
    if not features:
        raise InputError(f"{args.data} has no feature columns besides the target.")
    X = np.column_stack(
        [
            _numeric_column(args.data, name, _column(header, rows, name, args.data))
            for name in features
        ]
    )

    cls = OptimalTreeClassifier if task == "classification" else OptimalTreeRegressor
    est = cls(max_depth=args.depth, bound=args.bound, time_limit=args.time_limit)
    progress = _Progress(args.quiet)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est._fit(X, y, weight, progress=progress)
    except KeyboardInterrupt:
        print(progress.interrupted_message(), file=sys.stderr, flush=True)
        return 130

    # Names are passed explicitly: the estimator saw a numpy array.
    text = export_text(est, feature_names=features)
    summary = [
        f"task: {task}",
        f"objective: {_fmt(est.objective_)}",
        f"lower bound: {_fmt(est.lower_bound_)}",
        f"gap: {_fmt(est.gap_)}",
        f"status: {est.status_}",
    ]
    sys.stdout.write(text + "\n".join(summary) + "\n")
    sys.stdout.flush()
    if args.output is not None:
        save_tree(est, args.output, feature_names=features)
        if not args.quiet:
            print(f"{PROG}: saved the tree to {args.output}", file=sys.stderr)
    return 0


def _load_tree(path: str) -> Any:
    """`load_tree`, with a binary (non-UTF-8) file reported by name."""
    from ._export import load_tree

    try:
        return load_tree(path)
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not a UTF-8 text file ({err.reason}).") from None
    except (OverflowError, TypeError) as err:  # e.g. a node index too large for an int
        raise InputError(f"{path}: malformed tree file ({_one_line(err)}).") from None


def _cmd_predict(args: argparse.Namespace) -> int:
    est = _load_tree(args.tree)
    header, rows = read_csv(args.data)
    names = getattr(est, "feature_names_in_", None)
    if names is not None:
        columns = [str(name) for name in names]
        missing = [name for name in columns if name not in header]
        if missing:
            raise InputError(
                f"{args.data} lacks column(s) the tree was fitted on: {', '.join(missing)}."
            )
    else:
        n_features = getattr(est, "n_features_in_", None)
        if n_features is not None and len(header) != n_features:
            raise InputError(
                f"{args.data} has {len(header)} columns but the tree expects {n_features} "
                "features (it stores no feature names, so columns are taken in order)."
            )
        columns = header
    X = np.column_stack(
        [
            _numeric_column(args.data, name, _column(header, rows, name, args.data))
            for name in columns
        ]
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        pred = est.predict(X)
    pred = np.asarray(pred)
    if pred.ndim == 1:
        out_header = ["prediction"]
        out_rows = [[_cell(v)] for v in pred]
    else:
        out_header = [f"prediction_{j}" for j in range(pred.shape[1])]
        out_rows = [[_cell(v) for v in row] for row in pred]
    if args.output is None:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(out_header)
        writer.writerows(out_rows)
        sys.stdout.flush()
    else:
        with open(args.output, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(out_header)
            writer.writerows(out_rows)
    return 0


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return _fmt(float(value))
    if isinstance(value, np.generic):
        value = value.item()
    return str(value)


def _cmd_export(args: argparse.Namespace) -> int:
    from ._export import export_graphviz, export_text

    est = _load_tree(args.tree)
    if args.format == "dot":
        text = export_graphviz(est) + "\n"
    else:
        text = export_text(est)
    _write_output(text, args.output)
    return 0


def _one_line(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `qbnb` command line; returns the exit code.

    **Arguments:**

    - `argv`: the arguments after the program name; `sys.argv[1:]` if None.

    **Returns:** 0 on success, 2 on bad input or usage (one line on stderr), 130 when
    interrupted with Ctrl-C.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except InputError as err:
        print(_one_line(err), file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        return 1
    except (InputError, ValueError) as err:
        print(f"{PROG} {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        reason = err.strerror or _one_line(err)
        print(f"{PROG} {args.command}: error: {where}{reason}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
