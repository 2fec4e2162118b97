"""Build ``breast_cancer.npz`` from scikit-learn's copy of the Wisconsin diagnostic breast-cancer data.

Run once from the repository root, with scikit-learn installed (it is not a dependency of ``ppl_loo``)::

    python -m ppl_loo.datasets.make_breast_cancer

The archive keeps the *raw* values in float64 (``x``: 569 x 30 features of cell nuclei, ``y``: 569 labels, 1 for
benign, 357 ones, as ``sklearn.datasets.load_breast_cancer`` gives them) and the feature names;
:func:`ppl_loo.datasets.load_breast_cancer` standardizes them. Source: Street, Wolberg & Mangasarian (1993), UCI
Machine Learning Repository (CC BY 4.0), as shipped with scikit-learn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("breast_cancer.npz")


def main(out: str | Path = OUT) -> Path:
    """Write ``breast_cancer.npz`` (``x``, ``y``, ``feature_names``) to ``out``."""
    try:
        from sklearn.datasets import load_breast_cancer
    except ImportError as err:
        raise SystemExit("make_breast_cancer needs scikit-learn: pip install scikit-learn") from err
    bunch = load_breast_cancer()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    if x.shape != (569, 30) or y.shape != (569,) or int(y.sum()) != 357:
        raise ValueError(f"unexpected data: x {x.shape}, y {y.shape} with {int(y.sum())} ones; expected (569, 30), "
                         "(569,) with 357 ones.")
    np.savez_compressed(out, x=x, y=y, feature_names=np.asarray(bunch.feature_names, dtype=str))
    return Path(out)


if __name__ == "__main__":
    print(main())
