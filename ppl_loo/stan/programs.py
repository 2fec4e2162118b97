"""Data for the Stan programs of ``stan_models/`` (the ovarian experiment's models).

``logistic_horseshoe.stan`` takes every hyperparameter as a data entry; :func:`horseshoe_data`
fills them with Paananen et al.'s values (notes/gradient-flow-loo.md, section 6), the defaults of
:class:`ppl_loo.models.LogisticRegression` with ``prior="horseshoe"``. ``relu_net.stan`` takes
the number of hidden units and the prior scale (:func:`relu_data`).
"""

from __future__ import annotations

from math import sqrt

import numpy as np

from ppl_loo.numerics.data import check_binary_data

__all__ = ["horseshoe_data", "relu_data"]


def horseshoe_data(
    X,
    y,
    *,
    p0: float = 20,
    scale_icept: float = 5.0,
    slab_scale: float = 2.5,
    slab_df: float = 1.0,
    nu_global: float = 1.0,
    nu_local: float = 1.0,
    scale_global: float | None = None,
) -> dict:
    """The data block of ``stan_models/logistic_horseshoe.stan``.

    Parameters
    ----------
    X : array (N, D)
        Standardized predictors (without an intercept column).
    y : array (N,)
        Labels in {0, 1}.
    p0 : float, default 20
        Prior guess of the number of relevant predictors; sets
        ``scale_global = p0 / ((D - p0) sqrt(N))`` (Piironen & Vehtari 2017), about 0.0018 for
        the ovarian data (D = 1536, N = 54). Must lie in (0, D) unless ``scale_global`` is given.
    scale_icept, slab_scale, slab_df, nu_global, nu_local : float
        Paananen et al.'s values 5, 2.5, 1, 1, 1.
    scale_global : float, optional
        Overrides the value from ``p0``.

    Returns
    -------
    dict
        ``N, D, X, y`` and the hyperparameters. ``scale_global`` is a data entry, not computed
        from ``N`` inside the program, so that exact LOO by data deletion (the program on
        ``N - 1`` observations) keeps the prior of the full data.
    """
    X, yf = check_binary_data(X, y, "horseshoe_data")
    n, d = X.shape
    if scale_global is None:
        if not 0 < p0 < d:
            raise ValueError(f"horseshoe_data: p0 = {p0} must lie in (0, D = {d}); or pass scale_global.")
        scale_global = p0 / ((d - p0) * sqrt(n))
    vals = {"scale_icept": scale_icept, "scale_global": scale_global, "nu_global": nu_global,
            "nu_local": nu_local, "slab_scale": slab_scale, "slab_df": slab_df}
    for k, v in vals.items():
        if not float(v) > 0:
            raise ValueError(f"horseshoe_data: {k} must be > 0, got {v}.")
    return {"N": n, "D": d, "X": X, "y": yf.astype(np.int64), **{k: float(v) for k, v in vals.items()}}


def relu_data(X, y, *, hidden: int = 3, prior_scale: float = 1.0) -> dict:
    """The data block of ``stan_models/relu_net.stan`` (``hidden`` units, N(0, prior_scale^2) weights)."""
    X, yf = check_binary_data(X, y, "relu_data")
    if int(hidden) < 1 or not prior_scale > 0:
        raise ValueError(f"relu_data: need hidden >= 1 and prior_scale > 0, got {hidden}, {prior_scale}.")
    n, d = X.shape
    return {"N": n, "D": d, "H": int(hidden), "X": X, "y": yf.astype(np.int64), "prior_scale": float(prior_scale)}
