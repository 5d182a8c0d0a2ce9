"""Ctrl-C on `qbnb fit`: exit code 130 and one line on stderr, whatever was running.

Each test starts a `qbnb` process, waits until it reports being busy, sends SIGINT and
checks how the process ended. The timeouts only guard against hangs: a process that
ignores the interrupt would run for minutes.
"""

import csv
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from qbnb_jax._cli import main

HANG_GUARD_S = 120

# `qbnb fit` with qbnb_jax.solve replaced by a stand-in for what defeated Ctrl-C.
STAND_IN = r"""
import gc, signal, sys, time
import qbnb_jax
from qbnb_jax._cli import main

def swallowed(*args, **kwargs):
    # As with JAX's gc callback: an exception raised inside a gc callback is reported
    # as "Exception ignored" and the work goes on. "solving" is printed from inside the
    # callback, so that the Ctrl-C it prompts lands there.
    def callback(phase, info):
        print("solving", flush=True)
        time.sleep(0.5)

    gc.callbacks.append(callback)
    while True:
        gc.collect(0)

def native(*args, **kwargs):
    # A long native call that ignores signals: with SIGINT blocked in the main thread,
    # only the C-level handler, run by another thread, sees it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    print("solving", flush=True)
    time.sleep(600)

qbnb_jax.solve = {"swallowed": swallowed, "native": native}[sys.argv[1]]
sys.exit(main(sys.argv[2:]))
"""


def write_problem(path, n, p, seed=0):
    """Noisy labels: a depth-3 search that takes many iterations."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(int)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([f"f{j}" for j in range(p)] + ["y"])
        writer.writerows([*row, label] for row, label in zip(X.tolist(), y))
    return str(path)


def wait_for_line(proc, stream, prefix):
    """Read `stream` until a line starts with `prefix`; the lines read."""
    lines = []
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 1.0)
        if not ready:
            continue
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(prefix):
            return lines
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"no line {prefix!r}: {''.join(lines)}{out}{err}")


def interrupt(proc):
    """Send Ctrl-C; the exit code and the stdout and stderr that followed."""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after Ctrl-C: {err[-2000:]}")
    return proc.returncode, out, err


def start(argv):
    # A test run started with SIGINT ignored (under nohup, or as a script's background
    # job) would pass that on to its children; `qbnb` run from a terminal starts with
    # the default. (Set here, not in a preexec_fn: that forks a multithreaded process.)
    previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_a_fit(tmp_path):
    data = write_problem(tmp_path / "data.csv", 3000, 8)
    proc = start([sys.executable, "-m", "qbnb_jax", "fit", data, "--target", "y", "--depth", "3"])
    wait_for_line(proc, proc.stderr, "iter ")
    code, out, err = interrupt(proc)
    # an iteration may end between the progress line and the signal
    lines = [line for line in err.splitlines() if not line.startswith("iter ")]
    assert code == 130, err
    assert len(lines) == 1 and lines[0].startswith("qbnb: interrupted at iteration "), err
    assert out == ""


@pytest.mark.parametrize("stand_in", ["swallowed", "native"])
def test_ctrl_c_is_never_lost(tmp_path, stand_in):
    data = write_problem(tmp_path / "data.csv", 20, 2)
    argv = ["fit", data, "--target", "y", "-q"]
    proc = start([sys.executable, "-c", STAND_IN, stand_in, *argv])
    wait_for_line(proc, proc.stdout, "solving")
    code, _, err = interrupt(proc)
    assert code == 130, err
    assert err == "qbnb: interrupted before the first iteration finished.\n"


def test_two_ctrl_c_give_one_line(tmp_path):
    data = write_problem(tmp_path / "data.csv", 20, 2)
    proc = start([sys.executable, "-c", STAND_IN, "native", "fit", data, "--target", "y"])
    wait_for_line(proc, proc.stdout, "solving")
    proc.send_signal(signal.SIGINT)
    code, _, err = interrupt(proc)
    assert code == 130 and err.count("\n") == 1 and err.startswith("qbnb: interrupted"), err


def signal_state():
    wakeup_fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup_fd)
    return signal.getsignal(signal.SIGINT), wakeup_fd, sys.unraisablehook


def test_main_leaves_signal_handling_as_it_found_it(tmp_path, capsys):
    before = signal_state()
    data = write_problem(tmp_path / "data.csv", 20, 2)
    assert main(["fit", data, "--target", "y", "--depth", "1", "-q"]) == 0
    assert main(["fit", data]) == 2
    assert main(["--help"]) == 0
    assert signal_state() == before
    for thread in threading.enumerate():
        if thread.name.startswith("qbnb-"):
            thread.join(timeout=HANG_GUARD_S)
            assert not thread.is_alive()


# A Ctrl-C while JAX is being imported, announced by a meta path finder that then waits.
SLOW_JAX_IMPORT = r"""
import runpy, sys, time

class SlowJax:
    def find_spec(self, name, path=None, target=None):
        if name == "jax":
            sys.meta_path.remove(self)
            print("importing jax", flush=True)
            time.sleep(60)
        return None

sys.meta_path.insert(0, SlowJax())
sys.argv = ["qbnb", *sys.argv[1:]]
runpy.run_module("qbnb_jax", run_name="__main__")
"""


def test_ctrl_c_while_importing_jax(tmp_path):
    data = write_problem(tmp_path / "data.csv", 20, 2)
    proc = start([sys.executable, "-c", SLOW_JAX_IMPORT, "fit", data, "--target", "y"])
    wait_for_line(proc, proc.stdout, "importing jax")
    code, _, err = interrupt(proc)
    assert code == 130 and err == "qbnb: interrupted before the first iteration finished.\n", err
