"""Data sets shipped with the package (for examples, the demo and tests)."""

from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["load_ovarian", "load_breast_cancer", "standardize"]


def standardize(X) -> np.ndarray:
    """Column-wise ``(X - mean) / std`` with ``ddof=1``; NaN (including constant columns) -> 0.

    This is the preprocessing of the gradient-flow LOO authors (notes, section 6).
    """
    X = np.asarray(X, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        Z = (X - np.nanmean(X, axis=0)) / np.nanstd(X, axis=0, ddof=1)
    return np.where(np.isfinite(Z), Z, 0.0)


def load_ovarian(standardized: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Ovarian-cancer microarray data (Schummer et al. 1999; Hernandez-Lobato et al. 2010).

    The ``p >> n`` classification benchmark of the gradient-flow LOO papers (Table 1).

    Parameters
    ----------
    standardized : bool, default True
        Return columns z-scored with ``(X - mean) / std`` (``ddof=1``) and NaN set to 0, as the
        papers' authors did; ``False`` returns the raw values.

    Returns
    -------
    X : numpy.ndarray, shape (54, 1536), float64
    y : numpy.ndarray, shape (54,), int64
        Binary labels, 30 ones.
    """
    with resources.files(__name__).joinpath("ovarian.npz").open("rb") as fh, np.load(fh) as npz:
        x = np.asarray(npz["x"], dtype=np.float64)
        y = np.asarray(npz["y"], dtype=np.int64)
    return (standardize(x) if standardized else x), y


def load_breast_cancer(standardized: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Wisconsin diagnostic breast-cancer data (Street, Wolberg & Mangasarian 1993), as scikit-learn ships it.

    569 tumours, 30 features of their cell nuclei; a logistic regression on the standardized features has dozens of
    observations with a Pareto k above 0.7 (:mod:`ppl_loo.datasets.make_breast_cancer` builds the file).

    Parameters
    ----------
    standardized : bool, default True
        Return columns z-scored with ``(X - mean) / std`` (``ddof=1``); ``False`` returns the raw values.

    Returns
    -------
    X : numpy.ndarray, shape (569, 30), float64
    y : numpy.ndarray, shape (569,), int64
        1 for benign (357), 0 for malignant.
    """
    with resources.files(__name__).joinpath("breast_cancer.npz").open("rb") as fh, np.load(fh) as npz:
        x = np.asarray(npz["x"], dtype=np.float64)
        y = np.asarray(npz["y"], dtype=np.int64)
    return (standardize(x) if standardized else x), y
