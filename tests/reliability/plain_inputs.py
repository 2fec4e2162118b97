"""Inputs of the plain-path rows and the property tests: log-likelihood arrays of ordinary posteriors and their
DataTrees (no model needed: ``pl.loo(data)`` reads the log_likelihood group, as ``arviz_stats.loo``)."""

from __future__ import annotations

import numpy as np
import xarray as xr


def ordinary(C=4, D=250, n=8, seed=0, scale=1.0, noise=0.0):
    """``(ll, mu)``: ``ll[c, d, i] = log N(y_i | mu_cd, scale)`` (+ noise) for a normal mean ``mu`` drawn from its
    posterior under a flat prior (``N(ybar, scale^2 / n)``): k-hat well below 0.7 on every observation."""
    rng = np.random.default_rng(seed)
    y = rng.normal(scale=scale, size=n)
    mu = y.mean() + rng.normal(scale=scale / np.sqrt(n), size=(C, D))
    ll = -0.5 * ((y - mu[..., None]) / scale) ** 2 - np.log(scale) - 0.5 * np.log(2 * np.pi)
    if noise:
        ll = ll + noise * rng.normal(size=ll.shape)
    return ll, mu


def tree(ll, mu=None, dims=None, coords=None, name="y"):
    """A DataTree with ``posterior`` (``mu``, random when not given) and ``log_likelihood`` (``ll``)."""
    ll = np.asarray(ll, dtype=float)
    if mu is None:
        mu = np.random.default_rng(99).normal(size=ll.shape[:2])
    dims = tuple(dims) if dims else tuple(f"{name}_dim_{j}" for j in range(ll.ndim - 2))
    post = xr.Dataset({"mu": (("chain", "draw"), np.asarray(mu, dtype=float))},
                      coords={"chain": np.arange(ll.shape[0]), "draw": np.arange(ll.shape[1])})
    lik = xr.Dataset({name: (("chain", "draw") + dims, ll)},
                     coords={"chain": np.arange(ll.shape[0]), "draw": np.arange(ll.shape[1]), **(coords or {})})
    return xr.DataTree.from_dict({"posterior": post, "log_likelihood": lik})
