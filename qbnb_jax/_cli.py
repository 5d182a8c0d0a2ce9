"""The `qbnb` command line: fit an optimal tree on a CSV file, predict, export.

    qbnb fit DATA.csv --target COL [--task auto|classification|regression] [--depth 2]
             [--time-limit S] [--bound w0] [--weight COL] [--output tree.json] [--quiet]
    qbnb predict tree.json DATA.csv [--by-position] [--output FILE]
    qbnb export tree.json [--format text|dot] [--output FILE]

Exit codes: 0 success, 2 bad input or usage (one line on stderr, no traceback),
130 interrupted (Ctrl-C; one line on stderr).

This module imports only the standard library at import time, and `main` takes over
Ctrl-C before anything else: `--help` and argument errors answer at once, and Ctrl-C
while the commands import numpy, scikit-learn or JAX is handled like any other.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import csv
import io
import math
import os
import re
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from qbnb_jax._constants import BOUNDS, SUPPORTED_DEPTHS

if TYPE_CHECKING:
    import numpy as np

PROG = "qbnb"
MAX_AUTO_CLASSES = 20
# After Ctrl-C, how long the main thread may take to unwind before the process exits hard.
INTERRUPT_GRACE_S = 0.5

TASK_HELP = (
    "auto (default): classification if the target column has a non-numeric value, or if "
    f"all its values are integers with at most {MAX_AUTO_CLASSES} distinct values; "
    "regression otherwise."
)

PREDICT_HELP = (
    "Predict each row of a CSV file with a tree saved by 'qbnb fit --output' (or by "
    "qbnb_jax.save_tree). Columns are matched by the feature names stored in the tree; "
    "other columns, such as the target, are ignored. A tree fitted on an array stores no "
    "names, only its number of features: it predicts only with --by-position, on a CSV "
    "holding exactly its features in training order. Writes a CSV with a 'prediction' "
    "column."
)

BY_POSITION_HELP = (
    "take the CSV's columns, in order, as the tree's features: the CSV must have exactly "
    "as many columns as the tree has features. Required for a tree without feature names. "
    "A header that names the tree's features (for such a tree: feature_0, x0, x[0] or 0, "
    "...) in another order is refused even so."
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


def _depth(text: str) -> int:
    value = _positive_int(text)
    if value not in SUPPORTED_DEPTHS:
        raise argparse.ArgumentTypeError(
            f"must be from {SUPPORTED_DEPTHS[0]} to {SUPPORTED_DEPTHS[-1]}, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not value > 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _number_in(low: float, high: float, what: str):
    """An argparse type: a finite number from `low` to `high` (both included)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not low <= value <= high:  # also rejects NaN
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value
    return parse


def _leaf_cap(text: str) -> int:
    value = _positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 2, got {text!r}")
    return value


def _add_output(parser: argparse.ArgumentParser, metavar: str, help: str) -> None:
    parser.add_argument(
        "--output",
        "-o",
        default=None,
        metavar=metavar,
        help=help + " (checked before any work; never one of the input files)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Exact optimal shallow decision trees (Quant-BnB) on CSV data.",
        epilog="Run 'qbnb COMMAND --help' for the options of a command. Exit codes: 0 ok, "
        "2 bad input, 130 interrupted (Ctrl-C).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    fit = commands.add_parser(
        "fit",
        help="fit an optimal tree to a CSV file and print it",
        description="Fit an optimal tree to a CSV file (header row required; every column "
        "but the target is a numeric feature). Prints the tree, its training objective "
        "(weighted misclassifications or sum of squared errors), the proved lower bound, "
        "the gap and the status. One progress line per iteration goes to stderr. Ctrl-C "
        "stops the fit: exit code 130 and one line with the best objective so far.",
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
        "--depth", type=_depth, default=2, metavar="D",
        help=f"tree depth, {SUPPORTED_DEPTHS[0]} to {SUPPORTED_DEPTHS[-1]} (default 2)"
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
        "--max-gap", type=_number_in(0, 1, "a number from 0 to 1"), default=None, metavar="G",
        help="stop once the tree is proved within this relative gap of the optimum")
    fit.add_argument(
        "--min-samples-leaf", type=_positive_int, default=1, metavar="N",
        help="every leaf holds at least N rows (default 1)")
    fit.add_argument(
        "--ccp-alpha", type=_number_in(0, float("inf"), "a number >= 0"), default=0.0,
        metavar="A", help="penalty per split, in units of the loss per unit of weight "
        "(scikit-learn's ccp_alpha; default 0)")
    fit.add_argument(
        "--max-leaf-nodes", type=_leaf_cap, default=None, metavar="L",
        help="at most L leaves (default: no limit)")
    _add_output(fit, "tree.json", "save the tree as JSON")
    fit.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    fit.set_defaults(func=_cmd_fit)

    predict = commands.add_parser(
        "predict", help="predict with a saved tree", description=PREDICT_HELP
    )
    predict.add_argument("tree", metavar="tree.json", help="a tree saved by 'qbnb fit --output'")
    predict.add_argument("data", metavar="DATA.csv", help="rows to predict, with a header row")
    predict.add_argument("--by-position", action="store_true", help=BY_POSITION_HELP)
    _add_output(predict, "FILE", "write here instead of stdout")
    predict.set_defaults(func=_cmd_predict)

    export = commands.add_parser(
        "export",
        help="print a saved tree as text or Graphviz DOT",
        description="Print a saved tree as text (scikit-learn's export_text format) or as "
        "Graphviz DOT (render with 'dot -Tpng').",
    )
    export.add_argument("tree", metavar="tree.json", help="a tree saved by 'qbnb fit --output'")
    export.add_argument("--format", choices=("text", "dot"), default="text", help="default text")
    _add_output(export, "FILE", "write here instead of stdout")
    export.set_defaults(func=_cmd_export)
    return parser


# -- Ctrl-C ------------------------------------------------------------------------------


class _Interrupts:
    """Ctrl-C that always ends the process: exit code 130 and one line on stderr.

    The SIGINT handler raises KeyboardInterrupt, which normally unwinds to `main`. Two
    things can defeat that. A KeyboardInterrupt raised while a garbage-collection
    callback or a ``__del__`` runs (JAX registers such a callback) is reported as
    "Exception ignored" and lost; `sys.unraisablehook` catches it and exits at once.
    And the Python-level handler runs only between bytecodes, so it waits for a long
    native call (compiling, running a kernel) to return. So the signal's wake-up byte
    also reaches a watcher thread, which exits the process when `main` has not returned
    `INTERRUPT_GRACE_S` seconds later, or at a second Ctrl-C. Once `main` has returned,
    `exit_at_shutdown` skips the interpreter's teardown, which would wait for the
    computations still in flight.
    """

    def __init__(self) -> None:
        self.requested = False
        self.describe: Callable[[], str] = lambda: f"{PROG}: interrupted."
        self._lock = threading.RLock()  # re-entrant: a hook may fire while reporting
        self._reported = False
        self._saved: tuple[Any, int, Any] | None = None
        self._write_fd = -1

    def install(self) -> bool:
        """Take over SIGINT; False, changing nothing, where that is not ours to do.

        Not from another thread (signal handlers belong to the main thread), nor when
        SIGINT is ignored, as for a job that a script started in the background; nor on
        Windows, where the wake-up descriptor must be a socket and Ctrl-C works as usual.
        """
        if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            return False
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
        previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._saved = (previous_handler, previous_fd, sys.unraisablehook)
        self._write_fd = write_fd
        sys.unraisablehook = self._on_unraisable
        watcher = threading.Thread(
            target=self._watch, args=(read_fd,), name="qbnb-interrupts", daemon=True
        )
        watcher.start()
        return True

    def uninstall(self) -> None:
        """Restore what `install` replaced and stop the watcher."""
        assert self._saved is not None
        previous_handler, previous_fd, previous_hook = self._saved
        signal.set_wakeup_fd(previous_fd)
        if previous_handler is None:  # installed outside Python: cannot be put back
            previous_handler = signal.SIG_DFL
        signal.signal(signal.SIGINT, previous_handler)
        sys.unraisablehook = previous_hook
        os.close(self._write_fd)  # the watcher reads end-of-file and returns

    def report(self) -> None:
        """Print the interruption line, once, whichever thread gets here first."""
        with self._lock:
            if self._reported:
                return
            self._reported = True
            try:
                line = self.describe()
            except Exception:
                line = f"{PROG}: interrupted."
            try:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            except Exception:  # e.g. stderr busy in the interrupted thread
                with contextlib.suppress(OSError):
                    os.write(2, (line + "\n").encode("utf-8", "replace"))

    def exit_now(self) -> None:
        try:
            self.report()
        finally:
            os._exit(130)

    def exit_at_shutdown(self) -> None:
        """After a real Ctrl-C, end the process at exit without the slow teardown."""
        if self.requested:
            atexit.register(_exit_flushed, 130)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.requested:
            # A second Ctrl-C: the watcher exits at once; raising here could only
            # interrupt the reporting of the first.
            return
        self.requested = True
        raise KeyboardInterrupt

    def _on_unraisable(self, unraisable: Any) -> None:
        exc_type = unraisable.exc_type
        if isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
            self.exit_now()  # the interrupt was swallowed: nothing else will stop the work
        assert self._saved is not None
        self._saved[2](unraisable)

    def _watch(self, read_fd: int) -> None:
        deadline: float | None = None
        try:
            while True:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                readable, _, _ = select.select([read_fd], [], [], timeout)
                if not readable:  # the grace period is over and main has not finished
                    self.exit_now()
                data = os.read(read_fd, 512)
                if not data:  # uninstalled: main has returned
                    return
                if int(signal.SIGINT) in data:
                    if deadline is not None:  # a second Ctrl-C
                        self.exit_now()
                    deadline = time.monotonic() + INTERRUPT_GRACE_S
        finally:
            os.close(read_fd)


def _exit_flushed(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


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
    except csv.Error as err:
        raise InputError(f"{path}: malformed CSV ({err}).") from None
    if not rows:
        raise InputError(f"{path} has a header but no data rows.")
    return header, rows


def _line(row_index: int) -> int:
    return row_index + 2  # 1-based, after the header (approximate if blank lines were skipped)


def _numeric_column(path: str, name: str, cells: list[str], missing: bool = False) -> np.ndarray:
    """A column of numbers; `missing` (feature columns): empty cells and NaN are
    missing values, read as NaN."""
    import numpy as np

    if missing and "" in cells:
        cells = ["nan" if cell == "" else cell for cell in cells]
    try:
        values = np.asarray(cells, dtype=np.float64)
    except ValueError:
        values = None
    if values is None or not np.all(np.isfinite(values) | (missing & np.isnan(values))):
        for i, cell in enumerate(cells):
            if cell == "":
                raise InputError(f"{path}: column {name!r} has a missing value on line {_line(i)}.")
            try:
                v = float(cell)
            except ValueError:
                raise InputError(
                    f"{path}: column {name!r} has a non-numeric value {cell!r} on line {_line(i)}."
                ) from None
            if not math.isfinite(v) and not (missing and math.isnan(v)):
                raise InputError(
                    f"{path}: column {name!r} has a non-finite value {cell!r} on line "
                    f"{_line(i)} ("
                    + ("infinity is not allowed; a missing value is an empty cell or NaN)."
                       if missing else "NaN and infinity are not allowed).")
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
    import numpy as np

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


# -- output files ----------------------------------------------------------------------


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(output: str | None, inputs: Sequence[str]) -> None:
    """Refuse, before any work, an output path that is an input or cannot be written."""
    if output is None:
        return
    for path in inputs:
        if _same_file(output, path):
            raise InputError(f"--output {output} is the input file {path}; choose another path.")
    if os.path.isdir(output):
        raise InputError(f"--output {output} is a directory.")
    if os.path.exists(output):
        writable = os.access(output, os.W_OK)
    else:
        parent = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(parent):
            raise InputError(f"--output {output}: the directory {parent} does not exist.")
        writable = os.access(parent, os.W_OK | os.X_OK)
    if not writable:
        raise InputError(f"--output {output} is not writable.")


def _write_output(text: str, output: str | None) -> None:
    from qbnb_jax._sklearn.export import write_text_file

    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text_file(output, text)


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
        from qbnb_jax._sklearn.estimator import format_progress

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


def _fit_inputs(args: argparse.Namespace) -> tuple[str, np.ndarray, Any, Any, list[str]]:
    """Task, X, y, weights and feature names from the training CSV."""
    import numpy as np

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
            _numeric_column(args.data, name, _column(header, rows, name, args.data), missing=True)
            for name in features
        ]
    )
    return task, X, y, weight, features


def _cmd_fit(args: argparse.Namespace) -> int:
    check_output(args.output, [args.data])
    task, X, y, weight, features = _fit_inputs(args)

    from sklearn.exceptions import ConvergenceWarning

    from qbnb_jax._sklearn.estimator import OptimalTreeClassifier, OptimalTreeRegressor
    from qbnb_jax._sklearn.export import export_text, tree_json

    cls = OptimalTreeClassifier if task == "classification" else OptimalTreeRegressor
    est = cls(max_depth=args.depth, bound=args.bound, time_limit=args.time_limit,
              max_gap=args.max_gap, min_samples_leaf=args.min_samples_leaf,
              ccp_alpha=args.ccp_alpha, max_leaf_nodes=args.max_leaf_nodes)
    progress = _Progress(args.quiet)
    args.interrupts.describe = progress.interrupted_message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est._fit(X, y, weight, progress=progress)

    # Names are passed explicitly: the estimator saw a numpy array.
    text = export_text(est, feature_names=features)
    summary = [
        f"task: {task}",
        f"objective: {_fmt(est.objective_)}",
        *([f"penalized objective: {_fmt(est.penalized_objective_)}"] if args.ccp_alpha else []),
        f"lower bound: {_fmt(est.lower_bound_)}",
        f"gap: {_fmt(est.gap_)}",
        f"status: {est.status_}",
    ]
    sys.stdout.write(text + "\n".join(summary) + "\n")
    sys.stdout.flush()
    if args.output is not None:
        _write_output(tree_json(est, feature_names=features), args.output)
        if not args.quiet:
            print(f"{PROG}: saved the tree to {args.output}", file=sys.stderr)
    return 0


# Names a tree without stored names is shown or commonly exported with: feature_3
# (export_text), x[3] (export_graphviz), x3 (get_feature_names_out), 3 (pandas).
_GENERATED_NAME = re.compile(r"feature_(\d+)|x(\d+)|x\[(\d+)\]|(\d+)")


def _generated_index(name: str) -> int | None:
    match = _GENERATED_NAME.fullmatch(name)
    if match is None:
        return None
    return int(next(group for group in match.groups() if group is not None))


def _named_order(header: list[str], names: list[str] | None, n_features: int) -> list[int] | None:
    """The feature index each column names, when the header names exactly the features."""
    if len(header) != n_features:
        return None
    if names is not None:
        index = {name: j for j, name in enumerate(names)}
        order = [index.get(name) for name in header]
    else:
        order = [_generated_index(name) for name in header]
    if sorted(j for j in order if j is not None) != list(range(n_features)):
        return None
    return order  # type: ignore[return-value]


def _first_misplaced(header: list[str], order: list[int]) -> str:
    column = next(i for i, j in enumerate(order) if i != j)
    return f"column {column + 1} is {header[column]!r}"


def _columns_by_position(
    header: list[str], names: list[str] | None, n_features: int, data: str
) -> list[int]:
    if len(header) != n_features:
        raise InputError(
            f"{data} has {len(header)} columns but the tree expects {n_features} features "
            "(--by-position takes all the columns, in order)."
        )
    order = _named_order(header, names, n_features)
    if order is not None and order != list(range(n_features)):
        raise InputError(
            f"{data}'s header names the tree's features in another order "
            f"({_first_misplaced(header, order)}); put the columns in training order."
        )
    return list(range(n_features))


def _columns_by_name(header: list[str], names: list[str], data: str) -> list[int]:
    missing = [name for name in names if name not in header]
    if missing:
        raise InputError(f"{data} lacks column(s) the tree was fitted on: {', '.join(missing)}.")
    return [header.index(name) for name in names]


def _unnamed_refusal(header: list[str], n_features: int, tree: str, data: str) -> InputError:
    """Why columns cannot be matched to a tree without names unless --by-position."""
    if len(header) != n_features:
        return InputError(
            f"{data} has {len(header)} columns but the tree in {tree} expects {n_features} "
            "features; it stores no feature names, so the CSV must hold exactly its features, "
            "in training order, with --by-position."
        )
    order = _named_order(header, None, n_features)
    if order is not None and order != list(range(n_features)):
        return InputError(
            f"{data}'s header names the tree's features in another order "
            f"({_first_misplaced(header, order)}); put the columns in training order and "
            "pass --by-position."
        )
    return InputError(
        f"the tree in {tree} stores no feature names, so the columns of {data} cannot be "
        f"matched by name; if they are its {n_features} features in training order, pass "
        "--by-position."
    )


def _feature_count(est: Any, names: list[str] | None, header: list[str], by_position: bool) -> int:
    n_features = getattr(est, "n_features_in_", None)
    if n_features is not None:
        return int(n_features)
    if names is not None:
        return len(names)
    # A bare tree saved without its feature count needs columns up to its last split feature.
    needed = int(est.tree_.feature.max(initial=0)) + 1
    return max(needed, len(header)) if by_position else needed


def feature_columns(est: Any, header: list[str], args: argparse.Namespace) -> list[int]:
    """Index of the CSV column holding each of the tree's features, in feature order."""
    stored = getattr(est, "feature_names_in_", None)
    names = None if stored is None else [str(name) for name in stored]
    n_features = _feature_count(est, names, header, args.by_position)
    if args.by_position:
        return _columns_by_position(header, names, n_features, args.data)
    if names is not None:
        return _columns_by_name(header, names, args.data)
    raise _unnamed_refusal(header, n_features, args.tree, args.data)


def _cmd_predict(args: argparse.Namespace) -> int:
    import numpy as np

    from qbnb_jax._sklearn.export import load_estimator

    check_output(args.output, [args.tree, args.data])
    est = load_estimator(args.tree)
    header, rows = read_csv(args.data)
    columns = feature_columns(est, header, args)
    X = np.column_stack(
        [_numeric_column(args.data, header[j], [row[j] for row in rows], missing=True)
         for j in columns]
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
    _write_output(_csv_text(out_header, out_rows), args.output)
    return 0


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _cell(value: Any) -> str:
    import numpy as np

    if isinstance(value, (float, np.floating)):
        return _fmt(float(value))
    if isinstance(value, np.generic):
        value = value.item()
    return str(value)


def _cmd_export(args: argparse.Namespace) -> int:
    from qbnb_jax._sklearn.export import export_graphviz, export_text, load_estimator

    check_output(args.output, [args.tree])
    est = load_estimator(args.tree)
    if args.format == "dot":
        text = export_graphviz(est) + "\n"
    else:
        text = export_text(est)
    _write_output(text, args.output)
    return 0


def _one_line(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return " ".join(text.split())


def _error_code(command: str, err: Exception) -> int | None:
    """Report a failed command on one line; its exit code, or None for a bug."""
    if isinstance(err, BrokenPipeError):
        return 1
    if isinstance(err, (InputError, ValueError, MemoryError)):  # MemoryError: the ceiling
        print(f"{PROG} {command}: error: {_one_line(err) or 'out of memory'}", file=sys.stderr)
        return 2
    if isinstance(err, RecursionError):  # the readers should refuse such input first
        print(f"{PROG} {command}: error: the input is nested too deeply.", file=sys.stderr)
        return 2
    if isinstance(err, OSError):
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        reason = err.strerror or _one_line(err)
        print(f"{PROG} {command}: error: {where}{reason}", file=sys.stderr)
        return 2
    return None


def _run(argv: Sequence[str] | None, interrupts: _Interrupts) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except InputError as err:
        print(_one_line(err), file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    args.interrupts = interrupts
    try:
        return int(args.func(args))
    except Exception as err:
        if interrupts.requested:  # a library turned the KeyboardInterrupt into an error
            raise KeyboardInterrupt from None
        code = _error_code(args.command, err)
        if code is None:
            raise
        return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `qbnb` command line; returns the exit code.

    **Arguments:**

    - `argv`: the arguments after the program name; `sys.argv[1:]` if None.

    **Returns:** 0 on success, 2 on bad input or usage (one line on stderr), 130 when
    interrupted with Ctrl-C (one line on stderr).
    """
    interrupts = _Interrupts()
    # First of all, so that Ctrl-C while the commands import JAX is handled too.
    installed = interrupts.install()
    try:
        return _run(argv, interrupts)
    except KeyboardInterrupt:
        interrupts.report()
        interrupts.exit_at_shutdown()
        return 130
    finally:
        if installed:
            interrupts.uninstall()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
