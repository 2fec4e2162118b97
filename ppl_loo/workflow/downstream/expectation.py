"""``ppl_loo.loo_expectation``: LOO expectations of pointwise quantities with the adapted weights."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy.special import logsumexp

from ppl_loo.model import as_model
from ppl_loo.workflow.loo.engine import proposal_points
from ppl_loo.workflow.approx.stored_q import pvi_log_q, stored_gaussian
from ppl_loo.jax_settings import uses_x64

__all__ = ["loo_expectation", "checked_model"]


@uses_x64
def loo_expectation(data, res, values, *, model=None):
    """LOO expectation ``E_{-i}[f_i]`` of a pointwise quantity for every observation.

    Observations that plain PSIS handled use the PSIS weights on the posterior draws; adapted ones
    use the weights of their chosen proposal on its transformed draws (Eq. 10 with ``f`` evaluated
    at ``phi``, not ``theta``), so the expectation is as reliable as the elpd. The result stores
    the weights, not the transformed draws: they are rebuilt from ``data``'s posterior draws with
    ``model``.

    Parameters
    ----------
    data : DataTree
        The data the result was computed from (its ``posterior`` group gives the draws).
    res : LooResult
        From :func:`ppl_loo.loo` with a model (also after pickling or
        :meth:`~ppl_loo.LooResult.from_datatree`).
    values : callable
        ``values(params) -> array (M, *obs_shape)``: the quantity at ``M`` parameter points, with
        ``params`` the model's constrained parameters (``model.constrain``), each of shape
        ``(M, ...)``. For example the predicted probability of each observation, for LOO ROC
        curves and AUC (paper Eq. 8).
    model : pymc.Model, StanModel or PosteriorModel
        The model the result was computed with (as passed to :func:`ppl_loo.loo`).

    Returns
    -------
    DataArray over the observation dims of the result.
    """
    model = checked_model(data, res, model, "loo_expectation")
    if not callable(values):
        raise TypeError("`values` must be a callable values(params) -> array (M, *obs_shape).")
    theta, ll = _draws(data, res, model)
    S, n = ll.shape
    f0 = np.asarray(values(model.constrain(theta)), dtype=float).reshape(S, -1)
    if f0.shape[1] != n:
        raise ValueError(f"`values` returned {f0.shape[1]} values per draw; the model has {n} observations.")
    if not np.all(np.isfinite(f0)):
        raise ValueError("`values` returned non-finite values at the posterior draws.")
    lw_psis = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(S, n).T
    out = np.sum(np.exp(lw_psis) * f0.T, axis=1)
    adapted = res.adapted_log_weights
    if adapted.sizes["adapted"]:
        stored = stored_gaussian(data)
        points = proposal_points(model, theta, res.engine_config,
                                 None if res.log_q is None else res.log_q.transpose("chain", "draw").values,
                                 None if stored is None else stored[1], pvi_log_q(data, theta))
        for j, i in enumerate(np.asarray(adapted["adapted"].values)):
            pts = points(i, ll[:, i], adapted["adapted_transform"].values[j], adapted["adapted_hbar"].values[j])
            fi = np.asarray(values(model.constrain(pts)), dtype=float).reshape(pts.shape[0], -1)[:, i]
            lw = np.asarray(adapted.values[j])
            keep = np.isfinite(lw)
            w = np.exp(lw[keep] - logsumexp(lw[keep]))
            out[i] = float(np.sum(w * fi[keep]))
    template = res.elpd_i
    return xr.DataArray(out.reshape(template.shape), dims=template.dims, coords=template.coords,
                        name="loo_expectation")


def checked_model(data, res, model, caller):
    """The model adapter of ``model`` (as ``pl.loo`` wraps it), or a ValueError that says what is missing."""
    if getattr(res, "engine_config", None) is None or getattr(res, "adapted_log_weights", None) is None:
        raise ValueError(f"`res` has no adaptive weights: {caller} needs a result of ppl_loo.loo(data, model) "
                         "(a LooResult computed with a model, or one rebuilt by LooResult.from_datatree).")
    if model is None:
        raise ValueError(f"{caller} needs model=: the model the result was computed with "
                         f"(pl.{caller}(data, res, ..., model=model)).")
    return as_model(model, var_name=res.var_name, data=data)


def _draws(data, res, model):
    """The unconstrained posterior draws ``(S, d)`` of ``data`` and the log-likelihood ``(S, n)`` there."""
    if "posterior" not in getattr(data, "children", {}):
        raise ValueError("`data` has no posterior group: pass the DataTree the result was computed from.")
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()), dtype=np.float64)
    if theta.shape[0] != res.n_samples:
        raise ValueError(f"`data` has {theta.shape[0]} posterior draws but the result was computed from "
                         f"{res.n_samples}: pass the data the result was computed from.")
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    if ll.shape[1] != res.n_data_points:
        raise ValueError(f"model= has {ll.shape[1]} observations but the result {res.n_data_points}: pass the "
                         "model the result was computed with.")
    return theta, ll
