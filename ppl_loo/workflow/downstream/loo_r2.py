"""``ppl_loo.loo_r2``: LOO R² with the adapted weights.

It needs the LOO predictive mean ``E_{-i}[y_rep_i] = E_{-i}[E[y_rep_i | theta]]`` of every observation, computed with
the weights ``elpd_i`` was computed with (:func:`ppl_loo.loo_expectations`: the adapted proposal's where one was
used). From there the arithmetic is ``arviz_stats``' own (its ``loo_r2`` accessor: Gelman et al. 2019's Bayesian R²
with LOO residuals and a Dirichlet-weighted bootstrap), so where nothing is adapted the numbers are
``arviz_stats.loo_r2``'s on the same draws.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.random import seed_from
from ppl_loo.workflow.downstream.loo_expectations import observed_and_loo_means

__all__ = ["loo_r2"]


@uses_x64
def loo_r2(data, res, *, model=None, mean=None, y=None, n_simulations=4000, random_seed=None):
    """LOO R² (``arviz_stats.loo_r2``, Gelman et al. 2019) with the LOO predictive means of ``res``' weights.

    Parameters
    ----------
    data, res, model
        As in :func:`ppl_loo.loo_expectations`.
    mean : callable, optional
        ``mean(params) -> array (M, *obs_shape)``: ``E[y_rep_i | theta]``. Default: the model's own (a PyMC
        model's ``moments.mean`` of the observed distribution; ``predicted_probability`` of a Bernoulli model).
    y : array, optional
        The observed values (default: the model's).
    n_simulations : int
        Dirichlet-weighted bootstrap draws.
    random_seed : int or numpy.random.Generator, optional
        Seed of the bootstrap. None: a seed derived from the observed values and their LOO predictive means, so
        that a rerun on the same input reproduces.

    Returns
    -------
    DataArray
        ``loo_r2`` over ``sample`` (``n_simulations`` draws of R², clipped to [-1, 1] as ``arviz_stats``), with the
        LOO predictive means as the attribute ``ypred_loo``; summarize it with ``.mean()`` or
        ``arviz_stats.eti``.
    """
    y, pred = observed_and_loo_means(data, res, model, mean, y, "loo_r2")
    seed = seed_from(random_seed, y, pred)
    random_state = int(seed) % 2**32 if isinstance(seed, (int, np.integer)) else seed  # scipy's int seeds: 32 bits
    samples = xr.DataArray(y, dims=["obs"]).azstats.loo_r2(ypred_loo=xr.DataArray(pred, dims=["obs"]),
                                                            n_simulations=int(n_simulations),
                                                            random_state=random_state)
    return xr.DataArray(np.asarray(samples, dtype=float).reshape(-1), dims=["sample"], name="loo_r2",
                        attrs={"ypred_loo": pred})
