"""Many depth-2 searches in lockstep, their kernel requests merged into shared calls.

Used by `solve_batch` (one search per problem) and by deeper trees (one search per
side of a root cut). Each `Search.depth2_steps()` generator yields `(kind, args)` for
the sweeps it needs; a round collects the requests of every live search and answers
them with one call per kind, rows tagged with their search's problem index.
"""

from __future__ import annotations

import concurrent.futures
import time

import jax
import numpy as np

from ._runner import KernelRunner
from ._search import Search


def run_lockstep(searches: list[Search], runner: KernelRunner, progress, start) -> None:
    """Run depth-2 searches together: one merged kernel call per kind per round.

    The searches form two groups whose rounds alternate: while one group's kernel
    call runs (XLA releases the GIL), the host advances the other group's searches
    with the answers of its last call, so host and kernel work overlap.
    """
    steps = [search.depth2_steps() for search in searches]
    pending: dict[int, tuple[str, tuple]] = {}

    def advance(i: int, answer) -> None:
        try:
            pending[i] = steps[i].send(answer)
        except StopIteration:
            pending.pop(i, None)

    def call(group: list[int]):
        """Every kernel request of the group's searches, merged per kind."""
        answers = {}
        with jax.enable_x64(True):  # a thread-local setting: this runs in another thread
            for kind in ("full", "window"):
                asked = [(i, pending[i][1]) for i in group if pending[i][0] == kind]
                if asked:
                    merged = _merged_call(runner, kind, asked)
                    answers.update(zip((i for i, _ in asked), merged))
        return answers

    for i in range(len(steps)):
        advance(i, None)
    half = (len(steps) + 1) // 2
    groups = [list(range(half)), list(range(half, len(steps)))]
    rounds = 0
    with concurrent.futures.ThreadPoolExecutor(1) as caller:
        calls = [caller.submit(call, [i for i in g if i in pending]) for g in groups]
        while any(i in pending for g in groups for i in g):
            rounds += 1
            for g, group in enumerate(groups):
                for i, answer in calls[g].result().items():
                    advance(i, answer)
                calls[g] = caller.submit(call, [i for i in group if i in pending])
            if progress is not None:
                progress({"round": rounds, "active": len(pending),
                          "solved": len(searches) - len(pending),
                          "elapsed": time.perf_counter() - start})
        for c in calls:
            c.result()


def _merged_call(runner: KernelRunner, kind: str, asked: list[tuple[int, tuple]]):
    """One kernel call for the requests of many problems; answers split back per request.

    Cut lists of different lengths are padded by repeating their last cut (a duplicate
    cut changes no result) and trimmed afterwards.
    """
    rows = [len(args[0]) for _, args in asked]
    width = max(args[-1].shape[1] for _, args in asked)
    cuts = np.concatenate([
        np.concatenate([args[-1], np.repeat(args[-1][:, -1:], width - args[-1].shape[1], 1)], 1)
        if args[-1].shape[1] < width else args[-1]
        for _, args in asked
    ])
    columns = [np.concatenate([args[c] for _, args in asked]) for c in range(len(asked[0][1]) - 1)]
    problem = np.repeat(np.array([i for i, _ in asked], dtype=np.int32), rows)
    pre, suf = getattr(runner, kind)(*columns, cuts, problem=problem)
    answers = []
    r0 = 0
    for (_, args), r in zip(asked, rows):
        k = args[-1].shape[1]
        answers.append((pre[r0 : r0 + r, :k], suf[r0 : r0 + r, :k]))
        r0 += r
    return answers
