"""``pl.gpdfit``: R ``loo``'s ``gpdfit``."""

from __future__ import annotations

import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.psis import gpdfit as gpdfit_sorted

__all__ = ["gpdfit"]


@uses_x64
def gpdfit(x, wip=True, min_grid_pts=30, sort_x=True):
    """Fit a generalized Pareto distribution to exceedances, as R ``loo``'s ``gpdfit`` (``posterior::gpdfit``).

    The empirical-Bayes estimate of Zhang and Stephens (2009), with the weakly informative prior on ``k`` of
    Vehtari et al. (2024, appendix C), ``k <- (n k + 5) / (n + 10)``; PSIS fits its tail with it
    (:func:`ppl_loo.numerics.psis.gpdfit`).

    Parameters
    ----------
    x : array_like, shape (n,)
        Exceedances over a threshold (non-negative, finite).
    wip : bool, default True
        Apply the weakly informative prior on ``k``.
    min_grid_pts : int, default 30
        The grid of the estimate has ``min_grid_pts + floor(sqrt(n))`` points.
    sort_x : bool, default True
        Sort ``x`` first (False: it is sorted already).

    Returns
    -------
    k : float
        The shape estimate; NaN where the first quartile of ``x`` is not above its minimum (R: ``NA``), ``inf``
        where the estimate is NaN (as R).
    sigma : float
        The scale estimate (NaN in those two cases).

    Raises
    ------
    ValueError
        ``x`` not one-dimensional, empty, negative, not finite, or ``min_grid_pts`` not a positive integer.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 1:
        raise ValueError(f"x has shape {arr.shape}: give the exceedances over the threshold as a 1-D array.")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"x has {int(np.sum(~np.isfinite(arr) | (arr < 0)))} negative or non-finite value(s): give "
                         "exceedances over the threshold (finite, at least 0).")
    if isinstance(min_grid_pts, bool) or not isinstance(min_grid_pts, (int, np.integer)) or min_grid_pts < 1:
        raise ValueError(f"min_grid_pts={min_grid_pts!r}: give a positive integer (R's default is 30).")
    if sort_x:
        arr = np.sort(arr)
    k, sigma = gpdfit_sorted(arr, wip=bool(wip), min_grid_pts=int(min_grid_pts))
    return float(k), float(sigma)
