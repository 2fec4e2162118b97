"""``ppl_loo.loo_expectation``: LOO expectations of pointwise quantities with the adapted weights."""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.special import logsumexp

__all__ = ["loo_expectation"]


def loo_expectation(data, res, values):
    """LOO expectation ``E_{-i}[f_i]`` of a pointwise quantity for every observation.

    Observations that plain PSIS handled use the PSIS weights on the posterior draws; adapted ones
    use the weights of their chosen proposal on its transformed draws (Eq. 10 with ``f`` evaluated
    at ``phi``, not ``theta``), so the expectation is as reliable as the elpd.

    Parameters
    ----------
    data : DataTree
        The data the result was computed from (kept for API symmetry with arviz_stats).
    res : LooResult
        From :func:`ppl_loo.loo` with a model.
    values : callable
        ``values(params) -> array (M, *obs_shape)``: the quantity at ``M`` parameter points, with
        ``params`` the model's constrained parameters (``model.constrain``), each of shape
        ``(M, ...)``. For example the predicted probability of each observation, for LOO ROC
        curves and AUC (paper Eq. 8).

    Returns
    -------
    DataArray over the observation dims of the result.
    """
    eng = getattr(res, "_engine", None)
    if eng is None:
        raise ValueError(
            "`res` carries no model: loo_expectation needs a result of ppl_loo.loo(data, model=...)."
        )
    if not callable(values):
        raise TypeError("`values` must be a callable values(params) -> array (M, *obs_shape).")
    model, theta = eng.model, eng.theta
    S, n = eng.ll.shape
    f0 = np.asarray(values(model.constrain(theta)), dtype=float).reshape(S, -1)
    if f0.shape[1] != n:
        raise ValueError(f"`values` returned {f0.shape[1]} values per draw; the model has {n} observations.")
    if not np.all(np.isfinite(f0)):
        raise ValueError("`values` returned non-finite values at the posterior draws.")
    out = np.sum(np.exp(eng.lw_psis) * f0.T, axis=1)
    for j, i in enumerate(eng.obs_idx):
        if not eng.use_adapted[i]:
            continue
        name, step = eng.labels[eng.best[j]]
        pts = np.asarray(eng.points(eng.edata, int(i), eng.ll[:, i], name, step))
        fi = np.asarray(values(model.constrain(pts)), dtype=float).reshape(pts.shape[0], -1)[:, i]
        lw = eng.lw[j]
        keep = np.isfinite(lw)
        w = np.exp(lw[keep] - logsumexp(lw[keep]))
        out[i] = float(np.sum(w * fi[keep]))
    template = res.elpd_i
    return xr.DataArray(out.reshape(template.shape), dims=template.dims, coords=template.coords,
                        name="loo_expectation")
