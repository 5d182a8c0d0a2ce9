"""The split penalty (`ccp_alpha`): side values that may stop at a leaf.

With a penalty a per split, a child node of samples S is worth
`V(S) = min(leaf(S), L1(S, f) + a)` when its split may use feature f: the leaf is
folded into every child feature's loss. A depth-2 tree with a root cut is worth
`a + V(prefix) + V(suffix)`; the root's a is carried by the prefix side, so that the
search's sums stay the tree's value and its incumbents stay in the caller's units
(scaled as `stats` are). docs/design.md, "Split penalty and leaf budgets", says why
every bound of the search stays valid.
"""

from __future__ import annotations

import numpy as np

from qbnb_jax._problem.data import Problem
from qbnb_jax._problem.host import leaf_loss_np

# A split spec that sends every sample left: `build_tree` collapses it into a leaf, but
# unlike `None` it counts as a tree found (`Incumbents.found`).
LEAF_SPEC = (0, np.inf, None, None)


def search_penalty(problem: Problem, ccp_alpha: float) -> float:
    """`ccp_alpha` (per split, in units of the loss divided by the total weight) in the
    units of the problem's `stats`."""
    return float(np.ldexp(ccp_alpha * float(problem.weight.sum()), problem.loss_exponent))


def all_leaf_loss(problem: Problem) -> float:
    """Leaf loss of all samples, in the units of `stats`."""
    return float(leaf_loss_np(problem.stats.sum(axis=0), problem.loss_kind))


class SideLeaves:
    """Leaf losses of every prefix and suffix of each feature's order, per problem.

    Tables `(problems, p, width)` like the search's threshold tables (`stack_tables`):
    one gather per sweep, however many problems and root features it has.
    """

    def __init__(self, problems: list[Problem]):
        width = max(pr.n for pr in problems) + 1
        self.prefix = np.empty((len(problems), problems[0].p, width))
        self.suffix = np.empty_like(self.prefix)
        for q, pr in enumerate(problems):
            for f in range(pr.p):  # one feature at a time: (n + 1, C) temporaries
                cum = np.zeros((pr.n + 1, pr.n_channels))
                np.cumsum(pr.stats[pr.perm[f]].astype(np.float64), axis=0, out=cum[1:])
                self.prefix[q, f, : pr.n + 1] = leaf_loss_np(cum, pr.loss_kind)
                self.suffix[q, f, : pr.n + 1] = leaf_loss_np(cum[-1:] - cum, pr.loss_kind)
            # padding: positions past n are "everything left", as in the tables
            self.prefix[q, :, pr.n + 1 :] = self.prefix[q, :, pr.n : pr.n + 1]
            self.suffix[q, :, pr.n + 1 :] = 0.0

    def at(self, q: np.ndarray, f0: np.ndarray, pos: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
        """Leaf losses of the prefix and suffix at positions `pos (rows, cuts)` of rows
        `(q, f0)`."""
        q, f0 = q[:, None], f0[:, None]
        return self.prefix[q, f0, pos], self.suffix[q, f0, pos]


def penalise_sweep(leaves: SideLeaves, penalty: float, leaf_sides: np.ndarray | None,
                   q: np.ndarray, f0: np.ndarray, pos: np.ndarray, pre: np.ndarray,
                   suf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A full sweep's `L1` values as penalised side values: the prefix carries the
    root's penalty (see the module docstring). `leaf_sides[q]`: problem q's left /
    right child must stay a leaf (`max_leaf_nodes`); None: neither."""
    leaf_pre, leaf_suf = leaves.at(q, f0, pos)
    pre = np.minimum(leaf_pre, pre + penalty)
    suf = np.minimum(leaf_suf, suf + penalty)
    if leaf_sides is not None:
        pre = np.where(leaf_sides[q, 0][:, None], leaf_pre, pre)
        suf = np.where(leaf_sides[q, 1][:, None], leaf_suf, suf)
    return pre + penalty, suf


def side_values(leaf_all: np.ndarray, stumps: np.ndarray, penalty: float,
                leaf_sides: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """`(left, right)` penalised values `(problems, p)` of a child holding every sample:
    `min(leaf, stump + penalty)`, or the leaf where `leaf_sides` says so."""
    value = np.minimum(leaf_all[:, None], stumps + penalty)
    if leaf_sides is None:
        return value, value
    return (np.where(leaf_sides[:, :1], leaf_all[:, None], value),
            np.where(leaf_sides[:, 1:], leaf_all[:, None], value))
