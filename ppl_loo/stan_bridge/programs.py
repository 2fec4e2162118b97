"""Data for the Stan programs of ``stan_models/`` (the ovarian experiment's models).

``logistic_horseshoe.stan`` takes every hyperparameter as a data entry; :func:`horseshoe_data`
fills them with Paananen et al.'s values (notes/gradient-flow-loo.md, section 6), the defaults of
:class:`~ppl_loo.numerics.horseshoe.HorseshoeHyperparameters` that
:class:`ppl_loo.models.LogisticRegression` with ``prior="horseshoe"`` uses too. ``relu_net.stan`` takes
the number of hidden units and the prior scale (:func:`relu_data`).
"""

from __future__ import annotations

import numpy as np

from ppl_loo.numerics.data import check_binary_data
from ppl_loo.numerics.horseshoe import HorseshoeHyperparameters

__all__ = ["horseshoe_data", "relu_data"]


def horseshoe_data(X, y, **hyperparameters) -> dict:
    """The data block of ``stan_models/logistic_horseshoe.stan``.

    Parameters
    ----------
    X : array (N, D)
        Standardized predictors (without an intercept column).
    y : array (N,)
        Labels in {0, 1}.
    **hyperparameters
        ``p0``, ``scale_icept``, ``slab_scale``, ``slab_df``, ``nu_global``, ``nu_local``,
        ``scale_global``: the fields of
        :class:`~ppl_loo.numerics.horseshoe.HorseshoeHyperparameters`, with its defaults
        (Paananen et al.'s values 20, 5, 2.5, 1, 1, 1). ``p0`` is the prior guess of the number of
        relevant predictors; it sets ``scale_global = p0 / ((D - p0) sqrt(N))`` (Piironen &
        Vehtari 2017), about 0.0018 for the ovarian data (D = 1536, N = 54), and must lie in
        (0, D) unless ``scale_global`` is given.

    Returns
    -------
    dict
        ``N, D, X, y`` and the hyperparameters. ``scale_global`` is a data entry, not computed
        from ``N`` inside the program, so that exact LOO by data deletion (the program on
        ``N - 1`` observations) keeps the prior of the full data.
    """
    X, yf = check_binary_data(X, y, "horseshoe_data")
    n, d = X.shape
    hyper = HorseshoeHyperparameters.from_keywords("horseshoe_data", hyperparameters)
    scale_global = hyper.global_scale(n, d, "horseshoe_data")
    hyper.check_positive("horseshoe_data")
    vals = {"scale_icept": hyper.scale_icept, "scale_global": scale_global, "nu_global": hyper.nu_global,
            "nu_local": hyper.nu_local, "slab_scale": hyper.slab_scale, "slab_df": hyper.slab_df}
    return {"N": n, "D": d, "X": X, "y": yf.astype(np.int64), **{k: float(v) for k, v in vals.items()}}


def relu_data(X, y, *, hidden: int = 3, prior_scale: float = 1.0) -> dict:
    """The data block of ``stan_models/relu_net.stan`` (``hidden`` units, N(0, prior_scale^2) weights)."""
    X, yf = check_binary_data(X, y, "relu_data")
    if int(hidden) < 1 or not prior_scale > 0:
        raise ValueError(f"relu_data: need hidden >= 1 and prior_scale > 0, got {hidden}, {prior_scale}.")
    n, d = X.shape
    return {"N": n, "D": d, "H": int(hidden), "X": X, "y": yf.astype(np.int64), "prior_scale": float(prior_scale)}
