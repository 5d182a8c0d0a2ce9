"""Tuning an optimal tree's pruning by cross-validation, against CART.

An optimal tree of depth d fits the training data as well as any tree of that depth
can, which is not always what generalises best. `ccp_alpha` (scikit-learn's name and
units: a penalty per split, in units of the training loss divided by the total sample
weight) lets nodes stay leaves where a split gains too little, and `min_samples_leaf`
keeps every leaf at least that many rows; the solve is still exact for the penalised
objective among such trees. Here `GridSearchCV` picks `max_depth`, `ccp_alpha` and
`min_samples_leaf` on scikit-learn's wine data (178 samples, 13 features, 3 classes), and the
held-out accuracy of the tuned tree is compared with:

- CART (`DecisionTreeClassifier`) tuned by the same cross-validation over the same grid;
- the unconstrained optimal tree (no penalty) of the deepest depth in the grid.

Further options are one more line of `GRID` (and of `CART_GRID`, when CART has them).

    python examples/tune_pruning.py [--depths 2,3] [--folds 3]
"""

import argparse
import time

from sklearn.datasets import load_wine
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from sklearn.tree import DecisionTreeClassifier

from qbnb_jax import OptimalTreeClassifier

# The tuned parameters of the optimal tree; `max_depth` is filled from --depths.
GRID = {
    "ccp_alpha": [0.0, 0.01, 0.03],
    "min_samples_leaf": [1, 5],
}
CART_GRID = {
    "ccp_alpha": [0.0, 0.01, 0.03],
    "min_samples_leaf": [1, 5],
}


def tuned(estimator, grid: dict, X, y, folds: int):
    """`GridSearchCV` over `grid`, refitted on all of `(X, y)`."""
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
    return GridSearchCV(estimator, grid, cv=cv, scoring="accuracy").fit(X, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="2,3", help="max_depth values to try")
    parser.add_argument("--folds", type=int, default=3)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]

    X, y = load_wine(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y,
                                                        random_state=0)
    print(f"wine: {len(X_train)} training, {len(X_test)} held-out samples, "
          f"{X.shape[1]} features; depths {depths}, {args.folds}-fold CV")

    start = time.perf_counter()
    search = tuned(OptimalTreeClassifier(), {"max_depth": depths, **GRID}, X_train, y_train,
                   args.folds)
    seconds = time.perf_counter() - start
    best = search.best_estimator_
    cart = tuned(DecisionTreeClassifier(random_state=0), {"max_depth": depths, **CART_GRID},
                 X_train, y_train, args.folds).best_estimator_
    full = OptimalTreeClassifier(max_depth=max(depths)).fit(X_train, y_train)

    print(f"tuned optimal tree: {search.best_params_} (CV accuracy "
          f"{search.best_score_:.3f}, search {seconds:.1f} s); status {best.status_}, "
          f"{best.get_n_leaves()} leaves")
    rows = [("CART (tuned)", cart), ("optimal, unpenalised", full), ("optimal (tuned)", best)]
    print(f"{'model':<22} {'leaves':>6} {'train acc':>9} {'held-out acc':>12}")
    for name, model in rows:
        print(f"{name:<22} {model.get_n_leaves():>6} {model.score(X_train, y_train):>9.3f} "
              f"{model.score(X_test, y_test):>12.3f}")


if __name__ == "__main__":
    main()
